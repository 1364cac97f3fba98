"""The many-users physics, with the reading's numbers (../shared/reading, 001 and 002)."""

import pytest

from kvtop.runner.physics.batching import batched_decode_ceiling, more_conversations_fit
from kvtop.runner.physics.kv_bytes import kv_bytes_simple

H100 = 3.35e12  # bytes/s, as the reading uses
WEIGHTS_8B = 16e9  # 8B parameters at 2 bytes


def test_one_user_without_kv_is_the_readings_209_tokens_per_second():
    c = batched_decode_ceiling(H100, WEIGHTS_8B, [0.0])
    assert c.aggregate_tok_s == pytest.approx(209.4, abs=0.1) and c.per_user_tok_s == c.aggregate_tok_s


def test_batching_shares_the_weights_read_and_each_user_pays_only_their_kv():
    kv_4k = kv_bytes_simple(32, 8, 128, 4000)  # the reading's 0.52 GB per 4,000-token conversation
    assert kv_4k == pytest.approx(0.524e9, rel=0.01)
    one = batched_decode_ceiling(H100, WEIGHTS_8B, [kv_4k])
    eight = batched_decode_ceiling(H100, WEIGHTS_8B, [kv_4k] * 8)
    # one step reads the weights once plus eight caches: 16 + 8 x 0.524 GB
    assert eight.step_bytes == pytest.approx(WEIGHTS_8B + 8 * kv_4k)
    assert eight.aggregate_tok_s == pytest.approx(8 * H100 / (WEIGHTS_8B + 8 * kv_4k))
    assert eight.aggregate_tok_s > 6 * one.aggregate_tok_s  # almost linear while KV is small
    assert eight.per_user_tok_s < one.per_user_tok_s  # but each user is a little slower


def test_batching_shares_reads_not_arithmetic_so_the_compute_ceiling_caps_the_batch():
    """A new user saw "batched ceiling 58 tok/s together" beside "compute ceiling 27.5
    tok/s": every token still costs 2 x params FLOPs, batched or not."""
    compute = 2 * 989e12 / (2 * 8e9)  # an H100's dense FLOPS over an 8B model's FLOPs per token
    one = batched_decode_ceiling(H100, WEIGHTS_8B, [0.0], compute_tok_s=compute)
    assert one.bound == "bandwidth" and one.aggregate_tok_s == pytest.approx(209.4, abs=0.1)
    many = batched_decode_ceiling(H100, WEIGHTS_8B, [0.0] * 1024, compute_tok_s=compute)
    assert many.bound == "compute" and many.aggregate_tok_s == compute  # 214,000 reads allowed, FLOPs not
    assert many.per_user_tok_s == pytest.approx(compute / 1024)
    slow_cpu = batched_decode_ceiling(30e9, 0.09e9, [0.0, 0.0], compute_tok_s=27.5)
    assert slow_cpu.bound == "compute" and slow_cpu.aggregate_tok_s == 27.5 < 2 * 30e9 / 0.09e9


def test_conversations_that_still_fit():
    # 122 conversations of 4,000 tokens fit in 64 GB (the reading): in cells, 488,000 free
    assert more_conversations_fit(500_000, 12_000, 4000) == 122
    assert more_conversations_fit(4096, 4096, 100) == 0
    assert more_conversations_fit(4096, 0, 0) is None
