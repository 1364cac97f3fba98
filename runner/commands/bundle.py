"""The debug bundle (Ctrl+E): one JSON a user attaches to a bug report about a slow
first token: command line, settings, hardware, GGUF facts, every turn's timings, the
estimate, the trace and a screenshot. Built from plain data; the UI only adds the SVG.

By default the bundle is safe to post (``runner.redact``): the conversation,
the home folder, the user and host names are left out, and it says so at its top.
``kvtop replay BUNDLE`` replays the trace it embeds (``runner.records.trace.read_bundle_trace``).

The writer sits with the commands, above runner/records/: it embeds ``kvtop estimate``'s
report (runner/commands/estimate.py) and a session's trace, and the trace reader needs
none of it.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from kvtop.runner.redact import NOTE, NOTE_WITH_TEXT, Redactor, scrub_svg, scrub_value

if TYPE_CHECKING:
    from kvtop.runner.model.facts import ModelFacts
    from kvtop.runner.session.chat import ChatSession
    from kvtop.runner.system.hardware import HardwareProfile

BUNDLE_VERSION = 1
TRACE_LIMIT = 32 * 2**20


def trace_records(path: str | None, limit: int = TRACE_LIMIT) -> list[object] | None:
    """The trace's lines as JSON objects (a torn last line is left out)."""
    if not path:
        return None
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            data = fh.read(limit)
    except OSError:
        return None
    out: list[object] = []
    for line in data.splitlines()[: 10**6]:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def turn_dicts(session: ChatSession, redact: bool = True, redactor: Redactor | None = None) -> list[dict[str, Any]]:
    """The session's turns as the bundle and the CSV write them."""
    turns = [t.to_dict() for t in session.turns]
    if not redact:
        return turns
    r = redactor or Redactor()
    return [r.turn(t) for t in turns]


def system_facts() -> dict[str, object]:
    """What a bug report needs that the settings do not say: versions, the CPU's name,
    the load and the time the bundle was made."""
    import platform
    import time
    from importlib.metadata import PackageNotFoundError, version

    from kvtop.runner.system.cpu_name import cpu_name

    def dist(name: str) -> str | None:
        try:
            return version(name)
        except PackageNotFoundError:
            return None

    try:
        load = list(os.getloadavg())
    except OSError:
        load = None
    return {"kvtop": dist("kvtop-llm"), "llama_cpp_python": dist("llama-cpp-python"), "textual": dist("textual"),
            "python": platform.python_version(), "os": f"{platform.system()} {platform.release()}",
            "cpu_name": cpu_name(), "cpu_count": os.cpu_count(), "loadavg": load,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def debug_bundle(session: ChatSession, facts: ModelFacts | None, hw: HardwareProfile | None, ui: dict[str, object],
                 screenshot_svg: str, redact: bool = True, redactor: Redactor | None = None) -> dict[str, object]:
    """The bundle; ``redact`` (the default) leaves out the conversation and the user's
    home, user and host names (``redactor`` fixes them, for tests)."""
    from kvtop.runner.commands.estimate import estimate_report

    s = session.settings
    est = None
    if facts is not None and hw is not None:
        est = estimate_report(facts, hw, s.n_ctx, s.cache_type_k, s.cache_type_v, s.swa_full, s.n_ubatch,
                              n_gpu_layers=s.n_gpu_layers)
    if session.trace is not None:
        session.trace.flush()
    r = redactor or Redactor()
    trace = trace_records(session.trace.path if session.trace else None)
    out = {
        "kvtop_bundle_version": BUNDLE_VERSION,
        "redacted": redact,
        "redaction": NOTE if redact else NOTE_WITH_TEXT,
        "command_line": r.argv(session.argv, text=not redact),
        "settings": r.settings(s.to_dict()) if redact else s.to_dict(),
        "ui": ui,
        "system": system_facts(),
        "engine": session.engine.kind,
        "loaded": asdict(session.loaded) if session.loaded else None,
        "hardware": hw.to_dict() if hw else None,
        "gguf": {k: v for k, v in asdict(facts).items() if k != "chat_template"} if facts else None,
        "turns": turn_dicts(session, redact, r),
        "estimate": est,
        "load_error": session.load_error,
        "transcript": session.transcript.path if session.transcript else None,
        "trace_file": session.trace.path if session.trace else None,
        "trace": [r.trace_record(x) for x in trace] if redact and trace is not None else trace,
        "screenshot_svg": r.home(screenshot_svg) if redact else screenshot_svg,
    }
    if redact:
        done = ("redacted", "redaction", "command_line", "settings", "turns", "trace", "screenshot_svg")
        out = {k: (v if k in done else r.value(v, k)) for k, v in out.items()}
    # both kinds: no API key or URL login, wherever it hid (the SVG in its text only)
    return {k: scrub_svg(v) if k == "screenshot_svg" else scrub_value(v) for k, v in out.items()}
