"""``kvtop estimate``'s offload part: the flags that place layers, each device's share
as JSON, and the lines the human output adds when more than one device holds bytes."""

from __future__ import annotations

import argparse

from kvtop.runner.cli_types import INT32_MAX, int_in, positive_float
from kvtop.runner.commands.common import Report
from kvtop.runner.physics.device_split import slowest
from kvtop.runner.physics.offload import SPLIT_MODES, OffloadSettings, Plan
from kvtop.runner.units import fmt_bytes, fmt_num


def tensor_split(text: str) -> tuple[float, ...]:
    """llama.cpp's ``-ts 3,1`` (or ``3/1``): each GPU's share, non-negative, not all zero."""
    parts = [p for p in text.replace("/", ",").split(",")]
    try:
        values = tuple(float(p) for p in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be numbers separated by commas, e.g. 3,1 (got {text!r})") from None
    if any(not (v >= 0 and v < float("inf")) for v in values) or not any(values):
        raise argparse.ArgumentTypeError(f"must be finite numbers of at least 0, not all 0 (got {text})")
    return values


def add_offload_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("offload (llama.cpp's flags)")
    g.add_argument("-ngl", "--n-gpu-layers", type=int_in(-1, INT32_MAX), default=0,
                   help="layers on the GPU(s); llama.cpp offloads the output layer first (-1: all)")
    g.add_argument("-ts", "--tensor-split", type=tensor_split, default=(),
                   help="each GPU's share of the layers, e.g. 3,1 (default: by free memory)")
    g.add_argument("-sm", "--split-mode", choices=SPLIT_MODES, default="layer",
                   help="layer: consecutive layers per GPU; none: the main GPU only (row is not modelled)")
    g.add_argument("-mg", "--main-gpu", type=int_in(0, INT32_MAX), default=0)
    g.add_argument("-nkvo", "--no-kv-offload", action="store_true", help="keep every layer's KV in system memory")
    g.add_argument("--gpu-bandwidth-gbs", type=positive_float,
                   help="every GPU's memory bandwidth in GB/s (default: NVML; with no GPU found, estimate one)")
    g.add_argument("--gpu-tflops", type=positive_float, help="every GPU's FLOPS in TFLOPS (default: the datasheet)")


def offload_settings(a: argparse.Namespace) -> OffloadSettings:
    return OffloadSettings(n_gpu_layers=a.n_gpu_layers, tensor_split=tuple(a.tensor_split),
                           split_mode=a.split_mode, main_gpu=a.main_gpu, kv_offload=not a.no_kv_offload,
                           n_ubatch=min(a.ubatch_size, a.batch_size), n_batch=a.batch_size,
                           flash_attn=a.flash_attn)


def device_report(p: Plan) -> Report:
    """The JSON keys: ``devices`` (each device holding bytes: what one decode token reads
    there and the time that takes), ``binding_device``, ``offload``."""
    devices = []
    for s in p.held:
        devices.append({
            "device": s.device.name, "kind": s.device.kind, "bytes": s.read_bytes,
            "bandwidth_gbs": s.device.bandwidth_gbs, "seconds_per_token": s.seconds_per_token,
            "tflops": s.device.tflops, "layers": s.layers, "output_layer": s.output_layer,
            "weights_bytes": s.weights_bytes, "kv_bytes": s.kv_bytes, "compute_bytes": s.compute_bytes,
            "memory_free_bytes": s.device.memory_free, "source": s.device.source,
        })
    worst = slowest(list(p.held)) if p.held else None
    return {
        "devices": devices,
        "binding_device": worst.device.name if worst and len(p.held) > 1 else None,
        "offload": {"layers_offloaded": p.placement.offloaded_layers,
                    "output_layer_offloaded": p.placement.output != 0,
                    "note": p.note},
    }


def device_lines(r: Report) -> list[tuple[str, str]]:
    """The per-device rows, when more than one device holds bytes."""
    devices = r.get("devices") or []
    rows: list[tuple[str, str]] = []
    if len(devices) > 1:
        rows.append(("per decode token", "device by device, one after another (times add up)"))
        for d in devices:
            where = f"{d['layers']} layers" + (" + output" if d["output_layer"] else "")
            ms = d["seconds_per_token"] * 1e3 if d["seconds_per_token"] is not None else None
            mark = "  <- binds" if d["device"] == r.get("binding_device") else ""
            rows.append((f"  {d['device']}", f"{where}: reads {fmt_bytes(d['bytes'])} at "
                                             f"{fmt_num(d['bandwidth_gbs'], ',.1f', ' GB/s')} = "
                                             f"{fmt_num(ms, ',.2f', ' ms')}{mark}"))
    note = (r.get("offload") or {}).get("note")
    if note:
        rows.append(("offload", note))
    return rows
