"""What the engine asks llama.cpp for when it loads: the model's and the context's
parameters from kvtop's settings, and the LoRA adapters (--lora, --lora-scaled) applied
to the context as llama.cpp's common_init_from_params does."""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence

import llama_cpp

from kvtop.runner.engine.handles import Context, Model
from kvtop.runner.engine.llama_log import CAPTURE
from kvtop.runner.engine.tensor_overrides import override_array
from kvtop.runner.model.quant_types import KV_CACHE_TYPES
from kvtop.runner.sanitize import clean_line
from kvtop.runner.settings import Settings

_KEEP: list[object] = []  # the -ot array of the model being loaded


class EngineLoadError(Exception):
    """The model or its context could not be loaded (one line: why)."""


def model_params(s: Settings, progress_cb: Callable[[float, object], bool]) -> llama_cpp.llama_model_params:
    mp: llama_cpp.llama_model_params = llama_cpp.llama_model_default_params()
    mp.n_gpu_layers = s.n_gpu_layers if s.n_gpu_layers >= 0 else 999
    set_load_mode(mp, s.mmap, s.mlock)
    mp.progress_callback = progress_cb
    if s.override_tensor:  # -ot: kept referenced until the next load (llama.cpp reads it while loading)
        try:
            arr = override_array(list(s.override_tensor))
        except ValueError as exc:
            raise EngineLoadError(str(exc)) from None
        _KEEP[:] = [arr]
        # the field is a plain pointer (llama-cpp-python's annotation says an array)
        mp.tensor_buft_overrides = ctypes.addressof(arr)  # type: ignore[assignment]
    return mp


def set_load_mode(mp: llama_cpp.llama_model_params, mmap: bool, mlock: bool) -> None:
    """--no-mmap and --mlock. The llama.cpp that llama-cpp-python 0.3.36 vendors replaced
    ``use_mmap``/``use_mlock`` with one ``load_mode``: setting the old names on the ctypes
    struct only added Python attributes, and both flags silently did nothing. The
    default (mmap, no mlock) leaves llama.cpp's own choice (``LLAMA_LOAD_MODE_AUTO``)."""
    fields = {name for name, *_ in type(mp)._fields_}
    if "load_mode" not in fields:  # an older llama-cpp-python
        mp.use_mmap, mp.use_mlock = mmap, mlock
    elif not mmap or mlock:
        mp.load_mode = {(True, True): llama_cpp.LLAMA_LOAD_MODE_MMAP_MLOCK,
                        (False, True): llama_cpp.LLAMA_LOAD_MODE_MLOCK,
                        (False, False): llama_cpp.LLAMA_LOAD_MODE_NONE}[(mmap, mlock)]


def context_params(s: Settings, n_ctx: int) -> llama_cpp.llama_context_params:
    cp: llama_cpp.llama_context_params = llama_cpp.llama_context_default_params()
    cp.n_ctx = n_ctx
    cp.n_batch = s.n_batch
    cp.n_ubatch = s.n_ubatch
    cp.n_seq_max = 1
    cp.n_threads = s.n_threads
    cp.n_threads_batch = s.n_threads_batch
    cp.flash_attn_type = {"on": 1, "off": 0, "auto": -1}[s.flash_attn]
    cp.type_k = KV_CACHE_TYPES[s.cache_type_k]
    cp.type_v = KV_CACHE_TYPES[s.cache_type_v]
    cp.swa_full, cp.offload_kqv = s.swa_full, s.kv_offload
    cp.rope_freq_base, cp.rope_freq_scale = s.rope_freq_base, s.rope_freq_scale  # 0: the GGUF's
    cp.no_perf = False
    return cp


def apply_loras(model: Model, ctx: Context, loras: Sequence[tuple[str, float]]) -> str | None:
    """Load each (path, scale) adapter for ``model`` and set them all on ``ctx`` (llama.cpp's
    ``llama_adapter_lora_init`` + ``llama_set_adapters_lora``); the adapters belong to the
    model, which frees them. None when done, else why not in one line (llama.cpp's reason)."""
    if not loras:
        return None
    ptrs, scales = [], []
    for path, scale in loras:
        CAPTURE.mark()
        ptr = llama_cpp.llama_adapter_lora_init(model.ptr, path.encode())
        if not ptr:
            reason = CAPTURE.last_error() or "llama.cpp could not load it"
            return f"--lora {clean_line(path)}: {clean_line(reason)}"
        ptrs.append(ptr)
        scales.append(scale)
    arr = (llama_cpp.llama_adapter_lora_p_ctypes * len(ptrs))(*ptrs)
    c_scales = (ctypes.c_float * len(scales))(*scales)
    if llama_cpp.llama_set_adapters_lora(ctx.ptr, arr, len(ptrs), c_scales) != 0:
        return "--lora: llama.cpp could not apply the adapters to the context"
    return None
