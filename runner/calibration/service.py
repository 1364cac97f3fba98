"""The one forecast service: the app (the prompt's borders, the Estimate pane),
``kvtop estimate`` and ``kvtop bench`` all forecast and calibrate through it.

It joins what a forecast rests on: the machine model's roofline as the shape
(``runner.calibration.basis``), this model's calibration on this machine with these
settings (``runner.calibration.calibration``), and today's load on the engine's CPU
(``runner.calibration.load``). What it needs of the engine is an ``EngineSite`` (where
the engine runs and who picks its threads), which the caller builds from the engine's
capabilities (``runner.session.site``) or, in ``estimate``, from the flags; the service
never asks what kind of engine it is.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum
from typing import TYPE_CHECKING

from kvtop.runner.calibration.forecast import Forecast, Forecaster
from kvtop.runner.calibration.interval import with_interval
from kvtop.runner.calibration.load import CPULoad, LoadedEngine, at_load, turn_threads
from kvtop.runner.calibration.pace import TurnLoad, spread_reason
from kvtop.runner.calibration.store import Samples

if TYPE_CHECKING:
    from kvtop.runner.calibration.calibration import Calibration
    from kvtop.runner.events import TurnMetrics
    from kvtop.runner.physics.here import Here
    from kvtop.runner.settings import Settings

REPLY_TOKENS = 256  # the reply a forecast before Enter assumes (when -n does not say)


@dataclass(frozen=True)
class EngineSite:
    """What the forecast needs to know of the engine.

    ``calibration_engine``: the calibration key's engine ("local", or a server's URL: a
    server's turns are not this process's); ``on_this_cpu``: its threads run on this
    machine's CPU (a model kvtop runs, a llama-server on loopback), so this machine's
    load prices its turns; ``picks_threads``: kvtop chose the threads and sends each turn
    on the cores others leave free (``turn_threads``)."""

    threads: int
    threads_batch: int
    cpu_fraction: float = 1.0  # the CPU's share of the work (the layers -ngl leaves on it)
    on_this_cpu: bool = True
    picks_threads: bool = False
    calibration_engine: str | None = None  # None: "local"


class Admission(Enum):
    """What became of a finished run offered to the calibration."""

    ADDED = "added"  # at its own load, whatever it was
    UNSTEADY = "unsteady"  # the load changed so much within it that no single price fits (pace.spread_reason)
    EMPTY = "empty"  # it held no sample (a refused or empty turn)


def turn_load(others: TurnLoad | float | None, n_cores: int | None = None) -> TurnLoad | None:
    """A run's load as a ``TurnLoad`` (a bare share: one reading, the bench's start-to-end)."""
    import os

    if others is None or isinstance(others, TurnLoad):
        return others
    return TurnLoad.of_share(others, n_cores or os.cpu_count() or 1)


def refusal(metrics: TurnMetrics, load: TurnLoad | None, threads: tuple[int, int] = (1, 1)) -> str | None:
    """Why a run is not a calibration sample (None: it is one, at its load); ``threads``:
    the engine's (decode, prefill), where the run did not record its own."""
    if load is None:
        return None
    return (spread_reason(load, metrics.n_threads_batch or threads[1], long_ops=True)
            or spread_reason(load, metrics.n_threads or threads[0]))


def admit(calibration: Calibration, metrics: TurnMetrics, others: TurnLoad | float | None,
          forecast: Forecast | None = None, threads: tuple[int, int] | None = None) -> Admission:
    """The one rule for what calibrates the forecast (the app's turns and the bench's
    runs alike): every run, priced at its own load, unless no single price fits it.
    ``forecast``: the one frozen when it was sent (its miss becomes a residual). An
    ``OSError`` from saving propagates: the caller says so once."""
    load = turn_load(others)
    if threads is None:
        t, tb = calibration.key.get("threads"), calibration.key.get("threads_batch")
        threads = (t if isinstance(t, int) and t else 1, tb if isinstance(tb, int) and tb else 1)
    if refusal(metrics, load, threads) is not None:
        return Admission.UNSTEADY
    return Admission.ADDED if calibration.record(metrics, load, forecast) else Admission.EMPTY


def reply_tokens(n_predict: int | None, n_ctx: int | None) -> int:
    """The reply a forecast assumes: ``-n``, else REPLY_TOKENS, but no more than the room
    the engine keeps free for a reply (runner.policy.context_shift.reply_room: a quarter
    of a small context), so "fits" means what the engine will do: with -c 256 a 50-token
    draft was said not to fit (50 + 256 > 256), then ran."""
    from kvtop.runner.policy.context_shift import reply_room

    if n_predict and n_predict > 0:
        return n_predict
    return min(REPLY_TOKENS, reply_room(n_ctx, 0)) if n_ctx else REPLY_TOKENS


