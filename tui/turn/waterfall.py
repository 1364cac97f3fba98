"""The TTFT waterfall (F2): where a turn's time to first token went.

Any turn of the session can be shown (←/→), the turn in flight included: its
segments so far (template, tokenize, the prefill as far as it has reported),
labelled in progress, and followed until it ends. A finished turn shows a stacked
bar and a table of contiguous segments (wait, template, tokenize, cache lookup, each
prefill ubatch, first decode and sample, first visible character) that add up to the
measured TTFT, with the roofline's time beside each prefill micro-batch, the
forecast shown at the turn's start beside the measured TTFT, and a verdict
for the biggest cause. The heading always says which turn it is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widget import Widget

from kvtop.runner.events import STOP_LABELS
from kvtop.runner.physics.diagnosis import predicted_ubatch_seconds
from kvtop.runner.physics.verdicts import ttft_verdict
from kvtop.runner.sanitize import clean_line
from kvtop.tui.base.format import fmt_int, fmt_seconds, segment_style
from kvtop.tui.base.prose import Prose
from kvtop.tui.turn.spec_view import SpecLines

if TYPE_CHECKING:
    from kvtop.tui.app import KvtopApp

KEYS_HINT = "←/→ other turns · Esc closes"


@dataclass(frozen=True)
class LiveTurn:
    """The turn in flight as the UI has seen it. ``reports``: (done, elapsed_s) of each
    prefill report that reached the UI (they are paced, so one may stand for several
    micro-batches)."""

    user: str
    started: object | None  # TurnStarted; None while the turn waits for the engine
    reports: tuple[tuple[int, float], ...] = ()
    first_token_s: float | None = None  # submit -> first token, once it came
    decoded: int = 0  # tokens so far
    shift: object | None = None  # ContextShifted: the context was full, the oldest turns left out
    t_submit: float | None = None  # when Enter was pressed (the clock of TurnStarted.t)

    def segments(self) -> tuple[tuple[str, float, float], ...]:
        """The segments so far. A llama-server's turn has no template or tokenize of
        kvtop's: its first segment is the wait for the server's prefill to begin, as in
        the finished turn's table (a trial's live F2 listed template and tokenize at 0 ms
        and summed to 952 ms beside a 996 ms first token)."""
        s = self.started
        if s is None:
            return ()
        if s.template_name == "server":
            wait = max(s.t - self.t_submit, 0.0) if self.t_submit is not None else 0.0
            segs, base = [("network + server queue", 0.0, wait)], wait
        else:
            segs = [("template", 0.0, s.template_s), ("tokenize", s.template_s, s.tokenize_s)]
            base = s.template_s + s.tokenize_s
        prev_done, prev_s = s.reused_tokens, 0.0
        for done, elapsed in self.reports:
            if done <= prev_done:  # a report of no new tokens (a server's "processed 0" at the start)
                continue
            label = f"prefill +{fmt_int(done - prev_done)} tok (to {fmt_int(done)})"
            segs.append((label, base + prev_s, elapsed - prev_s))
            prev_done, prev_s = done, elapsed
        return tuple(segs)

    def prefilling(self) -> bool:
        """A micro-batch is being computed now: the segments so far leave it out (it has
        not reported), and the sum under them says so (a trial read the sum as the time so far)."""
        s = self.started
        done = self.reports[-1][0] if self.reports else s.reused_tokens if s is not None else 0
        return s is not None and self.first_token_s is None and done < s.prompt_tokens

    def state(self) -> str:
        s = self.started
        if s is None:
            return "waiting for the engine"
        done = self.reports[-1][0] if self.reports else s.reused_tokens
        if self.first_token_s is not None:
            return (f"first token after {fmt_seconds(self.first_token_s)}, decoding "
                    f"({fmt_int(self.decoded)} tok so far)")
        if done >= s.prompt_tokens:
            return f"prefill done ({fmt_int(s.prompt_tokens)} tok), decoding"
        return f"prefill {fmt_int(done)}/{fmt_int(s.prompt_tokens)} tok"


def live_turn(app: KvtopApp) -> LiveTurn | None:
    """The app's turn in flight, or None (the session's ``ActiveTurn``, as drawn)."""
    a = app.session.active
    if a is None:
        return None
    reports = tuple(a.reports) if a.started is not None else ()
    return LiveTurn(a.user, a.started, reports, a.first_token_s if a.started is not None else None, a.decoded,
                    a.shift, None if app.session.engine.capabilities.replaying else a.t_submit)


class WaterfallBar(Widget):
    def __init__(self, timeline, ttft: float, **kw) -> None:
        super().__init__(**kw)
        self.timeline = timeline
        self.ttft = ttft

    def render(self) -> Content:
        w = max(1, self.size.width)
        parts, used, acc = [], 0, 0.0
        for i, (label, _start, dt) in enumerate(self.timeline):
            acc += dt
            end = min(w, round(acc / self.ttft * w)) if self.ttft else 0
            if end > used:
                parts.append(("█" * (end - used), segment_style(label, i)))
                used = end
        if used < w:
            parts.append(("░" * (w - used), "$kvtop-bar-empty"))
        return Content.assemble(*parts)


def segments_table(timeline, predicted: dict, whole: float | None, tail: str = "",
                   ttft: float | None = None) -> Content:
    """Segments with their start, measured and predicted times and share of ``whole``;
    ``ttft``: the measured TTFT, on a row of its own under their sum (after it on the sum's
    row, the line was wider than the table and wrapped "TTFT measured 201" from "ms")."""
    w = max([len(seg[0]) for seg in timeline] + [8]) + 2
    rows = [Content.assemble((f"{'segment':<{w}}  {'start':>9}  {'measured':>9}  {'roofline':>9}  {'share':>6}",
                              "bold $text-muted"))]
    for i, (label, start, dt) in enumerate(timeline):
        pred = predicted.get(label)
        share = dt / whole * 100 if whole else 0
        rows.append(Content.assemble(("■ ", segment_style(label, i)), f"{label:<{w - 2}}  ",
                                     f"{fmt_seconds(start):>9}  ", (f"{fmt_seconds(dt):>9}", "$kvtop-measured"),
                                     f"  {fmt_seconds(pred) if pred is not None else '-':>9}  {share:>5.1f}%"))
    total = sum(dt for _, _, dt in timeline)
    rows.append(Content.assemble((f"{'sum of segments':<{w}}  {'':>9}  {fmt_seconds(total):>9}", "bold"), tail))
    if ttft is not None:
        rows.append(Content.styled(f"{'TTFT measured':<{w}}  {'':>9}  {fmt_seconds(ttft):>9}", "bold"))
    return Content("\n").join(rows)


def waterfall_table(metrics, prefill_s) -> Content:
    """``prefill_s(tokens, depth)``: the roofline's seconds for a micro-batch (None: unknown)."""
    timeline = metrics.timeline
    preds = predicted_ubatch_seconds(prefill_s, metrics.ubatches, metrics.reused_tokens)
    pred_by_label = {}
    k = 0
    for label, _s, _d in timeline:
        if label.startswith("ubatch"):
            pred_by_label[label] = preds[k] if k < len(preds) else None
            k += 1
    return segments_table(timeline, pred_by_label, metrics.ttft_s, ttft=metrics.ttft_s)


