"""vLLM's own prefill time for one request (``kvtop bench --server``).

vLLM streams no timings. Its ``/metrics`` histogram ``request_prefill_time_seconds``
observes each finished request's prefill (first scheduled to first token, the engine's
clock), so a ``/metrics`` read before a request and one after it give that request's
prefill time as the growth of the histogram's sum, when its count grew by exactly one
(another client's request in between: unknown, never a mix of two).

A bench repetition must compute its whole prompt, as llama-bench does: vLLM's prefix
cache would serve the blocks an earlier repetition computed, so each ``Generate`` gets a
``cache_salt`` of its own (vLLM then shares no cached block with any other request).
"""

from __future__ import annotations

import itertools
import os
import time

from kvtop.runner.server.http import ServerClient, ServerError
from kvtop.runner.server.prom import Metrics

PREFILL = "vllm:request_prefill_time_seconds"
_salts = itertools.count(1)


def prefill_counts(client: ServerClient) -> tuple[float, float] | None:
    """(observations, seconds) of vLLM's prefill histogram now; None when not published."""
    try:
        m = Metrics(client.get_text("/metrics"))
    except ServerError:
        return None
    n, s = m.value(PREFILL + "_count"), m.value(PREFILL + "_sum")
    return (n, s) if n is not None and s is not None else None


def prefill_ms_since(client: ServerClient, before: tuple[float, float] | None, wait_s: float = 1.0) -> float | None:
    """The prefill of the one request that finished since ``before``, in ms; None when
    none did or more than one did (or vLLM restarted). vLLM records a request's stats as
    it finishes, which can be just after its last chunk reached kvtop: the histogram is
    read again for up to ``wait_s`` while it has not grown."""
    if before is None:
        return None
    deadline = time.monotonic() + wait_s
    after = prefill_counts(client)
    while after is not None and after[0] == before[0] and time.monotonic() < deadline:
        time.sleep(0.02)
        after = prefill_counts(client)
    if after is None or after[0] - before[0] != 1 or after[1] < before[1]:
        return None
    return (after[1] - before[1]) * 1000


def cache_salt() -> str:
    """A salt no other request of this or another kvtop shares."""
    return f"kvtop-{os.getpid()}-{next(_salts)}-{os.urandom(4).hex()}"
