"""One machine model (runner.physics.here ``Here``): the figures the screen draws against,
computed once from (facts, KV layout, hardware, settings). Each answer is the number the
physics' own functions give for the same four values, so moving the math out of tui/
changed no figure on screen."""

from dataclasses import FrozenInstanceError, replace
from types import SimpleNamespace

import pytest
from helpers import FIXED_HW

from kvtop.runner.events import TurnMetrics
from kvtop.runner.model.inspect import load_facts
from kvtop.runner.physics.batching import batched_decode_ceiling, compute_tok_s
from kvtop.runner.physics.estimate_rows import estimate_rows
from kvtop.runner.physics.here import BEATEN, Here, cpu_share, layout_for, server_physics
from kvtop.runner.physics.kv_bytes import kv_bytes_read_at_depth, kv_layout
from kvtop.runner.physics.machine import ceilings_here, predict_here, prefill_seconds_here
from kvtop.runner.physics.memory_check import memory_check
from kvtop.runner.physics.offload import OffloadSettings
from kvtop.runner.server.monitor import SlotState
from kvtop.runner.settings import Settings


@pytest.fixture(scope="module")
def facts(smollm_path):
    return load_facts(smollm_path)


@pytest.fixture(scope="module")
def settings(smollm_path):
    return Settings(smollm_path, n_ctx=4096, n_ubatch=256, cache_type_k="q8_0", cache_type_v="q8_0").resolved()


@pytest.fixture(scope="module")
def here(facts, settings):
    return Here.at(facts, FIXED_HW, settings)


def turn(**kw) -> TurnMetrics:
    base = dict(prompt_tokens=300, reused_tokens=0, prefill_tokens=300, prefill_s=1.0, prefill_tok_s=300.0,
                template_s=0.002, tokenize_s=0.0005, wait_s=0.0, ttft_s=1.0, decode_tokens=40, decode_s=1.0,
                decode_tok_s=40.0, itl_p50_ms=25.0, itl_p95_ms=25.0, kv_cells_used=340, n_ctx=4096)
    base.update(kw)
    return TurnMetrics(**base)


def slot(i, n_prompt_tokens, processing, n_ctx=4096) -> SlotState:
    return SlotState(i, n_ctx, processing, None, n_prompt_tokens, 0, 0, 0)


# ------------------------------------------------------------ the KV layout, once
def test_the_layout_is_the_one_the_app_computed_at_inspection_and_at_load(facts, settings, here):
    s = settings
    assert here.layout == kv_layout(facts, s.n_ctx, s.cache_type_k, s.cache_type_v, s.swa_full, s.n_ubatch)
    loaded = here.resized(2048, 128)  # the engine's own n_ctx and n_ubatch
    assert loaded.layout == kv_layout(facts, 2048, s.cache_type_k, s.cache_type_v, s.swa_full, 128)
    served = here.resized(4 * 1024)  # a server: every slot's KV, the settings' n_ubatch
    assert served.layout == kv_layout(facts, 4096, s.cache_type_k, s.cache_type_v, s.swa_full, s.n_ubatch)
    assert layout_for(facts, s, 1024, 64) == kv_layout(facts, 1024, "q8_0", "q8_0", s.swa_full, 64)
    assert here.layout.n_ctx == 4096 and loaded.facts is facts and loaded.hw is FIXED_HW


def test_the_engines_cache_is_kvtops_at_its_n_ctx_or_every_slot_of_a_server(facts, settings, here, smollm_path):
    from scripted_engine import smollm_loaded

    loaded = replace(smollm_loaded(smollm_path, n_ctx=2048), n_ubatch=128)
    own, shown = here.fitted(loaded, llama_buffers=True)
    assert own.layout == here.resized(2048, 128).layout
    assert (shown.n_ctx, shown.allocated_bytes, shown.slots) == (2048, loaded.buffers.kv_mib * 2**20, 1)
    served, shown = here.fitted(replace(loaded, total_slots=4, n_ctx=1024), llama_buffers=False)
    assert served.layout == here.resized(4 * 1024).layout  # every slot's KV, the settings' n_ubatch
    assert (shown.n_ctx, shown.allocated_bytes, shown.slots) == (1024, None, 4)


def test_it_is_a_value_a_change_is_a_new_one(here):
    with pytest.raises(FrozenInstanceError):
        here.hw = None
    faster = here.with_hardware(replace(FIXED_HW, bandwidth_gbs=60.0))
    assert here.hw is FIXED_HW and faster.hw.bandwidth_gbs == 60.0 and faster.layout is here.layout
    assert faster.ceilings(340)[0] > here.ceilings(340)[0]


def test_nothing_is_known_until_facts_layout_and_hardware_are(facts, settings, here):
    assert Here.known(None, None, FIXED_HW, settings) is None  # a server without its GGUF header
    assert Here.known(facts, here.layout, None, settings) is None
    assert Here.known(facts, here.layout, FIXED_HW, settings) == here


# ------------------------------------------------------------ the same numbers
@pytest.mark.parametrize("depth", [0, 1, 340, 4000])
def test_ceilings_are_the_machines(facts, settings, here, depth):
    assert here.ceilings(depth) == ceilings_here(facts, here.layout, FIXED_HW, settings, depth)
    bw, comp = here.ceilings(depth)
    assert bw and comp


def test_predictions_and_prefill_seconds_are_the_machines(facts, settings, here):
    assert here.predict(300, 40, 100) == predict_here(facts, here.layout, FIXED_HW, settings, 300, 40, 100)
    assert here.predict(37) == predict_here(facts, here.layout, FIXED_HW, settings, 37)
    for peak in (False, True):
        assert here.prefill_seconds(700, 64, at_peak=peak) == prefill_seconds_here(
            facts, here.layout, FIXED_HW, settings, 700, 64, at_peak=peak)


