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
from kvtop.runner.calibration.load import CPULoad, slowed, ttft_texts
from kvtop.runner.calibration.service import Admission, ForecastService, reply_tokens
from kvtop.runner.pacing import FORECAST_DEBOUNCE_S
from kvtop.runner.process.commands import ChatMessage, MeasurePrompt
from kvtop.runner.sanitize import clean_line, clean_text
from kvtop.tui.base import messages as msg
from kvtop.tui.base.format import fmt_int, fmt_seconds
from kvtop.tui.base.guards import while_running
from kvtop.tui.base.prompt_input import expanded_draft

if TYPE_CHECKING:
    from kvtop.runner.events import Loaded
    from kvtop.runner.policy.tune_evidence import TuneEvidence
    from kvtop.tui.app import KvtopApp

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
        loaded = f"{ttft} at today's load"  # the new tokens and the reply before the quiet figure (a trial)
        texts = [f"{long_head} → {busy}, {reply}; fits", f"{head} → {busy}, {reply}; fits",
                 f"{head} → {busy}; fits", f"{head} → {loaded}, reply ≈ {fmt_seconds(fc.reply_s)}; fits",
                 f"{head} → {loaded}; fits", f"{n} tok → {busy}; fits", f"{n} tok → {short}; fits",
                 # the token count before the quiet figure: at 160 columns on a busy machine the
                 # input's ~57 columns said only "TTFT ≈ 5.56 s at today's load (2.69 s quiet); fits"
                 f"{n} tok → {ttft} at today's load; fits", f"{short}; fits", f"{ttft}; fits", ttft]
    else:
        ttft = ttfts[0]
        # "fits" is kept as long as anything is: the wide layout's input (~57 columns at 160)
        # dropped it, and a user then could not tell whether the draft would be refused
        texts = [f"{long_head} → {ttft}, {reply}; fits", f"{head} → {ttft}, {reply}; fits",
                 f"{head} → {ttft}, reply ≈ {fmt_seconds(fc.reply_s)}; fits", f"{head} → {ttft}; fits",
                 f"{n} tok → {ttft}; fits", f"{ttft}; fits", ttft]
    return next((text for text in texts if len(text) <= width), "")


def forecast_basis_line(fc: Forecast, width: int, tuned: TuneEvidence | None = None) -> str:
    """The upper border: what the forecast rests on, and its 80% interval where it fits
    ("TTFT 80%: 1.10–1.60 s (5 turns at this load)"); ``tuned``: the advice's evidence."""
    line = _basis_line(fc, width, tuned)
    iv = fc.interval_text() if fc.basis == "calibrated" else ""  # the roofline says what it is
    for extra in (f"; TTFT {iv}", f"; TTFT {iv.split(' (')[0]}"):
        if iv and line and len(line) + len(extra) <= width:
            return line + extra
    return line


