"""What ``kvtop load`` says about a level beyond its figures: a busy machine, and a rate
the roof and the load do not explain.

A busy machine: other processes (not kvtop, not the local server) took a quarter of the
CPU or more while the level ran (the app's and the bench's rule, runner.calibration.busy):
its figures are low. Said in every format: the row's ``busy`` field (json, jsonl, csv),
the note under the md table, a line on stderr for the others, the live view's line. A
trial saw ``others CPU`` 1.2-1.3 of 2 cores and no word about it.

An unexplained rate: batching shares each step among the users decoding together (B, the
users up to the slots), so from one level to the next each user's rate can hold (the
weights' read shared for free) or fall to 1/k of it (k times the batch, each step k times
the work), not rise, and not fall further; and no user streams faster than the roof's
share (the roof / B). A trial's 1.53 -> 10.82 -> 1.08 tok/s per user at 1, 2 and 3 users
was printed without a word. The row's ``unexplained`` field says why, and what differed
(the others' CPU) when that is the likely cause.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvtop.runner.calibration.busy import busy_run_note, too_busy
from kvtop.runner.commands.common import Report
from kvtop.runner.commands.load_chart import ceiling

RISE = 1.25  # each user's rate may rise this much from one level to the next (noise), no more
FALL = 0.7  # ... and fall to this share of 1/k (k: the batch's growth)
OVER_ROOF = 1.15  # a rate this far over the roof means the roof's inputs are not this server's
BUSY_DIFF = 0.15  # others' share of the CPU this different between two levels: named as the likely cause


def busy_note(share: float | None, during: str = "this level") -> str | None:
    """``other processes used 63% of the CPU during this level: figures are low``, or None."""
    return busy_run_note(share).replace("this run", during) if too_busy(share) else None


def run_share(rows: Sequence[Report]) -> float | None:
    """The others' share over the whole run: each level's, weighted by its time."""
    pts = [(r["others_cpu_share"], r["window_s"] or 0.0) for r in rows if r.get("others_cpu_share") is not None]
    total = sum(w for _, w in pts)
    if not pts:
        return None
    return float(sum(s * w for s, w in pts) / total if total > 0 else max(s for s, _ in pts))


def batch(r: Report) -> int | None:
    """The users decoding together: the level's users, at most the slots."""
    if r["users"] is None:
        return None
    return min(r["users"], r["slots"]) if r.get("slots") else int(r["users"])


def _why_busy(r: Report, prev: Report | None) -> str:
    here, there = r.get("others_cpu_share"), prev.get("others_cpu_share") if prev else None
    if here is not None and there is not None and abs(here - there) >= BUSY_DIFF:
        return f"; other processes took {here:.0%} of the CPU here, {there:.0%} there: likely the cause"
    if too_busy(here):
        return f"; other processes took {here:.0%} of the CPU here"
    return ""


def _level(r: Report) -> str:
    return f"{r['users']} user{'s' if r['users'] != 1 else ''}"


def _over_roof(r: Report) -> str | None:
    roof, b = ceiling(r), batch(r)
    if not roof:
        return None
    if r["gen_tok_s"] is not None and r["gen_tok_s"] > OVER_ROOF * roof:
        return (f"all users' {r['gen_tok_s']:.2f} tok/s is above the roof ({roof:.1f} tok/s): the roof's inputs "
                f"(bandwidth, FLOPS, model, -ctk/-ctv) are not this server's")
    pu = r["per_user_gen_tok_s"]
    if b and pu is not None and pu > OVER_ROOF * roof / b:
        return (f"each user's {pu:.2f} tok/s is above the roof's share ({roof:.1f} tok/s / {b} decoding = "
                f"{roof / b:.2f}): the roof's inputs (bandwidth, FLOPS, model, -ctk/-ctv) are not this server's")
    return None


def unexplained(r: Report, before: Sequence[Report]) -> str | None:
    """Why the level's per-user rate is not what the roof and the load allow, or None.
    ``before``: the levels measured before it (one row per level, in order)."""
    over = _over_roof(r)
    if over:
        return over
    b, pu = batch(r), r["per_user_gen_tok_s"]
    prev = next((p for p in reversed(before) if p["users"] is not None and p["per_user_gen_tok_s"]
                 and batch(p) and p["users"] < (r["users"] or 0)), None)
    if prev is None or not b or pu is None:
        return None
    pb, ppu = batch(prev), prev["per_user_gen_tok_s"]
    assert pb is not None
    k = b / pb
    ratio = pu / ppu
    if ratio > RISE:
        return (f"each user's rate rose {ratio:.1f}x ({ppu:.2f} -> {pu:.2f} tok/s) from {_level(prev)} with more "
                f"users: sharing the server's steps cannot make each user faster" + _why_busy(r, prev))
    if ratio < FALL / k:
        return (f"each user's rate fell to {ratio:.2f}x ({ppu:.2f} -> {pu:.2f} tok/s) from {_level(prev)}: "
                f"{k:g}x the users decoding explain 1/{k:g} ({1 / k:.2f}x) at most" + _why_busy(r, prev))
    return None


def level_checks(row: Report, before: Sequence[Report], local: bool) -> Report:
    """The row with ``busy`` (local server only: the others' share of the server's machine)
    and ``unexplained`` set."""
    share = row.get("others_cpu_share")
    row["busy"] = busy_note(share) if local else None
    row["unexplained"] = unexplained(row, [p for p in before if p["server"] == row["server"]])
    return row


def run_busy(rows: Sequence[Report], local: bool) -> str | None:
    """The whole run's warning (others' CPU over every level, by time), for every format."""
    mine = [r for r in rows if r["server"] == "all"] or list(rows)
    return busy_note(run_share(mine), "this run") if local else None
