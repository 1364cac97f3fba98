"""Traces: every engine event of a session as JSON lines, and reading them back.

Format (version 1, documented in docs/trace-format.md):

* line 1: ``{"type": "kvtop-trace", "version": 1, "created": ..., "argv": [...],
  "settings": {...}, "hardware": {...}|null, "facts": {...}|null}``
* then one line per record: ``{"type": "event", "event": "<class>", "data": {...}}``
  for every engine event (timestamps inside ``data`` are the engine's monotonic
  clock), ``{"type": "user", "text": ...}`` when a message is sent, and
  ``{"type": "new_chat"}``, and ``{"type": "undo_new_chat"}`` when the chat a new chat
  put aside was brought back (Ctrl+Z).

``read_trace`` validates every line and raises ``TraceError`` with the line number
for anything it cannot use, so a corrupted or truncated trace gives a clear error.
A trace is untrusted input: every field must have its type, and every number must be
finite and in a sane range for its field (``number_range``). A ``1e308`` bandwidth
once became NaN inside a pane and crashed the replay's screen.
"""

from __future__ import annotations

import json
import os
import platform
import threading
import time
from collections.abc import Iterable
from dataclasses import asdict, fields, is_dataclass
from typing import TYPE_CHECKING, Any, TextIO, TypeVar, cast

from kvtop.runner import events as ev
from kvtop.runner.llama_buffers import KVBufferLine, LlamaBuffers
from kvtop.runner.model.facts import LayerShape, ModelFacts
from kvtop.runner.records.trace_check import _Bad, _hints, _number, _show, check_record, check_value, number_range  # noqa: F401 (number_range: the ranges, for callers)
from kvtop.runner.redact import scrub_argv, scrub_json
from kvtop.runner.sanitize import clean_line
from kvtop.runner.settings import Settings
from kvtop.runner.system.cpu_probe import CPUProbe
from kvtop.runner.system.hardware import GPUInfo, HardwareProfile

TRACE_VERSION = 1
EVENT_TYPES = {cls.__name__: cls for cls in (
    ev.LoadProgress, ev.Loaded, ev.LoadFailed, ev.TurnStarted, ev.PrefillProgress, ev.TokenEvent,
    ev.TurnDone, ev.TurnRefused, ev.CacheCleared, ev.EngineError, ev.EngineDied, ev.PromptCache,
    ev.EngineWarning, ev.ContextShifted, ev.KldMeasured)}


class TraceError(ValueError):
    pass


if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    from kvtop.runner.calibration.forecast import Forecast

D = TypeVar("D", bound="DataclassInstance")


def _plain(obj: object) -> dict[str, Any]:
    if is_dataclass(obj) and not isinstance(obj, type):
        return asdict(obj)
    raise TypeError(type(obj).__name__)


def _tuples(v: object) -> object:
    return tuple(_tuples(x) for x in v) if isinstance(v, list) else v


