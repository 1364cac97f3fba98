"""Sharing without leaking: the Ctrl+E dialog, the debug bundle and screenshots that
leave the conversation out.

Ctrl+E asks what to write. The default, a redacted bundle, is safe to attach to a public
bug report (``runner.records.redact``): numbers, settings, hardware, GGUF facts and the
trace with every message and token replaced by its length, home paths, user and host
names left out, and a screenshot with the chat pane blanked. The text goes in only when
the user asks (the dialog's second choice, or ``--bundle-text``). A screenshot without
the chat is the third choice (and in the command palette); Ctrl+S still saves what the
user sees.
"""

from __future__ import annotations

import json
import time

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from runner.records.paths import unique_file
from runner.records.redact import Redactor, scrub_svg
from runner.sanitize import clean_line

CHAT_HIDDEN = "chat left out of this screenshot"
REDACTED_TEXT = (
    "Redacted, safe to post: timings, token counts, settings, hardware, GGUF facts, the TTFT waterfall "
    "and the trace ('kvtop replay' opens the bundle). Every message, reply and token is replaced by its "
    "length, the home folder by ~, the user and host names by <user> and <host>; the screenshot leaves "
    "out the chat.")
WITH_TEXT = ("With conversation text: also your messages, the replies, the system prompt, paths and the "
             "host name as they are. For you, or people you trust.")
CHOICES = (("redacted", "r", "Redacted bundle, safe to post"), ("text", "t", "Bundle with conversation text"),
           ("screenshot", "s", "Screenshot without the chat"), ("cancel", "esc", "Cancel"))


