"""``kvtop load``'s output: md (a table like llama-bench's), csv, json, jsonl, and a plot.

json/jsonl hold a run header and every field of ``runner.commands.load_rows.FIELDS``
per level with their full precision (None where a figure is unknown, never NaN), the
level's counts apart from what describes one request (runner/commands/load_json.py);
csv the same fields as text; md the columns a person reads, the notes under it. The
plot (``--plot FILE``): runner/commands/load_plot.py.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from typing import Any

from kvtop.runner.commands.common import Report
from kvtop.runner.commands.load_rows import FIELDS

FORMATS = ("md", "csv", "json", "jsonl")


def _known(v: object) -> bool:
    return v is not None and not (isinstance(v, float) and not math.isfinite(v))


def _text(v: object) -> str:
    if not _known(v):
        return ""
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, float):
        return f"{v:.6f}"
    return str(v)


def format_csv(rows: list[Report]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n")
    w.writerow(FIELDS)
    for r in rows:
        w.writerow([_text(r.get(f)) for f in FIELDS])
    return buf.getvalue().rstrip("\n")


def _f(v: Any, spec: str = ".2f", scale: float = 1.0) -> str:
    return format(v * scale if scale != 1.0 else v, spec) if _known(v) else "?"


def _pct3(r: Report, name: str, spec: str, scale: float = 1.0) -> str:
    return " / ".join(_f(r[f"{name}_p{q}_s"], spec, scale) for q in (50, 95, 99))


def _level(r: Report) -> str:
    text = str(r["users"]) if r["users"] is not None else f"{r['rate']:g}/s"
    text += " (partial)" if r.get("partial") else ""
    return text + " !" if r.get("unexplained") else text  # the note under the table says why


_SHORT = (("truncated", "truncated"), ("refused", "refused"), ("timed_out", "timed out"),
          ("unreachable", "unreachable"), ("cancelled", "cancelled"))


def outcomes(r: Report) -> str:
    """The requests that did not complete, by outcome: ``2 truncated, 1 refused`` (the md table, the live pane)."""
    return ", ".join(f"{r[k]} {word}" for k, word in _SHORT if r.get(k)) or "-"


# (heading, cell, right-aligned)
COLUMNS = (
    ("users", _level, True),
    ("slots", lambda r: _f(r.get("slots"), "d"), True),
    ("ok/fail", lambda r: f"{r['completed']}/{r['failed']}", True),
    ("not completed", outcomes, False),
    ("gen t/s (all, with waits)", lambda r: _f(r["gen_tok_s"]), True),
    ("per user decode t/s", lambda r: _f(r["per_user_gen_tok_s"]), True),
    ("prompt t/s", lambda r: _f(r["prompt_tok_s"], ".1f"), True),
    ("TTFT p50/95/99 s", lambda r: _pct3(r, "ttft", ".3f"), True),
    ("ITL p50/95/99 ms", lambda r: _pct3(r, "itl", ".1f", 1000.0), True),
    ("e2e p50 s", lambda r: _f(r["e2e_p50_s"], ".2f"), True),
    ("deferred", lambda r: _f(r["deferred"], "d"), True),
    ("KV cells", lambda r: _f(r["kv_cells_used"], "d"), True),
    ("bw roof t/s", lambda r: _f(r["batched_roof_tok_s"], ".1f"), True),
    ("compute roof t/s", lambda r: _f(r["compute_roof_tok_s"], ".1f"), True),
    ("+fit", lambda r: _f(r["more_conversations_fit"], "d"), True),
    ("kvtop CPU", lambda r: _f(r["kvtop_cpu"]), True),
    ("others CPU", lambda r: _f(r["others_cpu"]) + (" busy" if r.get("busy") else ""), True),
)


def format_md(rows: list[Report], notes: list[str]) -> str:
    cols = list(COLUMNS)
    if len({r["server"] for r in rows}) > 1:  # a fleet: which server each row is
        cols.insert(0, ("server", lambda r: r["server"], False))
    cells = [[c[1](r) for c in cols] for r in rows]
    widths = [max([len(c[0])] + [len(row[i]) for row in cells]) for i, c in enumerate(cols)]

    def line(values: Sequence[str]) -> str:
        return "|" + "".join(f" {v:>{w}} |" if c[2] else f" {v:<{w}} |" for v, w, c in zip(values, widths, cols))

    out = [line([c[0] for c in cols]),
           "|" + "".join(f" {'-' * (w - 1)}{':' if c[2] else '-'} |" for w, c in zip(widths, cols))]
    out += [line(c) for c in cells]
    return "\n".join(out + [""] + notes).rstrip("\n")


def knee(rows: list[Report], slo_ttft: float | None, slo_tok_s: float | None) -> Report | None:
    """The last level (most users) that still meets both targets, among rows in order."""
    best = None
    for r in rows:
        if meets(r, slo_ttft, slo_tok_s):
            best = r
    return best


def meets(r: Report, slo_ttft: float | None, slo_tok_s: float | None) -> bool:
    if slo_ttft is not None and (r["ttft_p95_s"] is None or r["ttft_p95_s"] > slo_ttft):
        return False
    if slo_tok_s is not None and (r["per_user_gen_tok_s"] is None or r["per_user_gen_tok_s"] < slo_tok_s):
        return False
    return True
