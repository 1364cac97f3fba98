"""``kvtop estimate``: the compute buffer and each device's share (issue 12), every key
it printed before kept."""

import json
import subprocess
import sys

import pytest

from kvtop.runner.commands.estimate import estimate_report, format_report
from kvtop.runner.model.inspect import load_facts
from kvtop.runner.physics.offload import OffloadSettings
from kvtop.runner.system.hardware import HardwareProfile
from kvtop.runner.units import MIB

KEYS_BEFORE = (
    "model name architecture file_type n_layers layer_kinds sliding_window n_params n_params_active weights_bytes "
    "weights_bytes_active n_ctx n_ctx_train cache_type_k cache_type_v swa_full kv_bytes_per_token kv_bytes "
    "kv_by_kind kv_bytes_full_context kv_layers_unknown conversations_that_fit conversation_tokens prompt_tokens "
    "output_tokens decode_ceiling_tok_s compute_ceiling_tok_s binding prefill_s prefill_tok_s ttft_s response_s "
    "bandwidth_gbs tflops hardware_source memory_needed_bytes memory_free_bytes memory_fits memory_message notes"
).split()
DEVICE_KEYS = {"device", "bytes", "bandwidth_gbs", "seconds_per_token"}
NO_GPU = HardwareProfile(60.0, 1.0, "test CPU", 16 * 2**30, 24 * 2**30, cpu_bandwidth_gbs=60.0, cpu_tflops=1.0,
                         cpu_source="test CPU", cpu_memory_free=16 * 2**30, gpu_note="no NVIDIA GPU (test)")


def kvtop(*args):
    return subprocess.run([sys.executable, "-m", "kvtop", *args], capture_output=True, text=True, timeout=120)


def test_every_key_kept_and_the_compute_buffer_added(smollm_path):
    r = estimate_report(load_facts(smollm_path), NO_GPU, 4096)
    assert [k for k in KEYS_BEFORE if k not in r] == []
    # llama.cpp at -ub 512: "CPU compute buffer size = 98.25 MiB" + "CPU output buffer size = 0.19 MiB"
    assert r["compute_bytes"] == 4 * 512 * (49152 + 2 * 576) + 4 * 49152
    assert round(r["compute_bytes"] / MIB, 2) == 98.44
    assert [set(d) >= DEVICE_KEYS for d in r["devices"]] == [True] and r["devices"][0]["device"] == "CPU"
    assert r["binding_device"] is None and r["offload"]["note"] is None
    assert "compute" in r["memory_message"] and "compute buffer" in format_report(r)


def test_without_a_gpu_ngl_did_nothing(smollm_path):
    r = estimate_report(load_facts(smollm_path), NO_GPU, 4096, offload=OffloadSettings(n_gpu_layers=20))
    assert r["offload"]["layers_offloaded"] == 0 and not r["offload"]["output_layer_offloaded"]
    assert r["offload"]["note"].startswith("-ngl 20 did nothing: no NVIDIA GPU (test); every layer runs on the CPU")
    assert [d["device"] for d in r["devices"]] == ["CPU"] and r["memory_message"].endswith("RAM free")
    assert "did nothing" in format_report(r) and "per decode token" not in format_report(r)


def test_a_split_model_shows_each_device_and_adds_their_times(smollm_path):
    out = kvtop("estimate", smollm_path, "--json", "--bandwidth-gbs", "60", "--tflops", "1", "-ngl", "10",
                "--gpu-bandwidth-gbs", "1000", "--gpu-tflops", "50", "--output-tokens", "0")
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert [k for k in KEYS_BEFORE if k not in r] == []
    devices = r["devices"]
    assert len(devices) >= 2 and all(set(d) >= DEVICE_KEYS for d in devices)
    cpu = devices[0]
    assert cpu["device"] == "CPU" and cpu["layers"] == 30 - 9 and cpu["bandwidth_gbs"] == 60.0
    # llama.cpp puts the output layer and the last 9 layers on the GPU
    assert sum(d["layers"] for d in devices[1:]) == 9 and any(d["output_layer"] for d in devices[1:])
    for d in devices:
        assert d["seconds_per_token"] == pytest.approx(d["bytes"] / (d["bandwidth_gbs"] * 1e9))
    assert 1 / sum(d["seconds_per_token"] for d in devices) == pytest.approx(r["decode_ceiling_tok_s"])
    assert r["binding_device"] == "CPU"  # 21 layers at 60 GB/s against 9 and the output at 1 TB/s
    assert r["compute_bytes"] == sum(d["compute_bytes"] for d in devices)
    text = kvtop("estimate", smollm_path, "--bandwidth-gbs", "60", "--tflops", "1", "-ngl", "10",
                 "--gpu-bandwidth-gbs", "1000", "--gpu-tflops", "50").stdout
    assert "per decode token" in text and "21 layers: reads" in text and "9 layers + output: reads" in text
    assert "<- binds" in text


@pytest.mark.parametrize("value", ["1,-1", "0,0", "a,b", "nan"])
def test_a_bad_tensor_split_is_a_usage_error(smollm_path, value):
    r = kvtop("estimate", smollm_path, f"--tensor-split={value}")
    assert r.returncode == 2 and "argument -ts/--tensor-split: must be" in r.stderr


def test_the_layer_line_reads_as_a_count_and_its_kinds(smollm_path):
    """It printed "layers  30 30 full", which read as two counts."""
    lines = format_report(estimate_report(load_facts(smollm_path), NO_GPU, 4096)).splitlines()
    assert [line.split(None, 1)[1] for line in lines if line.startswith("layers ")] == ["30 (30 full)"]
