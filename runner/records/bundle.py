"""The debug bundle (Ctrl+E): one JSON a user attaches to a bug report about a slow
first token: command line, settings, hardware, GGUF facts, every turn's timings, the
estimate, the trace and a screenshot. Built from plain data; the UI only adds the SVG."""

from __future__ import annotations

import json
from dataclasses import asdict

BUNDLE_VERSION = 1
TRACE_LIMIT = 32 * 2**20


def trace_records(path: str | None, limit: int = TRACE_LIMIT) -> list | None:
    """The trace's lines as JSON objects (a torn last line is left out)."""
    if not path:
        return None
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            data = fh.read(limit)
    except OSError:
        return None
    out = []
    for line in data.splitlines()[: 10**6]:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def debug_bundle(session, facts, hw, ui: dict, screenshot_svg: str) -> dict:
    from runner.commands.estimate import estimate_report

    s = session.settings
    est = None
    if facts is not None and hw is not None:
        est = estimate_report(facts, hw, s.n_ctx, s.cache_type_k, s.cache_type_v, s.swa_full, s.n_ubatch,
                              n_gpu_layers=s.n_gpu_layers)
    if session.trace is not None:
        session.trace.flush()
    return {
        "kvtop_bundle_version": BUNDLE_VERSION,
        "command_line": session.argv,
        "settings": s.to_dict(),
        "ui": ui,
        "engine": session.engine.kind,
        "loaded": asdict(session.loaded) if session.loaded else None,
        "hardware": hw.to_dict() if hw else None,
        "gguf": {k: v for k, v in asdict(facts).items() if k != "chat_template"} if facts else None,
        "turns": [t.to_dict() for t in session.turns],
        "estimate": est,
        "load_error": session.load_error,
        "transcript": session.transcript.path if session.transcript else None,
        "trace_file": session.trace.path if session.trace else None,
        "trace": trace_records(session.trace.path if session.trace else None),
        "screenshot_svg": screenshot_svg,
    }
