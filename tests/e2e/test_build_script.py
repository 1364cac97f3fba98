""".ci/build-llama-server as a new user's first test run meets it: one build at a time, and
an interrupted build leaves nothing behind (a cut build once left a 309 MB folder in the
cache). The long step is played by a stand-in ``PYTHON`` that sleeps where ``pip download``
would run, so the script's own locking and cleanup run for real in seconds."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, ".ci", "build-llama-server")


@pytest.fixture
def slow_python(tmp_path):
    """A ``PYTHON`` whose ``-m pip download`` writes a partial file, then hangs."""
    stub = tmp_path / "python"
    stub.write_text("#!/bin/sh\n"
                    "for a; do case $prev in -d) dest=$a;; esac; prev=$a; done\n"
                    "head -c 100000 /dev/zero > \"$dest/partial.tar.gz\"\n"
                    "exec sleep 300\n")
    stub.chmod(0o755)
    return str(stub)


def _default_signals() -> None:
    """The interrupting signals as a terminal's shell leaves them. A test run started under
    ``nohup`` (or by anything that ignores SIGHUP) hands the script SIGHUP ignored, and bash
    cannot trap a signal ignored on entry: the SIGHUP case then waited 30 s for an exit that
    a real hang-up would have caused (seen twice in full runs started with nohup)."""
    for s in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
        signal.signal(s, signal.SIG_DFL)


def start(cache, python):
    return subprocess.Popen(["bash", SCRIPT], env=dict(os.environ, KVTOP_BUILD_CACHE=str(cache), PYTHON=python),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=_default_signals)


def wait_for(predicate, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def in_group(pgid: int, name: str | None = None) -> bool:
    args = ["pgrep", "-g", str(pgid)] + (["-x", name] if name else [])
    return subprocess.run(args, capture_output=True).returncode == 0


def build_dirs(cache):
    return sorted(p.name for p in cache.iterdir() if p.name.startswith("build-"))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_an_interrupted_build_removes_its_folder_and_its_children(tmp_path, slow_python, sig):
    cache = tmp_path / "cache"
    p = start(cache, slow_python)
    try:
        wait_for(lambda: cache.exists() and any((cache / d / "partial.tar.gz").exists() for d in build_dirs(cache)))
        wait_for(lambda: in_group(p.pid, "sleep"))  # the long step is running, its file written
        os.kill(p.pid, sig)  # the script alone, as a terminal or a timeout would
        p.wait(timeout=30)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode != 0
    assert build_dirs(cache) == [] and not list(cache.glob("llama-server-*"))
    # the stand-in's sleep (the build's long step) ended with it
    wait_for(lambda: not in_group(p.pid), timeout=10)


def test_a_second_build_waits_for_the_first_and_a_killed_builds_folder_is_removed(tmp_path, slow_python):
    cache = tmp_path / "cache"
    first = start(cache, slow_python)
    try:
        wait_for(lambda: cache.exists() and build_dirs(cache))
        (dead,) = build_dirs(cache)
        second = start(cache, slow_python)
        try:
            wait_for(lambda: "waiting for it" in (second.stderr.readline() or ""), timeout=30)
            assert len(build_dirs(cache)) == 1  # no second build started beside the first
            os.killpg(first.pid, signal.SIGKILL)  # killed outright: its trap cannot run
            first.wait(timeout=10)
            # the waiting build takes the lock, removes the dead one's folder, starts its own
            wait_for(lambda: dead not in build_dirs(cache) and len(build_dirs(cache)) == 1
                     and any((cache / d / "partial.tar.gz").exists() for d in build_dirs(cache)))
        finally:
            os.killpg(second.pid, signal.SIGTERM)
            second.wait(timeout=30)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    assert build_dirs(cache) == []


def _pin() -> str:
    import re

    return re.search(r'"llama-cpp-python==([^"]+)"', open(os.path.join(ROOT, "pyproject.toml")).read()).group(1)


def _fake_tool(path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)


def test_a_finished_build_is_found_without_building(tmp_path, slow_python):
    cache = tmp_path / "cache"
    folder = cache / f"llama-server-{_pin()}"
    for tool in ("llama-server", "llama-perplexity"):
        _fake_tool(folder / tool)
    env = dict(os.environ, KVTOP_BUILD_CACHE=str(cache), PYTHON=slow_python)
    out = subprocess.run(["bash", SCRIPT], env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and out.stdout.strip() == str(folder / "llama-server")
    out = subprocess.run(["bash", SCRIPT, "llama-perplexity"], env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and out.stdout.strip() == str(folder / "llama-perplexity")


def test_a_folder_with_llama_server_only_builds_llama_perplexity_and_keeps_the_server(tmp_path, slow_python):
    """The cached folder of an earlier pin-mate holds llama-server alone (other test runs may
    be using it): the script builds what is missing, and an interrupted build leaves the
    server where it was, untouched."""
    cache = tmp_path / "cache"
    server = cache / f"llama-server-{_pin()}" / "llama-server"
    _fake_tool(server)
    p = start(cache, slow_python)
    try:
        seen = []
        wait_for(lambda: "building" in (seen.append(p.stderr.readline()) or seen[-1]))
        line = seen[-1]
        assert "llama-perplexity" in line and "llama-server" not in line.split("building", 1)[1].split("into")[0]
        wait_for(lambda: in_group(p.pid, "sleep"))  # the build's long step runs
        os.kill(p.pid, signal.SIGTERM)
        p.wait(timeout=30)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode != 0 and build_dirs(cache) == []
    assert server.read_text() == "#!/bin/sh\n" and os.access(server, os.X_OK)
    assert sorted(x.name for x in server.parent.iterdir()) == ["llama-server"]


def test_an_unknown_tool_is_refused(tmp_path, slow_python):
    out = subprocess.run(["bash", SCRIPT, "llama-cli"], env=dict(os.environ, KVTOP_BUILD_CACHE=str(tmp_path),
                         PYTHON=slow_python), capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "unknown tool llama-cli" in out.stderr
