"""Partial offload worked by hand: an 8B Q4 model split between a 1 TB/s GPU and 60 GB/s
system memory (issue 12). Decode runs the layers one after another, so a token's time is
the sum over devices of bytes read there / that device's bandwidth."""

import pytest

from kvtop.runner.model.facts import LayerShape, ModelFacts
from kvtop.runner.physics.device_split import decode_seconds, slowest
from kvtop.runner.physics.kv_bytes import kv_layout
from kvtop.runner.physics.offload import OffloadSettings, devices_from_hardware, plan
from kvtop.runner.physics.phase_costs import attention_flops
from kvtop.runner.physics.roofline import predict, predict_split
from kvtop.runner.system.hardware import HardwareProfile

LAYER = 125_000_000  # bytes per layer: 32 x 125 MB = 4.0 GB
OUTPUT = EMBD = 300_000_000  # untied: the output matrix and the embedding table, 0.3 GB each (4.6 GB in all)
LAYER_PARAMS = 218_750_000  # 32 x 218.75 M = 7.0 B matrix weights
OUTPUT_PARAMS = 128_256 * 4_096


def facts_8b() -> ModelFacts:
    return ModelFacts(
        path="8b-q4.gguf", architecture="llama", name="8B Q4", n_layers=32, n_embd=4096, n_vocab=128_256,
        n_ctx_train=8192, layers=[LayerShape("full", 32, 8, 128, 128)] * 32, sliding_window=None,
        kv_lora_rank=None, rope_dim=128, ssm={}, n_experts=None, n_experts_used=None,
        n_params=8_030_000_000, n_params_active=8_030_000_000, weights_bytes=4_600_000_000,
        weights_bytes_active=4_600_000_000, file_type="Q4_K_M", chat_template=None, n_ff=14336,
        embd_bytes=EMBD, output_bytes=OUTPUT, output_params=OUTPUT_PARAMS, output_tied=False,
        layer_bytes=[LAYER] * 32, layer_bytes_active=[LAYER] * 32, layer_params_active=[LAYER_PARAMS] * 32,
        other_bytes=0)


def machine(**gpu) -> HardwareProfile:
    """60 GB/s, 1 TFLOPS CPU; a GPU only by its given figures (no NVML here)."""
    return HardwareProfile(60.0, 1.0, "test CPU", 32 * 10**9, 64 * 10**9, cpu_bandwidth_gbs=60.0, cpu_tflops=1.0,
                           cpu_source="test CPU", cpu_memory_free=32 * 10**9, **gpu)


GPU = dict(gpu_bandwidth_gbs=1000.0, gpu_tflops=100.0)


def split(ngl, depth=0, hw=None, **kw):
    f = facts_8b()
    return f, plan(f, kv_layout(f, 4096), hw or machine(**GPU), OffloadSettings(n_gpu_layers=ngl, **kw), depth=depth)


def test_20_layers_asked_on_a_1_tb_s_gpu():
    """-ngl 20: llama.cpp puts the output layer and layers 13..31 (19) on the GPU.
    GPU: 19 x 125 MB + 300 MB = 2.675 GB at 1,000 GB/s = 2.675 ms
    CPU: 13 x 125 MB          = 1.625 GB at    60 GB/s = 27.083 ms  (the embedding: a lookup)
    a token: 29.758 ms = 33.6 tok/s, the CPU binds; all on the GPU it would be
    4.3 GB / 1,000 GB/s = 4.3 ms = 232.6 tok/s (what taking GPU 0's figures said)."""
    _, p = split(20)
    cpu, gpu = p.shares
    assert (cpu.layers, gpu.layers, gpu.output_layer) == (13, 19, True)
    assert cpu.read_bytes == 1_625_000_000 and gpu.read_bytes == 2_675_000_000
    assert cpu.seconds_per_token == pytest.approx(0.027083333) and gpu.seconds_per_token == pytest.approx(0.002675)
    assert decode_seconds(list(p.shares)) == pytest.approx(0.029758333)
    assert slowest(list(p.shares)) is cpu
    # resident: the CPU also keeps the 0.3 GB embedding table
    assert cpu.weights_bytes == 1_925_000_000 and gpu.weights_bytes == 2_675_000_000
    _, everything = split(33)
    assert decode_seconds(list(everything.shares)) == pytest.approx(4.3e9 / 1000e9)


def test_20_repeating_layers_take_ngl_21():
    """GPU: 20 x 125 MB + 300 MB = 2.8 GB = 2.8 ms; CPU: 12 x 125 MB = 1.5 GB = 25 ms;
    27.8 ms = 35.97 tok/s."""
    _, p = split(21)
    assert [s.layers for s in p.shares] == [12, 20]
    assert 1 / decode_seconds(list(p.shares)) == pytest.approx(1 / 0.0278)


