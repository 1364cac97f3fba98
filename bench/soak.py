"""Soak: 500 short chat turns with context resets through the real app and engine.

Drives the Textual app headless (``App.run_test``) on the real SmolLM2 model in its
child process; every 10 turns Ctrl+L starts a new chat (clears the KV cache).
Samples the engine's and the UI's RSS, open file descriptors and threads after
turn 50 and at the end, and prints the growth. Goal: RSS grows < 5% after the
first 50 turns; file descriptors and threads do not grow.

    python bench/soak.py [--turns 500] [--reset-every 10] [-n 8]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

import psutil  # noqa: E402
from helpers import make_app, send, wait_until  # noqa: E402

from kvtop.runner.demo import demo_model_path  # noqa: E402
from kvtop.runner.process.parent import EngineProcess  # noqa: E402
from kvtop.runner.settings import Settings  # noqa: E402


def sample(pid: int) -> dict:
    p = psutil.Process(pid)
    return {"rss": p.memory_info().rss, "fds": p.num_fds(), "threads": p.num_threads()}


async def soak(turns: int, reset_every: int, n: int) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="kvtop-soak-"))
    app = make_app(Settings(demo_model_path(), n_ctx=2048, temp=0.8, n_predict=n), EngineProcess, tmp)
    marks = {}
    t0 = time.monotonic()
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        engine_pid = app.engine.pid
        for i in range(1, turns + 1):
            await send(pilot, f"Say a short sentence about the number {i}.")
            await wait_until(pilot, lambda: len(app.turns) == i and not app.turn_running, timeout=120, what=f"turn {i}")
            if i % reset_every == 0:
                await pilot.press("ctrl+l")
                await wait_until(pilot, lambda: app.query_one("KVPane").cells == 0, what="reset")
            if i in (50, turns):
                await pilot.pause(1.2)  # let the memory sampler run
                marks[i] = {"engine": sample(engine_pid), "ui": sample(os.getpid())}
            if i % 50 == 0:
                print(f"turn {i}: {time.monotonic() - t0:.0f} s", flush=True)
        stops = {}
        for t in app.turns:
            stops[t.stop_reason] = stops.get(t.stop_reason, 0) + 1
    a, b = marks[50], marks[turns]
    ok = True
    print(f"{turns} turns in {time.monotonic() - t0:.0f} s; stop reasons {stops}")
    for who in ("engine", "ui"):
        growth = (b[who]["rss"] - a[who]["rss"]) / a[who]["rss"] * 100
        print(f"{who:>6}: RSS {a[who]['rss'] / 2**20:.1f} -> {b[who]['rss'] / 2**20:.1f} MiB ({growth:+.2f}%), "
              f"fds {a[who]['fds']} -> {b[who]['fds']}, threads {a[who]['threads']} -> {b[who]['threads']}")
        ok &= growth < 5 and b[who]["fds"] <= a[who]["fds"] and b[who]["threads"] <= a[who]["threads"]
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=500)
    ap.add_argument("--reset-every", type=int, default=10)
    ap.add_argument("-n", type=int, default=8)
    a = ap.parse_args()
    if a.turns < 50:
        ap.error("--turns must be at least 50")
    return asyncio.run(soak(a.turns, a.reset_every, a.n))


if __name__ == "__main__":
    sys.exit(main())
