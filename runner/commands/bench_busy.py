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
from kvtop.runner.system.cpu_use import CPUReading, cpu_use, read_cpu

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


def others_share(start: CPUReading | None, eng: object, loaded: Loaded) -> float | None:
    """Other processes' share of the CPU (0..1) since ``start``."""
    if start is None:
        return None
    end = cpu_reading(eng, loaded)
    return cpu_use(start, end).others_share if end is not None else None


def busy_fields(share: float | None) -> dict[str, object]:
    """The json/jsonl fields: the share measured and, for a busy run, the warning."""
    return {"kvtop_others_cpu": None if share is None else round(share, 4),
            "kvtop_busy": busy_run_note(share) if too_busy(share) else None}


def warn_if_busy(label: str, share: float | None, fmt: str, err: TextIO | None = None) -> bool:
    """The stderr line for md/csv/sql; True when the run was busy (calibrated at its load)."""
    if not too_busy(share):
        return False
    if fmt not in FIELD_FORMATS:
        print(f"kvtop bench: {label}: {busy_run_note(share)} (calibrated at that load)",
              file=err or sys.stderr, flush=True)
    return True