def _basis_line(fc: Forecast, width: int, tuned: TuneEvidence | None = None) -> str:
    text = f"forecast: {fc.label()}"
    if slowed(fc) and fc.others_cpu is not None:  # the load is said before what the forecast rests on
        share = f"others use {fc.others_cpu:.0%} of the CPU"
        texts = (f"{text}; {share}", f"forecast: {fc.basis}; {share}", share)
        if fc.free_cores is not None:  # threads packed onto a shared core: the advice outranks the rest
            from kvtop.runner.policy.tune_evidence import advise_short

            packed = f"more threads than free cores: try -t {fc.free_cores}"
            proven = f"more threads than free cores: {advise_short(f'-t {fc.free_cores}', tuned)}"  # its evidence
            adv = advise_short(f"-t {fc.free_cores}", tuned)
            texts = (f"{text}; {share}; {proven}", f"{share}; {proven}", f"{share}; {adv}", f"{text}; {share}; {packed}",
                     f"{share}; {packed}", f"{share}; try -t {fc.free_cores}", packed) + texts
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
    """The Estimate pane's content and the forecast service it shows (see the module's docstring)."""

    def __init__(self, app: KvtopApp) -> None:
        self.app = app
        self.service: ForecastService | None = None  # once the machine model and the engine are known
        self.turn_forecast: Forecast | None = None
        self.sent_load: CPULoad | None = None  # the load the turn in flight's threads were chosen at (next_turn_threads)
        self.frozen: Forecast | None = None  # the draft's forecast at Enter, made before the turn ran
        self._calibration_warned = False
        self.tuned: TuneEvidence | None = None  # ``kvtop tune``'s result for these settings here (the advice's evidence)

    @property
    def calibration(self):
        return self.service.calibration if self.service is not None else None

    def update(self, mt=None, others_cpu: float | None = None, loaded: Loaded | None = None) -> None:
        """The rows the machine model computes, with what was measured: at load
        (``loaded``: the engine's report, before the session has it), after each turn
        (``mt``, and the share of the CPU others took during it)."""
        app = self.app
        if app.here is None:
            return
        L = loaded or app.session.loaded
        buffers = L.buffers if L is not None and app.session.engine.capabilities.llama_buffers else None  # a server's are in its log
        rows = app.here.estimate_rows(buffers=buffers, peak_rss=app.dash.memory.peak_engine_rss,
                                      turn=mt, turn_ran=bool(app.session.turns), others_cpu=others_cpu,
                                      tuned=self.tuned)
        app.dash.estimate.set_rows(rows)

    # ------------------------------------------------------------ calibration
    def setup_calibration(self, loaded: Loaded | None = None) -> None:
        """Once the facts, hardware and settings are known and the engine loaded
        (``loaded``: the engine's report, before the session has it; None: the
        session's), and again after a new probe: the forecast service for them."""
        from kvtop.runner.session.site import engine_site

        app, here, L = self.app, self.app.here, loaded or self.app.session.loaded
        if here is None or L is None or app.session.engine.capabilities.replaying:
            return
        site = engine_site(L, app.session.engine.capabilities, app.settings, app.facts, app.hw)
        from kvtop.runner.commands.tune_cache import evidence_for

        self.tuned = evidence_for(app.settings.resolved())
        self.service = ForecastService.open(here, app.settings.resolved(), app.paths.cache_dir, site)
        if loaded is None:  # re-probed: a draft's forecast was made without it (at load: once the session has it)
            app.forecast_border.request()

    def forecast(self, prompt_tokens: int, cached: int | None, reply_tokens: int,
                 load: CPULoad | None = None) -> Forecast | None:
        """The service's forecast at ``load`` (the one the turn's threads were chosen at;
        None: the load now)."""
        if self.service is None:
            return None
        return self.service.forecast(prompt_tokens, cached, reply_tokens,
                                     load if load is not None else self.app.cpu_watch.load_now())

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
        """The threads the turn about to be sent runs on, when fewer than the engine's:
        the same decision, at the same load, as the forecast the turn is shown
        (``forecast_turn``)."""
        self.sent_load = self.app.cpu_watch.load_now()
        self.frozen = None
        measured = self.app.forecast_border.measured_now()
        if measured is not None and self.service is not None:  # frozen at Enter: what the turn is compared with
            n, cached, reply = measured
            self.frozen = self.forecast(n, cached, reply, self.sent_load)
        return self.service.turn_threads(self.sent_load) if self.service is not None else None

    def calibrate(self, metrics, others_cpu: float | None = None) -> None:
        """A finished turn's samples into the calibration (after its forecast was shown),
        at the load it ran at (the readings through it: ``CPUWatch.last_turn_load``), with
        how far its frozen forecast (``turn_forecast``) was off; refused only when no
        single price fits its load (``service.admit``), said with the turn and why."""
        app = self.app
        if self.service is None or app.session.engine.capabilities.replaying:
            return
        load = app.cpu_watch.last_turn_load
        if load is None and others_cpu is not None:
            load = others_cpu
        try:
            admitted = self.service.admit(metrics, load, self.turn_forecast)
        except OSError as exc:
            if not self._calibration_warned:
                self._calibration_warned = True
                app.notify(f"calibration not saved: {clean_line(str(exc))}", severity="warning", markup=False)
            return
        if admitted is Admission.UNSTEADY:
            why = self.service.refusal(metrics, load) or "the load changed while it ran"
            said = f"Turn {len(app.session.turns)} was not added to the forecast's calibration: {why}."
            app.notify(said, severity="information", markup=False)

    def reply_tokens(self) -> int:
        """The reply a forecast assumes (``runner.calibration.service.reply_tokens``)."""
        settings = self.app.settings
        loaded = self.app.session.loaded
        n_ctx = loaded.n_ctx if loaded is not None and loaded.n_ctx else settings.n_ctx
        return reply_tokens(settings.n_predict, n_ctx)

    # ------------------------------------------------------------ a turn
    def forecast_turn(self, started) -> None:
        """The Estimate pane's forecast and roofline as soon as the prompt's size is
        known; its measured column then fills as the turn runs (``measure_live``)."""
        n, cached, reply = started.prompt_tokens, started.reused_tokens, self.reply_tokens()
        load, self.sent_load = self.sent_load, None  # the load the turn's threads were chosen at
        frozen, self.frozen = self.frozen, None
        if frozen is not None and (frozen.prompt_tokens, frozen.cached_tokens) == (n, cached):
            self.turn_forecast = frozen  # the border's at Enter: never rebuilt once the turn ran
        else:  # sent without a measured draft (--prompt, a message while loading): at its start, before it ran
            self.turn_forecast = self.forecast(n, cached, reply, load)
        roof = self.service.roofline(n, cached, reply) if self.service is not None else None
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
        self._measured: tuple[int, tuple[int, int | None, int]] | None = None  # (id, the draft's size) last shown
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
        self._measured = (self.measure_id, (e.prompt_tokens, e.cached_tokens, reply))
        width = max(inp.size.width - 4, 10)
        line = forecast_line(fc, e.n_ctx, width) if fc else ""
        basis = forecast_basis_line(fc, width, estimates.tuned) if fc else ""
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

    def measured_now(self) -> tuple[int, int | None, int] | None:
        """(prompt tokens, cached, reply) of the draft whose forecast the border shows, when
        it is the draft as it is now (None: it changed since, or was never measured)."""
        if self._measured is None or self._measured[0] != self.measure_id:
            return None
        return self._measured[1]

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
