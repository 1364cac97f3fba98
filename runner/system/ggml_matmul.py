"""llama.cpp's own CPU matrix multiply, timed: the compute peak of its quantised kernels.

numpy's f32 matmul is not the fastest thing llama.cpp's CPU backend runs: a quantised
weight matrix is multiplied by activations quantised to 8 bits, with integer dot
products (AVX2, AVX512-VNNI), and per FLOP that is faster than f32 (measured here, a
2-core Zen 4 VM: numpy f32 0.17 TFLOPS, ggml q4_K x f32 at a batch of 512 0.43 TFLOPS).
A compute ceiling from the f32 figure alone was beaten by Gemma-3's Q4_K prefill. So
the probe also times ``ggml_mul_mat`` for each common weight type, through ctypes on
the ggml libraries llama-cpp-python ships (the very kernels the engine runs), at a
batch of 512 tokens, with every thread: the fastest of those is the compute peak.

A smaller batch reaches less of it (measured here: the fastest kernel 0.14 TFLOPS at
1 token, 0.30 at 16, 0.32 at 64, 0.45 at 512; q4_K alone 0.20 at 16), so the probe also
times every type at a few smaller batches and keeps the fastest at each
(``probe_batch_curve``): a micro-batch of n tokens is priced at that (the roofline of a
20-token follow-up is not the peak of a 512-token micro-batch).

The data are zeros: the integer kernels' speed does not depend on the values.
"""

from __future__ import annotations

import ctypes
import time

from kvtop.runner.units import MIB

# ggml_type enum values (ggml.h) of the weight types probed
KERNEL_TYPES: dict[str, int] = {
    "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8,
    "q2_K": 10, "q3_K": 11, "q4_K": 12, "q5_K": 13, "q6_K": 14, "bf16": 30,
}
GGML_TYPE_F32 = 0


class _InitParams(ctypes.Structure):
    _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", ctypes.c_void_p), ("no_alloc", ctypes.c_bool)]