def _metrics(turn: dict):
    from kvtop.runner.events import TurnMetrics

    return TurnMetrics(**{k: (tuple(tuple(x) for x in v) if k in ("ubatches", "timeline") else v)
                          for k, v in turn["metrics"].items()})


def _shift(turn: dict):
    """A finished turn's ContextShifted, from its ``to_dict()`` form (None: no shift)."""
    from kvtop.runner.events import ContextShifted

    d = turn.get("context_shift")
    if not isinstance(d, dict):
        return None
    return ContextShifted(**{**d, "dropped_turns": tuple(d.get("dropped_turns") or ())})


def shift_static(shift) -> Prose:
    """The line that says the turn's prefix broke because the context was full, and why."""
    from kvtop.runner.policy.context_shift import shift_line

    why = (" (the chat no longer fit the context; kvtop left its oldest turns out of the prompt, "
           "--no-context-shift refuses instead)")
    return Prose(Content.styled(shift_line(shift) + why, "$kvtop-warn"), markup=False, id="waterfall-shift")


def forecast_said(fc: dict | None, ttft_s: float | None) -> list:
    """" · forecast 0.95 s (calibrated on 3 turns), 1.05x": the forecast the border and
    the Estimate pane showed for this turn, so all three say the same number."""
    if not isinstance(fc, dict) or fc.get("ttft_s") is None:
        return []
    n = fc.get("n_turns") or 0
    basis = (f"calibrated on {fmt_int(n)} turn{'' if n == 1 else 's'}" if fc.get("basis") == "calibrated"
             else "roofline, not calibrated yet")
    ratio = f", measured {ttft_s / fc['ttft_s']:.2f}x of it" if ttft_s and fc["ttft_s"] > 0 else ""
    lo, hi = fc.get("ttft_s_low"), fc.get("ttft_s_high")
    if fc.get("basis") == "calibrated" and isinstance(lo, (int, float)) and isinstance(hi, (int, float)):
        basis += f", 80% {fmt_seconds(lo)}–{fmt_seconds(hi)}"  # the interval frozen with it
    return [("  ·  forecast ", "$text-muted"), (fmt_seconds(fc["ttft_s"]), "$kvtop-forecast"),
            (f" ({basis}){ratio}", "$text-muted")]


def _asked(user: str) -> str:
    text = clean_line(user or "", 60)
    return f" · “{text}”" if text else ""


