"""Ctrl+L, Esc, Enter and Ctrl+Q at random moments of load, prefill and decode.

Before the engine contract, Ctrl+L during a reply made a second thread read the
engine's pipe ("UnpicklingError: invalid load key", 3 of 4 tries). Now every round
must leave a working engine: no error dialog, no lost engine, and a last turn that
completes; Ctrl+Q at any moment must exit in seconds and leave no engine process.
"""

import os
import random
import time

import pytest
from helpers import make_app, send, wait_until
from scripted_engine import ScriptedEngine, scripted_turn, smollm_loaded

from kvtop.runner.process.parent import EngineProcess
from kvtop.runner.settings import Settings
from kvtop.tui.base.screens import ErrorScreen

LONG = "The tide comes in and the tide goes out. " * 60  # ~600 tokens: several ubatches


def no_error_screen(app) -> bool:
    return not any(isinstance(s, ErrorScreen) for s in app.screen_stack)


async def abuse(pilot, rounds: int, rng: random.Random, max_pause: float) -> dict:
    """Random messages and keys; returns how often each key landed mid-turn."""
    app = pilot.app
    landed = {"escape": 0, "ctrl+l": 0}
    for _ in range(rounds):
        if not app.turn_running:
            await send(pilot, rng.choice(["Hi", LONG, LONG]))  # long prompts: keys land mid-turn on fast machines too
        await pilot.pause(rng.uniform(0, max_pause))
        key = rng.choice(["escape", "ctrl+l", "ctrl+l", "wait"])
        if key != "wait":
            if app.turn_running:
                landed[key] += 1
            await pilot.press(key)
        assert no_error_screen(app), f"error dialog after {key}"
        assert app.session.load_error is None
    return landed


async def test_random_keys_on_the_real_engine_leave_it_working(smollm_path, tmp_path):
    settings = Settings(smollm_path, n_ctx=2048, temp=0.7, n_predict=12, n_ubatch=64, n_batch=64)
    app = make_app(settings, EngineProcess, tmp_path, live_system=False)
    # 24 rounds (60 before: 37 s; 40: 34 s, 24: 23 s on a shared machine); the counts asserted are
    # still 60 rounds' (Ctrl+L > 4, Esc > 2): seen landing 29 and 16 times in 60 rounds, 14 and
    # 15 (and 12 and 16) in 40, 12 and 8 (and 10 and 11) in 24
    rounds = int(os.environ.get("KVTOP_ABUSE_ROUNDS", "24"))
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="model load")
        landed = await abuse(pilot, rounds, random.Random(1234), 0.6)
        print(f"keys landed mid-turn: {landed}")
        assert landed["ctrl+l"] > 4 and landed["escape"] > 2, landed  # the keys hit turns
        await wait_until(pilot, lambda: not app.turn_running, timeout=60, what="last abused turn")
        await pilot.press("ctrl+l")
        await send(pilot, "What is 2 + 2?")
        await wait_until(pilot, lambda: not app.turn_running and app.turns, timeout=60, what="final turn")
        assert app.turns[-1].stop_reason in ("eog", "n_predict") and app.turns[-1].metrics.decode_tokens > 0
        assert app.engine.alive() and no_error_screen(app)


async def test_many_random_rounds_on_a_timed_script(smollm_shaped, tmp_path):
    """The same abuse, 120 rounds, on the scripted engine with real timing. 300 rounds took
    110 s and landed each key mid-turn 4x as often as asserted; 120 land it about 1.5-2x
    (seen: Esc 31, Ctrl+L 47), and the thresholds are the same counts as before."""
    loaded = smollm_loaded(smollm_shaped)
    turns = [scripted_turn(i, 1000.0 + i, 400, 0, ["tok "] * 40, pp_tok_s=2000, tg_tok_s=200, ubatch=64)
             for i in range(1, 400)]
    engine = {}

    def factory(s):
        engine["e"] = ScriptedEngine(s, loaded, turns, speed=1.0, max_gap=0.05)
        return engine["e"]

    app = make_app(Settings(smollm_shaped, n_ctx=4096), factory, tmp_path, live_system=False, write_transcript=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        landed = await abuse(pilot, int(os.environ.get("KVTOP_ABUSE_SCRIPTED_ROUNDS", "120")),
                             random.Random(99), 0.3)
        print(f"keys landed mid-turn: {landed}")
        assert landed["ctrl+l"] > 30 and landed["escape"] > 15, landed
        await wait_until(pilot, lambda: not app.turn_running, timeout=30, what="last turn")
        # every new chat reached the engine as a Reset, after the cancel of its turn
        from kvtop.runner.process.commands import Reset

        resets = sum(isinstance(c, Reset) for c in engine["e"].commands)
        assert resets >= landed["ctrl+l"]


@pytest.mark.parametrize("seed", range(8))
async def test_ctrl_q_at_any_moment_exits_and_stops_the_engine(smollm_path, tmp_path, seed):
    rng = random.Random(seed)
    settings = Settings(smollm_path, n_ctx=2048, temp=0, n_predict=64, n_ubatch=64, n_batch=64)
    app = make_app(settings, EngineProcess, tmp_path, live_system=False)
    async with app.run_test(size=(100, 30)) as pilot:
        if seed % 4:  # 1 in 4 quits during the load
            await wait_until(pilot, lambda: app.loaded is not None, what="model load")
            await send(pilot, LONG if seed % 2 else "Tell me a story.")
        await pilot.pause(rng.uniform(0, 1.5))
        pid = app.engine.pid
        t0 = time.monotonic()
        await pilot.press("ctrl+q")
        await wait_until(pilot, lambda: app.return_code is not None, timeout=10, what="exit")
        assert time.monotonic() - t0 < 6
    if pid:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
            time.sleep(0.05)
        else:
            pytest.fail(f"engine process {pid} still runs after Ctrl+Q")
