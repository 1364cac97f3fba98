"""kvtop bench as users run it: a process on the real model (SmolLM2), its table and
--json, usage errors, and the calibration a bench run leaves for kvtop estimate and the
app. The bench's logic on a fake engine is unit-tested in tests/unit/runner/commands."""

import json
import os
import subprocess
import sys

import pytest
from helpers import cores


def run(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "kvtop", "bench", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_n_0_skips_generation(smollm_path):
    """llama-bench -n 0: the prefill test only (it was a traceback)."""
    r = run(smollm_path, "-p", "16", "-n", "0", "-r", "1")
    assert r.returncode == 0, r.stderr
    tests = [line.split("|")[-3].strip() for line in r.stdout.splitlines()[2:] if line.startswith("|")]
    assert tests == ["pp16"] and "Traceback" not in r.stderr
    (j,) = json.loads(run(smollm_path, "-p", "16", "-n", "0", "-r", "1", "--json").stdout)
    assert j["n_gen"] == 0 and j["n_prompt"] == 16 and j["avg_ts"] > 0 and j["kvtop_ttft_s"] > 0


def test_p_0_skips_prefill(smollm_path):
    r = run(smollm_path, "-p", "0", "-n", "8", "-r", "1")
    assert r.returncode == 0, r.stderr
    tests = [line.split("|")[-3].strip() for line in r.stdout.splitlines()[2:] if line.startswith("|")]
    assert tests == ["tg8"]
    (j,) = json.loads(run(smollm_path, "-p", "0", "-n", "8", "-r", "1", "--json").stdout)
    assert j["n_prompt"] == 0 and j["n_depth"] == 0 and j["kvtop_ttft_s"] is None and j["avg_ts"] > 0


def test_p_0_and_n_0_is_a_usage_error(smollm_path):
    r = run(smollm_path, "-p", "0", "-n", "0")
    assert r.returncode == 2 and "nothing to measure" in r.stderr


@pytest.mark.parametrize("flag", [["-p", "-1"], ["-r", "0"], ["-n", "-2"], ["-c", "-5"], ["-ub", "0"]])  # --temp: bench does not take it (issue 33)
def test_out_of_range_is_a_usage_error(smollm_path, flag):
    r = run(smollm_path, *flag)
    assert r.returncode == 2 and "must be" in r.stderr and "Traceback" not in r.stderr


def test_a_bench_run_calibrates_the_forecast_the_app_shows(smollm_path, tmp_path):
    """Three repetitions of pp256 and of tg16 are six calibrated turns under the key the
    app uses for the same model and settings: its forecast is then "calibrated"."""
    from kvtop.runner.calibration.calibration import calibration_for
    from kvtop.runner.settings import Settings

    env = {**os.environ, "KVTOP_HOME": str(tmp_path)}
    r = subprocess.run([sys.executable, "-m", "kvtop", "bench", smollm_path, "-r", "3", "-p", "256", "-n", "16", "-t", str(cores())],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    # the batch threads are not the batch size (a new user read "batch 2" as -b 2)
    assert f"kvtop: threads {cores()} (set by -t), batch threads {cores()}, n_batch 512, n_ubatch 512" in r.stdout
    cal = calibration_for(Settings(smollm_path, n_threads=cores()), str(tmp_path / "cache"))
    busy = busy_tests(r.stderr)  # the app's busy test: such a test says its figures are low
    assert cal.turns == 6  # busy or not: each run is a sample at its own load (issue 35)
    assert sorted((n, d) for n, d, *_ in cal.samples.prefill) == [(1, 0)] * 3 + [(256, 0)] * 3
    assert [n for n, *_ in cal.samples.decode] == [16] * 3  # 16 decodes each
    if busy:  # the load each busy run ran at is kept with its samples
        assert any(o is not None and o > 0 for *_, o, _t in cal.samples.prefill)


def busy_tests(stderr: str) -> set[str]:
    """The tests the bench said ran while other processes took a quarter of the CPU (calibrated at that load)."""
    return {line.split(": ")[1] for line in stderr.splitlines()
            if line.startswith("kvtop bench: ") and line.endswith("(calibrated at that load)")}


def test_kvtop_estimate_shows_the_forecast_the_bench_calibrated(smollm_path, tmp_path):
    """Before any run: the roofline, said to be one; after a bench with the same settings:
    calibrated, in --json (forecast.basis, n_samples) and in the human output."""
    env = {**os.environ, "KVTOP_HOME": str(tmp_path)}
    args = [sys.executable, "-m", "kvtop", "estimate", smollm_path, "-t", str(cores()), "--bandwidth-gbs", "30", "--tflops", "0.25"]
    before = json.loads(subprocess.run(args + ["--json"], capture_output=True, text=True, timeout=120, env=env).stdout)
    assert before["forecast"]["basis"] == "roofline" and before["forecast"]["n_samples"] == 0
    assert before["forecast"]["ttft_s"] > 0 and before["forecast"]["decode_tok_s"] > 0
    r = subprocess.run([sys.executable, "-m", "kvtop", "bench", smollm_path, "-r", "2", "-p", "512", "-n", "16", "-t", str(cores())],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    after = json.loads(subprocess.run(args + ["--json"], capture_output=True, text=True, timeout=120, env=env).stdout)
    fc = after["forecast"]
    assert fc["basis"] == "calibrated" and fc["n_samples"] == 4  # busy or not: each run at its own load (issue 35)
    assert fc["ttft_s_low"] < fc["ttft_s"] < fc["ttft_s_high"] and fc["decode_tok_s_low"] < fc["decode_tok_s_high"]
    if busy_tests(r.stderr):  # calibrated at a busy machine's load: not a yardstick of its quiet rate
        return
    m = subprocess.run([sys.executable, "-m", "kvtop", "bench", smollm_path, "-r", "1", "-p", "512", "-n", "0",
                        "-t", str(cores()), "--json"], capture_output=True, text=True, timeout=300, env=env)
    (measured,) = json.loads(m.stdout)
    human = subprocess.run(args, capture_output=True, text=True, timeout=120, env=env).stdout
    if busy_tests(m.stderr):  # the load changed after the calibration: that run is no yardstick
        assert "forecast" in human and "(calibrated on 5 turns)" in human
        return
    assert 0.5 < fc["prefill_tok_s"] / measured["avg_ts"] < 2  # this machine's rate, not the 0.25 TFLOPS roof
    assert "forecast" in human and "(calibrated on 5 turns)" in human  # the measuring bench ran one more
