"""A turn's figures from its timestamps: the TTFT waterfall and ``TurnMetrics``.

Pure functions of what the prefill and decode recorded (no llama.cpp here), so the
arithmetic can be checked with hand-made timestamps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvtop.runner import events as ev
from kvtop.runner.units import fmt_int

if TYPE_CHECKING:
    from kvtop.runner.engine.decode import Decoded
    from kvtop.runner.engine.prefill import Prefilled

Segment = tuple[str, float, float]  # (label, start offset from submit, seconds)


@dataclass(frozen=True, slots=True)
class PromptInfo:
    """How the prompt tokens were made, for the report. ``generate`` on raw tokens
    uses ``TOKENS``; ``chat`` fills in the template and the tokenizer's share."""

    template_name: str = "tokens"
    template_fallback: str | None = None  # why the model's own template was not used
    template_s: float = 0.0
    tokenize_s: float = 0.0
    marks: tuple[tuple[str, float, float], ...] = ()  # (label, start, end) steps before the engine


TOKENS = PromptInfo()


@dataclass(frozen=True, slots=True)
class TurnClock:
    """The turn's timestamps before prefill (``time.monotonic()``)."""

    t_submit: float  # the turn was submitted
    t_start: float  # the engine took the turn
    t_lookup: float  # the cache lookup ended; TurnStarted was built


def percentile(values: list[float], q: float) -> float | None:
    """Linear interpolation between closest ranks; None for no values."""
    if not values:
        return None
    s = sorted(values)
    k = (len(s) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def waterfall(clock: TurnClock, prompt: PromptInfo, reused: int, pf: Prefilled,
              dec: Decoded) -> tuple[Segment, ...]:
    """Contiguous (label, start, seconds) segments from submit to the first visible
    character, offsets from submit. Each boundary is a measured timestamp, so the
    segments add up to TTFT; a ubatch segment includes the progress report before it.
    A boundary earlier than the one before it gives a zero-length segment."""
    if dec.t_first_visible is None:
        return ()
    bounds: list[tuple[str, float]] = [("wait for engine", clock.t_start)]
    for label, _a, b in prompt.marks:
        bounds.append((label, b))
    bounds.append((f"cache lookup ({fmt_int(reused)} reused)", clock.t_lookup))
    bounds.append(("prefill setup", pf.t_start))
    for i, ((n, _dt), end) in enumerate(zip(pf.ubatches, pf.ubatch_ends)):
        bounds.append((f"ubatch {i + 1} ({fmt_int(n)} tok)", end))
    if dec.t_first_token is not None:
        bounds.append(("first decode+sample", dec.t_first_token))
    bounds.append(("first visible char", dec.t_first_visible))
    out = []
    t_submit = prev = clock.t_submit
    for label, end in bounds:
        end = max(end, prev)
        out.append((label, prev - t_submit, end - prev))
        prev = end
    return tuple(out)


def turn_metrics(clock: TurnClock, prompt: PromptInfo, n_prompt: int, reused: int, pf: Prefilled,
                 dec: Decoded, kv_cells_used: int, n_ctx: int, perf: dict[str, float]) -> ev.TurnMetrics:
    """``TurnMetrics`` for a finished turn. Decode speed counts the gaps between
    sampled tokens (the first token's wait is prefill's), so one token has none."""
    times = dec.token_times
    itl = [(b - a) * 1000 for a, b in zip(times, times[1:])]
    dec_s = times[-1] - times[0] if len(times) > 1 else 0.0
    return ev.TurnMetrics(
        prompt_tokens=n_prompt,
        reused_tokens=reused,
        prefill_tokens=pf.done,
        prefill_s=pf.seconds,
        prefill_tok_s=pf.done / pf.seconds if pf.done and pf.seconds > 0 else None,
        template_s=prompt.template_s,
        tokenize_s=prompt.tokenize_s,
        wait_s=max(0.0, clock.t_start - clock.t_submit),
        ttft_s=(dec.t_first_visible - clock.t_submit) if dec.t_first_visible else None,
        decode_tokens=dec.n_out,
        decode_s=dec_s,
        decode_tok_s=(len(times) - 1) / dec_s if dec_s > 0 else None,
        itl_p50_ms=percentile(itl, 0.5),
        itl_p95_ms=percentile(itl, 0.95),
        kv_cells_used=kv_cells_used,
        n_ctx=n_ctx,
        first_token_s=(dec.t_first_token - (pf.t_start + pf.seconds)) if dec.t_first_token else None,
        ubatches=tuple(pf.ubatches),
        timeline=waterfall(clock, prompt, reused, pf, dec),
        perf=perf,
        **dec.spec,  # type: ignore[arg-type]  # SpecTally.fields: TurnMetrics' spec_* names and types
    )
