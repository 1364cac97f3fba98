"""Estimate vs actual: what the physics predicts beside what was measured, and why they differ.

The rows are built by ``runner.physics.estimate_rows.estimate_rows`` and the verdict
line by ``runner.physics.verdicts.estimate_verdict``; this pane only draws them.

Two predictions side by side: "roofline" (the ideal this machine's peak allows: a
ceiling, never a promise) and "forecast" (what this machine did for this model
before: runner.calibration, filled in as soon as a turn's prompt size is known). The
ratio is measured ÷ forecast where there is a forecast, else measured ÷ roofline; where
the forecast column is left out (a narrow pane) it is headed "vs roof".
"""

from __future__ import annotations

import re
from dataclasses import replace

from textual.content import Content

from kvtop.runner.calibration.forecast import Forecast
from kvtop.runner.calibration.load import load_note
from kvtop.runner.physics.estimate_rows import EstimateRows, Row
from kvtop.runner.physics.verdicts import estimate_verdict
from kvtop.tui.base.flow import flowed_lines
from kvtop.tui.base.format import NA, fmt_bytes, fmt_rate, fmt_seconds
from kvtop.tui.panes.base import PaneWidget, fold

_ASIDE = re.compile(r" \(([^()]*)\)")
_BUSY_PROBE = re.compile(r"probed at (\d+% busy)")


def brief(text: str) -> str:
    """A note without its asides in brackets, the details a short form leaves out (what
    a busy CPU probe was taken at stays: its figures are lower bounds)."""
    busy = _BUSY_PROBE.search(text)
    short = _ASIDE.sub("", text)
    return short + (f" at {busy.group(1)}: lower bounds" if busy and busy.group(1) not in short else "")


def gist(text: str) -> str:
    """A note's first clause, for a pane with no room for more ("at today's load: others
    use 80% of the CPU")."""
    return re.split(r" \(|; ", text, maxsplit=1)[0].replace("other processes", "others")


def ranged_short(text: str) -> str:
    """"TTFT and decode inside the forecast's 80% range": the range verdict without its
    figures (the table beside has them), for a pane with no room (at 160x48 on a busy
    machine the hardware line was folded away under the full one)."""
    found = re.findall(r"(?:^|; )(\w+) [^;]*?, (inside|outside)", text)
    if not found:
        return text
    if len({where for _, where in found}) == 1:
        return f"{' and '.join(name for name, _ in found)} {found[0][1]} the forecast's 80% range"
    return ", ".join(f"{name} {where}" for name, where in found) + " the forecast's 80% range"


def figures(note: str) -> str:
    """The hardware line's shortest form: its figures ("hardware: 21.4 GB/s, 1.23 TFLOPS"),
    said to be lower bounds when the probe was busy."""
    head, sep, _source = note.partition(" · ")
    if not sep:
        return brief(note)
    return head + (": lower bounds" if _BUSY_PROBE.search(note) else "")


def fitted(notes: list[tuple[Content, ...]], room: int, width: int) -> list[Content]:
    """Each note in its full form, or in a shorter one (each note's forms, longest
    first), shortened from the last note up (the least important) until they fit
    ``room`` lines at ``width``: at 160x48 on a busy machine the verdict, the load and
    the hardware notes took 22 lines of 19 and the hardware line, last, was folded away."""
    tier = [0] * len(notes)

    def fits() -> bool:
        return sum(max(1, flowed_lines(n[t], width)) for n, t in zip(notes, tier)) <= room  # as fold breaks them

    while width > 0 and not fits():
        shorter = [i for i in range(len(notes) - 1, -1, -1) if tier[i] + 1 < len(notes[i])]
        if not shorter:
            break
        tier[shorter[0]] += 1
    return [n[t] for n, t in zip(notes, tier)]


def _rate(x: float | None) -> str:
    """A rate without its unit (the row's label says tok/s): the table must fit ~40 columns."""
    return fmt_rate(x, "").strip()


