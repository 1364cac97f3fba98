"""Keys as a user meets them: q and ? (nvitop, btop) without losing typed text, F1 listing
every key, and a key bar that keeps the keys that matter at any width."""

import re

from helpers import screen_text, scripted_app, wait_until
from textual import events
from textual.widgets import Static

from kvtop.tui.app import KvtopApp
from kvtop.tui.base.screens import HelpScreen

KEY_NAMES = {"escape": "Esc", "question_mark": "?"}


def squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def post_keys(app, text: str) -> None:
    """Keys as the terminal driver posts them: all at once, ahead of the app."""
    for ch in text:
        key = events.Key({" ": "space", "?": "question_mark"}.get(ch, ch), ch)
        key.set_sender(app)
        app.post_message(key)


async def loaded_app(pilot):
    app = pilot.app
    await wait_until(pilot, lambda: app.loaded is not None, what="load")
    return app


async def test_q_and_question_mark_type_into_the_prompt(tmp_path, smollm_shaped):
    """The cursor in the empty prompt: "quick question?" is a message, not a quit."""
    app = scripted_app(tmp_path, smollm_shaped, ["Hi"])
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded_app(pilot)
        prompt = app.query_one("#prompt")
        post_keys(app, "quick question?")
        await wait_until(pilot, lambda: prompt.value == "quick question?", what="typing")
        await pilot.pause(0.2)
        assert app.is_running and not isinstance(app.screen, HelpScreen)


async def test_outside_the_prompt_question_mark_opens_help_and_q_quits(tmp_path, smollm_shaped):
    app = scripted_app(tmp_path, smollm_shaped, ["Hi"])
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded_app(pilot)
        await pilot.press("tab")  # the cursor leaves the prompt
        assert app.focused is not None and app.focused.id != "prompt"
        await pilot.press("question_mark")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen), timeout=5, what="help")
        await pilot.press("q")  # q closes the help first
        await wait_until(pilot, lambda: not isinstance(app.screen, HelpScreen), timeout=5, what="help closed")
        assert app.is_running and app.query_one("#prompt").value == ""
        await pilot.press("q")
        await wait_until(pilot, lambda: not app.is_running, timeout=10, what="quit")


async def test_outside_the_prompt_keys_go_to_the_prompt_and_a_draft_keeps_its_q(tmp_path, smollm_shaped):
    app = scripted_app(tmp_path, smollm_shaped, ["Hi"])
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded_app(pilot)
        prompt = app.query_one("#prompt")
        await pilot.press("tab")
        post_keys(app, "hq?")  # h goes to the prompt, so q and ? follow it as text
        await wait_until(pilot, lambda: prompt.value == "hq?", what="typing")
        await pilot.press("tab")
        assert not prompt.has_focus
        post_keys(app, "q?")  # a draft: typed onto it, never a quit
        await wait_until(pilot, lambda: prompt.value == "hq?q?", what="typing onto the draft")
        assert app.is_running and prompt.has_focus and not isinstance(app.screen, HelpScreen)


async def test_f1_lists_every_key(tmp_path, smollm_shaped):
    app = scripted_app(tmp_path, smollm_shaped, ["Hi"])
    async with app.run_test(size=(160, 60)) as pilot:
        await loaded_app(pilot)
        await pilot.press("f1")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen), timeout=5, what="help")
        await pilot.pause(0.2)
        assert "kvtopkeys" in squash(screen_text(app))
        # one row per key: the key, then what it does
        help_text = "\n".join(" ".join(str(s.render().plain) for s in row.query(Static))
                              for row in app.screen.query(".help-row"))
        for binding in KvtopApp.BINDINGS:
            for key in binding.key.split(","):
                name = KEY_NAMES.get(key) or "+".join(p.capitalize() if len(p) > 1 else p.upper()
                                                      for p in key.split("+"))
                assert name in help_text, f"{key} ({binding.action}) not in F1"
        lines = help_text.splitlines()
        export = next(line for line in lines if line.startswith("Ctrl+E"))
        assert "JSON" in export and "CSV" in export
        for shown in ("Ctrl+C", "Ctrl+O", "Ctrl+P", "/file PATH", "Tab", "PgUp", "PgDn", "mouse wheel",
                      "Esc, F1 or q closes it", "in a dialog, close it", "q  ?"):
            assert shown in help_text, shown


def key_bar(app) -> str:
    return app.query_one("#keys").render().plain


async def test_the_key_bar_keeps_the_keys_that_matter_at_every_width(tmp_path, smollm_shaped):
    app = scripted_app(tmp_path, smollm_shaped, ["Hi"])
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded_app(pilot)
        narrow = key_bar(app)
        assert len(narrow) <= 80
        for key in ("Esc cancel", "F1 help", "^Q quit", "F2 TTFT", "^S "):
            assert key in narrow, (key, narrow)
        assert squash(narrow) in squash(screen_text(app).splitlines()[-1])  # on screen, last line
        await pilot.resize_terminal(160, 50)
        await pilot.pause(0.2)
        wide = key_bar(app)
        for key in ("Esc cancel", "F1 help", "^Q quit", "F2 TTFT waterfall", "^S screenshot", "^L new chat",
                    "^E export", "^O attach file", "^P palette", "^R restart", "^T theme", "F3 markdown"):
            assert key in wide, (key, wide)
        await pilot.click("#keys", offset=(wide.index("F1 help") + 1, 0))  # a key is also a button
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen), timeout=5, what="help by click")