def test_estimate_rows_and_memory_check_are_the_physics(facts, settings, here):
    buffers = SimpleNamespace(kv_mib=90.0, weights_mib=92.1, compute_total_mib=98.63)
    mt = turn()
    assert here.estimate_rows() == estimate_rows(facts, here.layout, FIXED_HW, settings)
    assert here.estimate_rows(buffers=buffers, peak_rss=300 * 2**20, turn=mt, turn_ran=True, others_cpu=0.4) == \
        estimate_rows(facts, here.layout, FIXED_HW, settings, buffers=buffers, peak_rss=300 * 2**20, turn=mt,
                      turn_ran=True, others_cpu=0.4)
    assert here.memory_check() == memory_check(facts, here.layout, FIXED_HW, settings.n_gpu_layers,
                                               offload=OffloadSettings.from_settings(settings))


# ------------------------------------------------------------ a turn that beat its roofline
def test_a_turn_below_its_roofline_beats_nothing(here):
    assert here.beaten_by(turn()) == []


def test_decode_above_its_binding_ceiling_is_said_with_both_rates(here):
    mt = turn()
    bw, comp = here.ceilings(mt.prompt_tokens + mt.decode_tokens // 2)
    roof = min(bw, comp)
    assert here.beaten_by(replace(mt, decode_tok_s=roof * BEATEN * 0.999)) == []  # within the margin
    (said,) = here.beaten_by(replace(mt, decode_tok_s=roof * 1.5))
    assert said.startswith("decode ") and said.endswith(" ceiling") and "beat its" in said


def test_prefill_above_its_roofline_counts_from_64_tokens(here):
    pre = here.predict(300, 1, 0).prefill_tok_s
    (said,) = here.beaten_by(turn(prefill_tok_s=pre * 1.5))
    assert said.startswith("prefill ") and said.endswith(" roofline")
    short = here.predict(63, 1, 0).prefill_tok_s
    assert here.beaten_by(turn(prompt_tokens=63, prefill_tokens=63, prefill_tok_s=short * 3)) == []


# ------------------------------------------------------------ a server's slots
def test_no_slots_no_figures(here):
    assert server_physics(here, ()) == (None, None, None)


def test_the_batched_ceiling_reads_the_weights_once_and_each_decoding_slots_kv(facts, here):
    slots = (slot(0, 1000, True), slot(1, 3000, True), slot(2, 500, False), slot(3, 0, False))
    ceiling, fit, avg = server_physics(here, slots)
    kv = [float(kv_bytes_read_at_depth(here.layout, d)) for d in (1000, 3000)]
    assert ceiling == batched_decode_ceiling(FIXED_HW.bandwidth_gbs * 1e9, facts.weights_bytes_active, kv,
                                             compute_tok_s(facts, FIXED_HW.tflops))
    assert ceiling.slots == 2
    assert avg == 1500 and fit == (4 * 4096 - 4500) // 1500


def test_idle_slots_price_one_user_at_depth_zero(facts, here):
    ceiling, fit, avg = server_physics(here, (slot(0, 0, False), slot(1, 0, False)))
    assert ceiling.slots == 1 and ceiling.step_bytes == facts.weights_bytes_active + kv_bytes_read_at_depth(
        here.layout, 0)
    assert fit is None and avg is None  # no conversation yet: no average to fit


def test_without_the_physics_the_slots_still_say_what_fits(here):
    slots = (slot(0, 1000, True), slot(1, 0, False))
    assert server_physics(None, slots) == (None, (2 * 4096 - 1000) // 1000, 1000)
    no_bandwidth = here.with_hardware(replace(FIXED_HW, bandwidth_gbs=None))
    assert server_physics(no_bandwidth, slots)[0] is None


# ------------------------------------------------------------ the CPU's share
def test_the_cpu_computes_what_no_gpu_takes(facts):
    gpu = SimpleNamespace(gpus=(object(),))
    n = facts.n_layers
    assert cpu_share(facts, FIXED_HW, 999) == 1.0  # no GPU: all of it
    assert cpu_share(None, gpu, 10) == 1.0  # no facts: nothing to divide
    assert cpu_share(facts, gpu, -1) == 0.0 and cpu_share(facts, gpu, n + 5) == 0.0
    assert cpu_share(facts, gpu, n // 2) == pytest.approx(1.0 - (n // 2) / n)


def test_a_speculative_turn_beats_the_one_token_ceiling_without_a_reprobe(here):
    """issue 36: 3.4 tokens a pass decode above the plain ceiling by design; a turn is
    held to the speculative roof at its own acceptance and drafts, not to one token a step."""
    mt = turn()
    depth = mt.prompt_tokens + mt.decode_tokens // 2
    bw, comp = here.ceilings(depth)
    fast = replace(mt, decode_tok_s=min(bw, comp) * 1.5, spec_type="ngram-simple", spec_drafted=48,
                   spec_accepted=36, spec_passes=15)
    assert here.beaten_by(fast) == []
    (said,) = here.beaten_by(replace(fast, decode_tok_s=min(bw, comp) * 50))  # past even that roof
    assert "beat its" in said
    # a speculating server's turn: drafted and accepted, but no passes to price its roof by
    server = replace(mt, decode_tok_s=min(bw, comp) * 3, spec_type="llama-server", spec_drafted=48, spec_accepted=36)
    assert here.beaten_by(server) == []
