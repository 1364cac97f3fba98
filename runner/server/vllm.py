"""What a vLLM server publishes on ``/metrics``, read into kvtop's figures.

vLLM has no slots: it schedules every request into one continuous batch, and its KV
cache is a pool of blocks (``block_size`` tokens each, 128 on the CPU build) that it
reports as a fraction in use (``vllm:kv_cache_usage_perc``, 0–1). The pool's size is in
``vllm:cache_config_info``'s labels (``num_gpu_blocks``, ``block_size``,
``kv_cache_memory_bytes``). Counters are since the server started; the latency
histograms (TTFT, inter-token, queue, prefill, decode) give percentiles over the last
window as the difference of two readings (``runner.server.prom``).

Names are those of vLLM 0.32's v1 engine (recorded in tests/data/vllm/).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvtop.runner.server.prom import Histogram, Metrics

PREFIX = "vllm:"
HISTOGRAMS = {"ttft": "time_to_first_token_seconds", "itl": "inter_token_latency_seconds",
              "queue": "request_queue_time_seconds", "prefill": "request_prefill_time_seconds",
              "decode": "request_decode_time_seconds", "e2e": "e2e_request_latency_seconds",
              "iteration": "iteration_tokens_total"}  # its count: the engine steps
COUNTERS = {"prompt": "prompt_tokens_total", "gen": "generation_tokens_total",
            "prefix_queries": "prefix_cache_queries_total", "prefix_hits": "prefix_cache_hits_total",
            "preemptions": "num_preemptions_total", "flops": "estimated_flops_per_gpu_total",
            "read_bytes": "estimated_read_bytes_per_gpu_total", "requests_done": "request_success_total"}


def is_vllm_metrics(text: str) -> bool:
    """A ``/metrics`` answer that is vLLM's: its own metric names, one line starting ``vllm:``."""
    return text.startswith(PREFIX) or ("\n" + PREFIX) in text[:2_000_000]


def _count(v: float | None, hi: float = 1e18) -> float | None:
    return v if v is not None and math.isfinite(v) and 0 <= v <= hi else None


@dataclass(frozen=True)
class CacheConfig:
    block_size: int | None
    num_blocks: int | None
    memory_bytes: int | None  # the KV space vLLM was given (the pool, unless its block count was overridden)
    overridden: bool = False  # --num-gpu-blocks-override: the pool is smaller than memory_bytes

    @property
    def tokens(self) -> int | None:
        return self.block_size * self.num_blocks if self.block_size and self.num_blocks else None


def _label_int(m: Metrics, metric: str, key: str) -> int | None:
    s = m.first(PREFIX + metric)
    v = s.label(key) if s is not None else None
    return int(v) if v is not None and v.isdigit() and 0 < int(v) < 1 << 50 else None


@dataclass(frozen=True)
class VllmReading:
    """One ``/metrics`` answer of a vLLM server."""

    running: int | None
    waiting: int | None
    kv_usage: float | None  # 0–1, the share of the block pool in use
    counters: dict[str, float]  # COUNTERS' keys: since the server started
    histograms: dict[str, Histogram]  # HISTOGRAMS' keys
    cache: CacheConfig
    model: str | None  # the served model's name (its model_name label)
    started: float | None  # process_start_time_seconds: one value per process

    @classmethod
    def parse(cls, text: str) -> VllmReading:
        m = Metrics(text)
        counters = {k: v for k, name in COUNTERS.items() if (v := _count(m.value(PREFIX + name))) is not None}
        hists = {k: h for k, name in HISTOGRAMS.items() if (h := m.histogram(PREFIX + name)) is not None}
        usage = _count(m.value(PREFIX + "kv_cache_usage_perc"), 1.0)
        running, waiting = _count(m.value(PREFIX + "num_requests_running"), 1e9), \
            _count(m.value(PREFIX + "num_requests_waiting"), 1e9)
        cache = CacheConfig(_label_int(m, "cache_config_info", "block_size"),
                            _label_int(m, "cache_config_info", "num_gpu_blocks"),
                            _label_int(m, "cache_config_info", "kv_cache_memory_bytes"),
                            _label_int(m, "cache_config_info", "num_gpu_blocks_override") is not None)
        first = m.first(PREFIX + "num_requests_running")
        started = _count(m.value("process_start_time_seconds"))
        return cls(int(running) if running is not None else None, int(waiting) if waiting is not None else None,
                   usage, counters, hists, cache, first.label("model_name") if first else None, started)


@dataclass(frozen=True)
class Percentiles:
    n: int  # observations in the window
    p50: float | None
    p95: float | None
    p99: float | None


@dataclass(frozen=True)
class VllmWindow:
    """Two readings apart: what happened in between (``interval_s``)."""

    interval_s: float
    deltas: dict[str, float]  # COUNTERS' keys that grew (a restart: the new reading's own)
    percentiles: dict[str, Percentiles]  # HISTOGRAMS' keys with observations in the window

    @property
    def prefix_hit_rate(self) -> float | None:
        q = self.deltas.get("prefix_queries")
        return self.deltas.get("prefix_hits", 0.0) / q if q else None


def window(new: VllmReading, old: VllmReading | None, interval_s: float) -> VllmWindow:
    restarted = old is None or any(new.counters.get(k, 0.0) < v for k, v in old.counters.items())
    base = {} if restarted or old is None else old.counters
    deltas = {k: v - base.get(k, 0.0) for k, v in new.counters.items()}
    pct = {}
    for k, h in new.histograms.items():
        d = h.minus(None if restarted or old is None else old.histograms.get(k))
        if d.count > 0:
            pct[k] = Percentiles(int(d.count), d.quantile(0.5), d.quantile(0.95), d.quantile(0.99))
    return VllmWindow(interval_s, deltas, pct)
