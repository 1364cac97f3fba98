"""A batching server's poll (vLLM): no slots, a KV block pool, latency histograms.

``BatchView`` is what the server pane shows of it, in kvtop's terms: requests running
and waiting, the KV pool's share in use (and its bytes, from the model's own config
when kvtop can read it, else vLLM's pool size), the prefix-cache hit rate, preemptions,
and TTFT/ITL/queue percentiles over the last window. ``not_published`` names what this
server does not report, so the pane says so instead of showing a zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvtop.runner.server.vllm import Percentiles, VllmReading, VllmWindow, window

NOT_PUBLISHED = ("slots", "prompt progress", "per-token timings")


@dataclass(frozen=True)
class BatchView:
    running: int | None
    waiting: int | None
    kv_usage: float | None  # 0–1
    kv_tokens: int | None  # the pool's size in tokens (blocks × block size)
    block_size: int | None
    kv_pool_bytes: int | None  # the pool's bytes: the model's bytes per token × tokens, else vLLM's own figure
    kv_bytes_from: str  # "model config" or "vLLM's cache config"
    prefix_hit_rate: float | None  # over the window; None: no prefix-cache queries in it
    prefix_hit_rate_total: float | None  # since the server started
    preemptions: int | None  # since the server started
    preempted_now: int  # in the window
    percentiles: dict[str, Percentiles]  # "ttft", "itl", "queue", "prefill", "decode", "e2e"
    flops: float | None  # vLLM's estimated FLOPs in the window
    read_bytes: float | None  # vLLM's estimated bytes read in the window
    gen_tokens: float | None  # generated in the window
    not_published: tuple[str, ...] = NOT_PUBLISHED
    # the window's counter deltas (COUNTERS' keys) and "steps", the engine steps in it
    # (iteration_tokens_total's count); empty on the first poll
    deltas: dict[str, float] = field(default_factory=dict)
    # vLLM's own FLOPs/bytes estimates: "absent" (not published), "zero" (still 0 after
    # tokens were generated: --enable-mfu-metrics is off), "idle" (nothing generated yet)
    # or "counting"
    mfu: str = "absent"

    @property
    def kv_used_bytes(self) -> int | None:
        if self.kv_usage is None or self.kv_pool_bytes is None:
            return None
        return round(self.kv_usage * self.kv_pool_bytes)


def batch_view(new: VllmReading, old: VllmReading | None, interval_s: float,
               kv_bytes_per_token: int | None = None) -> tuple[BatchView, VllmWindow]:
    w = window(new, old, interval_s)
    c = new.counters
    q = c.get("prefix_queries")
    pool_tokens = new.cache.tokens
    pool: int | None
    if kv_bytes_per_token and pool_tokens:
        pool, source = kv_bytes_per_token * pool_tokens, "model config"
    elif not new.cache.overridden:
        pool, source = new.cache.memory_bytes, "vLLM's cache config"
    else:  # the space vLLM was given, not its (overridden) pool: unknown without the model's config
        pool, source = None, "nowhere: the model's config is not readable here"
    first = old is None
    view = BatchView(
        running=new.running, waiting=new.waiting, kv_usage=new.kv_usage, kv_tokens=pool_tokens,
        block_size=new.cache.block_size, kv_pool_bytes=pool, kv_bytes_from=source,
        prefix_hit_rate=None if first else w.prefix_hit_rate,
        prefix_hit_rate_total=c.get("prefix_hits", 0.0) / q if q else None,
        preemptions=int(c["preemptions"]) if "preemptions" in c else None,
        preempted_now=0 if first else int(w.deltas.get("preemptions", 0.0)),
        percentiles={} if first else w.percentiles,
        flops=None if first else w.deltas.get("flops"), read_bytes=None if first else w.deltas.get("read_bytes"),
        gen_tokens=None if first else w.deltas.get("gen"),
        deltas={} if first else {**w.deltas, **({"steps": float(w.percentiles["iteration"].n)}
                                                if "iteration" in w.percentiles else {})},
        mfu="absent" if "flops" not in c else "counting" if c["flops"] else "zero" if c.get("gen") else "idle",
    )
    return view, w


def with_model_kv(view: BatchView, bytes_per_token: float | None) -> BatchView:
    """The view with the pool's bytes from the model's facts (``-m``'s GGUF, kvtop's KV
    layout at 2 bytes a value unless told) where the served folder's config was not read."""
    from dataclasses import replace

    if view.kv_bytes_from == "model config" or not bytes_per_token or not view.kv_tokens:
        return view
    return replace(view, kv_pool_bytes=round(bytes_per_token * view.kv_tokens), kv_bytes_from="the model's facts")


WINDOW_S = 60.0  # percentiles and the hit rate over the last minute: a 1 s poll often ends no request


class BatchPoller:
    """Readings of one batching server, kept for ``WINDOW_S``: each poll's view compares
    the new reading with the oldest one inside the window (rates: with the last one)."""

    def __init__(self, kv_bytes_per_token: int | None = None):
        from collections import deque

        self.kv_bytes_per_token = kv_bytes_per_token
        self._history: deque[tuple[float, VllmReading]] = deque()

    def reset(self) -> None:
        self._history.clear()

    def observe(self, now: float, text: str) -> tuple[VllmReading, BatchView, VllmReading | None, float]:
        """(this reading, its view over the window, the previous reading, seconds since it)."""
        new = VllmReading.parse(text)
        h = self._history
        last = h[-1] if h else None
        if last is not None and (now <= last[0] or new.started != last[1].started):
            h.clear()  # another process answers now: its counters start over
            last = None
        while len(h) > 1 and now - h[1][0] >= WINDOW_S:
            h.popleft()
        old = h[0] if h else None
        view, _ = batch_view(new, old[1] if old else None, now - old[0] if old else 0.0, self.kv_bytes_per_token)
        h.append((now, new))
        return new, view, last[1] if last else None, now - last[0] if last else 0.0