class ExportScreen(ModalScreen[str | None]):
    """Ctrl+E: which bundle to write. Dismisses with "redacted", "text", "screenshot" or
    None (cancelled). Enter takes the focused choice: the redacted bundle, or the one
    with the text when kvtop was started with ``--bundle-text``."""

    BINDINGS = [Binding("escape", "choose('cancel')", "Cancel"), Binding("r", "choose('redacted')", show=False),
                Binding("t", "choose('text')", show=False), Binding("s", "choose('screenshot')", show=False),
                Binding("down", "app.focus_next", show=False), Binding("up", "app.focus_previous", show=False)]

    def __init__(self, with_text_default: bool = False) -> None:
        super().__init__()
        self.default = "text" if with_text_default else "redacted"

    def compose(self) -> ComposeResult:
        with Vertical(id="export-box", classes="dialog"):
            yield Static(Content.styled("Export a debug bundle", "bold"), markup=False)
            yield Static(Content(REDACTED_TEXT), markup=False, id="export-about-redacted")
            yield Static(Content(WITH_TEXT), markup=False, id="export-about-text")
            if self.default == "text":
                yield Static(Content.styled("--bundle-text: Enter writes the bundle with the text.", "$warning"),
                             markup=False, id="export-note")
            with Vertical(id="export-choices"):
                for choice, key, label in CHOICES:
                    variant = "primary" if choice == self.default else "default"
                    yield Button(f"{key:>3}  {label}", id=f"export-{choice}", variant=variant, compact=True)

    def on_mount(self) -> None:
        self.query_one(f"#export-{self.default}", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.action_choose((event.button.id or "").removeprefix("export-"))

    def action_choose(self, choice: str) -> None:
        self.dismiss(None if choice == "cancel" else choice)


def open_export(app) -> None:
    """Ctrl+E: the dialog (once: a second Ctrl+E while it is open does nothing)."""
    if isinstance(app.screen, ExportScreen):
        return
    app.push_screen(ExportScreen(app.options.bundle_text), lambda choice: run_export(app, choice))


# ------------------------------------------------------------------ the chat, hidden
def conceal_chat(app, on: bool) -> None:
    """Blank the chat pane (messages, the reply's tail, the prompt, the waterfall's
    question) for a screenshot, and say so in its border; ``on=False`` shows it again."""
    app.set_class(on, "-hide-chat")
    chat = app.query_one("#chat")
    chat.border_title = CHAT_HIDDEN if on else None


def take_screenshot(app, hide_chat: bool = False) -> None:
    """Save what the user sees, dialogs and all, but never kvtop's own notices (the
    last "saved …" would be in the next shot): the toasts go, then the shot is taken
    once the screen has redrawn without them (and without the chat, ``hide_chat``)."""
    app.clear_notifications()
    if hide_chat:
        conceal_chat(app, True)
    app.call_after_refresh(_save_screenshot, app, hide_chat)


def _shot(app, hide_chat: bool) -> tuple[str, str | None]:
    """The visible screen's SVG, and the whole dashboard's at a readable size when the
    screen leaves panes out or is small (tui/full_shot.py; None when it shows it all,
    or a dialog is open)."""
    from .full_shot import needs_whole_dashboard, whole_dashboard_svg

    try:
        svg = app.screenshot_svg()
        whole = None
        if len(app.screen_stack) == 1 and needs_whole_dashboard(app):
            whole = app.clean_svg(whole_dashboard_svg(app))
    finally:
        if hide_chat:
            conceal_chat(app, False)
    if hide_chat:
        svg, whole = Redactor().home(svg), (Redactor().home(whole) if whole else None)
    return scrub_svg(svg), scrub_svg(whole)  # never an API key or URL login (runner/records/redact.py)


def _folder(path: str) -> str:
    """A saved file's folder for a notice, the home folder as ``~``: a toast wraps a long
    path in the middle of a name ("…191041.sv" / "g"), so names and folder get lines of
    their own."""
    import os

    folder, home = os.path.dirname(path), os.path.expanduser("~")
    return "~" + folder[len(home):] if home not in ("", "/") and folder.startswith(home + os.sep) else folder


def _save_screenshot(app, hide_chat: bool) -> None:
    svg, whole = _shot(app, hide_chat)
    stem = time.strftime("kvtop-%Y%m%d-%H%M%S")
    try:
        path, fh = unique_file(app.paths.screenshots_dir, stem, "svg")
        with fh:
            fh.write(svg)
        whole_path = None
        if whole is not None:
            whole_path, fh = unique_file(app.paths.screenshots_dir, stem + "-dashboard", "svg")
            with fh:
                fh.write(whole)
    except OSError as exc:
        app.notify(f"screenshot failed: {clean_line(str(exc))}", severity="error", markup=False)
        return
    app.last_saved = path
    app.last_saved_whole = whole_path
    import os

    note = f"saved {os.path.basename(path)}" + (" (the chat left out)" if hide_chat else "")
    if whole_path:
        note += f"\nand {os.path.basename(whole_path)}\n(every pane at 160 columns)"
    app.notify(f"{note}\nin {_folder(path)}", markup=False, timeout=8)


# ------------------------------------------------------------------ the bundle
def run_export(app, choice: str | None) -> None:
    """The dialog's answer: write the bundle (redacted unless "text"), or a screenshot."""
    if choice is None:
        return
    if choice == "screenshot":
        take_screenshot(app, hide_chat=True)
        return
    redact = choice != "text"
    app.clear_notifications()
    if redact:
        conceal_chat(app, True)
    app.call_after_refresh(_write_export, app, redact)


def _write_export(app, redact: bool) -> None:
    """The debug bundle (JSON) and the per-turn timings as CSV beside it."""
    from runner.commands.bundle import turn_dicts

    from .export import write_turns_csv

    svg, whole = _shot(app, redact)
    svg = whole or svg  # the bundle's screenshot shows every pane (tui/full_shot.py)
    stem = time.strftime("kvtop-debug-%Y%m%d-%H%M%S")
    try:
        bundle = app.debug_bundle(redact=redact, screenshot_svg=svg)
        path, fh = unique_file(app.paths.exports_dir, stem, "json")
        with fh:
            json.dump(bundle, fh, indent=2, default=str)
        csv_path, cfh = unique_file(app.paths.exports_dir, stem + "-turns", "csv")
        with cfh:
            write_turns_csv(cfh, turn_dicts(app.session, redact))
    except OSError as exc:
        app.notify(f"export failed: {clean_line(str(exc))}", severity="error", markup=False)
        return
    app.last_saved = path
    app.last_csv = csv_path
    import os

    # short lines: at 80x24 the toast is ~36 columns and its end went under the key bar
    saved = f"debug bundle {os.path.basename(path)}\n(and its -turns.csv)\nin {_folder(path)}\n"
    if redact:
        said = saved + "redacted, safe to post (no chat text, no home paths); Ctrl+E, t: with text"
        app.notify(said, markup=False, timeout=8)
    else:
        said = saved + "WITH the conversation text and paths: share only with people you trust"
        app.notify(said, severity="warning", markup=False, timeout=8)
