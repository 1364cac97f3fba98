"""What watching a llama-server costs, measured side by side in one run.

1. **Polling**: a client's gen tok/s on the server with kvtop attached (the app live
   in tmux, polling /slots and /metrics on its pace) vs with no kvtop; rounds
   alternate, the result is the median of the rounds' own ratios (goal >= 0.98).
2. **Streaming**: kvtop's own streamed turn (``ServerEngine``: stream, progress and
   per-token timings parsed into events) vs the same request sent with plain HTTP and
   the stream only read; decode tok/s as the server measured it (goal >= 0.98).

kvtop is measured once it has settled: one KVTOP_HOME for every round (its CPU probe
runs once, in a warm-up start before the rounds, and is cached, as on a user's
machine), and each start waits until kvtop's own CPU use is quiet before the client
runs. Each watched run also reports the share of a core kvtop used meanwhile.
``--kvtop-dir DIR`` (repeatable) watches with the kvtop of another checkout too, in
the same rounds, against the same client-alone runs: a change measured side by side.

    python bench/server_watch_cost.py [MODEL] [-n 256] [-r 5] [--server-bin PATH]
                                      [--kvtop-dir DIR ...] [--polling-only]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

import json  # noqa: E402

import urllib3  # noqa: E402
from llama_server import llama_server, server_binary  # noqa: E402

from kvtop.runner.demo import demo_model_path  # noqa: E402
from kvtop.runner.process.blocking import BlockingEngine  # noqa: E402
from kvtop.runner.server.engine import ServerEngine  # noqa: E402
from kvtop.runner.settings import Settings  # noqa: E402

PROMPT = "Write a long essay about the history of lighthouses."
# a tmux server of the bench's own, kept up between the kvtop sessions (a new session
# while the last one's server is exiting fails; and other tmux users are left alone)
TMUX = ["tmux", "-L", f"kvtop-bench-{os.getpid()}"]


def client_gen_tok_s(url: str, n: int) -> float:
    """A plain client: one streamed completion, the server's own decode rate."""
    body = {"prompt": PROMPT, "n_predict": n, "ignore_eos": True, "stream": True, "cache_prompt": False}
    timings = {}
    for line in stream_lines(url + "/completion", body):
        if line.startswith("data:") and '"timings"' in line:
            timings = json.loads(line[5:]).get("timings", timings)
    return timings["predicted_per_second"]


def stream_lines(url: str, body: dict):
    """A plain client: the stream's lines, read as they come."""
    pool = urllib3.PoolManager()  # a fresh connection: the server may close a kept-alive one after a stream
    r = pool.request("POST", url, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"},
                     preload_content=False, timeout=300)
    buf = b""
    for chunk in r.stream(4096):
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            yield line.decode("utf-8", "replace")
    r.release_conn()
    pool.clear()


