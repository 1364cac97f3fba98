"""A paste of several paragraphs is sent whole, newlines kept (Textual's Input keeps the
first line of a paste: paragraph one used to be sent alone, silently). The prompt shows
the paste as one chip, the forecast before Enter counts all of it, and the chip is edited
as one piece (tui/base/prompt_input.py)."""

from helpers import make_app, screen_text, wait_until
from scripted_engine import ScriptedEngine, scripted_turn, smollm_loaded
from textual import events

from kvtop.runner.settings import Settings
from kvtop.tui.base.prompt_input import PromptInput

PARAGRAPHS = [
    "Tides rise and fall twice a day because the moon pulls on the oceans.",
    "The sun pulls too, less strongly; when both line up the tides are larger.",
    "Coastlines shape the tide: a narrow bay can funnel it into a bore.",
    "Some seas, like the Mediterranean, barely have tides at all.",
    "Explain all of this to a child, in three short sentences.",
]
LETTER = "\n\n".join(PARAGRAPHS)
WORDS = len(LETTER.split())


def _app(tmp_path, model, replies=1):
    loaded = smollm_loaded(model)
    turns = [scripted_turn(i + 1, 1000.0, 30, 0, ["Okay", "."]) for i in range(replies)]
    return make_app(Settings(model, n_ctx=4096, n_threads=2),
                    lambda s: ScriptedEngine(s, loaded, turns), tmp_path,
                    live_system=False, write_transcript=False)


async def _paste(pilot, text: str) -> None:
    """A bracketed paste, as the terminal driver posts it, to the focused widget."""
    focused = pilot.app.focused
    assert focused is not None and focused.id == "prompt"
    focused.post_message(events.Paste(text))
    await pilot.pause()


def _sent(app) -> list[str]:
    """The user messages the engine was asked to answer, in order."""
    return [m["content"] for chat in app.engine.chats for m in chat[-1:] if m["role"] == "user"]


async def test_a_pasted_letter_is_forecast_and_sent_whole(tmp_path, smollm_shaped):
    app = _app(tmp_path, smollm_shaped)
    async with app.run_test(size=(200, 50)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None and app.estimates.calibration is not None, what="load")
        prompt = app.query_one("#prompt", PromptInput)
        await _paste(pilot, LETTER.replace("\n", "\r\n") + "\r\n")  # as a terminal may send it
        chip = f"[pasted text #1: 5 paragraphs, {WORDS} words]"
        assert prompt.value == chip
        assert chip in screen_text(app)  # the user sees what the paste became
        # the scripted tokenizer: 4 tokens of template + one a word, every paragraph's
        await wait_until(pilot, lambda: "TTFT ≈" in str(prompt.border_subtitle), timeout=5, what="the forecast")
        assert str(prompt.border_subtitle).startswith(f"{4 + WORDS} tok, {4 + WORDS} new")

        await pilot.press("enter")
        await wait_until(pilot, lambda: app.turns and not app.turn_running, what="the turn")
        assert _sent(app) == [LETTER]  # all five paragraphs, their blank lines kept
        assert app.session.messages[0].content == LETTER
        assert prompt.value == "" and prompt.pastes == {}
        shown = screen_text(app)
        for paragraph in PARAGRAPHS:  # the chat shows it all (its lines wrap at this width)
            assert " ".join(paragraph.split()[:6]) in shown


async def test_text_around_a_chip_and_two_chips_are_sent_in_order(tmp_path, smollm_shaped):
    app = _app(tmp_path, smollm_shaped)
    async with app.run_test(size=(200, 50)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        prompt = app.query_one("#prompt", PromptInput)
        prompt.insert_text_at_cursor("Compare ")
        await _paste(pilot, "a\nb")
        prompt.insert_text_at_cursor(" with ")
        await _paste(pilot, "c\nd\ne")
        await _paste(pilot, "one line\n")  # a single line stays plain text, as Input would
        assert prompt.value == ("Compare [pasted text #1: 2 lines, 2 words] with "
                                "[pasted text #2: 3 lines, 3 words]one line")
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.turns and not app.turn_running, what="the turn")
        assert _sent(app) == ["Compare a\nb with c\nd\neone line"]


async def test_a_chip_is_edited_as_one_piece(tmp_path, smollm_shaped):
    app = _app(tmp_path, smollm_shaped)
    async with app.run_test(size=(200, 50)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        prompt = app.query_one("#prompt", PromptInput)
        prompt.insert_text_at_cursor("x ")
        await _paste(pilot, LETTER)
        chip = prompt.value[2:]
        await pilot.press("backspace")  # just after the chip: all of it goes
        assert prompt.value == "x "
        assert prompt.expanded() == "x "

        await _paste(pilot, LETTER)
        chip = prompt.value[2:]
        prompt.cursor_position = 5  # inside the chip: a key lands after it
        await pilot.press("y")
        assert prompt.value == "x " + chip + "y"
        prompt.cursor_position = 2
        await pilot.press("delete")  # just before the chip: all of it goes
        assert prompt.value == "x y"

        prompt.cursor_position = len(prompt.value)
        await _paste(pilot, "[b]not markup[/b]\n[i]nor this[/i]")
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.turns and not app.turn_running, what="the turn")
        assert _sent(app) == ["x y[b]not markup[/b]\n[i]nor this[/i]"]
