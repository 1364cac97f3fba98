"""``kvtop load`` against ``vllm bench serve`` (vLLM's own load tool, in the same venv), on
the same vLLM server, prompts of the same length and the same concurrency.

For each level C: ``kvtop load --users C -p P -n N --requests R`` and ``vllm bench serve
--dataset-name random --random-input-len P --random-output-len N --num-prompts C*R
--max-concurrency C --ignore-eos --temperature 0``, one after the other; the bench prints
both tools' aggregate output tok/s and median TTFT and their ratio per level (goal: within
10%), and the prompt and output tokens per request each tool's requests cost the server
(its own ``usage`` counts), so a difference in what was sent shows beside the ratios.

What is the same on both sides: greedy sampling (``vllm bench serve`` no longer sends
temperature 0 by itself: the server's default, 1.0, would sample), ``ignore_eos`` with
exactly N output tokens, prompts of P tokens that share no prefix (kvtop: token ids drawn
per request; vllm: ``random`` token ids, decoded and sent as text), a closed loop of C
requests in flight, ``users`` warm-up requests before the measured ones, streamed with
``include_usage``, throughput over the span from the first request sent to the last token.
Rounds alternate kvtop, vllm, kvtop, vllm...; the figure per level is the median over rounds.

How each tool's requests met in vLLM's engine: around every tool run the bench reads vLLM's
``iteration_tokens_total`` histogram (one observation per engine step: its prompt and
generated tokens) and prints the steps and the steps that held two prompts or more (prefills
that arrived together and were batched). Both include the tool's warm-up: kvtop's ``users``
requests of 4 tokens, vllm bench's test request and ``users`` warm-ups of N tokens (at most
one step of 2+ prompts each). A closed loop whose users prefill together stays in lockstep
(same P, same N, ``ignore_eos``): about R such steps per run; one whose users arrived a step
apart stays a step apart: about none. Reading the two columns beside the rate says whether a
gap at one level comes from that alignment or from slower steps.

    python bench/load_vs_vllm_bench.py [--users 1,2,4] [-p 64] [-n 32] [-r 4] [--rounds 2] [--url URL]

Without --url it starts the tests' vLLM (tests/vllm_server.py; build it once with .ci/build-vllm).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from vllm_server import cache_dir, start_vllm, why_not_built  # noqa: E402

from kvtop.runner.server.prom import Histogram, Metrics  # noqa: E402

Level = tuple[float, float, float, float, float, float]
# out tok/s, TTFT p50 s, prompt and output tokens per request, vLLM's engine steps, the steps that held 2+ prompts
ITERATION = "vllm:iteration_tokens_total"  # vLLM observes each engine step's tokens (prompt + generated)


def steps_now(url: str) -> Histogram | None:
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        return Metrics(r.read().decode("utf-8", "replace")).histogram(ITERATION)


def step_shape(before: Histogram | None, after: Histogram | None, n_prompt: int, users: int) -> tuple[float, float]:
    """(engine steps, steps that held two prompts or more) between two reads. A step with one
    prompt holds at most P + users tokens; only buckets wholly above that count (a lower bound:
    a bucket that straddles it is left out)."""
    if after is None:
        return math.nan, math.nan
    d = after.minus(before)
    together, lower, below = 0.0, 0.0, 0.0
    for bound, cum in d.buckets:
        if lower >= n_prompt + users:
            together += cum - below
        lower, below = (bound if math.isfinite(bound) else lower), cum
    return d.count, together


def measured(url: str, users: int, a: argparse.Namespace, run: Callable[[], tuple[float, float, float, float]]) -> Level:
    before = steps_now(url)
    got = run()
    return (*got, *step_shape(before, steps_now(url), a.n_prompt, users))


def kvtop_level(url: str, users: int, a: argparse.Namespace) -> tuple[float, float, float, float]:
    cmd = [sys.executable, "-m", "kvtop", "load", url, "--users", str(users), "-p", str(a.n_prompt),
           "-n", str(a.n_predict), "--requests", str(a.requests), "--no-tui", "-o", "json"]
    r = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=1800)
    lv = json.loads(r.stdout)["levels"][0]
    per = lv["per_request"]
    # the server's own counts (usage): the mean prompt it saw, the tokens it generated
    return lv["level"]["gen_tok_s"], per["ttft_p50_s"], per["prompt_tokens"], per["generated_tokens_per_request"]


def vllm_level(url: str, users: int, a: argparse.Namespace, out: str) -> tuple[float, float, float, float]:
    vllm = os.path.join(cache_dir(), "venv", "bin", "vllm")
    cmd = [vllm, "bench", "serve", "--backend", "vllm", "--base-url", url, "--model", "smollm2",
           "--tokenizer", os.path.join(cache_dir(), "model"), "--dataset-name", "random",
           "--random-input-len", str(a.n_prompt), "--random-output-len", str(a.n_predict),
           "--random-range-ratio", "0", "--num-prompts", str(users * a.requests), "--max-concurrency", str(users),
           "--ignore-eos", "--num-warmups", str(users), "--save-result", "--result-dir", out,
           "--temperature", "0",  # greedy, as kvtop load asks (vllm bench serve leaves the server's default)
           "--result-filename", f"c{users}.json"]
    env = dict(os.environ, HF_HUB_OFFLINE="1", VLLM_TARGET_DEVICE="cpu")
    subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=1800, env=env)
    with open(os.path.join(out, f"c{users}.json"), encoding="utf-8") as fh:
        res = json.load(fh)
    done = max(res["completed"], 1)  # prompt_len and output tokens: the server's usage of each request
    return (res["output_throughput"], res["median_ttft_ms"] / 1000, res["total_input_tokens"] / done,
            res["total_output_tokens"] / done)


def sweep(url: str, a: argparse.Namespace) -> None:
    levels = [int(x) for x in a.users.split(",")]
    got: dict[tuple[str, int], list[Level]] = {}
    with tempfile.TemporaryDirectory() as out:
        for _ in range(a.rounds):
            for users in levels:
                got.setdefault(("kvtop", users), []).append(measured(url, users, a, lambda: kvtop_level(url, users, a)))
                got.setdefault(("vllm", users), []).append(measured(url, users, a,
                                                                    lambda: vllm_level(url, users, a, out)))
    print(f"kvtop load vs vllm bench serve: -p {a.n_prompt} -n {a.n_predict}, {a.requests} requests per user, "
          f"median of {a.rounds} rounds, {url}")
    print("| users | kvtop out tok/s | vllm bench out tok/s | ratio | kvtop TTFT p50 s | vllm bench TTFT p50 s | ratio "
          "| prompt tok/req kvtop, vllm | out tok/req kvtop, vllm | engine steps kvtop, vllm | steps with 2+ prompts kvtop, vllm |")
    print("| ----: | --------------: | -------------------: | ----: | ---------------: | --------------------: | ----: "
          "| ---: | ---: | ---: | ---: |")
    worst = 0.0
    for users in levels:
        k, v = got[("kvtop", users)], got[("vllm", users)]
        kt, vt, kf, vf, kp, vp, ko, vo, ks, vs, kb, vb = (statistics.median(x[i] for x in rows)
                                                          for i in range(6) for rows in (k, v))
        worst = max(worst, abs(kt / vt - 1), abs(kf / vf - 1))
        print(f"| {users} | {kt:.2f} | {vt:.2f} | {kt / vt:.2f} | {kf:.3f} | {vf:.3f} | {kf / vf:.2f} "
              f"| {kp:.0f}, {vp:.0f} | {ko:.0f}, {vo:.0f} | {ks:.0f}, {vs:.0f} | {kb:.0f}, {vb:.0f} |")
    print("engine steps and steps with 2+ prompts: vLLM's iteration_tokens_total over each tool run, warm-up included")
    print(f"goal (within 10%): {'met' if worst <= 0.10 else 'not met'} (worst {worst:.0%})")


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
