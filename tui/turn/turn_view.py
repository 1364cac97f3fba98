"""The turn in flight as the screen shows it: the reply being streamed, the stream tail,
the turn's panes, from the message that sends it to the one that ends it.

Why an object of its own: this state (the reply widget, when the transcript last caught
up with the tail) and the steps that change it were spread over the App's mixins as
attributes any of them could set. Here it has one owner, which the message handlers
(``tui/events/routing.py``), the engine's restart and failure (``tui/events/lifecycle.py``) and a new
chat (``tui/turn/chat_undo.py``) call. What is known of the turn itself (its prefill
reports, its first token, a prompt-cache event) is the session's:
``runner.session.records.ActiveTurn``, which ``ChatSession.apply`` keeps up to date
with each event this object is handed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvtop.runner import events as ev
from kvtop.runner.pacing import CHAT_INTERVAL_S
from kvtop.runner.sanitize import clean_line, clean_text
from kvtop.runner.session.records import DecodeSoFar
from kvtop.tui.base.format import fmt_bytes, fmt_int, fmt_seconds
from kvtop.tui.base.textual_private import release_removed_widget_caches
from kvtop.tui.panes.chat import turn_footer

if TYPE_CHECKING:
    from kvtop.tui.app import KvtopApp


class TurnView:
    """What each step of a turn changes on screen (main thread only)."""

    # seconds between full transcript redraws while decoding (the tail streams): each one
    # re-wraps the reply and re-lays out the screen, measured 30 ms of CPU at 1,000 tokens
    CHAT_INTERVAL = CHAT_INTERVAL_S

    def __init__(self, app: KvtopApp) -> None:
        self.app = app
        self.reply = None  # the ChatMessage widget of the turn in flight
        self.last_chat_update = -1e9

    def send(self, text: str) -> None:
        """Enter (or ``--prompt``, a ``/file``): the session sends it, the chat shows it."""
        app, dash = self.app, self.app.dash
        app.quality.cancel()  # a measurement in flight stops; the turn runs after it
        threads = app.estimates.next_turn_threads() if app.session.active is None else None
        refusal = app.session.send(text, threads)
        if refusal is not None:
            app.notify(refusal, severity="warning", markup=False)
            return
        dash.prompt.value = ""
        app.forecast_border.clear()
        dash.chat.add("user", text)
        self.reply = dash.chat.add("assistant", "", streaming=True)
        if app.session.loaded is None:
            self.reply.set_footer("waiting for the model to load…")

    def recorded_user(self, text: str) -> None:
        """Replay: the recorded user's message, and the reply it waits for."""
        self.app.session.recorded_user(text)
        self.app.dash.chat.add("user", text)
        self.reply = self.app.dash.chat.add("assistant", "", streaming=True)

    def clear(self) -> None:
        """What a new chat clears on screen: the transcript, the stream tail, the turn's panes."""
        dash = self.app.dash
        self.over()
        self.reply = None
        dash.chat.remove_children()
        dash.tail.show("")
        dash.prefill.clear()
        dash.kv.clear()
        self.app.quality.chat_cleared()  # its lines are of a chat no longer on screen
        dash.decode.clear()
        dash.estimate.drop_live()
        self.app.estimates.update()  # the rows of a chat with no turn: the cleared one's are gone
        self.app.call_after_refresh(release_removed_widget_caches)  # tui/base/textual_private.py

    def lose_reply(self, footer: str) -> None:
        """The turn in flight is lost (a restart, a death): ``footer`` under its reply."""
        if self.reply is not None:
            self.reply.set_footer(footer)
            self.reply = None

    def shifted(self, shift: ev.ContextShifted) -> None:
        """The context was full: the dim line goes above the reply it concerns."""
        from kvtop.runner.policy.context_shift import shift_line

        app = self.app
        app.session.apply(shift)
        app.dash.chat.note(shift_line(shift), before=self.reply)
        app.forecast_border.request()  # the prompt a draft would join lost its oldest turns

    def began(self, started: ev.TurnStarted) -> None:
        app, dash = self.app, self.app.dash
        app.session.apply(started)
        app.collector.turn_started()
        self.last_chat_update = app.options.clock()  # the stream tail shows the reply first
        s = app.settings  # the engine's own tokens: a speculating one's bursts are its verify passes
        dash.decode.begin(self.last_chat_update, app.session.engine.capabilities.runs_model
                          and (s.spec_type != "none" or bool(s.spec_draft_model)))
        active = app.session.active
        dash.prefill.begin(started, active.shift if active is not None else None)
        dash.kv.set_cells(started.reused_tokens)
        app.estimates.forecast_turn(started)
        fc, loaded = app.estimates.turn_forecast, app.session.loaded
        # kvtop's own engine reports per micro-batch (a server's progress is its own)
        ubatch = loaded.n_ubatch if loaded is not None and app.session.engine.capabilities.runs_model else 0
        dash.prefill.expect(fc.prefill_s if fc is not None else None, ubatch)
        app.cpu_watch.turn_begin()

    def over(self) -> None:
        """A turn ended, finished or lost: what waited for it runs now."""
        app, dash = self.app, self.app.dash
        app.collector.turn_ended()
        dash.prefill.stop_ticking()  # a lost turn's prefill stops too
        dash.memory.redraw_if_stale()
        # a draft typed during the turn was measured against the chat without its reply
        # (and the calibration may have changed): measure it again once the turn is in
        app.call_later(app.forecast_border.request)

    def prefill(self, progress: ev.PrefillProgress) -> None:
        dash = self.app.dash
        self.app.session.apply(progress)
        dash.memory.redraw_if_stale()
        dash.prefill.progress(progress)
        dash.kv.set_cells(progress.done)
        self.app.estimates.measure_live("prefill", progress.tok_s or None)

    def decode(self, m) -> None:
        """A ``DecodeUpdate``: the tail, the transcript now and then, the live rates."""
        app, dash = self.app, self.app.dash
        now = app.options.clock()
        # Re-wrapping the growing reply in the transcript is the costliest redraw, so the
        # fixed-height tail streams it and the transcript catches up every CHAT_INTERVAL.
        dash.tail.show(m.text)  # cleaned by the bridge
        if self.reply is not None and now - self.last_chat_update >= self.CHAT_INTERVAL:
            self.last_chat_update = now
            self.reply.set_text(m.text)
        dash.decode.update_live(m, now)
        app.estimates.measure_live("decode", m.tok_s)
        app.session.apply(DecodeSoFar(m.turn_id, m.pos, m.first_t))
        active = app.session.active
        if m.first_t is not None and active is not None and not app.session.engine.capabilities.replaying:
            app.estimates.measure_live("ttft", active.first_token_s)
        dash.memory.redraw_if_stale()
        dash.kv.set_cells(m.pos + 1, m.tok_s)

    def refused(self, r: ev.TurnRefused) -> None:
        """Refused before prefill: the reason under the reply, nothing measured."""
        self.over()
        self.app.session.on_turn_refused(r)
        if self.reply is not None:
            self.reply.set_text("")
            self.reply.set_footer("refused: " + r.reason)
        self.app.dash.prefill.refused(r.reason)
        self.reply = None

    def finished(self, m) -> None:
        """A ``TurnFinished``: the reply whole, the turn recorded, every pane's last word."""
        app, dash, r = self.app, self.app.dash, m.result
        active = app.session.active
        cache_event = active.cache_event if active is not None else None  # the session forgets the turn below
        self.over()
        mt = r.metrics
        text = clean_text(r.text)
        dash.tail.show("")
        self.last_chat_update = -1e9
        reply, self.reply = self.reply, None
        if reply is not None:
            reply.finish(text, turn_footer(r))
        others_cpu = app.cpu_watch.turn_others_share()
        app.session.on_turn_done(r, text, lambda t: app.notify(t, severity="error", markup=False), others_cpu)
        if reply is not None:
            reply.turn_index = len(app.turns) - 1  # a click on the reply opens its waterfall
        dash.prefill.finish(mt, r.stop_reason)
        dash.decode.finish(mt, m.series, m.stalls, m.passes)
        dash.kv.set_cells(mt.kv_cells_used, mt.decode_tok_s)
        L = app.session.loaded
        if L is not None and mt.n_threads and app.session.engine.capabilities.llama_buffers:  # live or replayed
            dash.status.set_turn_threads(mt.n_threads, mt.n_threads_batch, (L.n_threads, L.n_threads_batch),
                                         app.settings.resolved().threads_why)
        app.estimates.update(mt, others_cpu)
        app.estimates.calibrate(mt, others_cpu)  # after this turn's forecast was compared, never before
        app.cpu_watch.check_ceilings(mt)
        self.prompt_cache_outcome(mt, cache_event)
        if r.stop_reason == "context_full":
            app.notify("Context full: the reply stopped; the next turn leaves the oldest turns out "
                       "(--context-shift)." if app.settings.context_shift and app.session.engine.capabilities.runs_model else
                       "Context full: Ctrl+L starts a new chat.", severity="warning", markup=False)

    def lost(self, reason: str) -> None:
        """The engine lost the turn (a server that went away): the reply so far stays in
        the chat above the reason, and nothing of it stays live: the stream tail empties
        and the decode pane stops (its "no token for …" counted into the next turn)."""
        app, tail = self.app, self.app.dash.tail
        if self.reply is not None:
            if tail.text:  # the transcript redraws every CHAT_INTERVAL: the tail has it all
                self.reply.set_text(tail.text)
            self.lose_reply("turn lost: " + clean_line(reason, 400))
        tail.show("")
        app.dash.decode.lost()
        if app.session.active is not None:
            app.session.on_turn_refused(None)
        self.over()
        app.notify(clean_line(reason, 400), severity="error", markup=False)

    def prompt_cache_note(self, e: ev.PromptCache) -> None:
        self.app.session.apply(e)  # what it saved, or the rate to record, is known at the turn's end
        self.app.dash.prefill.set_cache_note(
            f"prompt cache {e.action}: {fmt_int(e.tokens)} tokens, {fmt_bytes(e.bytes)} in {fmt_seconds(e.seconds)}")

    def prompt_cache_outcome(self, mt, e: ev.PromptCache | None) -> None:
        """At a turn's end: after a ``--prompt-cache`` restore the prefill pane says what it
        saved, at a rate measured over many tokens and named (the turn's own prefill is the
        one token recomputed for logits); the turn that saved the cache records its prefill
        rate beside the file for the next run (``runner.records.prompt_cache_rate``)."""
        from kvtop.runner.records.prompt_cache_rate import saved_note, write_rate

        app = self.app
        if e is None:
            return
        if e.action == "restored":
            pane = app.dash.prefill
            note = saved_note(min(e.tokens, mt.reused_tokens), e.path, e.tokens, app.session.turns)
            pane.set_cache_note(f"{pane.cache_note}; {note}")
        elif e.action == "saved" and e.tokens == mt.prompt_tokens and mt.prefill_tok_s and not app.session.engine.capabilities.replaying:
            try:
                write_rate(e.path, e.tokens, mt.prefill_tok_s)
            except OSError as exc:
                app.notify(f"prompt cache rate not recorded: {clean_line(str(exc))}", severity="warning",
                           markup=False)
