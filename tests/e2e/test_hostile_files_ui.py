"""Bad model files in the UI: an error screen that names the file and the reason, and the app stays up."""

import pytest
from gguf_factory import make_bad_files, write_tiny_llama
from helpers import make_app, screen_text, send, wait_until

from kvtop.runner.process.parent import EngineProcess
from kvtop.runner.settings import Settings
from kvtop.tui.base.screens import ErrorScreen


@pytest.fixture(scope="module")
def cases(tmp_path_factory, smollm_path):
    return make_bad_files(tmp_path_factory.mktemp("bad"), smollm_path)


@pytest.mark.parametrize("name", ["text", "truncated_data", "unknown_arch"])
async def test_ui_shows_an_error_screen_and_stays_up(cases, tmp_path, name):
    path, reason = cases[name]
    app = make_app(Settings(path, n_ctx=512), EngineProcess, tmp_path, live_system=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, ErrorScreen), what="error screen")
        assert reason in app.screen.reason and path in app.screen.reason
        shown = str(app.screen.query_one("#error-reason").render())
        assert reason in shown and path in shown
        assert "Could not load the model" in screen_text(app)
        await pilot.press("escape")
        await pilot.pause()
        await send(pilot, "hello?")
        await pilot.pause()
        assert app.is_running and not app.turn_running


async def test_engine_abort_while_loading_is_reported_in_the_ui(tmp_path, smollm_path):
    path = write_tiny_llama(tmp_path / "k1000.gguf", smollm_path, block_count=1000)
    # the estimate refuses the file first; the UI reports that, and never starts the engine
    app = make_app(Settings(path, n_ctx=512), EngineProcess, tmp_path, live_system=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, ErrorScreen), what="error screen")
        assert "block_count says 1000" in app.screen.reason
        assert app.engine.proc is None


async def test_preflight_warns_before_loading_a_model_too_big_for_memory(tmp_path, smollm_path):
    from dataclasses import replace

    from helpers import FIXED_HW

    from kvtop.tui.base.screens import PreflightScreen

    tiny_ram = replace(FIXED_HW, memory_free=64 * 2**20)  # 64 MiB free: the model needs ~260 MiB
    app = make_app(Settings(smollm_path, n_ctx=2048), EngineProcess, tmp_path, live_system=False, hardware=tiny_ram)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, PreflightScreen), what="preflight")
        text = screen_text(app)
        assert "may not fit" in text and "GiB RAM free" in text
        assert app.engine.proc is None  # nothing loaded yet
        await pilot.click("#go")
        await wait_until(pilot, lambda: app.loaded is not None, what="load after 'Load anyway'")
    app2 = make_app(Settings(smollm_path, n_ctx=2048), EngineProcess, tmp_path, live_system=False, hardware=tiny_ram)
    async with app2.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: isinstance(app2.screen, PreflightScreen), what="preflight")
        await pilot.click("#stop")
        await wait_until(pilot, lambda: app2.return_code is not None, timeout=5, what="exit")
    assert app2.return_code == 1 and app2.engine.proc is None
