"""Per-turn timings as CSV, safe to open in a spreadsheet.

A cell starting with ``=``, ``+``, ``-``, ``@`` (or tab/CR) is a formula to
spreadsheet programs; user and model text can start that way, so such cells get
a leading apostrophe (OWASP's CSV-injection advice).
"""

from __future__ import annotations

import csv
from typing import IO

from kvtop.runner.redact import scrub

COLUMNS = ["turn", "user", "stop_reason", "prompt_tokens", "reused_tokens", "prefill_tokens", "prefill_s",
           "prefill_tok_s", "ttft_s", "decode_tokens", "decode_s", "decode_tok_s", "itl_p50_ms", "itl_p95_ms",
           "kv_cells_used", "n_ctx"]


def safe_cell(value) -> str:
    text = scrub("" if value is None else str(value))  # no API key or URL login (runner/redact.py)
    if text[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + text
    return text


def write_turns_csv(fh: IO[str], turns: list[dict]) -> None:
    w = csv.writer(fh)
    w.writerow(COLUMNS)
    for i, t in enumerate(turns, 1):
        m = t.get("metrics", {})
        row = [i, t.get("user", ""), t.get("stop_reason", "")] + [m.get(c) for c in COLUMNS[3:]]
        w.writerow([safe_cell(v) for v in row])