def _libs() -> tuple[ctypes.CDLL, ctypes.CDLL]:
    from kvtop.runner.engine.ggml_devices import open_ggml_library

    base, cpu = open_ggml_library("ggml-base"), open_ggml_library("ggml-cpu")
    vp = ctypes.c_void_p
    base.ggml_init.restype, base.ggml_init.argtypes = vp, [_InitParams]
    base.ggml_new_tensor_2d.restype = vp
    base.ggml_new_tensor_2d.argtypes = [vp, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    base.ggml_mul_mat.restype, base.ggml_mul_mat.argtypes = vp, [vp, vp, vp]
    base.ggml_new_graph.restype, base.ggml_new_graph.argtypes = vp, [vp]
    base.ggml_build_forward_expand.restype, base.ggml_build_forward_expand.argtypes = None, [vp, vp]
    base.ggml_get_data.restype, base.ggml_get_data.argtypes = vp, [vp]
    base.ggml_nbytes.restype, base.ggml_nbytes.argtypes = ctypes.c_size_t, [vp]
    base.ggml_free.restype, base.ggml_free.argtypes = None, [vp]
    cpu.ggml_graph_compute_with_ctx.restype = ctypes.c_int
    cpu.ggml_graph_compute_with_ctx.argtypes = [vp, vp, ctypes.c_int]
    return base, cpu


def _time_one(base: ctypes.CDLL, cpu: ctypes.CDLL, ggml_type: int, threads: int, k: int, m: int, n: int,
              repeats: int) -> float | None:
    ctx = base.ggml_init(_InitParams(96 * MIB, None, False))
    if not ctx:
        return None
    try:
        a = base.ggml_new_tensor_2d(ctx, ggml_type, k, m)  # weights: m rows of k
        b = base.ggml_new_tensor_2d(ctx, GGML_TYPE_F32, k, n)  # activations: n tokens
        if not a or not b:
            return None
        for t in (a, b):
            ctypes.memset(base.ggml_get_data(t), 0, base.ggml_nbytes(t))
        graph = base.ggml_new_graph(ctx)
        base.ggml_build_forward_expand(graph, base.ggml_mul_mat(ctx, a, b))
        best = 0.0
        for _ in range(repeats + 1):  # the first one warms the caches and the thread pool
            t0 = time.perf_counter()
            if cpu.ggml_graph_compute_with_ctx(ctx, graph, threads) != 0:
                return None
            dt = time.perf_counter() - t0
            best = max(best, 2.0 * k * m * n / dt / 1e12)
        return best
    finally:
        base.ggml_free(ctx)


def probe_kernels(threads: int, k: int = 2048, m: int = 2048, n: int = 512,
                  repeats: int = 3) -> dict[str, float]:
    """TFLOPS of llama.cpp's CPU ``mul_mat`` per weight type ({} when ggml cannot be
    loaded): a weight matrix of ``m`` x ``k`` times ``n`` tokens' f32 activations."""
    try:
        base, cpu = _libs()
    except (OSError, AttributeError, ImportError):
        return {}
    out = {}
    for name, ggml_type in KERNEL_TYPES.items():
        tf = _time_one(base, cpu, ggml_type, threads, k, m, n, repeats)
        if tf:
            out[name] = round(tf, 4)
    return out


# The batches timed below 512 (~1 s in all here): llama.cpp's kernels change pace
# between them (a matrix-vector product at 1 token, the integer GEMM paths from ~16).
CURVE_BATCHES = (1, 4, 16, 64, 128)


def probe_batch_curve(threads: int, batches: tuple[int, ...] = CURVE_BATCHES, k: int = 2048,
                      m: int = 2048, repeats: int = 3) -> dict[str, float]:
    """The fastest kernel's TFLOPS at each of ``batches`` tokens, keyed by the batch
    as a string (as JSON keeps it); {} when ggml cannot be loaded."""
    out = {}
    for n in batches:
        tf = probe_kernels(threads, k, m, n, repeats)
        if tf:
            out[str(n)] = max(tf.values())
    return out


# Head sizes whose decode attention is timed (``probe_attention``); others interpolate.
ATTENTION_HEAD_DIMS = (64, 128, 256)
ATTENTION_DEPTH = 2048
ATTENTION_HEADS = 8


def _time_attention(base: ctypes.CDLL, cpu: ctypes.CDLL, threads: int, head_dim: int, depth: int, heads: int,
                    repeats: int) -> float | None:
    vp = ctypes.c_void_p
    base.ggml_new_tensor_3d.restype = vp
    base.ggml_new_tensor_3d.argtypes = [vp, ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64]
    base.ggml_flash_attn_ext.restype = vp
    base.ggml_flash_attn_ext.argtypes = [vp, vp, vp, vp, vp, ctypes.c_float, ctypes.c_float, ctypes.c_float]
    ctx = base.ggml_init(_InitParams(64 * MIB, None, False))
    if not ctx:
        return None
    try:
        q = base.ggml_new_tensor_3d(ctx, GGML_TYPE_F32, head_dim, 1, heads)  # one token's query per head
        k = base.ggml_new_tensor_3d(ctx, KERNEL_TYPES["f16"], head_dim, depth, heads)  # the f16 cache
        v = base.ggml_new_tensor_3d(ctx, KERNEL_TYPES["f16"], head_dim, depth, heads)
        if not (q and k and v):
            return None
        for t in (q, k, v):
            ctypes.memset(base.ggml_get_data(t), 0, base.ggml_nbytes(t))
        out = base.ggml_flash_attn_ext(ctx, q, k, v, None, head_dim ** -0.5, 0.0, 0.0)
        graph = base.ggml_new_graph(ctx)
        base.ggml_build_forward_expand(graph, out)
        best = 0.0
        for _ in range(repeats + 1):  # the first one warms the caches and the thread pool
            t0 = time.perf_counter()
            if cpu.ggml_graph_compute_with_ctx(ctx, graph, threads) != 0:
                return None
            best = max(best, 4.0 * head_dim * depth * heads / (time.perf_counter() - t0) / 1e12)
        return best
    finally:
        base.ggml_free(ctx)


def probe_attention(threads: int, head_dims: tuple[int, ...] = ATTENTION_HEAD_DIMS, depth: int = ATTENTION_DEPTH,
                    repeats: int = 5) -> dict[str, float]:
    """TFLOPS of one decode token's attention per head size, keyed by the head size as a
    string ({} when ggml cannot be loaded): llama.cpp's CPU ``flash_attn_ext`` (what
    ``-fa auto`` runs on a CPU) for one token's query over ``depth`` cached f16 keys and
    values, ``4 * head_dim * depth`` FLOP per head. Dot products a head long, one query
    at a time, run far below the peak of a batch of 512: measured here 0.0072 TFLOPS at
    64 and 0.0093 at 256 against a 0.035 peak. The forecast had priced decode's attention
    at prefill's efficiency, and got the depth slope half what it was (SmolLM2 decoded
    12.7 ms a token at depth 50 against a forecast 22, and 52 at depth 3,000 against 47);
    what these figures price needs 0.0069 (SmolLM2) and 0.0076 (Gemma-3) to fit."""
    try:
        base, cpu = _libs()
        out = {}
        for hd in head_dims:
            tf = _time_attention(base, cpu, threads, hd, depth, ATTENTION_HEADS, repeats)
            if tf:
                out[str(hd)] = round(tf, 5)
        return out
    except (OSError, AttributeError, ImportError):
        return {}
