"""The TTFT waterfall and TurnMetrics from hand-made timestamps."""

import pytest

from kvtop.runner.engine.decode import Decoded
from kvtop.runner.engine.prefill import Prefilled
from kvtop.runner.engine.timeline import TOKENS, PromptInfo, TurnClock, percentile, turn_metrics, waterfall


def _turn():
    """Submit at 100.0; template, tokenize, lookup, three ubatches, first token, first char."""
    clock = TurnClock(t_submit=100.0, t_start=100.25, t_lookup=100.5)
    prompt = PromptInfo("chatml", None, 0.1, 0.05, (("template", 100.25, 100.35), ("tokenize", 100.35, 100.4)))
    pf = Prefilled(t_start=100.6, seconds=1.5, done=40, ubatches=[(16, 0.5), (16, 0.5), (8, 0.4)],
                   ubatch_ends=[101.1, 101.6, 102.05], stop=None)
    dec = Decoded(stop="n_predict", n_out=4, pos=44, text=["", "Hi", " there", "!"],
                  token_times=[102.2, 102.3, 102.45, 102.55], t_first_token=102.2, t_first_visible=102.3)
    return clock, prompt, pf, dec


def test_segments_are_contiguous_and_add_up_to_ttft():
    clock, prompt, pf, dec = _turn()
    segs = waterfall(clock, prompt, 3, pf, dec)
    assert [label for label, _, _ in segs] == [
        "wait for engine", "template", "tokenize", "cache lookup (3 reused)", "prefill setup",
        "ubatch 1 (16 tok)", "ubatch 2 (16 tok)", "ubatch 3 (8 tok)", "first decode+sample", "first visible char"]
    assert sum(dt for _, _, dt in segs) == pytest.approx(dec.t_first_visible - clock.t_submit)
    assert segs[0][1] == 0.0
    for (_, s0, d0), (_, s1, _) in zip(segs, segs[1:]):
        assert s0 + d0 == pytest.approx(s1, abs=1e-12)
    assert dict((label, dt) for label, _, dt in segs)["wait for engine"] == pytest.approx(0.25)
    assert dict((label, dt) for label, _, dt in segs)["ubatch 3 (8 tok)"] == pytest.approx(0.45)


def test_a_boundary_before_the_previous_one_is_a_zero_segment():
    clock, prompt, pf, dec = _turn()
    # a mark that ends before the engine started (clocks of two steps overlapping)
    prompt = PromptInfo(marks=(("template", 100.0, 100.1),))
    segs = waterfall(clock, prompt, 0, pf, dec)
    assert segs[1] == ("template", pytest.approx(0.25), 0.0)
    assert sum(dt for _, _, dt in segs) == pytest.approx(dec.t_first_visible - clock.t_submit)


def test_no_visible_character_means_no_waterfall():
    clock, prompt, pf, _ = _turn()
    assert waterfall(clock, prompt, 0, pf, Decoded(stop="cancelled")) == ()


def test_raw_tokens_have_no_template_segments():
    clock, _, pf, dec = _turn()
    labels = [label for label, _, _ in waterfall(clock, TOKENS, 0, pf, dec)]
    assert labels[:3] == ["wait for engine", "cache lookup (0 reused)", "prefill setup"]


def test_percentile_interpolates_between_ranks():
    assert percentile([], 0.5) is None
    assert percentile([7.0], 0.95) == 7.0
    assert percentile([4.0, 1.0, 3.0, 2.0], 0.5) == 2.5
    assert percentile([float(i) for i in range(1, 101)], 0.95) == pytest.approx(95.05)


def test_turn_metrics():
    clock, prompt, pf, dec = _turn()
    m = turn_metrics(clock, prompt, 43, 3, pf, dec, kv_cells_used=46, n_ctx=256, perf={"n_eval": 3})
    assert (m.prompt_tokens, m.reused_tokens, m.prefill_tokens) == (43, 3, 40)
    assert m.prefill_tok_s == pytest.approx(40 / 1.5)
    assert (m.template_s, m.tokenize_s) == (0.1, 0.05)
    assert m.wait_s == pytest.approx(0.25)
    assert m.ttft_s == pytest.approx(2.3)
    assert m.decode_tokens == 4
    assert m.decode_s == pytest.approx(0.35)
    assert m.decode_tok_s == pytest.approx(3 / 0.35)  # gaps between tokens, not tokens
    assert m.itl_p50_ms == pytest.approx(100.0)
    assert m.itl_p95_ms == pytest.approx(100 + 0.9 * 50)
    assert m.first_token_s == pytest.approx(102.2 - 102.1)
    assert m.ubatches == ((16, 0.5), (16, 0.5), (8, 0.4))
    assert (m.kv_cells_used, m.n_ctx, m.perf) == (46, 256, {"n_eval": 3})
    assert m.timeline == waterfall(clock, prompt, 3, pf, dec)


def test_turn_metrics_of_a_turn_cancelled_in_prefill():
    clock, prompt, _, _ = _turn()
    pf = Prefilled(t_start=100.6, seconds=0.0, stop="cancelled")
    m = turn_metrics(clock, prompt, 43, 0, pf, Decoded(stop="cancelled"), 0, 256, {})
    assert m.prefill_tok_s is None and m.ttft_s is None and m.decode_tok_s is None
    assert m.first_token_s is None and m.itl_p50_ms is None and m.timeline == ()
    assert m.decode_s == 0.0 and m.decode_tokens == 0