Source = Callable[[], "tuple[list, LiveTurn | None]"]


class WaterfallScreen(ModalScreen[None]):
    """``source()`` gives the finished turns (``TurnRecord``s: ``to_dict()``) and the turn
    in flight; it is read again every ``poll_s`` so the turn in flight stays current."""

    BINDINGS = [Binding("escape,f2,q", "dismiss", "Close"),
                Binding("left", "turn(-1)", "Previous turn", priority=True),
                Binding("right", "turn(1)", "Next turn", priority=True)]

    def __init__(self, source: Source, facts, prefill_s, poll_s: float = 1.0,
                 cpu: tuple[int, int, bool] | None = None, tuned=None) -> None:
        super().__init__()
        self.tuned = tuned  # ``kvtop tune``'s result (runner.policy.tune_evidence): the advice's evidence
        self.source = source
        self.facts = facts
        self.cpu = cpu  # (prefill threads, cores, model on the CPU): ttft_verdict names packed threads
        self.prefill_s = prefill_s
        self.poll_s = poll_s
        self.turns, self.live = source()
        self.pos = len(self.turns) if self.live is not None else len(self.turns) - 1  # the newest

    @property
    def count(self) -> int:
        return len(self.turns) + (self.live is not None)

    def on_mount(self) -> None:
        self.set_interval(self.poll_s, self._poll)

    def _poll(self) -> None:
        turns, live = self.source()
        changed = len(turns) != len(self.turns) or live != self.live
        self.turns, self.live = turns, live
        if changed:
            self.pos = min(self.pos, self.count - 1)
            self.refresh(recompose=True)

    def action_turn(self, step: int) -> None:
        pos = max(0, min(self.count - 1, self.pos + step))
        if pos != self.pos:
            self.pos = pos
            self.refresh(recompose=True)

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="waterfall-box", classes="dialog"):
            if self.pos < 0:
                yield Prose(Content("No turn yet: send a message, then press F2."), markup=False)
                return
            heading = f"Turn {self.pos + 1} of {self.count}"
            if self.pos >= len(self.turns):
                yield from self._live(heading)
            else:
                yield from self._finished(heading, self.turns[self.pos].to_dict())
            yield Prose(Content.styled(KEYS_HINT, "$text-muted"), markup=False, id="waterfall-keys")

    def _finished(self, heading: str, turn: dict) -> ComposeResult:
        m = _metrics(turn)
        stop = turn.get("stop_reason")
        ended = f" · {STOP_LABELS.get(stop, stop)}" if stop in ("cancelled", "new_chat", "context_full") else ""
        yield Prose(Content.assemble((f"{heading}{_asked(turn.get('user', ''))}", "bold"), (f"{ended}\n", "$kvtop-warn"),
                                      (f"Time to first token: {fmt_seconds(m.ttft_s)}", "bold"),
                                      *forecast_said(turn.get("forecast"), m.ttft_s)),
                     markup=False, id="waterfall-title")
        shift = _shift(turn)
        # the verdict under the heading: below the table it took scrolling to reach at 80x24 (new-user trial)
        verdict = ttft_verdict(m, turn.get("first_diff_index"), turn.get("diff_context"), turn.get("others_cpu"),
                               shift, self.cpu, self.tuned)
        yield Prose(Content.styled(verdict, "italic"), markup=False, id="waterfall-verdict")
        if shift is not None:
            yield shift_static(shift)
        yield WaterfallBar(m.timeline, m.ttft_s or 0, id="waterfall-bar")
        yield Prose(waterfall_table(m, self.prefill_s), markup=False, id="waterfall-table")
        if not (spec := SpecLines(m, id="waterfall-spec")).empty:  # the decode after the first token
            yield spec

    def _live(self, heading: str) -> ComposeResult:
        live = self.live
        segs = live.segments()
        so_far = sum(dt for _, _, dt in segs)
        yield Prose(Content.assemble((f"{heading}{_asked(live.user)}\n", "bold"),
                                      (f"in progress: {live.state()}", "bold $kvtop-warn")),
                     markup=False, id="waterfall-title")
        if live.shift is not None:
            yield shift_static(live.shift)
        yield WaterfallBar(segs, so_far, id="waterfall-bar")
        table = segments_table(segs, {}, so_far, "   so far")
        if live.prefilling():  # the sum read as the prefill's time so far (new-user trial)
            table = Content.assemble(table, ("\nso far, excluding the ubatch running: it has not reported yet",
                                             "$text-muted"))
        yield Prose(table, markup=False, id="waterfall-table")
        note = ("The segments after prefill (first token, first character on screen) and the verdict come "
                "when the turn ends." if live.first_token_s is not None else
                "The time to first token and the verdict come when the turn's first character does.")
        yield Prose(Content.styled(note, "italic"), markup=False, id="waterfall-verdict")
