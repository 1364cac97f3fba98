"""The command palette (Ctrl+P) as a user searches it: every kvtop action is there once,
found by the words a user types, and its one Screenshot saves a file (Textual's own,
listed beside kvtop's, failed with "Failed to save screenshot")."""

import os

from helpers import scripted_app, wait_until
from textual.command import CommandPalette
from textual.widgets import Input, OptionList

from kvtop.tui.app import KvtopApp
from kvtop.tui.base.palette import handler

# what a user types -> how the top match starts
SEARCHES = {
    "water": "TTFT waterfall", "ttft": "TTFT waterfall", "time to first token": "TTFT waterfall",
    "attach": "Attach file", "file": "Attach file", "new chat": "New chat", "restart": "Restart engine",
    "export": "Export debug bundle", "bundle": "Export debug bundle", "csv": "Export debug bundle",
    "theme": "Theme", "colour": "Theme", "markdown": "Markdown", "help": "Help", "keys": "Help",
    "cancel": "Cancel the running turn", "quality": "Measure quality of the KV cache",
    "kld": "Measure quality of the KV cache", "screenshot": "Screenshot", "quit": "Quit kvtop",
}


def top_match(app) -> str:
    results = app.screen.query_one(OptionList)
    if results.highlighted is None:
        return ""
    return str(results.get_option_at_index(results.highlighted).prompt)


async def open_palette(pilot):
    app = pilot.app
    await wait_until(pilot, lambda: app.loaded is not None, what="load")
    await pilot.press("ctrl+p")
    await wait_until(pilot, lambda: isinstance(app.screen, CommandPalette), timeout=5, what="palette")


async def search(pilot, words: str, expect: str) -> str:
    """Type ``words`` into the palette; the top match once it starts with ``expect`` (or
    whatever it is after a few seconds)."""
    app = pilot.app
    app.screen.query_one(Input).value = words
    try:
        await wait_until(pilot, lambda: top_match(app).startswith(expect), timeout=3, what=words)
    except AssertionError:
        pass
    return top_match(app)


async def test_every_action_is_found_by_its_words(tmp_path, smollm_shaped):
    app = scripted_app(tmp_path, smollm_shaped, ["Hi"])
    async with app.run_test(size=(120, 40)) as pilot:
        await open_palette(pilot)
        found = {words: await search(pilot, words, start) for words, start in SEARCHES.items()}
        assert {w: m for w, m in found.items() if not m.startswith(SEARCHES[w])} == {}


async def test_each_command_is_listed_once_and_each_bound_action_has_one(tmp_path, smollm_shaped):
    app = scripted_app(tmp_path, smollm_shaped, ["Hi"])
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        commands = list(app.get_system_commands(app.screen))
        titles = [c.title for c in commands]
        assert len(titles) == len(set(titles))
        assert "Save an SVG 'screenshot' of the current screen" not in [c.help for c in commands]  # Textual's
        assert sum(t.split(":")[0] == "Screenshot" for t in titles) == 1
        doers = [getattr(c.callback, "func", c.callback) for c in commands]  # a partial: its function
        bound = {b.action for b in KvtopApp.BINDINGS} - {"next_server"}  # F4: only with several servers
        # the App's own action_ method, or the composed object's that the App routes it to
        assert {a for a in bound if (handler(app, a) or getattr(app, f"action_{a}")) not in doers} == set()


async def test_the_palettes_screenshot_saves_a_file(tmp_path, smollm_shaped):
    app = scripted_app(tmp_path, smollm_shaped, ["Hi"])
    async with app.run_test(size=(120, 40)) as pilot:
        await open_palette(pilot)
        assert (await search(pilot, "screenshot", "Screenshot:")).startswith("Screenshot:")
        await pilot.press("enter")
        folder = app.paths.screenshots_dir
        await wait_until(pilot, lambda: os.path.isdir(folder) and any(f.endswith(".svg") for f in os.listdir(folder)),
                         timeout=10, what="the screenshot file")


def test_every_route_reaches_the_object_that_does_it(tmp_path, smollm_shaped):
    """The App only routes (tui/base/palette.py): each routed action names a callable of the
    object that owns it; without kvtop load, quitting and Esc are the App's own actions."""
    from kvtop.tui.base.palette import LOAD_ROUTES, ROUTES

    app = scripted_app(tmp_path, smollm_shaped, ["Hi"])
    assert {a: handler(app, a) for a in ROUTES if not callable(handler(app, a))} == {}
    assert handler(app, "screenshot") == app.share.screenshot and handler(app, "toggle_markdown") == app.looks.toggle_markdown
    assert {a: handler(app, a) for a in LOAD_ROUTES if handler(app, a) is not None} == {}
