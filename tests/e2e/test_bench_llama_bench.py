"""``kvtop bench`` on the demo model, read back as llama-bench's output: the md table's
columns, rows and labels, csv/json/jsonl/sql with llama-bench's fields, positive rates.
With a llama-bench binary built from the same llama.cpp (optional, never built here:
``~/.cache/kvtop-build/llama-bench-<pin>/llama-bench``), the two tables' headers match."""

import csv
import io
import json
import os
import sqlite3
import subprocess
import sys

import pytest
from helpers import cores

from kvtop.runner.commands.bench_output import FIELDS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def bench(*args, timeout=540) -> str:  # a ceiling for a busy machine, under the 600 s per test
    r = subprocess.run([sys.executable, "-m", "kvtop", "bench", *args], capture_output=True, text=True,
                       timeout=timeout, cwd=ROOT)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    return r.stdout


def md_table(text: str) -> tuple[list[str], list[list[str]], list[str]]:
    """(header cells, row cells, every table line) of a llama-bench md table."""
    lines = [x for x in text.splitlines() if x.startswith("|")]
    cells = [[c.strip() for c in x.strip("|").split("|")] for x in lines]
    assert set(cells[1][0]) == {"-"} and all(set(c) <= set("-:") for c in cells[1])
    return cells[0], cells[2:], lines


def rate(cell: str) -> tuple[float, float]:
    avg, sd = cell.split(" ± ")
    return float(avg), float(sd)


def test_md_every_combination_one_row_each_with_llama_benchs_columns(smollm_path):
    out = bench(smollm_path, "-p", "16,32", "-n", "4", "-pg", "8,2", "-d", "0,24", "-r", "2", "-t", "1,2")
    header, rows, lines = md_table(out)
    assert header == ["model", "size", "params", "backend", "threads", "test", "t/s"]
    assert len({len(x) for x in lines}) == 1  # no cell overflows its column
    labels = ["pp16", "pp32", "tg4", "pp8+tg2", "pp16 @ d24", "pp32 @ d24", "tg4 @ d24", "pp8+tg2 @ d24"]
    assert [r[5] for r in rows] == labels * 2
    assert [r[4] for r in rows] == ["1"] * 8 + ["2"] * 8
    assert {tuple(r[:4]) for r in rows} == {("llama 256M Q4_1", "92.10 MiB", "134.52 M", "CPU")}
    assert all(rate(r[6])[0] > 0 and rate(r[6])[1] >= 0 for r in rows)
    after = out.split("\n\n", 1)[1].splitlines()
    assert after[0].startswith("build: llama-cpp-python-") and after[0].endswith(" (0)")
    assert [x.split(",")[0] for x in after[1:]] == ["kvtop: threads 1 (set by -t)", "kvtop: threads 2 (set by -t)"]


def test_md_adds_a_column_for_each_parameter_that_is_not_the_default(smollm_path):
    header, rows, _ = md_table(bench(smollm_path, "-p", "16", "-n", "0", "-r", "1", "-ub", "8,16", "-ctk", "q8_0",
                                     "-fa", "0,1"))
    assert header == ["model", "size", "params", "backend", "threads", "n_ubatch", "type_k", "fa", "test", "t/s"]
    assert [(r[5], r[6], r[7]) for r in rows] == [("8", "q8_0", "0"), ("8", "q8_0", "1"), ("16", "q8_0", "0"),
                                                  ("16", "q8_0", "1")]


def test_csv_json_jsonl_and_sql_carry_llama_benchs_fields(smollm_path):
    args = [smollm_path, "-p", "16", "-n", "4", "-d", "0,32", "-r", "2", "-ctk", "q8_0", "-fa", "1"]
    rows = list(csv.DictReader(io.StringIO(bench(*args, "-o", "csv"))))
    assert list(rows[0]) == list(FIELDS) and len(rows) == 4
    assert [(r["n_prompt"], r["n_gen"], r["n_depth"]) for r in rows] == [("16", "0", "0"), ("0", "4", "0"),
                                                                          ("16", "0", "32"), ("0", "4", "32")]
    assert all(float(r["avg_ts"]) > 0 and int(r["avg_ns"]) > 0 for r in rows)
    assert {(r["type_k"], r["type_v"], r["flash_attn"], r["backends"], r["model_type"]) for r in rows} == \
        {("q8_0", "f16", "1", "CPU", "llama 256M Q4_1")}

    objs = json.loads(bench(*args, "--json"))
    assert [list(o)[:len(FIELDS) + 2] for o in objs] == [list(FIELDS) + ["samples_ns", "samples_ts"]] * 4
    for o in objs:
        n = o["n_prompt"] + o["n_gen"]
        assert len(o["samples_ns"]) == 2 and all(t > 0 for t in o["samples_ts"])
        assert o["samples_ts"] == pytest.approx([1e9 * n / t for t in o["samples_ns"]], rel=1e-6)
        assert o["avg_ts"] == pytest.approx(sum(o["samples_ts"]) / 2, rel=1e-6)
        assert o["model_size"] == 96576768 and o["model_n_params"] == 134515008 and o["n_threads"] >= 1
        assert o["kvtop_process"] == "child" and o["kvtop_kv_bytes_allocated"] > 0
    assert [o["kvtop_ttft_s"] is not None for o in objs] == [True, False, True, False]

    lines = bench(*args, "-r", "1", "-o", "jsonl").splitlines()
    assert [json.loads(x)["n_depth"] for x in lines] == [0, 0, 32, 32]

    db = sqlite3.connect(":memory:")
    db.executescript(bench(*args, "-r", "1", "-o", "sql"))
    got = db.execute("SELECT n_prompt, n_gen, n_depth, avg_ts > 0 FROM llama_bench").fetchall()
    assert got == [(16, 0, 0, 1), (0, 4, 0, 1), (16, 0, 32, 1), (0, 4, 32, 1)]


def test_in_process_measures_the_same_tests(smollm_path):
    (o,) = json.loads(bench(smollm_path, "--in-process", "-p", "0", "-n", "8", "-r", "1", "--json"))
    assert o["kvtop_process"] == "in-process" and o["n_gen"] == 8 and o["avg_ts"] > 0


def llama_bench_binary() -> str | None:
    import re

    pin = re.search(r'"llama-cpp-python==([^"]+)"', open(os.path.join(ROOT, "pyproject.toml")).read())
    cache = os.environ.get("KVTOP_BUILD_CACHE", os.path.expanduser("~/.cache/kvtop-build"))
    path = os.path.join(cache, f"llama-bench-{pin.group(1) if pin else '?'}", "llama-bench")
    return path if os.access(path, os.X_OK) else None


@pytest.mark.skipif(llama_bench_binary() is None, reason="no llama-bench built in ~/.cache/kvtop-build (optional)")
def test_the_table_reads_as_llama_benchs_own(smollm_path):
    args = ["-p", "16", "-n", "4", "-r", "1", "-t", str(cores()), "-ub", "64", "-fa", "0,1"]
    theirs = subprocess.run([llama_bench_binary(), "-m", smollm_path, *args], capture_output=True, text=True,
                            timeout=300).stdout
    ours = bench(smollm_path, *args)
    (h1, r1, l1), (h2, r2, l2) = md_table(theirs), md_table(ours)
    assert h1 == h2 and l1[:2] == l2[:2]  # the same columns, widths and alignment
    assert [r[:-1] for r in r1] == [r[:-1] for r in r2]  # every cell but the rate
