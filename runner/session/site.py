"""Where the loaded engine runs, for its forecast (``runner.calibration.service.EngineSite``):
built from the engine's declared capabilities and what it reported when it loaded,
so the forecast never asks what kind of engine it is."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvtop.runner import events as ev
from kvtop.runner.calibration.service import EngineSite
from kvtop.runner.process.contract import Capabilities
from kvtop.runner.settings import Settings

if TYPE_CHECKING:
    from kvtop.runner.model.facts import ModelFacts
    from kvtop.runner.system.hardware import HardwareProfile


def engine_site(loaded: ev.Loaded, capabilities: Capabilities, settings: Settings, facts: ModelFacts | None,
                hw: HardwareProfile | None) -> EngineSite:
    """The site of an engine that reported ``loaded``. Its threads run on this machine's
    CPU unless it is a server elsewhere (``Loaded.server``: the URL it answers at); kvtop
    picks each turn's threads only for a model it runs itself (``runs_model``) when the
    user gave no ``-t`` (``threads_follow_load``)."""
    from kvtop.runner.physics.here import cpu_share
    from kvtop.runner.server.urls import is_loopback

    threads = loaded.n_threads or settings.n_threads or 1
    return EngineSite(threads, loaded.n_threads_batch or threads, cpu_share(facts, hw, loaded.n_gpu_layers),
                      on_this_cpu=loaded.server is None or is_loopback(loaded.server),
                      picks_threads=capabilities.runs_model and settings.threads_follow_load,
                      calibration_engine=loaded.server)


def flags_site(settings: Settings, facts: ModelFacts | None, hw: HardwareProfile | None, server: str | None) -> EngineSite:
    """The site ``kvtop estimate`` forecasts for: the flags' settings, run by kvtop (no
    ``server``) or by the server at ``server``."""
    from kvtop.runner.physics.here import cpu_share
    from kvtop.runner.server.urls import is_loopback

    s = settings.resolved()
    return EngineSite(s.n_threads, s.n_threads_batch, cpu_share(facts, hw, s.n_gpu_layers),
                      on_this_cpu=server is None or is_loopback(server),
                      picks_threads=server is None and s.threads_follow_load, calibration_engine=server)
