"""``kvtop tune`` as users run it, on the demo model: it ends within its budget, its rows
are llama-bench's columns, and Ctrl+C mid-run prints what was measured, marked partial,
and leaves no engine process behind. Small tests (depth 8, pp8, tg2) so that a busy
shared machine still measures something within the budget; the figures themselves are
bench/tune_vs_llama_bench.py's."""

import json
import os
import signal
import subprocess
import sys
import time

import psutil

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMALL = ["--depth", "8", "-p", "8", "-n", "2", "-r", "2"]
SLACK_S = 20  # python's start, the model file's check and the engines' close, outside the budget's A/Bs


def tune(*args, **kw):
    return subprocess.Popen([sys.executable, "-m", "kvtop", "tune", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT, **kw)


def md_rows(text):
    lines = [x for x in text.splitlines() if x.startswith("|")]
    cells = [[c.strip() for c in x.strip("|").split("|")] for x in lines]
    return (cells[0], cells[2:]) if cells else ([], [])


def test_tune_ends_within_its_budget_with_llama_benchs_columns():
    budget = 30
    t0 = time.monotonic()
    p = tune(*SMALL, "--budget", str(budget))
    out, err = p.communicate(timeout=budget + 120)
    wall = time.monotonic() - t0
    assert p.returncode == 0 and "Traceback" not in err, err
    assert wall < budget + SLACK_S, f"{wall:.1f} s for a {budget} s budget"
    header, rows = md_rows(out)
    # llama-bench's columns, with one for each setting an A/B changed (fa, threads: always)
    # (in llama-bench's order: n_ubatch, type_k, type_v come before fa when an A/B changed them)
    assert header[:5] == ["model", "size", "params", "backend", "threads"] and header[-3:] == ["fa", "test", "t/s"], \
        out + err
    assert set(header[5:-3]) <= {"n_ubatch", "type_k", "type_v"}, header
    assert rows, out
    assert {r[-2] for r in rows} <= {"pp8 @ d8", "tg2 @ d8"}
    assert all(float(r[-1].split(" ± ")[0]) > 0 for r in rows)
    assert "build: llama-cpp-python-" in out
    said = [x for x in out.splitlines() if x.startswith("`-fa off`: ")]  # its gains, or why it has none
    assert len(said) == 1 and ("at depth 8" in said[0] or "not measured" in said[0]), out
    assert any(x.startswith("recommended: ") for x in out.splitlines())
    assert f"of a {budget} s budget; depth 8, pp8, tg2" in out


def test_a_small_budget_measures_the_first_pair_or_says_what_budget_would():
    """A trial's ``kvtop tune --budget 30`` on a busy machine measured nothing in 33 s:
    now the first A/B (-fa) is measured whole, or one line says the budget cannot hold
    it and which would; either way it ends within about one measurement of its budget."""
    budget = 6
    t0 = time.monotonic()
    p = tune("--depth", "64", "-p", "16", "-n", "4", "-r", "2", "--budget", str(budget))
    out, err = p.communicate(timeout=budget + 120)
    wall = time.monotonic() - t0
    assert p.returncode == 0 and "Traceback" not in err, err
    said = [x for x in out.splitlines() if x.startswith("`-fa off`: ")]
    assert len(said) == 1, out
    if "not measured" in said[0]:
        line = [x for x in err.splitlines() if "cannot hold one A/B" in x]
        assert len(line) == 1 and line[0].startswith(f"kvtop tune: --budget {budget} cannot hold one A/B at depth 64 "
                                                     "here (-fa off against your settings): --budget "), err
        assert int(line[0].rsplit("--budget ", 1)[1].split()[0]) > budget
    else:
        assert "at depth 64" in said[0]
    assert wall < budget + SLACK_S, f"{wall:.1f} s for a {budget} s budget"


def test_json_output_parses():
    p = tune(*SMALL, "--budget", "20", "-o", "json")
    out, err = p.communicate(timeout=200)
    assert p.returncode == 0, err
    j = json.loads(out)
    assert set(j) >= {"rows", "candidates", "not_measured", "recommended", "partial", "depth"} and j["depth"] == 8
    for r in j["rows"]:
        assert r["n_depth"] == 8 and r["avg_ts"] > 0 and r["kvtop_tune_arm"] in ("base", "candidate")


def test_ctrl_c_mid_run_prints_the_partial_result_and_stops_its_engines():
    p = tune(*SMALL, "--budget", "300", "--progress")
    engines = []
    deadline = time.monotonic() + 240
    seen = ""
    while time.monotonic() < deadline:  # the second A/B starting: the first one's rows are measured
        line = p.stderr.readline()
        seen += line
        if "A/B 2/" in line or not line:
            break
    engines = [c.pid for c in psutil.Process(p.pid).children(recursive=True)]
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, seen + err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert "A/B 2/" in seen, seen
    _header, rows = md_rows(out)
    assert rows, out
    assert any(x.startswith("partial: stopped by Ctrl+C") for x in out.splitlines()), out
    assert "not measured (stopped by Ctrl+C" in out
    assert engines and not [pid for pid in engines if psutil.pid_exists(pid)
                            and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]


def test_kvtop_estimate_quotes_the_cached_result_and_names_the_gap(kvtop_home):
    """A tune result in the cache for the demo model's default settings: ``kvtop estimate``
    prints it, and names flash attention as what the ceilings leave out."""
    from kvtop.runner.calibration.tune_store import save_tune
    from kvtop.runner.demo import demo_model_path
    from kvtop.runner.policy.tune_evidence import Measured
    from kvtop.runner.records.paths import default_paths
    from kvtop.runner.settings import Settings

    def estimate():
        r = subprocess.run([sys.executable, "-m", "kvtop", "estimate"], capture_output=True, text=True, cwd=ROOT,
                           timeout=300)
        assert r.returncode == 0, r.stderr
        return next(x for x in r.stdout.splitlines() if x.startswith("settings"))

    assert "not measured: `kvtop tune` measures which settings are faster here" in estimate()
    save_tune(default_paths().cache_dir, Settings(demo_model_path()), 512,
              [Measured("-fa off", "flash_attn", "faster", 1.7, 0.97), Measured("-t 1", "threads", "slower", 0.6, None)])
    line = estimate()
    assert "at depth 512: -fa off faster (decode 1.70x, prefill 0.97x); -t 1 slower (decode 0.60x)" in line, line
    assert "The ceilings leave out flash attention: `-fa off` runs decode 1.70x faster here" in line, line
