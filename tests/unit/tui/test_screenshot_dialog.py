"""Ctrl+S shows what the user sees: the dashboard with the dialog over it, and never
kvtop's own "saved…" notice from the screenshot before."""

import html
import re

from helpers import screen_text, scripted_app, wait_until
from textual.command import CommandPalette
from textual.widgets import OptionList


def _top_match(app) -> str:
    """The palette's highlighted command ('' while it has none)."""
    results = app.screen.query_one(OptionList)
    if results.highlighted is None:
        return ""
    return str(results.get_option_at_index(results.highlighted).prompt)


def _saved_text(app, path: str | None = None) -> str:
    """The saved SVG's text, as plain lines (the words a viewer would read)."""
    with open(path or app.share.last_saved, encoding="utf-8") as fh:
        svg = fh.read()
    rows: dict[float, list[tuple[float, str]]] = {}
    for x, y, text in re.findall(r'<text[^>]*?x="([\d.]+)"[^>]*?y="([\d.]+)"[^>]*>(.*?)</text>', svg):
        rows.setdefault(float(y), []).append((float(x), html.unescape(re.sub(r"<[^>]+>", "", text)).replace("\xa0", " ")))
    return "\n".join("".join(t for _x, t in sorted(parts)) for _y, parts in sorted(rows.items()))


async def test_screenshot_with_help_open_shows_the_dashboard_beneath_and_never_the_previous_saved_notice(
        tmp_path, smollm_shaped):
    """(Two tests at 160x50 before, each with its own App.)"""
    app = scripted_app(tmp_path, smollm_shaped, ["Hi", "."])
    async with app.run_test(size=(160, 50), notifications=True) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        await pilot.press("f1")
        await pilot.pause()
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: app.share.last_saved is not None, what="screenshot")
        text = _saved_text(app)
        assert "kvtop keys" in text  # the dialog
        # the panes beneath it (their titles and figures, not the help's list of them)
        # (the two-column help covers the middle: the KV pane's right edge shows beside it)
        assert "KV cache" in text and "22.5 KiB/token" in text and "arch llama" in text

        # with help closed, the next screenshot never shows the "saved" notice of this one
        await pilot.press("escape")
        await wait_until(pilot, lambda: len(app.screen_stack) == 1, what="help closed")
        first = app.share.last_saved
        await wait_until(pilot, lambda: "saved" in screen_text(app), timeout=5, what="the saved notice on screen")
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: app.share.last_saved != first, what="screenshot 2")
        text = _saved_text(app)
        assert "─ Prefill ─" in text and "kvtop keys" not in text
        assert "saved" not in text and "kvtop-" not in text


async def test_at_80x24_ctrl_s_also_saves_every_pane_at_160_columns(tmp_path, smollm_shaped):
    """The screen shows one page of panes; the second SVG has all of them, readable, and
    the screen is left as it was (same page, same size)."""
    from helpers import one_turn

    app = scripted_app(tmp_path, smollm_shaped, ["The", " moon", "."])
    async with app.run_test(size=(80, 24)) as pilot:
        await one_turn(pilot, "hi")
        await pilot.pause(0.2)
        before = screen_text(app)
        assert "─ Memory ─" not in before and "─ Prefill ─" in before  # page 1 of several
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: app.share.last_saved_whole is not None, what="the whole dashboard")
        whole = _saved_text(app, app.share.last_saved_whole)
        for title in ("Prefill", "KV cache", "Decode", "Estimate vs actual", "Memory"):
            assert f"─ {title} ─" in whole, title
        lines = whole.split("\n")
        assert max(len(line) for line in lines) >= 150 and len(lines) >= 48
        assert "TTFT" in whole and "roofline" in whole and "engine RSS" not in _saved_text(app)
        assert "hardware:" in whole  # the estimate's last line: nothing cut
        await pilot.pause(0.2)
        after = screen_text(app)  # the screen is back as it was: same page, same panes, same sizes
        right = lambda text: [line[-44:] for line in text.split("\n")]  # the panes' column
        assert right(after) == right(before)
        assert app.size == (80, 24) and "model: The moon." in after


async def test_a_terminal_that_shows_every_pane_saves_one_svg(tmp_path, smollm_shaped):
    app = scripted_app(tmp_path, smollm_shaped, ["Hi", "."])
    async with app.run_test(size=(170, 50), notifications=True) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: app.share.last_saved is not None, what="screenshot")
        assert app.share.last_saved_whole is None


async def test_the_saved_notice_never_splits_a_file_name(tmp_path, smollm_shaped):
    """At 80x24 the notice wrapped the path inside the name ("…191041.sv" / "g"), which
    a user could not copy: names and folder go on lines of their own."""
    import os

    app = scripted_app(tmp_path, smollm_shaped, ["Hi", "."])
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: app.share.last_saved is not None, what="screenshot")
        await wait_until(pilot, lambda: "saved" in screen_text(app), timeout=5, what="the saved notice on screen")
        lines = screen_text(app).splitlines()
        for name in (os.path.basename(app.share.last_saved), os.path.basename(app.share.last_saved_whole)):
            assert any(name in line for line in lines), (name, lines)
        assert os.path.dirname(app.share.last_saved)[:20] in "\n".join(lines)  # the folder (a long one still wraps)


async def test_the_palette_s_screenshot_without_the_chat_leaves_the_chat_out(tmp_path, smollm_shaped):
    """A new user's trial: Ctrl+P "Screenshot without the chat, to post" said "(the chat
    left out)" and saved every message: the chat was hidden by a class on the App while
    the palette's screen was on top, and the dashboard's screen took the shot before it
    restyled. Three in a row, as the trial did."""
    from helpers import one_turn

    app = scripted_app(tmp_path, smollm_shaped, ["The", " moon", "."])
    async with app.run_test(size=(160, 50)) as pilot:
        await one_turn(pilot, "a secret question")
        for _ in range(3):
            before = app.share.last_saved
            await pilot.press("ctrl+p")
            await wait_until(pilot, lambda: isinstance(app.screen, CommandPalette), timeout=5, what="the palette")
            await pilot.press(*"screenshot without")
            # the palette's search runs in the background: Enter once it has found the command
            # (fixed waits of 0.2 s and 0.5 s before)
            await wait_until(pilot, lambda: _top_match(app).startswith("Screenshot without the chat"), timeout=5,
                             what="the command found")
            await pilot.press("enter")
            await wait_until(pilot, lambda: app.share.last_saved != before, what="the screenshot")
            text = _saved_text(app)
            assert "chat left out of this screenshot" in text and "─ Prefill ─" in text
            assert "secret question" not in text and "moon" not in text, [l for l in text.splitlines() if "secret" in l or "moon" in l]
            assert "secret question" in screen_text(app)  # and the chat is back on screen
