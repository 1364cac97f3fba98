"""Who uses the CPU: kvtop's engine, kvtop's UI, and everything else.

On a small machine the most common reason a turn runs slower than this machine's own
calibration is another process taking cores from llama.cpp's threads (a build, a
browser, a second model). ``CPUClock`` reads cumulative CPU seconds (psutil: the
system's busy time and each process's user + system time); the difference of two
readings over the wall time between them says how many cores each used. A process
that is gone or not readable is None, never an error.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class CPUReading:
    wall: float
    system_busy: float | None  # all cores' busy seconds since boot
    engine: float | None  # the engine process's CPU seconds
    ui: float | None  # the UI's (None when it is the engine's own process)


@dataclass(frozen=True)
class CPUUse:
    """Cores in use between two readings (1.0 = one core busy all the time)."""

    engine: float | None
    ui: float | None
    others: float | None
    cores: int

    @property
    def others_share(self) -> float | None:
        """Other processes' share of the whole machine (0..1)."""
        return self.others / self.cores if self.others is not None and self.cores else None


def _process_seconds(pid: int | None) -> float | None:
    if not pid:
        return None
    import psutil

    try:
        t = psutil.Process(pid).cpu_times()
        return float(t.user + t.system)
    except Exception:
        return None


def tree_seconds(pid: int | None) -> float | None:
    """CPU seconds of a process and every process under it: vLLM's API server answers on
    its port while its engine core and worker, its children, compute (counted as other
    processes, every local vLLM run read "other processes used 97% of the CPU")."""
    if not pid:
        return None
    import psutil

    try:
        procs = [psutil.Process(pid)]
        procs += procs[0].children(recursive=True)
    except Exception:
        return None
    total = None
    for p in procs:
        try:
            t = p.cpu_times()
        except Exception:
            continue  # one that ended between the listing and the read
        total = (total or 0.0) + float(t.user + t.system)
    return total


def _system_busy() -> float | None:
    import psutil

    try:
        t = psutil.cpu_times()
        busy = sum(t) - t.idle - getattr(t, "iowait", 0.0) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)
        return float(busy)
    except Exception:
        return None


def read_cpu(engine_pid: int | None, ui_pid: int, same_process: bool = False, tree: bool = False) -> CPUReading:
    """``tree``: the engine's CPU with its processes' (a server's, ``tree_seconds``)."""
    ui = None if same_process else _process_seconds(ui_pid)
    return CPUReading(time.monotonic(), _system_busy(), (tree_seconds if tree else _process_seconds)(engine_pid), ui)


def cpu_use(a: CPUReading, b: CPUReading) -> CPUUse:
    """The cores each used between readings ``a`` and ``b``."""
    cores = os.cpu_count() or 1
    dt = b.wall - a.wall

    def rate(x: float | None, y: float | None) -> float | None:
        return max(y - x, 0.0) / dt if x is not None and y is not None and dt > 0 else None

    engine, ui, total = rate(a.engine, b.engine), rate(a.ui, b.ui), rate(a.system_busy, b.system_busy)
    others = None
    if total is not None:
        others = min(max(total - (engine or 0.0) - (ui or 0.0), 0.0), float(cores))
    return CPUUse(engine, ui, others, cores)


def others_over(seconds: float = 1.0) -> CPUUse:
    """What processes other than this one used over the next ``seconds`` (a command
    without a running engine, such as ``kvtop estimate``, measures today's load so)."""
    me = os.getpid()
    a = read_cpu(None, me)
    time.sleep(seconds)
    return cpu_use(a, read_cpu(None, me))
