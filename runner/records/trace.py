"""Traces: every engine event of a session as JSON lines, and reading them back.

Format (version 1, documented in docs/trace-format.md):

* line 1: ``{"type": "kvtop-trace", "version": 1, "created": ..., "argv": [...],
  "settings": {...}, "hardware": {...}|null, "facts": {...}|null}``
* then one line per record: ``{"type": "event", "event": "<class>", "data": {...}}``
  for every engine event (timestamps inside ``data`` are the engine's monotonic
  clock), ``{"type": "user", "text": ...}`` when a message is sent, and
  ``{"type": "new_chat"}``.

``read_trace`` validates every line and raises ``TraceError`` with the line number
for anything it cannot use, so a corrupted or truncated trace gives a clear error.
A trace is untrusted input: every field must have its type, and every number must be
finite and in a sane range for its field (``number_range``). A ``1e308`` bandwidth
once became NaN inside a pane and crashed the replay's screen.
"""

from __future__ import annotations

import json
import math
import platform
import threading
import time
import types
import typing
from dataclasses import asdict, fields, is_dataclass
from functools import lru_cache

from runner import events as ev
from runner.system.hardware import CPUProbe, GPUInfo, HardwareProfile
from runner.engine.llama_log import KVBufferLine, LlamaBuffers
from runner.model.facts import LayerShape, ModelFacts
from runner.sanitize import clean_line
from runner.settings import Settings

TRACE_VERSION = 1
EVENT_TYPES = {cls.__name__: cls for cls in (
    ev.LoadProgress, ev.Loaded, ev.LoadFailed, ev.TurnStarted, ev.PrefillProgress, ev.TokenEvent,
    ev.TurnDone, ev.TurnRefused, ev.CacheCleared, ev.EngineError, ev.EngineDied, ev.PromptCache,
    ev.EngineWarning)}


class TraceError(ValueError):
    pass


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
    "n_p_eval"))
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


def _show(v) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:39] + "…"


def _number(v, name: str, want_int: bool) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (want_int and not isinstance(v, int)):
        raise _Bad(f"{name} is {_show(v)}, not {'an integer' if want_int else 'a number'}")
    if isinstance(v, float) and not math.isfinite(v):
        raise _Bad(f"{name} is {_show(v)}, not a finite number")
    lo, hi = number_range(name, isinstance(v, int))
    if not lo <= v <= hi:  # int against float bounds: exact in Python, no overflow
        raise _Bad(f"{name} is {v if isinstance(v, float) else _show(v)}, outside {lo:g} … {hi:g}")


def _any(v, name: str) -> None:
    """A field typed only ``dict`` (llama_perf_context): its numbers still get checked."""
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


@lru_cache(maxsize=None)
def _hints(cls) -> dict:
    return typing.get_type_hints(cls)


