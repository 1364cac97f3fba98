"""The engine's life as the user sees it: cancel (and a deadline for an engine that
does not answer), restart, death reported once, the end of a stream, and the quit
(within a second, whatever the engine is doing: tui/quitting.py has the last resort)."""

from __future__ import annotations

import time

from runner.sanitize import clean_line
from runner.units import fmt_int

from . import messages as msg
from .guards import while_running
from .panes.chat import ChatLog
from .panes.status import StatusBar
from .screens import ErrorScreen

QUIT_GRACE_S = 0.4  # Ctrl+Q waits this long for a cancelled turn's end (quitting takes under 1 s)
QUIT_CLOSE_S = 0.2  # on quit, each step of stopping the engine child (ask, SIGTERM, SIGKILL)


class EngineLifecycle:
    """Mixed into the App."""

    model_inspected = False  # the GGUF header and hardware are read (routing.on_model_inspected)

    def action_cancel_turn(self) -> None:
        if len(self.screen_stack) > 1:  # Esc closes a dialog first
            self.screen.dismiss()
            return
        if self.session.cancel():
            self.notify("Cancelling…", markup=False, timeout=2)
            if not self.session.turn_running:
                self.turn.lose_reply("cancelled before the model loaded")
            deadline = self.options.cancel_deadline_s
            self.set_timer(deadline + 0.05, lambda: self._check_cancel(deadline))

    def _check_cancel(self, deadline: float) -> None:
        if self.session.cancel_overdue(deadline):
            self.query_one(StatusBar).set_problem("engine not responding")
            self.push_screen(ErrorScreen(
                "The engine is not responding",
                f"The turn did not stop {deadline:.0f} s after Esc. Restart the engine (Ctrl+R): "
                "the chat stays and the next turn prefills it again.", offer_restart=True), self._error_closed)

    def action_restart_engine(self) -> None:
        if self.session.replaying:
            self.notify("a replay has no engine to restart", markup=False)
            return
        self.fresh_engine("turn lost: the engine was restarted", "engine restarted with the same settings")

    def fresh_engine(self, lost: str, said: str, pump: bool = True) -> None:
        """A new engine for the same chat: the turn in flight is lost (``lost`` under it),
        ``said`` goes in the chat, and the next turn prefills the whole chat again.
        ``pump=False``: the inspection's end starts it (a second reader would break it)."""
        old = self.session.engine
        self.session.restart(self.make_engine())
        self.stop_engine(old)
        self.turn.lose_reply(lost)
        self.turn.over()
        n = len(self.session.messages)
        self.query_one(StatusBar).set_problem(None)
        self.query_one(ChatLog).add("system", said + (
            f"; the next turn prefills the {fmt_int(n)} messages of this chat again" if n else ""))
        if pump:
            self.pump_engine(self.session.engine)

    def follow_new_server(self, line: str) -> None:
        """The llama-server restarted (``kvtop --server``): the old server's turn is lost,
        and what showed it live (decode rate and "no token for …", KV cells, stream tail,
        prefill) goes, so none of it runs into the next turn."""
        from .panes.chat import StreamTail
        from .panes.decode import DecodePane
        from .panes.kv import KVPane
        from .panes.prefill import PrefillPane

        tail = self.query_one(StreamTail)
        if self.turn.reply is not None and tail.text:  # the reply so far (the transcript lags it)
            self.turn.reply.set_text(tail.text)
        # seen before the GGUF header and hardware are read (a busy machine): the
        # inspection's end pumps the session's engine, this new one
        self.fresh_engine("turn lost: the server restarted", line, pump=self.model_inspected)
        tail.show("")
        self.query_one(PrefillPane).clear()
        self.query_one(KVPane).clear()
        self.query_one(DecodePane).clear()

    def _error_closed(self, result: str | None) -> None:
        if result == "restart":
            self.action_restart_engine()

    @while_running
    def on_engine_failed(self, m: msg.EngineFailed) -> None:
        if self._stopping or not self.session.on_engine_gone(clean_line(m.reason, 600)):
            return  # reported once
        reason = clean_line(m.reason, 600)
        self.query_one(StatusBar).set_problem("engine died" if m.died else "model not loaded")
        self.turn.lose_reply("turn lost: " + reason)
        self.turn.over()
        self.query_one(ChatLog).add("system", reason)
        self.push_screen(ErrorScreen("The engine died" if m.died else "Could not load the model", reason,
                                     offer_restart=m.died), self._error_closed)

    def on_engine_ended(self, m: msg.EngineEnded) -> None:
        if m.reason == "end of the recording":
            self.query_one(StatusBar).set_problem("replay finished")

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
        if not self.session.turn_running or self._stopping:
            self.quit_now(0)
            return
        self.session.cancel()
        deadline = time.monotonic() + QUIT_GRACE_S

        def check() -> None:  # an engine that misses the cancel deadline is not waited for
            if (not self.session.turn_running or time.monotonic() > deadline
                    or self.session.cancel_overdue(self.options.cancel_deadline_s)):
                timer.stop()
                self.quit_now(0)

        timer = self.set_interval(0.05, check)

    def quit_now(self, rc: int) -> None:
        """Leave without waiting for anything: the turn in flight saved, the engine
        stopped (an engine that does not answer is killed), the app told to exit."""
        self.save_turn_in_flight()
        self.shutdown_engine()
        self.exit(rc)

    def save_turn_in_flight(self) -> None:
        """The reply so far of a turn the quit cut goes into the transcript (``--resume``
        keeps it), marked ``quit``. The stream tail has all of it (the chat pane lags)."""
        from .panes.chat import StreamTail

        if self.session.turn_running and self.turn.reply is not None:
            self.session.save_turn_in_flight(self.query_one(StreamTail).text or self.turn.reply.text, "quit")
            self.turn.reply = None

    def shutdown_engine(self) -> None:
        """Stop the engine within a fraction of a second, whatever state it is in (even SIGSTOPped)."""
        if self._stopping:
            return
        self._stopping = True
        try:
            self.session.engine.close(timeout=QUIT_CLOSE_S)
        except Exception:
            pass
        self.session.close()