def _build(cls: type[D], data: dict[str, Any]) -> D:
    """A dataclass from its asdict() form, rebuilding the nested ones kvtop uses."""
    kw: dict[str, object] = {}
    for f in fields(cls):
        if f.name not in data:
            continue
        v = data[f.name]
        if cls is ev.Loaded and f.name == "buffers":
            v = LlamaBuffers(v["model_mib"], tuple(KVBufferLine(**k) for k in v["kv"]), v["recurrent_mib"],
                             v["compute_mib"], v["output_mib"],
                             v.get("weights_mapped") if isinstance(v.get("weights_mapped"), bool) else None)
        elif cls is ev.TurnDone and f.name == "metrics":
            v = _build(ev.TurnMetrics, v)
        elif cls is ev.KldMeasured and f.name == "pairs":
            v = tuple(_build(ev.KldPair, p) for p in v)
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
    """Appends records; thread-safe (events arrive on the worker thread). Flushed per turn.
    Every line passes ``runner.redact.scrub_json``: no API key or URL login is written."""

    def __init__(self, path: str, header: dict[str, Any], fh: TextIO | None = None):
        """``fh``: the file already created at ``path`` (by ``unique_file``); else ``path``
        is created here, never overwriting an existing file."""
        self.path = path
        self._lock = threading.Lock()
        self._fh: TextIO | None = fh if fh is not None else open(path, "x", encoding="utf-8")
        header = {**header, "argv": scrub_argv(header["argv"])} if "argv" in header else header
        self._write({"type": "kvtop-trace", "version": TRACE_VERSION, "created": time.time(),
                     "host": platform.node(), **header})
        self.flush()

    def _write(self, obj: dict[str, object]) -> None:
        with self._lock:
            if self._fh is not None:
                self._fh.write(scrub_json(json.dumps(obj, default=_plain, ensure_ascii=False)) + "\n")

    def event(self, e: object) -> None:
        name = type(e).__name__
        if name in EVENT_TYPES:
            # per-token events are flat: their __dict__ is their asdict(), without the deep copy
            flat = name in ("TokenEvent", "PrefillProgress")
            data = dict(e.__dict__) if flat else asdict(cast("DataclassInstance", e))  # an EVENT_TYPES dataclass
            self._write({"type": "event", "event": name, "data": data})
            if name in ("TurnDone", "TurnRefused", "Loaded", "EngineDied", "LoadFailed"):
                self.flush()

    def user(self, text: str) -> None:
        self._write({"type": "user", "text": text})

    def new_chat(self) -> None:
        self._write({"type": "new_chat"})

    def undo_new_chat(self) -> None:
        """The chat the last new chat put aside is back (and the one then on screen aside)."""
        self._write({"type": "undo_new_chat"})

    def cpu(self, turn_id: int, others_cpu: float) -> None:
        """Other processes' share of the CPU during a turn, as the live verdict named it."""
        self._write({"type": "cpu", "turn_id": turn_id, "others_cpu": others_cpu})

    def forecast(self, forecast: dict[str, object]) -> None:
        """The forecast shown when a turn started (runner.calibration.forecast.Forecast)."""
        self._write({"type": "forecast", "forecast": forecast})

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
    def __init__(self, header: dict[str, Any], records: list[tuple[str, object]]):
        self.header = header
        self.records = records  # ("event", obj) | ("user", text) | ("new_chat" | "undo_new_chat", None)

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
        known: dict[str, Any] = {k: _tuples(v)  # JSON made the tuples lists
                                 for k, v in self.header.get("settings", {}).items()
                                 if k in Settings.__dataclass_fields__}
        return Settings(**known)

    def loaded(self) -> ev.Loaded | None:
        for kind, obj in self.records:
            if kind == "event" and isinstance(obj, ev.Loaded):
                return obj
        return None

    def turns(self) -> list[tuple[str, list[object]]]:
        """(user text, that turn's events) in order."""
        out: list[tuple[str, list[object]]] = []
        for kind, obj in self.records:
            if kind == "user" and isinstance(obj, str):
                out.append((obj, []))
            elif kind == "event" and out and not isinstance(obj, (ev.Loaded, ev.LoadProgress)):
                out[-1][1].append(obj)
        return out


def read_trace(path: str) -> Trace:
    """A trace file, or the trace a Ctrl+E debug bundle embeds (``kvtop replay BUNDLE``)."""
    try:
        fh = open(path, encoding="utf-8", errors="strict")
    except OSError as exc:
        raise TraceError(f"{path}: {exc.strerror or exc}") from None
    with fh:
        try:
            return parse_records(path, (_json_line(path, n, line) for n, line in enumerate(fh, 1)))
        except UnicodeDecodeError:
            raise TraceError(f"{path}: not UTF-8 text") from None
        except _Bundle:  # pretty-printed JSON, or one line with the bundle's version key
            return read_bundle_trace(path)


class _Bundle(Exception):
    pass


# the writer (runner/commands/bundle.py) embeds at most its TRACE_LIMIT of trace, grown by
# redaction, and an SVG
BUNDLE_LIMIT = 512 * 2**20


