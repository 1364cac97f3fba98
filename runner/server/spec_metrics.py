"""A speculating llama-server's counters (``--spec-type``, ``-md``): its ``/metrics``
``llamacpp:spec_decode_num_draft_tokens_total``, ``…_num_accepted_tokens_total``,
``…_num_drafts_total`` (verify passes) and ``…_num_accepted_tokens_per_pos_total{position}``,
as totals and rates over the last poll; and a turn's own ``timings.draft_n`` /
``draft_n_accepted``. llama.cpp adds a request's counts to /metrics when its slot is
released, so a turn's delta is there once the turn is done.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PREFIX = "llamacpp:spec_decode_"
_LINE = re.compile(r"^llamacpp:spec_decode_(num_draft_tokens_total|num_accepted_tokens_total|num_drafts_total|"
                   r"num_accepted_tokens_per_pos_total\{position=\"(\d{1,4})\"\})\s+([0-9.eE+]+)\s*$")
MAX_COUNT = 10**15
MAX_POSITIONS = 1024


@dataclass(frozen=True)
class SpecCounters:
    drafted: int
    accepted: int
    drafts: int  # verify passes
    per_pos: tuple[int, ...] = ()  # accepted at draft position i


@dataclass(frozen=True)
class SpecRates:
    interval_s: float
    totals: SpecCounters
    drafted_s: float | None  # over the last interval
    accepted_s: float | None
    acceptance_now: float | None  # accepted / drafted over the last interval (None: nothing drafted)
    # the verify passes and the accepted per position of the last interval whose passes grew
    # (the last requests done: llama.cpp adds a request's counts when its slot is released)
    recent: tuple[int, tuple[int, ...]] | None = None

    @property
    def acceptance(self) -> float | None:
        t = self.totals
        return t.accepted / t.drafted if t.drafted else None

    @property
    def tokens_per_pass(self) -> float | None:
        t = self.totals
        return 1 + t.accepted / t.drafts if t.drafts else None

    def per_pos_rates(self) -> tuple[float, ...]:
        """Accepted at each draft position over the verify passes (llama.cpp's "acc per pos")."""
        t = self.totals
        return tuple(n / t.drafts for n in t.per_pos) if t.drafts else ()


def parse_spec(text: str) -> SpecCounters | None:
    """The spec counters in a /metrics text; None when the server does not speculate
    (the counters are absent, or a value is not a count)."""
    found: dict[str, int] = {}
    pos: dict[int, int] = {}
    for line in text.splitlines()[:10000]:
        if not line.startswith(PREFIX):
            continue
        m = _LINE.match(line.strip())
        if not m:
            continue
        try:
            v = float(m.group(3))
        except ValueError:
            return None
        if not (0 <= v <= MAX_COUNT) or v != int(v):
            return None
        if m.group(2) is not None:
            if int(m.group(2)) < MAX_POSITIONS:
                pos[int(m.group(2))] = int(v)
        else:
            found[m.group(1)] = int(v)
    if "num_draft_tokens_total" not in found:
        return None
    per_pos = tuple(pos.get(i, 0) for i in range(max(pos) + 1)) if pos else ()
    return SpecCounters(found["num_draft_tokens_total"], found.get("num_accepted_tokens_total", 0),
                        found.get("num_drafts_total", 0), per_pos)


class SpecWatch:
    """The rates between two polls (a restarted server: its counters went down, the
    rates start again)."""

    def __init__(self) -> None:
        self._last: tuple[float, SpecCounters] | None = None
        self._recent: tuple[int, tuple[int, ...]] | None = None

    def update(self, now: float, text: str) -> SpecRates | None:
        cur = parse_spec(text)
        if cur is None:
            self._last, self._recent = None, None
            return None
        last, self._last = self._last, (now, cur)
        if last is None or now <= last[0] or cur.drafted < last[1].drafted or cur.accepted < last[1].accepted \
                or cur.drafts < last[1].drafts:
            self._recent = None
            return SpecRates(0.0, cur, None, None, None)
        dt, prev = now - last[0], last[1]
        dd, da = cur.drafted - prev.drafted, cur.accepted - prev.accepted
        if cur.drafts > prev.drafts:
            n = max(len(cur.per_pos), len(prev.per_pos))
            pos = tuple(max((cur.per_pos[i] if i < len(cur.per_pos) else 0) -
                            (prev.per_pos[i] if i < len(prev.per_pos) else 0), 0) for i in range(n))
            self._recent = (cur.drafts - prev.drafts, pos)
        return SpecRates(dt, cur, dd / dt, da / dt, da / dd if dd else None, self._recent)


def turn_spec_fields(timings: dict[str, object]) -> dict[str, object]:
    """``TurnMetrics``' spec fields from a turn's ``timings`` (empty when it drafted nothing)."""
    drafted, accepted = timings.get("draft_n"), timings.get("draft_n_accepted")
    if not isinstance(drafted, (int, float)) or isinstance(drafted, bool) or not 0 < drafted <= MAX_COUNT:
        return {}
    acc = accepted if isinstance(accepted, (int, float)) and not isinstance(accepted, bool) else 0
    return {"spec_type": "llama-server", "spec_drafted": int(drafted),
            "spec_accepted": int(min(max(acc, 0), drafted))}


def spec_phrases(r: SpecRates | None) -> list[str]:
    """The server pane's speculation phrases (none when the server drafted nothing)."""
    if r is None or r.totals.drafted <= 0:
        return []
    t = r.totals
    out = [f"speculation: {t.accepted:,} of {t.drafted:,} drafted accepted ({r.acceptance or 0:.0%})"]
    if r.tokens_per_pass is not None:
        out.append(f"{r.tokens_per_pass:.1f} tok/pass over {t.drafts:,} passes")
    if r.drafted_s is not None and r.accepted_s is not None:
        now = f", {r.acceptance_now:.0%}" if r.acceptance_now is not None else ""
        out.append(f"now {r.accepted_s:,.1f} of {r.drafted_s:,.1f} drafted/s accepted{now}")
    out += [p for p in [position_phrases(r)] if p]
    return out


def position_phrases(r: SpecRates) -> str | None:
    """"accepted by position (last 2 passes): 1 92% · 2 71% …": the last requests' own
    (the /metrics deltas), else the counters' since the server started."""
    from kvtop.runner.policy.speculation import position_phrase

    if r.recent is not None:
        passes, counts = r.recent
        phrase, since = position_phrase(counts, passes), f"last {passes:,} pass{'' if passes == 1 else 'es'}"
    else:
        phrase, since = position_phrase(r.totals.per_pos, r.totals.drafts), "since the server started"
    return f"accepted by position ({since}): {phrase}" if phrase else None
