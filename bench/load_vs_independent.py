"""``kvtop load`` against an independent load generator, on the same llama-server.

The independent client is written here with nothing of kvtop: asyncio sockets, HTTP/1.1
and chunked transfer decoding by hand, its own prompts of P random token ids (from the
server's /tokenize of its own words), and its own clock. For each level of the same
sweep (U users, each sending R requests of P prompt and N generated tokens, one after
another), both report the aggregate generation rate (tokens / the level's window) and
the TTFT median; the bench prints their ratio per level (goal: within 10%).

Rounds alternate kvtop, independent, kvtop, independent...; the figure per level is
the median over rounds.

    python bench/load_vs_independent.py [MODEL] [--users 1,2,4] [-p 64] [-n 32] [-r 4]
                                        [--rounds 3] [--server-bin PATH] [--url URL]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import time
from urllib.parse import urlsplit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from llama_server import llama_server, post_json, server_binary  # noqa: E402

from kvtop.runner.commands.load_json import flat_levels

WORDS = ("apple orange river stone cloud window engine garden letter silver market winter summer "
         "forest island bridge music paper light memory signal valley harbor animal season").split()


async def http_stream(host: str, port: int, body: dict):
    """POST /completion and yield each SSE ``data:`` payload as it arrives (chunked decoding)."""
    reader, writer = await asyncio.open_connection(host, port)
    data = json.dumps(body).encode()
    writer.write(b"POST /completion HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\nConnection: close\r\n\r\n" % (host.encode(), len(data)) + data)
    await writer.drain()
    headers = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").lower()
    chunked = "transfer-encoding: chunked" in headers
    buf = b""
    try:
        while True:
            if chunked:
                size = int((await reader.readline()).strip() or b"0", 16)
                if size == 0:
                    break
                piece = await reader.readexactly(size)
                await reader.readline()
            else:
                piece = await reader.read(4096)
                if not piece:
                    break
            buf += piece
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if line.startswith(b"data:"):
                    yield line[5:].strip()
    finally:
        writer.close()


async def one_request(host, port, prompt, n) -> tuple[float, float | None, int, float]:
    """(sent, first token, tokens, end) on this client's clock."""
    t0 = time.monotonic()
    first, tokens = None, 0
    body = {"prompt": prompt, "n_predict": n, "ignore_eos": True, "stream": True, "temperature": 0.0}
    async for payload in http_stream(host, port, body):
        if payload == b"[DONE]":
            break
        ev = json.loads(payload)
        if ev.get("content"):
            tokens += 1
            first = first or time.monotonic()
        if ev.get("stop") and isinstance(ev.get("timings"), dict):
            tokens = ev["timings"]["predicted_n"]
    return t0, first, tokens, time.monotonic()


async def independent_level(url: str, pool: list[int], users: int, requests: int, p: int, n: int, level: int):
    parts = urlsplit(url)
    done = []

    async def user(u: int):
        for i in range(requests):
            rng = random.Random(f"independent/{level}/{u}/{i}/{time.time_ns()}")
            done.append(await one_request(parts.hostname, parts.port, rng.choices(pool, k=p), n))

    await asyncio.gather(*(user(u) for u in range(users)))
    window = max(d[3] for d in done) - min(d[0] for d in done)
    return sum(d[2] for d in done) / window, statistics.median(d[1] - d[0] for d in done if d[1])


def independent(url, users_list, requests, p, n):
    toks = post_json(url + "/tokenize", {"content": " ".join(WORDS * 3), "add_special": False})["tokens"]
    pool = sorted(set(toks))
    return {u: asyncio.run(independent_level(url, pool, u, requests, p, n, li)) for li, u in enumerate(users_list)}


def kvtop(url, users_list, requests, p, n):
    out = subprocess.run([sys.executable, "-m", "kvtop", "load", url, "--users", ",".join(map(str, users_list)),
                          "-p", str(p), "-n", str(n), "--requests", str(requests), "-o", "json", "--no-warmup",
                          "--quiet"], cwd=ROOT, capture_output=True, text=True, check=True)
    return {r["users"]: (r["gen_tok_s"], r["ttft_p50_s"]) for r in flat_levels(out.stdout)}


def sweep(url, a):
    users = [int(x) for x in a.users.split(",")]
    # one unmeasured request so neither side pays the first-touch costs
    post_json(url + "/completion", {"prompt": "warm up", "n_predict": 4})
    rounds = {"kvtop": [], "independent": []}
    for _ in range(a.rounds):
        rounds["kvtop"].append(kvtop(url, users, a.requests, a.n_prompt, a.n_predict))
        rounds["independent"].append(independent(url, users, a.requests, a.n_prompt, a.n_predict))
    print("| users | kvtop gen t/s | indep. gen t/s | ratio | kvtop TTFT p50 s | indep. TTFT p50 s | ratio |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    worst = 0.0
    for u in users:
        k = [statistics.median(r[u][i] for r in rounds["kvtop"]) for i in (0, 1)]
        d = [statistics.median(r[u][i] for r in rounds["independent"]) for i in (0, 1)]
        worst = max(worst, abs(k[0] / d[0] - 1), abs(k[1] / d[1] - 1))
        print(f"| {u} | {k[0]:.2f} | {d[0]:.2f} | {k[0] / d[0]:.3f} | {k[1]:.3f} | {d[1]:.3f} | {k[1] / d[1]:.3f} |")
    print(f"\nlargest difference: {worst:.1%} (goal: within 10%) over {a.rounds} rounds, "
          f"-p {a.n_prompt} -n {a.n_predict}, {a.requests} requests per user")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?")
    ap.add_argument("--users", default="1,2,4")
    ap.add_argument("-p", "--n-prompt", type=int, default=64)
    ap.add_argument("-n", "--n-predict", type=int, default=32)
    ap.add_argument("-r", "--requests", type=int, default=4)  # 2 gave TTFT medians of 4 samples: 26% apart one run, 4% with 4 x 3 rounds
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--server-bin")
    ap.add_argument("--url", help="an already running llama-server instead of starting one")
    a = ap.parse_args()
    if a.url:
        return sweep(a.url.rstrip("/"), a)
    from kvtop.runner.demo import demo_model_path

    model = a.model or demo_model_path()
    slots = max(int(x) for x in a.users.split(","))
    with llama_server(a.server_bin or server_binary(), model, slots=slots, ctx=1024) as (url, _):
        sweep(url, a)


if __name__ == "__main__":
    main()
