"""Speculation in F1 and F2: the turn's line ("speculation: 3.4 tok/pass, …") and its
acceptance at each draft position ("accepted by position: 1 92% · 2 71% · 3 40% …");
attached to a speculating llama-server, the positions of its last verify passes (the
/metrics deltas the Server pane shows)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.content import Content
from textual.geometry import Size
from textual.widget import Widget

from kvtop.runner.policy.speculation import position_line, position_parts, spec_line, spec_phrases
from kvtop.runner.server.spec_metrics import position_phrases
from kvtop.tui.base.format import pack

if TYPE_CHECKING:
    from kvtop.runner.events import TurnMetrics
    from kvtop.tui.app import KvtopApp

F1_WHAT = ("a verify pass decodes the sampled token and a draft in one batch and keeps the draft up to the first "
           "token the model disagrees with; tok/pass is the tokens a pass yields; accepted by position, the share "
           "of verify passes that kept the draft's token at that position (1: the first drafted)")


def turn_spec_lines(m: TurnMetrics) -> list[str]:
    """The turn's lines: none when it did not speculate."""
    return [x for x in (spec_line(m), position_line(m)) if x]


class SpecLines(Widget):
    """F2's speculation lines, each broken only between its phrases at the dialog's width
    (word-wrapped, "1.9x plain" ended a line and "decode" began the next)."""

    DEFAULT_CSS = "SpecLines { height: auto; color: $kvtop-measured; }"

    def __init__(self, m: TurnMetrics, **kw) -> None:
        super().__init__(**kw)
        parts = position_parts(m.spec_accepted_per_pos, m.spec_passes)
        self.groups = [g for g in (spec_phrases(m) or [], ["accepted by position:", *parts] if parts else []) if g]

    @property
    def empty(self) -> bool:
        return not self.groups

    def lines(self, width: int) -> list[Content]:
        return [line for g in self.groups for line in pack(g, width, " ")]

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self.lines(width))

    def render(self) -> Content:
        return Content("\n").join(self.lines(self.content_region.width))


def help_spec(app: KvtopApp) -> str | None:
    """F1's speculation row: what the figures mean and the session's latest; None when
    nothing speculated (no turn of this chat did, and no attached server reports drafts)."""
    said: list[str] = []
    m = next((t.metrics for t in reversed(list(app.turns)) if t.metrics.spec_type), None)
    if m is not None and m.spec_type != "llama-server":
        said += [f"last speculative turn: {x}" if i == 0 else x for i, x in enumerate(turn_spec_lines(m))]
    for snap in list(getattr(app, "server_snapshots", {}).values()):
        rates = getattr(snap, "spec", None)
        phrase = position_phrases(rates) if rates is not None and rates.totals.drafted > 0 else None
        if phrase:
            said.append(f"llama-server {phrase}")
    if not said and m is None:
        return None
    return F1_WHAT + ("; " + "; ".join(said) if said else "")
