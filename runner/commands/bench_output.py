"""``kvtop bench``'s output in llama-bench's formats: md (the default), csv, json, jsonl, sql.

Field names, their order, their types and the markdown table follow llama-bench
(``tools/llama-bench/llama-bench.cpp`` in the llama.cpp that llama-cpp-python vendors:
``test::get_fields``, ``get_field_type``, ``markdown_printer``), so its readers
(``scripts/compare-llama-bench.py``, a spreadsheet of csv rows) read kvtop's too. json
and jsonl rows add kvtop's own figures under ``kvtop_*`` names after llama-bench's
(those readers drop keys they do not know); csv and sql hold llama-bench's fields only.
"""

from __future__ import annotations

import csv
import io
import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import argparse

    from kvtop.runner.events import Loaded

# test::get_fields, in order
FIELDS = (
    "build_commit", "build_number", "cpu_info", "gpu_info", "backends",
    "model_filename", "model_type", "model_size", "model_n_params", "n_batch",
    "n_ubatch", "n_threads", "cpu_mask", "cpu_strict", "poll",
    "type_k", "type_v", "n_gpu_layers", "n_cpu_moe", "split_mode",
    "main_gpu", "no_kv_offload", "flash_attn", "devices", "tensor_split",
    "tensor_buft_overrides", "load_mode", "lazy_mode",
    "embeddings",
    "no_op_offload", "no_host", "repack", "fit_target", "fit_min_ctx",
    "n_prompt", "n_gen", "n_depth",
    "test_time", "avg_ns", "stddev_ns", "avg_ts", "stddev_ts",
)
INT_FIELDS = frozenset((
    "build_number", "n_batch", "n_ubatch", "n_threads", "poll", "model_size", "model_n_params", "n_gpu_layers",
    "main_gpu", "n_prompt", "n_gen", "n_depth", "avg_ns", "stddev_ns", "no_op_offload", "n_cpu_moe",
    "fit_target", "fit_min_ctx", "flash_attn"))
BOOL_FIELDS = frozenset(("no_kv_offload", "cpu_strict", "embeddings", "no_host", "repack"))
FLOAT_FIELDS = frozenset(("avg_ts", "stddev_ts"))

# What llama-bench writes for the settings kvtop does not vary (its defaults).
FIXED = {
    "cpu_mask": "0x0", "cpu_strict": False, "poll": 50, "n_cpu_moe": 0, "split_mode": "layer", "main_gpu": 0,
    "no_kv_offload": False, "devices": "auto", "tensor_split": "0.00", "tensor_buft_overrides": "none",
    "lazy_mode": "auto", "embeddings": False, "no_op_offload": 0, "no_host": False, "repack": True,
    "fit_target": 0, "fit_min_ctx": 0,
}
FA_NUMBER = {"auto": -1, "off": 0, "on": 1}  # llama_flash_attn_type


def field_type(name: str) -> str:
    if name in INT_FIELDS:
        return "int"
    if name in BOOL_FIELDS:
        return "bool"
    if name in FLOAT_FIELDS:
        return "float"
    return "str"


def mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def stdev(xs: Sequence[float]) -> float:
    """llama-bench's: the sample standard deviation, 0 for fewer than two."""
    return statistics.stdev(xs) if len(xs) > 1 else 0.0


@dataclass
class Row:
    """One test's result: llama-bench's fields (None where kvtop cannot know, e.g. a
    server's threads), its samples, and kvtop's own figures."""

    values: dict[str, Any]  # llama-bench's fields: numbers, text, None
    samples_ns: list[int]
    extras: dict[str, object] = field(default_factory=dict)

    @property
    def samples_ts(self) -> list[float]:
        n = self.values["n_prompt"] + self.values["n_gen"]
        return [1e9 * n / t for t in self.samples_ns]

    @classmethod
    def build(cls, values: Mapping[str, object], samples_ns: list[int],
              extras: Mapping[str, object] | None = None) -> Row:
        row = cls({**FIXED, **values}, list(samples_ns), dict(extras or {}))
        ts = row.samples_ts
        row.values.update(avg_ns=int(mean(samples_ns)), stddev_ns=int(stdev(samples_ns)),
                          avg_ts=mean(ts), stddev_ts=stdev(ts))
        missing = [f for f in FIELDS if f not in row.values]
        if missing:
            raise ValueError(f"bench row without {', '.join(missing)}")
        return row


