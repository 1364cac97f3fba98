"""The command line's numeric flags as users meet them: kvtop run in a process, a bad
value is a usage error (exit 2) naming the range, and --json is strict JSON. The parsers
themselves are unit-tested in tests/unit/runner/commands/test_flags.py."""

import json
import subprocess
import sys

import pytest

from kvtop.tui.start.launch import version_text


def kvtop(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "kvtop", *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("value", ["-1", "nan", "inf"])
def test_estimate_refuses_a_bandwidth_that_is_not_a_positive_number(smollm_path, value):
    """It printed 'decode ceiling -9.1 tok/s' (and nan, inf; --json wrote NaN)."""
    r = kvtop("estimate", smollm_path, "--bandwidth-gbs", value, "--json")
    assert r.returncode == 2 and r.stdout == ""
    assert "argument --bandwidth-gbs: must be a number above 0" in r.stderr


def test_estimate_json_is_strict_json(smollm_path):
    r = kvtop("estimate", smollm_path, "--bandwidth-gbs", "10", "--tflops", "1", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout, parse_constant=lambda c: pytest.fail(f"{c} in --json output"))
    assert out["decode_ceiling_tok_s"] > 0


def test_negative_context_is_a_usage_error_not_the_trained_context(tmp_path):
    """``kvtop -c -5`` silently ran with the model's trained context (8192)."""
    r = kvtop(str(tmp_path / "x.gguf"), "-c", "-5")
    assert r.returncode == 2 and "argument -c/--ctx-size: must be an integer from 0 to" in r.stderr


def test_refresh_below_the_token_batch_is_a_usage_error(tmp_path):
    """``--refresh 0.1`` silently became 0.25."""
    r = kvtop(str(tmp_path / "x.gguf"), "--refresh", "0.1")
    assert r.returncode == 2 and "0.25 to 10" in r.stderr


@pytest.mark.parametrize("argv,needle", [(["-hf", "org/repo"], "downloads nothing"),
                                         (["-f"], "expected one argument")])
def test_misread_flags_give_a_usage_error_that_names_them(argv, needle):
    r = subprocess.run([sys.executable, "-m", "kvtop", *argv], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and needle in r.stderr
    assert "invalid choice" not in r.stderr  # "-f FILE" used to become "-fa FILE"


def test_version_names_kvtop_llama_cpp_python_and_the_backends():
    text = version_text()
    from importlib.metadata import version

    # the distribution is kvtop-llm ("kvtop" on PyPI is another tool): its version, not "not installed"
    assert text.startswith(f"kvtop {version('kvtop-llm')}\n") and "llama-cpp-python 0.3.36" in text
    assert "llama.cpp backends: CPU" in text and "GPU offload: " in text
    r = subprocess.run([sys.executable, "-m", "kvtop", "-V"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == text


def test_refresh_must_be_positive():
    r = subprocess.run([sys.executable, "-m", "kvtop", "--refresh", "0", "x.gguf"], capture_output=True, text=True)
    assert r.returncode == 2 and "argument --refresh: must be a number from 0.25 to 10 (got 0)" in r.stderr


def test_server_file_alone_attaches_and_an_empty_one_is_a_usage_error(tmp_path):
    """`kvtop --server-file FILE` without --server opened the local demo model, whatever the file said."""
    import socket

    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    f = tmp_path / "servers.txt"
    f.write_text(f"# the fleet\nhttp://127.0.0.1:{port}\n")
    r = kvtop("--server-file", str(f))
    assert r.returncode == 1 and f"cannot reach http://127.0.0.1:{port}" in r.stderr, r.stderr
    f.write_text("# nobody\n\n")
    r = kvtop("--server-file", str(f))
    assert r.returncode == 2 and "no URL in it" in r.stderr, r.stderr
    f.write_text("http://127.0.0.1:99999\n")
    r = kvtop("--server-file", str(f))
    assert r.returncode == 2 and "Traceback" not in r.stderr and "port" in r.stderr, r.stderr


@pytest.mark.parametrize("command", ["estimate", "bench"])
@pytest.mark.parametrize("shell, says", [
    ("{kvtop} > /dev/full", "cannot write the results to stdout: No space left on device"),
    ("{kvtop} | true", "cannot write the results to stdout: Broken pipe"),
    ("{kvtop} >&-", "stdout is closed"),
])
def test_estimate_and_bench_stdout_that_cannot_be_written_is_one_line_and_exit_1(smollm_path, command, shell, says):
    """estimate printed a BrokenPipeError / OSError traceback; bench with stdout closed said
    'the engine process died (exit code 0)'."""
    args = {"estimate": ["--bandwidth-gbs", "20", "--tflops", "0.5"], "bench": ["-p", "8", "-n", "2", "-r", "1"]}
    kvtop = " ".join([sys.executable, "-m", "kvtop", command, smollm_path, *args[command]])
    r = subprocess.run(["bash", "-c", shell.format(kvtop=kvtop) + "; echo rc=${PIPESTATUS[0]} >&2"],
                       capture_output=True, text=True, timeout=120)
    err = [line for line in r.stderr.splitlines() if line.startswith("kvtop:")]  # not bench's busy-CPU notes
    assert len(err) == 1 and says in err[0] and "Traceback" not in r.stderr, r.stderr
    assert "rc=1" in r.stderr
