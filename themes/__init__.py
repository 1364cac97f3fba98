"""kvtop's themes, one per module, and the app-specific variables they may set.

App colours (ok/warn/critical, the ceiling line, KV kinds, reused tokens) are
theme variables, so every pane reads them through ``$name`` and a theme can
change them. ``APP_VARIABLE_DEFAULTS`` is what ``get_theme_variable_defaults``
returns for themes that do not set them (Textual's built-in ones).
"""

from __future__ import annotations

from textual.theme import Theme

from .kvtop_dark import THEME as KVTOP_DARK
from .kvtop_high_contrast import THEME as KVTOP_HIGH_CONTRAST
from .kvtop_light import THEME as KVTOP_LIGHT
from .kvtop_phosphor import THEME as KVTOP_PHOSPHOR

APP_VARIABLE_DEFAULTS: dict[str, str] = {
    "kvtop-ok": "#4ebf71",
    "kvtop-warn": "#ffa62b",
    "kvtop-critical": "#ff4c4c",
    "kvtop-ceiling": "#ff4c4c",
    "kvtop-measured": "#0178d4",
    "kvtop-forecast": "#d4a72c",
    "kvtop-reused": "#8b6fd6",
    "kvtop-kv-full": "#0178d4",
    "kvtop-kv-sliding": "#4ebf71",
    "kvtop-kv-latent": "#ffa62b",
    "kvtop-kv-recurrent": "#b38ce3",
    "kvtop-bar-empty": "#3a3f4b",
}

THEMES: tuple[Theme, ...] = (KVTOP_DARK, KVTOP_LIGHT, KVTOP_HIGH_CONTRAST, KVTOP_PHOSPHOR)
DEFAULT_THEME = KVTOP_DARK.name


def register_all(app) -> None:
    for theme in THEMES:
        app.register_theme(theme)