def text_value(name: str, v: Any) -> str:
    """A value as llama-bench's ``get_values`` writes it (csv, sql): ints, bools as 0/1,
    floats with six decimals; "" for unknown."""
    if v is None:
        return ""
    kind = field_type(name)
    if kind == "bool":
        return "1" if v else "0"
    if kind == "float":
        return f"{v:.6f}"
    return str(v)


def json_value(name: str, v: Any) -> object:
    if v is None:
        return None
    kind = field_type(name)
    if kind == "bool":
        return bool(v)
    if kind == "float":
        return round(float(v), 6)
    if kind == "int":
        return int(v)
    return str(v)


def json_object(row: Row) -> dict[str, object]:
    out = {name: json_value(name, row.values[name]) for name in FIELDS}
    out["samples_ns"] = list(row.samples_ns)
    out["samples_ts"] = [round(x, 6) for x in row.samples_ts]
    out.update(row.extras)
    return out


def format_json(rows: list[Row]) -> str:
    return json.dumps([json_object(r) for r in rows], indent=2, allow_nan=False)


def format_jsonl(rows: list[Row]) -> str:
    return "\n".join(json.dumps(json_object(r), allow_nan=False) for r in rows)


def format_csv(rows: list[Row]) -> str:
    buf = io.StringIO()
    buf.write(",".join(FIELDS) + "\n")
    w = csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n")
    for r in rows:
        w.writerow([text_value(f, r.values[f]) for f in FIELDS])
    return buf.getvalue().rstrip("\n")


def format_sql(rows: list[Row]) -> str:
    sql_type = {"str": "TEXT", "bool": "INTEGER", "int": "INTEGER", "float": "REAL"}
    out = ["CREATE TABLE IF NOT EXISTS llama_bench ("]
    out += [f"  {f} {sql_type[field_type(f)]}{',' if i < len(FIELDS) - 1 else ''}" for i, f in enumerate(FIELDS)]
    out += [");", ""]
    for r in rows:
        vals = ", ".join("'" + text_value(f, r.values[f]).replace("'", "''") + "'" for f in FIELDS)
        out.append(f"INSERT INTO llama_bench ({', '.join(FIELDS)}) VALUES ({vals});")
    return "\n".join(out)


# ------------------------------------------------------------------ markdown

DISPLAY = {"n_gpu_layers": "ngl", "n_threads": "threads", "flash_attn": "fa"}
WIDTH = {"model": -30, "t/s": 20, "size": 10, "params": 10, "n_gpu_layers": 3, "n_threads": 7, "n_batch": 7,
         "n_ubatch": 8, "type_k": 6, "type_v": 6, "flash_attn": 3, "test": 15,  # < 0: left-aligned
         "spec_type": -12, "drafted": 7, "accepted": 8, "acceptance": 10, "speedup": 7}  # kvtop bench --spec-type


def size_text(n_bytes: int | None) -> str:
    """llama-bench's size column: MiB under 1 GiB, else GiB."""
    if not n_bytes:
        return "?"
    if n_bytes < 1024 ** 3:
        return f"{n_bytes / 1024 / 1024:.2f} MiB"
    return f"{n_bytes / 1024 ** 3:.2f} GiB"


def params_text(n: int | None) -> str:
    if not n:
        return "?"
    if n < 1_000_000_000:
        return f"{n / 1e6:.2f} M"
    return f"{n / 1e9:.2f} B"


def rate_text(avg_ts: float, stddev_ts: float) -> str:
    return f"{avg_ts:.2f} ± {stddev_ts:.2f}"


def md_fields(backend: str, shown: dict[str, bool]) -> list[str]:
    """llama-bench's columns: model, size, params, backend; ngl off the CPU; threads on
    the CPU; a parameter's column when its list is not kvtop's default (``shown``); then
    test and t/s."""
    cpu = any(b in backend for b in ("CPU", "BLAS", "ZenDNN"))
    out = ["model", "size", "params", "backend"]
    if (not cpu and backend != "?") or shown.get("n_gpu_layers"):
        out.append("n_gpu_layers")
    if cpu or shown.get("n_threads"):
        out.append("n_threads")
    out += [f for f in ("n_batch", "n_ubatch", "type_k", "type_v", "flash_attn") if shown.get(f)]
    return out + ["test", "t/s"]


def md_cell(name: str, r: Row, test_label: str) -> str:
    v = r.values
    if name == "model":
        return str(v["model_type"])
    if name == "size":
        return size_text(v["model_size"])
    if name == "params":
        return params_text(v["model_n_params"])
    if name == "backend":
        return str(v["backends"])
    if name == "test":
        return test_label
    if name == "t/s":
        return rate_text(v["avg_ts"], v["stddev_ts"])
    return "?" if v[name] is None else text_value(name, v[name])


