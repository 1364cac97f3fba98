"""One row of ``kvtop load`` per level (and per server of a fleet): what users saw, what
the server computed, and the roof the hardware puts over it.

Definitions (the README's table repeats them):
- ``gen_tok_s``: generated tokens / the level's window (first request sent to last
  token received): the throughput the users got together.
- ``per_user_gen_tok_s``: the median over requests of the server's own decode rate
  (``predicted_n / predicted_ms``): what one user's reply streams at.
- ``prompt_tokens``: the mean prompt length the server saw (computed + reused from its
  cache), which is -p when the prompt went in exactly.
- ``prompt_tok_s``: prompt tokens computed / the time some prompt was being computed
  (each request's ``prompt_ms`` from the server, ending at its first token on this clock).
- ``ttft_*``, ``itl_*``, ``e2e_*``: the client's clock, linear-interpolated percentiles.
- ``completed`` … ``cancelled``: the requests by outcome (runner/server/load_outcomes.py);
  ``failed`` is every one that neither completed nor was cancelled. Rates, percentiles
  and token counts are over the completed requests only.
- ``partial``: None, or why the level ended early (a server stopped answering).
- ``others_cpu_share``: other processes' share of this machine's CPU during the level
  (0..1); ``busy``: the warning when it is a quarter or more and the server is local;
  ``unexplained``: why each user's rate is not what the roof and the load allow
  (runner/commands/load_checks.py), else None.
- ``kv_cells_used``: the most cells the busy slots held at a /slots poll (every 0.5 s),
  and never less than the largest request held at its end (its prompt, what the cache
  gave it and its reply): a level shorter than a poll's interval once read 0.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from kvtop.runner.commands.common import Report

if TYPE_CHECKING:
    from kvtop.runner.commands.load_physics import LoadPhysics
    from kvtop.runner.server.load_driver import LevelRun, RequestResult

from kvtop.runner.server.load_outcomes import NOT_COMPLETED, counts

FIELDS = (
    "server", "users", "slots", "rate", "partial", "requests", "completed", "failed", "truncated", "refused",
    "timed_out", "unreachable", "cancelled", "prompt_tokens", "generated_tokens",
    "server_generated_tokens", "window_s", "gen_tok_s", "per_user_gen_tok_s", "prompt_tok_s",
    "ttft_p50_s", "ttft_p95_s", "ttft_p99_s", "itl_p50_s", "itl_p95_s", "itl_p99_s", "e2e_p50_s",
    "deferred", "kv_cells_used", "batched_roof_tok_s", "compute_roof_tok_s", "more_conversations_fit",
    "kvtop_cpu", "others_cpu", "others_cpu_share", "client_saturated", "busy", "unexplained",
    "draft_tokens", "accepted_tokens", "acceptance",
)
# kvtop's own threads and parsing run under one GIL: near one core, the client is what limits
SATURATED_CORES = 0.85


def cpu_share(others_cores: float | None) -> float | None:
    """Other processes' share of this machine's CPU (0..1) from the cores they used."""
    import os

    return None if others_cores is None else min(max(others_cores / (os.cpu_count() or 1), 0.0), 1.0)


def percentile(xs: list[float], q: float) -> float | None:
    """The q-th percentile (0-100), linear between the closest ranks (numpy's default)."""
    if not xs:
        return None
    s = sorted(xs)
    pos = (len(s) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def union_seconds(spans: list[tuple[float, float]]) -> float:
    """The time covered by at least one of the (start, end) spans."""
    total, end = 0.0, None
    for a, b in sorted(spans):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def user_rate(r: RequestResult) -> float | None:
    """One request's decode rate: the server's timings, else first to last token here."""
    if r.predicted_n and r.predicted_ms:
        return r.predicted_n / (r.predicted_ms / 1000.0)
    if len(r.chunks) > 1:
        dt = r.chunks[-1][0] - r.chunks[0][0]
        return (r.tokens - r.chunks[0][1]) / dt if dt > 0 else None
    return None


def _prefill_spans(done: list[RequestResult]) -> list[tuple[float, float]]:
    return [(r.chunks[0][0] - r.prompt_ms / 1000.0, r.chunks[0][0]) for r in done if r.chunks and r.prompt_ms]


def _peak_cells(polled: int | None, done: list[RequestResult]) -> int | None:
    """One server's peak cells: its polls' peak, or more where one request held more."""
    held = [r.prompt_n + (r.cache_n or 0) + r.tokens for r in done if r.prompt_n is not None]
    if polled is None and not held:
        return None
    return max(polled or 0, max(held, default=0))


def _pcts(prefix: str, xs: list[float]) -> dict[str, float | None]:
    return {f"{prefix}_p{q}_s": percentile(xs, q) for q in (50, 95, 99)}


def _drafts(done: list[RequestResult]) -> dict[str, float | int | None]:
    """A speculating server's drafted and accepted tokens over the level's requests
    (their timings' draft_n / draft_n_accepted), and the share kept; None when none drafted."""
    drafted = sum(r.draft_n or 0 for r in done if getattr(r, "draft_n", None))
    accepted = sum(r.draft_accepted or 0 for r in done if getattr(r, "draft_n", None))
    if not drafted:
        return {"draft_tokens": None, "accepted_tokens": None, "acceptance": None}
    return {"draft_tokens": drafted, "accepted_tokens": accepted, "acceptance": accepted / drafted}


def build_row(run: LevelRun, server: int | None, physics: LoadPhysics | None = None, servers: int = 1) -> Report:
    """The row for ``server`` (index into the fleet) or, with None, every server together."""
    mine = [r for r in run.results if server is None or r.server == server]
    done = [r for r in mine if r.ok]
    failed = [r for r in mine if r.kind in NOT_COMPLETED]
    counted = done + failed
    window = (max(r.t_end for r in counted) - min(r.t_send for r in counted)) if counted else 0.0
    generated = sum(r.tokens for r in done)
    prefill = union_seconds(_prefill_spans(done))
    prompt_n = [r.prompt_n for r in done if r.prompt_n is not None]  # computed (not from the cache)
    seen = [r.prompt_n + (r.cache_n or 0) for r in done if r.prompt_n is not None]  # the whole prompt
    rates = [x for x in (user_rate(r) for r in done) if x is not None]
    idx = range(servers) if server is None else [server]
    server_gen = [run.watch.generated(i) for i in idx]
    deferred = [run.watch.max_deferred[i] for i in idx]
    kv = [_peak_cells(run.watch.max_kv[i], [r for r in done if r.server == i]) for i in idx]
    users = run.users if run.users is None or server is None else len(range(server, run.users, servers))
    own, others = run.watch.cpu()
    run_slots = getattr(run, "slots", None)
    slots = sum(run_slots[i] for i in idx) if run_slots else None
    row = {
        "server": run.watch.urls[server] if server is not None else "all" if servers > 1 else run.watch.urls[0],
        "users": users, "slots": slots, "rate": run.rate, "partial": getattr(run, "dead", None) or getattr(run, "restarted", None),
        "requests": len(counted), **counts(mine), "completed": len(done), "failed": len(failed), "prompt_tokens": round(statistics.mean(seen)) if seen else None,
        "generated_tokens": generated,
        "server_generated_tokens": None if None in server_gen else sum(n for n in server_gen if n is not None),
        "window_s": window, "gen_tok_s": generated / window if window > 0 else None,
        "per_user_gen_tok_s": statistics.median(rates) if rates else None,
        "prompt_tok_s": sum(prompt_n) / prefill if prefill > 0 and prompt_n else None,
        **_pcts("ttft", [r.ttft_s for r in done if r.ttft_s is not None]),
        **_pcts("itl", [x for r in done for x in r.itls()]),
        "e2e_p50_s": percentile([r.e2e_s for r in done], 50),
        "deferred": None if all(d is None for d in deferred) else sum(d or 0 for d in deferred),
        "kv_cells_used": None if all(k is None for k in kv) else sum(k or 0 for k in kv),
        "kvtop_cpu": own, "others_cpu": others, "others_cpu_share": cpu_share(others),
        "client_saturated": own is not None and own >= SATURATED_CORES,
        **_drafts(done),
    }
    row.update(physics.figures(row, run, idx) if physics is not None else
               dict.fromkeys(("batched_roof_tok_s", "compute_roof_tok_s", "more_conversations_fit")))
    return {k: row.get(k) for k in FIELDS}


def concurrency(run: LevelRun, server: int | None = None) -> float:
    """How many requests were in flight on average: the batch the server saw."""
    mine = [r for r in run.results if (server is None or r.server == server) and r.ok]
    window = run.t_end - run.t_start
    return sum(r.e2e_s for r in mine) / window if window > 0 and mine else 0.0
