"""llama-server's streamed chunks turned into kvtop's engine events.

With ``"return_progress": true`` every prefill batch sends ``prompt_progress``
{total, cache, processed, time_ms} (``processed`` counts the cached tokens too); with
``"timings_per_token": true`` every token carries ``timings`` {cache_n, prompt_n,
prompt_ms, predicted_n, predicted_ms, …}, measured by llama.cpp itself. kvtop adds
what only the client can see: when the request left, when each chunk arrived, so the
waterfall names the network and queue time around the server's own numbers.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping
from typing import Any

from kvtop.runner import events as ev
from kvtop.runner.server.spec_metrics import turn_spec_fields

FINISH = {"stop": "eog", "length": "n_predict", "eos": "eog", "limit": "n_predict", "word": "eog"}


def _num(obj: Mapping[str, object], key: str, default: float = 0.0) -> float:
    """A count or a time from the server, or ``default`` when it is not a finite,
    non-negative number below 1e15 (every field read here is a count or milliseconds)."""
    v = obj.get(key, default)
    if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and 0 <= v < 1e15:
        return float(v)
    return default


def chunk_text(chunk: Mapping[str, Any]) -> str:
    """The generated text of a chunk: OpenAI chat (``choices[0].delta.content``) or
    llama-server's own ``/completion`` (``content``)."""
    choices = chunk.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        delta = choices[0].get("delta") or {}
        text = delta.get("content") if isinstance(delta, dict) else None
        if text is None:
            text = choices[0].get("text")
        return text if isinstance(text, str) else ""
    text = chunk.get("content")
    return text if isinstance(text, str) else ""


def chunk_finish(chunk: Mapping[str, Any]) -> str | None:
    choices = chunk.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        reason = choices[0].get("finish_reason")
        return FINISH.get(reason, "eog") if isinstance(reason, str) else None
    if chunk.get("stop") is True:
        return FINISH.get(str(chunk.get("stop_type", "eos")), "eog")
    return None


