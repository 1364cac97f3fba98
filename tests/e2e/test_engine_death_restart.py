"""The real engine (EngineProcess) killed, stopped and restarted under the app
(issue 12).

* ``kill -9`` of the idle engine: one error dialog and one chat line naming SIGKILL and
  the engine's log (a once-a-second liveness check used to report it a second time).
* Restart (the death dialog's button, Ctrl+R, the palette): a fresh engine with the same
  settings; the chat and its transcript stay; the next turn prefills the chat again.
* A ``kill -STOP``ped engine: Esc, then after ``cancel_deadline_s`` the app says the
  engine is not responding and offers a restart; Ctrl+Q still exits in seconds.
"""

import json
import os
import signal
import time

import pytest
from helpers import cores, make_app, send, wait_until
from textual.command import CommandPalette
from textual.widgets import OptionList

from kvtop.runner.process.parent import EngineProcess
from kvtop.runner.settings import Settings
from kvtop.tui.base.screens import ErrorScreen
from kvtop.tui.panes.chat import ChatLog
from kvtop.tui.panes.status import StatusBar

LONG = "Summarise this: " + "The tide comes in and the tide goes out. " * 40  # ~400 tokens


def error_screens(app) -> list[ErrorScreen]:
    return [s for s in app.screen_stack if isinstance(s, ErrorScreen)]


def highlighted_command(app) -> str:
    """The palette's highlighted match, as the user reads it ("" when none)."""
    results = app.screen.query_one(OptionList)
    if results.highlighted is None:
        return ""
    return str(results.get_option_at_index(results.highlighted).prompt)


def system_lines(app) -> list[str]:
    return [m.text for m in app.query_one(ChatLog).children if getattr(m, "role", None) == "system"]


