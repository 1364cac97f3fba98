"""Context shift: when a chat no longer fits the context, its oldest whole turns go.

llama.cpp's ``--context-shift`` discards half of the tokens after ``--keep`` when
generation fills the context, wherever that cut lands. A chat UI drops whole turns
instead (LM Studio's rolling window), and so does kvtop, at the start of a turn: the
system prompt stays (and, with ``--keep N``, every turn that begins in the first N
tokens), then the oldest turns after it go (a turn is a user message and the replies
after it) until the prompt and room for the reply fit ``n_ctx``. The newest turn (the
message just sent) always stays; when it does not fit even alone, the turn is refused
as without a shift. The chat itself keeps every message: only the prompt leaves them
out, and the next turn decides again from the whole chat.

Pure Python: ``tokens_of(messages)`` is the engine's render + tokenize, so the sizes
are the model's own. The fewest turns that make it fit are dropped (a binary search:
log2(turns) renders), so consecutive turns tend to drop the same ones and keep their
cached prefix.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kvtop.runner.events import ContextShifted
from kvtop.runner.units import fmt_int

Tokens = Callable[[list[dict[str, str]]], list[int]]  # messages -> the prompt's tokens (with the reply's header)
Start = Callable[[list[dict[str, str]]], int]  # messages -> their tokens without the reply's header


@dataclass(frozen=True)
class Fitted:
    """The prompt a turn sends: ``messages`` (all of them when nothing was dropped) and
    their ``tokens``; ``dropped_turns``: 1-based numbers of the turns left out."""

    messages: list[dict[str, str]]
    tokens: list[int]
    dropped_turns: tuple[int, ...] = ()
    full_tokens: int = 0  # the whole chat's prompt, before anything was dropped
    kept_tokens: int = 0  # leading tokens the prompt shares with the whole chat's


def prompt_fits(n_prompt: int, n_ctx: int) -> bool:
    """Whether a turn with an ``n_prompt``-token prompt runs (the engine refuses it
    otherwise; a reply then has the rest of the context). The border before Enter asks
    the same function, so its "does not fit" is the turn's own refusal (it said "does
    not fit in 256" for 203 tokens, counting a reply's room, and the turn ran)."""
    return n_prompt < n_ctx if n_ctx > 0 else True


def reply_room(n_ctx: int, n_predict: int) -> int:
    """Tokens left free for the reply: ``-n`` when it is set (at most half the context),
    else a quarter of the context."""
    if n_predict > 0:
        return min(n_predict, n_ctx // 2)
    return n_ctx // 4


def split_turns(messages: list[dict[str, str]]) -> tuple[list[dict[str, str]], list[list[dict[str, str]]]]:
    """(the leading system messages, the turns): a turn starts at each user message;
    anything between the system prompt and the first user message joins the first turn."""
    i = 0
    while i < len(messages) and messages[i].get("role") == "system":
        i += 1
    head = messages[:i]
    turns: list[list[dict[str, str]]] = []
    for m in messages[i:]:
        if m.get("role") == "user" or not turns:
            turns.append([m])
        else:
            turns[-1].append(m)
    if len(turns) > 1 and turns[0][0].get("role") != "user":
        turns[1] = turns[0] + turns[1]
        turns.pop(0)
    return head, turns


def _flat(turns: list[list[dict[str, str]]]) -> list[dict[str, str]]:
    return [m for t in turns for m in t]


def kept_turns(head: list[dict[str, str]], turns: list[list[dict[str, str]]], keep: int, start_of: Start | None) -> int:
    """How many leading turns ``--keep N`` keeps: those that begin in the first N tokens
    (N <= 0: none, only the system prompt). The newest turn is not counted."""
    if keep <= 0 or start_of is None:
        return 0
    k = 0
    while k < len(turns) - 1 and start_of(head + _flat(turns[:k])) < keep:
        k += 1
    return k


def fit_turns(messages: list[dict[str, str]], full: list[int], tokens_of: Tokens, n_ctx: int, room: int,
              keep: int = -1, start_of: Start | None = None) -> Fitted:
    """The prompt for ``messages`` (whose tokens are ``full``) that leaves ``room`` for
    the reply in ``n_ctx``, dropping the fewest oldest turns after the kept ones. When
    even dropping every droppable turn leaves less room, that prompt is used (its reply
    has less room); whether it fits at all is the caller's to check."""
    if len(full) + room <= n_ctx:
        return Fitted(messages, full, (), len(full))
    head, turns = split_turns(messages)
    fixed = kept_turns(head, turns, keep, start_of)
    most = len(turns) - 1 - fixed  # the newest turn always stays
    if most <= 0:
        return Fitted(messages, full, (), len(full))

    def window(d: int) -> list[dict[str, str]]:
        return head + _flat(turns[:fixed]) + _flat(turns[fixed + d:])

    seen: dict[int, list[int]] = {}

    def fits(d: int) -> bool:
        seen[d] = tokens_of(window(d))
        return len(seen[d]) + room <= n_ctx

    lo, hi = 1, most  # the fewest dropped turns that fit lies in [lo, hi] when fits(hi)
    if fits(hi):
        while lo < hi:
            mid = (lo + hi) // 2
            if fits(mid):
                hi = mid
            else:
                lo = mid + 1
    tokens = seen[hi]
    return Fitted(window(hi), tokens, tuple(range(fixed + 1, fixed + hi + 1)), len(full), shared_prefix(full, tokens))


def shared_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def turn_ranges(numbers: tuple[int, ...]) -> str:
    """``(1, 2, 3, 5)`` -> ``"1–3, 5"``: turn numbers as the chat pane writes them."""
    out: list[str] = []
    i = 0
    while i < len(numbers):
        j = i
        while j + 1 < len(numbers) and numbers[j + 1] == numbers[j] + 1:
            j += 1
        out.append(str(numbers[i]) if i == j else f"{numbers[i]}–{numbers[j]}")
        i = j + 1
    return ", ".join(out)


def shift_line(e: ContextShifted) -> str:
    """One line on a ``ContextShifted``: which turns went, and what it cost the cache."""
    n = len(e.dropped_turns)
    head = (f"context full: dropped turn{'' if n == 1 else 's'} {turn_ranges(e.dropped_turns)} "
            f"({fmt_int(e.dropped_tokens)} tokens)")
    if getattr(e, "shifted_cells", 0):  # runner.engine.kv_shift: the cells went, the rest moved back
        return (f"{head} by shifting the cache: nothing recomputed, computing "
                f"{fmt_int(e.recomputed_tokens)} new tokens")
    if getattr(e, "no_shift", None):
        head = f"{head}; the cache cannot shift ({e.no_shift})"
    if e.prefix_broken_at is None and not e.reused_tokens:  # an empty cache (a new chat, a restart): nothing held
        return f"{head}; nothing was cached, computing all {fmt_int(e.recomputed_tokens)} tokens"
    if e.prefix_broken_at is None:
        return f"{head}; the cached prefix held, computing {fmt_int(e.recomputed_tokens)} new tokens"
    return (f"{head}; cache prefix broke at token {fmt_int(e.prefix_broken_at)}, "
            f"recomputing {fmt_int(e.recomputed_tokens)} tokens")
