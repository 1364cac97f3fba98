"""``Prose``: a Static whose text is broken between phrases (tui/base/flow.py) at its
width, never inside one by Textual's word-wrap: F2's title read "measured 0.66x of"
above "it"."""

from __future__ import annotations

from textual.content import Content
from textual.geometry import Size
from textual.widgets import Static

from kvtop.tui.base.flow import flow


class Prose(Static):
    def __init__(self, content: Content | str = "", **kw) -> None:
        kw.setdefault("markup", False)  # untrusted text is never markup
        super().__init__(content, **kw)
        self.prose = content if isinstance(content, Content) else Content(content)

    def update(self, content: Content | str = "", *, layout: bool = True) -> None:  # type: ignore[override]
        self.prose = content if isinstance(content, Content) else Content(content)
        super().update(content, layout=layout)

    def render(self) -> Content:
        width = self.content_region.width
        return Content("\n").join(flow(self.prose, width)) if width > 0 else self.prose

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(flow(self.prose, width)) if width > 0 else self.prose.plain.count("\n") + 1