def gone(pid: int) -> bool:
    """The process has exited and been reaped (or is a zombie nobody waits for)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.fixture
def pids():
    """Every engine pid a test saw; none may outlive it (killed here if a test failed)."""
    seen: list[int] = []
    yield seen
    for pid in seen:
        if not gone(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def settings(smollm_path, **kw) -> Settings:
    kw.setdefault("n_predict", 8)
    return Settings(smollm_path, n_ctx=2048, temp=0, n_threads=cores(), **kw)


async def loaded(pilot, pids) -> int:
    app = pilot.app
    await wait_until(pilot, lambda: app.loaded is not None, timeout=60, what="model load")
    pids.append(app.engine.pid)
    return app.engine.pid


async def turn(pilot, text: str) -> None:
    app = pilot.app
    n = len(app.turns)
    await send(pilot, text)
    await wait_until(pilot, lambda: len(app.turns) > n and not app.turn_running, timeout=60, what="turn")


async def test_kill_9_while_idle_is_reported_once_and_the_dialog_restarts_it(smollm_path, tmp_path, pids):
    app = make_app(settings(smollm_path), EngineProcess, tmp_path, live_system=False)
    async with app.run_test(size=(140, 45)) as pilot:
        pid = await loaded(pilot, pids)
        await turn(pilot, "Name a colour.")
        first = app.turns[-1].metrics
        log_path = app.engine.log_path

        os.kill(pid, signal.SIGKILL)
        await wait_until(pilot, lambda: error_screens(app), timeout=15, what="the death report")
        await pilot.pause(2.5)  # longer than the liveness check that reported it again
        [dialog] = error_screens(app)
        assert dialog.title_text == "The engine died" and dialog.offer_restart
        assert "SIGKILL" in dialog.reason and log_path in dialog.reason
        [line] = system_lines(app)
        assert "SIGKILL" in line and log_path in line
        assert app.query_one(StatusBar).problem == "engine died"
        assert os.path.exists(log_path)  # kept: it explains the death

        await pilot.click("#restart")  # the dialog's "Restart engine"
        new_pid = await loaded(pilot, pids)
        assert new_pid != pid and not error_screens(app) and app.query_one(StatusBar).problem is None
        assert system_lines(app)[-1] == ("engine restarted with the same settings; "
                                         "the next turn prefills the 2 messages of this chat again")
        await turn(pilot, "And another?")
        second = app.turns[-1].metrics
        # the fresh engine's cache is empty: the whole chat is prefilled again
        assert second.reused_tokens == 0 and second.prompt_tokens > first.prompt_tokens
        assert [m.content for m in app.session.messages[:3]] == [
            "Name a colour.", app.session.messages[1].content, "And another?"]
        assert len(error_screens(app)) == 0
        transcript = app.session.transcript.path
    with open(transcript, encoding="utf-8") as fh:  # one transcript across the restart
        turns = [json.loads(ln) for ln in fh if '"type": "turn"' in ln]
    assert [t["user"] for t in turns] == ["Name a colour.", "And another?"]


async def test_ctrl_r_and_the_palette_restart_a_live_engine(smollm_path, tmp_path, pids):
    app = make_app(settings(smollm_path), EngineProcess, tmp_path, live_system=False)
    async with app.run_test(size=(140, 45)) as pilot:
        pid = await loaded(pilot, pids)
        await turn(pilot, "Hi")
        await pilot.press("ctrl+r")
        pid2 = await loaded(pilot, pids)
        assert pid2 != pid
        await wait_until(pilot, lambda: gone(pid), timeout=10, what="the old engine to exit")
        assert app.settings == app.engine.settings  # the same settings

        await pilot.press("ctrl+p")
        await wait_until(pilot, lambda: isinstance(app.screen, CommandPalette), timeout=5, what="palette")
        for ch in "Restart engine":
            await pilot.press("space" if ch == " " else ch)
        await wait_until(pilot, lambda: highlighted_command(app).startswith("Restart engine"), timeout=5,
                         what="the palette's match")
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.loaded is not None and app.engine.pid != pid2,
                                timeout=60, what="the palette's restart")
        pids.append(app.engine.pid)
        await wait_until(pilot, lambda: gone(pid2), timeout=10, what="the second engine to exit")
        await turn(pilot, "Again?")
        assert app.turns[-1].metrics.reused_tokens == 0 and not error_screens(app)
        assert sum("engine restarted" in s for s in system_lines(app)) == 2


async def start_a_long_turn_and_stop_the_engine(pilot, pids) -> int:
    app = pilot.app
    pid = await loaded(pilot, pids)
    await send(pilot, LONG)
    await wait_until(pilot, lambda: app.session.active is not None and app.session.active.started is not None,
                     timeout=30, what="the turn to start")
    os.kill(pid, signal.SIGSTOP)
    return pid


async def test_a_stopped_engine_is_said_to_be_not_responding_and_restarts(smollm_path, tmp_path, pids):
    app = make_app(settings(smollm_path, n_predict=400), EngineProcess, tmp_path, live_system=False,
                   cancel_deadline_s=1.0)
    async with app.run_test(size=(140, 45)) as pilot:
        pid = await start_a_long_turn_and_stop_the_engine(pilot, pids)
        t0 = time.monotonic()
        await pilot.press("escape")
        await wait_until(pilot, lambda: error_screens(app), timeout=10, what="'not responding'")
        assert time.monotonic() - t0 >= 1.0
        [dialog] = error_screens(app)
        assert dialog.title_text == "The engine is not responding" and dialog.offer_restart
        assert app.query_one(StatusBar).problem == "engine not responding"
        await pilot.click("#restart")
        pid2 = await loaded(pilot, pids)
        assert pid2 != pid
        await wait_until(pilot, lambda: gone(pid), timeout=10, what="the stopped engine to be killed")
        assert [m.content for m in app.session.messages] == []  # the lost turn's message is dropped
        await turn(pilot, "Hi")
        assert app.turns[-1].stop_reason in ("eog", "n_predict") and not error_screens(app)


async def test_ctrl_q_exits_in_seconds_with_a_stopped_engine(smollm_path, tmp_path, pids):
    app = make_app(settings(smollm_path, n_predict=400), EngineProcess, tmp_path, live_system=False,
                   cancel_deadline_s=1.0)
    async with app.run_test(size=(140, 45)) as pilot:
        pid = await start_a_long_turn_and_stop_the_engine(pilot, pids)
        await pilot.press("escape")  # a cancel the stopped engine never reads
        await pilot.pause(0.2)
        t0 = time.monotonic()
        await pilot.press("ctrl+q")
        # Ctrl+Q waits for a cancelled turn's end, but not past the cancel deadline (1 s here)
        await wait_until(pilot, lambda: not app.is_running, timeout=10, what="the app to quit")
    # close(timeout=1): Quit, then SIGTERM (held while stopped), then SIGKILL: about 2 s
    # (3 s per step before the redesign: 6 s)
    assert time.monotonic() - t0 < 4.0
    assert app.return_value == 0 and gone(pid)
