"""Fleet polling is scheduled: a server that hangs holds only its own row, the server on
screen is polled at the redraw pace and the rest of the fleet shares a few polls a second,
stopping never waits for a poll, and every thread is a daemon (quitting never waits).

Real monitors poll real sockets on 127.0.0.1 (``tests/fake_servers.py``). The pace is
sped up (0.2 s) so the tests stay short; the ceilings leave room for a busy machine.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from contextlib import ExitStack

from fake_servers import FakeServer

from kvtop.runner.server.fleet import COST_FACTOR, FleetPoller
from kvtop.runner.server.http import ServerClient
from kvtop.runner.server.monitor import ServerMonitor


def fleet(stack: ExitStack, good: int, blackholes: int = 0) -> list[ServerMonitor]:
    urls = [stack.enter_context(FakeServer(blackhole=True)) for _ in range(blackholes)]
    urls += [stack.enter_context(FakeServer()) for _ in range(good)]
    return [ServerMonitor(ServerClient(u)) for u in urls]


class Recorder:
    def __init__(self):
        self.polls: Counter = Counter()
        self.snapshots: dict = {}
        self.lock = threading.Lock()

    def __call__(self, index, snapshot) -> None:
        with self.lock:
            self.polls[index] += 1
            self.snapshots[index] = snapshot


def wait_for(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_a_blackhole_never_delays_the_other_rows():
    with ExitStack() as stack:
        monitors = fleet(stack, good=3, blackholes=1)  # index 0 accepts and never answers (10 s deadline)
        rec = Recorder()
        poller = FleetPoller(monitors, rec, interval_s=0.2, polls_per_s=20)
        poller.start()
        try:
            # every healthy server is polled again and again while the blackhole's first poll waits
            assert wait_for(lambda: all(rec.polls[i] >= 3 for i in (1, 2, 3)), timeout=5.0), rec.polls
            assert rec.polls[0] == 0
            assert all(rec.snapshots[i].reachable and len(rec.snapshots[i].slots) == 2 for i in (1, 2, 3))
        finally:
            t0 = time.monotonic()
            poller.stop()
            assert time.monotonic() - t0 < 0.5  # stopping does not wait for the hanging poll
    polling = [t for t in threading.enumerate() if t.name.startswith("kvtop-")]
    assert all(t.daemon for t in polling)  # a poll still waiting never holds up the process's exit


def test_the_server_on_screen_is_polled_at_the_redraw_pace_the_rest_share_a_few_polls():
    with ExitStack() as stack:
        monitors = fleet(stack, good=11)
        rec = Recorder()
        focus = [0]
        # 10 other servers share 5 polls a second: each of them every 2 s
        poller = FleetPoller(monitors, rec, interval_s=0.2, focus=lambda: focus[0], polls_per_s=5)
        poller.start()
        try:
            time.sleep(2.5)
            with rec.lock:
                counts = dict(rec.polls)
            assert counts[0] >= 5, counts
            assert all(1 <= counts.get(i, 0) <= 2 for i in range(1, 11)), counts
            # F4: the server now on screen is asked at once, then at the redraw pace
            before = rec.polls[7]
            focus[0] = 7
            assert wait_for(lambda: rec.polls[7] >= before + 3, timeout=2.0), rec.polls
        finally:
            poller.stop()


def test_a_costly_poll_waits_longer_before_the_next():
    poller = FleetPoller([object(), object()], lambda i, s: None, interval_s=1.0, polls_per_s=5)
    assert poller.period(0) == 1.0 and poller.period(1) == 1.0
    poller._cost[0] = 0.5  # 100,000 slots parsed: half a second of CPU
    assert poller.period(0) == 0.5 * COST_FACTOR


def test_poll_now_polls_at_once_and_again_after_a_poll_in_flight():
    """kvtop load's end asks for a poll now, so the server pane shows the slots as they are
    after the load, not a period later; asked while a poll runs (it may have begun before
    the end), the next poll follows that one at once."""

    class Slow:
        def __init__(self):
            self.starts: list[float] = []

        def poll(self):
            self.starts.append(time.monotonic())
            time.sleep(0.3)
            return self.starts[-1]

    mon, rec = Slow(), Recorder()
    poller = FleetPoller([mon], rec, interval_s=30.0)
    poller.start()
    try:
        assert wait_for(lambda: rec.polls[0] == 1, timeout=5.0)  # the first poll; the next is 30 s away
        assert not wait_for(lambda: len(mon.starts) > 1, timeout=0.5)
        asked = time.monotonic()
        poller.poll_now(0)
        assert wait_for(lambda: len(mon.starts) == 2, timeout=2.0) and mon.starts[1] - asked < 1.0
        poller.poll_now(0)  # asked while that poll is in flight
        assert wait_for(lambda: rec.polls[0] == 3, timeout=3.0), rec.polls  # one more right after it
        assert not wait_for(lambda: len(mon.starts) > 3, timeout=0.5)  # then the period again
    finally:
        poller.stop()
