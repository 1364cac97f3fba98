"""A CPU probe taken under load is not the machine's ceiling (issue 23 leftover): kvtop
hands its figures out as lower bounds (runner.system.cpu_probe ``as_lower_bound``,
issue 35: no fixed correction factor) and, once the machine turns quiet during the session, probes again and
says so. Before, such a probe was the ceiling for as long as the machine stayed busy
(~60x low FLOPS) and was taken again only at a later start on a quiet machine."""

import os
from dataclasses import replace

from helpers import FIXED_HW, make_app, wait_until
from scripted_engine import ScriptedEngine, smollm_loaded

from kvtop.runner.settings import Settings
from kvtop.runner.system.cpu_probe import CPUProbe, as_lower_bound
from kvtop.runner.system.cpu_use import CPUReading

UNDER_LOAD = as_lower_bound(CPUProbe(3.48, 0.0074, 2, 80.0, 1.7e9, "m", 1.0, 11.9))
QUIET = CPUProbe(34.0, 0.3, 2, 0.5, 1.7e9, "m", 0.02, 0.1)


class Clock:
    """The readings CPUWatch.tick takes: ``others`` cores busy beside an idle engine and UI."""

    def __init__(self):
        self.wall, self.busy, self.others = 0.0, 0.0, 0.0

    def read(self, *a, **kw) -> CPUReading:
        self.wall += 1.0
        self.busy += self.others
        return CPUReading(self.wall, self.busy, 0.0, 0.0)


def _app(tmp_path, model, probe, monkeypatch):
    calls, clock = [], Clock()

    def profile(n_gpu_layers=0, *a, refresh=False, **kw):
        calls.append(refresh)
        return replace(FIXED_HW, bandwidth_gbs=34.0, tflops=0.3, cpu=QUIET, source=QUIET.describe())

    import kvtop.runner.system.hardware as hardware

    monkeypatch.setattr(hardware, "hardware_profile", profile)
    monkeypatch.setattr("kvtop.tui.turn.cpu_watch.read_cpu", clock.read)
    hw = replace(FIXED_HW, bandwidth_gbs=probe.bandwidth_gbs, tflops=probe.tflops, cpu=probe, source=probe.describe())
    loaded = smollm_loaded(model)
    app = make_app(Settings(model, n_ctx=4096), lambda s: ScriptedEngine(s, loaded, []), tmp_path,
                   live_system=False, write_transcript=False, hardware=hw)
    return app, calls, clock


async def test_a_probe_taken_under_load_is_taken_again_once_the_machine_is_quiet(tmp_path, smollm_shaped,
                                                                                  monkeypatch):
    app, calls, clock = _app(tmp_path, smollm_shaped, UNDER_LOAD, monkeypatch)
    notes = []
    app.notify = lambda text, **kw: notes.append(text)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        assert "probed at 100% busy: at least 3.5 GB/s" in app.hw.source  # the hardware line says what they are
        clock.others = 0.95 * (os.cpu_count() or 1)  # still busy: no probe (it would read the load)
        for _ in range(8):
            app.cpu_watch.tick()
        await pilot.pause()
        assert calls == []
        clock.others = 0.0  # quiet from now on
        for _ in range(8):
            app.cpu_watch.tick()
        await wait_until(pilot, lambda: app.hw.cpu == QUIET, timeout=10, what="the new probe")
        assert calls == [True]
        assert any(n.startswith("the machine is quiet now (the last probe ran at 100% CPU)") and "34.0 GB/s" in n
                   for n in notes)
        for _ in range(8):
            app.cpu_watch.tick()
        await pilot.pause()
        assert calls == [True]  # once


async def test_a_quiet_probe_is_not_taken_again(tmp_path, smollm_shaped, monkeypatch):
    app, calls, clock = _app(tmp_path, smollm_shaped, QUIET, monkeypatch)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        for _ in range(8):
            app.cpu_watch.tick()
        await pilot.pause()
        assert calls == []
