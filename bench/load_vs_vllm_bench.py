"""``kvtop load`` against ``vllm bench serve`` (vLLM's own load tool, in the same venv), on
the same vLLM server, prompts of the same length and the same concurrency.

For each level C: ``kvtop load --users C -p P -n N --requests R`` and ``vllm bench serve
--dataset-name random --random-input-len P --random-output-len N --num-prompts C*R
--max-concurrency C --ignore-eos``, one after the other; the bench prints both tools'
aggregate output tok/s and median TTFT and their ratio per level (goal: within 10%).
Rounds alternate kvtop, vllm, kvtop, vllm...; the figure per level is the median over rounds.

    python bench/load_vs_vllm_bench.py [--users 1,2,4] [-p 64] [-n 32] [-r 4] [--rounds 2] [--url URL]

Without --url it starts the tests' vLLM (tests/vllm_server.py; build it once with .ci/build-vllm).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from vllm_server import cache_dir, start_vllm, why_not_built  # noqa: E402


def kvtop_level(url: str, users: int, a: argparse.Namespace) -> tuple[float, float]:
    cmd = [sys.executable, "-m", "kvtop", "load", url, "--users", str(users), "-p", str(a.n_prompt),
           "-n", str(a.n_predict), "--requests", str(a.requests), "--no-tui", "-o", "json"]
    r = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=1800)
    lv = json.loads(r.stdout)["levels"][0]
    return lv["level"]["gen_tok_s"], lv["per_request"]["ttft_p50_s"]


def vllm_level(url: str, users: int, a: argparse.Namespace, out: str) -> tuple[float, float]:
    vllm = os.path.join(cache_dir(), "venv", "bin", "vllm")
    cmd = [vllm, "bench", "serve", "--backend", "vllm", "--base-url", url, "--model", "smollm2",
           "--tokenizer", os.path.join(cache_dir(), "model"), "--dataset-name", "random",
           "--random-input-len", str(a.n_prompt), "--random-output-len", str(a.n_predict),
           "--random-range-ratio", "0", "--num-prompts", str(users * a.requests), "--max-concurrency", str(users),
           "--ignore-eos", "--num-warmups", str(users), "--save-result", "--result-dir", out,
           "--result-filename", f"c{users}.json"]
    env = dict(os.environ, HF_HUB_OFFLINE="1", VLLM_TARGET_DEVICE="cpu")
    subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=1800, env=env)
    with open(os.path.join(out, f"c{users}.json"), encoding="utf-8") as fh:
        res = json.load(fh)
    return res["output_throughput"], res["median_ttft_ms"] / 1000


def sweep(url: str, a: argparse.Namespace) -> None:
    levels = [int(x) for x in a.users.split(",")]
    got: dict[tuple[str, int], list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory() as out:
        for _ in range(a.rounds):
            for users in levels:
                got.setdefault(("kvtop", users), []).append(kvtop_level(url, users, a))
                got.setdefault(("vllm", users), []).append(vllm_level(url, users, a, out))
    print(f"kvtop load vs vllm bench serve: -p {a.n_prompt} -n {a.n_predict}, {a.requests} requests per user, "
          f"median of {a.rounds} rounds, {url}")
    print("| users | kvtop out tok/s | vllm bench out tok/s | ratio | kvtop TTFT p50 s | vllm bench TTFT p50 s | ratio |")
    print("| ----: | --------------: | -------------------: | ----: | ---------------: | --------------------: | ----: |")
    for users in levels:
        k, v = got[("kvtop", users)], got[("vllm", users)]
        kt, vt = statistics.median(x[0] for x in k), statistics.median(x[0] for x in v)
        kf, vf = statistics.median(x[1] for x in k), statistics.median(x[1] for x in v)
        print(f"| {users} | {kt:.2f} | {vt:.2f} | {kt / vt:.2f} | {kf:.3f} | {vf:.3f} | {kf / vf:.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--users", default="1,2,4")
    ap.add_argument("-p", "--n-prompt", type=int, default=64)
    ap.add_argument("-n", "--n-predict", type=int, default=32)
    ap.add_argument("-r", "--requests", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--url", help="an already running vLLM instead of starting one")
    a = ap.parse_args()
    if a.url:
        return sweep(a.url.rstrip("/"), a)
    why = why_not_built()
    if why:
        sys.exit(why)
    server = start_vllm(os.path.join(tempfile.gettempdir(), f"kvtop-bench-vllm-{os.getpid()}.log"))
    try:
        sweep(server.url, a)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
