"""The batched roof of a vLLM (runner/physics/batch_roof.py) from its recorded /metrics
(tests/data/vllm/) and the served folder's facts (tests/data/vllm/smollm2-folder, read by
runner/model/hf_config.py): the running requests share the KV tokens in use."""

from __future__ import annotations

import os

import pytest

from kvtop.runner.model.inspect import load_facts
from kvtop.runner.physics.batch_roof import NOT_COUNTED, PerfCheck, batch_physics, perf_check
from kvtop.runner.physics.batching import batched_decode_ceiling
from kvtop.runner.physics.here import Here
from kvtop.runner.physics.kv_bytes import kv_bytes_read_at_depth
from kvtop.runner.server.batch_view import batch_view
from kvtop.runner.server.vllm import VllmReading
from kvtop.runner.settings import Settings
from kvtop.runner.system.hardware import HardwareProfile

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "..", "data", "vllm")
FOLDER = os.path.join(DATA, "smollm2-folder")


def reading(name: str) -> VllmReading:
    with open(os.path.join(DATA, f"vllm-metrics-{name}.txt"), encoding="utf-8") as fh:
        return VllmReading.parse(fh.read())


@pytest.fixture(scope="module")
def here() -> Here:
    facts = load_facts(FOLDER)
    hw = HardwareProfile(20.0, 0.5, "test CPU", None, None)
    return Here.at(facts, hw, Settings(FOLDER, n_ctx=2048))


def test_the_pool_full_of_four_streams_gives_their_roof(here):
    view, _ = batch_view(reading("kvpressure-peak"), None, 0.0, 23_040)
    assert view.running == 4 and view.kv_usage == 1.0 and view.kv_tokens == 2560
    ceiling, fit, avg = batch_physics(here, view)
    assert avg == 640  # 2,560 tokens in use by 4 requests
    assert fit == 0  # the pool is full: no other conversation of 640 tokens fits
    kv = kv_bytes_read_at_depth(here.layout, 640)
    assert kv == 640 * 23_040  # bfloat16 K and V of 30 layers x 3 heads x 64
    expect = batched_decode_ceiling(20e9, 269_030_016, [float(kv)] * 4)
    assert ceiling is not None and expect is not None and ceiling.slots == 4
    assert ceiling.aggregate_tok_s == pytest.approx(expect.aggregate_tok_s)
    # the weights are read once a step for 4 tokens: ~4x one stream's roof, less the KV
    one, _, _ = batch_physics(here, batch_view(reading("idle"), None, 0.0)[0])
    assert one is not None and one.slots == 1 and one.aggregate_tok_s == pytest.approx(20e9 / 269_030_016, rel=1e-3)
    assert 3.0 < ceiling.aggregate_tok_s / one.aggregate_tok_s < 4.0


def test_without_the_model_or_a_bandwidth_only_the_pool_is_said(here):
    view, _ = batch_view(reading("during-4streams"), None, 0.0)
    ceiling, fit, avg = batch_physics(None, view)
    assert ceiling is None and avg == pytest.approx(0.011019 * 46_592 / 4, rel=1e-3)
    assert fit is not None and fit > 300  # the 364-block pool is nearly empty
    blind = Here(here.facts, here.layout, HardwareProfile(None, None, "unknown", None, None), here.settings)
    assert batch_physics(blind, view)[0] is None


def test_vllm_counting_no_flops_is_said_in_one_line(here):
    old, new = reading("idle"), reading("during-4streams")
    view, _ = batch_view(new, old, 10.0)
    assert view.deltas["gen"] == 436 and view.deltas["requests_done"] == 8 and view.deltas["steps"] == 370
    assert view.mfu == "zero"
    assert perf_check(here, view) == NOT_COUNTED["zero"]
    assert "--enable-mfu-metrics" in NOT_COUNTED["zero"]
    gone = VllmReading.parse("vllm:num_requests_running 0\n")
    assert perf_check(here, batch_view(gone, gone, 1.0)[0]) == NOT_COUNTED["absent"]


def test_an_overridden_pool_gets_its_bytes_from_the_models_facts(here):
    from kvtop.runner.server.batch_view import with_model_kv

    view, _ = batch_view(reading("kvpressure-peak"), None, 0.0)  # --num-gpu-blocks-override, no config read
    assert view.kv_pool_bytes is None and view.kv_bytes_from.startswith("nowhere")
    fixed = with_model_kv(view, here.layout.bytes_per_token)
    assert fixed.kv_pool_bytes == 2560 * 23_040 and fixed.kv_used_bytes == 2560 * 23_040
    assert fixed.kv_bytes_from == "the model's facts"
    served, _ = batch_view(reading("kvpressure-peak"), None, 0.0, 23_040)
    assert with_model_kv(served, 1.0) is served  # the served folder's own figure is kept


def test_a_disagreement_over_ten_percent_is_drawn_not_hidden():
    from kvtop.tui.panes.batch_lines import perf_lines

    close = PerfCheck(3, 2.9e8, 3.0e8, 2.7e8, 2.72e8)
    text = "\n".join(c.plain for c in perf_lines(close))
    assert "FLOPs/token kvtop 290 MFLOP  vLLM 300 MFLOP (-3%)" in text and "disagree" not in text
    far = PerfCheck(3, 2.9e8, 3.0e8, 9.7e7, 2.72e8)  # Q4_1 facts beside bfloat16 weights
    lines = perf_lines(far)
    assert far.disagrees and "(-64%)" in lines[1].plain
    assert lines[-1].plain == "kvtop and vLLM disagree by over 10% (3 requests, last minute)"
    assert perf_lines(NOT_COUNTED["zero"])[0].plain == NOT_COUNTED["zero"]


def test_kvtops_figures_beside_vllms_own_over_one_request(here):
    """Recorded from the tests' vLLM with --enable-mfu-metrics: /metrics before and after one
    request of 300 prompt tokens and 40 generated (ignore_eos), nothing else running."""
    old, new = reading("mfu-before"), reading("mfu-after")
    assert batch_view(old, None, 0.0)[0].mfu == "idle"  # 0 before any token: not "not counted"
    assert perf_check(here, batch_view(old, None, 0.0)[0]) is None
    view, _ = batch_view(new, old, 10.0)
    assert view.mfu == "counting" and view.flops == 81_330_462_720 and view.read_bytes == 11_462_436_864
    assert view.deltas["steps"] == 40 and view.deltas["requests_done"] == 1 and view.deltas["prompt"] == 300
    p = perf_check(here, view)
    assert isinstance(p, PerfCheck) and p.requests == 1
    # kvtop's prefill attention is causal (vLLM bills every prompt token the whole prompt),
    # and vLLM also counts activations read: kvtop a few percent under, within 10%
    assert -0.06 < p.flops_off < 0 and -0.06 < p.bytes_off < 0 and not p.disagrees
    assert p.vllm_bytes_per_token == pytest.approx(11_462_436_864 / 40)
    # the bundled Q4_1 GGUF's facts beside the bfloat16 weights vLLM serves: the bytes disagree
    from kvtop.runner.demo import demo_model_path

    gguf = Here.at(load_facts(demo_model_path()), here.hw, here.settings)
    q = perf_check(gguf, view)
    assert isinstance(q, PerfCheck) and q.bytes_off is not None and q.bytes_off < -0.5 and q.disagrees
    assert abs(q.flops_off - p.flops_off) < 1e-9  # the same shape: the same FLOPs
