"""Every kvtop action once: who does it (``ROUTES``, ``LOAD_ROUTES``, ``handler``) and, in
the command palette (Ctrl+P), the words a user types to find it (Textual's palette
matches the title only).

The App only routes: an action that a composed object owns (the screenshots and the
bundle: ``share``; the remembered theme and Markdown: ``looks``; kvtop load's view:
``load_view``) is done by that object, and ``KvtopApp.run_action`` (keys, the key bar,
clicks) and the palette reach it through ``handler``.

Textual's own entries that kvtop does differently are left out: its "Screenshot"
(which saved nowhere kvtop says and failed with "Failed to save screenshot"), its
"Theme" and "Quit" (kvtop's own below), and "Keys" (F1 lists every key). Its
Maximize/Minimize of the focused pane stay.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from typing import TYPE_CHECKING

from textual.app import SystemCommand

if TYPE_CHECKING:
    from textual.app import App

# action -> the attribute path, from the App, of the callable that does it
ROUTES = {
    "screenshot": "share.screenshot",
    "export": "share.export",
    "toggle_markdown": "looks.toggle_markdown",
    "measure_quality": "quality.toggle",  # the KV cache's KLD on this chat (tui/turn/quality.py)
    "new_chat": "chats.new_chat",  # the old chat is put aside: Ctrl+Z brings it back (tui/turn/chat_undo.py)
    "find_faster": "tuning.toggle",  # kvtop tune's A/Bs in the engine, between turns (tui/turn/tuning.py)
}
# kvtop load's view (tui/server/load_view.py) takes the keys that stop the load
LOAD_ROUTES = {"cancel_turn": "cancel", "quit": "quit", "stop_load": "stop", "quit_when_stopped": "quit_when_stopped"}


def handler(app: App, action: str):
    """The callable that does ``action``: kvtop load's view first, then the object
    ``ROUTES`` names; None for an action that is the App's own ``action_`` method."""
    view = getattr(app, "load_view", None)
    if view is not None and action in LOAD_ROUTES:
        return getattr(view, LOAD_ROUTES[action])
    path = ROUTES.get(action)
    if path is None:
        return None
    target = app
    for name in path.split("."):
        target = getattr(target, name)
    return target


REPLACED = {"Screenshot", "Theme", "Quit", "Keys"}

# (title, help, action[, its keyword arguments]): the key is named in the help, as F1 names it
COMMANDS = (
    ("Cancel the running turn", "Stop the prefill or decode now (Esc)", "cancel_turn"),
    ("TTFT waterfall: where the time to first token went", "Each turn's wait, template, prefill micro-batches "
     "and first token, against the estimate (F2)", "waterfall"),
    ("Screenshot: save an SVG of the screen", "Named by kvtop, in the screenshots folder; the path is shown "
     "(Ctrl+S)", "screenshot"),
    ("Screenshot without the chat, to post", "An SVG with the chat pane blanked (s in Ctrl+E's dialog)",
     "screenshot", {"hide_chat": True}),
    ("Export debug bundle: JSON and CSV", "Settings, hardware, GGUF facts, per-turn timings, the trace, and the "
     "turns as CSV; redacted to post unless you ask for the text (Ctrl+E)", "export"),
    ("New chat: clear the chat and the KV cache", "A running reply is cancelled first; the old chat is put "
     "aside (Ctrl+L)", "new_chat"),
    ("Undo new chat: bring back the last chat", "The chat Ctrl+L put aside; the next turn sends it again "
     "(Ctrl+Z or /undo)", "undo_new_chat"),
    ("Find faster settings: measure them here (kvtop tune)", "Flash attention, threads, micro-batch and KV "
     "types as A/Bs against these settings, in the engine between turns, up to 60 s (Esc stops; the chat "
     "stays); a winner is offered as a restart with its flags (F8)", "find_faster"),
    ("Measure quality of the KV cache (KLD on this chat)", "Its tokens through f16 and quantized caches in contexts "
     "of their own (the chat's cache untouched): KLD and same top token beside the bytes saved, in the KV pane "
     "(F7; Esc stops)", "measure_quality"),
    ("Restart engine with the same settings", "A fresh engine process; the chat stays and the next turn "
     "prefills it again (Ctrl+R)", "restart_engine"),
    ("Attach file: send a file's text", "Types /file in the prompt: add the path, Enter sends it (Ctrl+O)",
     "attach_file"),
    ("Theme: pick a colour theme", "kvtop-dark, kvtop-light, kvtop-high-contrast, kvtop-phosphor; remembered "
     "(Ctrl+T)", "change_theme"),
    ("Markdown on/off for model replies", "Links shown as text (url), never opened; remembered (F3)",
     "toggle_markdown"),
    ("Next page of panes", "When the panes do not all fit the terminal: show the next page (F6)", "next_page"),
    ("Help: every key and pane", "Keys, panes and the refresh pace (F1)", "help"),
    ("Quit kvtop", "The engine process is stopped (Ctrl+Q)", "quit"),
)
NEXT_SERVER = ("Next server of the fleet", "Chat with the next --server; its panes follow (F4)", "next_server")


def palette_commands(app: App, builtin: Iterable[SystemCommand]) -> Iterable[SystemCommand]:
    """Textual's entries minus the ones kvtop replaces, then kvtop's."""
    yield from (c for c in builtin if c.title not in REPLACED)
    commands = COMMANDS + ((NEXT_SERVER,) if len(app.options.servers) > 1 else ())
    for title, help_text, action, *kwargs in commands:
        callback = handler(app, action) or getattr(app, f"action_{action}")
        yield SystemCommand(title, help_text, partial(callback, **kwargs[0]) if kwargs else callback)
