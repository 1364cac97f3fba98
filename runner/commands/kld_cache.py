"""``kvtop kld``'s measurements, kept per model file so ``kvtop estimate`` can list each KV
cache type's KLD beside its bytes: numbers only (no tokens, no text; the text by its
SHA-256), one JSON file per model under the cache folder's ``kld/``, the latest measurement
per (cache types, base types, -c, text) kept. The app's F7 keeps its measurements of a chat
here too (``"source": "chat"``, ``n_ctx`` the chat's tokens: runner/physics/kv_quality.py)."""

from __future__ import annotations

import hashlib
import json
import os
import time
from typing import Any

from kvtop.runner.model.facts import ModelFacts
from kvtop.runner.physics.kld import KldStats
from kvtop.runner.physics.kv_bytes import kv_layout

LISTED = (("f16", "f16"), ("q8_0", "q8_0"), ("q4_0", "q4_0"))  # the types estimate always lists
_KEY = ("type_k", "type_v", "base_type_k", "base_type_v", "n_ctx", "text_sha256")


def _file(cache_dir: str, model: str) -> str:
    st = os.stat(model)
    ident = f"{os.path.realpath(model)}\0{st.st_size}\0{int(st.st_mtime)}"
    return os.path.join(cache_dir, "kld", hashlib.sha256(ident.encode()).hexdigest()[:32] + ".json")


def text_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", errors="replace")).hexdigest()


def measured(cache_dir: str, model: str) -> list[dict[str, Any]]:
    """The model's kept measurements ([] when none, or the file is unreadable)."""
    try:
        with open(_file(cache_dir, model), encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return []
    return [e for e in data if isinstance(e, dict)] if isinstance(data, list) else []


def remember(cache_dir: str, model: str, entry: dict[str, Any]) -> None:
    """Keep ``entry`` (replacing one with the same key); a folder that cannot be written is
    skipped: the report was printed."""
    try:
        kept = [e for e in measured(cache_dir, model) if any(e.get(k) != entry.get(k) for k in _KEY)]
        path = _file(cache_dir, model)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(kept + [entry], fh, indent=1)
        os.replace(tmp, path)
    except OSError:
        pass


def entry_of(stats: KldStats, type_k: str, type_v: str, base_k: str, base_v: str, n_ctx: int,
             text_sha256: str) -> dict[str, Any]:
    return {"type_k": type_k, "type_v": type_v, "base_type_k": base_k, "base_type_v": base_v, "n_ctx": n_ctx,
            "text_sha256": text_sha256, "count": stats.count, "kld_mean": stats.kld_mean,
            "kld_99": stats.kld_percentiles["99.0%"], "same_top": stats.same_top, "rms_p_diff": stats.rms_p_diff,
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def kv_type_rows(facts: ModelFacts, n_ctx: int, swa_full: bool, n_ubatch: int, cache_dir: str,
                 model: str) -> list[dict[str, Any]]:
    """Each KV type's bytes at ``n_ctx``, and its latest KLD against f16/f16 where kept
    (the measurement on the most positions when several were made)."""
    against_f16 = [e for e in measured(cache_dir, model) if (e.get("base_type_k"), e.get("base_type_v")) == ("f16", "f16")]
    pairs = list(LISTED) + sorted({(e["type_k"], e["type_v"]) for e in against_f16} - set(LISTED))
    rows = []
    for k, v in pairs:
        try:
            nbytes = kv_layout(facts, n_ctx, k, v, swa_full, n_ubatch).bytes_allocated if facts.layers else None
        except (KeyError, ValueError):  # a type this model's rows cannot hold
            nbytes = None
        mine = [e for e in against_f16 if (e["type_k"], e["type_v"]) == (k, v)]
        best = max(mine, key=lambda e: (e.get("count", 0), e.get("measured_at", ""))) if mine else None
        rows.append({"type_k": k, "type_v": v, "kv_bytes": nbytes, "measured": best})
    return rows


def row_text(row: dict[str, Any]) -> str:
    m = row["measured"]
    if m is None:
        if (row["type_k"], row["type_v"]) == ("f16", "f16"):
            return "the base"
        return f"KLD not measured (kvtop kld -ctk {row['type_k']} -ctv {row['type_v']})"
    how = (f"F7 on a chat of {m['n_ctx']:,} tokens" if m.get("source") == "chat" else f"kvtop kld, -c {m['n_ctx']}")
    return (f"KLD {m['kld_mean']:.4f} (99%: {m['kld_99']:.4f}), same top token {100 * m['same_top']:.1f}% "
            f"over {m['count']:,} tokens ({how})")
