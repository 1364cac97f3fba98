"""Which device holds which layer: llama.cpp's rule (src/llama-model.cpp load_tensors,
after ggml-org/llama.cpp#18148 "offload output layer to GPU first", which the pinned
llama-cpp-python vendors), worked by hand for a 32-layer model (issue 12)."""

import pytest

from kvtop.runner.physics.placement import CPU, place_layers, split_points

N = 32  # repeating layers; the output layer is number 32


def gpu_layers(p, device=1):
    return [il for il, d in enumerate(p.layers) if d == device]


def test_no_gpu_or_no_layers_asked_keeps_everything_on_the_cpu():
    for ngl, gpus in ((0, 1), (20, 0), (-1, 0)):
        p = place_layers(N, ngl, gpus)
        assert p.layers == (CPU,) * N and p.output == CPU and p.offloaded == 0


@pytest.mark.parametrize("ngl,first_gpu_layer", [
    (1, None),  # i_gpu_start = 32 + 1 - 1 = 32: only the output layer (number 32)
    (20, 13),  # i_gpu_start = 33 - 20 = 13: layers 13..31 (19) and the output layer
    (32, 1),  # layer 0 stays on the CPU: the output layer took one of the 32
    (33, 0),  # everything
    (999, 0),
    (-1, 0),  # kvtop's "all"
])
def test_the_last_layers_and_the_output_layer_first(ngl, first_gpu_layer):
    p = place_layers(N, ngl, 1)
    assert p.output == 1
    want = list(range(first_gpu_layer, N)) if first_gpu_layer is not None else []
    assert gpu_layers(p) == want
    assert p.offloaded == min(ngl if ngl >= 0 else N + 1, N + 1)


def test_tensor_split_3_1_across_two_gpus():
    """act = 33 layers; layer il goes to the first GPU whose cumulative split (0.75, 1.0)
    exceeds il / 33: il / 33 < 0.75 for il <= 24, so layers 0..24 (25) on GPU 0 and
    layers 25..31 and the output layer (8) on GPU 1."""
    p = place_layers(N, 99, 2, tensor_split=[3, 1])
    assert gpu_layers(p, 1) == list(range(0, 25)) and gpu_layers(p, 2) == list(range(25, 32))
    assert p.output == 2


def test_the_default_split_follows_free_memory():
    assert split_points(2, None, [16 * 2**30, 48 * 2**30]) == [0.25, 1.0]
    p = place_layers(N, 99, 2, gpu_free=[16 * 2**30, 48 * 2**30])
    assert len(gpu_layers(p, 1)) == 9  # il / 33 < 0.25 for il <= 8
    assert split_points(3, None, None) == pytest.approx([1 / 3, 2 / 3, 1.0])


def test_split_mode_none_uses_the_main_gpu_only():
    p = place_layers(N, 99, 2, split_mode="none", main_gpu=1)
    assert gpu_layers(p, 1) == [] and gpu_layers(p, 2) == list(range(N)) and p.output == 2


def test_the_kv_cache_follows_its_layer_unless_no_kv_offload():
    p = place_layers(N, 20, 1)
    assert p.kv_device(31) == 1 and p.kv_device(0) == CPU
    p = place_layers(N, 20, 1, kv_offload=False)
    assert p.kv_device(31) == CPU and p.layers[31] == 1
