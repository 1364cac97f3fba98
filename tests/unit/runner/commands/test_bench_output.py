"""``kvtop bench``'s output as llama-bench writes it: the md table (columns, units, widths),
csv, json, jsonl and sql with llama-bench's fields. No model."""

import csv
import io
import json
import sqlite3

from kvtop.runner.commands.bench_output import (
    FIELDS,
    FIXED,
    Row,
    format_csv,
    format_json,
    format_jsonl,
    format_md,
    format_sql,
    md_fields,
    params_text,
    size_text,
)

# tools/llama-bench/llama-bench.cpp test::get_fields in the llama.cpp llama-cpp-python 0.3.36 vendors
LLAMA_BENCH_FIELDS = [
    "build_commit", "build_number", "cpu_info", "gpu_info", "backends", "model_filename", "model_type",
    "model_size", "model_n_params", "n_batch", "n_ubatch", "n_threads", "cpu_mask", "cpu_strict", "poll",
    "type_k", "type_v", "n_gpu_layers", "n_cpu_moe", "split_mode", "main_gpu", "no_kv_offload", "flash_attn",
    "devices", "tensor_split", "tensor_buft_overrides", "load_mode", "lazy_mode", "embeddings", "no_op_offload",
    "no_host", "repack", "fit_target", "fit_min_ctx", "n_prompt", "n_gen", "n_depth", "test_time", "avg_ns",
    "stddev_ns", "avg_ts", "stddev_ts",
]


def row(n_prompt=128, n_gen=0, n_depth=0, ts=(400.0, 200.0), **over) -> Row:
    n = n_prompt + n_gen
    values = {
        "build_commit": "0c1e570", "build_number": 1, "cpu_info": "AMD EPYC", "gpu_info": "", "backends": "CPU",
        "model_filename": "/m/SmolLM2-135M-Instruct.Q4_1.gguf", "model_type": "llama 256M Q4_1",
        "model_size": 96576768, "model_n_params": 134515008, "n_batch": 512, "n_ubatch": 512, "n_threads": 2,
        "type_k": "f16", "type_v": "f16", "n_gpu_layers": 0, "flash_attn": -1, "load_mode": "auto",
        "n_prompt": n_prompt, "n_gen": n_gen, "n_depth": n_depth, "test_time": "2026-01-01T00:00:00Z", **over,
    }
    return Row.build(values, [round(1e9 * n / t) for t in ts], {"kvtop_process": "child"})


def test_the_fields_are_llama_benchs_in_its_order():
    assert list(FIELDS) == LLAMA_BENCH_FIELDS


def test_rates_are_llama_benchs_mean_and_sample_stddev_of_each_repetitions_rate():
    r = row(128, 0, ts=(400.0, 200.0))
    assert r.samples_ns == [320_000_000, 640_000_000]
    assert r.values["avg_ns"] == 480_000_000 and r.values["stddev_ns"] == 226_274_169
    assert r.values["avg_ts"] == 300.0 and abs(r.values["stddev_ts"] - 141.4213562) < 1e-6
    one = row(0, 16, ts=(50.0,))
    assert one.values["avg_ts"] == 50.0 and one.values["stddev_ts"] == 0.0 and one.values["stddev_ns"] == 0
    pg = row(512, 128, ts=(100.0,))
    assert pg.samples_ns == [6_400_000_000]  # (512 + 128) tokens / 100 t/s


def test_the_md_table_is_llama_benchs():
    """The header, separator and a row as llama-bench 0c1e570 printed them for this model
    (the row's figures are this test's)."""
    text = format_md([row(128), row(0, 16, ts=(150.0, 148.0))], ["pp128", "tg16"],
                     md_fields("CPU", {}), "0c1e570 (1)")
    assert text.splitlines() == [
        "| model                          |       size |     params | backend    | threads |            test |"
        "                  t/s |",
        "| ------------------------------ | ---------: | ---------: | ---------- | ------: | --------------: |"
        " -------------------: |",
        "| llama 256M Q4_1                |  92.10 MiB |   134.52 M | CPU        |       2 |           pp128 |"
        "      300.00 ± 141.42 |",
        "| llama 256M Q4_1                |  92.10 MiB |   134.52 M | CPU        |       2 |            tg16 |"
        "        149.00 ± 1.41 |",
        "",
        "build: 0c1e570 (1)",
    ]


def test_varying_parameters_get_llama_benchs_columns():
    shown = {"n_ubatch": True, "type_k": True, "flash_attn": True}
    assert md_fields("CPU", shown) == ["model", "size", "params", "backend", "n_threads", "n_ubatch", "type_k",
                                       "flash_attn", "test", "t/s"]
    text = format_md([row(64, n_ubatch=128, type_k="q8_0", flash_attn=1)], ["pp64 @ d512"],
                     md_fields("CPU", shown), "x (0)")
    header, sep, line = text.splitlines()[:3]
    assert header.endswith("| threads | n_ubatch | type_k |  fa |            test |                  t/s |")
    assert line.endswith("|       2 |      128 |   q8_0 |   1 |     pp64 @ d512 |      300.00 ± 141.42 |")
    # a GPU backend shows ngl and no threads unless -t varies; a server's unknown backend neither
    assert md_fields("CUDA", {}) == ["model", "size", "params", "backend", "n_gpu_layers", "test", "t/s"]
    assert md_fields("CUDA", {"n_threads": True})[4:6] == ["n_gpu_layers", "n_threads"]
    assert md_fields("?", {}) == ["model", "size", "params", "backend", "test", "t/s"]
    assert "n_gpu_layers" in md_fields("CPU", {"n_gpu_layers": True})


