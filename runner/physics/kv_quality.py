"""The KV pane's quality lines and the Estimate pane's advice from a live measurement of
the chat (runner.engine.live_kld) or one kept from before (runner.commands.kld_cache):
what each cache type saves at the chat's context beside what it costs in KLD, and how
many tokens that rests on. Plain text, for any screen."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kvtop.runner.units import fmt_size as fmt_bytes  # the panes' one form for bytes

SOURCE = "chat"  # a kept measurement made on a chat in the app, not by ``kvtop kld``


@dataclass(frozen=True)
class Quality:
    """One candidate's measured quality against its base, and its bytes at the chat's context."""

    type_k: str
    type_v: str
    base_k: str
    base_v: str
    count: int  # positions scored
    kld_mean: float
    kld_99: float
    same_top: float
    n_tokens: int  # the tokens it rests on
    here: bool  # measured on this chat (else kept from an earlier one)
    candidate_bytes: int | None = None  # KV bytes at n_ctx
    base_bytes: int | None = None
    n_ctx: int = 0
    partial: bool = False
    source: str = SOURCE  # kept ones: "chat", or "" for kvtop kld's text


def chat_digest(messages: Sequence[tuple[str, str]]) -> str:
    """The kept measurement's key for a chat's text (the text itself is never kept)."""
    return hashlib.sha256(json.dumps(list(messages), ensure_ascii=False).encode("utf-8", "replace")).hexdigest()


def entry(q: Quality, rms_p_diff: float, text_sha256: str) -> dict[str, Any]:
    """A chat's measurement as ``kld_cache`` keeps it (numbers only; the text by its digest)."""
    return {"type_k": q.type_k, "type_v": q.type_v, "base_type_k": q.base_k, "base_type_v": q.base_v,
            "n_ctx": q.n_tokens, "text_sha256": text_sha256, "count": q.count, "kld_mean": q.kld_mean,
            "kld_99": q.kld_99, "same_top": q.same_top, "rms_p_diff": rms_p_diff, "source": SOURCE,
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def kept(entries: list[dict[str, Any]], base: tuple[str, str], pair: tuple[str, str]) -> dict[str, Any] | None:
    """The kept measurement of ``pair`` against ``base`` on the most positions (the newest of equals)."""
    mine = [e for e in entries if (e.get("type_k"), e.get("type_v")) == pair
            and (e.get("base_type_k"), e.get("base_type_v")) == base and isinstance(e.get("count"), int)
            and all(isinstance(e.get(k), (int, float)) for k in ("kld_mean", "kld_99", "same_top"))]
    return max(mine, key=lambda e: (e["count"], str(e.get("measured_at", "")))) if mine else None


def line(q: Quality, running: tuple[str, str]) -> str:
    """"q8_0/q8_0: −47% KV (5.6 MiB at 2,048), KLD 0.0009 (99%: 0.008), same top token 99.3%
    over this chat's 1,204 tokens"."""
    name = f"{q.type_k}/{q.type_v}" + (" (running)" if (q.type_k, q.type_v) == running else "")
    saved = ""
    if q.candidate_bytes and q.base_bytes:
        pct = f"{100 * (q.candidate_bytes - q.base_bytes) / q.base_bytes:+.0f}%".replace("-", "\u2212")
        saved = f"{pct} KV ({fmt_bytes(q.candidate_bytes)} at {q.n_ctx:,}), "
    against = f" against {q.base_k}/{q.base_v}" if (q.base_k, q.base_v) != running else ""
    where = (f"this chat's {q.n_tokens:,} tokens" if q.here else f"{q.n_tokens:,} tokens of an earlier chat"
             if q.source == SOURCE else f"{q.count:,} positions of kvtop kld's text")
    part = " (stopped early)" if q.partial else ""
    return (f"{name}: {saved}KLD {q.kld_mean:.4f} (99%: {q.kld_99:.3f}), same top token {100 * q.same_top:.1f}%"
            f"{against} over {where}{part}")


def brief(q: Quality) -> str:
    """A measurement in the KV pane's one row of them ("q8_0 0.0009 (−47%)", after "KLD "):
    the pane keeps that row whether measured or not (tui/panes/kv.py), so a measurement never
    moves the dashboard's pages; where the whole ``line`` fits the row, it is shown instead."""
    name = q.type_k if q.type_k == q.type_v else f"{q.type_k}/{q.type_v}"
    saved = ""
    if q.candidate_bytes and q.base_bytes:
        saved = f" ({100 * (q.candidate_bytes - q.base_bytes) / q.base_bytes:+.0f}%)".replace("-", "\u2212")
    return f"{name} {q.kld_mean:.4f}{saved}" + (" part" if q.partial else "")


def advice(qs: Sequence[Quality], running: tuple[str, str]) -> str:
    """The Estimate pane's sentence: what the best-measured cheaper cache buys at what cost,
    or what the running quantized cache costs."""
    if not qs:
        return ""
    where = "measured here" if qs[0].here else "measured on an earlier chat"
    mine = next((q for q in qs if (q.type_k, q.type_v) == running), None)
    if mine is not None:
        return (f"-ctk {mine.type_k} -ctv {mine.type_v} costs KLD {mine.kld_mean:.4f} against "
                f"{mine.base_k}/{mine.base_v} (same top token {100 * mine.same_top:.1f}%), {where}")
    for q in qs:  # q8_0 first: the cheapest loss that saves memory
        if q.candidate_bytes and q.base_bytes and q.candidate_bytes < q.base_bytes:
            fit = q.base_bytes / q.candidate_bytes
            return (f"-ctk {q.type_k} -ctv {q.type_v} would fit {fit:.1f}x the context at KLD {q.kld_mean:.4f} "
                    f"(same top token {100 * q.same_top:.1f}%), {where}")
    return ""
