"""The palette's "find faster settings" on the real app and the demo model: kvtop tune's
A/Bs run in the chat's own engine between turns (no second process), the Prefill pane
shows which A/B runs; Esc mid-run leaves the chat and the engine as they were (the
next turn at --temp 0 writes exactly what an engine that never measured writes); a
winner is offered as a restart, and yes restarts the engine with its flags, the chat
kept, the status line showing them."""

import pytest
from helpers import make_app, screen_text, send, wait_until

from kvtop.runner.process.blocking import BlockingEngine
from kvtop.runner.process.inprocess import InProcessEngine
from kvtop.runner.process.parent import EngineProcess
from kvtop.runner.settings import Settings

TURNS = ("Say hello.", "And again, shorter.")


@pytest.fixture
def settings(smollm_path):
    return Settings(smollm_path, n_ctx=1024, temp=0, n_predict=8)


@pytest.fixture
def small(monkeypatch, kvtop_home):
    """Small A/Bs (depth 32, pp16, tg4, 2 rounds) so a busy shared machine still runs some."""
    import kvtop.tui.turn.tuning as tuning

    for k, v in (("DEPTH", 32), ("N_PROMPT", 16), ("N_GEN", 4), ("REPS", 2), ("BUDGET_S", 30)):
        monkeypatch.setattr(tuning, k, v)
    return tuning


def progress_line(app) -> str:
    return str(app.dash.prefill.border_subtitle or "")


async def test_progress_shown_and_esc_leaves_the_chat_and_engine_as_they_were(settings, tmp_path, small):
    app = make_app(settings, EngineProcess, tmp_path, live_system=False)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, timeout=120, what="model load")
        await send(pilot, TURNS[0])
        await wait_until(pilot, lambda: len(app.turns) == 1 and not app.turn_running, timeout=120, what="turn 1")
        engine_pid, messages = app.session.engine.pid, list(app.session.messages)
        children = len(__import__("psutil").Process().children(recursive=True))
        await pilot.press("f8")  # its key (the palette's entry is the same action)
        assert app.tuning.running
        await wait_until(pilot, lambda: "A/B 1/" in progress_line(app), timeout=120, what="its progress")
        assert "find faster settings: A/B 1/" in screen_text(app)  # on screen, in the Prefill pane's border
        # in the engine: no process of its own (kvtop tune beside the chat was one)
        assert len(__import__("psutil").Process().children(recursive=True)) == children
        await pilot.press("escape")
        await wait_until(pilot, lambda: not app.tuning.running, timeout=60, what="the cancelled run's end")
        assert progress_line(app) == ""
        assert app.session.engine.pid == engine_pid and list(app.session.messages) == messages
        said = [n.message for n in app._notifications]
        assert any("stopped: the chat and the engine are as they were" in m for m in said), said
        await send(pilot, TURNS[1])
        await wait_until(pilot, lambda: len(app.turns) == 2 and not app.turn_running, timeout=120, what="turn 2")
        after = app.session.messages[-1].content
        reused = app.turns[-1].metrics.prompt_tokens - app.turns[-1].metrics.prefill_tokens
        # a restart mid-run (Ctrl+R) ends the run with its engine: F8 then starts a new one, not "stop"
        await pilot.press("f8")
        await wait_until(pilot, lambda: "A/B" in progress_line(app), timeout=120, what="the second run")
        await pilot.press("ctrl+r")
        await wait_until(pilot, lambda: app.session.engine.pid != engine_pid, timeout=60, what="the restart")
        assert not app.tuning.running and progress_line(app) == ""
    # the same two turns on an engine that never measured anything: the same tokens
    ref = BlockingEngine(InProcessEngine(settings))
    ref.start()
    try:
        chat = []
        for text in TURNS:
            chat.append({"role": "user", "content": text})
            done = ref.chat(chat)
            chat.append({"role": "assistant", "content": done.text})
            want_reused = done.metrics.prompt_tokens - done.metrics.prefill_tokens
    finally:
        ref.close()
    assert after == done.text
    assert reused == want_reused > 0  # turn 1's KV cache was still there: the measurement did not touch it


async def test_the_winner_is_offered_and_yes_restarts_the_engine_with_its_flags(settings, tmp_path, small):
    from kvtop.runner.policy.tuning import Judgement, Metric, candidate_list
    from kvtop.tui.turn.tuning_dialog import RestartWithWinner

    app = make_app(settings, EngineProcess, tmp_path, live_system=False)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, timeout=120, what="model load")
        await send(pilot, TURNS[0])
        await wait_until(pilot, lambda: len(app.turns) == 1 and not app.turn_running, timeout=120, what="turn 1")
        small.BUDGET_S = 0.5  # a budget that cannot hold one A/B: said, with the one that would
        app.tuning.toggle()
        await wait_until(pilot, lambda: not app.tuning.running, timeout=120, what="the too-small run's end")
        said = [n.message for n in app._notifications]
        assert any("0.5 s cannot hold one A/B here" in m and "kvtop tune --budget " in m for m in said), said
        small.BUDGET_S = 30
        app.tuning.toggle()  # a real run, in the engine ...
        await wait_until(pilot, lambda: not app.tuning.running, timeout=120, what="the run's end")
        await pilot.pause(0.3)
        if isinstance(app.screen, RestartWithWinner):  # ... whose winner, if any, is not taken here
            await pilot.click("#keep")
            await pilot.pause(0.3)
        assert app.settings.flash_attn == "auto" and app.loaded.flash_attn != "disabled"
        # ... then the offer, as the issue measured it on this CPU: -fa off 1.70x decode
        from kvtop.runner.commands.tune import base_of

        base = base_of(app.settings)
        fa = next(c for c in candidate_list(base, 2, False, 16) if c.group == "flash_attn")
        app.tuning.last = [Judgement(fa, {"decode": Metric((32.1, 32.9, 32.5), (55.0, 55.6, 55.3)),
                                          "prefill": Metric((410.0, 402.0, 405.0), (404.0, 399.0, 401.0))})]
        req = type("Req", (), {"base": base, "depth": 32})()
        engine_pid, messages = app.session.engine.pid, list(app.session.messages)
        app.tuning._offer(req)  # no: nothing changes
        await wait_until(pilot, lambda: isinstance(app.screen, RestartWithWinner), what="the offer")
        await pilot.click("#keep")
        await pilot.pause(0.5)
        assert app.session.engine.pid == engine_pid and app.settings.flash_attn == "auto"
        assert "fa disabled" not in app.dash.status.render().plain
        app.tuning._offer(req)  # yes: a restart with its flags
        await wait_until(pilot, lambda: isinstance(app.screen, RestartWithWinner), what="the offer")
        assert "Faster here: -fa off" in screen_text(app)
        await pilot.click("#restart")
        await wait_until(pilot, lambda: app.loaded is not None and app.session.engine.pid != engine_pid,
                         timeout=120, what="the restart")
        await wait_until(pilot, lambda: app.session.loaded is not None, timeout=120, what="the new load")
        assert app.settings.flash_attn == "off" and app.session.engine.settings.flash_attn == "off"
        assert app.session.loaded.flash_attn == "disabled"  # llama.cpp's log: the new engine runs without it
        assert list(app.session.messages) == messages  # the chat kept
        assert "engine restarted with -fa off" in screen_text(app)
        assert "fa disabled" in app.dash.status.render().plain
