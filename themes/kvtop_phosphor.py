"""Green phosphor, for those who miss their VT220."""

from textual.theme import Theme

THEME = Theme(
    name="kvtop-phosphor",
    primary="#33ff66",
    secondary="#1f9940",
    accent="#b3ff66",
    warning="#e6ff4d",
    error="#ff6b4d",
    success="#33ff66",
    foreground="#33ff66",
    background="#0a120c",
    surface="#0f1a11",
    panel="#142416",
    dark=True,
    variables={
        "kvtop-ok": "#33ff66",
        "kvtop-warn": "#e6ff4d",
        "kvtop-critical": "#ff6b4d",
        "kvtop-ceiling": "#ff6b4d",
        "kvtop-measured": "#33ff66",
        "kvtop-forecast": "#b3ff66",
        "kvtop-reused": "#1f9940",
        "kvtop-kv-full": "#33ff66",
        "kvtop-kv-sliding": "#b3ff66",
        "kvtop-kv-latent": "#e6ff4d",
        "kvtop-kv-recurrent": "#66ffcc",
        "kvtop-bar-empty": "#1c3320",
    },
)
