"""Handlers for ``kvtop --server``: a poll of the server's slots and metrics becomes the
server pane, with the many-users physics computed from the slots decoding now."""

from __future__ import annotations

from kvtop.runner.physics.here import server_physics, speculative_server_ceiling
from kvtop.tui.base import messages as msg
from kvtop.tui.base.guards import while_running


class ServerRouting:
    @while_running
    def on_server_polled(self, m: msg.ServerPolled) -> None:
        s = m.snapshot
        self.server_snapshots[m.index] = s
        if len(self.options.servers) > 1:
            self.dash.fleet.set_snapshot(m.index, s)
        if m.index != self.server_index:
            return

        if s.batch is not None:  # no slots (vLLM): the running requests share its KV pool
            from dataclasses import replace

            from kvtop.runner.physics.batch_roof import batch_physics, perf_check
            from kvtop.runner.server.batch_view import with_model_kv

            if self.here is not None:  # the pool's bytes from -m's facts where the served config is not here
                s = replace(s, batch=with_model_kv(s.batch, self.here.layout.bytes_per_token))
            ceiling, fit, avg = batch_physics(self.here, s.batch)
            self.dash.server.perf = perf_check(self.here, s.batch)
        else:
            ceiling, fit, avg = server_physics(self.here, s.slots)  # the machine model computes, the pane draws
        spec = getattr(s, "spec", None)  # the server's speculation counters (runner.server.spec_metrics)
        t = spec.totals if spec is not None else None
        self.dash.server.spec_ceiling = speculative_server_ceiling(
            self.here, ceiling, t.drafted, t.drafts, t.accepted) if t is not None else None
        # a change in the pane's lines re-plans the dashboard (PaneWidget.refresh asks for it)
        self.dash.server.set_snapshot(s, ceiling, fit, avg)
        if s.slots:
            self.dash.kv.set_server_cells(tuple(sl.n_prompt_tokens for sl in s.slots),
                                          sum(sl.n_ctx for sl in s.slots))
        if self.load_view is not None:  # kvtop load: its end is said once the pane shows the slots (tui/server/load_view.py)
            self.load_view.server_polled(s)

    @while_running
    def on_server_restarted(self, m: msg.ServerRestarted) -> None:
        """A server restarted: it is a new server. Said once, in the chat and the server
        pane; for the server the chat follows, a fresh engine (its ``Loaded`` refreshes the
        status bar's slots and n_ctx, the KV layout and the physics) and the turn the old
        server lost ends, its live decode, KV and stream state cleared."""
        import time

        line = m.restart.line()
        if m.index != self.server_index:  # another server of the fleet: its row shows its slots
            self.notify(f"{self.options.servers[m.index]}: {line}", markup=False)
            return
        self.dash.server.set_restart(line, time.strftime("%H:%M:%S"))
        self.control.follow_new_server(line)

    def action_next_server(self) -> None:
        """F4: chat with the next server of the fleet; its slots and physics fill the panes."""
        servers = self.options.servers
        if len(servers) < 2:
            self.notify("one server: give --server more than once for a fleet", markup=False)
            return
        self.control.attach_server((self.server_index + 1) % len(servers))
