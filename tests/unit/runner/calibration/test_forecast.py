"""The calibration's arithmetic: fits, samples from a turn, the store on disk, and a
forecast that reproduces a machine it has seen once."""

import json
import os

import pytest

from kvtop.runner.calibration.fit import fit_scale
from kvtop.runner.calibration.forecast import Basis, Forecaster
from kvtop.runner.calibration.samples import samples_from_turn
from kvtop.runner.calibration.store import MAX_PREFILL, VERSION, Samples, load_samples, save_samples
from kvtop.runner.events import TurnMetrics

# A roofline shape: 1 ms per prompt token plus attention growing with depth; decode
# 5 ms per token plus 1 us per position of depth.
ROOF = Basis(lambda n, d: n * (1e-3 + 1e-7 * (d + n / 2)), lambda d: 5e-3 + 1e-6 * d, 512)


def machine_prefill(n: int, d: int) -> float:
    """The "real" machine: 1.8x the roofline plus 20 ms per micro-batch."""
    return 1.8 * ROOF.prefill_s(n, d) + 0.020


def machine_token(d: int) -> float:
    return 1.3 * ROOF.token_s(d)


def metrics(prompt: int, reused: int = 0, reply: int = 64, overhead: float = 0.015) -> TurnMetrics:
    ubatches, depth = [], reused
    while depth < prompt:
        n = min(512, prompt - depth)
        ubatches.append((n, machine_prefill(n, depth)))
        depth += n
    prefill_s = sum(s for _, s in ubatches)
    decode_s = sum(machine_token(prompt + i) for i in range(reply - 1))
    return TurnMetrics(prompt_tokens=prompt, reused_tokens=reused, prefill_tokens=prompt - reused,
                       prefill_s=prefill_s, prefill_tok_s=(prompt - reused) / prefill_s, template_s=0.002,
                       tokenize_s=0.001, wait_s=0.5, ttft_s=0.5 + prefill_s + overhead, decode_tokens=reply,
                       decode_s=decode_s, decode_tok_s=(reply - 1) / decode_s, itl_p50_ms=None, itl_p95_ms=None,
                       kv_cells_used=prompt + reply, n_ctx=8192, ubatches=tuple(ubatches))


def test_one_sample_is_a_ratio_through_the_origin():
    f = fit_scale([(2.0, 3.0)])
    assert (f.k, f.c, f.n) == (1.5, 0.0, 1)


def test_samples_of_several_sizes_fit_the_fixed_cost_too():
    f = fit_scale([(x, 2 * x + 0.05) for x in (0.1, 0.3, 0.9, 2.0)])
    assert f.k == pytest.approx(2.0) and f.c == pytest.approx(0.05)


def test_nonsense_samples_are_ignored_and_a_negative_intercept_is_refused():
    assert fit_scale([(0.0, 1.0), (float("nan"), 1.0), (1.0, -2.0)]) is None
    f = fit_scale([(1.0, 0.5), (2.0, 1.6), (4.0, 3.9)])  # the line through them would cut below 0
    assert f.c == 0.0 and f.k == pytest.approx(0.8, abs=0.05)


def test_a_turns_samples_follow_its_micro_batches_and_leave_out_the_wait():
    s = samples_from_turn(metrics(1300, reused=100))
    assert [(n, d) for n, d, *_ in s.prefill] == [(512, 100), (512, 612), (176, 1124)]
    assert s.decode == [(63, 1300 + 32, pytest.approx(s.decode[0][2]), None, 0)]  # load not seen, engine's threads
    assert s.overhead == [pytest.approx(0.015)] and s.turns == 1


