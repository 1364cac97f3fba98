"""A measured rate above its ceiling means the CPU probe read low (taken while the
machine was busy): kvtop probes again once, says what changed, and the ceilings move."""

from dataclasses import replace

from helpers import FIXED_HW, make_app, send, wait_until
from scripted_engine import ScriptedEngine, scripted_turn, smollm_loaded

from kvtop.runner.settings import Settings
from kvtop.runner.system.cpu_probe import CPUProbe

BUSY_PROBE = CPUProbe(12.0, 0.05, 2, 0.5, 1.7e9, "m", 0.61, 2.0)
QUIET_PROBE = CPUProbe(60.0, 0.5, 2, 0.5, 1.7e9, "m", 0.02, 0.1)


def _app(tmp_path, model, tg_tok_s):
    hw = replace(FIXED_HW, bandwidth_gbs=12.0, tflops=0.05, cpu=BUSY_PROBE, source=BUSY_PROBE.describe())
    loaded = smollm_loaded(model)
    turns = [scripted_turn(1, 1000.0, 300, 0, ["x"] * 40, pp_tok_s=200, tg_tok_s=tg_tok_s)] * 2
    return make_app(Settings(model, n_ctx=4096), lambda s: ScriptedEngine(s, loaded, list(turns)), tmp_path,
                    live_system=False, write_transcript=False, hardware=hw)


def _fake_probe(monkeypatch) -> list:
    calls = []

    def profile(n_gpu_layers=0, *a, refresh=False, **kw):
        calls.append(refresh)
        return replace(FIXED_HW, bandwidth_gbs=60.0, tflops=0.5, cpu=QUIET_PROBE, source=QUIET_PROBE.describe())

    import kvtop.runner.system.hardware as hardware

    monkeypatch.setattr(hardware, "hardware_profile", profile)
    return calls


async def test_a_turn_that_beats_the_ceiling_probes_again_once(tmp_path, smollm_shaped, monkeypatch):
    calls = _fake_probe(monkeypatch)
    app = _app(tmp_path, smollm_shaped, tg_tok_s=400)  # the 12 GB/s ceiling is ~120 tok/s
    notes = []
    app.notify = lambda text, **kw: notes.append(text)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        before = app.here.ceilings(340)[0]
        await send(pilot, "go")
        await wait_until(pilot, lambda: app.hw.bandwidth_gbs == 60.0, timeout=10, what="the new probe")
        assert calls == [True] and app.here.ceilings(340)[0] > 4 * before
        assert any("beat its" in n and "probed again: 60.0 GB/s" in n and "(was 12.0 GB/s" in n for n in notes)
        await send(pilot, "again")
        await wait_until(pilot, lambda: len(app.turns) == 2 and not app.turn_running, what="turn 2")
        await pilot.pause()
        assert calls == [True]  # once a session


async def test_a_turn_below_its_ceiling_does_not_probe(tmp_path, smollm_shaped, monkeypatch):
    calls = _fake_probe(monkeypatch)
    app = _app(tmp_path, smollm_shaped, tg_tok_s=60)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        await send(pilot, "go")
        await wait_until(pilot, lambda: app.turns and not app.turn_running, what="turn")
        await pilot.pause()
        assert calls == [] and app.hw.bandwidth_gbs == 12.0
