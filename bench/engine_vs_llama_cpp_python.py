"""kvtop's engine (child process, one event per token) vs a bare llama-cpp-python loop.

Same model, threads, batch sizes, prompt tokens and sampler settings; the two run
alternately, R times each, and the medians are compared as ratios in one run:

    prefill ratio = kvtop pp tok/s / bare pp tok/s   (goal >= 0.98)
    decode ratio  = kvtop tg tok/s / bare tg tok/s   (goal >= 1.0)

The bare loop is what a llama-cpp-python user writes: ``Llama.eval(prompt)`` then
``Llama.generate(prompt)``, which finds the prompt cached and samples at once.

    python bench/engine_vs_llama_cpp_python.py [MODEL] [-p 512] [-n 128] [-r 5] [-t N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kvtop.runner.commands.bench import BENCH_TEXT  # noqa: E402
from kvtop.runner.demo import demo_model_path  # noqa: E402
from kvtop.runner.process.blocking import BlockingEngine  # noqa: E402
from kvtop.runner.process.parent import EngineProcess  # noqa: E402
from kvtop.runner.settings import Settings  # noqa: E402


def bare_run(llm, prompt: list[int], n: int) -> tuple[float, float]:
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(prompt)
    pp = len(prompt) / (time.perf_counter() - t0)
    times = []
    for i, _tok in enumerate(llm.generate(prompt, top_k=40, top_p=0.95, temp=0.8, reset=False)):
        times.append(time.perf_counter())
        if i + 1 >= n:
            break
    tg = (len(times) - 1) / (times[-1] - times[0])
    return pp, tg


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default=demo_model_path())
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("-r", type=int, default=5)
    ap.add_argument("-t", type=int, default=0)
    a = ap.parse_args()
    settings = Settings(a.model, n_ctx=2048, n_threads=a.t, n_predict=a.n).resolved()

    kv = BlockingEngine(EngineProcess(settings))
    events = [0]

    def on_event(e):  # the per-token event path a UI uses
        events[0] += 1

    kv.start(on_event)
    base = kv.tokenize(BENCH_TEXT)
    prompt = (base * (a.p // len(base) + 1))[: a.p]

    import llama_cpp

    bare = llama_cpp.Llama(a.model, n_ctx=settings.n_ctx, n_threads=settings.n_threads,
                           n_threads_batch=settings.n_threads_batch, n_batch=settings.n_batch,
                           n_ubatch=settings.n_ubatch, verbose=False)
    res = {"kvtop_pp": [], "kvtop_tg": [], "bare_pp": [], "bare_tg": []}
    for _ in range(a.r):
        kv.reset()
        done = kv.generate(prompt, on_event, n_predict=a.n, ignore_eog=True)
        res["kvtop_pp"].append(done.metrics.prefill_tok_s)
        res["kvtop_tg"].append(done.metrics.decode_tok_s)
        pp, tg = bare_run(bare, prompt, a.n)
        res["bare_pp"].append(pp)
        res["bare_tg"].append(tg)
    kv.close()
    med = {k: statistics.median(v) for k, v in res.items()}
    print(f"model {os.path.basename(a.model)}  threads {settings.n_threads}/{settings.n_threads_batch}  "
          f"p={a.p} n={a.n} runs={a.r} (alternating)  events received {events[0]}")
    print(f"{'':>8} {'kvtop':>12} {'bare l-c-p':>12} {'ratio':>7}")
    for what in ("pp", "tg"):
        k, b = med[f"kvtop_{what}"], med[f"bare_{what}"]
        print(f"{what + ' tok/s':>8} {k:>12.1f} {b:>12.1f} {k / b:>7.3f}")
    print(f"prefill ratio {med['kvtop_pp'] / med['bare_pp']:.3f} (goal >= 0.98)   "
          f"decode ratio {med['kvtop_tg'] / med['bare_tg']:.3f} (goal >= 1.0)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
