"""A real llama-server for the server tests: built once per llama-cpp-python pin by
``.ci/build-llama-server`` (cached outside the repo), started on a free loopback port."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from contextlib import contextmanager

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def server_binary() -> str:
    """The cached binary; built the first time (about 10 minutes on 2 busy cores). Called
    once per test run before the first test (set-up, not a test: no per-test timeout
    cuts it). The build runs in a session of its own, so
    an interrupted run stops the compilers too (the script removes its folder)."""
    return _built("llama-server", "KVTOP_LLAMA_SERVER")


def perplexity_binary() -> str:
    """llama-perplexity from the same vendored llama.cpp, built beside llama-server by the
    same script (a folder that has the server only gets llama-perplexity added: a few
    minutes); ``KVTOP_LLAMA_PERPLEXITY`` names one instead."""
    return _built("llama-perplexity", "KVTOP_LLAMA_PERPLEXITY")


def _built(tool: str, env_name: str) -> str:
    env_bin = os.environ.get(env_name)
    if env_bin:
        return env_bin
    import signal
    import sys

    proc = subprocess.Popen(["bash", os.path.join(ROOT, ".ci", "build-llama-server"), tool], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env=dict(os.environ, PYTHON=sys.executable))
    try:
        out, err = proc.communicate(timeout=3 * 3600)
    except BaseException:  # Ctrl+C, a timeout: stop the whole build, let its trap clean up
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGKILL)
        raise
    if proc.returncode != 0:
        raise RuntimeError(f"building {tool} failed: {err[-2000:]}")
    return out.strip().splitlines()[-1]


def cached_binary(tool: str = "llama-server") -> str | None:
    """The binary ``.ci/build-llama-server`` would print without building (the same
    pin, cache folder and name), or None when it is not built yet."""
    import re

    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as fh:
        pin = re.search(r'"llama-cpp-python==([^"]+)"', fh.read())
    cache = os.environ.get("KVTOP_BUILD_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "kvtop-build")
    path = os.path.join(cache, f"llama-server-{pin.group(1) if pin else ''}", tool)
    return path if os.access(path, os.X_OK) else None


def get_json(url: str, timeout: float = 5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def post_json(url: str, payload: dict, timeout: float = 120):
    req = urllib.request.Request(url, data=json.dumps(payload).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=1) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def llama_server(binary: str, model: str, *extra: str, slots: int = 2, ctx: int = 4096, log_dir: str = "/tmp",
                 port: int | None = None):
    """llama-server with --metrics --slots on 127.0.0.1; yields (url, process). ``port``
    starts it where another one ran (a restart on the same URL)."""
    port = port or free_port()
    log = open(os.path.join(log_dir, f"llama-server-{port}.log"), "wb")
    # threads: the cores this test may use (one per pytest-xdist worker, tests/conftest.py)
    cmd = [binary, "-m", model, "--host", "127.0.0.1", "--port", str(port), "-c", str(ctx * slots),
           "-np", str(slots), "-t", str(len(os.sched_getaffinity(0))), "--metrics", "--slots", *extra]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"llama-server exited ({proc.returncode}); see {log.name}")
            if healthy(url):
                break
            time.sleep(0.2)
        else:
            raise RuntimeError("llama-server did not become healthy in 120 s")
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()
