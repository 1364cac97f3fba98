"""What the user chose for how kvtop looks, remembered: the theme (Ctrl+T) and Markdown
for the model's replies (F3).

``Looks`` is the App's ``looks``: it reads the preferences file at start (tui/base/config.py:
whatever is there, kvtop starts), applies the choices once the screen is mounted, and
saves each change at once; a file that cannot be written is a warning, never a crash.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvtop.runner.sanitize import clean_line
from kvtop.themes import DEFAULT_THEME, THEMES, register_all
from kvtop.tui.base.config import load_preferences, save_preferences

if TYPE_CHECKING:
    from kvtop.tui.app import KvtopApp


class Looks:
    def __init__(self, app: KvtopApp) -> None:
        self.app = app
        self.prefs = load_preferences(app.paths.config_file)

    def apply(self) -> None:
        """On mount: kvtop's themes registered, the saved one on (an unknown name: the
        default), every later change remembered; the chat in Markdown or plain text."""

        app = self.app
        register_all(app)
        names = {t.name for t in THEMES} | set(app.available_themes)
        app.theme = self.prefs.theme if self.prefs.theme in names else DEFAULT_THEME
        app.theme_changed_signal.subscribe(app, self.remember_theme)
        app.dash.chat.markdown = self.prefs.markdown

    def remember_theme(self, theme) -> None:
        self.prefs.theme = theme.name
        self.save()
        self.app.dash.chat.restyle()
        self.app.dash.decode.redraw_chart()  # plotext holds the old theme's colours

    def toggle_markdown(self) -> None:
        """F3: the model's finished replies as Markdown, or as plain text."""

        self.prefs.markdown = not self.prefs.markdown
        self.app.dash.chat.set_markdown(self.prefs.markdown)
        self.save()
        self.app.notify("Markdown on: links are shown as text (url) and never opened" if self.prefs.markdown
                        else "Markdown off: replies are plain text", markup=False, timeout=3)

    def save(self) -> None:
        try:
            save_preferences(self.app.paths.config_file, self.prefs)
        except OSError as exc:
            self.app.notify(f"could not save preferences: {clean_line(str(exc))}", severity="warning",
                            markup=False)
