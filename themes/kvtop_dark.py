"""The default: dark, calm, with the ceiling in red so the gap to it stands out."""

from textual.theme import Theme

THEME = Theme(
    name="kvtop-dark",
    primary="#0178d4",
    secondary="#004578",
    accent="#ffa62b",
    warning="#ffa62b",
    error="#ff4c4c",
    success="#4ebf71",
    foreground="#e0e0e0",
    background="#121417",
    surface="#1b1e23",
    panel="#24282f",
    dark=True,
    variables={
        "kvtop-ok": "#4ebf71",
        "kvtop-warn": "#ffa62b",
        "kvtop-critical": "#ff4c4c",
        "kvtop-ceiling": "#ff4c4c",
        "kvtop-measured": "#3aa0ff",
        "kvtop-forecast": "#e5c07b",
        "kvtop-reused": "#8b6fd6",
        "kvtop-kv-full": "#3aa0ff",
        "kvtop-kv-sliding": "#4ebf71",
        "kvtop-kv-latent": "#ffa62b",
        "kvtop-kv-recurrent": "#b38ce3",
        "kvtop-bar-empty": "#343a44",
    },
)
