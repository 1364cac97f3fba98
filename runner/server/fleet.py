"""Polling many llama-servers: one scheduler thread and a pool that grows only while polls
wait, instead of one loop that asked every server in turn.

That loop took each server's worst case in turn: one server that hung held every other
row (and a new tick started another loop beside it), and 50 idle servers, each asked every
second, cost a third of a core. Here each server has its own next moment:

- the server on screen (``focus``) is polled at the redraw pace, the others share
  ``FLEET_POLLS_PER_S`` (a row of the fleet needs no more);
- a server is never asked again before its last poll has ended, so one that hangs holds
  one thread until its deadline (``http.DEADLINE_S``) and nobody else's row;
- a poll that costs much CPU (100,000 slots) waits longer before the next one, so that no
  server takes more than ``1 / COST_FACTOR`` of a core.

Every thread is a daemon and blocks only in a bounded request or on its queue: quitting
never waits for a poll.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from kvtop.runner.pacing import FLEET_POLLS_PER_S

if TYPE_CHECKING:
    from kvtop.runner.server.monitor import ServerMonitor

COST_FACTOR = 20  # the pause after a poll is at least 20 times the CPU time it took
MAX_THREADS = 32  # polls at once: each waits on one server (only hanging ones pile up)
IDLE_EXIT_S = 30.0  # a pool thread without a job this long ends (one always stays)


class FleetPoller:
    """``deliver(index, snapshot)`` runs on a pool thread after each poll of ``monitors[index]``
    (``ServerMonitor.poll`` never raises). ``focus()`` names the server on screen."""

    def __init__(self, monitors: Sequence[ServerMonitor], deliver: Callable[[int, object], None], interval_s: float,
                 focus: Callable[[], int] = lambda: 0, polls_per_s: float = FLEET_POLLS_PER_S):
        self.monitors = list(monitors)
        self.deliver = deliver
        self.interval_s = interval_s
        self.focus = focus
        self.polls_per_s = polls_per_s
        n = len(self.monitors)
        self._due = [0.0] * n  # monotonic time of each server's next poll
        self._busy = [False] * n
        self._cost = [0.0] * n  # CPU seconds of each server's last poll
        self._jobs: queue.SimpleQueue[int | None] = queue.SimpleQueue()  # None: a thread's stop
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._threads: list[threading.Thread] = []
        self._idle = 0  # pool threads waiting for a job
        self._asap: set[int] = set()  # poll_now while that server's poll was in flight

    def period(self, index: int) -> float:
        """Seconds from the end of one poll of ``index`` to the next."""
        others = max(len(self.monitors) - 1, 1)
        base = self.interval_s if index == self.focus() else max(self.interval_s, others / self.polls_per_s)
        return max(base, COST_FACTOR * self._cost[index])

    def start(self) -> None:
        """The first polls are spread over a second (not 50 at once), the server on screen first."""
        now, n = time.monotonic(), len(self.monitors)
        self._due = [now + i / n for i in range(n)]
        threading.Thread(target=self._schedule, name="kvtop-fleet", daemon=True).start()

    def poll_now(self, index: int) -> None:
        """Poll ``index`` as soon as it is free (kvtop load's end: the pane catches up with the
        slots now, not a period later); a poll in flight ends first, then the next is at once."""
        with self._lock:
            if not 0 <= index < len(self._due):
                return
            if self._busy[index]:
                self._asap.add(index)  # that poll may have begun before: one more right after it
            else:
                self._due[index] = min(self._due[index], time.monotonic())
        self._wake.set()

    def stop(self) -> None:
        self._stopped.set()
        self._wake.set()
        for _ in self._threads:
            self._jobs.put(None)

    def _schedule(self) -> None:
        focus = None
        while not self._stopped.is_set():
            now = time.monotonic()
            with self._lock:
                if self.focus() != focus:  # F4: the server now on screen is asked at once
                    focus = self.focus()
                    if 0 <= focus < len(self._due):
                        self._due[focus] = min(self._due[focus], now)
                waiting = []
                for i, due in enumerate(self._due):
                    if self._busy[i]:
                        continue
                    if due <= now:
                        self._busy[i] = True
                        self._submit(i)
                    else:
                        waiting.append(due)
            self._wake.wait(max(min(waiting) - now, 0.01) if waiting else None)
            self._wake.clear()

    def _submit(self, index: int) -> None:
        """Called with the lock held: a job, and a thread for it when none is waiting."""
        if self._idle == 0 and len(self._threads) < MAX_THREADS:
            t = threading.Thread(target=self._work, name=f"kvtop-poll-{len(self._threads)}", daemon=True)
            self._threads.append(t)
            self._idle += 1
            t.start()
        self._idle -= 1
        self._jobs.put(index)

    def _work(self) -> None:
        while True:
            try:
                index = self._jobs.get(timeout=IDLE_EXIT_S)
            except queue.Empty:
                with self._lock:
                    if self._idle > 1:  # a burst (the first polls, hanging servers) is over
                        self._idle -= 1
                        self._threads.remove(threading.current_thread())
                        return
                continue
            if index is None or self._stopped.is_set():
                return
            cpu = time.thread_time()
            try:
                self.deliver(index, self.monitors[index].poll())
            except Exception:  # a poll or a delivery that fails must not end the pool
                pass
            with self._lock:
                self._cost[index] = time.thread_time() - cpu
                self._busy[index] = False
                self._due[index] = time.monotonic() + (0.0 if index in self._asap else self.period(index))
                self._asap.discard(index)
                self._idle += 1
            self._wake.set()