def test_columns_widen_to_fit_what_they_hold():
    long_model = "qwen3moe 30B.A3B Q4_K - Medium (long)"
    text = format_md([row(512, model_type=long_model, ts=(2_000_000.0, 1_000_000.0))], ["pp512+tg128 @ d16384"],
                     md_fields("CPU", {}), "x (0)")
    lines = text.splitlines()[:3]
    assert len({len(line) for line in lines}) == 1, lines  # every line as wide: nothing overflows
    assert f"| {long_model} |" in lines[2] and "| pp512+tg128 @ d16384 |" in lines[2]
    assert "| 1500000.00 ± 707106.78 |" in lines[2]  # 23 characters: wider than llama-bench's 20


def test_size_and_params_are_llama_benchs_units():
    assert size_text(96576768) == "92.10 MiB" and size_text(4_920_000_000) == "4.58 GiB"
    assert params_text(134515008) == "134.52 M" and params_text(8_030_261_248) == "8.03 B"
    assert size_text(None) == "?" and params_text(0) == "?"


def test_csv_has_llama_benchs_header_and_quoted_values():
    text = format_csv([row(128), row(0, 16, ts=(150.0, 148.0))])
    lines = text.splitlines()
    assert lines[0] == ",".join(LLAMA_BENCH_FIELDS)
    assert lines[1].startswith('"0c1e570","1","AMD EPYC","","CPU",')
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [r["n_prompt"] for r in rows] == ["128", "0"] and [r["n_gen"] for r in rows] == ["0", "16"]
    assert rows[0]["avg_ts"] == "300.000000" and rows[0]["no_kv_offload"] == "0" and rows[0]["repack"] == "1"
    assert rows[0]["flash_attn"] == "-1" and rows[0]["tensor_split"] == "0.00"


def test_json_and_jsonl_have_llama_benchs_fields_types_and_samples_then_kvtops():
    (obj,) = json.loads(format_json([row(128)]))
    assert list(obj)[:len(FIELDS)] == LLAMA_BENCH_FIELDS
    assert list(obj)[len(FIELDS):] == ["samples_ns", "samples_ts", "kvtop_process"]
    assert obj["samples_ns"] == [320000000, 640000000] and obj["samples_ts"] == [400.0, 200.0]
    assert obj["cpu_strict"] is False and obj["repack"] is True and obj["n_threads"] == 2
    assert obj["avg_ts"] == 300.0 and obj["model_type"] == "llama 256M Q4_1"
    lines = format_jsonl([row(128), row(0, 16)]).splitlines()
    assert [json.loads(x)["n_gen"] for x in lines] == [0, 16]


def test_unknown_values_are_null_or_empty_not_zero():
    """A server's threads and batch sizes are its own, unpublished: unknown, not 0."""
    r = row(64, n_threads=None, n_batch=None, n_ubatch=None, n_gpu_layers=None, flash_attn=None, backends="?")
    (obj,) = json.loads(format_json([r]))
    assert obj["n_threads"] is None and obj["flash_attn"] is None
    assert list(csv.DictReader(io.StringIO(format_csv([r]))))[0]["n_threads"] == ""
    line = format_md([r], ["pp64"], md_fields("?", {}), "x (0)").splitlines()[2]
    assert "| ?          |" in line


def test_sql_loads_into_sqlite_as_llama_benchs_table():
    db = sqlite3.connect(":memory:")
    db.executescript(format_sql([row(128), row(0, 16, model_type="it's")]))
    got = db.execute("SELECT n_prompt, n_gen, avg_ts, model_type FROM llama_bench ORDER BY n_gen").fetchall()
    assert got == [(128, 0, 300.0, "llama 256M Q4_1"), (0, 16, 300.0, "it's")]


def test_fixed_fields_are_llama_benchs_defaults():
    assert FIXED["split_mode"] == "layer" and FIXED["devices"] == "auto" and FIXED["poll"] == 50
    assert row().values["cpu_mask"] == "0x0"


def test_the_backend_is_named_as_llama_bench_names_it():
    from kvtop.runner.engine.ggml_devices import backend_label, build_facts, registries_from_system_info

    assert backend_label(["CPU"]) == "CPU" and backend_label([]) == "CPU"
    assert backend_label(["CUDA", "CPU"]) == "CUDA" and backend_label(["Metal", "BLAS", "CPU"]) == "Metal,BLAS"
    assert backend_label(["CPU", "RPC"]) == "CPU"
    assert backend_label(["CUDA", "CPU", "RPC"], rpc_devices=True) == "CUDA,RPC"
    info = "CPU : SSE3 = 1 | AVX2 = 1 | CUDA : ARCHS = 890 | USE_GRAPHS = 1 | "
    assert registries_from_system_info(info) == ["CPU", "CUDA"]
    facts = build_facts()  # this process's llama.cpp, through ggml's registry
    assert facts.backends and facts.cpu_info  # every build has the CPU backend and its device