def read_bundle_trace(path: str) -> Trace:
    """The trace a debug bundle embeds, checked as ``read_trace`` checks a trace file."""
    try:
        if os.path.getsize(path) > BUNDLE_LIMIT:
            raise TraceError(f"{path}: over {BUNDLE_LIMIT // 2**20} MiB: not a kvtop debug bundle")
        with open(path, encoding="utf-8", errors="strict") as fh:
            data = json.load(fh)
    except OSError as exc:
        raise TraceError(f"{path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise TraceError(f"{path}: not UTF-8 text") from None
    except ValueError as exc:
        raise TraceError(f"{path}: neither a kvtop trace nor a debug bundle (not JSON: "
                         f"{getattr(exc, 'msg', 'bad value')})") from None
    except RecursionError:
        raise TraceError(f"{path}: nested too deep: not a kvtop debug bundle") from None
    if not isinstance(data, dict) or "kvtop_bundle_version" not in data:
        raise TraceError(f"{path}: not a kvtop trace (first line has no kvtop-trace header)")
    records = data.get("trace")
    if not isinstance(records, list) or not records:
        raise TraceError(f"{path}: this debug bundle holds no trace (its session recorded none)")
    return parse_records(f"{path} (the bundle's trace)", enumerate(records, 1))


def _json_line(path: str, n: int, line: str) -> tuple[int, object]:
    try:
        obj, error = json.loads(line), None
    except ValueError as exc:  # a JSONDecodeError says where; too many digits for int() only what
        obj, error = None, exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
    if n == 1 and (line.strip() == "{" or isinstance(obj, dict) and "kvtop_bundle_version" in obj):
        raise _Bundle()
    if not line.endswith("\n"):
        raise TraceError(f"{path}: line {n} is cut short (truncated trace)")
    if error is not None:
        raise TraceError(f"{path}: line {n} is not JSON ({error})")
    return n, obj


def parse_records(path: str, numbered: Iterable[tuple[int, object]]) -> Trace:
    """A ``Trace`` from its lines as (line number, JSON value), each checked."""
    records: list[tuple[str, object]] = []
    header: dict[str, Any] | None = None
    for n, obj in numbered:
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
            cls = EVENT_TYPES.get(str(obj.get("event")))
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
        elif kind in ("new_chat", "undo_new_chat"):
            records.append((kind, None))
        elif kind == "forecast":
            records.append(("forecast", parse_forecast(path, n, obj.get("forecast"))))
        elif kind == "cpu":
            tid, share = obj.get("turn_id"), obj.get("others_cpu")
            if not (isinstance(tid, int) and not isinstance(tid, bool) and tid >= 0
                    and isinstance(share, (int, float)) and not isinstance(share, bool) and 0 <= share <= 1):
                raise TraceError(f"{path}: line {n}: a cpu record needs a turn_id and an others_cpu from 0 to 1")
            records.append(("cpu", (tid, float(share))))
        else:
            raise TraceError(f"{path}: line {n} has an unknown record type {kind!r}")
    if header is None:
        raise TraceError(f"{path}: empty trace")
    return Trace(header, records)


def parse_forecast(path: str, n: int, data: object) -> Forecast:
    """A forecast record, every number finite and in range, or ``TraceError``."""
    from dataclasses import fields

    from kvtop.runner.calibration.forecast import Forecast

    names = {f.name for f in fields(Forecast)}
    # at today's load, and the threads a turn ran on at it; the 80% interval: older traces lack them
    optional = {"quiet_ttft_s", "quiet_reply_s", "others_cpu", "free_cores", "threads", "ttft_s_low", "ttft_s_high",
                "decode_tok_s_low", "decode_tok_s_high", "interval_n", "remote_load"}
    if (not isinstance(data, dict) or not names - optional <= set(data) <= names
            or data.get("basis") not in ("calibrated", "roofline")):
        raise TraceError(f"{path}: line {n}: a forecast record that is not one")
    threads = data.get("threads")
    if threads is not None:  # (decode, prefill) threads, JSON's list
        if not (isinstance(threads, list) and len(threads) == 2
                and all(isinstance(t, int) and not isinstance(t, bool) and 1 <= t <= 4096 for t in threads)):
            raise TraceError(f"{path}: line {n}: forecast threads {_show(threads)} are not two thread counts")
        data = {**data, "threads": tuple(threads)}
    if not isinstance(data.get("remote_load", False), bool):
        raise TraceError(f"{path}: line {n}: forecast remote_load {_show(data['remote_load'])} is not true or false")
    for name in set(data) - {"basis", "cached_tokens", "threads", "remote_load"}:
        v = data[name]
        if v is not None and not (isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1e12):
            raise TraceError(f"{path}: line {n}: forecast {name} {_show(v)} is not a count or time")
    c = data["cached_tokens"]
    if c is not None and not (isinstance(c, int) and not isinstance(c, bool) and 0 <= c < 1e12):
        raise TraceError(f"{path}: line {n}: forecast cached_tokens {_show(c)} is not a count")
    return Forecast(**data)


def _check_header(path: str, obj: dict[str, Any]) -> dict[str, Any]:
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
