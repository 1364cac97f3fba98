"""runner/physics/kld.py against llama-perplexity's formulas, written out again here the slow
way (one position at a time, plain Python, as tools/perplexity/perplexity.cpp loops)."""

import math

import numpy as np
import pytest

from kvtop.runner.physics.kld import (
    KldStats,
    NonFinite,
    Sums,
    TooShort,
    chunk_tokens,
    covariance,
    first_scored,
    mean_and_uncertainty,
    median,
    n_chunks,
    percentile,
    scored_per_chunk,
)


def slow_position(base_row, cand_row, tok):
    """One position as perplexity.cpp's log_softmax(..., kl_divergence_result&) scores it,
    with the base's log-probabilities exact (not 16-bit)."""
    mb = max(base_row)
    lb = [x - mb - math.log(sum(math.exp(y - mb) for y in base_row)) for x in base_row]
    mq = max(cand_row)
    lq = [x - mq - math.log(sum(math.exp(y - mq) for y in cand_row)) for x in cand_row]
    kld = sum(math.exp(b) * (b - q) for b, q in zip(lb, lq))
    nll, nll_base = -lq[tok], -lb[tok]
    same = cand_row.index(max(cand_row)) == base_row.index(max(base_row))
    return kld, nll, nll_base, math.exp(-nll) - math.exp(-nll_base), same


def slow_stats(base, cand, targets):
    rows = [slow_position(list(map(float, b)), list(map(float, c)), int(t)) for b, c, t in zip(base, cand, targets)]
    n = len(rows)
    kl = [r[0] for r in rows]
    nll = [r[1] for r in rows]
    nb = [r[2] for r in rows]
    dp = [r[3] for r in rows]

    def mu(xs):
        f = sum(xs) / n
        df = sum(x * x for x in xs) / n - f * f
        return f, (math.sqrt(df / (n - 1)) if df > 0 and n > 10 else 0.0)

    cov = (sum(a * b for a, b in zip(nll, nb)) / n - (sum(nll) / n) * (sum(nb) / n)) / (n - 1)
    lp, lb = mu(nll), mu(nb)
    mse = mu([d * d for d in dp])
    return {"kld": mu(kl), "ln_ratio": (lp[0] - lb[0], math.sqrt(lp[1] ** 2 + lb[1] ** 2 - 2 * cov)),
            "p_diff": mu(dp), "rms": math.sqrt(mse[0]), "same": sum(r[4] for r in rows) / n,
            "ppl_q": math.exp(lp[0]), "ppl_base": math.exp(lb[0]), "kl_values": sorted(kl)}


@pytest.fixture
def logits():
    rng = np.random.default_rng(7)
    base = rng.normal(0, 3, size=(40, 23)).astype(np.float32)
    cand = (base + rng.normal(0, 0.4, size=base.shape)).astype(np.float32)
    targets = rng.integers(0, 23, size=40)
    return base, cand, targets


def test_the_statistics_are_llama_perplexitys_formulas(logits):
    base, cand, targets = logits
    s = Sums()
    s.add(base[:15], cand[:15], targets[:15])  # in two calls, as two slices of a chunk
    s.add(base[15:], cand[15:], targets[15:])
    st = s.stats(chunks=2)
    want = slow_stats(base, cand, targets)
    # the reference is float64 throughout; kvtop takes each value in float32 and its sums in
    # float64, as perplexity.cpp does (float logits, double sums): agreement to about 1e-7
    assert st.count == 40 and not st.partial
    assert st.kld_mean == pytest.approx(want["kld"][0], rel=1e-6) and st.kld_unc == pytest.approx(want["kld"][1], rel=1e-6)
    assert st.ln_ppl_ratio == pytest.approx(want["ln_ratio"][0], abs=1e-7)
    assert st.ln_ppl_ratio_unc == pytest.approx(want["ln_ratio"][1], rel=1e-6)
    assert st.p_diff_mean == pytest.approx(want["p_diff"][0], abs=1e-7)
    assert st.rms_p_diff == pytest.approx(want["rms"], rel=1e-6)
    assert st.same_top == want["same"] and 0 < st.same_top < 1
    assert st.same_top_unc == pytest.approx(math.sqrt(st.same_top * (1 - st.same_top) / 39))
    assert st.ppl_q == pytest.approx(want["ppl_q"]) and st.ppl_base == pytest.approx(want["ppl_base"])
    kl = want["kl_values"]
    assert st.kld_percentiles["max"] == pytest.approx(kl[-1], rel=1e-6)
    assert st.kld_percentiles["min"] == pytest.approx(kl[0], rel=1e-6, abs=1e-8)
    assert st.kld_percentiles["median"] == pytest.approx(0.5 * (kl[19] + kl[20]), rel=1e-6, abs=1e-8)
    p = 0.9 * 39  # perplexity.cpp's percentile: linear between the two nearest
    assert st.kld_percentiles["90.0%"] == pytest.approx((1 - (p - 35)) * kl[35] + (p - 35) * kl[36], rel=1e-6)
    assert list(st.kld_percentiles) == ["max", "99.9%", "99.0%", "95.0%", "90.0%", "median", "10.0%", "5.0%",
                                        "1.0%", "0.1%", "min"]
    assert "75.0%" in st.p_diff_percentiles and "25.0%" in st.p_diff_percentiles


