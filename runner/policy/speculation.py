"""Whether speculation paid on a turn, in one line, from the turn's own figures.

``spec_plain_step_s`` is this machine's plain decode step: the median of the turn's
steps where nothing was drafted, else the last turn's (the engine's first speculative
turn starts with one plain step to have it). The turn's steps (verify passes, drafting,
plain steps) made ``spec_tokens`` in ``spec_s``; their rate over the plain step's is
the speedup. A replay reads the
same fields, so it says the same line.
"""

from __future__ import annotations

from kvtop.runner.events import TurnMetrics

PAID = 1.0  # at or above: "Nx plain decode"; below: "speculation cost N%"
LOOKUP_SHOWN = 0.01  # a turn with nothing drafted names its lookups' share of decode from 1%


def speedup(m: TurnMetrics) -> float | None:
    """The turn's speculative tok/s over its plain step's, or None when not measured."""
    if not m.spec_type or not m.spec_plain_step_s or m.spec_s <= 0 or m.spec_tokens <= 0:
        return None
    return (m.spec_tokens / m.spec_s) * m.spec_plain_step_s


def tokens_per_pass(m: TurnMetrics) -> float | None:
    """Tokens a verify pass yields: the accepted draft tokens and the target's own one."""
    return (m.spec_accepted + m.spec_passes) / m.spec_passes if m.spec_passes else None


def spec_phrases(m: TurnMetrics) -> list[str] | None:
    """The line in phrases, each short enough for a 40-column pane, that a pane packs
    onto as many lines as its width needs (joined with spaces: ``spec_line``)."""
    if not m.spec_type:
        return None
    x, per_pass = speedup(m), tokens_per_pass(m)
    if per_pass is None and m.spec_drafted > 0:  # a server's turn: its timings count drafts, not passes
        acc = m.spec_accepted / m.spec_drafted
        return [f"speculation ({m.spec_type}):", f"{acc:.0%} of {m.spec_drafted:,} drafted accepted"]
    if per_pass is None:
        # nothing was verified, so all the turn lost to speculation is the drafter's
        # lookups (each step tried one); said when it is worth saying
        share = m.spec_draft_s / m.spec_s if m.spec_s > 0 else 0.0
        took = [f"drafting took {share:.0%} of decode"] if share >= LOOKUP_SHOWN else []
        return [f"speculation ({m.spec_type}):", "nothing drafted this turn" + (";" if took else ""), *took]
    acc = m.spec_accepted / m.spec_drafted if m.spec_drafted else 0.0
    per, accepted = f"{per_pass:.1f} tok/pass", f"{acc:.0%} of {m.spec_drafted:,} drafted accepted"
    if x is None:
        return ["speculation:", f"{per},", accepted]
    if x >= PAID:
        return [f"speculation: {per},", f"{accepted},", f"{x:.1f}x plain decode"]
    size = m.spec_drafted / m.spec_passes + 1
    cost = (m.spec_verify_s / m.spec_passes) / m.spec_plain_step_s if m.spec_plain_step_s else 0.0
    return [f"speculation cost {1 - x:.0%}:", f"{accepted},", f"each verify pass of {size:.0f} tok",
            f"costs {cost:.1f}x a plain step (measured)"]  # the roof's cost is modelled: both say which


def spec_short(m: TurnMetrics) -> str | None:
    """The line in at most 40 cells, for a Decode pane whose chart would otherwise get
    too few rows ("spec cost 25%, 19% accepted"; F1 and F2 keep the whole line)."""
    if not m.spec_type:
        return None
    x, per_pass = speedup(m), tokens_per_pass(m)
    if not m.spec_drafted:
        return "spec: nothing drafted"
    acc = f"{m.spec_accepted / m.spec_drafted:.0%} of {m.spec_drafted:,}"
    if per_pass is None:
        return f"spec: {acc} accepted"
    if x is None:
        return f"spec: {per_pass:.1f} tok/pass, {acc} kept"
    if x >= PAID:
        return f"spec {x:.1f}x plain: {per_pass:.1f} tok/pass, {acc}"
    return f"spec cost {1 - x:.0%}: {per_pass:.1f} tok/pass, {acc}"


def spec_line(m: TurnMetrics) -> str | None:
    """"speculation: 2.4 tok/pass, 71% of 48 drafted accepted, 1.8x plain decode", or
    "speculation cost 6%: …" when the turn ran slower than plain decode, or "…: nothing
    drafted this turn; drafting took 3% of decode"; None when the turn did not speculate."""
    phrases = spec_phrases(m)
    return " ".join(phrases) if phrases is not None else None



POSITIONS_SHOWN = 8  # "1 92% · … · 8 3% …": a line that fits a pane at 80 columns


def position_parts(counts: tuple[int, ...] | list[int], passes: int, shown: int = POSITIONS_SHOWN) -> list[str]:
    """["1 92%", "· 2 71%", "· 3 40%", "…"]: the share of verify passes that kept the
    draft's token at each position (1: the first drafted token; llama.cpp's acceptance
    per position), positions in a row with the same share as one ("1–27 100% · 28 0%":
    a pass of 45 kept 27), up to ``shown`` of them and the first that no pass kept; []
    without a pass. Phrases a pane breaks a line between (``position_phrase`` joins them)."""
    if passes <= 0 or not counts:
        return []
    runs: list[tuple[int, int, str]] = []  # (first position, last, share): equal shares in a row are one run
    for i, n in enumerate(counts):
        share = f"{min(n / passes, 1.0):.0%}"
        if runs and runs[-1][2] == share:
            runs[-1] = (runs[-1][0], i + 1, share)
        elif len(runs) == shown or (runs and runs[-1][2] == "0%"):
            break
        else:
            runs.append((i + 1, i + 1, share))
    parts = [("· " if k else "") + (f"{a}" if a == b else f"{a}–{b}") + f" {share}" for k, (a, b, share) in enumerate(runs)]
    return parts + (["…"] if runs[-1][1] < len(counts) else [])


def position_phrase(counts: tuple[int, ...] | list[int], passes: int, shown: int = POSITIONS_SHOWN) -> str | None:
    """"1 92% · 2 71% · 3 40% …" (``position_parts``); None without a pass."""
    return " ".join(position_parts(counts, passes, shown)) or None


def position_line(m: TurnMetrics) -> str | None:
    """The turn's "accepted by position: 1 92% · 2 71% …", None when nothing was verified
    (a llama-server's turn: its positions are the Server pane's, from /metrics)."""
    phrase = position_phrase(m.spec_accepted_per_pos, m.spec_passes)
    return f"accepted by position: {phrase}" if phrase else None