def format_md(rows: list[Row], labels: list[str], fields: list[str], build: str) -> str:
    """The table, each column as wide as llama-bench makes it or as its widest cell,
    then llama-bench's ``build:`` line."""
    cells = [[md_cell(f, r, lab) for f in fields] for r, lab in zip(rows, labels)]
    widths = []
    for i, f in enumerate(fields):
        w = WIDTH.get(f, max(len(f), 10) * (-1 if field_type(f) == "str" else 1))
        need = max([len(DISPLAY.get(f, f))] + [len(c[i]) for c in cells])
        widths.append(-max(-w, need) if w < 0 else max(w, need))

    def line(values: Sequence[str]) -> str:
        return "|" + "".join(f" {v:<{-w}} |" if w < 0 else f" {v:>{w}} |" for v, w in zip(values, widths))

    out = [line([DISPLAY.get(f, f) for f in fields]),
           "|" + "".join(f" {'-' * (abs(w) - 1)}{'-' if w < 0 else ':'} |" for w in widths)]
    out += [line(c) for c in cells]
    return "\n".join(out + ["", f"build: {build}"])


FORMATS = ("md", "csv", "json", "jsonl", "sql")


def build_of(loaded: Loaded) -> tuple[str, int]:
    """llama-bench's build_commit and build_number: a server's from its build_info
    ("b6123-1a2b3c4"); here, the llama-cpp-python that vendors llama.cpp."""
    if loaded.server:
        info = loaded.build_info or "?"
        head, _, commit = info.partition("-")
        if head[:1] == "b" and head[1:].isdigit() and commit:
            return commit, int(head[1:])
        return info, 0
    import llama_cpp

    return f"llama-cpp-python-{llama_cpp.__version__}", 0


def model_type_of(loaded: Loaded) -> str:
    """llama-bench's model_type: ``llama_model_desc`` ("llama 256M Q4_1"), as the engine
    reports it. A server does not publish it: the architecture and file type from the
    GGUF header when its model file is readable here (the size label needs the model
    loaded), else the architecture the server names."""
    if not loaded.server:
        return loaded.description
    from kvtop.runner.model.inspect import ModelFileError, load_facts

    try:
        f = load_facts(loaded.path)
        return f"{f.architecture} {f.file_type}"
    except (ModelFileError, OSError, ValueError):
        return loaded.architecture


def model_fields(loaded: Loaded) -> dict[str, object]:
    """llama-bench's model_type, model_size and model_n_params: the engine's; a server's
    size and parameters from the model's facts when its GGUF or served folder is readable
    here (vLLM publishes neither), else unknown."""
    out: dict[str, object] = {"model_type": model_type_of(loaded), "model_size": loaded.model_bytes or None,
                              "model_n_params": loaded.n_params or None}
    if loaded.server and not loaded.model_bytes:
        from kvtop.runner.model.inspect import ModelFileError, load_facts

        try:
            f = load_facts(loaded.path)
        except (ModelFileError, OSError, ValueError):
            return out
        out["model_size"], out["model_n_params"] = f.weights_bytes, f.n_params
    return out


def load_note(loaded: Loaded, threads_why: str, a: argparse.Namespace) -> str:
    """kvtop's line under the md table for one load: what llama-bench's columns leave out."""
    if loaded.server:
        engine = loaded.description.split(" ")[0] or "the server"  # "llama-server …" or "vLLM 0.32.0"
        seqs = "slots" if engine == "llama-server" else "sequences at most"
        return (f"kvtop: through {engine} {loaded.server} ({loaded.build_info}), {loaded.total_slots} {seqs}; "
                f"threads, batch sizes and KV types are the server's own")
    b = loaded.buffers
    process = "in this process" if a.in_process else "in kvtop's engine process"
    return (f"kvtop: threads {loaded.n_threads} ({threads_why}), batch threads {loaded.n_threads_batch}, "
            f"n_batch {loaded.n_batch}, n_ubatch {loaded.n_ubatch}, n_ctx {loaded.n_ctx}, ctk {loaded.type_k}, "
            f"ctv {loaded.type_v}, flash_attn {loaded.flash_attn}, ngl {loaded.n_gpu_layers}; KV {b.kv_mib:.2f} MiB, "
            f"weights {b.weights_mib:.2f} MiB, compute {b.compute_total_mib:.2f} MiB; {process}")
