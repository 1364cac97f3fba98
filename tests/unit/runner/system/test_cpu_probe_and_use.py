"""The CPU probe says how busy the machine was, a disturbed probe is taken again once
the machine is quiet, and the CPU use of engine, UI and others adds up."""

import json
import os

import pytest

from kvtop.runner.system import cpu_probe
from kvtop.runner.system.cpu_probe import CPUProbe, as_lower_bound, cpu_profile
from kvtop.runner.system.cpu_use import CPUReading, cpu_use


def _probe(bw: float, busy: float | None, kernels: dict | None = None, version: int = cpu_probe.PROBE_VERSION) -> CPUProbe:
    kernels = {"q4_K": 0.2} if kernels is None else kernels
    return CPUProbe(bw, 0.2, 2, 0.5, 1_700_000_000.0, cpu_probe.machine_key(), busy, 1.0, 0.1, kernels or None,
                    {"16": 0.1, "512": 0.2} if kernels else None, version)


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


def _measured(tmp_path) -> CPUProbe:
    with open(os.path.join(tmp_path, f"cpu-probe-{cpu_probe.machine_key()}.json")) as fh:
        return CPUProbe(**json.load(fh))


def test_a_disturbed_probe_is_a_lower_bound_while_the_machine_stays_busy(tmp_path, monkeypatch):
    """Issue 23, then issue 35: a probe taken with the CPU busy is not the ceiling. It is
    not probed again under load (that reads the load again), and its figures are handed
    out as measured, said to be lower bounds ("probed at 61% busy: at least ..."): a fixed
    correction (x2 bandwidth, x4 FLOPS) put the compute ceiling at 1,791 for a quiet 1,249."""
    _cache(tmp_path, _probe(19.6, busy=0.61))
    calls = _fake(monkeypatch, busy_now=0.7, fresh=_probe(34.1, busy=0.04))
    got = cpu_profile(str(tmp_path))
    assert calls == [] and got.busy == 0.61 and got.disturbed and got.lower_bound
    assert got.bandwidth_gbs == 19.6 and got.tflops == 0.2  # as measured: no factor
    assert got.flops_factor is None and got.bandwidth_factor is None
    assert "probed at 61% busy: at least 19.6 GB/s, 0.2 TFLOPS; taken again once quiet" in got.describe()
    assert _measured(tmp_path) == _probe(19.6, busy=0.61)  # the cache keeps what was measured


def test_a_saturated_probe_is_bounded_once_and_a_quiet_one_is_as_it_is():
    """Measured here at 100% busy, load 11.9, 2 cores: the pace model's inverse made it
    15-34 GB/s and 0.15-0.45 TFLOPS by guesswork; now it is at least what it measured."""
    p = CPUProbe(3.48, 0.0074, 2, 80.0, 1.7e9, "m", 1.0, 11.93, 0.0063, {"q4_K": 0.0074}, {"1": 0.0078, "512": 0.0074},
                 cpu_probe.PROBE_VERSION)
    q = cpu_probe.as_lower_bound(p)
    assert (q.bandwidth_gbs, q.tflops, q.lower_bound) == (3.48, 0.0074, True)
    assert cpu_probe.as_lower_bound(q) == q
    quiet = _probe(30.0, busy=0.1)
    assert cpu_probe.as_lower_bound(quiet) is quiet and not quiet.lower_bound


def test_a_probe_under_load_never_replaces_a_quiet_one(tmp_path, monkeypatch):
    """A re-probe (a turn beat its ceiling) on a busy machine keeps the quiet probe."""
    quiet = _probe(30.0, busy=0.02)
    _cache(tmp_path, quiet)
    calls = _fake(monkeypatch, busy_now=0.9, fresh=_probe(3.5, busy=1.0))
    assert cpu_profile(str(tmp_path), refresh=True) == quiet and calls == [1]
    assert _measured(tmp_path) == quiet


def test_a_first_probe_under_load_is_marked_and_taken_again_once_quiet(tmp_path, monkeypatch):
    calls = _fake(monkeypatch, busy_now=0.9, fresh=_probe(3.5, busy=1.0))
    first = cpu_profile(str(tmp_path))
    assert calls == [1] and first.lower_bound and first.bandwidth_gbs == 3.5
    assert _measured(tmp_path).busy == 1.0  # marked in the cache: the next quiet start probes again
    calls = _fake(monkeypatch, busy_now=0.02, fresh=_probe(34.0, busy=0.03))
    assert cpu_profile(str(tmp_path)).bandwidth_gbs == 34.0 and calls == [1]


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


