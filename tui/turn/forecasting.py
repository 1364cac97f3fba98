"""Forecasts on screen: before Enter (the prompt's border) and when a turn starts (the
Estimate pane's forecast column), the Estimate pane's rows, and the calibration each
finished turn adds.

Two objects the App holds, each with one job: ``Estimates`` (``app.estimates``) feeds
the Estimate pane: the machine model's rows (runner.physics.here ``Here``), the
calibration and its forecast at today's load, a turn's live figures; ``ForecastBorder``
(``app.forecast_border``) writes the prompt's borders before Enter. The draft is
measured by the engine (``MeasurePrompt``: its own template and tokenizer, matched
against its KV cache), never on the UI thread; typing is debounced so a burst of keys
asks once. The forecast itself is arithmetic on the calibration (runner.calibration),
cheap enough for the main thread. ``Forecasting`` is only the App's message handlers.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from textual.css.query import NoMatches
from textual.widgets import Input

from kvtop.runner.calibration.forecast import Forecast
from kvtop.runner.calibration.load import slowed, ttft_texts
from kvtop.runner.pacing import FORECAST_DEBOUNCE_S
from kvtop.runner.process.commands import ChatMessage, MeasurePrompt
from kvtop.runner.sanitize import clean_line, clean_text
from kvtop.tui.base import messages as msg
from kvtop.tui.base.format import fmt_int, fmt_seconds
from kvtop.tui.base.guards import while_running
from kvtop.tui.base.prompt_input import expanded_draft

if TYPE_CHECKING:
    from kvtop.tui.app import KvtopApp

REPLY_TOKENS = 256  # the reply length a forecast before Enter assumes (when -n does not say)


def forecast_line(fc: Forecast, n_ctx: int, width: int) -> str:
    """What the prompt's lower border says, as much as ``width`` allows (what the
    forecast rests on goes on the upper border: ``forecast_basis_line``)."""
    from kvtop.runner.policy.context_shift import prompt_fits

    n, new = fmt_int(fc.prompt_tokens), None if fc.cached_tokens is None else fmt_int(fc.new_tokens)
    long_head = f"{n} tokens" + ("" if new is None else f", {new} new after the cached prefix")
    head = f"{n} tok" + ("" if new is None else f", {new} new")
    if not prompt_fits(fc.prompt_tokens, n_ctx):  # the engine's own refusal, nothing stricter
        text = f"{long_head}: does not fit: the context holds {fmt_int(n_ctx)}"
        return text if len(text) <= width else f"{head}: does not fit in {fmt_int(n_ctx)}"
    reply = f"reply of {fmt_int(fc.reply_tokens)} ≈ {fmt_seconds(fc.reply_s)}"
    ttfts = ttft_texts(fc)
    if len(ttfts) > 1:  # today's load slows it: what it costs is kept before the token counts
        busy, short, ttft = ttfts
        texts = [f"{long_head} → {busy}, {reply}; fits", f"{head} → {busy}, {reply}; fits",
                 f"{head} → {busy}; fits", f"{n} tok → {busy}; fits", f"{n} tok → {short}; fits",
                 f"{short}; fits", f"{ttft}; fits", ttft]
    else:
        ttft = ttfts[0]
        # "fits" is kept as long as anything is: the wide layout's input (~57 columns at 160)
        # dropped it, and a user then could not tell whether the draft would be refused
        texts = [f"{long_head} → {ttft}, {reply}; fits", f"{head} → {ttft}, {reply}; fits",
                 f"{head} → {ttft}, reply ≈ {fmt_seconds(fc.reply_s)}; fits", f"{head} → {ttft}; fits",
                 f"{n} tok → {ttft}; fits", f"{ttft}; fits", ttft]
    return next((text for text in texts if len(text) <= width), "")


def forecast_basis_line(fc: Forecast, width: int) -> str:
    """The upper border: what the forecast rests on."""
    text = f"forecast: {fc.label()}"
    if slowed(fc) and fc.others_cpu is not None:  # the load is said before what the forecast rests on
        share = f"others use {fc.others_cpu:.0%} of the CPU"
        texts = (f"{text}; {share}", f"forecast: {fc.basis}; {share}", share)
        if fc.free_cores is not None:  # threads packed onto a shared core: the advice outranks the rest
            packed = f"more threads than free cores: try -t {fc.free_cores}"
            texts = (f"{text}; {share}; {packed}", f"{share}; {packed}", f"{share}; try -t {fc.free_cores}",
                     packed) + texts
        if fc.threads is not None:  # kvtop runs the turn on the free cores: the forecast is on those threads
            t = fc.threads[0]
            on = f"runs on {t} thread{'s' if t != 1 else ''}"
            texts = (f"{text}; {share}; {on}, the free cores", f"{share}; {on}, the free cores", f"{share}; {on}",
                     on) + texts
        busy = next((t for t in texts if len(t) <= width), None)
        if busy:
            return busy
    return text if len(text) <= width else fc.basis if len(fc.basis) <= width else ""


class Estimates:
    """The Estimate pane's content and the forecast's calibration (see the module's docstring)."""

    def __init__(self, app: KvtopApp) -> None:
        self.app = app
        self.calibration = None
        self.basis = None  # the machine's roofline as the forecast's shape
        self.turn_forecast: Forecast | None = None
        self.sent_load = None  # the load the turn in flight's threads were chosen at (next_turn_threads)
        self._calibration_warned = False

    def update(self, mt=None, others_cpu: float | None = None) -> None:
        """The rows the machine model computes, with what was measured: at load, after
        each turn (``mt``, and the share of the CPU others took during it)."""
        app = self.app
        if app.here is None:
            return
        L = app.session.loaded
        buffers = L.buffers if L is not None and app.session.engine.capabilities.llama_buffers else None  # a server's are in its log
        rows = app.here.estimate_rows(buffers=buffers, peak_rss=app.dash.memory.peak_engine_rss,
                                      turn=mt, turn_ran=bool(app.session.turns), others_cpu=others_cpu)
        app.dash.estimate.set_rows(rows)

    # ------------------------------------------------------------ calibration
    def setup_calibration(self) -> None:
        """Once the facts, hardware and settings are known (and again after a restart)."""
        from kvtop.runner.calibration.basis import roofline_basis
        from kvtop.runner.calibration.calibration import calibration_for

        app, here = self.app, self.app.here
        if here is None or app.session.engine.capabilities.replaying:
            return
        s = app.settings.resolved()
        L = app.session.loaded
        self.calibration = calibration_for(s, app.paths.cache_dir, L.server if L is not None else None,
                                           tuple(g.name for g in here.hw.gpus))
        self.basis = roofline_basis(here)
        app.forecast_border.request()  # loaded, restarted or re-probed: a draft's forecast was made without it

    def forecast(self, prompt_tokens: int, cached: int | None, reply_tokens: int, load=None) -> Forecast | None:
        """The calibration's (a quiet machine's) forecast, priced at today's load (``load``:
        the one the turn's threads were chosen at; None: the load now)."""
        from kvtop.runner.calibration.load import at_load

        if self.calibration is None or self.basis is None:
            return None
        fc = self.calibration.forecaster(self.basis).forecast(prompt_tokens, cached or 0, reply_tokens)
        engine = self.engine_on_this_cpu()
        if engine is not None:
            fc = at_load(fc, load if load is not None else self.app.cpu_watch.load_now(), engine)
        if cached is None:  # not known (a server's slot): say so rather than claim 0 cached
            from dataclasses import replace

            fc = replace(fc, cached_tokens=None)
        return fc

    def engine_on_this_cpu(self):
        """The engine's threads and the CPU's share of its work, when it runs on this
        machine's CPU (a remote server's load is not this machine's): None otherwise."""
        from kvtop.runner.calibration.load import LoadedEngine
        from kvtop.runner.physics.here import cpu_share
        from kvtop.runner.server.urls import is_loopback

        app = self.app
        L = app.session.loaded
        if L is None or (L.server and not is_loopback(L.server)):
            return None
        threads = L.n_threads or app.settings.n_threads or 1
        return LoadedEngine(threads, L.n_threads_batch or threads, cpu_share(app.facts, app.hw, L.n_gpu_layers),
                            fits=not L.server and app.settings.threads_follow_load)

    def engine_cpu(self) -> tuple[int, int, bool] | None:
        """(prefill threads, cores, model on the CPU) of a llama.cpp engine on this
        machine, for the waterfall's verdict (None through a server: its threads are its own)."""
        import os

        app = self.app
        L, here = app.session.loaded, app.here
        if L is None or here is None or not app.session.engine.capabilities.llama_buffers:
            return None
        cores = here.hw.cpu.threads if here.hw.cpu is not None else (os.cpu_count() or 1)
        return L.n_threads_batch or L.n_threads, cores, not (here.hw.gpus and L.n_gpu_layers)

    def next_turn_threads(self) -> tuple[int, int] | None:
        """The threads the turn about to be sent runs on, when fewer than the engine's
        (the cores other processes leave free, when kvtop chose the threads): the same
        decision, at the same load, as the forecast the turn is shown (``forecast_turn``)."""
        from kvtop.runner.calibration.load import turn_threads

        engine = self.engine_on_this_cpu()
        self.sent_load = self.app.cpu_watch.load_now()
        if engine is None or not engine.fits:
            return None
        t = turn_threads(engine.threads, engine.threads_batch, self.sent_load)
        return t if t != (engine.threads, engine.threads_batch) else None

    def calibrate(self, metrics, others_cpu: float | None = None) -> None:
        """A finished turn's samples into the calibration (after its forecast was shown).
        Not a turn run while other processes took a quarter of the CPU or more: it says
        what a busy machine did, and two such turns made every later forecast of a quiet
        machine 30x slow (a new user's "decode 1.8 tok/s (calibrated on 2 turns)")."""
        from kvtop.runner.calibration.busy import too_busy

        app = self.app
        if self.calibration is None or app.session.engine.capabilities.replaying:
            return
        if too_busy(others_cpu):  # the bench's rule too (runner.commands.bench)
            said = (f"This turn was not added to the forecast's calibration: other processes used "
                    f"{others_cpu:.0%} of the CPU while it ran.")
            app.notify(said, severity="information", markup=False)
            return
        try:
            self.calibration.record(metrics)
        except OSError as exc:
            if not self._calibration_warned:
                self._calibration_warned = True
                app.notify(f"calibration not saved: {clean_line(str(exc))}", severity="warning", markup=False)

    def reply_tokens(self) -> int:
        """The reply a forecast assumes: ``-n``, else REPLY_TOKENS, but no more than the
        room the engine keeps free for a reply (runner.policy.context_shift.reply_room: a
        quarter of a small context), so "fits" means what the engine will do: with -c 256
        a 50-token draft was said not to fit (50 + 256 > 256), then ran."""
        from kvtop.runner.policy.context_shift import reply_room

        settings = self.app.settings
        n = settings.n_predict
        if n and n > 0:
            return n
        loaded = self.app.session.loaded
        n_ctx = loaded.n_ctx if loaded is not None and loaded.n_ctx else settings.n_ctx
        return min(REPLY_TOKENS, reply_room(n_ctx, 0)) if n_ctx else REPLY_TOKENS

    # ------------------------------------------------------------ a turn
    def forecast_turn(self, started) -> None:
        """The Estimate pane's forecast and roofline as soon as the prompt's size is
        known; its measured column then fills as the turn runs (``measure_live``)."""
        from kvtop.runner.calibration.forecast import Forecaster
        from kvtop.runner.calibration.store import Samples

        n, cached, reply = started.prompt_tokens, started.reused_tokens, self.reply_tokens()
        load, self.sent_load = self.sent_load, None  # the load the turn's threads were chosen at
        self.turn_forecast = self.forecast(n, cached, reply, load)
        roof = Forecaster(self.basis, Samples()).forecast(n, cached, reply) if self.basis else None
        self.app.dash.estimate.begin_turn(self.turn_forecast, roof)
        if self.turn_forecast is not None:
            self.app.session.record_forecast(self.turn_forecast)

    def recorded_forecast(self, forecast: Forecast) -> None:
        """A replay shows the forecast the live run showed (it has no calibration of its own)."""
        self.turn_forecast = forecast
        self.app.session.record_forecast(forecast)  # with the turn (a replay writes no trace)
        self.app.dash.estimate.set_forecast(forecast)

    def measure_live(self, key: str, value: float | None) -> None:
        """A running turn's TTFT (at its first token), prefill and decode rates so far."""
        self.app.dash.estimate.set_live(key, value)


class ForecastBorder:
    """The prompt's borders before Enter: the draft measured by the engine, its forecast
    below, what it rests on above (see the module's docstring)."""

    def __init__(self, app: KvtopApp) -> None:
        self.app = app
        self.measure_id = 0  # the draft the newest answer must be about
        self._timer = None

    def _prompt(self) -> Input | None:
        """The prompt, or None while the app is closing (a debounce timer can fire then)."""
        try:
            return self.app.query_one("#prompt", Input)
        except NoMatches:
            return None

    def changed(self) -> None:
        """A key in the prompt: ask once the typing pauses."""
        if self._timer is not None:
            self._timer.stop()
        self._timer = self.app.set_timer(FORECAST_DEBOUNCE_S, self.request)

    def request(self) -> None:
        self._timer = None
        inp = self._prompt()
        if inp is None:
            return
        app = self.app
        draft = clean_text(expanded_draft(inp)).strip()  # a pasted chip counts as its whole text
        self.measure_id += 1
        if not draft or app.session.loaded is None or app.session.engine.capabilities.replaying or app.estimates.calibration is None:
            inp.border_subtitle = inp.border_title = ""
            return
        if not app.session.engine.alive():
            inp.border_subtitle = inp.border_title = ""
            return
        history = tuple(app.session.messages)
        if draft == "/file" or draft.startswith("/file "):
            path = draft[6:].strip()
            if path:
                app.run_worker(partial(self._measure_file, self.measure_id, history, path), name="measure_file",
                               group="forecast-file", exclusive=True, exit_on_error=False, thread=True)
            else:
                inp.border_subtitle = inp.border_title = ""
            return
        app.session.engine.submit(MeasurePrompt(self.measure_id, history + (ChatMessage("user", draft),)))

    def _measure_file(self, request_id: int, history: tuple, path: str) -> None:
        """In a worker: ``/file PATH`` read as sending would (bounded, refusing what is not
        text), then measured; a file that cannot be sent says why in the border."""
        from kvtop.runner.records.prompt_file import PromptFileError, read_prompt_file

        try:
            text = read_prompt_file(path)
        except PromptFileError as exc:
            self.app.post_message(msg.ForecastNote(request_id, clean_line(str(exc), 200)))
            return
        self.app.session.engine.submit(MeasurePrompt(request_id, history + (ChatMessage("user", text),)))

    def note(self, m: msg.ForecastNote) -> None:
        if m.request_id == self.measure_id:
            if (inp := self._prompt()) is not None:
                inp.border_subtitle = m.text

    def sized(self, e) -> None:
        """The engine measured the draft (``PromptMeasured``): its forecast in the borders."""
        if e.request_id != self.measure_id:  # the draft changed since: a newer answer comes
            return
        inp = self._prompt()
        if inp is None:
            return
        estimates = self.app.estimates
        reply = estimates.reply_tokens()
        if e.n_ctx:  # a reply stops where the context is full: forecast only that much
            reply = max(min(reply, e.n_ctx - e.prompt_tokens), 0)
        fc = estimates.forecast(e.prompt_tokens, e.cached_tokens, reply)
        width = max(inp.size.width - 4, 10)
        line = forecast_line(fc, e.n_ctx, width) if fc else ""
        basis = forecast_basis_line(fc, width) if fc else ""
        n = getattr(e, "dropped_turns", 0)
        if n and fc:  # the context shift would leave the oldest turns out: said below, else above
            without = f" without the {n} oldest turn{'' if n == 1 else 's'}"
            short = forecast_line(fc, e.n_ctx, width - len(without))
            if short.endswith("; fits"):
                line = short + without
            else:
                note = f"context full: {n} oldest turn{'' if n == 1 else 's'} left out"
                basis = f"{basis}; {note}" if len(basis) + len(note) + 2 <= width else note
        inp.border_subtitle = line
        inp.border_title = basis

    def clear(self) -> None:
        """The draft was sent (or the chat cleared): its forecast no longer applies."""
        self.measure_id += 1
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        if (inp := self._prompt()) is not None:
            inp.border_subtitle = inp.border_title = ""


class Forecasting:
    """The App's handlers of what the forecasts need (mixed into the App; the work is
    ``Estimates``' and ``ForecastBorder``'s)."""

    def on_recorded_forecast(self, m: msg.RecordedForecast) -> None:
        self.estimates.recorded_forecast(m.forecast)

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "prompt":
            self.forecast_border.changed()

    @while_running
    def on_forecast_note(self, m: msg.ForecastNote) -> None:
        self.forecast_border.note(m)

    def on_prompt_sized(self, m: msg.PromptSized) -> None:
        self.forecast_border.sized(m.measured)
