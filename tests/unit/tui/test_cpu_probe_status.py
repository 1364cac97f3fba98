"""The CPU probe at start runs before the engine does and took over 30 s on a busy
machine; the status bar showed a frozen "loading 0%" all that time. Now it says that
this machine's CPU is being measured, counts the seconds, and goes back to the load's
progress (then the settings) once the probe ends."""

import threading

from helpers import FIXED_HW, make_app, wait_until
from scripted_engine import ScriptedEngine, smollm_loaded

from kvtop.runner.settings import Settings
from kvtop.tui.panes.status import StatusBar

MEASURING = "measuring this machine's CPU (bandwidth, FLOPS)"


async def test_the_status_bar_says_the_cpu_probe_runs_while_it_does(tmp_path, smollm_shaped, monkeypatch):
    started, release = threading.Event(), threading.Event()

    def slow_profile(n_gpu_layers=0, *a, **kw):
        started.set()
        release.wait(30)  # the probe on a busy machine, until the test lets it end
        return FIXED_HW

    import kvtop.runner.system.hardware as hardware

    monkeypatch.setattr(hardware, "hardware_profile", slow_profile)
    loaded = smollm_loaded(smollm_shaped)
    app = make_app(Settings(smollm_shaped, n_ctx=4096), lambda s: ScriptedEngine(s, loaded, []), tmp_path,
                   live_system=False, write_transcript=False, hardware=None)

    def bar() -> str:
        return app.query_one(StatusBar).render().plain

    try:
        async with app.run_test(size=(160, 50)) as pilot:
            await wait_until(pilot, lambda: MEASURING in bar(), timeout=10, what="the probe's line")
            assert started.is_set() and "loading" not in bar()
            first = bar()  # "… 0 s" on a quiet machine; the count must move on, not freeze
            await wait_until(pilot, lambda: MEASURING in bar() and bar() != first, timeout=10,
                             what="the seconds to count")
            release.set()
            await wait_until(pilot, lambda: app.loaded is not None, what="load")
            assert MEASURING not in bar() and "n_ctx" in bar()
    finally:
        release.set()
