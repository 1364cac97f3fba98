"""The CPU probe says how busy the machine was, a disturbed probe is taken again once
the machine is quiet, and the CPU use of engine, UI and others adds up."""

import json
import os

from runner.system import cpu_probe
from runner.system.cpu_probe import CPUProbe, cpu_profile
from runner.system.cpu_use import CPUReading, cpu_use


def _probe(bw: float, busy: float | None) -> CPUProbe:
    return CPUProbe(bw, 0.2, 2, 0.5, 1_700_000_000.0, cpu_probe.machine_key(), busy, 1.0)


def _fake(monkeypatch, busy_now: float, fresh: CPUProbe) -> list:
    calls = []
    monkeypatch.setattr(cpu_probe, "machine_busy", lambda seconds=0.5: busy_now)
    monkeypatch.setattr(cpu_probe, "probe_cpu_in_subprocess", lambda: calls.append(1) or fresh)
    return calls


def _cache(tmp_path, probe: CPUProbe) -> None:
    from dataclasses import asdict

    with open(os.path.join(tmp_path, f"cpu-probe-{cpu_probe.machine_key()}.json"), "w") as fh:
        json.dump(asdict(probe), fh)


def test_a_disturbed_probe_is_taken_again_when_the_machine_is_quiet(tmp_path, monkeypatch):
    _cache(tmp_path, _probe(19.6, busy=0.61))
    calls = _fake(monkeypatch, busy_now=0.05, fresh=_probe(34.1, busy=0.04))
    got = cpu_profile(str(tmp_path))
    assert calls == [1] and got.bandwidth_gbs == 34.1
    assert cpu_profile(str(tmp_path)).bandwidth_gbs == 34.1 and calls == [1]  # the quiet one is kept


def test_a_disturbed_probe_is_kept_while_the_machine_is_still_busy(tmp_path, monkeypatch):
    _cache(tmp_path, _probe(19.6, busy=0.61))
    calls = _fake(monkeypatch, busy_now=0.7, fresh=_probe(34.1, busy=0.04))
    assert cpu_profile(str(tmp_path)).bandwidth_gbs == 19.6 and calls == []


def test_a_quiet_probe_is_kept(tmp_path, monkeypatch):
    cached = _probe(30.0, busy=0.02)
    _cache(tmp_path, cached)
    calls = _fake(monkeypatch, busy_now=0.0, fresh=_probe(99.0, busy=0.0))
    assert cpu_profile(str(tmp_path)) == cached and calls == []


def test_an_old_probe_that_did_not_record_the_load_is_taken_again_once_quiet(tmp_path, monkeypatch):
    _cache(tmp_path, _probe(16.8, busy=None))  # e.g. 0.05 TFLOPS measured while tests ran
    calls = _fake(monkeypatch, busy_now=0.7, fresh=_probe(34.0, busy=0.03))
    assert cpu_profile(str(tmp_path)).bandwidth_gbs == 16.8 and calls == []  # still busy: kept
    calls = _fake(monkeypatch, busy_now=0.02, fresh=_probe(34.0, busy=0.03))
    assert cpu_profile(str(tmp_path)).bandwidth_gbs == 34.0 and calls == [1]


def test_the_hardware_line_says_when_and_how_busy():
    text = _probe(19.6, busy=0.61).describe()
    assert text.startswith("CPU probe (2 threads, ") and text.endswith(", CPU 61% busy before it)")
    assert _probe(19.6, busy=0.61).disturbed and not _probe(30.0, busy=0.1).disturbed


def test_cpu_use_splits_engine_ui_and_others():
    a = CPUReading(wall=100.0, system_busy=1000.0, engine=50.0, ui=10.0)
    b = CPUReading(wall=102.0, system_busy=1004.0, engine=52.6, ui=10.2)  # 4 core-seconds in 2 s
    u = cpu_use(a, b)
    assert round(u.engine, 3) == 1.3 and round(u.ui, 3) == 0.1 and round(u.others, 3) == 0.6
    assert round(u.others_share, 3) == round(0.6 / u.cores, 3)


def test_cpu_use_of_a_gone_engine_is_unknown_not_an_error():
    a = CPUReading(wall=1.0, system_busy=5.0, engine=None, ui=None)
    b = CPUReading(wall=2.0, system_busy=6.5, engine=None, ui=None)
    u = cpu_use(a, b)
    assert u.engine is None and u.ui is None and round(u.others, 3) == min(1.5, u.cores)
