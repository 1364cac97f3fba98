"""The batched ceiling with speculation (issue 36, item 6): every decoding slot verifies
its draft plus one token in one pass, which reads the weights and each slot's KV once."""

import pytest

from kvtop.runner.physics.batching import BatchCeiling, speculative_batched_ceiling


def plain_ceiling() -> BatchCeiling:
    # 4 slots, a step reads 100 MB; at 10 GB/s: 100 steps a second, 400 tok/s in all
    return BatchCeiling(4, 100e6, 400.0, 100.0)


def test_a_bandwidth_bound_pass_yields_its_tokens_per_pass_for_every_slot():
    sc = speculative_batched_ceiling(plain_ceiling(), 10e9, None, lambda n: None, draft=3.0, tokens_per_pass=2.5)
    assert sc is not None and sc.bound == "bandwidth" and sc.draft == 3
    assert sc.pass_s == pytest.approx(0.01)  # the same reads as a plain step
    assert sc.aggregate_tok_s == pytest.approx(4 * 2.5 / 0.01)  # 1,000 tok/s
    assert sc.over_plain(plain_ceiling()) == pytest.approx(2.5)


def test_the_batchs_flops_can_make_the_pass_compute_bound_and_the_roof_lower_than_plain():
    # 1 GFLOP a token at 1 TFLOPS for a batch of 16 (4 slots x (3 + 1)): 16 ms > 10 ms of reads
    sc = speculative_batched_ceiling(plain_ceiling(), 10e9, 1e9, lambda n: 1.0 if n == 16 else None,
                                     draft=3.0, tokens_per_pass=2.5)
    assert sc.bound == "compute" and sc.pass_s == pytest.approx(0.016)
    assert sc.aggregate_tok_s == pytest.approx(10 / 0.016)
    low = speculative_batched_ceiling(plain_ceiling(), 10e9, 1e9, lambda n: 0.1, draft=3.0, tokens_per_pass=1.1)
    assert low.over_plain(plain_ceiling()) < 1  # few accepted, a costly pass: speculation lowers the roof


def test_no_pass_no_roof():
    from kvtop.runner.physics.here import speculative_server_ceiling

    assert speculative_server_ceiling(None, plain_ceiling(), 10, 2, 5) is None
    assert speculative_batched_ceiling(plain_ceiling(), 0.0, None, lambda n: None, 3.0, 2.0) is None