def test_the_kv_cache_is_read_where_its_layer_is():
    """At depth 1,000 each layer reads 1,000 x 2 x 8 x 128 x 2 bytes = 4.096 MB of cache:
    with -ngl 20 13 layers' on the CPU (+53.248 MB), 19 on the GPU (+77.824 MB); with
    --no-kv-offload all 32 (131.072 MB) from system memory."""
    _, p = split(20, depth=1000)
    assert [s.read_bytes for s in p.shares] == [1_625_000_000 + 53_248_000, 2_675_000_000 + 77_824_000]
    assert [s.kv_bytes for s in p.shares] == [13 * 16 * 2**20, 19 * 16 * 2**20]  # 4,096 cells x 4,096 bytes
    _, p = split(20, depth=1000, kv_offload=False)
    assert [s.read_bytes for s in p.shares] == [1_625_000_000 + 131_072_000, 2_675_000_000]


def test_the_prediction_adds_each_device_s_time():
    """Decode 1 / 29.758 ms; compute: CPU 13 x 2 x 218.75 M = 5.6875 GFLOP at 1 TFLOPS,
    GPU 19 x 2 x 218.75 M + 2 x 525.3 M (logits) = 9.363 GFLOP at 100 TFLOPS; prefill
    of 512 tokens: each device's layers (and the GPU's logits for the last token) at its
    FLOPS."""
    f = facts_8b()
    lay = kv_layout(f, 4096)
    p = plan(f, lay, machine(**GPU), OffloadSettings(n_gpu_layers=20), depth=0, prompt_tokens=512)
    pred = predict_split(f, lay, list(p.shares), prompt_tokens=512, output_tokens=0)
    assert pred.decode_ceiling_tok_s == pytest.approx(1 / 0.029758333)
    cpu_flops, gpu_flops = 13 * 2 * LAYER_PARAMS, 19 * 2 * LAYER_PARAMS + 2 * OUTPUT_PARAMS
    assert pred.compute_ceiling_tok_s == pytest.approx(1 / (cpu_flops / 1e12 + gpu_flops / 100e12))
    assert pred.binding == "bandwidth"
    cpu_pre = 13 * 2 * LAYER_PARAMS * 512 + attention_flops(13, 32, 128, 512)
    gpu_pre = 19 * 2 * LAYER_PARAMS * 512 + attention_flops(19, 32, 128, 512) + 2 * OUTPUT_PARAMS
    assert pred.prefill_s == pytest.approx(cpu_pre / 1e12 + gpu_pre / 100e12)
    # the effective bandwidth: everything read / the time it takes
    assert pred.bandwidth_gbs == pytest.approx(4.3e9 / 0.029758333 / 1e9)


def test_on_one_device_it_is_the_single_device_prediction():
    f, p = split(0)
    lay = kv_layout(f, 4096)
    assert [s.layers for s in p.held] == [32]
    one = predict_split(f, lay, list(p.shares), 512, 128)
    assert one == predict(f, lay, 60.0, 1.0, 512, 128)


def test_without_a_gpu_ngl_does_nothing_and_says_so():
    f, p = split(20, hw=machine())
    assert [s.device.name for s in p.held] == ["CPU"] and p.placement.offloaded == 0
    assert p.note.startswith("-ngl 20 did nothing: no GPU found; every layer runs on the CPU")


def test_hardware_profile_keeps_the_cpu_s_figures_when_layers_are_offloaded(monkeypatch, tmp_path):
    """It took GPU 0's figures for everything whenever a layer was offloaded: the CPU's
    layers were then estimated at the GPU's bandwidth."""
    from kvtop.runner.system import hardware as hwmod

    gpu = hwmod.GPUInfo(0, "NVIDIA H200", 141 * 2**30, 0, 141 * 2**30, 0, 4800.0, 989.0, "datasheet")
    monkeypatch.setattr(hwmod, "query_gpus", lambda pid=None: hwmod.GPUReport((gpu,), None))
    probe = hwmod.CPUProbe(60.0, 1.0, 2, 0.1, 0.0, "test")
    monkeypatch.setattr(hwmod, "cpu_profile", lambda cache_dir=None, refresh=False: probe)
    hw = hwmod.hardware_profile(20, cache_dir=str(tmp_path))
    assert (hw.bandwidth_gbs, hw.source) == (4800.0, "GPU 0 (NVIDIA H200)")  # the single-device view
    assert (hw.cpu_bandwidth_gbs, hw.cpu_tflops) == (60.0, 1.0)
    cpu, h200 = devices_from_hardware(hw)
    assert (cpu.bandwidth_gbs, h200.bandwidth_gbs, h200.name) == (60.0, 4800.0, "GPU 0 (NVIDIA H200)")
    f, p = split(20, hw=hw)
    assert p.shares[0].seconds_per_token == pytest.approx(1.625e9 / 60e9)
    given = hwmod.hardware_profile(20, cache_dir=str(tmp_path), gpu_bandwidth_gbs=1000.0)
    assert devices_from_hardware(given)[1].bandwidth_gbs == 1000.0
