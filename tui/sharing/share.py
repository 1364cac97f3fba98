"""Sharing without leaking: the Ctrl+E dialog, the debug bundle and screenshots that
leave the conversation out.

Ctrl+E asks what to write. The default, a redacted bundle, is safe to attach to a public
bug report (``runner.redact``): numbers, settings, hardware, GGUF facts and the
trace with every message and token replaced by its length, home paths, user and host
names left out, and a screenshot with the chat pane blanked. The text goes in only when
the user asks (the dialog's second choice, or ``--bundle-text``). A screenshot without
the chat is the third choice (and in the command palette); Ctrl+S still saves what the
user sees.

``Share`` is the App's ``share``: it owns all of that (Ctrl+S, Ctrl+E and its dialog, the
bundle) and remembers the files it saved last (``last_saved``, ``last_saved_whole``,
``last_csv``).
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from kvtop.runner.records.paths import unique_file
from kvtop.runner.redact import Redactor, scrub_svg
from kvtop.runner.sanitize import clean_line

if TYPE_CHECKING:
    from kvtop.tui.app import KvtopApp

CHAT_HIDDEN = "chat left out of this screenshot"
HIDE_TRIES = 20  # refreshes to wait for the chat to be hidden before giving up on the shot
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


_SVG_BAD_XML = dict.fromkeys(i for i in range(32) if i not in (9, 10, 13))


def clean_svg(svg: str) -> str:
    """Control characters are not XML: a model's output must not break the SVG."""
    return svg.translate(_SVG_BAD_XML)


def _folder(path: str) -> str:
    """A saved file's folder for a notice, the home folder as ``~``: a toast wraps a long
    path in the middle of a name ("…191041.sv" / "g"), so names and folder get lines of
    their own."""
    import os

    folder, home = os.path.dirname(path), os.path.expanduser("~")
    return "~" + folder[len(home):] if home not in ("", "/") and folder.startswith(home + os.sep) else folder


