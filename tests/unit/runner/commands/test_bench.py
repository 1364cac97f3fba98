"""``kvtop bench``: llama-bench's -p 0 / -n 0, and the model check before the engine starts."""

import json
import os
import subprocess
import sys

import pytest

from gguf_factory import write_tiny_llama
from runner.commands import bench


def run(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "tui", "bench", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_row_labels_follow_llama_bench():
    assert bench.row_labels(512, 128) == ("pp512", "tg128@d512")
    assert bench.row_labels(0, 128) == (None, "tg128")
    assert bench.row_labels(512, 0) == ("pp512", None)


def test_a_file_llama_cpp_would_abort_on_never_reaches_the_engine(tmp_path, smollm_path, monkeypatch, capsys):
    path = write_tiny_llama(tmp_path / "k1000.gguf", smollm_path, block_count=1000)

    def no_engine(*a, **kw):
        raise AssertionError("the engine was started")

    monkeypatch.setattr(bench, "open_engine", no_engine)
    assert bench.bench_main([path, "-r", "1", "-p", "8", "-n", "2"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "block_count says 1000 layers but the tensors describe 2" in err


def test_n_0_skips_generation(smollm_path):
    """llama-bench -n 0: the prefill test only (it was a traceback)."""
    r = run(smollm_path, "-p", "16", "-n", "0", "-r", "1", "-c", "512")
    assert r.returncode == 0, r.stderr
    assert "pp16" in r.stdout and "tg" not in r.stdout.split("-+-", 1)[1] and "Traceback" not in r.stderr
    j = json.loads(run(smollm_path, "-p", "16", "-n", "0", "-r", "1", "-c", "512", "--json").stdout)
    assert j["n_gen"] == 0 and j["tg_tok_s"] is None and j["pp_tok_s"] > 0 and j["ttft_s"] > 0


def test_p_0_skips_prefill(smollm_path):
    r = run(smollm_path, "-p", "0", "-n", "8", "-r", "1", "-c", "512")
    assert r.returncode == 0, r.stderr
    table = r.stdout.split("-+-", 1)[1]
    assert "tg8" in table and "pp" not in table and "@d" not in table
    j = json.loads(run(smollm_path, "-p", "0", "-n", "8", "-r", "1", "-c", "512", "--json").stdout)
    assert j["n_prompt"] == 0 and j["pp_tok_s"] is None and j["ttft_s"] is None and j["tg_tok_s"] > 0


def test_p_0_and_n_0_is_a_usage_error(smollm_path):
    r = run(smollm_path, "-p", "0", "-n", "0")
    assert r.returncode == 2 and "nothing to measure" in r.stderr


@pytest.mark.parametrize("flag", [["-p", "-1"], ["-r", "0"], ["-n", "-2"], ["-c", "-5"], ["--temp", "nan"]])
def test_out_of_range_is_a_usage_error(smollm_path, flag):
    r = run(smollm_path, *flag)
    assert r.returncode == 2 and "must be" in r.stderr and "Traceback" not in r.stderr


def test_a_bench_run_calibrates_the_forecast_the_app_shows(smollm_path, tmp_path):
    """Three repetitions of pp256/tg16 are three calibrated turns under the key the app
    uses for the same model and settings: its forecast is then "calibrated"."""
    from runner.calibration.calibration import calibration_for
    from runner.settings import Settings

    env = {**os.environ, "KVTOP_HOME": str(tmp_path)}
    r = subprocess.run([sys.executable, "-m", "tui", "bench", smollm_path, "-r", "3", "-p", "256", "-n", "16", "-t", "2"],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    # the batch threads are not the batch size (a new user read "batch 2" as -b 2)
    assert "threads: 2 (set by -t), batch threads 2, n_batch 512, n_ubatch 512" in r.stdout
    cal = calibration_for(Settings(smollm_path, n_threads=2), str(tmp_path / "cache"))
    assert cal.turns == 3 and len(cal.samples.prefill) == 3 and len(cal.samples.decode) == 3
    assert [(n, d) for n, d, _ in cal.samples.prefill] == [(256, 0)] * 3


def test_kvtop_estimate_shows_the_forecast_the_bench_calibrated(smollm_path, tmp_path):
    """Before any run: the roofline, said to be one; after a bench with the same settings:
    calibrated, in --json (forecast.basis, n_samples) and in the human output."""
    env = {**os.environ, "KVTOP_HOME": str(tmp_path)}
    args = [sys.executable, "-m", "tui", "estimate", smollm_path, "-t", "2", "--bandwidth-gbs", "30", "--tflops", "0.25"]
    before = json.loads(subprocess.run(args + ["--json"], capture_output=True, text=True, timeout=120, env=env).stdout)
    assert before["forecast"]["basis"] == "roofline" and before["forecast"]["n_samples"] == 0
    assert before["forecast"]["ttft_s"] > 0 and before["forecast"]["decode_tok_s"] > 0
    r = subprocess.run([sys.executable, "-m", "tui", "bench", smollm_path, "-r", "2", "-p", "512", "-n", "16", "-t", "2"],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    after = json.loads(subprocess.run(args + ["--json"], capture_output=True, text=True, timeout=120, env=env).stdout)
    fc = after["forecast"]
    assert fc["basis"] == "calibrated" and fc["n_samples"] == 2
    measured = json.loads(subprocess.run([sys.executable, "-m", "tui", "bench", smollm_path, "-r", "1", "-p", "512",
                                          "-n", "16", "-t", "2", "--json"], capture_output=True, text=True,
                                         timeout=300, env=env).stdout)
    assert 0.5 < fc["prefill_tok_s"] / measured["pp_tok_s"] < 2  # this machine's rate, not the 0.25 TFLOPS roof
    human = subprocess.run(args, capture_output=True, text=True, timeout=120, env=env).stdout
    assert "forecast" in human and "(calibrated on 3 turns)" in human  # the measuring bench ran one more
