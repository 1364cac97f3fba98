"""``kvtop load`` against the real llama-server (4 slots, the demo model): rows for 1 and
4 users where each user's rate falls (the four shared the server's steps) and the total
holds, the tokens kvtop counts equal to the server's own ``tokens_predicted_total``
growth, ordered percentiles, and Ctrl+C in the middle of a level leaving no slot busy.

Why the total is not asserted to rise: each test worker owns one core, so the server
runs one thread, and one CPU thread decoding SmolLM2 is compute-bound, not
bandwidth-bound. Measured here, 4 runs each: one thread, 1 user 43-47 tok/s and 4 users
44-49 tok/s in total (12-13 each); two threads, 55-65 and 80-90. The CI run of
2026-12-01 saw 23.4 and 21.6 (a busy core). Batching pays where a step reads the weights
from memory faster than one core computes on them; bench/load_vs_independent.py prints
the total per level (1, 2, 4 users) on whatever threads it is given."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from llama_server import get_json, llama_server

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def four_slots(llama_server_bin, smollm_path, tmp_path_factory):
    with llama_server(llama_server_bin, smollm_path, slots=4, ctx=1024,
                      log_dir=str(tmp_path_factory.mktemp("srv"))) as s:
        yield s[0]


def predicted_total(url: str) -> float:
    with urllib.request.urlopen(url + "/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("llamacpp:tokens_predicted_total"):
                return float(line.split()[-1])
    raise AssertionError("no tokens_predicted_total in /metrics")


def kvtop_load(*args, **kw):
    return subprocess.run([sys.executable, "-m", "tui", "load", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=kw.get("timeout", 400))


def test_rows_for_one_and_four_users(four_slots):
    before = predicted_total(four_slots)
    r = kvtop_load(four_slots, "--users", "1,4", "-p", "16", "-n", "16", "--requests", "1", "-o", "json",
                   "--no-warmup", "--quiet")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    server_delta = predicted_total(four_slots) - before
    one, four = rows
    assert (one["users"], four["users"]) == (1, 4)
    assert (one["completed"], four["completed"], one["failed"] + four["failed"]) == (1, 4, 0)
    assert one["generated_tokens"] == 16 and four["generated_tokens"] == 4 * 16
    counted = one["generated_tokens"] + four["generated_tokens"]
    assert abs(counted - server_delta) <= 0.05 * server_delta, (counted, server_delta)
    assert abs(four["server_generated_tokens"] - four["generated_tokens"]) <= 0.05 * four["generated_tokens"]
    assert one["prompt_tokens"] == 16 and four["prompt_tokens"] == 16  # exact, as the server counted them
    # four conversations shared each step: each one streamed at well under one user's rate
    # (a quarter on a compute-bound thread, more where batching pays; the server's timings)
    assert four["per_user_gen_tok_s"] < 0.75 * one["per_user_gen_tok_s"], (one, four)
    # ... and they ran together, not one after another: the total did not fall to a quarter
    assert four["gen_tok_s"] > 0.5 * one["gen_tok_s"], (one, four)
    assert four["gen_tok_s"] <= 4 * four["per_user_gen_tok_s"] * 1.25, four  # the window holds the steps
    for row in rows:
        for name in ("ttft", "itl"):
            p50, p95, p99 = (row[f"{name}_p{q}_s"] for q in (50, 95, 99))
            assert 0 < p50 <= p95 <= p99, row
        assert row["e2e_p50_s"] >= row["ttft_p50_s"]
        assert row["kv_cells_used"] is not None and row["kv_cells_used"] <= row["users"] * (16 + 16 + 1)
        assert row["batched_roof_tok_s"] is None or row["batched_roof_tok_s"] > row["gen_tok_s"] * 0.1
    assert four["kv_cells_used"] > 0  # /slots polled every 0.5 s saw the four conversations' cells


def test_the_md_table_and_its_notes(four_slots, tmp_path):
    svg = tmp_path / "load.svg"
    r = kvtop_load(four_slots, "--users", "1,2", "-p", "16", "-n", "8", "--requests", "1", "--no-tui",
                   "--slo-tok-s", "1", "--plot", str(svg))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("| users |") and lines[2].lstrip("| ").startswith("1 |")
    assert any(line.startswith("knee: 2 users") for line in lines), r.stdout
    assert "level 2/2: 2 users" in r.stderr
    assert svg.read_text().startswith("<svg")


def busy(url: str) -> int:
    return sum(1 for s in get_json(url + "/slots") if s.get("is_processing"))


def test_ctrl_c_mid_level_leaves_no_slot_busy(four_slots):
    p = subprocess.Popen([sys.executable, "-m", "tui", "load", four_slots, "--users", "4", "-p", "16", "-n", "900",
                          "--requests", "3", "--no-warmup", "--no-tui", "-o", "json"],
                         cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while busy(four_slots) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert busy(four_slots) >= 2  # requests in flight (all four once the machine is quiet)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 130, err
    assert "Traceback" not in err
    assert busy(four_slots) == 0  # kvtop waited for the server to stop every task
