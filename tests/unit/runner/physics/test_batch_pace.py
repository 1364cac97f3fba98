"""A prefill micro-batch is priced at the FLOPS llama.cpp's kernels reach at its size.

After one calibrating turn (two micro-batches of 512) a 20-token follow-up came out
~40% short: the kernels reach far fewer FLOPS at a batch of 20 (q4_K 0.22 TFLOPS at 16
against 0.43 at 512 on a 2-core Zen 4), and the fit had learnt its scale at 512 only.
"""

from dataclasses import replace

import pytest

from kvtop.runner.calibration.basis import roofline_basis
from kvtop.runner.calibration.forecast import Forecaster
from kvtop.runner.calibration.store import Samples
from kvtop.runner.model.inspect import load_facts
from kvtop.runner.physics.here import Here
from kvtop.runner.physics.kv_bytes import kv_layout
from kvtop.runner.physics.machine import ceilings_here, hardware_at_batch, predict_here, prefill_seconds_here
from kvtop.runner.physics.phase_costs import output_flops
from kvtop.runner.settings import Settings
from kvtop.runner.system.cpu_probe import CPUProbe, batch_factor
from kvtop.runner.system.hardware import HardwareProfile

# The fastest kernel's TFLOPS per batch, as measured here (2-core Zen 4 VM)
CURVE = {"1": 0.14, "4": 0.21, "16": 0.30, "64": 0.32, "128": 0.42, "512": 0.45}


def probe(curve=CURVE) -> CPUProbe:
    return CPUProbe(30.0, 0.45, 2, 1.5, 1.7e9, "m", 0.01, 1.0, 0.17, {"q4_K": 0.45}, curve, 1)


def hardware(curve=CURVE, cpu_tflops: float | None = None) -> HardwareProfile:
    p = probe(curve)
    tf = p.tflops if cpu_tflops is None else cpu_tflops
    return HardwareProfile(30.0, tf, "CPU probe", 16 * 2**30, 24 * 2**30, cpu=p, cpu_bandwidth_gbs=30.0,
                           cpu_tflops=tf, cpu_source="CPU probe")


@pytest.fixture(scope="module")
def model(smollm_path):
    facts = load_facts(smollm_path)
    return facts, kv_layout(facts, 4096), Settings("m.gguf", n_ctx=4096, n_threads=2)


def test_the_pace_is_interpolated_on_log_n_and_flat_outside_the_batches_probed():
    assert batch_factor(CURVE, 512) == 1.0 and batch_factor(CURVE, 2048) == 1.0
    assert batch_factor(CURVE, 1) == batch_factor(CURVE, 0) == pytest.approx(0.14 / 0.45)
    assert batch_factor(CURVE, 2) == pytest.approx(0.175 / 0.45)  # halfway between 1 and 4 on log n
    assert batch_factor(CURVE, 32) == pytest.approx((0.30 + 0.5 * 0.02) / 0.45)
    assert batch_factor(None, 20) == batch_factor({}, 20) == 1.0
    assert probe().tflops_at(16) == pytest.approx(0.30) and probe(None).tflops_at(16) == 0.45


def test_a_dip_in_the_curve_is_taken_for_other_work_not_for_the_kernels():
    dipped = dict(CURVE, **{"128": 0.11})  # taken while another process held the CPU
    assert batch_factor(dipped, 128) == pytest.approx(0.32 / 0.45)
    low_top = dict(CURVE, **{"512": 0.2})  # the largest batch disturbed: never faster than the peak
    assert batch_factor(low_top, 512) == 1.0 and batch_factor(low_top, 16) == pytest.approx(0.30 / 0.42)


def logits_s(facts) -> float:
    """The output projection for the last token at the peak."""
    return output_flops(facts, 1) / 0.45e12