def test_one_calibrating_turn_forecasts_other_lengths_within_a_few_percent():
    samples = samples_from_turn(metrics(1024))
    fc = Forecaster(ROOF, samples)
    for prompt in (128, 512, 1536, 3000):
        m = metrics(prompt)
        got = fc.forecast(prompt, 0, 64)
        measured_ttft = m.ttft_s - m.wait_s
        assert got.basis == "calibrated" and got.n_turns == 1
        assert got.ttft_s / measured_ttft == pytest.approx(1.0, abs=0.08), prompt
        assert got.decode_tok_s / m.decode_tok_s == pytest.approx(1.0, abs=0.05), prompt


def test_without_samples_the_forecast_is_the_roofline_and_says_so():
    fc = Forecaster(ROOF, Samples()).forecast(1000, 0, 10)
    assert fc.basis == "roofline" and fc.label() == "roofline (not calibrated yet)"
    assert fc.prefill_s == pytest.approx(ROOF.prefill_s(512, 0) + ROOF.prefill_s(488, 512))


def test_cached_tokens_are_not_forecast_and_the_last_token_always_is():
    fc = Forecaster(ROOF, samples_from_turn(metrics(1024)))
    assert fc.forecast(2000, 1500, 8).prefill_s < fc.forecast(2000, 0, 8).prefill_s / 3
    every = fc.forecast(300, 300, 8)
    assert every.cached_tokens == 299 and every.new_tokens == 1 and every.prefill_s > 0


def test_the_store_is_bounded_versioned_and_survives_garbage(tmp_path):
    path = str(tmp_path / "c" / "x.json")
    s = Samples()
    for prompt in range(4000, 4040):  # 40 turns of 8 micro-batches: more than the store keeps
        s.add(samples_from_turn(metrics(prompt)))
    save_samples(path, {"model": "m"}, s)
    back = load_samples(path)
    assert len(back.prefill) == MAX_PREFILL and back.turns == 40 and back.prefill == s.prefill
    assert back.prefill[-1][:2] == (4039 - 3584, 3584)  # the newest are kept
    assert json.load(open(path))["version"] == VERSION
    for junk in (b"", b"{", b"[]", json.dumps({"version": VERSION + 1, "prefill": [[1, 0, 1.0]]}).encode(),
                 json.dumps({"version": VERSION, "prefill": [[1, 0, "x"], [-5, 0, 1.0], [3, 0, 1e300],
                                                             [512, 0, 0.5]], "turns": "many"}).encode()):
        with open(path, "wb") as fh:
            fh.write(junk)
        got = load_samples(path)
        assert got.prefill in ([], [(512, 0, 0.5)]) and got.turns == 0
    os.remove(path)
    assert load_samples(path).empty()  # deleting it is safe: the next turn starts again


def test_one_turn_on_a_busy_machine_does_not_move_the_fit():
    pts = [(x, 2 * x + 0.05) for x in (0.1, 0.2, 0.4, 0.8, 1.6)] + [(0.4, 9.0)]  # one turn 10x slow
    f = fit_scale(pts)
    assert f.k == pytest.approx(2.0, rel=0.02) and f.c == pytest.approx(0.05, abs=0.01)


def test_short_follow_ups_keep_the_fixed_cost_once_attention_is_fitted_apart():
    """A new user's short follow-ups (18-25 new tokens after a cached prefix) came out
    30-40% short: the two-efficiency fit had dropped the per-micro-batch fixed cost."""
    from kvtop.runner.calibration.fit import fit_split

    def machine(m, a):  # matrices at 1.5x their roofline, attention at 6x, 30 ms per micro-batch
        return 1.5 * m + 6 * a + 0.030

    samples = [(m, a, machine(m, a)) for m, a in ((0.02, 0.001), (0.05, 0.01), (0.2, 0.02), (0.4, 0.2), (0.1, 0.08))]
    whole = fit_scale([(m + a, y) for m, a, y in samples])
    split = fit_split(samples, whole)
    assert split is not None and split.c > 0.02
    short = (0.004, 0.003)  # an 18-token follow-up at depth 300
    assert split.seconds(*short) / machine(*short) == pytest.approx(1.0, abs=0.25)