class TurnTranslator:
    def __init__(self, turn_id: int, t_submit: float, n_ctx: int, emit: Callable[[object], None]):
        self.turn_id = turn_id
        self.t_submit = t_submit
        self.n_ctx = n_ctx
        self.emit = emit
        self.started: ev.TurnStarted | None = None
        self.total = 0
        self.cache = 0
        self.last_done = 0
        self.last_ms = 0.0
        self.t_prefill_start: float | None = None  # client clock, derived from the first progress
        self.server_prefill_ms: float | None = None  # vLLM's own, from its /metrics (runner.server.vllm_timing)
        self.server_cached: float | None = None  # the prompt tokens its prefix cache served (runner.server.vllm_depth)
        self.ubatches: list[tuple[int, float]] = []
        self.token_times: list[float] = []
        self.text: list[str] = []
        self.timings: dict[str, object] = {}
        self.t_first_visible: float | None = None
        self.finish: str | None = None
        self.t_decode_anchor: float | None = None  # client time at the server's decode start
        self.t_last_token = 0.0
        self.usage: dict[str, Any] = {}  # an OpenAI server's counts (``stream_options.include_usage``)

    def _start(self, total: int, cache: int, now: float) -> None:
        if self.started is None:
            self.total, self.cache = total, cache
            self.started = ev.TurnStarted(self.turn_id, total, cache, self.n_ctx, "server", None, 0.0, 0.0,
                                          None, now)
            self.emit(self.started)

    def feed(self, chunk: Mapping[str, Any], now: float) -> None:
        prog = chunk.get("prompt_progress")
        timings = chunk.get("timings")
        if isinstance(timings, dict):
            self.timings = timings
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.usage = usage
        if isinstance(prog, dict):
            self._progress(prog, now)
        text = chunk_text(chunk)
        if text:
            if self.started is None:
                t = self.timings
                self._start(int(_num(t, "prompt_n") + _num(t, "cache_n")), int(_num(t, "cache_n")), now)
            i = len(self.token_times)
            self.token_times.append(now)
            self.text.append(text)
            if self.t_first_visible is None:
                self.t_first_visible = now
            self.emit(ev.TokenEvent(self.turn_id, i, i, text, self.total + i, self._token_time(now)))
        self.finish = chunk_finish(chunk) or self.finish

    def _token_time(self, now: float) -> float:
        """When the server made this token, on the client's clock: the server's own
        decode time (``timings.predicted_ms``) from the first token's arrival on. Arrival
        times alone read network and buffering as decode speed: tokens held up in a
        proxy or a busy client arrive together, and a chart of tok/s per position then
        shows a spike of thousands of tok/s that the server never made."""
        ms = _num(self.timings, "predicted_ms", -1.0)
        if ms < 0:
            return now
        if self.t_decode_anchor is None:
            self.t_decode_anchor = now - ms / 1000
        t = min(max(self.t_decode_anchor + ms / 1000, self.t_last_token), now)
        self.t_last_token = t
        return t

    def _progress(self, prog: Mapping[str, object], now: float) -> None:
        total, cache = int(_num(prog, "total")), int(_num(prog, "cache"))
        done, ms = int(_num(prog, "processed")), _num(prog, "time_ms")
        self._start(total, cache, now)
        if self.t_prefill_start is None:
            self.t_prefill_start = now - ms / 1000
        if done <= self.last_done and self.ubatches:
            return
        computed = max(done - cache, 0)
        n, dt = done - max(self.last_done, cache), (ms - self.last_ms) / 1000
        if n > 0:
            self.ubatches.append((n, max(dt, 0.0)))
        self.last_done, self.last_ms = done, ms
        el = ms / 1000
        self.emit(ev.PrefillProgress(self.turn_id, done, total, cache, el, computed / el if el > 0 else 0.0,
                                     max(n, 0), max(dt, 0.0), now))

    def done(self, now: float, stop_reason: str | None = None) -> ev.TurnDone:
        t = self.timings or self._from_usage()
        if self.started is None:
            self._start(int(_num(t, "prompt_n") + _num(t, "cache_n")), int(_num(t, "cache_n")), now)
        elif not self.timings and self.usage:
            self.total, self.cache = int(_num(t, "prompt_n") + _num(t, "cache_n")), int(_num(t, "cache_n"))
        prompt_n, prompt_ms = int(_num(t, "prompt_n")), _num(t, "prompt_ms")
        pred_n, pred_ms = int(_num(t, "predicted_n", len(self.token_times))), _num(t, "predicted_ms")
        itl = [(b - a) * 1000 for a, b in zip(self.token_times, self.token_times[1:])]
        metrics = ev.TurnMetrics(
            prompt_tokens=self.total, reused_tokens=int(_num(t, "cache_n", self.cache)), prefill_tokens=prompt_n,
            prefill_s=prompt_ms / 1000, prefill_tok_s=prompt_n / (prompt_ms / 1000) if prompt_n and prompt_ms else None,
            template_s=0.0, tokenize_s=0.0, wait_s=max(0.0, (self.t_prefill_start or now) - self.t_submit),
            ttft_s=(self.t_first_visible - self.t_submit) if self.t_first_visible else None,
            decode_tokens=pred_n, decode_s=pred_ms / 1000,
            decode_tok_s=(pred_n - 1) / (pred_ms / 1000) if pred_n > 1 and pred_ms else None,
            itl_p50_ms=statistics.median(itl) if itl else None,
            itl_p95_ms=sorted(itl)[int(0.95 * (len(itl) - 1))] if itl else None,
            kv_cells_used=self.total + pred_n, n_ctx=self.n_ctx,
            first_token_s=None, ubatches=tuple(self.ubatches),
            perf={"server_timings": dict(self.timings)} if self.timings else {"server_usage": dict(self.usage)},
            timeline=self._timeline(prompt_ms),
            **turn_spec_fields(t),  # type: ignore[arg-type]  # spec_type: str, spec_drafted/accepted: int
        )
        return ev.TurnDone(self.turn_id, stop_reason or self.finish or "eog", "".join(self.text), metrics, now)

    def _from_usage(self) -> dict[str, object]:
        """A server without timings (vLLM): its token counts from ``usage``, and the decode
        time on the client's clock (first to last token arrival); the prefill time only
        where its /metrics gave it for this request (``server_prefill_ms``)."""
        u = self.usage
        if not u:
            return {}
        details = u.get("prompt_tokens_details")
        cached = _num(details, "cached_tokens") if isinstance(details, dict) else 0.0
        cached = max(cached, self.server_cached or 0.0)  # usage has no details without --enable-prompt-tokens-details
        prompt = _num(u, "prompt_tokens")
        out: dict[str, object] = {"prompt_n": max(prompt - cached, 0.0), "cache_n": cached,
                                  "predicted_n": _num(u, "completion_tokens", len(self.token_times))}
        if len(self.token_times) > 1:
            out["predicted_ms"] = (self.token_times[-1] - self.token_times[0]) * 1000
        if self.server_prefill_ms is not None:
            out["prompt_ms"] = self.server_prefill_ms
        return out

    def _timeline(self, prompt_ms: float) -> tuple[tuple[str, float, float], ...]:
        """Submit → first visible character, in three measured parts: the request and the
        server's queue (client clock), prefill (the server's own prompt_ms), and the first
        token plus its trip back (the rest)."""
        if self.t_first_visible is None:
            return ()
        ttft = self.t_first_visible - self.t_submit
        start = (self.t_prefill_start - self.t_submit) if self.t_prefill_start is not None \
            else max(ttft - prompt_ms / 1000, 0.0)
        start = min(max(start, 0.0), ttft)
        prefill = min(prompt_ms / 1000, ttft - start)
        rest = max(ttft - start - prefill, 0.0)
        return (("network + server queue", 0.0, start), ("prefill (server-measured)", start, prefill),
                ("first token + network", start + prefill, rest))