def test_a_probe_without_llama_cpp_kernel_figures_is_taken_again_once_quiet(tmp_path, monkeypatch):
    # numpy's f32 FLOPS alone were beaten by Gemma-3's Q4_K prefill
    _cache(tmp_path, _probe(30.0, busy=0.02, kernels={}, version=0))
    calls = _fake(monkeypatch, busy_now=0.02, fresh=_probe(34.0, busy=0.03))
    assert cpu_profile(str(tmp_path)).kernel_tflops == {"q4_K": 0.2} and calls == [1]


def test_the_compute_peak_is_the_fastest_matmul_measured():
    assert cpu_probe.compute_peak_tflops(0.17, {"q4_1": 0.08, "q4_K": 0.43, "q6_K": 0.35}) == 0.43
    assert cpu_probe.compute_peak_tflops(0.17, {"q4_1": 0.08}) == 0.17
    assert cpu_probe.compute_peak_tflops(0.17, None) == 0.17
    k = CPUProbe(30.0, 0.43, 2, 0.5, 1.7e9, "m", 0.0, 1.0, 0.17, {"q4_1": 0.08, "q4_K": 0.43})
    f = CPUProbe(30.0, 0.17, 2, 0.5, 1.7e9, "m", 0.0, 1.0, 0.17, {"q4_1": 0.08})
    assert k.compute_peak == "llama.cpp q4_K matmul" and "FLOPS of llama.cpp q4_K matmul" in k.describe()
    assert f.compute_peak == "numpy f32 matmul" and "FLOPS of numpy f32 matmul" in f.describe()


def test_llama_cpp_kernels_are_timed_through_ggml():
    from kvtop.runner.system.ggml_matmul import probe_kernels

    got = probe_kernels(1, k=256, m=64, n=32, repeats=1)
    assert {"q4_K", "q4_1", "q8_0", "f16"} <= set(got) and all(v > 0 for v in got.values())


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


def test_a_probe_taken_at_one_batch_size_only_is_taken_again_once_quiet(tmp_path, monkeypatch):
    # kvtop before PROBE_VERSION 1 timed the kernels at 512 tokens only: every micro-batch at that pace
    _cache(tmp_path, _probe(30.0, busy=0.02, version=0))
    calls = _fake(monkeypatch, busy_now=0.6, fresh=_probe(34.0, busy=0.03))
    assert cpu_profile(str(tmp_path)).batch_tflops == {"16": 0.1, "512": 0.2} and calls == []  # busy: kept
    calls = _fake(monkeypatch, busy_now=0.02, fresh=_probe(34.0, busy=0.03))
    assert cpu_profile(str(tmp_path)).version == cpu_probe.PROBE_VERSION and calls == [1]


def test_the_fastest_kernel_is_timed_at_each_batch_size():
    from kvtop.runner.system.ggml_matmul import probe_batch_curve

    got = probe_batch_curve(1, batches=(1, 16), k=256, m=64, repeats=1)
    assert set(got) == {"1", "16"} and all(v > 0 for v in got.values())


def test_decode_attention_is_timed_through_llama_cpps_flash_attention():
    """One token's query over an f16 cache, a head long: far below a 512-token batch's
    peak (here ~0.007 TFLOPS at 64 against ~0.035), and it is what decode's attention runs."""
    from kvtop.runner.system.ggml_matmul import probe_attention, probe_kernels

    got = probe_attention(1, head_dims=(64, 256), depth=512, repeats=1)
    assert set(got) == {"64", "256"} and all(v > 0 for v in got.values())
    assert max(got.values()) < max(probe_kernels(1, k=256, m=256, n=512, repeats=1).values())


def test_decode_attentions_pace_between_and_beyond_the_head_sizes_probed():
    from dataclasses import replace

    p = replace(_probe(30.0, busy=0.02), attention_tflops={"64": 0.004, "256": 0.008})
    assert p.attention_tflops_at(64) == 0.004 and p.attention_tflops_at(256) == 0.008
    assert p.attention_tflops_at(128) == pytest.approx(0.006)  # halfway on log2
    assert p.attention_tflops_at(32) == 0.004 and p.attention_tflops_at(512) == 0.008
    assert _probe(30.0, busy=0.02).attention_tflops_at(64) is None  # an older probe: not measured
    busy = as_lower_bound(replace(_probe(19.6, busy=0.61), attention_tflops={"64": 0.004}))
    assert busy.attention_tflops["64"] == 0.004  # as measured, a lower bound too
