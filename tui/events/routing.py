"""Message handlers: engine messages in, session calls and pane updates out (main thread).

Every turn-scoped message is checked with ``session.is_current``: after a new chat or
a restart, the old turn's late events are dropped, never drawn. Engine messages still
queued while the app shuts down (its widgets already removed) are dropped too.
"""

from __future__ import annotations

import os
import time

from textual.widgets import Input

from kvtop.runner.sanitize import clean_text
from kvtop.tui.base import messages as msg
from kvtop.tui.base.guards import while_running
from kvtop.tui.base.prompt_input import expanded_draft
from kvtop.tui.base.screens import PreflightScreen


class EngineRouting:
    """Mixed into the App: which object each message goes to. What a turn changes on
    screen is ``app.turn`` (``tui/turn/turn_view.py``), the panes are ``app.dash``'s
    (``tui/dashboard.py``), a new chat and its undo ``app.chats`` (``tui/turn/chat_undo.py``)."""

    _replay_notice_at = -1e9

    # ------------------------------------------------------------ sending
    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id != "prompt":
            return
        text = clean_text(expanded_draft(event.input, event.value)).strip()  # a pasted chip's whole text
        if not text:
            return
        if text == "/undo":  # the chat the last new chat put aside (tui/turn/chat_undo.py)
            event.input.value = ""
            self.chats.bring_back()
            return
        if text == "/file" or text.startswith("/file "):
            path = text[6:].strip()
            if not path:  # Ctrl+O then Enter: "/file" is not a message for the model
                self.notify("/file needs a path: /file PATH sends that file's text", severity="warning",
                            markup=False)
                return
            event.input.value = ""
            self.read_prompt_file(path)
            return
        self.tuning.cancel()  # a message sent stops "find faster settings" (the reply runs after it)
        self.turn.send(text)

    def on_key(self, event) -> None:
        """A replay takes no input (its prompt is disabled): typing says so instead of
        doing nothing."""
        if not self.session.engine.capabilities.takes_input and (event.is_printable or event.key == "enter"):
            now = time.monotonic()
            if now - self._replay_notice_at > 3.0:
                self._replay_notice_at = now
                self.notify("this is a replay: input is off (Ctrl+Q quits)", markup=False, timeout=3)

    @while_running
    def on_prompt_file_read(self, m: msg.PromptFileRead) -> None:
        if m.error is not None:
            self.notify(m.error, severity="error", markup=False)
            return
        self.turn.send(m.text)

    # ------------------------------------------------------------ loading
    @while_running
    def on_model_inspected(self, m: msg.ModelInspected) -> None:
        self.facts, self.hw = m.facts, m.hardware
        self.machine.inspected(m.facts, m.layout, m.hardware, self.settings)
        self.model_inspected = True  # from now on a new engine is pumped at once (EngineControl.fresh)
        self.dash.about.set_hardware(m.hardware)
        # a served model is loaded already: the memory warning is for models kvtop loads
        if m.preflight is not None and m.preflight.fits is False and self.session.engine.capabilities.runs_model:
            def preflight_done(go: bool | None) -> None:
                if go:
                    self.control.pump(self.session.engine)
                else:
                    self.control.shutdown()
                    self.exit(return_code=1)

            self.push_screen(PreflightScreen(m.preflight.message), preflight_done)
        else:
            self.control.pump(self.session.engine)

    @while_running
    def on_engine_load_progress(self, m: msg.EngineLoadProgress) -> None:
        self.dash.status.set_loading(m.fraction)

    @while_running
    def on_engine_loaded(self, m: msg.EngineLoaded) -> None:
        L, dash = m.loaded, self.dash
        if self.options.ui_nice and L.pid not in (0, os.getpid()):
            # Yield the CPU to the engine: llama.cpp's threads wait on each other at every
            # barrier, so a redraw that preempts one of them stalls them all.
            try:
                os.nice(self.options.ui_nice)
                self.options.ui_nice = 0  # once, not again after a restart
            except OSError:
                pass
        dash.status.set_loaded(L, self.session.engine.capabilities, self.settings.threads_why, self.refresh_s, self.facts)
        if self.session.engine.capabilities.llama_buffers:  # a server's buffers are in its own log, not ours
            dash.memory.set_buffers(L.buffers)
        if self.turn.reply is not None and self.session.turn_running:
            self.turn.reply.set_footer("")
        self.machine.loaded(L)  # before a message sent while loading asks for its threads (the forecast service)
        self.session.on_loaded(L, lambda text: self.notify(text, severity="warning", markup=False),
                               self.estimates.next_turn_threads)  # a message sent while loading: at today's load
        self.forecast_border.request()  # loaded or restarted: a draft typed meanwhile is forecast now
        self.quality.show_kept()  # a KV quality measured before on this model (tui/turn/quality.py)

    # ------------------------------------------------------------ a turn
    @while_running
    def on_turn_message(self, m: msg.TurnMessage) -> None:
        """Every message about a turn (msg.TurnMessage): to the turn's view while it is
        the current turn; a turn a new chat cut is kept in the records, off the screen."""
        if self.session.is_current(m.turn_id):
            m.deliver(self.turn)
        elif isinstance(m, msg.TurnFinished):
            self.session.on_cut_turn_done(m.result, self.cpu_watch.turn_others_share())

    @while_running
    def on_turn_lost(self, m: msg.TurnLost) -> None:
        self.turn.lost(m.reason)

    @while_running
    def on_cache_reset(self, m: msg.CacheReset) -> None:
        if not self.session.turn_running:
            self.dash.kv.set_cells(0)

    @while_running
    def on_prompt_cache_note(self, m: msg.PromptCacheNote) -> None:
        self.turn.prompt_cache_note(m.event)

    @while_running
    def on_notice(self, m: msg.Notice) -> None:
        self.notify(m.text, severity="warning", markup=False)

    # ------------------------------------------------------------ a new chat and its undo
    def action_next_page(self) -> None:
        """F6: the next page of panes (when they take more than one)."""
        self.dash.next_page()

    def action_undo_new_chat(self) -> None:
        """Ctrl+Z or ``/undo``: the chat the last new chat put aside is back."""
        self.chats.bring_back()

    # ------------------------------------------------------------ replay
    @while_running
    def on_recorded_user(self, m: msg.RecordedUser) -> None:
        self.turn.recorded_user(m.text)

    @while_running
    def on_recorded_new_chat(self, m: msg.RecordedNewChat) -> None:
        self.chats.new_chat(notice=False)  # put aside, as live: a recorded undo brings it back
        if self.options.banner:  # a replay must keep saying what it is
            self.dash.chat.add("system", self.options.banner)

    def on_recorded_undo_new_chat(self, m: msg.RecordedUndoNewChat) -> None:
        """Replay: the recorded user brought the last chat back."""
        self.chats.bring_back()
