"""The palette's "find faster settings" on the real app and the demo model: kvtop tune
runs beside the chat (the engine and the chat stay as they were), the result lands in
the cache the Estimate pane's advice reads, the recommendation is shown, and the same
entry again stops a run in flight."""

import pytest
from helpers import make_app, wait_until

from kvtop.runner.process.parent import EngineProcess
from kvtop.runner.settings import Settings


@pytest.fixture
def settings(smollm_path):
    return Settings(smollm_path, n_ctx=1024, temp=0, n_predict=8)


async def test_find_faster_settings_beside_the_chat(settings, tmp_path, monkeypatch):
    import kvtop.tui.turn.tuning as tuning

    monkeypatch.setattr(tuning, "BUDGET_S", 20)
    app = make_app(settings, EngineProcess, tmp_path, live_system=False)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, timeout=120, what="model load")
        engine_pid, messages = app.session.engine.pid, list(app.session.messages)
        app.tuning.toggle()
        assert app.tuning.running
        await wait_until(pilot, lambda: not app.tuning.running, timeout=120, what="kvtop tune's end")
        await pilot.pause(0.5)
        said = [n.message for n in app._notifications]
        # its JSON read back: a recommendation, or why there is none ("measured nothing" is not that)
        assert any(m.startswith("faster here") or "keep these settings" in m for m in said), said
        assert app.session.engine.pid == engine_pid and list(app.session.messages) == messages  # untouched
        # again, stopped at once: it ends (partial) instead of running its budget
        app.tuning.toggle()
        app.tuning.toggle()
        await wait_until(pilot, lambda: not app.tuning.running, timeout=60, what="the stopped kvtop tune")
