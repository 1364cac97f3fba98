"""The engine's life as the user sees it: cancel (and a deadline for an engine that
does not answer), restart, death reported once, the end of a stream, and the quit
(within a second, whatever the engine is doing: tui/base/quitting.py has the last resort).

The App keeps only what keys and messages reach (``EngineLifecycle``: the actions and
the handlers); what happens to the engine is ``EngineControl``'s, one object the App
holds as ``app.control``: which engine comes next (the ``EngineSource``), its one
reader, a restart, the server the chat follows, and stopping it on quit."""

from __future__ import annotations

import time
from functools import partial
from typing import TYPE_CHECKING

from kvtop.runner.pacing import prefill_interval
from kvtop.runner.process.contract import EngineClient
from kvtop.runner.sanitize import clean_line
from kvtop.runner.session.source import EngineSource
from kvtop.runner.units import fmt_int
from kvtop.tui.base import messages as msg
from kvtop.tui.base.guards import while_running
from kvtop.tui.base.screens import ErrorScreen
from kvtop.tui.events.bridge import TurnBridge

if TYPE_CHECKING:
    from kvtop.tui.app import KvtopApp

QUIT_GRACE_S = 0.4  # Ctrl+Q waits this long for a cancelled turn's end (quitting takes under 1 s)
QUIT_CLOSE_S = 0.2  # on quit, each step of stopping the engine child (ask, SIGTERM, SIGKILL)


class EngineLifecycle:
    """Mixed into the App: the keys and messages of the engine's life; the work is
    ``app.control``'s (``EngineControl``)."""

    model_inspected = False  # the GGUF header and hardware are read (routing.on_model_inspected)

    def action_cancel_turn(self) -> None:
        if len(self.screen_stack) > 1:  # Esc closes a dialog first
            self.screen.dismiss()
            return
        if self.quality.cancel():  # the KV quality measurement (tui/turn/quality.py)
            return
        if self.tuning.cancel():  # "find faster settings" in the engine: the chat stays as it is
            return
        if self.session.cancel():
            self.notify("Cancelling…", markup=False, timeout=2)
            if not self.session.turn_running:
                self.turn.lose_reply("cancelled before the model loaded")
            deadline = self.options.cancel_deadline_s
            self.set_timer(deadline + 0.05, lambda: self.control.check_cancel(deadline))

    def action_restart_engine(self) -> None:
        if not self.session.engine.capabilities.can_restart:
            self.notify("a replay has no engine to restart", markup=False)
            return
        self.control.fresh("turn lost: the engine was restarted", "engine restarted with the same settings")

    @while_running
    def on_engine_failed(self, m: msg.EngineFailed) -> None:
        if self.control.stopping or not self.session.on_engine_gone(clean_line(m.reason, 600)):
            return  # reported once
        reason = clean_line(m.reason, 600)
        self.dash.status.set_problem("engine died" if m.died else "model not loaded")
        self.turn.lose_reply("turn lost: " + reason)
        self.turn.over()
        self.dash.chat.add("system", reason)
        self.push_screen(ErrorScreen("The engine died" if m.died else "Could not load the model", reason,
                                     offer_restart=m.died), self.control.error_closed)

    def on_engine_ended(self, m: msg.EngineEnded) -> None:
        if m.reason == "end of the recording":
            self.dash.status.set_problem("replay finished")

    async def action_quit(self) -> None:
        """Quit; a turn in flight is cancelled first and its end waited for (up to
        QUIT_GRACE_S), so the transcript, the summary and --resume keep it: quitting a
        second after Esc lost the cancelled turn (its end had not reached the session).
        A turn that does not end in time is saved as it stands (``save_turn_in_flight``)."""
        if self._quitting:
            return
        self._quitting = True
        if self.quit_begun is not None:
            self.quit_begun(0)
        if not self.session.turn_running or self.control.stopping:
            self.control.quit_now(0)
            return
        self.session.cancel()
        deadline = time.monotonic() + QUIT_GRACE_S

        def check() -> None:  # an engine that misses the cancel deadline is not waited for
            if (not self.session.turn_running or time.monotonic() > deadline
                    or self.session.cancel_overdue(self.options.cancel_deadline_s)):
                timer.stop()
                self.control.quit_now(0)

        timer = self.set_interval(0.05, check)


