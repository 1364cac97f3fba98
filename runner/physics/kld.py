"""KL divergence of a candidate (a quantized KV cache, another weights file) from a base,
by llama-perplexity's formulas and chunking (tools/perplexity/perplexity.cpp in the
vendored llama.cpp, ``kl_divergence`` and ``perplexity``).

Chunking: the text is tokenized with the special tokens (BOS when the vocabulary adds
one), cut into ``len(tokens) // n_ctx`` chunks of ``n_ctx`` tokens (at most ``--chunks``);
the first token of each chunk is replaced by BOS when the vocabulary adds one; the
logits at positions ``n_ctx // 2`` .. ``n_ctx - 2`` are scored against the token after
them (the second half of each chunk, ``n_ctx - 1 - n_ctx // 2`` values a chunk). The
text must give at least ``2 * n_ctx`` tokens, as llama-perplexity requires.

Per scored position, with ``p`` the base's softmax and ``q`` the candidate's:
KLD = sum_i p_i (ln p_i - ln q_i); Δp = q(next) - p(next); "same top" when both argmax
agree; and both negative log-likelihoods, for ln(PPL(Q)/PPL(base)) and its uncertainty
(the covariance term included). Means and uncertainties are llama-perplexity's
``mean_and_uncertainty`` and ``covariance``; percentiles its linear interpolation.

One difference, on purpose: llama-perplexity stores the base's log-probabilities in 16
bits (the range [max - 16, max] in 65,535 steps) and leaves out of the sum the tokens
whose base log-probability is at most -16. Here the base's logits are used as computed,
over the whole vocabulary, so f16 against f16 gives exactly 0 where llama-perplexity
reports a small floor (its 16-bit rounding).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

Floats = npt.NDArray[np.floating[Any]]
Ints = npt.NDArray[np.integer[Any]]

KLD_PERCENTILES = (("max", 1.0), ("99.9%", 0.999), ("99.0%", 0.99), ("95.0%", 0.95), ("90.0%", 0.90),
                   ("median", 0.5), ("10.0%", 0.10), ("5.0%", 0.05), ("1.0%", 0.01), ("0.1%", 0.001), ("min", 0.0))
DP_PERCENTILES = (("max", 1.0), ("99.9%", 0.999), ("99.0%", 0.99), ("95.0%", 0.95), ("90.0%", 0.90),
                  ("75.0%", 0.75), ("median", 0.5), ("25.0%", 0.25), ("10.0%", 0.10), ("5.0%", 0.05),
                  ("1.0%", 0.01), ("0.1%", 0.001), ("min", 0.0))
_BLOCK_VALUES = 1 << 22  # logits per row block (16 MiB a float32 copy)


class TooShort(ValueError):
    """The text gives fewer than two chunks of tokens."""


def n_chunks(n_tokens: int, n_ctx: int, wanted: int = -1) -> int:
    """Chunks llama-perplexity scores: ``n_tokens // n_ctx``, at most ``wanted`` (< 0: all);
    ``TooShort`` below ``2 * n_ctx`` tokens, saying the minimum."""
    if n_ctx < 4:
        raise ValueError(f"-c must be at least 4 (got {n_ctx})")
    if n_tokens < 2 * n_ctx:
        raise TooShort(f"the text gives {n_tokens:,} tokens; -c {n_ctx} needs at least {2 * n_ctx:,} "
                       f"(two chunks of {n_ctx}): give a longer text or a smaller -c")
    most = n_tokens // n_ctx
    return most if wanted < 0 else min(wanted, most)


def chunk_tokens(tokens: list[int], i: int, n_ctx: int, bos: int | None) -> list[int]:
    """Chunk ``i`` as llama-perplexity decodes it: its first token BOS when ``bos`` is given."""
    out = tokens[i * n_ctx:(i + 1) * n_ctx]
    if bos is not None:
        out[0] = bos
    return out


def first_scored(n_ctx: int) -> int:
    return n_ctx // 2


def scored_per_chunk(n_ctx: int) -> int:
    return n_ctx - 1 - n_ctx // 2


def log_softmax(logits: Floats) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """Rows of logits as (log-probabilities, probabilities), in float32 with the row sums
    in float64: one exponential per value (the float64 copies and a second exponential
    took half of ``kvtop kld``'s time beside llama_decode)."""
    x = np.asarray(logits, dtype=np.float32) - logits.max(axis=1, keepdims=True).astype(np.float32)
    e = np.exp(x)
    total = e.sum(axis=1, keepdims=True, dtype=np.float64)
    x -= np.log(total).astype(np.float32)
    e /= total.astype(np.float32)
    return x, e


def mean_and_uncertainty(total: float, total2: float, count: int) -> tuple[float, float]:
    """llama-perplexity's: the mean, and the standard error (0 with 10 values or fewer)."""
    if count < 1:
        return 0.0, 0.0
    f = total / count
    df = total2 / count - f * f
    return f, math.sqrt(df / (count - 1)) if df > 0 and count > 10 else 0.0


def covariance(suma: float, sumb: float, sumab: float, count: int) -> float:
    if count < 10:
        return 0.0
    return (sumab / count - (suma / count) * (sumb / count)) / (count - 1)


def percentile(sorted_values: Floats, fraction: float) -> float:
    """llama-perplexity's ``percentile``: linear between the two nearest sorted values."""
    if fraction <= 0:
        return float(sorted_values[0])
    if fraction >= 1:
        return float(sorted_values[-1])
    p = fraction * (len(sorted_values) - 1)
    ip = int(p)
    p -= ip
    return float((1 - p) * sorted_values[ip] + p * sorted_values[min(ip + 1, len(sorted_values) - 1)])


def median(sorted_values: Floats) -> float:
    n = len(sorted_values)
    if n % 2 == 0:
        return float(0.5 * (sorted_values[n // 2] + sorted_values[n // 2 - 1]))
    return float(sorted_values[n // 2])


class NonFinite(ValueError):
    """A row of logits holds NaN or infinity; ``row`` is its index in the rows given."""

    def __init__(self, which: str, row: int) -> None:
        super().__init__(f"{which} logits are not finite")
        self.which, self.row = which, row


@dataclass
class Sums:
    """llama-perplexity's ``kl_divergence_result``, and the per-position values."""

    nll: float = 0.0
    nll2: float = 0.0
    nll_base: float = 0.0
    nll_base2: float = 0.0
    nll_nll_base: float = 0.0
    kld: float = 0.0
    kld2: float = 0.0
    p_diff: float = 0.0
    p_diff2: float = 0.0
    p_diff4: float = 0.0
    same_top: int = 0
    count: int = 0
    kld_values: list[Floats] = field(default_factory=list)
    p_diff_values: list[Floats] = field(default_factory=list)

    def add(self, base: Floats, cand: Floats, targets: Ints) -> None:
        """Score rows of base and candidate logits (same shape) against the next tokens;
        ``NonFinite`` (nothing added) when a row of either is not finite."""
        if base.shape != cand.shape or base.shape[0] != len(targets):
            raise ValueError(f"shapes differ: base {base.shape}, candidate {cand.shape}, {len(targets)} targets")
        for which, rows in (("base", base), ("candidate", cand)):
            bad = ~np.isfinite(rows).all(axis=1)
            if bad.any():
                raise NonFinite(which, int(np.argmax(bad)))
        step = max(1, _BLOCK_VALUES // max(1, base.shape[1]))
        for s in range(0, base.shape[0], step):
            self._add_block(base[s:s + step], cand[s:s + step], targets[s:s + step])

    def _add_block(self, base: Floats, cand: Floats, targets: Ints) -> None:
        (lb, pb), (lq, pq) = log_softmax(base), log_softmax(cand)
        rows = np.arange(len(targets))
        # never below 0, as KL divergence is: float32 values leave a rounding of about 1e-8,
        # and a position whose predictions hardly moved read -7e-9
        kld = np.maximum((pb * (lb - lq)).sum(axis=1, dtype=np.float64), 0.0)
        nll, nll_base = -lq[rows, targets].astype(np.float64), -lb[rows, targets].astype(np.float64)
        p_diff = pq[rows, targets].astype(np.float64) - pb[rows, targets].astype(np.float64)
        self.nll += float(nll.sum())
        self.nll2 += float((nll * nll).sum())
        self.nll_base += float(nll_base.sum())
        self.nll_base2 += float((nll_base * nll_base).sum())
        self.nll_nll_base += float((nll * nll_base).sum())
        self.kld += float(kld.sum())
        self.kld2 += float((kld * kld).sum())
        self.p_diff += float(p_diff.sum())
        self.p_diff2 += float((p_diff * p_diff).sum())
        self.p_diff4 += float((p_diff ** 4).sum())
        self.same_top += int((np.argmax(cand, axis=1) == np.argmax(base, axis=1)).sum())
        self.count += len(targets)
        self.kld_values.append(kld.astype(np.float32))
        self.p_diff_values.append(p_diff.astype(np.float32))

    def stats(self, *, chunks: int, partial: bool = False) -> KldStats:
        return KldStats.from_sums(self, chunks=chunks, partial=partial)


@dataclass(frozen=True)
class KldStats:
    """What llama-perplexity's KL-divergence run prints, as numbers (Δp as fractions)."""

    count: int  # positions scored
    chunks: int
    partial: bool  # stopped before the last chunk
    ppl_q: float
    ppl_q_unc: float
    ppl_base: float
    ppl_base_unc: float
    ln_ppl_ratio: float
    ln_ppl_ratio_unc: float
    cor_ln_ppl: float  # correlation of the two ln(PPL), llama's "Cor(ln(PPL(Q)), ln(PPL(base)))"
    kld_mean: float
    kld_unc: float
    kld_percentiles: dict[str, float]
    p_diff_mean: float
    p_diff_unc: float
    p_diff_percentiles: dict[str, float]
    rms_p_diff: float
    rms_p_diff_unc: float
    same_top: float
    same_top_unc: float

    @classmethod
    def from_sums(cls, s: Sums, *, chunks: int, partial: bool = False) -> KldStats:
        n = s.count
        log_ppl = mean_and_uncertainty(s.nll, s.nll2, n)
        log_base = mean_and_uncertainty(s.nll_base, s.nll_base2, n)
        cov = covariance(s.nll, s.nll_base, s.nll_nll_base, n)
        ratio_var = log_ppl[1] ** 2 + log_base[1] ** 2 - 2.0 * cov
        denom = log_ppl[1] * log_base[1]
        kld = mean_and_uncertainty(s.kld, s.kld2, n)
        p_diff = mean_and_uncertainty(s.p_diff, s.p_diff2, n)
        mse = mean_and_uncertainty(s.p_diff2, s.p_diff4, n)
        rms = math.sqrt(mse[0])
        top = s.same_top / n if n else 0.0
        kv = np.sort(np.concatenate(s.kld_values)) if s.kld_values else np.zeros(1, np.float32)
        pv = np.sort(np.concatenate(s.p_diff_values)) if s.p_diff_values else np.zeros(1, np.float32)

        def table(values: Floats, points: tuple[tuple[str, float], ...]) -> dict[str, float]:
            return {name: median(values) if name == "median" else percentile(values, f) for name, f in points}

        return cls(
            count=n, chunks=chunks, partial=partial,
            ppl_q=math.exp(log_ppl[0]), ppl_q_unc=math.exp(log_ppl[0]) * log_ppl[1],
            ppl_base=math.exp(log_base[0]), ppl_base_unc=math.exp(log_base[0]) * log_base[1],
            ln_ppl_ratio=log_ppl[0] - log_base[0], ln_ppl_ratio_unc=math.sqrt(max(ratio_var, 0.0)),
            cor_ln_ppl=cov / denom if denom > 0 else 0.0,
            kld_mean=kld[0], kld_unc=kld[1], kld_percentiles=table(kv, KLD_PERCENTILES),
            p_diff_mean=p_diff[0], p_diff_unc=p_diff[1], p_diff_percentiles=table(pv, DP_PERCENTILES),
            rms_p_diff=rms, rms_p_diff_unc=0.5 / rms * mse[1] if rms > 0 else 0.0,
            same_top=top, same_top_unc=math.sqrt(top * (1 - top) / (n - 1)) if n > 1 else 0.0,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
