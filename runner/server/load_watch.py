"""What the servers and this machine did during one level of ``kvtop load``.

The server's own counters are the check on the client's: ``tokens_predicted_total``
before and after the level is what the server says it generated. ``/metrics`` and
``/slots`` polled during the level give the requests it deferred (more users than
slots) and the KV cells in use at the peak. CPU time read before and after gives the
load generator's own cost (a Python client that saturates its core measures itself,
not the server: the row says so) and what other processes took.
"""

from __future__ import annotations

import os
import threading
import time
from typing import TYPE_CHECKING

from kvtop.runner.server.http import ServerClient
from kvtop.runner.server.monitor import ServerMonitor, ServerSnapshot

if TYPE_CHECKING:
    from kvtop.runner.server.credentials import Credentials
from kvtop.runner.server.urls import is_loopback
from kvtop.runner.system.cpu_use import tree_seconds


def _cpu_seconds(pid: int | None) -> float | None:
    import psutil

    try:
        t = (psutil.Process(pid) if pid else psutil.Process()).cpu_times()
        return float(t.user + t.system)
    except Exception:
        return None


def _system_busy() -> float | None:
    import psutil

    t = psutil.cpu_times()
    return float(sum(t) - t.idle - getattr(t, "iowait", 0.0) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0))


# (monotonic time, kvtop's CPU seconds, the local servers', the whole machine's busy seconds)
CpuMark = tuple[float, float | None, float, float | None]


MIN_CPU_S = 0.5
RECENT_MARKS = 11  # polls every 0.5 s: the last 5 s


class ServerWatch:
    """Polls every server every ``poll_s`` (None: not at all) between ``start`` and ``finish``."""

    def __init__(self, urls: list[str], api_key: str | Credentials | None, poll_s: float | None):
        self.urls, self.api_key, self.poll_s = urls, api_key, poll_s
        self.monitors: list[ServerMonitor] = []
        self.first: list[ServerSnapshot | None] = [None] * len(urls)
        self.last: list[ServerSnapshot | None] = [None] * len(urls)
        self.max_deferred: list[int | None] = [None] * len(urls)
        self.max_kv: list[int | None] = [None] * len(urls)
        self.cells_total: list[int | None] = [None] * len(urls)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._cpu0: CpuMark | None = None
        self._cpu1: CpuMark | None = None
        self._recent: list[CpuMark] = []  # a mark at every poll: what the others take now (the progress line)
        self.wall_s = 0.0

    def _poll(self, i: int) -> ServerSnapshot:
        s = self.monitors[i].poll()
        if s.rates is not None and s.rates.requests_deferred is not None:
            self.max_deferred[i] = max(self.max_deferred[i] or 0, s.rates.requests_deferred)
        if s.slots:
            self.max_kv[i] = max(self.max_kv[i] or 0, sum(sl.n_prompt_tokens for sl in s.slots if sl.is_processing))
            self.cells_total[i] = sum(sl.n_ctx for sl in s.slots)
        elif s.batch is not None and s.batch.kv_usage is not None and s.batch.kv_tokens:  # a block pool (vLLM)
            self.max_kv[i] = max(self.max_kv[i] or 0, round(s.batch.kv_usage * s.batch.kv_tokens))
            self.cells_total[i] = s.batch.kv_tokens
        return s

    def _cpu(self) -> CpuMark:
        from kvtop.runner.server.props import listening_pid

        if not hasattr(self, "_pids"):
            self._pids = [listening_pid(u) for u in self.urls if is_loopback(u)]
        servers = [tree_seconds(p) for p in self._pids if p]
        return time.monotonic(), _cpu_seconds(None), sum(x for x in servers if x is not None), _system_busy()

    def start(self) -> None:
        if self.poll_s is None:
            return
        self.monitors = [ServerMonitor(ServerClient(u, self.api_key)) for u in self.urls]
        self.first = [self._poll(i) for i in range(len(self.urls))]
        self._cpu0 = self._cpu()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            for i in range(len(self.urls)):
                self._poll(i)
            self._recent = (self._recent + [self._cpu()])[-RECENT_MARKS:]

    def others_now(self) -> float | None:
        """Other processes' cores over the last polls (about 5 s), sampled through the level."""
        marks = list(self._recent)
        return _cores(marks[0], marks[-1])[1] if len(marks) > 1 else None

    def finish(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(10)
        self._cpu1 = self._cpu()
        self.last = [self._poll(i) for i in range(len(self.urls))]
        for m in self.monitors:
            m.client.close()

    def generated(self, i: int) -> int | None:
        """Tokens the server says it generated between start and finish (``/metrics``)."""
        a, b = self.first[i], self.last[i]
        if a is None or b is None or a.rates is None or b.rates is None:
            return None
        if a.rates.gen_tokens_total is None or b.rates.gen_tokens_total is None:
            return None
        return b.rates.gen_tokens_total - a.rates.gen_tokens_total

    def cpu(self) -> tuple[float | None, float | None]:
        """(cores kvtop used, cores other processes used: not kvtop, not a local server)."""
        if self._cpu0 is None or self._cpu1 is None:
            return None, None
        return _cores(self._cpu0, self._cpu1)


def _cores(a: CpuMark, b: CpuMark) -> tuple[float | None, float | None]:
    (w0, own0, srv0, sys0), (w1, own1, srv1, sys1) = a, b
    dt = w1 - w0
    # CPU times tick in 10 ms: over a level shorter than MIN_CPU_S, one tick is a fifth
    # of a core or more (a 1 ns --duration once read kvtop at 5.9 cores of 2)
    if dt < MIN_CPU_S or own0 is None or own1 is None:
        return None, None
    own = max(own1 - own0, 0.0) / dt
    others = None
    if sys0 is not None and sys1 is not None:
        cores = os.cpu_count() or 1
        others = min(max((sys1 - sys0) / dt - own - max(srv1 - srv0, 0.0) / dt, 0.0), float(cores))
    return own, others
