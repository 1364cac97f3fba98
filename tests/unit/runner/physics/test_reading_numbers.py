"""Every worked number in the three reading texts, reproduced by kvtop's estimate math."""

import pytest

from kvtop.runner.physics.kv_bytes import kv_bytes_simple
from kvtop.runner.physics.roofline import (
    compute_ceiling,
    conversations_that_fit,
    decode_ceiling,
    flops_per_token,
    prefill_seconds,
    response_seconds,
)

KiB, GiB = 1024, 1024**3


def test_toy_cache_from_the_code_sample():
    assert kv_bytes_simple(layers=2, kv_heads=1, head_dim=4, tokens=1) == 32
    assert kv_bytes_simple(layers=2, kv_heads=1, head_dim=4, tokens=3) == 96


@pytest.mark.parametrize("layers,kv_heads,per_token_kib,at_128k_gib", [
    (32, 8, 128, 16),    # Llama 3 8B
    (80, 8, 320, 40),    # Llama 3 70B
    (80, 64, 2560, 320),  # 70B with one KV head per query head
])
def test_llama3_kv_sizes(layers, kv_heads, per_token_kib, at_128k_gib):
    assert kv_bytes_simple(layers, kv_heads, 128, 1) / KiB == per_token_kib
    assert kv_bytes_simple(layers, kv_heads, 128, 128 * 1024) / GiB == at_128k_gib


def test_qwen3_06b_per_token_and_measured_tensor_numbers():
    assert kv_bytes_simple(28, 8, 128, 1) / KiB == 112
    # numbers (not bytes) in K and V at 512 tokens, as measured from the real cache
    assert kv_bytes_simple(28, 8, 128, 512, bytes_per_value=1) == 29_360_128
    # about 4.7 GB at the full 40,960-token context
    assert kv_bytes_simple(28, 8, 128, 40_960) / 1e9 == pytest.approx(4.7, abs=0.05)


def test_flops_and_prefill_of_8b():
    assert flops_per_token(8e9) == 16e9
    assert prefill_seconds(8e9, 4000, 40e12) == pytest.approx(1.6)


def test_decode_limit_of_8b_fp16_on_h100():
    assert decode_ceiling(3.35e12, 8e9 * 2) == pytest.approx(209, abs=0.5)


def test_conversations_that_fit_beside_8b():
    free = 80e9 - 8e9 * 2
    assert conversations_that_fit(free, kv_bytes_simple(32, 8, 128, 4000)) == 122


@pytest.mark.parametrize("bw_gbs,ceiling", [(80, 16), (200, 41), (450, 92), (1000, 204)])
def test_decode_ceiling_table_for_49gb_model(bw_gbs, ceiling):
    assert decode_ceiling(bw_gbs * 1e9, 4.9e9) == pytest.approx(ceiling, abs=0.6)


def test_quiz_500gbs():
    assert decode_ceiling(500e9, 4.9e9) == pytest.approx(102, abs=0.1)


def test_response_time_seed_example():
    assert response_seconds(1.6, 300, 90) == pytest.approx(4.93, abs=0.01)


def test_exercise_14b_on_273gbs_20tflops():
    assert decode_ceiling(273e9, 8.5e9) == pytest.approx(32, abs=0.2)
    assert flops_per_token(14e9) == 28e9
    assert flops_per_token(14e9) * 3000 == pytest.approx(84e12)
    assert prefill_seconds(14e9, 3000, 20e12) == pytest.approx(4.2)
    assert response_seconds(4.5, 200, 24) == pytest.approx(12.8, abs=0.1)


def test_compute_ceiling():
    assert compute_ceiling(40e12, 8e9) == pytest.approx(2500)


def test_small_numbers_example():
    assert decode_ceiling(100e9, 10e9) == 10
