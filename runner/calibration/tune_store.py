"""``kvtop tune``'s results on disk, one small JSON file per machine, build, model and
settings (as calibration keys them: runner.calibration.key), under
``<cache>/tune/v1/<key hash>.json``; a change to any of them is another file, so a
result is never quoted for settings it was not measured from. Written atomically;
a file of another version, or one that does not parse, is ignored.
"""

from __future__ import annotations

import json
import math
import os
import time
from typing import TYPE_CHECKING

from kvtop.runner.calibration.key import calibration_key, file_identity, key_hash
from kvtop.runner.calibration.store import write_json_atomically
from kvtop.runner.policy.tune_evidence import Measured, TuneEvidence

if TYPE_CHECKING:
    from kvtop.runner.settings import Settings

VERSION = 1
VERDICTS = ("faster", "slower", "same", "not judged")


def build_id() -> str:
    """The llama.cpp build: the llama-cpp-python that vendors it."""
    try:
        from importlib.metadata import version

        return f"llama-cpp-python {version('llama-cpp-python')}"
    except Exception:  # not installed the usual way
        return "?"


def tune_key(settings: Settings) -> dict[str, object]:
    s = settings.resolved()
    gpus: tuple[str, ...] = ()
    if s.n_gpu_layers:
        from kvtop.runner.system.hardware import query_gpus

        gpus = tuple(g.name for g in query_gpus(None).gpus)
    return {**calibration_key(s, file_identity(s.model) or s.model, gpus), "build": build_id(), "what": "tune"}


def tune_path(cache_dir: str, settings: Settings) -> str:
    return os.path.join(cache_dir, "tune", f"v{VERSION}", f"{key_hash(tune_key(settings))}.json")


def save_tune(cache_dir: str, settings: Settings, depth: int, results: list[Measured], now: float | None = None) -> str:
    """Write one run's results; an ``OSError`` is the caller's."""
    path = tune_path(cache_dir, settings)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    data = {"version": VERSION, "key": tune_key(settings), "measured_at": time.time() if now is None else now,
            "depth": depth, "results": [{"flag": m.flag, "group": m.group, "verdict": m.verdict,
                                          "decode_gain": m.decode_gain, "prefill_gain": m.prefill_gain,
                                          "precision": m.precision} for m in results]}
    write_json_atomically(path, data, ".tune-")
    return path


def _gain(x: object) -> float | None:
    ok = isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and 0 < x < 1e4
    return float(x) if ok else None  # type: ignore[arg-type]


def load_tune(cache_dir: str, settings: Settings) -> TuneEvidence | None:
    """The cached result for these settings here, or None."""
    try:
        with open(tune_path(cache_dir, settings), encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or data.get("version") != VERSION or not isinstance(data.get("results"), list):
        return None
    at, depth = data.get("measured_at"), data.get("depth")
    if not isinstance(at, (int, float)) or isinstance(at, bool) or not math.isfinite(at):
        return None
    out = []
    for r in data["results"]:
        if not (isinstance(r, dict) and isinstance(r.get("flag"), str) and isinstance(r.get("group"), str)
                and r.get("verdict") in VERDICTS):
            continue
        out.append(Measured(r["flag"][:80], r["group"][:40], r["verdict"], _gain(r.get("decode_gain")),
                            _gain(r.get("prefill_gain")), bool(r.get("precision"))))
    return TuneEvidence(tuple(out), float(at), depth if isinstance(depth, int) else 0)
