"""``AppOptions``: everything about a run that is not a llama.cpp setting, in one object,
so the App's constructor stays small and tests set only what they fix (as Posting's
``make_posting()`` does)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class AppOptions:
    argv: list[str] = field(default_factory=list)
    hardware: object | None = None  # a fixed HardwareProfile (tests, replay); else probed
    facts: object | None = None  # fixed ModelFacts (replay); else read from the GGUF
    live_system: bool = True  # sample memory once a second
    memory_sample: object | None = None  # a fixed MemorySample (snapshots)
    clock: Callable[[], float] = time.monotonic
    resume_messages: tuple = ()  # ChatMessages restored by --resume
    resume_note: str | None = None  # what --resume found, for the chat
    write_transcript: bool = True
    record_trace: bool = True
    trace_path: str | None = None
    prompt_file: str | None = None
    prompt_text: str | None = None  # -p TEXT: the first message
    refresh: float | None = None  # --refresh SECONDS
    ui_nice: int = 0
    banner: str | None = None  # e.g. "replay of FILE, recorded DATE on HOST; input is off"
    cancel_deadline_s: float = 5.0  # after Esc, when to say the engine is not responding
    servers: tuple[str, ...] = ()  # kvtop --server: the llama-servers to watch (first one chats)
    api_key: object | None = None  # runner.server.credentials.Credentials: the key and URL logins, hidden
    model_readable: bool = True  # False: a served model whose GGUF this machine cannot read
    bundle_text: bool = False  # --bundle-text: Ctrl+E's default bundle includes the conversation
    notes: tuple[str, ...] = ()  # llama.cpp flags accepted with no effect, said once in the chat
    load: object | None = None  # kvtop load's live view: a tui/server/load_view.py LoadRun (the sweep to run)
