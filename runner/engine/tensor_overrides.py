"""-ot/--override-tensor PATTERN=BUFFER_TYPE[,…]: llama.cpp's tensor buffer overrides (the
weights whose names match a regex go to a buffer type of this build: ``CPU``, ``CUDA0``…),
as common/arg.cpp's ``parse_tensor_buffer_overrides`` builds them, handed to
``llama_model_params.tensor_buft_overrides`` (llama-cpp-python leaves that field unset;
the buffer types come from ggml's device registry through ctypes)."""

from __future__ import annotations

import ctypes

from kvtop.runner.engine.ggml_devices import open_ggml_library


class Override(ctypes.Structure):  # struct llama_model_tensor_buft_override
    _fields_ = [("pattern", ctypes.c_char_p), ("buft", ctypes.c_void_p)]


def split_overrides(value: str) -> list[tuple[str, str]]:
    """(pattern, buffer type) pairs of one -ot value; ValueError for one without "="."""
    out = []
    for item in value.split(","):
        pattern, sep, buft = item.partition("=")
        if not sep or not pattern or not buft:
            raise ValueError(f"{item!r}: the format is PATTERN=BUFFER_TYPE")
        out.append((pattern, buft))
    return out


def buffer_types() -> dict[str, int]:
    """Each device's buffer type by its name, as llama.cpp lists them for -ot."""
    ggml, base = open_ggml_library("ggml"), open_ggml_library("ggml-base")
    vp, size = ctypes.c_void_p, ctypes.c_size_t
    ggml.ggml_backend_dev_count.restype = size
    ggml.ggml_backend_dev_get.restype, ggml.ggml_backend_dev_get.argtypes = vp, [size]
    base.ggml_backend_dev_buffer_type.restype, base.ggml_backend_dev_buffer_type.argtypes = vp, [vp]
    base.ggml_backend_buft_name.restype, base.ggml_backend_buft_name.argtypes = ctypes.c_char_p, [vp]
    out: dict[str, int] = {}
    for i in range(ggml.ggml_backend_dev_count()):
        buft = base.ggml_backend_dev_buffer_type(ggml.ggml_backend_dev_get(i))
        if buft:
            out[(base.ggml_backend_buft_name(buft) or b"").decode("utf-8", "replace")] = buft
    return out


def override_array(pairs: list[tuple[str, str]]) -> ctypes.Array[Override]:
    """The NULL-terminated array llama.cpp reads; ValueError naming this build's buffer
    types for one it does not have. The caller keeps the array alive through the load."""
    types = buffer_types()
    items = []
    for pattern, name in pairs:
        if name not in types:
            raise ValueError(f"-ot {pattern}={name}: no buffer type {name!r} in this build "
                             f"(it has: {', '.join(sorted(types)) or 'none'})")
        items.append(Override(pattern.encode(), types[name]))
    return (Override * (len(items) + 1))(*items, Override(None, None))