# (key, label, format, lower is better)
SPEC = [
    ("ttft", "TTFT", fmt_seconds, True),
    ("prefill", "pp tok/s", _rate, False),
    ("decode", "tg tok/s", _rate, False),
    ("kv", "KV bytes", fmt_bytes, False),
    ("weights", "weights", fmt_bytes, False),
    ("peak", "peak mem", fmt_bytes, False),
]
TIMED = ("ttft", "prefill", "decode")  # the rows a forecast predicts
W_LABEL, W_COL, W_RATIO = 9, 9, 8  # "127.35x" and a space: a ratio never touches the measured column
# a narrow pane's labels (its units are in the figures, its rates per second): at 80x24 the pane's 42
# columns left the forecast out, and with it forecast vs actual, the pane's point (new-user trial)
SHORT = {"prefill": "pp/s", "decode": "tg/s", "kv": "KV", "weights": "wts", "peak": "peak"}
W_SHORT = 5


class EstimatePane(PaneWidget):
    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.border_title = "Estimate vs actual"
        self.rows = EstimateRows()
        self.forecast: Forecast | None = None
        self.live: dict | None = None  # a running turn's measured TTFT, pp and tg so far
        self.live_roofline: Forecast | None = None  # the running turn's roofline
        self.quality = ""  # the advice a KV quality measurement gives (tui/turn/quality.py)

    def set_quality(self, text: str) -> None:
        self.quality = text
        self.refresh(layout=True)

    @property
    def note(self) -> str:
        return self.rows.note

    def set_rows(self, rows: EstimateRows) -> None:
        """``rows`` from ``runner.physics.estimate_rows.estimate_rows``: a finished turn
        (or none yet); the live figures give way to them."""
        self.rows = rows
        self.live = self.live_roofline = None
        self.refresh(layout=True)

    def set_peak(self, peak: int | None) -> None:
        """The chat's peak RSS, as the Memory pane shows it, once a turn has measured one (it
        stayed at the figure of the last turn's end while the Memory pane's moved on)."""
        row = self.rows.peak
        if row.measured is not None and peak is not None and peak != row.measured:
            self.rows = replace(self.rows, peak=Row(row.predicted, peak))
            self.refresh()

    def begin_turn(self, forecast: Forecast | None, roofline: Forecast | None) -> None:
        """A turn started: its forecast and roofline at once, its measured column as it runs."""
        self.forecast, self.live_roofline = forecast, roofline
        self.live = dict.fromkeys(TIMED)
        self.refresh(layout=True)

    def drop_live(self) -> None:
        """A new chat cut the running turn: its live figures and forecast go (the app
        then sets the rows of a session with no turn: a new user read the cleared chat's
        last TTFT and verdict as the new chat's)."""
        if self.live is not None or self.forecast is not None:
            self.live = self.live_roofline = self.forecast = None
            self.refresh(layout=True)

    def shown(self) -> tuple:
        """What the pane shows of a finished turn (its rows and forecast), to be shown
        again by ``show`` (Ctrl+Z after Ctrl+L: tui/turn/chat_undo.py). A running turn's live
        figures and forecast are not part of it: that turn is cut, not put aside."""
        return self.rows, None if self.live is not None else self.forecast

    def show(self, shown: tuple) -> None:
        self.rows, self.forecast = shown
        self.live = self.live_roofline = None
        self.refresh(layout=True)

    def set_live(self, key: str, value: float | None) -> None:
        if self.live is not None and value is not None and self.live.get(key) != value:
            self.live[key] = value
            self.refresh()

    def _figures(self, key: str) -> tuple[float | None, float | None]:
        """(roofline, measured) for a row: the running turn's while one runs."""
        row = self.rows.row(key)
        if self.live is None or key not in TIMED:
            return row.predicted, row.measured
        roof = self.live_roofline
        predicted = None if roof is None else {"ttft": roof.ttft_s, "prefill": roof.prefill_tok_s,
                                               "decode": roof.decode_tok_s}[key]
        return predicted, self.live[key]

    def set_forecast(self, forecast: Forecast | None) -> None:
        """The turn's forecast (``runner.calibration.forecast``), at its start."""
        self.forecast = forecast
        self.refresh(layout=True)

    def forecast_of(self, key: str) -> float | None:
        fc = self.forecast
        if fc is None:
            return None
        return {"ttft": fc.ttft_s, "prefill": fc.prefill_tok_s, "decode": fc.decode_tok_s}.get(key)

    def _columns(self) -> tuple[list[str], int]:
        """The columns that fit the pane and the labels' width: the short labels first
        (``SHORT``: kept only while they keep every column), then the forecast goes (the prompt's border says it too), then the
        roofline. The verdict under the table compares with the roofline: at 80x24 the
        roofline column went first and the verdict quoted a column, and a ratio, that
        the pane did not show."""
        width = self.size.width or 10**6  # the content's width (unmounted: every column)
        cols = ["roofline", "forecast", "measured"]
        wide = W_LABEL + W_COL * len(cols) + W_RATIO <= width
        label = W_SHORT if not wide and W_SHORT + W_COL * len(cols) + W_RATIO <= width else W_LABEL
        for drop in ("forecast", "roofline"):
            if label + W_COL * len(cols) + W_RATIO > width:
                cols.remove(drop)
        return cols, label

    def render(self) -> Content:
        cols, w_label = self._columns()
        head = [(f"{'':<{w_label}}", "")] + [(f"{c:>{W_COL}}", "$text-muted") for c in cols]
        # without the forecast column every ratio is over the roofline: the header says so (at 80x24 the
        # verdict said "inside the forecast" above ratios of the roofline, headed only "ratio")
        over = "ratio" if "forecast" in cols else "vs roof"
        lines = [Content.assemble(*head, (f"{over:>{W_RATIO}}", "$text-muted"))]
        for key, label, fmt, lower_is_better in SPEC:
            row = Row(*self._figures(key))
            fc = self.forecast_of(key) if "forecast" in cols else None  # the ratio is of a column shown
            ratio = Row(fc, row.measured).ratio if fc is not None else row.ratio
            if ratio is None:
                style, rtxt = "$text-muted", NA
            else:
                good = ratio <= 1.25 if lower_is_better else ratio >= 0.8
                ok = ratio <= 2 if lower_is_better else ratio >= 0.4
                style = "$kvtop-ok" if good else "$kvtop-warn" if ok else "$kvtop-critical"
                rtxt = f"{ratio:.2f}x"
            cells = {"roofline": (fmt(row.predicted), ""),
                     "forecast": (fmt(fc) if key in TIMED else "", "$kvtop-forecast"),
                     "measured": (fmt(row.measured), "$kvtop-measured")}
            label = label if w_label == W_LABEL else SHORT.get(key, label)
            lines.append(Content.assemble(f"{label:<{w_label}}", *[(f"{cells[c][0]:>{W_COL}}", cells[c][1]) for c in cols],
                                          (f"{rtxt:>{W_RATIO}}", style)))
        notes: list[tuple[Content, ...]] = []  # each note's forms, longest first, by importance
        if self.live is not None:  # the rows' verdict is the last turn's, not this one's
            said = Content.styled("the verdict comes when this turn ends", "$text-muted")
            notes.append((said, said))
        else:  # its asides go last of all (the full-screen shot folded the advice and hardware lines away)
            verdict = estimate_verdict(self.rows)
            notes.append((Content.styled(verdict, "italic"), Content.styled(_ASIDE.sub("", verdict), "italic")))
        if self.forecast is not None:
            from kvtop.runner.calibration.interval import range_verdict

            calibrated = self.forecast.basis == "calibrated"  # the roofline says what it is: a ceiling
            if calibrated and self.live is None and (ranged := range_verdict(
                    self.forecast, self.rows.row("ttft").measured, self.rows.row("decode").measured)):
                notes.append((Content.styled(ranged, "italic"), Content.styled(ranged_short(ranged), "italic")))
            iv = self.forecast.interval_text() if calibrated else ""
            if "forecast" in cols:  # what the column rests on
                label = f"forecast: {self.forecast.label()}"
                notes.append((Content.styled(label + (f"; TTFT {iv}" if iv else ""), "$text-muted"),
                              Content.styled(label, "$text-muted")))
            if busy := load_note(self.forecast, self.rows.context.tuned):  # the forecast column is priced at today's load
                notes.append(tuple(Content.styled(b, "$kvtop-warn") for b in (busy, brief(busy), gist(busy))))
        if self.quality:
            notes.append((Content.styled(self.quality, "italic"), Content.styled(brief(self.quality), "italic")))
        if self.note:
            notes.append(tuple(Content.styled(n, "$text-muted") for n in (self.note, brief(self.note), figures(self.note))))
        region = self.content_region
        lines += fitted(notes, region.height - len(lines), region.width)
        return Content("\n").join(fold(lines, region.width, region.height))
