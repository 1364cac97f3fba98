"""``kvtop load -o json`` and ``-o jsonl``: a run header, then one object per level.

json: ``{"run": {...}, "levels": [...]}``; jsonl: the ``{"run": {...}}`` line, then one
level a line. The header says what was run and where: kvtop's version and each server's
(its build, slots, context, model), the model, the settings as given (``requests_per_user``
is per user: a level of 4 users sent 4 x that many), the machine, the roof's formula and
inputs, the other processes' share of the CPU over the run and the busy warning.

A level keeps apart what counts the whole level and what describes one request (a trial
read ``prompt_tokens`` 16 beside ``generated_tokens`` 64 and could not tell which was which):
``level`` holds the counts and totals over all its requests (requests by outcome, tokens
generated in all, the throughput, the peak KV, the CPU); ``per_request`` what each request
was and saw (its prompt's and reply's tokens, the median user's rate, TTFT/ITL/e2e
percentiles). ``flat_levels`` reads either format back into the flat rows of csv.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from typing import Any

from kvtop.runner.commands.common import Report, json_safe
from kvtop.runner.commands.load_rows import FIELDS

HEAD = ("server", "users", "slots", "rate", "partial", "busy", "unexplained")
PER_REQUEST = ("prompt_tokens", "generated_tokens_per_request", "per_user_gen_tok_s", "ttft_p50_s", "ttft_p95_s",
               "ttft_p99_s", "itl_p50_s", "itl_p95_s", "itl_p99_s", "e2e_p50_s")
ROOF = ("batched_roof_tok_s", "compute_roof_tok_s", "more_conversations_fit")
LEVEL = tuple(f for f in FIELDS if f not in HEAD + PER_REQUEST + ROOF)


def level_object(r: Report) -> dict[str, Any]:
    done = r.get("completed") or 0
    per = {**r, "generated_tokens_per_request": r["generated_tokens"] / done if done else None}
    return {**{k: r.get(k) for k in HEAD}, "level": {k: r.get(k) for k in LEVEL},
            "per_request": {k: per.get(k) for k in PER_REQUEST}, "roof": {k: r.get(k) for k in ROOF}}


def flat_levels(text: str) -> list[Report]:
    """The levels of a json or jsonl output as flat rows (the fields of csv)."""
    try:
        docs = [json.loads(text)]
    except json.JSONDecodeError:  # jsonl: an object a line
        docs = [json.loads(line) for line in text.splitlines() if line.strip()]
    levels = docs[0]["levels"] if "levels" in docs[0] else [d for d in docs if "run" not in d]
    return [{k: v for part in (lv, lv["level"], lv["per_request"], lv["roof"]) for k, v in part.items()
             if k not in ("level", "per_request", "roof")} for lv in levels]


def _dist(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def machine() -> dict[str, Any]:
    import platform

    from kvtop.runner.system.cpu_name import cpu_name

    try:
        load: list[float] | None = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    return {"cpu_name": cpu_name(), "cpu_count": os.cpu_count(), "os": f"{platform.system()} {platform.release()}",
            "python": platform.python_version(), "loadavg_at_end": load}


def settings(a: argparse.Namespace) -> dict[str, Any]:
    closed = not a.rate
    return {"levels": list(a.rate or a.users or []) or "1,2,4,8 up to the slots", "level_kind": "users" if closed
            else "rate_per_s", "n_prompt": a.n_prompt, "n_predict": a.n_predict,
            ("requests_per_user" if closed else "requests_per_rate"): a.requests, "duration_s": a.duration,
            "shared_prefix": a.shared_prefix, "endpoint": a.endpoint, "warmup": a.warmup,
            "cache_type_k": a.cache_type_k, "cache_type_v": a.cache_type_v, "n_gpu_layers": a.n_gpu_layers,
            "bandwidth_gbs": a.bandwidth_gbs, "tflops": a.tflops, "slo_ttft_s": a.slo_ttft, "slo_tok_s": a.slo_tok_s,
            "force": a.force}


def run_header(a: argparse.Namespace, urls: Sequence[str], infos: Sequence[Any], physics: Any,
               rows: Sequence[Report], local: bool) -> dict[str, Any]:
    """The run: what was asked, of which servers and model, on what machine, under which roof
    (the notes go to stderr as for csv: said once)."""
    from kvtop.runner.commands.load_checks import run_busy, run_share

    first = infos[0] if infos else None
    path = getattr(a, "model", None) or (first.model_path if first else None)
    mine = [r for r in rows if r["server"] == "all"] or list(rows)
    return {
        "kvtop": _dist("kvtop-llm"), "command": "kvtop load",
        "servers": [{"url": u, "build": i.build_info, "slots": i.total_slots, "n_ctx_per_slot": i.n_ctx,
                     "model_path": i.model_path, "local": local} for u, i in zip(urls, infos)],
        "model": {"path": path, "name": os.path.basename(path) if path else getattr(first, "model_id", None),
                  "architecture": getattr(first, "architecture", None), "n_params": getattr(first, "n_params", None),
                  "bytes": getattr(first, "model_bytes", None)},
        "settings": settings(a), "machine": machine(),
        "roof": physics.inputs() | {"formula_here": physics.formula()} if physics is not None else None,
        "others_cpu_share": run_share(mine), "busy": run_busy(rows, local),
    }


def format_json(rows: list[Report], header: dict[str, Any]) -> str:
    return json.dumps(json_safe({"run": header, "levels": [level_object(r) for r in rows]}), indent=2,
                      allow_nan=False)


def format_jsonl(rows: list[Report], header: dict[str, Any]) -> str:
    return "\n".join(json.dumps(json_safe(x), allow_nan=False)
                     for x in [{"run": header}] + [level_object(r) for r in rows])


def render(fmt: str, rows: list[Report], notes: list[str], header: dict[str, Any] | None = None) -> str:
    """Any format: md and csv (runner/commands/load_output.py), json and jsonl with ``header``."""
    from kvtop.runner.commands.load_output import format_csv, format_md

    if fmt == "md":
        return format_md(rows, notes)
    if fmt == "csv":
        return format_csv(rows)
    return (format_json if fmt == "json" else format_jsonl)(rows, header or {})
