"""``kvtop bench`` on a busy machine: each test measures what other processes took of
the CPU while it ran, and passes the app's busy test (runner.calibration.busy). A busy
test is still a calibration sample, priced at its own load (runner.calibration.pace, the
app's rule), and the bench says its figures are low in every output format: a
``kvtop_others_cpu`` and ``kvtop_busy`` field in json/jsonl, a warning line on stderr
for md, csv and sql (whose columns are llama-bench's). It printed ``-t 1`` 77.24 t/s
and ``-t 2`` 18.31 t/s at 63-79% load without a word about it."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, TextIO

from kvtop.runner.calibration.busy import busy_run_note, too_busy
from kvtop.runner.system.cpu_use import CPUReading, CPUUse, cpu_use, read_cpu

if TYPE_CHECKING:
    from kvtop.runner.events import Loaded

FIELD_FORMATS = ("json", "jsonl")  # these carry the warning as a field; the others on stderr


def cpu_reading(eng: object, loaded: Loaded) -> CPUReading | None:
    """A reading that tells the engine's CPU from the others'; None where it cannot
    (a server on another machine, or one whose process this machine does not know)."""
    pid = getattr(eng, "pid", None)
    if not pid:  # the engine's own CPU cannot be told from the others'
        return None
    if loaded.server:
        from kvtop.runner.server.urls import is_loopback

        if not is_loopback(loaded.server):
            return None
    return read_cpu(pid, os.getpid(), same_process=pid == os.getpid(), tree=bool(loaded.server))  # vLLM's children


def run_use(start: CPUReading | None, eng: object, loaded: Loaded) -> CPUUse | None:
    """The cores the engine and the others used since ``start`` (None: not measured)."""
    if start is None:
        return None
    end = cpu_reading(eng, loaded)
    return cpu_use(start, end) if end is not None else None


def others_share(start: CPUReading | None, eng: object, loaded: Loaded) -> float | None:
    """Other processes' share of the CPU (0..1) since ``start``."""
    use = run_use(start, eng, loaded)
    return use.others_share if use is not None else None


def thread_advice(use: CPUUse | None, threads: int, loaded: Loaded) -> str:
    """The thread count that fits the cores others left free ("others held 1.0 of 2
    cores: try -t 1"), said only where the run shows its threads outnumbered them and
    did not get a core each: on 2 threads beside a busy machine the bench read tg 17.7
    where the app on the 1 free core decoded 40-60, and said only "figures are low".
    Nothing for a server's threads (its own) or a run not measured."""
    from kvtop.runner.system.cpu_pace import free_cores

    if use is None or use.others is None or loaded.server or threads <= 1:
        return ""
    free = free_cores(use.others, use.cores)
    starved = use.engine is None or use.engine < threads - 0.5  # llama.cpp's threads spin: each on a core reads ~1
    if threads <= free or not starved:
        return ""
    return f"others held {use.others:.1f} of {use.cores} cores: try -t {free}"


def busy_fields(share: float | None, advice: str = "") -> dict[str, object]:
    """The json/jsonl fields: the share measured and, for a busy run, the warning."""
    return {"kvtop_others_cpu": None if share is None else round(share, 4),
            "kvtop_busy": busy_run_note(share) + (f"; {advice}" if advice else "") if too_busy(share) else None}


def warn_if_busy(label: str, share: float | None, fmt: str, err: TextIO | None = None, advice: str = "") -> bool:
    """The stderr line for md/csv/sql; True when the run was busy (calibrated at its load)."""
    if not too_busy(share):
        return False
    if fmt not in FIELD_FORMATS:
        print(f"kvtop bench: {label}: {busy_run_note(share)} (calibrated at that load)" + (f"; {advice}" if advice else ""),
              file=err or sys.stderr, flush=True)
    return True
