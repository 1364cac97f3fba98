"""The llama.cpp build as llama-bench describes it: its backends, CPU and GPU names.

llama-bench reads them from ggml's backend registry (``test::get_backend``,
``get_cpu_info``, ``get_gpu_info``); llama-cpp-python does not bind those functions, so
they are called here through ctypes on the ggml libraries it ships (already loaded by
``import llama_cpp``: the same registry the engine uses). Where those libraries cannot
be opened, the registry names come from ``llama_print_system_info`` (which lists only
the registries that publish features: CPU, CUDA, Metal) and the descriptions are empty.
"""

from __future__ import annotations

import ctypes
import os
import re
import sys
from dataclasses import dataclass
from functools import lru_cache

# enum ggml_backend_dev_type
DEV_CPU, DEV_GPU, DEV_IGPU, DEV_ACCEL = 0, 1, 2, 3


@dataclass(frozen=True)
class BuildFacts:
    backends: str  # llama-bench's "backend" column and "backends" field: "CPU", "CUDA", "Metal,BLAS"
    cpu_info: str  # the CPU (and accelerator) devices' descriptions, ", "-joined
    gpu_info: str  # the GPU devices' descriptions, ", "-joined ("" without one)


def backend_label(registry_names: list[str], rpc_devices: bool = False) -> str:
    """llama-bench's ``get_backend``: every registry but CPU and RPC, joined by ",";
    "RPC" last when an RPC registry has devices; "CPU" when nothing else is left."""
    names = [n for n in registry_names if n != "CPU" and not n.startswith("RPC")]
    if rpc_devices:
        names.append("RPC")
    return ",".join(names) if names else "CPU"


def registries_from_system_info(text: str) -> list[str]:
    """The registry names in ``llama_print_system_info``'s "NAME : F = V | ..." text."""
    return re.findall(r"(?:^|\| )([A-Za-z][A-Za-z0-9_-]*) : ", text)


def _lib_names(base: str) -> list[str]:
    if sys.platform == "darwin":
        return [f"lib{base}.dylib"]
    if sys.platform == "win32":
        return [f"{base}.dll", f"lib{base}.dll"]
    return [f"lib{base}.so"]


def open_ggml_library(base: str) -> ctypes.CDLL:
    """One of the ggml libraries the installed llama-cpp-python wheel ships (``ggml``,
    ``ggml-base``, ``ggml-cpu``), opened with ctypes; the CPU probe opens them here too."""
    import llama_cpp

    folder = os.path.join(os.path.dirname(llama_cpp.__file__), "lib")
    for name in _lib_names(base):
        path = os.path.join(folder, name)
        if os.path.exists(path):
            return ctypes.CDLL(path)
    raise OSError(f"no {base} library in {folder}")


def _from_registry() -> BuildFacts:
    ggml, base = open_ggml_library("ggml"), open_ggml_library("ggml-base")
    vp, size = ctypes.c_void_p, ctypes.c_size_t
    ggml.ggml_backend_reg_count.restype = size
    ggml.ggml_backend_reg_get.restype, ggml.ggml_backend_reg_get.argtypes = vp, [size]
    ggml.ggml_backend_dev_count.restype = size
    ggml.ggml_backend_dev_get.restype, ggml.ggml_backend_dev_get.argtypes = vp, [size]
    base.ggml_backend_reg_name.restype, base.ggml_backend_reg_name.argtypes = ctypes.c_char_p, [vp]
    base.ggml_backend_reg_dev_count.restype, base.ggml_backend_reg_dev_count.argtypes = size, [vp]
    base.ggml_backend_dev_type.restype, base.ggml_backend_dev_type.argtypes = ctypes.c_int, [vp]
    base.ggml_backend_dev_description.restype, base.ggml_backend_dev_description.argtypes = ctypes.c_char_p, [vp]

    def text(b: bytes | None) -> str:
        return (b or b"").decode("utf-8", errors="replace")

    names, rpc = [], False
    for i in range(ggml.ggml_backend_reg_count()):
        reg = ggml.ggml_backend_reg_get(i)
        name = text(base.ggml_backend_reg_name(reg))
        names.append(name)
        rpc = rpc or (name.startswith("RPC") and base.ggml_backend_reg_dev_count(reg) > 0)
    cpus, gpus = [], []
    for i in range(ggml.ggml_backend_dev_count()):
        dev = ggml.ggml_backend_dev_get(i)
        kind = base.ggml_backend_dev_type(dev)
        if kind in (DEV_CPU, DEV_ACCEL):
            cpus.append(text(base.ggml_backend_dev_description(dev)))
        elif kind in (DEV_GPU, DEV_IGPU):
            gpus.append(text(base.ggml_backend_dev_description(dev)))
    return BuildFacts(backend_label(names, rpc), ", ".join(cpus), ", ".join(gpus))


@lru_cache(maxsize=1)
def build_facts() -> BuildFacts:
    """This process's llama.cpp build (loads llama_cpp; cached)."""
    try:
        return _from_registry()
    except (OSError, AttributeError, ImportError):
        pass
    try:
        import llama_cpp

        info = llama_cpp.llama_print_system_info().decode("utf-8", errors="replace")
        return BuildFacts(backend_label(registries_from_system_info(info)), "", "")
    except Exception:
        return BuildFacts("CPU", "", "")