class Share:
    """The App's screenshots, its debug bundle and the Ctrl+E dialog that asks which."""

    def __init__(self, app: KvtopApp) -> None:
        self.app = app
        self.last_saved: str | None = None
        self.last_saved_whole: str | None = None  # Ctrl+S's whole-dashboard SVG (tui/sharing/full_shot.py)
        self.last_csv: str | None = None

    def screenshot_svg(self) -> str:
        return clean_svg(self.app.export_screenshot(title="kvtop"))

    def debug_bundle(self, redact: bool = True, screenshot_svg: str | None = None) -> dict:
        from kvtop.runner.commands.bundle import debug_bundle

        app = self.app
        svg = self.screenshot_svg() if screenshot_svg is None else screenshot_svg
        return debug_bundle(app.session, app.facts, app.hw,
                            {"refresh_s": app.refresh_s, "refresh_why": app.refresh_why}, svg, redact=redact)

    def export(self) -> None:
        """Ctrl+E: the dialog (once: a second Ctrl+E while it is open does nothing), then the
        bundle it asks for (redacted by default, or with the text) with the turns' CSV beside it."""
        app = self.app
        if isinstance(app.screen, ExportScreen):
            return
        app.push_screen(ExportScreen(app.options.bundle_text), self._chosen)

    # -------------------------------------------------------------- the chat, hidden
    def conceal_chat(self, on: bool) -> None:
        """Blank the chat pane (messages, the reply's tail, the prompt, the waterfall's
        question) for a screenshot, and say so in its border; ``on=False`` shows it again."""
        self.app.set_class(on, "-hide-chat")
        chat = self.app.query_one("#chat")
        chat.border_title = CHAT_HIDDEN if on else None

    def screenshot(self, hide_chat: bool = False) -> None:
        """Ctrl+S: save what the user sees, dialogs and all (``hide_chat``: the chat pane
        blanked), but never kvtop's own notices (the last "saved …" would be in the next
        shot): the toasts go, then the shot is taken once the screen has redrawn without them."""
        self.app.clear_notifications()
        if hide_chat:
            self.conceal_chat(True)
            self._tries = 0
            self.app.call_after_refresh(self._when_chat_hidden)
            return
        self.app.call_after_refresh(self._save_screenshot, hide_chat)

    def _chat_hidden(self) -> bool:
        """Whether the dashboard has restyled without the chat. The class is the App's, but
        a screen restyles only while it is on top: from the command palette, the dashboard
        took the shot before it had, and every message was in "the chat left out" SVG."""
        dashboard = self.app.screen_stack[0]
        hidden = [w for sel in ("#chat > *", "#prompt") for w in dashboard.query(sel)]
        return bool(hidden) and all(w.styles.visibility == "hidden" for w in hidden)

    def _when_chat_hidden(self) -> None:
        """Take the shot once the chat is hidden on screen; never one with the chat in it."""
        app = self.app
        if self._chat_hidden():  # styled hidden: laid out so now, then the shot
            from kvtop.tui.base.textual_private import refresh_layout

            refresh_layout(app.screen_stack[0])
            self._save_screenshot(True)
            return
        self._tries += 1
        if self._tries > HIDE_TRIES:
            self.conceal_chat(False)
            app.notify("screenshot not saved: the chat could not be hidden", severity="error", markup=False)
            return
        app.update_styles(app.screen_stack[0])  # restyle the dashboard even under a dialog
        app.call_after_refresh(self._when_chat_hidden)

    def _shot(self, hide_chat: bool) -> tuple[str, str | None]:
        """The visible screen's SVG, and the whole dashboard's at a readable size when the
        screen leaves panes out or is small (tui/sharing/full_shot.py; None when it shows it all,
        or a dialog is open)."""
        from kvtop.tui.sharing.full_shot import needs_whole_dashboard, whole_dashboard_svg

        app = self.app
        try:
            svg = self.screenshot_svg()
            whole = None
            if len(app.screen_stack) == 1 and needs_whole_dashboard(app):
                whole = clean_svg(whole_dashboard_svg(app))
        finally:
            if hide_chat:
                self.conceal_chat(False)
        if hide_chat:
            svg, whole = Redactor().home(svg), (Redactor().home(whole) if whole else None)
        return scrub_svg(svg), scrub_svg(whole)  # never an API key or URL login (runner/redact.py)

    def _save_screenshot(self, hide_chat: bool) -> None:
        app = self.app
        svg, whole = self._shot(hide_chat)
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
        self.last_saved = path
        self.last_saved_whole = whole_path
        import os

        note = f"saved {os.path.basename(path)}" + (" (the chat left out)" if hide_chat else "")
        if whole_path:
            note += f"\nand {os.path.basename(whole_path)}\n(every pane at 160 columns)"
        app.notify(f"{note}\nin {_folder(path)}", markup=False, timeout=8)

    # -------------------------------------------------------------- the bundle
    def _chosen(self, choice: str | None) -> None:
        """The dialog's answer: write the bundle (redacted unless "text"), or a screenshot."""
        if choice is None:
            return
        if choice == "screenshot":
            self.screenshot(hide_chat=True)
            return
        redact = choice != "text"
        self.app.clear_notifications()
        if redact:
            self.conceal_chat(True)
        self.app.call_after_refresh(self._write_export, redact)

    def _write_export(self, redact: bool) -> None:
        """The debug bundle (JSON) and the per-turn timings as CSV beside it."""
        from kvtop.runner.commands.bundle import turn_dicts
        from kvtop.tui.base.export import write_turns_csv

        app = self.app
        svg, whole = self._shot(redact)
        svg = whole or svg  # the bundle's screenshot shows every pane (tui/sharing/full_shot.py)
        stem = time.strftime("kvtop-debug-%Y%m%d-%H%M%S")
        try:
            bundle = self.debug_bundle(redact=redact, screenshot_svg=svg)
            path, fh = unique_file(app.paths.exports_dir, stem, "json")
            with fh:
                json.dump(bundle, fh, indent=2, default=str)
            csv_path, cfh = unique_file(app.paths.exports_dir, stem + "-turns", "csv")
            with cfh:
                write_turns_csv(cfh, turn_dicts(app.session, redact))
        except OSError as exc:
            app.notify(f"export failed: {clean_line(str(exc))}", severity="error", markup=False)
            return
        self.last_saved = path
        self.last_csv = csv_path
        import os

        # short lines: at 80x24 the toast is ~36 columns and its end went under the key bar
        saved = f"debug bundle {os.path.basename(path)}\n(and its -turns.csv)\nin {_folder(path)}\n"
        if redact:
            said = saved + "redacted, safe to post (no chat text, no home paths); Ctrl+E, t: with text"
            app.notify(said, markup=False, timeout=8)
        else:
            said = saved + "WITH the conversation text and paths: share only with people you trust"
            app.notify(said, severity="warning", markup=False, timeout=8)
