"""``-sys``: the system prompt put before a chat's messages, by one rule for the
in-process engine's template and every request to a server (llama-server, vLLM)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol


class Message(Protocol):
    """A chat message (runner.process.commands.ChatMessage)."""

    @property
    def role(self) -> str: ...

    @property
    def content(self) -> str: ...


def with_system_prompt(system_prompt: str, messages: Iterable[Message | Mapping[str, str]]) -> list[dict[str, str]]:
    """The messages as dicts, ``system_prompt`` (``-sys``) first unless one of them is
    already the system's: the one rule for the engine's template and every server request."""
    msgs = [{"role": str(m["role"]), "content": str(m["content"])} if isinstance(m, Mapping)
            else {"role": m.role, "content": m.content} for m in messages]
    if system_prompt and not any(m["role"] == "system" for m in msgs):
        msgs.insert(0, {"role": "system", "content": system_prompt})
    return msgs