class EngineControl:
    """The engine's life for one App (``app.control``): the ``EngineSource`` the next
    engine comes from, the worker thread that is the engine's one reader, a fresh engine
    for the same chat (Ctrl+R, a server that restarted, F4's next server), and stopping
    it, whatever state it is in, when the app quits. It touches the session and the
    panes the App shows; the App's actions and handlers decide when."""

    def __init__(self, app: KvtopApp, source: EngineSource) -> None:
        self.app = app
        self.source = source
        self.stopping = False  # shutdown began: a death after it is not reported

    def pump(self, engine: EngineClient) -> None:
        """Start ``engine`` and be its **one reader** for its life, on a worker thread:
        every event goes to the trace, then through the bridge as messages."""
        self.app.run_worker(partial(self._pump, engine), name="pump_engine", group="engine",
                            exclusive=True, thread=True, exit_on_error=False)

    def _pump(self, engine: EngineClient) -> None:
        app = self.app
        bridge = TurnBridge(app.post_message, interval=app.refresh_s, clock=app.options.clock,
                            prefill_interval=prefill_interval(app.refresh_s))
        record = app.session.record

        def sink(e) -> None:
            record(e)
            bridge(e)

        try:
            engine.start()
            engine.pump(sink)
        except Exception as exc:
            app.post_message(msg.EngineFailed(clean_line(f"{type(exc).__name__}: {exc}"), died=True))

    def stop(self, engine: EngineClient) -> None:
        """Close an engine that may not answer (a restart), off the UI thread."""
        def close() -> None:
            try:
                engine.close(timeout=1.0)
            except Exception:
                pass

        self.app.run_worker(close, name="stop_engine", group="stop", thread=True, exit_on_error=False)

    def fresh(self, lost: str, said: str, pump: bool = True) -> None:
        """A new engine for the same chat: the turn in flight is lost (``lost`` under it),
        ``said`` goes in the chat, and the next turn prefills the whole chat again.
        ``pump=False``: the inspection's end starts it (a second reader would break it)."""
        app = self.app
        tail = app.dash.tail
        if app.turn.reply is not None and tail.text:  # the reply so far (the transcript lags it)
            app.turn.reply.set_text(tail.text)
        old = app.session.engine
        app.session.restart(self.source.engine(app.settings, app.server_index))  # on the server the chat follows
        self.stop(old)
        app.turn.lose_reply(lost)
        app.turn.over()
        # the old engine's cache and live figures go with it: the new one's KV is empty, and
        # no decode rate, "no token for …", prefill or stream tail runs into the next turn
        tail.show("")
        app.dash.prefill.clear()
        app.dash.kv.clear()
        app.dash.decode.clear()
        n = len(app.session.messages)
        app.dash.status.set_problem(None)
        app.dash.chat.add("system", said + (
            f"; the next turn prefills the {fmt_int(n)} messages of this chat again" if n else ""))
        if pump:
            self.pump(app.session.engine)

    def follow_new_server(self, line: str) -> None:
        """The llama-server restarted (``kvtop --server``): the old server's turn is lost,
        and what showed it live goes (``fresh``), so none of it runs into the next turn."""
        # seen before the GGUF header and hardware are read (a busy machine): the
        # inspection's end pumps the session's engine, this new one
        self.fresh("turn lost: the server restarted", line, pump=self.app.model_inspected)

    def attach_server(self, index: int) -> None:
        """F4: a new chat on server ``index`` of the fleet; its slots and physics fill the panes."""

        app = self.app
        url = app.options.servers[index]
        old = app.session.engine
        app.session.new_chat()
        app.turn.clear()
        app.session.restart(self.source.engine(app.settings, index))
        self.stop(old)
        app.server_index = index
        app.dash.fleet.select(index)
        pane = app.dash.server
        pane.url = url
        pane.restart_note = None  # the other server's
        pane.set_snapshot(app.server_snapshots.get(index))
        app.dash.chat.add("system", f"attached to {url}: a new chat on this server")
        self.pump(app.session.engine)

    def check_cancel(self, deadline: float) -> None:
        """``deadline`` seconds after Esc: an engine whose turn has not stopped is said
        not to respond, with Restart offered."""
        app = self.app
        if app.session.cancel_overdue(deadline):
            app.dash.status.set_problem("engine not responding")
            app.push_screen(ErrorScreen(
                "The engine is not responding",
                f"The turn did not stop {deadline:.0f} s after Esc. Restart the engine (Ctrl+R): "
                "the chat stays and the next turn prefills it again.", offer_restart=True), self.error_closed)

    def error_closed(self, result: str | None) -> None:
        if result == "restart":
            self.app.action_restart_engine()

    def quit_now(self, rc: int) -> None:
        """Leave without waiting for anything: the turn in flight saved, the engine
        stopped (an engine that does not answer is killed), the app told to exit."""
        self.save_turn_in_flight()
        self.shutdown()
        self.app.exit(rc)

    def save_turn_in_flight(self) -> None:
        """The reply so far of a turn the quit cut goes into the transcript (``--resume``
        keeps it), marked ``quit``. The stream tail has all of it (the chat pane lags)."""

        app = self.app
        if app.session.turn_running and app.turn.reply is not None:
            app.session.save_turn_in_flight(app.dash.tail.text or app.turn.reply.text, "quit")
            app.turn.reply = None

    def shutdown(self) -> None:
        """Stop the engine within a fraction of a second, whatever state it is in (even SIGSTOPped)."""
        if self.stopping:
            return
        self.stopping = True
        try:
            self.app.session.engine.close(timeout=QUIT_CLOSE_S)
        except Exception:
            pass
        self.app.session.close()
