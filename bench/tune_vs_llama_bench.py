"""``kvtop tune``'s measured ratios vs llama-bench's, side by side in one run (issue 39).

For two pairs on the demo model at depth D (default 512): flash attention on vs off
(both at -t 2), and -t 1 vs -t 2 (both with -fa on), llama-bench (built from the same
vendored llama.cpp by .ci/build-llama-bench) and ``kvtop tune`` each measure both sides;
the ratios are compared:

    fa     ratio = t/s with -fa off / t/s with -fa on      (pp and tg)
    -t     ratio = t/s with 1 thread / t/s with 2 threads  (tg: kvtop's -t 1; pp: its -tb 1)

Goals (the issue's): kvtop's ratio within 10% of llama-bench's for the same pair, and
kvtop recommends the faster side whenever llama-bench's ratio is beyond 1.15 or below
0.87. The two tools run alternately (llama-bench fa, kvtop fa, llama-bench -t, kvtop -t)
and the machine's load is printed beside them: on a busy machine neither is a
measurement of the machine (kvtop then judges nothing).

    python bench/tune_vs_llama_bench.py [MODEL] [--depth 512] [-p 256] [-n 32] [-r 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from kvtop.runner.demo import demo_model_path  # noqa: E402


def llama_bench_path() -> str | None:
    try:
        r = subprocess.run([os.path.join(ROOT, ".ci", "build-llama-bench")], capture_output=True, text=True,
                           timeout=1800, env={**os.environ, "PYTHON": sys.executable})
    except (OSError, subprocess.TimeoutExpired):
        return None
    path = r.stdout.strip().splitlines()[-1] if r.returncode == 0 and r.stdout.strip() else ""
    return path if os.path.exists(path) else None


def llama_bench(binary: str, model: str, a: argparse.Namespace, *flags: str) -> dict[tuple[str, str], float]:
    """{(test, setting): avg t/s} from llama-bench's json."""
    cmd = [binary, "-m", model, "-d", str(a.depth), "-p", str(a.p), "-n", str(a.n), "-r", str(a.r), "-o", "json",
           *flags]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        raise SystemExit(f"llama-bench failed: {r.stderr[-800:]}")
    out: dict[tuple[str, str], float] = {}
    for row in json.loads(r.stdout):
        test = "pp" if row["n_prompt"] else "tg"
        out[(test, f"fa{row['flash_attn']}/t{row['n_threads']}")] = row["avg_ts"]
    return out


def kvtop_tune(model: str, a: argparse.Namespace, only: str, *flags: str) -> dict[str, object]:
    cmd = [sys.executable, "-m", "kvtop", "tune", model, "--depth", str(a.depth), "-p", str(a.p), "-n", str(a.n),
           "-r", str(a.r), "--only", only, "--budget", str(a.budget), "-o", "json", *flags]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=a.budget + 300, cwd=ROOT)
    if r.returncode != 0:
        raise SystemExit(f"kvtop tune failed: {r.stderr[-800:]}")
    j: dict[str, object] = json.loads(r.stdout)
    return j


def tune_gain(j: dict[str, object], flag: str, metric: str) -> tuple[float | None, dict[str, object] | None]:
    for c in j["candidates"]:  # type: ignore[attr-defined]
        if c["flag"] == flag and metric in c["metrics"]:
            return c["metrics"][metric]["gain"], c
    return None, None


def others_now() -> float | None:
    from kvtop.runner.system.cpu_use import others_over

    return others_over(1.0).others_share


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", nargs="?", default=demo_model_path())
    ap.add_argument("--depth", type=int, default=512)
    ap.add_argument("-p", type=int, default=256)
    ap.add_argument("-n", type=int, default=32)
    ap.add_argument("-r", type=int, default=3)
    ap.add_argument("--budget", type=int, default=600, help="kvtop tune's budget for each pair")
    a = ap.parse_args()
    binary = llama_bench_path()
    if binary is None:
        print("llama-bench could not be built (.ci/build-llama-bench): nothing to compare against", file=sys.stderr)
        return 1
    rows = []
    load = [others_now()]
    lb_fa = llama_bench(binary, a.model, a, "-fa", "1,0", "-t", "2")
    kv_fa = kvtop_tune(a.model, a, "fa", "-fa", "on", "-t", "2")
    load.append(others_now())
    lb_t = llama_bench(binary, a.model, a, "-t", "2,1", "-fa", "1")
    kv_t = kvtop_tune(a.model, a, "t,tb", "-fa", "on", "-t", "2")
    load.append(others_now())
    for test, metric in (("pp", "prefill"), ("tg", "decode")):
        lb = lb_fa[(test, "fa0/t2")] / lb_fa[(test, "fa1/t2")]
        kv, c = tune_gain(kv_fa, "-fa off", metric)
        rows.append(("-fa off / -fa on", test, lb, kv, c))
        lb = lb_t[(test, "fa1/t1")] / lb_t[(test, "fa1/t2")]
        kv, c = tune_gain(kv_t, "-t 1" if metric == "decode" else "-tb 1", metric)
        rows.append(("-t 1 / -t 2" if metric == "decode" else "-tb 1 / -tb 2 (llama-bench: -t)", test, lb, kv, c))
    print(f"demo model {os.path.basename(a.model)}, depth {a.depth}, pp{a.p}, tg{a.n}, {a.r} repetitions; "
          f"other processes' share of the CPU at the start, between and after: "
          + ", ".join("?" if x is None else f"{x:.0%}" for x in load))
    print()
    print("| pair | test | llama-bench ratio | kvtop tune ratio | kvtop / llama-bench | kvtop's verdict |")
    print("| --- | --- | ---: | ---: | ---: | --- |")
    for pair, test, lb, kv, c in rows:
        verdict = "?" if c is None else ("not judged (busy)" if c["busy_others_cpu"] is not None else
                                         "wins" if c["wins"] else "loses" if c["loses"] else "no change")
        agree = "" if kv is None else f"{kv / lb:.2f}"
        print(f"| {pair} | {test} | {lb:.2f} | {'-' if kv is None else f'{kv:.2f}'} | {agree} | {verdict} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
