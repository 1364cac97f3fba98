"""Which device holds which layer, as llama.cpp assigns them (``-ngl``, ``-ts``, ``-sm``).

llama.cpp's rule (src/llama-model.cpp ``load_tensors``, since ggml-org/llama.cpp#18148,
Dec 2025, which the pinned llama-cpp-python vendors: its log reads "offloading output
layer to GPU" before "offloading N repeating layers"):

* the input embedding stays on the CPU ("very little benefit to offloading" a lookup);
* the layers are numbered 0..n_layer-1, the output layer is number n_layer;
  ``i_gpu_start = max(n_layer + 1 - ngl, 0)``, ``act = min(ngl, n_layer + 1)``: the
  last ``act`` of these n_layer + 1 go to the GPUs. So the output layer is offloaded
  first (``-ngl 1`` puts only it on the GPU) and ``-ngl 20`` on a 32-layer model puts
  the output layer and layers 13..31 there. (Before #18148 the output layer went last,
  only once ngl > n_layer.)
* across GPUs (``-sm layer``, the default) layer ``il`` goes to the first GPU whose
  cumulative split exceeds ``(il - i_gpu_start) / act``; the split is ``--tensor-split``
  normalised, else each GPU's free memory. ``-sm none`` uses the main GPU only.
* a layer's KV cache lives where the layer is, unless ``--no-kv-offload`` keeps all
  of it in system memory.

Without a GPU (or with a llama.cpp built without one) nothing is offloaded: ``-ngl``
does nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CPU = 0  # the CPU is device 0 of every device list here; GPUs follow


@dataclass(frozen=True)
class Device:
    """A place that holds weights, with the figures its share of the time comes from."""

    name: str
    kind: str  # "cpu" or "gpu"
    bandwidth_gbs: float | None
    tflops: float | None
    memory_free: int | None
    source: str = ""


@dataclass(frozen=True)
class Placement:
    """Device index (into the device list, CPU = 0) of each repeating layer and of the
    output layer; the input embedding is always on the CPU."""

    layers: tuple[int, ...]
    output: int
    kv_offload: bool = True

    def kv_device(self, il: int) -> int:
        return self.layers[il] if self.kv_offload else CPU

    @property
    def offloaded_layers(self) -> int:
        """Repeating layers not on the CPU."""
        return sum(1 for d in self.layers if d != CPU)

    @property
    def offloaded(self) -> int:
        """Layers llama.cpp counts as offloaded ("offloaded N/n_layer+1 layers to GPU")."""
        return self.offloaded_layers + (self.output != CPU)


def effective_gpu_layers(n_gpu_layers: int, n_layer: int) -> int:
    """kvtop passes -ngl -1 as 999 (every layer), as llama.cpp's "all"."""
    return n_layer + 1 if n_gpu_layers < 0 else n_gpu_layers


def split_points(n_gpus: int, tensor_split: list[float] | None = None,
                 gpu_free: list[int | None] | None = None) -> list[float]:
    """The cumulative, normalised split llama.cpp compares layer fractions against
    (float32, as llama.cpp computes it)."""
    weights = list(tensor_split or [])[:n_gpus]
    if not any(weights):
        free = list(gpu_free or [])[:n_gpus]
        weights = [f or 0 for f in free] if len(free) == n_gpus and all(free) else [1.0] * n_gpus
    weights += [0.0] * (n_gpus - len(weights))
    cum = np.cumsum(np.array(weights, dtype=np.float32), dtype=np.float32)
    return [float(x) for x in (cum / cum[-1]).astype(np.float32)]


def place_layers(n_layer: int, n_gpu_layers: int, n_gpus: int, *, tensor_split: list[float] | None = None,
                 gpu_free: list[int | None] | None = None, split_mode: str = "layer", main_gpu: int = 0,
                 kv_offload: bool = True) -> Placement:
    """llama.cpp's assignment of the ``n_layer`` repeating layers and the output layer.

    Devices are numbered CPU = 0, GPU i = i + 1."""
    if n_gpus <= 0 or n_gpu_layers == 0:
        return Placement((CPU,) * n_layer, CPU, kv_offload)
    ngl = effective_gpu_layers(n_gpu_layers, n_layer)
    i_gpu_start = max(n_layer + 1 - ngl, 0)
    act = min(ngl, n_layer + 1)
    if split_mode == "none":
        points = [1.0 if i >= main_gpu else 0.0 for i in range(n_gpus)]
    else:
        points = split_points(n_gpus, tensor_split, gpu_free)
    where = []
    for il in range(n_layer + 1):
        if il < i_gpu_start or il - i_gpu_start >= act:
            where.append(CPU)
            continue
        x = np.float32(il - i_gpu_start) / np.float32(act)
        gpu = next((i for i, p in enumerate(points) if p > x), n_gpus - 1)  # std::upper_bound
        where.append(gpu + 1)
    return Placement(tuple(where[:n_layer]), where[n_layer], kv_offload)
