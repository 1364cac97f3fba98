"""What a calibration is valid for: this model file, this machine, these settings.

A measured efficiency says nothing about another quantisation, another thread count,
another ``-ngl`` or another CPU, so each combination has its own samples. The model
file is named by its size and a hash of its first MiB (the header and the first
tensors: a re-quantised or different file differs there), not by its path, so a moved
or renamed file keeps its calibration.
"""

from __future__ import annotations

import hashlib
import json
import os

from kvtop.runner.settings import Settings

HEAD_BYTES = 1 << 20


def file_identity(path: str) -> str | None:
    """``"<size>:<sha256 of the first MiB, 16 hex>"``, or None when unreadable."""
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            head = fh.read(HEAD_BYTES)
    except OSError:
        return None
    return f"{size}:{hashlib.sha256(head).hexdigest()[:16]}"


def cpu_model_name() -> str:
    """The CPU's model name from /proc/cpuinfo ("" where there is none)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def calibration_key(settings: Settings, model_identity: str, gpu_names: tuple[str, ...] = (),
                    engine: str = "local") -> dict[str, object]:
    """The fields a calibration is keyed by, as a JSON-able dict (``engine``: "local",
    or "server <url>" for a llama-server, whose settings kvtop does not choose)."""
    s = settings.resolved()
    return {
        "model": model_identity, "engine": engine, "cpu": cpu_model_name(), "cores": os.cpu_count() or 0,
        "gpus": list(gpu_names), "threads": s.n_threads, "threads_batch": s.n_threads_batch,
        "ngl": s.n_gpu_layers, "kv": [s.cache_type_k, s.cache_type_v], "flash_attn": s.flash_attn,
        "ubatch": s.n_ubatch, "batch": s.n_batch,
    }


def key_hash(key: dict[str, object]) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
