"""Maximum contrast: pure black and white with saturated signal colours."""

from textual.theme import Theme

THEME = Theme(
    name="kvtop-high-contrast",
    primary="#00ffff",
    secondary="#ffffff",
    accent="#ffff00",
    warning="#ffff00",
    error="#ff0000",
    success="#00ff00",
    foreground="#ffffff",
    background="#000000",
    surface="#000000",
    panel="#000000",
    dark=True,
    variables={
        "kvtop-ok": "#00ff00",
        "kvtop-warn": "#ffff00",
        "kvtop-critical": "#ff0000",
        "kvtop-ceiling": "#ff0000",
        "kvtop-measured": "#00ffff",
        "kvtop-forecast": "#ffff00",
        "kvtop-reused": "#ff00ff",
        "kvtop-kv-full": "#00ffff",
        "kvtop-kv-sliding": "#00ff00",
        "kvtop-kv-latent": "#ffff00",
        "kvtop-kv-recurrent": "#ff00ff",
        "kvtop-bar-empty": "#555555",
        "border": "#ffffff",
    },
)