def calibrating_turn(ubatches, token):
    """One turn of 1,024 prompt tokens in two micro-batches (``ubatches``: (tokens,
    seconds)), then 64 decoded at ``token(depth)`` seconds each."""
    decode_s = sum(token(1024 + i) for i in range(63))
    return TurnMetrics(prompt_tokens=1024, reused_tokens=0, prefill_tokens=1024, prefill_s=sum(s for _, s in ubatches),
                       prefill_tok_s=None, template_s=0.0, tokenize_s=0.0, wait_s=0.0,
                       ttft_s=sum(s for _, s in ubatches), decode_tokens=64, decode_s=decode_s,
                       decode_tok_s=63 / decode_s, itl_p50_ms=None, itl_p95_ms=None, kv_cells_used=1088, n_ctx=8192,
                       ubatches=tuple(ubatches))


def test_decode_attention_is_priced_at_the_efficiency_prefill_measured():
    """Gemma-3 270M decoded 25% slower at depth 3,000 than at 1,000 while its bytes grew
    3%: without flash attention a CPU's attention runs far below the roofline, in
    decode as in prefill. One calibrating turn forecasts decode at depth within a few %."""
    def attention(n, d):
        return 1e-7 * n * (d + n / 2)

    basis = Basis(lambda n, d: n * 1e-3 + attention(n, d), lambda d: 5e-3 + 1e-8 * d, 512,
                  lambda n, d: attention(n, d) / (n * 1e-3 + attention(n, d)))

    def token(d):  # bandwidth at 1.3x its roofline, attention at 20x
        return 1.3 * basis.token_s(d) + 20 * attention(1, d)

    ubatches = [(512, 1.5 * 0.512 + 20 * attention(512, 0)), (512, 1.5 * 0.512 + 20 * attention(512, 512))]
    m = calibrating_turn(ubatches, token)
    fc = Forecaster(basis, samples_from_turn(m))
    assert fc.decode_attention_k == pytest.approx(20, rel=0.01)
    for depth in (200, 1056, 3032):
        assert fc.token_seconds(depth) / token(depth) == pytest.approx(1.0, abs=0.02), depth


def test_decode_attention_is_priced_at_the_pace_the_probe_measured_for_it():
    """One query over the cache, a head long, runs several times further below the peak
    than prefill's 512 queries: priced at prefill's efficiency, SmolLM2's decode forecast
    was 0.57x measured at depth 50 and 1.12x at 3,000. Where the probe timed it, one
    calibrating turn forecasts decode at every depth within a few %."""
    def attention(n, d):
        return 1e-7 * n * (d + n / 2)

    def decode_attention(d):  # the probe's pace: 5x the roofline's attention, where prefill ran at 1.5x
        return 5 * attention(1, d)

    basis = Basis(lambda n, d: n * 1e-3 + attention(n, d), lambda d: 5e-3 + 1e-8 * d, 512,
                  lambda n, d: attention(n, d) / (n * 1e-3 + attention(n, d)), None, decode_attention)

    def token(d):  # bandwidth at 1.3x its roofline, attention at the probe's pace
        return 1.3 * basis.token_s(d) + decode_attention(d)

    ubatches = [(512, 1.5 * (0.512 + attention(512, 0))), (512, 1.5 * (0.512 + attention(512, 512)))]
    m = calibrating_turn(ubatches, token)
    fc = Forecaster(basis, samples_from_turn(m))
    assert fc.decode_attention_k == 1.0
    for depth in (48, 200, 1056, 3032):
        assert fc.token_seconds(depth) / token(depth) == pytest.approx(1.0, abs=0.02), depth
    # priced at prefill's efficiency instead (no probe figure), the depth slope is off
    old = Forecaster(Basis(basis.prefill_s, basis.token_s, 512, basis.attention_share), samples_from_turn(m))
    assert abs(old.token_seconds(48) / token(48) - 1.0) > 0.05
