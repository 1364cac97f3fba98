"""Message handlers: engine messages in, session calls and pane updates out (main thread).

Every turn-scoped message is checked with ``session.is_current``: after a new chat or
a restart, the old turn's late events are dropped, never drawn. Engine messages still
queued while the app shuts down (its widgets already removed) are dropped too.
"""

from __future__ import annotations

import os
import time

from textual.widgets import Input

from runner.pacing import CHAT_INTERVAL_S
from runner.physics.here import Here
from runner.sanitize import clean_line, clean_text

from . import messages as msg
from .format import fmt_bytes, fmt_int, fmt_seconds
from .guards import while_running
from .panes.about import AboutBar
from .panes.chat import ChatLog, StreamTail, turn_footer
from .panes.decode import DecodePane
from .panes.estimate import EstimatePane
from .panes.kv import KVPane
from .panes.memory import MemoryPane
from .panes.prefill import PrefillPane
from .panes.status import StatusBar
from .prompt_input import expanded_draft
from .screens import PreflightScreen
from .textual_private import release_removed_widget_caches


class EngineRouting:
    """Mixed into the App: what each engine message changes on screen."""

    # seconds between full transcript redraws while decoding (the tail streams): each one
    # re-wraps the reply and re-lays out the screen, measured 30 ms of CPU at 1,000 tokens
    CHAT_INTERVAL = CHAT_INTERVAL_S
    _last_chat_update = -1e9
    cache_event = None  # the last --prompt-cache restore or save, until its turn ends

    # ------------------------------------------------------------ sending
    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id != "prompt":
            return
        text = clean_text(expanded_draft(event.input, event.value)).strip()  # a pasted chip's whole text
        if not text:
            return
        if text == "/undo":  # the chat the last new chat put aside (tui/chat_undo.py)
            event.input.value = ""
            self.action_undo_new_chat()
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
        self.send_message(text)

    _replay_notice_at = -1e9

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
        self.send_message(m.text)

    def send_message(self, text: str) -> None:
        refusal = self.session.send(text)
        if refusal is not None:
            self.notify(refusal, severity="warning", markup=False)
            return
        self.query_one("#prompt", Input).value = ""
        self.forecast_border.clear()
        chat = self.query_one(ChatLog)
        chat.add("user", text)
        self.current_reply = chat.add("assistant", "", streaming=True)
        if self.session.loaded is None:
            self.current_reply.set_footer("waiting for the model to load…")

    def clear_chat(self) -> None:
        """What a new chat clears on screen: the transcript, the stream tail, the turn's panes."""
        self._turn_over()
        self.current_reply = None
        self.query_one(ChatLog).remove_children()
        self.query_one(StreamTail).show("")
        self.query_one(PrefillPane).clear()
        self.query_one(KVPane).clear()
        self.query_one(DecodePane).clear()
        self.query_one(EstimatePane).drop_live()
        self.estimates.update()  # the rows of a chat with no turn: the cleared one's are gone
        self.call_after_refresh(release_removed_widget_caches)  # tui/textual_private.py

    # ------------------------------------------------------------ loading
    @while_running
    def on_model_inspected(self, m: msg.ModelInspected) -> None:
        self.facts, self.hw = m.facts, m.hardware
        self.here = Here.known(m.facts, m.layout, m.hardware, self.settings)
        self.model_inspected = True  # from now on a new engine is pumped at once (EngineControl.restart)
        self.query_one(AboutBar).set_hardware(m.hardware)
        if self.here is not None:
            self.query_one(KVPane).set_layout(self.here.layout, self.here.layout.n_ctx, None)
            self.query_one(DecodePane).set_here(self.here)
        self.estimates.update()
        # a served model is loaded already: the memory warning is for models kvtop loads
        if m.preflight is not None and m.preflight.fits is False and self.session.engine.capabilities.runs_model:
            self.push_screen(PreflightScreen(m.preflight.message), self._preflight_done)
        else:
            self.control.pump(self.session.engine)

    def _preflight_done(self, go: bool | None) -> None:
        if go:
            self.control.pump(self.session.engine)
        else:
            self.control.shutdown()
            self.exit(return_code=1)

    @while_running
    def on_engine_load_progress(self, m: msg.EngineLoadProgress) -> None:
        self.query_one(StatusBar).set_loading(m.fraction)

    @while_running
    def on_engine_loaded(self, m: msg.EngineLoaded) -> None:
        L = m.loaded
        if self.options.ui_nice and L.pid not in (0, os.getpid()):
            # Yield the CPU to the engine: llama.cpp's threads wait on each other at every
            # barrier, so a redraw that preempts one of them stalls them all.
            try:
                os.nice(self.options.ui_nice)
                self.options.ui_nice = 0  # once, not again after a restart
            except OSError:
                pass
        self.query_one(StatusBar).set_loaded(L, self.settings.threads_why, self.refresh_s, self.facts)
        if self.session.engine.capabilities.llama_buffers:  # a server's buffers are in its own log, not ours
            self.query_one(MemoryPane).set_buffers(L.buffers)
        if self.here is not None and self.session.engine.capabilities.llama_buffers:
            self.here = self.here.resized(L.n_ctx, L.n_ubatch)
            self.query_one(KVPane).set_layout(self.here.layout, L.n_ctx, L.buffers.kv_mib * 2**20)
            self.query_one(DecodePane).set_here(self.here)  # at the loaded n_ctx
        elif self.here is not None:
            # a server: this chat's slot holds L.n_ctx tokens; every slot's KV is allocated
            slots = max(L.total_slots or 1, 1)
            self.here = self.here.resized(L.n_ctx * slots)
            self.query_one(KVPane).set_layout(self.here.layout, L.n_ctx, None, slots)
            self.query_one(DecodePane).set_here(self.here)
        if self.current_reply is not None and self.session.turn_running:
            self.current_reply.set_footer("")
        self.session.on_loaded(L, self._warn)
        self.estimates.update()
        self.estimates.setup_calibration()

    def _warn(self, text: str) -> None:
        self.notify(text, severity="warning", markup=False)

    # ------------------------------------------------------------ a turn
    @while_running
    def on_context_shift_note(self, m: msg.ContextShiftNote) -> None:
        """The context was full: the dim line goes above the reply it concerns."""
        from runner.engine.context_shift import shift_line

        if not self.session.is_current(m.shift.turn_id):
            return
        self.session.on_context_shifted(m.shift)
        self.query_one(ChatLog).note(shift_line(m.shift), before=self.current_reply)
        self.forecast_border.request()  # the prompt a draft would join lost its oldest turns

    @while_running
    def on_turn_began(self, m: msg.TurnBegan) -> None:
        if not self.session.is_current(m.started.turn_id):
            return
        self.session.on_turn_started(m.started)
        self.collector.turn_started()
        self._last_chat_update = self.options.clock()  # the stream tail shows the reply first
        self.query_one(DecodePane).begin(self._last_chat_update)
        active = self.session.active
        self.query_one(PrefillPane).begin(m.started, active.shift if active is not None else None)
        self.query_one(KVPane).set_cells(m.started.reused_tokens)
        self.estimates.forecast_turn(m.started)
        self.cpu_watch.turn_begin()

    live_first_token: tuple[float | None, int] = (None, 0)  # the running turn's TTFT and tokens so far

    def _turn_over(self) -> None:
        """A turn ended, finished or lost: what waited for it runs now."""
        self.live_first_token = (None, 0)
        self.collector.turn_ended()
        self.query_one(PrefillPane).stop_ticking()  # a lost turn's prefill stops too
        self.query_one(MemoryPane).redraw_if_stale()
        # a draft typed during the turn was measured against the chat without its reply
        # (and the calibration may have changed): measure it again once the turn is in
        self.call_later(self.forecast_border.request)

    @while_running
    def on_prefill_update(self, m: msg.PrefillUpdate) -> None:
        if not self.session.is_current(m.progress.turn_id):
            return
        self.query_one(MemoryPane).redraw_if_stale()
        self.query_one(PrefillPane).progress(m.progress)
        self.query_one(KVPane).set_cells(m.progress.done)
        self.estimates.measure_live("prefill", m.progress.tok_s or None)

    @while_running
    def on_decode_update(self, m: msg.DecodeUpdate) -> None:
        if not self.session.is_current(m.turn_id):
            return
        now = self.options.clock()
        # Re-wrapping the growing reply in the transcript is the costliest redraw, so the
        # fixed-height tail streams it and the transcript catches up every CHAT_INTERVAL.
        self.query_one(StreamTail).show(m.text)  # cleaned by the bridge
        if self.current_reply is not None and now - self._last_chat_update >= self.CHAT_INTERVAL:
            self._last_chat_update = now
            self.current_reply.set_text(m.text)
        self.query_one(DecodePane).update_live(m, now)
        self.estimates.measure_live("decode", m.tok_s)
        active = self.session.active
        if m.first_t is not None and active is not None and not self.session.engine.capabilities.replaying:
            ttft = m.first_t - active.t_submit  # submit -> first token, one clock for every process
            ttft = ttft if 0 <= ttft < 86400 else None
            self.estimates.measure_live("ttft", ttft)
            started = active.started.prompt_tokens if active.started else m.pos
            self.live_first_token = (ttft, max(m.pos - started + 1, 1))
        self.query_one(MemoryPane).redraw_if_stale()
        self.query_one(KVPane).set_cells(m.pos + 1, m.tok_s)

    @while_running
    def on_turn_finished(self, m: msg.TurnFinished) -> None:
        r = m.result
        if not self.session.is_current(r.turn_id):
            if hasattr(r, "metrics"):  # a turn a new chat cut: kept in the records, off the screen
                self.session.on_cut_turn_done(r, self.cpu_watch.turn_others_share())
            return
        self._turn_over()
        if not hasattr(r, "metrics"):  # refused before prefill
            self.session.on_turn_refused(r)
            if self.current_reply is not None:
                self.current_reply.set_text("")
                self.current_reply.set_footer("refused: " + r.reason)
            self.query_one(PrefillPane).refused(r.reason)
            self.current_reply = None
            return
        mt = r.metrics
        text = clean_text(r.text)
        self.query_one(StreamTail).show("")
        self._last_chat_update = -1e9
        reply, self.current_reply = self.current_reply, None
        if reply is not None:
            reply.finish(text, turn_footer(r))
        others_cpu = self.cpu_watch.turn_others_share()
        self.session.on_turn_done(r, text, lambda t: self.notify(t, severity="error", markup=False), others_cpu)
        if reply is not None:
            reply.turn_index = len(self.turns) - 1  # a click on the reply opens its waterfall
        self.query_one(PrefillPane).finish(mt, r.stop_reason)
        self.query_one(DecodePane).finish(mt, m.series, m.stalls)
        self.query_one(KVPane).set_cells(mt.kv_cells_used, mt.decode_tok_s)
        self.estimates.update(mt, others_cpu)
        self.estimates.calibrate(mt, others_cpu)  # after this turn's forecast was compared, never before
        self.cpu_watch.check_ceilings(mt)
        prompt_cache_outcome(self, mt)
        if r.stop_reason == "context_full":
            self.notify("Context full: the reply stopped; the next turn leaves the oldest turns out "
                        "(--context-shift)." if self.settings.context_shift and self.session.engine.capabilities.runs_model else
                        "Context full: Ctrl+L starts a new chat.", severity="warning", markup=False)

    @while_running
    def on_turn_lost(self, m: msg.TurnLost) -> None:
        """The engine lost the turn (a server that went away): the reply so far stays in
        the chat above the reason, and nothing of it stays live: the stream tail empties
        and the decode pane stops (its "no token for …" counted into the next turn)."""
        tail = self.query_one(StreamTail)
        if self.current_reply is not None:
            if tail.text:  # the transcript redraws every CHAT_INTERVAL: the tail has it all
                self.current_reply.set_text(tail.text)
            self.current_reply.set_footer("turn lost: " + clean_line(m.reason, 400))
            self.current_reply = None
        tail.show("")
        self.query_one(DecodePane).lost()
        if self.session.active is not None:
            self.session.on_turn_refused(None)
        self._turn_over()
        self.notify(clean_line(m.reason, 400), severity="error", markup=False)

    @while_running
    def on_cache_reset(self, m: msg.CacheReset) -> None:
        if not self.session.turn_running:
            self.query_one(KVPane).set_cells(0)

    @while_running
    def on_prompt_cache_note(self, m: msg.PromptCacheNote) -> None:
        e = m.event
        self.session.on_prompt_cache(e)
        self.cache_event = e  # what it saved, or the rate to record, is known at the turn's end
        self.query_one(PrefillPane).set_cache_note(
            f"prompt cache {e.action}: {fmt_int(e.tokens)} tokens, {fmt_bytes(e.bytes)} in {fmt_seconds(e.seconds)}")

    @while_running
    def on_notice(self, m: msg.Notice) -> None:
        self.notify(m.text, severity="warning", markup=False)

    # ------------------------------------------------------------ replay
    @while_running
    def on_recorded_user(self, m: msg.RecordedUser) -> None:
        self.session.recorded_user(m.text)
        chat = self.query_one(ChatLog)
        chat.add("user", m.text)
        self.current_reply = chat.add("assistant", "", streaming=True)

    @while_running
    def on_recorded_new_chat(self, m: msg.RecordedNewChat) -> None:
        self.start_new_chat(notice=False)  # put aside, as live: a recorded undo brings it back
        if self.options.banner:  # a replay must keep saying what it is
            self.query_one(ChatLog).add("system", self.options.banner)


def prompt_cache_outcome(app, mt) -> None:
    """At a turn's end: after a ``--prompt-cache`` restore the prefill pane says what it
    saved, at a rate measured over many tokens and named (the turn's own prefill is the
    one token recomputed for logits); the turn that saved the cache records its prefill
    rate beside the file for the next run (``runner.records.prompt_cache_rate``)."""
    from runner.records.prompt_cache_rate import saved_note, write_rate

    e, app.cache_event = app.cache_event, None
    if e is None:
        return
    if e.action == "restored":
        pane = app.query_one(PrefillPane)
        note = saved_note(min(e.tokens, mt.reused_tokens), e.path, e.tokens, app.session.turns)
        pane.set_cache_note(f"{pane.cache_note}; {note}")
    elif e.action == "saved" and e.tokens == mt.prompt_tokens and mt.prefill_tok_s and not app.session.engine.capabilities.replaying:
        try:
            write_rate(e.path, e.tokens, mt.prefill_tok_s)
        except OSError as exc:
            app.notify(f"prompt cache rate not recorded: {clean_line(str(exc))}", severity="warning", markup=False)
