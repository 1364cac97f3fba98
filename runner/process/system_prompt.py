"""``-sys``: the system prompt put before a chat's messages, by one rule for the
in-process engine's template and every request to a server (llama-server, vLLM)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kvtop.runner.process.commands import ChatMessage


def with_system_prompt(system_prompt: str, messages: Iterable[ChatMessage | Mapping[str, str]]) -> list[dict[str, str]]:
    """The messages as dicts, ``system_prompt`` (``-sys``) first unless one of them is
    already the system's: the one rule for the engine's template and every server request."""
    msgs = [m.as_dict() if isinstance(m, ChatMessage) else {"role": str(m["role"]), "content": str(m["content"])}
            for m in messages]
    if system_prompt and not any(m["role"] == "system" for m in msgs):
        msgs.insert(0, {"role": "system", "content": system_prompt})
    return msgs