def test_a_micro_batch_of_20_is_priced_slower_per_token_than_one_of_512(model):
    facts, lay, s = model
    hw, flat = hardware(), hardware(curve=None)
    out, at_one = logits_s(facts), 1 / batch_factor(CURVE, 1)
    for n, depth in ((20, 1024), (20, 0), (1, 600), (512, 0)):
        paced, peak = prefill_seconds_here(facts, lay, hw, s, n, depth), prefill_seconds_here(facts, lay, flat, s, n, depth)
        # the matrices and attention at the pace of n tokens, the last token's logits at the pace of one
        assert paced == pytest.approx((peak - out) / batch_factor(CURVE, n) + out * at_one), (n, depth)
        assert prefill_seconds_here(facts, lay, hw, s, n, depth, at_peak=True) == peak
    per_token_20 = prefill_seconds_here(facts, lay, hw, s, 20, 0) / 20
    per_token_512 = prefill_seconds_here(facts, lay, hw, s, 512, 0) / 512
    assert per_token_20 > 1.3 * per_token_512  # 1.45x the FLOPS time, less attention per token


def test_a_long_prompt_is_priced_micro_batch_by_micro_batch(model):
    facts, lay, s = model
    hw, flat = hardware(), hardware(curve=None)
    out = logits_s(facts)
    # two full micro-batches at the peak, the output projection once, at the pace of one token
    whole, peak = predict_here(facts, lay, hw, s, 1024, 64), predict_here(facts, lay, flat, s, 1024, 64)
    assert whole.prefill_s == pytest.approx(peak.prefill_s + out * (1 / batch_factor(CURVE, 1) - 1))
    # 512 + 40: the last micro-batch at the pace of 40 tokens
    paced, peak = predict_here(facts, lay, hw, s, 552, 64), predict_here(facts, lay, flat, s, 552, 64)
    assert peak.prefill_s < paced.prefill_s < peak.prefill_s * 1.2
    assert paced.ttft_s == paced.prefill_s and paced.prefill_tok_s == pytest.approx(552 / paced.prefill_s)
    assert paced.response_s == pytest.approx(paced.prefill_s + 64 / paced.decode_tok_s)
    # decode and its ceilings keep the peak
    assert (paced.decode_ceiling_tok_s, paced.compute_ceiling_tok_s) == (peak.decode_ceiling_tok_s,
                                                                         peak.compute_ceiling_tok_s)
    assert ceilings_here(facts, lay, hw, s, 900) == ceilings_here(facts, lay, flat, s, 900)


def test_a_model_split_across_devices_paces_the_cpus_share(model):
    facts, lay, s = model
    gpu = replace(hardware(), gpu_bandwidth_gbs=1000.0, gpu_tflops=100.0)
    flat = replace(gpu, cpu=probe(None))
    split = replace(s, n_gpu_layers=10)
    paced, peak = prefill_seconds_here(facts, lay, gpu, split, 20, 0), prefill_seconds_here(facts, lay, flat, split, 20, 0)
    assert peak < paced < peak / batch_factor(CURVE, 20)


def test_figures_given_on_the_command_line_keep_their_pace():
    given = hardware(cpu_tflops=1.0)
    assert hardware_at_batch(given, 20) == given
    assert hardware_at_batch(hardware(curve=None), 20) == hardware(curve=None)
    gpu = replace(hardware(), tflops=989.0, source="GPU 0 (NVIDIA H200)")
    got = hardware_at_batch(gpu, 16)
    assert got.tflops == 989.0 and got.cpu_tflops == pytest.approx(0.30)


def test_one_calibrating_turn_forecasts_a_20_token_follow_up(model):
    """The machine runs at 2.5x the paced roofline plus nothing fixed; calibrated on one
    1,024-token turn (512 at depth 0, 512 at depth 512), the forecast of 20 new tokens
    after 1,024 cached is the machine's. Priced at the peak, it came out ~40% short."""
    facts, lay, s = model
    hw = hardware()

    def machine(n, depth):
        return 2.5 * prefill_seconds_here(facts, lay, hw, s, n, depth)

    samples = Samples(prefill=[(512, 0, machine(512, 0)), (512, 512, machine(512, 512))], turns=1)
    measured = machine(20, 1024)
    paced = Forecaster(roofline_basis(Here(facts, lay, hw, s)), samples).forecast(1044, 1024, 32)
    assert paced.prefill_s / measured == pytest.approx(1.0, abs=0.02)
    at_peak = Forecaster(roofline_basis(Here(facts, lay, hardware(curve=None), s)), samples).forecast(1044, 1024, 32)
    assert at_peak.prefill_s / measured < 0.75