def check_value(v, hint, name: str) -> None:
    """Raise ``_Bad`` unless ``v`` (from JSON) fits the type ``hint`` of field ``name``."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if v is None:
            if type(None) in args:
                return
            raise _Bad(f"{name} is missing (null)")
        last = None
        for a in args:
            if a is type(None):
                continue
            try:
                return check_value(v, a, name)
            except _Bad as exc:
                last = exc
        raise last
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


def check_record(cls, data: dict) -> None:
    """Raise ``_Bad`` unless ``data`` (an asdict() form from JSON) fits ``cls``."""
    check_value(data, cls, cls.__name__)


def _plain(obj):
    if is_dataclass(obj):
        return asdict(obj)
    raise TypeError(type(obj).__name__)


def _tuples(v):
    return tuple(_tuples(x) for x in v) if isinstance(v, list) else v


def _build(cls, data: dict):
    """A dataclass from its asdict() form, rebuilding the nested ones kvtop uses."""
    kw = {}
    for f in fields(cls):
        if f.name not in data:
            continue
        v = data[f.name]
        if cls is ev.Loaded and f.name == "buffers":
            v = LlamaBuffers(v["model_mib"], tuple(KVBufferLine(**k) for k in v["kv"]), v["recurrent_mib"],
                             v["compute_mib"], v["output_mib"])
        elif cls is ev.TurnDone and f.name == "metrics":
            v = _build(ev.TurnMetrics, v)
        elif cls is ModelFacts and f.name == "layers":
            v = [LayerShape(**x) for x in v]
        elif cls is HardwareProfile and f.name == "cpu":
            v = CPUProbe(**v) if v else None
        elif cls is HardwareProfile and f.name == "gpus":
            v = tuple(GPUInfo(**g) for g in v)
        elif isinstance(v, list) and cls is not ModelFacts:
            v = _tuples(v)
        kw[f.name] = v
    return cls(**kw)


class TraceWriter:
    """Appends records; thread-safe (events arrive on the worker thread). Flushed per turn."""

    def __init__(self, path: str, header: dict, fh=None):
        """``fh``: the file already created at ``path`` (by ``unique_file``); else ``path``
        is created here, never overwriting an existing file."""
        self.path = path
        self._lock = threading.Lock()
        self._fh = fh if fh is not None else open(path, "x", encoding="utf-8")
        self._write({"type": "kvtop-trace", "version": TRACE_VERSION, "created": time.time(),
                     "host": platform.node(), **header})
        self.flush()

    def _write(self, obj: dict) -> None:
        with self._lock:
            if self._fh is not None:
                self._fh.write(json.dumps(obj, default=_plain, ensure_ascii=False) + "\n")

    def event(self, e) -> None:
        name = type(e).__name__
        if name in EVENT_TYPES:
            # per-token events are flat: their __dict__ is their asdict(), without the deep copy
            data = dict(e.__dict__) if name in ("TokenEvent", "PrefillProgress") else asdict(e)
            self._write({"type": "event", "event": name, "data": data})
            if name in ("TurnDone", "TurnRefused", "Loaded", "EngineDied", "LoadFailed"):
                self.flush()

    def user(self, text: str) -> None:
        self._write({"type": "user", "text": text})

    def new_chat(self) -> None:
        self._write({"type": "new_chat"})

    def flush(self) -> None:
        with self._lock:
            if self._fh is not None:
                self._fh.flush()

    def close(self) -> None:
        with self._lock:
            if self._fh is not None:
                self._fh.close()
                self._fh = None


class Trace:
    def __init__(self, header: dict, records: list[tuple[str, object]]):
        self.header = header
        self.records = records  # ("event", obj) | ("user", text) | ("new_chat", None)

    @property
    def facts(self) -> ModelFacts | None:
        f = self.header.get("facts")
        return _build(ModelFacts, f) if f else None

    @property
    def hardware(self) -> HardwareProfile | None:
        h = self.header.get("hardware")
        return _build(HardwareProfile, h) if h else None

    def settings(self) -> Settings:
        """The recorded settings (fields this kvtop does not know are left out)."""
        return Settings(**{k: v for k, v in self.header.get("settings", {}).items()
                           if k in Settings.__dataclass_fields__})

    def loaded(self) -> ev.Loaded | None:
        for kind, obj in self.records:
            if kind == "event" and isinstance(obj, ev.Loaded):
                return obj
        return None

    def turns(self) -> list[tuple[str, list[object]]]:
        """(user text, that turn's events) in order."""
        out: list[tuple[str, list[object]]] = []
        for kind, obj in self.records:
            if kind == "user":
                out.append((obj, []))
            elif kind == "event" and out and not isinstance(obj, (ev.Loaded, ev.LoadProgress)):
                out[-1][1].append(obj)
        return out


def read_trace(path: str) -> Trace:
    try:
        fh = open(path, encoding="utf-8", errors="strict")
    except OSError as exc:
        raise TraceError(f"{path}: {exc.strerror or exc}") from None
    records: list[tuple[str, object]] = []
    header = None
    with fh:
        try:
            for n, line in enumerate(fh, 1):
                if not line.endswith("\n"):
                    raise TraceError(f"{path}: line {n} is cut short (truncated trace)")
                try:
                    obj = json.loads(line)
                except ValueError as exc:
                    raise TraceError(f"{path}: line {n} is not JSON ({exc.msg})") from None
                if not isinstance(obj, dict):
                    raise TraceError(f"{path}: line {n} is not a JSON object")
                if n == 1:
                    if obj.get("type") != "kvtop-trace":
                        raise TraceError(f"{path}: not a kvtop trace (first line has no kvtop-trace header)")
                    if obj.get("version") != TRACE_VERSION:
                        raise TraceError(f"{path}: trace version {_show(obj.get('version'))}, "
                                         f"this kvtop reads {TRACE_VERSION}")
                    header = _check_header(path, obj)
                    continue
                kind = obj.get("type")
                if kind == "event":
                    cls = EVENT_TYPES.get(obj.get("event"))
                    if cls is None or not isinstance(obj.get("data"), dict):
                        raise TraceError(f"{path}: line {n} has an unknown event {obj.get('event')!r}")
                    try:
                        check_record(cls, obj["data"])
                        records.append(("event", _build(cls, obj["data"])))
                    except _Bad as exc:
                        raise TraceError(f"{path}: line {n}: {cls.__name__}: {exc}") from None
                    except (TypeError, KeyError, AttributeError, ValueError) as exc:
                        raise TraceError(f"{path}: line {n}: bad {cls.__name__} ({exc})") from None
                elif kind == "user":
                    if not isinstance(obj.get("text"), str):
                        raise TraceError(f"{path}: line {n}: a user record without text")
                    records.append(("user", obj["text"]))
                elif kind == "new_chat":
                    records.append(("new_chat", None))
                else:
                    raise TraceError(f"{path}: line {n} has an unknown record type {kind!r}")
        except UnicodeDecodeError:
            raise TraceError(f"{path}: not UTF-8 text") from None
    if header is None:
        raise TraceError(f"{path}: empty trace")
    return Trace(header, records)


def _check_header(path: str, obj: dict) -> dict:
    """Line 1: every recorded number sane; settings, hardware and facts buildable."""
    where = f"{path}: line 1 (header)"
    try:
        if "created" in obj:
            _number(obj["created"], "created", False)
        for key, cls in (("hardware", HardwareProfile), ("facts", ModelFacts)):
            if obj.get(key) is not None:
                check_record(cls, obj[key])
        settings = obj.get("settings", {})
        if not isinstance(settings, dict):
            raise _Bad(f"settings is {_show(settings)}, not an object")
        hints = _hints(Settings)
        for k, v in settings.items():
            if k in hints:
                check_value(v, hints[k], k)
        for key in ("host",):
            if key in obj and not isinstance(obj[key], str):
                raise _Bad(f"{key} is {_show(obj[key])}, not text")
    except _Bad as exc:
        raise TraceError(f"{where}: {exc}") from None
    trace = Trace(obj, [])
    try:
        trace.facts, trace.hardware, trace.settings()
    except (TypeError, KeyError, AttributeError, ValueError) as exc:
        raise TraceError(f"{where}: {clean_line(str(exc), 200)}") from None
    return obj
