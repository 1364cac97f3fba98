"""Checks for untrusted trace values: every field has its type, every number is finite
and in a sane range for its field (``number_range``). Used by ``runner.records.trace``."""

from __future__ import annotations

import math
import types
import typing
from dataclasses import is_dataclass
from functools import cache

# ------------------------------------------------------------------ validation
# The range of a number, by its field's name. Wide enough for any real session, narrow
# enough that no pane can overflow a float, build a NaN or allocate from it.
CLOCK = (0.0, 1e11)  # time.monotonic() since boot or time.time() since 1970 (1e11 s: year 5138)
SECONDS = (-1e7, 1e7)  # a duration (116 days); a waterfall boundary may sit a hair early
RATE = (0.0, 1e12)  # tokens per second
MIB = (0.0, 2.0**40)  # a buffer in MiB (an exbibyte)
BYTES = (0, 2**62)
PEAK = (0.0, 1e9)  # GB/s, TFLOPS
COUNT = (0, 2**32)  # tokens, cells, layers, threads, positions, turn ids
INT = (-(2**53), 2**53)  # any other integer: exact as a float
FLOAT = (-1e15, 1e15)  # any other number
COUNTS = frozenset((
    "n_ctx", "n_ctx_train", "n_batch", "n_ubatch", "n_threads", "n_threads_batch", "threads",
    "prompt_tokens", "reused_tokens", "prefill_tokens", "decode_tokens", "kv_cells_used", "done",
    "total", "reused", "ubatch_tokens", "pos", "index", "turn_id", "cells", "layers", "n_layers",
    "n_embd", "n_vocab", "n_head", "n_head_kv", "head_dim_k", "head_dim_v", "sliding_window",
    "kv_lora_rank", "rope_dim", "n_experts", "n_experts_used", "first_diff_index", "n_eval",
    "n_p_eval", "dropped_turns", "dropped_tokens", "kept_tokens", "prefix_broken_at", "spec_drafted",
    "spec_accepted", "spec_passes", "spec_plain_steps", "spec_tokens", "spec_accepted_per_pos"))
NAMED = {"t": CLOCK, "created": CLOCK, "started": CLOCK, "measured_at": CLOCK, "time": CLOCK,
         "fraction": (0.0, 1.0), "exitcode": (-255, 255), "token_id": (-(2**31), 2**31),
         "pid": (0, 2**31), "utilization": (0, 100), "seed": (-(2**63), 2**64)}


def number_range(name: str, is_int: bool) -> tuple[float, float]:
    """The sane range of the number in field ``name`` (``ubatches``' elements and a
    dict's values take their container's name)."""
    if name in NAMED:
        return NAMED[name]
    if name in COUNTS:
        return COUNT
    if name.endswith("tok_s"):
        return RATE
    if name.endswith("_s") or name == "seconds" or name.endswith("_ms"):
        return (SECONDS[0] * 1000, SECONDS[1] * 1000) if name.endswith("_ms") else SECONDS
    if name.endswith("_mib"):
        return MIB
    if "bytes" in name or name.startswith("memory_") or name == "process_memory":
        return BYTES
    if name.endswith("gbs") or name == "tflops":
        return PEAK
    return INT if is_int else FLOAT


class _Bad(Exception):
    """A value that does not fit its field: ``str(exc)`` says why, for ``TraceError``."""


def _show(v: object) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:39] + "…"


def _number(v: object, name: str, want_int: bool) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (want_int and not isinstance(v, int)):
        raise _Bad(f"{name} is {_show(v)}, not {'an integer' if want_int else 'a number'}")
    if isinstance(v, float) and not math.isfinite(v):
        raise _Bad(f"{name} is {_show(v)}, not a finite number")
    lo, hi = number_range(name, isinstance(v, int))
    if not lo <= v <= hi:  # int against float bounds: exact in Python, no overflow
        raise _Bad(f"{name} is {v if isinstance(v, float) else _show(v)}, outside {lo:g} … {hi:g}")


def _any(v: object, name: str) -> None:
    """A field typed only ``dict`` or ``Mapping`` (llama_perf_context): its numbers still get checked."""
    if isinstance(v, dict):
        for k, x in v.items():
            _any(x, str(k))
    elif isinstance(v, list):
        for x in v:
            _any(x, name)
    elif isinstance(v, (int, float)) and not isinstance(v, bool):
        _number(v, name, False)
    elif v is not None and not isinstance(v, (str, bool)):
        raise _Bad(f"{name} is {_show(v)}")


@cache
def _hints(cls: type) -> dict[str, typing.Any]:
    return typing.get_type_hints(cls)


def check_value(v: object, hint: typing.Any, name: str) -> None:  # hint: a type, as typing.get_type_hints gives it
    """Raise ``_Bad`` unless ``v`` (from JSON) fits the type ``hint`` of field ``name``."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if v is None:
            if type(None) in args:
                return
            raise _Bad(f"{name} is missing (null)")
        last: _Bad | None = None
        for a in args:
            if a is type(None):
                continue
            try:
                return check_value(v, a, name)
            except _Bad as exc:
                last = exc
        raise last if last is not None else _Bad(f"{name} is {_show(v)}")  # a Union has a non-None arm
    if hint is bool:
        if not isinstance(v, bool):
            raise _Bad(f"{name} is {_show(v)}, not true or false")
    elif hint is int or hint is float:
        _number(v, name, hint is int)
    elif hint is str:
        if not isinstance(v, str):
            raise _Bad(f"{name} is {_show(v)}, not text")
    elif isinstance(hint, type) and is_dataclass(hint):
        if not isinstance(v, dict):
            raise _Bad(f"{name} is {_show(v)}, not an object")
        hints = _hints(hint)
        for key, x in v.items():
            if key in hints:
                check_value(x, hints[key], key)
    elif origin in (tuple, list):
        if not isinstance(v, (list, tuple)):
            raise _Bad(f"{name} is {_show(v)}, not a list")
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis or origin is list:
            for x in v:
                check_value(x, args[0], name)
        elif args:
            if len(v) != len(args):
                raise _Bad(f"{name} has {len(v)} items, not {len(args)}")
            for x, a in zip(v, args):
                check_value(x, a, name)
    elif origin is dict:
        if not isinstance(v, dict):
            raise _Bad(f"{name} is {_show(v)}, not an object")
        for x in v.values():
            check_value(x, typing.get_args(hint)[1], name)
    else:  # dict, Any
        _any(v, name)


def check_record(cls: type, data: dict[str, typing.Any]) -> None:
    """Raise ``_Bad`` unless ``data`` (an asdict() form from JSON) fits ``cls``."""
    check_value(data, cls, cls.__name__)
