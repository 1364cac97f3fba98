"""What watching a llama-server costs, measured side by side in one run.

1. **Polling**: a client's gen tok/s on the server with kvtop attached (the app live
   in tmux, polling /slots and /metrics on its pace) vs with no kvtop; rounds
   alternate, the result is the median of the rounds' own ratios (goal >= 0.98).
2. **Streaming**: kvtop's own streamed turn (``ServerEngine``: stream, progress and
   per-token timings parsed into events) vs the same request sent with plain HTTP and
   the stream only read; decode tok/s as the server measured it (goal >= 0.98).

    python bench/server_watch_cost.py [MODEL] [-n 256] [-r 5] [--server-bin PATH]
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
from runner.demo import demo_model_path  # noqa: E402
from runner.process.blocking import BlockingEngine  # noqa: E402
from runner.server.engine import ServerEngine  # noqa: E402
from runner.settings import Settings  # noqa: E402

PROMPT = "Write a long essay about the history of lighthouses."


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
    r = urllib3.request("POST", url, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"},
                        preload_content=False, timeout=300)
    buf = b""
    for chunk in r.stream(4096):
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            yield line.decode("utf-8", "replace")
    r.release_conn()


def kvtop_attached(url: str, home: str) -> str:
    name = f"kvtop-watch-{os.getpid()}"
    subprocess.run(["tmux", "new-session", "-d", "-s", name, "-x", "160", "-y", "48",
                    f"KVTOP_HOME={home} {sys.executable} -m tui --server {url}"], check=True)
    time.sleep(4)  # connected and polling
    return name


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
    a = ap.parse_args()
    binary = a.server_bin or server_binary()
    with tempfile.TemporaryDirectory() as tmp, llama_server(binary, a.model, log_dir=tmp) as (url, _):
        client_gen_tok_s(url, 16)  # warm up
        poll_ratios, stream_ratios = [], []
        for i in range(a.r):
            alone = client_gen_tok_s(url, a.n)
            session = kvtop_attached(url, os.path.join(tmp, f"home{i}"))
            try:
                watched = client_gen_tok_s(url, a.n)
            finally:
                subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
            poll_ratios.append(watched / alone)
            plain = plain_turn_tok_s(url, a.n)
            ours = kvtop_turn_tok_s(url, a.model, a.n)
            stream_ratios.append(ours / plain)
            print(f"round {i + 1}: client alone {alone:.1f}, with kvtop polling {watched:.1f} tok/s "
                  f"({watched / alone:.3f}); plain stream {plain:.1f}, kvtop's turn {ours:.1f} tok/s "
                  f"({ours / plain:.3f})", flush=True)
        print(f"polling: client gen tok/s with kvtop attached / without = {statistics.median(poll_ratios):.3f} "
              f"(median of {a.r} rounds; goal >= 0.98)")
        print(f"streaming: kvtop's turn / plain HTTP = {statistics.median(stream_ratios):.3f} "
              f"(median of {a.r} rounds; goal >= 0.98)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
