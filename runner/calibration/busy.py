"""The busy test: a run (an app turn or a ``kvtop bench`` test) during which other
processes took a quarter of the CPU or more ran on a busy machine. Such a run still
calibrates the forecast, priced at its own load (runner.calibration.pace): refusing
them left a shared machine's forecast at the roofline for good (53 ms forecast, 794 ms
measured), and taking them as quiet (bench runs at 63-79% load) forecast 12.53 s for a
2.35 s roofline. Under the test no price applies, to a sample or a forecast."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvtop.runner.physics.verdicts import BUSY_SHARE

if TYPE_CHECKING:
    from typing_extensions import TypeIs  # typing.TypeIs is 3.13+


def too_busy(others_cpu: float | None) -> TypeIs[float]:
    """Whether a run with ``others_cpu`` (other processes' share of the CPU, 0..1; None:
    not measured) is left out of the calibration."""
    return others_cpu is not None and others_cpu >= BUSY_SHARE


def busy_run_note(others_cpu: float) -> str:
    """What the bench says of such a run, in every output format."""
    return f"other processes used {others_cpu:.0%} of the CPU during this run: figures are low"
