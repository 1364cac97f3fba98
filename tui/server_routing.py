"""Handlers for ``kvtop --server``: a poll of the server's slots and metrics becomes the
server pane, with the many-users physics computed from the slots decoding now."""

from __future__ import annotations

from runner.physics.batching import batched_decode_ceiling, compute_tok_s, more_conversations_fit
from runner.physics.kv_bytes import kv_bytes_read_at_depth

from . import messages as msg
from .guards import while_running


class ServerRouting:
    @while_running
    def on_server_polled(self, m: msg.ServerPolled) -> None:
        s = m.snapshot
        self.server_snapshots[m.index] = s
        if len(self.options.servers) > 1:
            from .panes.fleet import FleetPane

            self.query_one(FleetPane).set_snapshot(m.index, s)
        if m.index != self.server_index:
            return
        from .panes.server import ServerPane

        ceiling, fit, avg = self.server_physics(s)
        # a change in the pane's lines re-plans the dashboard (PaneWidget.refresh asks for it)
        self.query_one(ServerPane).set_snapshot(s, ceiling, fit, avg)
        if s.slots:
            from .panes.kv import KVPane

            self.query_one(KVPane).set_server_cells(tuple(sl.n_prompt_tokens for sl in s.slots),
                                                    sum(sl.n_ctx for sl in s.slots))
        self.load_server_polled(s)  # kvtop load: its end is said once the pane shows the slots (tui/load_view.py)

    @while_running
    def on_server_restarted(self, m: msg.ServerRestarted) -> None:
        """A server restarted: it is a new server. Said once, in the chat and the server
        pane; for the server the chat follows, a fresh engine (its ``Loaded`` refreshes the
        status bar's slots and n_ctx, the KV layout and the physics) and the turn the old
        server lost ends, its live decode, KV and stream state cleared."""
        import time

        from .panes.server import ServerPane

        line = m.restart.line()
        if m.index != self.server_index:  # another server of the fleet: its row shows its slots
            self.notify(f"{self.options.servers[m.index]}: {line}", markup=False)
            return
        self.query_one(ServerPane).set_restart(line, time.strftime("%H:%M:%S"))
        self.follow_new_server(line)

    def server_physics(self, s):
        """(batched ceiling of the slots decoding now, more conversations that fit, their length)."""
        f, lay, hw = self.facts, self.layout_kv, self.hw
        if not s.slots:
            return None, None, None
        used = [sl.n_prompt_tokens for sl in s.slots if sl.n_prompt_tokens > 0]
        avg = sum(used) / len(used) if used else None
        cells_total = sum(sl.n_ctx for sl in s.slots)
        fit = more_conversations_fit(cells_total, sum(used), avg) if avg else None
        if f is None or lay is None or hw is None or not hw.bandwidth_gbs or f.weights_bytes_active is None:
            return None, fit, avg
        decoding = [sl for sl in s.slots if sl.is_processing]
        kv = [float(kv_bytes_read_at_depth(lay, sl.n_prompt_tokens)) for sl in decoding] or [
            float(kv_bytes_read_at_depth(lay, 0))]
        return batched_decode_ceiling(hw.bandwidth_gbs * 1e9, f.weights_bytes_active, kv,
                                      compute_tok_s(f, hw.tflops)), fit, avg

    def action_next_server(self) -> None:
        """F4: chat with the next server of the fleet; its slots and physics fill the panes."""
        servers = self.options.servers
        if len(servers) < 2:
            self.notify("one server: give --server more than once for a fleet", markup=False)
            return
        self.attach_server((self.server_index + 1) % len(servers))

    def attach_server(self, index: int) -> None:
        from runner.server.engine import ServerEngine

        from .panes.chat import ChatLog
        from .panes.fleet import FleetPane
        from .panes.server import ServerPane

        url = self.options.servers[index]
        old = self.session.engine
        self.session.new_chat()
        self.turn.clear()
        self.session.restart(ServerEngine(self.settings, url, self.options.api_key))
        self.stop_engine(old)
        self.server_index = index
        self.query_one(FleetPane).select(index)
        pane = self.query_one(ServerPane)
        pane.url = url
        pane.restart_note = None  # the other server's
        pane.set_snapshot(self.server_snapshots.get(index))
        self.query_one(ChatLog).add("system", f"attached to {url}: a new chat on this server")
        self.pump_engine(self.session.engine)
