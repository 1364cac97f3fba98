"""One model's calibration on this machine with these settings: its samples on disk,
what each finished turn adds, and the forecaster they make."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvtop.runner.calibration.forecast import Basis, Forecaster
from kvtop.runner.calibration.key import key_hash
from kvtop.runner.calibration.samples import samples_from_turn
from kvtop.runner.calibration.store import Samples, calibration_path, load_samples, save_samples

if TYPE_CHECKING:
    from kvtop.runner.calibration.forecast import Forecast
    from kvtop.runner.calibration.pace import TurnLoad
    from kvtop.runner.events import TurnMetrics
    from kvtop.runner.settings import Settings


class Calibration:
    def __init__(self, cache_dir: str, key: dict[str, object]):
        self.key = key
        self.path = calibration_path(cache_dir, key_hash(key))
        self.samples: Samples = load_samples(self.path)
        self._forecaster: Forecaster | None = None
        self._basis: Basis | None = None

    @property
    def turns(self) -> int:
        return self.samples.turns

    def record(self, metrics: TurnMetrics, load: TurnLoad | None = None, forecast: Forecast | None = None) -> bool:
        """Add a finished turn's samples, at the load it ran at (None: not seen), and how
        far ``forecast`` (the one frozen when it was sent) was off it; save them. False when
        it held none. An ``OSError`` from saving propagates: the caller says so once."""
        from kvtop.runner.calibration.interval import residual_of

        new = samples_from_turn(metrics, load)
        if new.empty():
            return False
        residual = residual_of(forecast, metrics)
        if residual is not None:
            new.residuals.append(residual)
        if forecast is not None and forecast.others_cpu is not None and load is not None and load.n_cores:
            # what the load read before it (the forecast's) held through it: held_load learns from it
            new.held.append((forecast.others_cpu * load.n_cores, load.others_cores,
                             int(metrics.n_threads or 0), int(metrics.n_threads_batch or 0)))
        self.samples.add(new)
        self._forecaster = None
        save_samples(self.path, self.key, self.samples)
        return True

    def forecaster(self, basis: Basis, threads: tuple[int, int] | None = None, cpu_fraction: float = 1.0) -> Forecaster:
        """The fits on ``basis`` for an engine of ``threads`` (decode, prefill; None: the key's)."""
        if threads is None:
            t, tb = self.key.get("threads"), self.key.get("threads_batch")
            threads = (t if isinstance(t, int) else 0, tb if isinstance(tb, int) else 0)
        if self._forecaster is None or self._basis is not basis:
            self._forecaster, self._basis = Forecaster(basis, self.samples, threads, cpu_fraction), basis
        return self._forecaster


def calibration_for(settings: Settings, cache_dir: str, server: str | None = None,
                    gpu_names: tuple[str, ...] | None = None) -> Calibration:
    """The calibration the app and ``kvtop bench`` share for this model and settings
    (``server``: a llama-server's URL; ``gpu_names``: None asks NVML when layers are
    offloaded)."""
    from kvtop.runner.calibration.key import calibration_key, file_identity

    s = settings.resolved()
    if gpu_names is None:
        gpu_names = ()
        if s.n_gpu_layers:
            from kvtop.runner.system.hardware import query_gpus

            gpu_names = tuple(g.name for g in query_gpus(None).gpus)
    ident = file_identity(s.model) or s.model
    engine = f"server {server}" if server else "local"
    return Calibration(cache_dir, calibration_key(s, ident, tuple(gpu_names) if s.n_gpu_layers else (), engine))
