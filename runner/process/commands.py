"""What the app asks of an engine: typed commands, one frozen dataclass each.

They cross the pipe to the engine's child process pickled, so every field is plain
data. Replies come back as events (``runner.events``): ``Loaded``/``LoadFailed`` for
``Load``, ``TurnStarted`` … ``TurnDone``/``TurnRefused`` for ``Chat`` and
``Generate``, ``CacheCleared`` for ``Reset``, ``Tokenized`` for ``Tokenize``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kvtop.runner.policy.tune_messages import MeasureSettings
from kvtop.runner.settings import Settings


@dataclass(frozen=True)
class ChatMessage:
    """One message of a conversation, as chat templates take it."""

    role: str  # "system", "user" or "assistant"
    content: str

    def as_dict(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


@dataclass(frozen=True)
class Load:
    settings: Settings


@dataclass(frozen=True)
class Chat:
    """Render ``messages`` with the model's chat template, prefill, decode."""

    turn_id: int
    messages: tuple[ChatMessage, ...]
    t_submit: float  # time.monotonic() when the user pressed Enter (one clock for all processes)
    n_predict: int | None = None
    # (decode, prefill) threads for this turn when fewer than the engine's: the cores other
    # processes leave free (runner.calibration.load.turn_threads); None: the engine's own
    threads: tuple[int, int] | None = None


@dataclass(frozen=True)
class Generate:
    """Prefill ``tokens`` as they are (no template) and decode: what ``kvtop bench`` runs."""

    turn_id: int
    tokens: tuple[int, ...]
    t_submit: float
    n_predict: int
    ignore_eog: bool = True
    threads: tuple[int, int] | None = None  # as Chat's


@dataclass(frozen=True)
class Reset:
    """Clear the KV cache (a new chat)."""


@dataclass(frozen=True)
class Tokenize:
    request_id: int
    text: str
    add_special: bool = True


@dataclass(frozen=True)
class MeasurePrompt:
    """How many tokens ``messages`` would make as the next turn's prompt, and how many
    of them the KV cache holds already: the forecast shown before Enter. Answered with
    ``PromptMeasured``; it renders and tokenizes only, nothing is computed."""

    request_id: int
    messages: tuple[ChatMessage, ...]


@dataclass(frozen=True)
class MeasureKld:
    """Measure what quantizing the KV cache costs on this chat: its tokens (at most the
    context) through a base cache and candidates, each in a scoring context of its own on
    the loaded model; the chat's own context and cache are not touched. ``turn_id`` comes
    from the turns' counter, so ``Cancel`` stops it as it stops a turn. Answered with
    ``KldProgress`` events, then ``KldMeasured`` (runner.engine.live_kld)."""

    turn_id: int
    messages: tuple[ChatMessage, ...]


@dataclass(frozen=True)
class Cancel:
    """Stop every turn with ``turn_id <= upto``: the running one at once (prefill through
    llama.cpp's abort callback, decode at the next token), queued ones before they start."""

    upto: int


@dataclass(frozen=True)
class Quit:
    pass


Command = Load | Chat | Generate | Reset | Tokenize | MeasurePrompt | MeasureKld | MeasureSettings | Cancel | Quit


def as_messages(messages: Iterable[ChatMessage | Mapping[str, object]]) -> tuple[ChatMessage, ...]:
    """``ChatMessage``s from dicts or ``ChatMessage``s (tests and bench pass dicts)."""
    return tuple(m if isinstance(m, ChatMessage) else ChatMessage(str(m["role"]), str(m["content"]))
                 for m in messages)
