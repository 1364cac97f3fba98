"""The prompt: Textual's one-line ``Input``, where a paste of several lines becomes a chip.

Textual's ``Input`` keeps only the first line of a paste, so a pasted letter of five
paragraphs used to send paragraph one, silently. Here a paste (or a Ctrl+V, or any
insertion) that holds a newline goes into the line as one chip, such as
``[pasted text #1: 5 paragraphs, 327 words]``, and the chip stands for the whole text:
``expanded()`` gives the draft with every chip replaced by what was pasted, newlines
kept, and that is what is forecast before Enter and what Enter sends.

A chip is edited as one piece: Backspace just after it, Delete just before it, or any
deletion or selection that touches it removes all of it; a key typed inside it lands
after it. So a chip is never half there, standing for text the user no longer sees.
Emptying the prompt (a send, Ctrl+U) forgets the pasted texts.

The prompt stays an ``Input`` (not a ``TextArea``) because the rest of kvtop relies on
it: ``Input.Changed`` drives the forecast in the border, ``Input.Submitted`` the send,
``TypedKeys`` inserts raw keystrokes through ``insert_text_at_cursor``/``replace``, and
the one-line height is part of the dashboard's layout. The pasted text is never parsed
as markup: it is kept as a plain ``str`` and the chip's label is made of counts."""

from __future__ import annotations

import re

from textual import events
from textual.widgets import Input

_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")


def normalise_newlines(text: str) -> str:
    """A terminal's paste may end lines with \\r\\n or \\r: one newline each."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def chip_label(number: int, text: str) -> str:
    """What the prompt shows for a pasted ``text``: its paragraphs (or lines) and words."""
    paragraphs = [p for p in _PARAGRAPH_BREAK.split(text) if p.strip()]
    words = len(text.split())
    if len(paragraphs) > 1:
        size = f"{len(paragraphs)} paragraphs"
    else:
        lines = text.count("\n") + 1
        size = f"{lines} line{'' if lines == 1 else 's'}"
    return f"[pasted text #{number}: {size}, {words} word{'' if words == 1 else 's'}]"


class PromptInput(Input):
    """kvtop's prompt: an ``Input`` whose multi-line pastes are kept whole (see the module)."""

    def __init__(self, *args, short_placeholder: str = "", **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.pastes: dict[str, str] = {}  # chip label -> the text it stands for
        self._pasted_count = 0
        self.placeholders = (self.placeholder, short_placeholder or self.placeholder)

    def on_resize(self) -> None:
        """The placeholder that fits the prompt's width: at 80x24 "Message (Enter to send,
        F1 for help)" was cut after "F1 for"."""
        long, short = self.placeholders
        width = self.content_region.width
        if self.placeholder in (long, short) and width > 0:
            self.placeholder = long if len(long) <= width else short

    # ------------------------------------------------------------ the draft
    def expanded(self, value: str | None = None) -> str:
        """``value`` (the prompt's by default) with every chip replaced by its text."""
        text = self.value if value is None else value
        for label, pasted in self.pastes.items():
            if label in text:
                text = text.replace(label, pasted)
        return text

    def chip_spans(self) -> list[tuple[int, int]]:
        """Where each chip sits in the value, as (start, end), in order."""
        spans = []
        value = self.value
        for label in self.pastes:
            start = value.find(label)
            while start != -1:
                spans.append((start, start + len(label)))
                start = value.find(label, start + len(label))
        return sorted(spans)

    def watch_value(self, value: str) -> None:
        if not value:  # sent or cleared: the pasted texts go with the draft
            self.pastes.clear()
            self._pasted_count = 0

    # ------------------------------------------------------------ editing
    def _on_paste(self, event: events.Paste) -> None:
        if event.text:  # Input's own keeps the first line only: here replace() makes a chip
            self.replace(event.text, *self.selection)
        event.prevent_default()  # Textual would run Input's own handler next, pasting line one again
        event.stop()

    def replace(self, text: str, start: int, end: int) -> None:
        """As ``Input.replace``, but text with newlines becomes a chip, and an edit that
        touches a chip takes all of it (or, an insertion inside one, lands after it)."""
        text = normalise_newlines(text)
        if "\n" in text:
            body = text.lstrip("\n").rstrip()
            if "\n" in body:
                self._pasted_count += 1
                label = chip_label(self._pasted_count, body)
                self.pastes[label] = body
                text = label
            else:
                text = body  # one line and blank ones around it: the line, as Input would
        start, end = sorted((max(0, start), min(len(self.value), end)))
        for s, e in self.chip_spans():
            if start == end:
                if s < start < e:
                    start = end = e
            elif s < end and e > start:
                start, end = min(start, s), max(end, e)
        super().replace(text, start, end)


def expanded_draft(inp: Input, value: str | None = None) -> str:
    """The draft ``inp`` stands for (``value``, its value by default): a ``PromptInput``'s
    chips replaced by their text; any other ``Input``'s value as it is."""
    if isinstance(inp, PromptInput):
        return inp.expanded(value)
    return inp.value if value is None else value
