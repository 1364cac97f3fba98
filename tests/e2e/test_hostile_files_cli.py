"""Bad model files: one line naming the file and the reason, exit 1, from bench, estimate and the command line."""

import subprocess
import sys

import pytest
from gguf_factory import make_bad_files, write_tiny_llama

from kvtop.runner.settings import Settings


@pytest.fixture(scope="module")
def cases(tmp_path_factory, smollm_path):
    return make_bad_files(tmp_path_factory.mktemp("bad"), smollm_path)


CASE_NAMES = ["missing", "directory", "empty", "text", "random", "wrong_magic", "wrong_version",
              "absurd_tensors", "absurd_kv", "truncated_metadata", "truncated_data", "unknown_arch"]


@pytest.mark.parametrize("name", CASE_NAMES)
def test_bench_exits_1_with_one_line(cases, name):
    path, reason = cases[name]
    r = subprocess.run([sys.executable, "-m", "kvtop", "bench", path, "-r", "1", "-p", "8", "-n", "2"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and path in lines[0] and reason in lines[0]
    assert r.stdout == ""


def test_estimate_of_a_truncated_file_uses_the_header_and_says_so(cases):
    path, _ = cases["truncated_data"]
    r = subprocess.run([sys.executable, "-m", "kvtop", "estimate", path], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "tensor data missing or truncated" in r.stdout
    assert "45.00 MiB" not in r.stdout and "90.00 MiB at 4,096 tokens" in r.stdout


@pytest.mark.parametrize("name", [n for n in CASE_NAMES if n not in ("unknown_arch", "truncated_data")])
def test_estimate_exits_1_with_one_line(cases, name):
    path, reason = cases[name]
    r = subprocess.run([sys.executable, "-m", "kvtop", "estimate", path], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and path in lines[0] and reason in lines[0]


def test_block_count_1000_is_refused_by_bench_and_estimate_alike(tmp_path, smollm_path):
    """One check for every command (runner.model.inspect.load_facts): bench used to start
    the engine and let llama.cpp abort on a file estimate refused with a reason."""
    path = write_tiny_llama(tmp_path / "k1000.gguf", None, block_count=1000)
    reason = "block_count says 1000 layers but the tensors describe 2"
    for cmd in (["bench", path, "-r", "1", "-p", "8", "-n", "2"], ["estimate", path]):
        r = subprocess.run([sys.executable, "-m", "kvtop", *cmd], capture_output=True, text=True, timeout=120)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 1 and len(lines) == 1 and path in lines[0] and reason in lines[0], (cmd, r.stderr)
        assert "SIGABRT" not in r.stderr and r.stdout == ""


def test_the_same_file_aborts_llama_cpp_in_the_child_not_kvtop(tmp_path, smollm_path):
    """What the check spares the user: llama.cpp asserts on the file, and the abort ends
    only the engine's child process."""
    from kvtop.runner.commands.bench import open_engine
    from kvtop.runner.process.contract import EngineUnavailable

    path = write_tiny_llama(tmp_path / "k1000.gguf", None, block_count=1000)
    eng = open_engine(Settings(path, n_ctx=512), in_process=False)
    try:
        with pytest.raises(EngineUnavailable) as exc:
            eng.start(lambda e: None)
    finally:
        eng.close()
    assert "SIGABRT" in str(exc.value) and "GGML_ASSERT" in str(exc.value) and "n_layer" in str(exc.value)


def test_missing_model_on_the_command_line(tmp_path):
    r = subprocess.run([sys.executable, "-m", "kvtop", str(tmp_path / "x.gguf")], capture_output=True, text=True)
    assert r.returncode == 1 and "no such file" in r.stderr
