"""``/file PATH`` in the app: read in a worker, refused by name, never blocks the UI,
leaves no garbage in the input; Ctrl+O from anywhere (issue 12)."""

import os
import threading
import time

from helpers import scripted_app, wait_until

from kvtop.runner.records import prompt_file


def record_notices(app) -> list[str]:
    notes: list[str] = []
    notify = app.notify

    def record(message, *a, **kw):
        notes.append(str(message))
        return notify(message, *a, **kw)

    app.notify = record
    return notes


async def type_text(pilot, text: str) -> None:
    for ch in text:
        await pilot.press("space" if ch == " " else ch)


async def test_a_fifo_is_refused_by_name_and_the_input_is_left_clean(tmp_path, smollm_shaped):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    app = scripted_app(tmp_path, smollm_shaped, ["never"])
    async with app.run_test(size=(120, 40)) as pilot:
        notes = record_notices(app)
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        prompt = app.query_one("#prompt")
        prompt.value = f"/file {fifo}"
        await pilot.press("enter")
        await wait_until(pilot, lambda: any("FIFO" in n for n in notes), timeout=10, what="the refusal")
        assert f"{fifo} is a FIFO (named pipe), not a text file: not sent" in notes
        assert prompt.value == "" and not app.turn_running and app.session.messages == []
        assert app.engine.chats == []  # nothing reached the engine


async def test_ctrl_q_quits_while_a_file_read_hangs(tmp_path, smollm_shaped, monkeypatch):
    """A read that never returns (a FIFO that became one after the check, a hung network
    mount) runs in a worker: the UI keeps answering and Ctrl+Q exits at once."""
    entered, release = threading.Event(), threading.Event()

    def hang(path, max_bytes=prompt_file.MAX_BYTES):
        entered.set()
        release.wait(30)
        raise prompt_file.PromptFileError("released")

    monkeypatch.setattr(prompt_file, "read_prompt_file", hang)
    app = scripted_app(tmp_path, smollm_shaped, ["never"])
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_until(pilot, lambda: app.loaded is not None, what="load")
            app.query_one("#prompt").value = "/file /somewhere/slow.txt"
            await pilot.press("enter")
            await wait_until(pilot, entered.is_set, timeout=10, what="the read to start")
            await pilot.press("f1")  # the UI still answers keys
            await wait_until(pilot, lambda: len(app.screen_stack) == 2, timeout=5, what="help")
            t0 = time.monotonic()
            await pilot.press("ctrl+q")
        assert time.monotonic() - t0 < 3.0 and app.return_value == 0
    finally:
        release.set()


async def test_ctrl_o_and_enter_alone_send_nothing(tmp_path, smollm_shaped):
    app = scripted_app(tmp_path, smollm_shaped, ["never"])
    async with app.run_test(size=(120, 40)) as pilot:
        notes = record_notices(app)
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        await pilot.press("ctrl+o")
        await pilot.press("enter")
        await wait_until(pilot, lambda: any("/file" in n and "path" in n for n in notes), timeout=5, what="notice")
        assert not app.turn_running and app.session.messages == [] and app.engine.chats == []


async def test_a_text_file_is_sent_as_the_message(tmp_path, smollm_shaped):
    p = tmp_path / "question.txt"
    p.write_text("What is [b]bold[/b]?\n")
    app = scripted_app(tmp_path, smollm_shaped, ["It", " is."])
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        app.query_one("#prompt").value = f"/file {p}"
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.turns and not app.turn_running, what="turn")
        assert app.engine.chats[-1][-1] == {"role": "user", "content": "What is [b]bold[/b]?"}
        assert app.query_one("#prompt").value == ""


async def test_ctrl_o_with_focus_elsewhere_keeps_file_prefix(tmp_path, smollm_shaped):
    """Input.select_on_focus selected "/file " when Ctrl+O moved the focus there, so the
    next key replaced it."""
    app = scripted_app(tmp_path, smollm_shaped, ["never"])
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        app.query_one("#metrics").focus()
        await pilot.pause()
        assert app.focused is not app.query_one("#prompt")
        await pilot.press("ctrl+o")
        await pilot.press("x")
        assert app.focused is app.query_one("#prompt")
        assert app.query_one("#prompt").value == "/file x"
        await type_text(pilot, "yz")
        assert app.query_one("#prompt").value == "/file xyz"
