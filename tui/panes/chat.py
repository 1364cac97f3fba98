"""The chat transcript: user and model turns as plain text, with a footer per turn.

Model output is untrusted: it is cleaned of control characters and shown as
``Content`` built from plain strings, so ``[@click=app.quit]`` or ``[/]`` is text.

Markdown (F3, off by default) renders finished model replies with Rich's Markdown
parser, which builds plain text runs (no console markup) and, with
``hyperlinks=False``, writes every link as ``text (url)``: the target is shown,
nothing is clickable, nothing is opened or fetched (images show their alt text).
A reply still streaming stays plain text until it ends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual import events
from textual.containers import VerticalScroll
from textual.content import Content
from textual.css.query import NoMatches

from kvtop.runner.events import STOP_LABELS
from kvtop.runner.sanitize import clean_text
from kvtop.tui.base.format import fmt_int, fmt_rate, fmt_seconds, pack
from kvtop.tui.panes.base import PaneStatic, PaneWidget

if TYPE_CHECKING:
    from textual.app import App

FOLLOW_AFTER_S = 0.05


FOOTER_GAP = " · "  # between a footer's phrases, where it may break


class ChatMessage(PaneStatic):
    def __init__(self, role: str, text: str = "", markdown: bool = False, streaming: bool = False, **kw) -> None:
        super().__init__(markup=False, **kw)
        self.role = role
        self.text = text
        self.footer: str = ""
        self.markdown = markdown
        self.streaming = streaming
        self.turn_index: int | None = None  # the finished turn this reply is (session.turns)
        self.add_class(f"-{role}")
        self._show()

    def on_click(self, event) -> None:
        """A click on a finished reply opens its TTFT waterfall (F2 at that turn)."""
        if self.turn_index is not None:
            event.stop()
            self.app.action_waterfall(self.turn_index)

    def set_markdown(self, on: bool) -> None:
        if on != self.markdown:
            self.markdown = on
            self._show()

    def finish(self, text: str, footer: str) -> None:
        self.streaming = False
        self.text, self.footer = text, footer
        self._show()
        log = self.parent
        if isinstance(log, ChatLog):
            log.set_timer(FOLLOW_AFTER_S, lambda: log.follow(self))

    def set_text(self, text: str) -> None:
        self.text = text
        self._show()

    def set_footer(self, footer: str) -> None:
        self.footer = footer
        self._show()

    def _show(self) -> None:
        if self.role == "note":  # what kvtop did to the chat (a context shift): a dim line, no speaker
            self.update(Content.styled(clean_text(self.text), "$text-muted"))
            return
        label = {"user": "you", "assistant": "model", "system": "kvtop"}.get(self.role, self.role)
        if self.markdown and self.role == "assistant" and not self.streaming and self.text:
            self.update(self._markdown_view(label))
            return
        parts: list = [(f"{label}: ", "bold $accent" if self.role == "user" else "bold $primary"),
                       clean_text(self.text) or ("…" if self.role == "assistant" else "")]
        if self.footer:  # broken between its phrases only: word-wrapped, "30.1" ended a line and "tok/s" began the next
            width = self.content_region.width
            footer = Content("\n").join(pack(self.footer.split(FOOTER_GAP), width, FOOTER_GAP))
            parts += ["\n", footer.stylize("$text-muted")]
        self.update(Content.assemble(*parts))

    def on_resize(self) -> None:
        if self.footer and not self.markdown:  # its phrases are laid out at the width
            self._show()

    def restyle(self) -> None:
        """The Markdown view holds colours resolved from the theme: redraw it on a new one."""
        if self.markdown:
            self._show()

    def _markdown_view(self, label: str):
        from rich.console import Group
        from rich.markdown import Markdown
        from rich.text import Text

        var = self.app.theme_variables
        parts = [Text(f"{label}:", style=f"bold {var.get('primary', '')}".strip()),
                 Markdown(clean_text(self.text), hyperlinks=False)]
        if self.footer:
            parts.append(Text(self.footer, style=var.get("text-muted", "")))
        return Group(*parts)


class StreamTail(PaneWidget):
    """The last lines of the reply being generated, redrawn in place (no re-layout).

    Re-wrapping and re-laying-out the whole growing reply in the transcript on every
    update measurably slows decode on a 2-core machine; this fixed-height tail shows
    the text as it streams, and the transcript gets the full reply at the end (and
    every ``TurnView.CHAT_INTERVAL`` seconds during a long one: tui/turn/turn_view.py)."""

    LINES = 3

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.text = ""

    def show(self, text: str) -> None:
        self.text = text
        self.refresh()  # always displayed: toggling display would re-layout the column

    def render(self) -> Content:
        width = max(1, self.size.width)
        tail = self.text[-width * (self.LINES + 1) * 2:]
        lines = Content(tail).wrap(width)
        return Content("\n").join(lines[-self.LINES:]) if lines else Content("")


class ChatLog(VerticalScroll):
    """The transcript. Anchored to its end: it follows new text as the layout grows it
    (not when a scroll call happens to run), until the user scrolls up to read; going
    back to the end follows again."""

    markdown = False  # render finished model replies as Markdown (F3)

    def on_mount(self) -> None:
        self.anchor()

    def add(self, role: str, text: str = "", streaming: bool = False) -> ChatMessage:
        m = ChatMessage(role, text, markdown=self.markdown, streaming=streaming)
        self.mount(m)
        return m

    def note(self, text: str, before: ChatMessage | None = None) -> ChatMessage:
        """A dim line from kvtop itself, before ``before`` (the reply it concerns) when given."""
        m = ChatMessage("note", text)
        if before is not None and before.parent is self:
            self.mount(m, before=before)
        else:
            self.mount(m)
        return m

    def follow(self, reply: ChatMessage) -> None:
        """Lay the reply out again a moment after its final text landed. Textual keeps one
        pending layout request per screen (a newer one replaces an older), and a turn's
        end re-lays out several panes in the same frame: the reply could keep its
        streaming height, cut at the bottom of the anchored log, until the next layout."""
        if reply.parent is self:
            reply.refresh(layout=True)

    def set_markdown(self, on: bool) -> None:
        self.markdown = on
        for m in self.query(ChatMessage):
            m.set_markdown(on)

    def restyle(self) -> None:
        for m in self.query(ChatMessage):
            m.restyle()


def turn_footer(result) -> str:
    m = result.metrics
    parts = [f"TTFT {fmt_seconds(m.ttft_s)}", f"{fmt_int(m.decode_tokens)} tok", fmt_rate(m.decode_tok_s)]
    if m.reused_tokens:
        parts.append(f"{fmt_int(m.reused_tokens)} reused")
    parts.append(STOP_LABELS.get(result.stop_reason, result.stop_reason))
    return FOOTER_GAP.join(parts)


class TypedKeys:
    """Printable keys for the prompt, taken off the app's queue and inserted in one edit.

    Textual's ``Input`` re-measures its whole value on every key (the cursor's cell
    offset expands tabs and measures every character before it), so N keys typed raw
    (a paste without bracketed paste arrives as N key events) cost O(N²): measured,
    8,000 keys took 8 s and 20,000 took 40 s, and Ctrl+Q waited behind them all. The
    app hands each printable key meant for the prompt here (``take``) instead of
    through the binding chain; they are inserted together by a flush scheduled once,
    behind the keys already queued, and before any other event is handled (``flush``),
    so Enter, Ctrl+O or a click always sees every key typed before it, in order."""

    SHORTCUTS = {"q": "quit", "?": "help"}  # as in nvitop and btop, which have no prompt: see ``shortcut``

    def __init__(self, app: App, prompt_id: str = "prompt") -> None:
        self.app = app
        self.prompt_id = prompt_id
        self.chars: list[str] = []
        self._prompt = None

    def _main_prompt(self):
        """The prompt, when the main screen is the only one (no dialog open)."""
        if len(self.app.screen_stack) != 1:
            return None
        prompt = self._prompt
        if prompt is None or not prompt.is_attached:
            try:
                prompt = self._prompt = self.app.query_one(f"#{self.prompt_id}")
            except NoMatches:
                return None
        return prompt

    def shortcut(self, event) -> str | None:
        """The action of ``q`` (quit) or ``?`` (help) when they are commands: on the main
        screen, with the cursor outside the prompt (Tab or a click moved it) and nothing
        in the prompt or on its way there. Anywhere else they are text: a message that
        starts with "q" cannot be told from a lone q as its first key arrives, and a
        draft must not be lost to a quit."""
        if not isinstance(event, events.Key) or event.is_forwarded or event.character not in self.SHORTCUTS:
            return None
        if len(self.app.screen_stack) != 1 or self.chars:
            return None
        prompt = self._main_prompt()
        if prompt is not None and not prompt.disabled and (prompt.has_focus or prompt.value):
            return None
        return self.SHORTCUTS[event.character]

    def take(self, event) -> bool:
        """Keep ``event`` if it is a printable key for the prompt on the main screen (no
        dialog open): typed with the cursor in the prompt, or elsewhere (the chat, a
        pane), which moves the cursor to the prompt first, so no key is lost. False: the
        app handles it as usual."""
        if not isinstance(event, events.Key) or event.is_forwarded or not event.is_printable:
            return False
        prompt = self._main_prompt()
        if prompt is None or prompt.disabled:
            return False
        if not prompt.has_focus:
            prompt.focus()
        if not self.chars:
            self.app.call_later(self.flush)
        self.chars.append(event.character)
        return True

    def flush(self) -> None:
        """Insert the kept keys where the cursor is, replacing a selection as a key would."""
        if not self.chars:
            return
        text = "".join(self.chars)
        self.chars.clear()
        prompt = self._prompt
        if prompt is None or not prompt.is_attached:
            return
        selection = prompt.selection
        if selection.is_empty:
            prompt.insert_text_at_cursor(text)
        else:
            prompt.replace(text, *selection)
