"""What one streamed event of a load request carries: its tokens, the server's own counts
(llama-server's ``timings``; an OpenAI server's ``usage`` in its last event), and how many
requests a server is busy with (llama-server's ``/slots``; a server without slots: the
requests its ``/metrics`` says are running)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, overload

from kvtop.runner.server.http import ServerClient, ServerError

if TYPE_CHECKING:
    from kvtop.runner.server.load_driver import RequestResult


@overload
def _num(v: object) -> float | None: ...
@overload
def _num(v: object, kind: type[int]) -> int | None: ...
def _num(v: object, kind: type[float] | type[int] = float) -> float | None:
    if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and 0 <= v < 1e12:
        return kind(v)
    return None


def take_timings(r: RequestResult, ev: dict[str, Any]) -> None:
    t = ev.get("timings")
    u = ev.get("usage")
    if isinstance(u, dict) and not isinstance(t, dict):  # an OpenAI server's counts, no times
        r.prompt_n, r.predicted_n = _num(u.get("prompt_tokens"), int), _num(u.get("completion_tokens"), int)
        details = u.get("prompt_tokens_details")
        r.cache_n = _num(details.get("cached_tokens"), int) if isinstance(details, dict) else None
        return
    if not isinstance(t, dict):
        return
    r.prompt_n, r.prompt_ms = _num(t.get("prompt_n"), int), _num(t.get("prompt_ms"))
    r.predicted_n, r.predicted_ms = _num(t.get("predicted_n"), int), _num(t.get("predicted_ms"))
    r.cache_n = _num(t.get("cache_n"), int)
    r.draft_n, r.draft_accepted = _num(t.get("draft_n"), int), _num(t.get("draft_n_accepted"), int)


def tokens_in(ev: dict[str, Any], endpoint: str) -> int:
    if endpoint == "completion":
        toks = ev.get("tokens")
        if isinstance(toks, list):
            return len(toks)
        return 1 if ev.get("content") else 0
    choices = ev.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        delta = choices[0].get("delta")
        if isinstance(delta, dict):
            return 1 if delta.get("content") else 0
        return 1 if choices[0].get("text") else 0  # /v1/completions
    return 0


def busy_slots(client: ServerClient) -> int:
    try:
        slots = client.get_json("/slots")
    except ServerError as exc:
        if exc.status != 404:
            raise
        from kvtop.runner.server.vllm import VllmReading, is_vllm_metrics

        text = client.get_text("/metrics")
        if not is_vllm_metrics(text):
            raise
        return VllmReading.parse(text).running or 0
    return sum(1 for s in slots if isinstance(s, dict) and s.get("is_processing")) if isinstance(slots, list) else 0
