"""Advice with its evidence: what ``kvtop tune`` measured, as every "try ..." shows it.

``TuneEvidence`` is a cached tune run for this machine, build, model and settings
(runner.calibration.tune_store reads it). ``advise(flag, evidence, now)`` is the
advice for ``flag`` as kvtop prints it: with the measured gain ("try -fa off: decode
1.70x here, measured 3 min ago"), or "(not measured: `kvtop tune` measures it)", or
None when the measurement contradicts it (the candidate was slower, or no faster than
its spread): no advice a measurement contradicts is shown.

``roofline_gap`` names a measured setting as the cause of a gap the roofline cannot
see: flash attention, threads and the micro-batch change no bytes read and no FLOPs
counted, yet they change the speed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

NOT_MEASURED = "(not measured: `kvtop tune` measures it)"
# the settings the roofline does not model: the same bytes read and FLOPs either way
UNSEEN = {"flash_attn": "flash attention", "threads": "decode threads", "threads_batch": "prefill threads",
          "ubatch": "the micro-batch"}
GAP_FACTOR = 1.25  # a measured gain this large explains a gap (verdicts' TOLERANCE)


@dataclass(frozen=True)
class Measured:
    """One candidate's result: its flag, group, gains (None: not measured) and verdict
    ("faster", "slower", "same", "not judged")."""

    flag: str
    group: str
    verdict: str
    decode_gain: float | None = None
    prefill_gain: float | None = None
    precision: bool = False

    def gains(self) -> str:
        parts = [f"{k} {g:.2f}x" for k, g in (("decode", self.decode_gain), ("prefill", self.prefill_gain)) if g]
        return ", ".join(parts)


@dataclass(frozen=True)
class TuneEvidence:
    results: tuple[Measured, ...]
    measured_at: float  # epoch seconds
    depth: int

    def find(self, flag: str) -> Measured | None:
        key = " ".join(flag.split())
        return next((m for m in self.results if m.flag == key), None)


def ago(then: float, now: float | None = None) -> str:
    """"measured 3 min ago" style age."""
    s = max(0.0, (time.time() if now is None else now) - then)
    if s < 90:
        return f"{s:.0f} s ago"
    if s < 90 * 60:
        return f"{s / 60:.0f} min ago"
    if s < 36 * 3600:
        return f"{s / 3600:.0f} h ago"
    return f"{s / 86400:.0f} days ago"


def advise(flag: str, evidence: TuneEvidence | None, now: float | None = None, *, conditional: bool = False) -> str | None:
    """"try FLAG" with its evidence, or None when a measurement contradicts it.
    ``conditional``: the advice is for a condition the measurement did not have (threads
    packed on a busy machine; tune judges only a quiet one): the figure is quoted, never
    a reason to hide the advice."""
    m = evidence.find(flag) if evidence else None
    if m is None or evidence is None or m.verdict == "not judged":
        return f"try {flag} {NOT_MEASURED}"
    when = f"measured {ago(evidence.measured_at, now)} at depth {evidence.depth}"
    if m.verdict == "faster":
        return f"try {flag}: {m.gains()} here, {when}"
    if conditional:
        quiet = "slower" if m.verdict == "slower" else "no faster"
        return f"try {flag} (on a quiet machine it was {quiet}: {m.gains()}, {when})"
    return None


def advise_short(flag: str, evidence: TuneEvidence | None, now: float | None = None) -> str:
    """``advise(..., conditional=True)`` for a narrow border: "try -t 1: decode 1.30x
    here, 3 min ago", "try -t 1 (not measured: kvtop tune)", "try -t 1 (quiet: no
    faster, decode 1.01x)"."""
    m = evidence.find(flag) if evidence else None
    if m is None or evidence is None or m.verdict == "not judged":
        return f"try {flag} (not measured: kvtop tune)"
    if m.verdict == "faster":
        return f"try {flag}: {m.gains()} here, {ago(evidence.measured_at, now)}"
    return f"try {flag} (quiet: {'slower' if m.verdict == 'slower' else 'no faster'}, {m.gains()})"


def roofline_gap(evidence: TuneEvidence | None, metric: str, now: float | None = None) -> str | None:
    """The measured setting that explains a ``metric`` ("decode", "prefill") gap the
    roofline does not see, as the verdict's cause; None without one."""
    if evidence is None:
        return None

    def gain(m: Measured) -> float:
        return (m.decode_gain if metric == "decode" else m.prefill_gain) or 0.0

    fits = [m for m in evidence.results if m.verdict == "faster" and m.group in UNSEEN and gain(m) >= GAP_FACTOR]
    if not fits:
        return None
    best = max(fits, key=gain)
    g = gain(best)
    return (f"{UNSEEN[best.group]}: `{best.flag}` runs {metric} {g:.2f}x faster here (kvtop tune, measured "
            f"{ago(evidence.measured_at, now)}), and the roofline reads the same bytes either way")
