"""Text typed as raw keystrokes (a paste without bracketed paste arrives so) costs time
linear in its length, and Ctrl+Q behind it still quits promptly.

The keys are posted to the app as the terminal driver posts them: all at once,
ahead of the app, which then works through its queue.
"""

import time

from helpers import scripted_app, wait_until
from textual import events


def _post_keys(app, text: str) -> None:
    for ch in text:
        key = events.Key("space" if ch == " " else ch, ch)
        key.set_sender(app)
        app.post_message(key)


async def _type(pilot, text: str) -> float:
    app = pilot.app
    prompt = app.query_one("#prompt")
    start = len(prompt.value)
    t0 = time.perf_counter()
    _post_keys(app, text)
    await wait_until(pilot, lambda: len(prompt.value) >= start + len(text), timeout=120, what="typing")
    return time.perf_counter() - t0


async def test_typing_time_is_linear_in_the_number_of_keys(tmp_path, smollm_shaped):
    app = scripted_app(tmp_path, smollm_shaped, ["Hi"])
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        prompt = app.query_one("#prompt")
        small = await _type(pilot, "ab cd" * 400)  # 2,000 keys
        prompt.value = ""
        await pilot.pause()
        big = await _type(pilot, "ab cd" * 4000)  # 20,000 keys
        assert prompt.value == "ab cd" * 4000  # every key, in order
        # linear: ~10x; quadratic (re-measuring the whole value per key): ~100x
        assert big / max(small, 0.05) < 20, (small, big)


async def test_ctrl_q_behind_a_long_raw_paste_quits_promptly(tmp_path, smollm_shaped):
    app = scripted_app(tmp_path, smollm_shaped, ["Hi"])
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        t0 = time.perf_counter()
        _post_keys(app, "x" * 30_000)
        quit_key = events.Key("ctrl+q", None)
        quit_key.set_sender(app)
        app.post_message(quit_key)
        await wait_until(pilot, lambda: not app.is_running, timeout=120, what="exit")
        assert time.perf_counter() - t0 < 5.0


async def test_typed_keys_keep_their_order_with_enter_and_selection(tmp_path, smollm_shaped):
    """Buffered keys land before the next non-typing key: Enter sends all of them, and a
    selection is replaced by what is typed over it."""
    app = scripted_app(tmp_path, smollm_shaped, ["Hi"])
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        prompt = app.query_one("#prompt")
        prompt.value = "old text"
        prompt.select_all()
        _post_keys(app, "hello there")
        enter = events.Key("enter", "\r")
        enter.set_sender(app)
        app.post_message(enter)
        await wait_until(pilot, lambda: app.turns and not app.turn_running, what="turn")
        assert app.session.messages[0].content == "hello there"
        assert prompt.value == ""