class ForecastService:
    """Forecasts of one engine's turns on ``here``, and the calibration they learn from."""

    def __init__(self, here: Here, calibration: Calibration, site: EngineSite):
        from kvtop.runner.calibration.basis import roofline_basis

        self.here = here
        self.calibration = calibration
        self.site = site
        self.basis = roofline_basis(here)
        self.cache_dir: str | None = None  # where a speculative turn's acceptance is kept (spec_store)

    @classmethod
    def open(cls, here: Here, settings: Settings, cache_dir: str, site: EngineSite) -> ForecastService:
        """The service for ``settings`` (the calibration's key) with its calibration from ``cache_dir``."""
        from kvtop.runner.calibration.calibration import calibration_for

        cal = calibration_for(settings, cache_dir, site.calibration_engine, tuple(g.name for g in here.hw.gpus))
        service = cls(here, cal, site)
        service.cache_dir = cache_dir
        return service

    # ------------------------------------------------------------ the engine on this CPU
    def engine(self) -> LoadedEngine | None:
        """The engine's threads and the CPU's share of its work, when it runs on this
        machine's CPU (None: a remote server's load is not this machine's)."""
        if not self.site.on_this_cpu:
            return None
        t = max(self.site.threads, 1)
        return LoadedEngine(t, self.site.threads_batch or t, self.site.cpu_fraction, fits=self.site.picks_threads)

    def turn_threads(self, load: CPULoad | None) -> tuple[int, int] | None:
        """The threads a turn sent at ``load`` runs on, when fewer than the engine's (the
        cores others leave free, when kvtop chose the threads): the decision ``forecast``
        prices at the same load."""
        engine = self.engine()
        if engine is None or not engine.fits:
            return None
        t = turn_threads(engine.threads, engine.threads_batch, load)
        return t if t != (engine.threads, engine.threads_batch) else None

    # ------------------------------------------------------------ forecasts
    def forecast(self, prompt_tokens: int, cached: int | None, reply: int, load: CPULoad | None) -> Forecast:
        """The calibration's (a quiet machine's) forecast, priced at ``load`` on this
        CPU (None: not measured, or quiet). ``cached`` None: not known (a server's
        slot), said so rather than claiming 0 cached."""
        engine = self.engine()
        threads = (engine.threads, engine.threads_batch) if engine is not None else (0, 0)
        fitted = self.calibration.forecaster(self.basis, threads, self.site.cpu_fraction)
        fc = fitted.forecast(prompt_tokens, cached or 0, reply)
        if engine is not None:
            fc = at_load(fc, load, engine, fitted.pace, self.calibration.samples.held)
        else:
            fc = replace(fc, remote_load=True)  # a server elsewhere: what it did, at its own load
        cpu = self.here.hw.cpu
        fc = with_interval(fc, self.calibration.samples.residuals, cpu is not None and cpu.lower_bound)
        return replace(fc, cached_tokens=None) if cached is None else fc

    def roofline(self, prompt_tokens: int, cached: int | None, reply: int) -> Forecast:
        """What the hardware's ceilings alone allow (no calibration, no load)."""
        return Forecaster(self.basis, Samples()).forecast(prompt_tokens, cached or 0, reply)

    # ------------------------------------------------------------ learning
    def admit(self, metrics: TurnMetrics, load: TurnLoad | float | None, forecast: Forecast | None = None) -> Admission:
        """A finished turn into the calibration at ``load`` (None where this machine
        cannot see the engine's: a server elsewhere), with its frozen ``forecast``."""
        if metrics.spec_type not in ("", "llama-server") and self.cache_dir:  # the text's acceptance, at any load
            from kvtop.runner.calibration.spec_store import record_turn

            record_turn(self.cache_dir, self.here.settings.model, metrics)
        engine = self.engine()
        if engine is None:  # a server elsewhere: this machine's load is not its
            return admit(self.calibration, metrics, None, forecast)
        return admit(self.calibration, metrics, load, forecast, (engine.threads, engine.threads_batch))

    def refusal(self, metrics: TurnMetrics, load: TurnLoad | float | None) -> str | None:
        """Why ``admit`` refused a turn at ``load`` (None: it did not)."""
        engine = self.engine()
        if engine is None:
            return None
        return refusal(metrics, turn_load(load), (engine.threads, engine.threads_batch))