def cpu_seconds(pid: int) -> float:
    """User and system time of a process, all its threads, in seconds."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def kvtop_attached(url: str, home: str, root: str = ROOT) -> tuple[str, int]:
    """kvtop in tmux, watching ``url``, once its start-up work is done: (session, pid)."""
    name = f"kvtop-watch-{os.getpid()}"
    subprocess.run([*TMUX, "new-session", "-d", "-s", name, "-x", "160", "-y", "48", "-c", root,
                    f"KVTOP_HOME={home} exec {sys.executable} -m kvtop --server {url}"], check=True)
    pid = int(subprocess.run([*TMUX, "list-panes", "-t", name, "-F", "#{pane_pid}"], capture_output=True,
                             text=True, check=True).stdout.split()[0])
    time.sleep(3)
    for _ in range(30):  # settled: under 5% of a core over 2 s (imports, first layout, first polls)
        before = cpu_seconds(pid)
        time.sleep(2)
        if cpu_seconds(pid) - before < 0.1:
            break
    return name, pid


def watched_tok_s(url: str, n: int, home: str, root: str) -> tuple[float, float]:
    """(the client's gen tok/s with kvtop watching, the share of a core kvtop used meanwhile)."""
    session, pid = kvtop_attached(url, home, root)
    try:
        c0, t0 = cpu_seconds(pid), time.monotonic()
        rate = client_gen_tok_s(url, n)
        return rate, (cpu_seconds(pid) - c0) / (time.monotonic() - t0)
    finally:
        subprocess.run([*TMUX, "kill-session", "-t", session], capture_output=True)


def kvtop_turn_tok_s(url: str, model: str, n: int) -> float:
    e = BlockingEngine(ServerEngine(Settings(model, n_predict=n, ignore_eos=True, temp=0.8), url))
    e.start()
    try:
        return e.chat([{"role": "user", "content": PROMPT}]).metrics.decode_tok_s
    finally:
        e.close()


def plain_turn_tok_s(url: str, n: int) -> float:
    body = {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": n, "ignore_eos": True,
            "stream": True, "temperature": 0.8, "return_progress": True, "timings_per_token": True}
    last = ""
    for line in stream_lines(url + "/v1/chat/completions", body):
        if line.startswith("data:") and '"timings"' in line:
            last = line
    t = json.loads(last[5:])["timings"]
    return (t["predicted_n"] - 1) / (t["predicted_ms"] / 1000)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?", default=demo_model_path())
    ap.add_argument("-n", type=int, default=256)
    ap.add_argument("-r", type=int, default=5)
    ap.add_argument("--server-bin", default=None)
    ap.add_argument("--kvtop-dir", action="append", default=[], metavar="DIR",
                    help="also watch with the kvtop of this checkout (repeatable), in the same rounds")
    ap.add_argument("--polling-only", action="store_true", help="skip the streaming comparison")
    a = ap.parse_args()
    binary = a.server_bin or server_binary()
    subprocess.run([*TMUX, "new-session", "-d", "-s", "keep", "sleep 86400"], check=True)
    try:
        return measure(a, binary)
    finally:
        subprocess.run([*TMUX, "kill-server"], capture_output=True)


def measure(a, binary: str) -> int:
    roots = [ROOT] + [os.path.abspath(d) for d in a.kvtop_dir]
    with tempfile.TemporaryDirectory() as tmp, llama_server(binary, a.model, log_dir=tmp) as (url, _):
        client_gen_tok_s(url, 16)  # warm up
        homes = [os.path.join(tmp, f"home{i}") for i in range(len(roots))]
        for root, home in zip(roots, homes):  # each kvtop's CPU probe runs here, once, and is cached
            subprocess.run([*TMUX, "kill-session", "-t", kvtop_attached(url, home, root)[0]], capture_output=True)
        poll_ratios: list[list[float]] = [[] for _ in roots]
        cpu: list[list[float]] = [[] for _ in roots]
        stream_ratios = []
        for i in range(a.r):
            alone = client_gen_tok_s(url, a.n)
            line = f"round {i + 1}: client alone {alone:.1f} tok/s"
            for k, (root, home) in enumerate(zip(roots, homes)):
                watched, share = watched_tok_s(url, a.n, home, root)
                poll_ratios[k].append(watched / alone)
                cpu[k].append(share)
                line += (f"; watched by {os.path.basename(root)} {watched:.1f} "
                         f"({watched / alone:.3f}, kvtop {share:.1%})")
            if not a.polling_only:
                plain = plain_turn_tok_s(url, a.n)
                ours = kvtop_turn_tok_s(url, a.model, a.n)
                stream_ratios.append(ours / plain)
                line += f"; plain stream {plain:.1f}, kvtop's turn {ours:.1f} tok/s ({ours / plain:.3f})"
            print(line, flush=True)
        for root, ratios, shares in zip(roots, poll_ratios, cpu):
            print(f"polling ({root}): client gen tok/s with kvtop attached / without = {statistics.median(ratios):.3f} "
                  f"(median of {a.r} rounds; goal >= 0.98); kvtop used {statistics.median(shares):.1%} of a core")
        if stream_ratios:
            print(f"streaming: kvtop's turn / plain HTTP = {statistics.median(stream_ratios):.3f} "
                  f"(median of {a.r} rounds; goal >= 0.98)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
