"""Light background for screenshots pasted into bug reports and docs."""

from textual.theme import Theme

THEME = Theme(
    name="kvtop-light",
    primary="#005fb8",
    secondary="#3a6ea5",
    accent="#b35c00",
    warning="#b35c00",
    error="#c4161c",
    success="#1a7f37",
    foreground="#1f2328",
    background="#f6f8fa",
    surface="#ffffff",
    panel="#e8ecf0",
    dark=False,
    variables={
        "kvtop-ok": "#1a7f37",
        "kvtop-warn": "#b35c00",
        "kvtop-critical": "#c4161c",
        "kvtop-ceiling": "#c4161c",
        "kvtop-measured": "#005fb8",
        "kvtop-forecast": "#8a6d00",
        "kvtop-reused": "#6639ba",
        "kvtop-kv-full": "#005fb8",
        "kvtop-kv-sliding": "#1a7f37",
        "kvtop-kv-latent": "#b35c00",
        "kvtop-kv-recurrent": "#8250df",
        "kvtop-bar-empty": "#d0d7de",
    },
)