def test_identical_logits_give_zero_divergence_and_every_top_token_the_same(logits):
    base, _, targets = logits
    st = Sums()
    st.add(base, base.copy(), targets)
    out = st.stats(chunks=1)
    assert out.kld_mean == 0.0 and out.kld_percentiles["max"] == 0.0 and out.same_top == 1.0
    assert out.ln_ppl_ratio == 0.0 and out.rms_p_diff == 0.0 and out.p_diff_percentiles["min"] == 0.0


def test_a_two_token_case_by_hand():
    # base p = (0.5, 0.5), candidate q = (0.8, 0.2): KLD = 0.5 ln(0.5/0.8) + 0.5 ln(0.5/0.2)
    base = np.array([[0.0, 0.0]], np.float32)
    cand = np.array([[math.log(0.8), math.log(0.2)]], np.float32)
    s = Sums()
    s.add(base, cand, np.array([1]))
    st = s.stats(chunks=1)
    assert st.kld_mean == pytest.approx(0.5 * math.log(0.5 / 0.8) + 0.5 * math.log(0.5 / 0.2), rel=1e-6)
    assert st.p_diff_mean == pytest.approx(0.2 - 0.5, rel=1e-6)  # q(next) - p(next)
    assert st.same_top == 1.0  # both argmax at 0 (the first of a tie, as perplexity.cpp's loop)


def test_non_finite_logits_name_the_row_and_add_nothing(logits):
    base, cand, targets = logits
    cand = cand.copy()
    cand[7, 3] = np.nan
    s = Sums()
    with pytest.raises(NonFinite) as e:
        s.add(base, cand, targets)
    assert e.value.which == "candidate" and e.value.row == 7 and s.count == 0
    base = base.copy()
    base[2, 0] = np.inf
    with pytest.raises(NonFinite) as e:
        s.add(base, cand, targets)
    assert e.value.which == "base" and e.value.row == 2


def test_chunking_is_llama_perplexitys():
    assert n_chunks(1024, 512) == 2 and n_chunks(1535, 512) == 2 and n_chunks(5000, 512) == 9
    assert n_chunks(5000, 512, 3) == 3 and n_chunks(5000, 512, 100) == 9
    with pytest.raises(TooShort, match="needs at least 1,024"):
        n_chunks(1023, 512)
    assert first_scored(512) == 256 and scored_per_chunk(512) == 255 and scored_per_chunk(7) == 3
    toks = list(range(10, 30))
    assert chunk_tokens(toks, 1, 8, bos=1) == [1] + list(range(19, 26))
    assert chunk_tokens(toks, 1, 8, bos=None) == list(range(18, 26))
    assert toks[8] == 18  # the text's own tokens are left as they are


def test_mean_uncertainty_and_percentiles_edge_cases():
    assert mean_and_uncertainty(5.0, 30.0, 0) == (0.0, 0.0)
    assert mean_and_uncertainty(10.0, 20.0, 5) == (2.0, 0.0)  # 10 values or fewer: no uncertainty
    assert covariance(1.0, 1.0, 1.0, 9) == 0.0
    v = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    assert percentile(v, 0.0) == 1.0 and percentile(v, 1.0) == 4.0 and percentile(v, 0.5) == pytest.approx(2.5)
    assert median(v) == 2.5 and median(v[:3]) == 2.0


def test_stats_serialise_to_plain_numbers(logits):
    base, cand, targets = logits
    s = Sums()
    s.add(base, cand, targets)
    d = s.stats(chunks=1, partial=True).to_dict()
    assert d["partial"] is True and isinstance(d["kld_mean"], float)
    assert KldStats(**d) == s.stats(chunks=1, partial=True)
