"""``kvtop tune``'s measured ratios vs llama-bench's, side by side in one run (issue 39).

For two pairs on the demo model at depth D (default 512): flash attention on vs off
(both at -t 2), and -t 1 vs -t 2 (both with -fa on), llama-bench (built from the same
vendored llama.cpp by .ci/build-llama-bench) and ``kvtop tune`` each measure both sides;
the ratios are compared:

    fa     ratio = t/s with -fa off / t/s with -fa on      (pp and tg)
    -t     ratio = t/s with 1 thread / t/s with 2 threads  (tg: kvtop's -t 1; pp: its -tb 1)

Goals (the issue's): kvtop's ratio within 10% of llama-bench's for the same pair, and
kvtop recommends the faster side whenever llama-bench's ratio is beyond 1.15 or below
0.87.

Both tools get the same work, in the same minutes (runner.policy.tune_compare): the
run is ``--rounds`` rounds; in each, for each pair, llama-bench measures one arm then
the other (one process per arm, ``-r`` repetitions each: A B in even rounds, B A in
odd ones) and ``kvtop tune --only`` measures the pair with ``-r`` repetitions per arm
(its own A B A B ...); the tools' order alternates too. Each tool's ratio pools its
repetitions over the rounds (the mean of the candidate's t/s over the base's: llama-
bench's avg_ts rule, and kvtop's gain). One llama-bench process for both arms (``-fa
1,0``) would run all of A's repetitions and then all of B's, minutes from kvtop's: on
this shared machine that alone moved llama-bench's flash-attention tg ratio from 0.83 to
1.12 between two runs a minute apart (docs/tune.md, runs 4 and 5). The per-round ratios
are printed beside the pooled ones: they are each tool's own run-to-run spread.

    python bench/tune_vs_llama_bench.py [MODEL] [--depth 512] [-p 256] [-n 64] [-r 2] [--rounds 4]
                                        [--save results.json]
    python bench/tune_vs_llama_bench.py --report results.json   (the tables again, from the saved samples)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from kvtop.runner.demo import demo_model_path  # noqa: E402
from kvtop.runner.policy.tune_compare import KvtopRun, Row, ToolRound, goals, span  # noqa: E402

# the settings both tools share, spelled out (kvtop's defaults; llama-bench's are -b 2048 and every layer offloaded)
SAME = ("-b", "512", "-ub", "512", "-ngl", "0")
BASE = ("-fa", "1", "-t", "2")  # llama-bench's flags for kvtop's base: -fa on -t 2
# pair: (llama-bench's candidate flags, kvtop's --only, its rows: (test, kvtop metric, kvtop candidate, label))
PAIRS = {
    "fa": (("-fa", "0", "-t", "2"), "fa", (("pp", "prefill", "-fa off", "-fa off / -fa on"),
                                          ("tg", "decode", "-fa off", "-fa off / -fa on"))),
    "t": (("-fa", "1", "-t", "1"), "t,tb", (("pp", "prefill", "-tb 1", "-tb 1 / -tb 2 (llama-bench: -t)"),
                                           ("tg", "decode", "-t 1", "-t 1 / -t 2"))),
}


def llama_bench_path() -> str | None:
    try:
        r = subprocess.run([os.path.join(ROOT, ".ci", "build-llama-bench")], capture_output=True, text=True,
                           timeout=1800, env={**os.environ, "PYTHON": sys.executable})
    except (OSError, subprocess.TimeoutExpired):
        return None
    path = r.stdout.strip().splitlines()[-1] if r.returncode == 0 and r.stdout.strip() else ""
    return path if os.path.exists(path) else None


def llama_bench(binary: str, model: str, a: argparse.Namespace, flags: tuple[str, ...]) -> dict[str, list[float]]:
    """{test: samples (t/s)} of one arm, from llama-bench's json."""
    cmd = [binary, "-m", model, "-d", str(a.depth), "-p", str(a.p), "-n", str(a.n), "-r", str(a.r), "-o", "json",
           *SAME, *flags]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        raise SystemExit(f"llama-bench failed: {r.stderr[-800:]}")
    return {("pp" if row["n_prompt"] else "tg"): [float(x) for x in row["samples_ts"]] for row in json.loads(r.stdout)}


def kvtop_tune(model: str, a: argparse.Namespace, only: str) -> dict[str, object]:
    cmd = [sys.executable, "-m", "kvtop", "tune", model, "--depth", str(a.depth), "-p", str(a.p), "-n", str(a.n),
           "-r", str(a.r), "--only", only, "--budget", str(a.budget), "-o", "json", *SAME, "-fa", "on", "-t", "2"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=a.budget + 300, cwd=ROOT)
    if r.returncode != 0:
        raise SystemExit(f"kvtop tune failed: {r.stderr[-800:]}")
    j: dict[str, object] = json.loads(r.stdout)
    return j


def kvtop_run(j: dict[str, object], flag: str, metric: str) -> KvtopRun | None:
    for c in j["candidates"]:  # type: ignore[attr-defined]
        if c["flag"] == flag and metric in c["metrics"]:
            m = c["metrics"][metric]
            return KvtopRun(tuple(m["base_ts"]), tuple(m["candidate_ts"]), m["verdict"], bool(c["wins"]),
                            c["busy_others_cpu"] is not None)
    return None


def others_now() -> float | None:
    from kvtop.runner.system.cpu_use import others_over

    return others_over(1.0).others_share


def one_round(i: int, binary: str, a: argparse.Namespace, rows: dict[tuple[str, str], Row], raw: list[object]) -> None:
    """Round ``i``: for each pair, llama-bench's two arms and one kvtop tune, orders alternating."""
    for name, (cand, only, _tests) in PAIRS.items():
        arms = (("base", BASE), ("cand", cand)) if i % 2 == 0 else (("cand", cand), ("base", BASE))
        lb: dict[str, dict[str, list[float]]] = {}
        kv: dict[str, object] = {}
        for tool in (("llama-bench", "kvtop") if i % 2 == 0 else ("kvtop", "llama-bench")):
            if tool == "llama-bench":
                for arm, flags in arms:
                    lb[arm] = llama_bench(binary, a.model, a, flags)
            else:
                kv = kvtop_tune(a.model, a, only)
        raw.append({"round": i, "pair": name, "llama_bench": lb, "kvtop_tune": kv["candidates"]})
        add_round(rows, name, lb, kv)


def add_round(rows: dict[tuple[str, str], Row], name: str, lb: dict[str, dict[str, list[float]]],
              kv: dict[str, object]) -> None:
    """One round's samples of pair ``name`` (llama-bench's per arm and test, kvtop tune's json) into ``rows``."""
    for test, metric, flag, label in PAIRS[name][2]:
        row = rows.setdefault((name, test), Row(label, test, flag))
        row.lb.append(ToolRound(tuple(lb["base"][test]), tuple(lb["cand"][test])))
        run = kvtop_run(kv, flag, metric)
        if run is not None:
            row.kv.append(run)


def verdicts(row: Row) -> str:
    """kvtop's verdict on the row's metric in each run, and whether it recommended the candidate."""
    def one(r: KvtopRun) -> str:
        return "busy" if r.busy else f"{r.verdict}{' (wins)' if r.wins else ''}"
    return ", ".join(one(r) for r in row.kv) or "-"


def report(rows: list[Row], a: argparse.Namespace, load: list[float | None], elapsed: float) -> None:
    print(f"demo model {os.path.basename(a.model)}, depth {a.depth}, pp{a.p}, tg{a.n}, {a.rounds} round{'s' if a.rounds != 1 else ''} of {a.r} "
          f"repetitions per arm and tool; other processes' share of the CPU at the start and after each round: "
          + ", ".join("?" if x is None else f"{x:.0%}" for x in load) + f"; {elapsed:.0f} s")
    print()
    print("| pair | test | llama-bench ratio (per round) | kvtop tune ratio (per round) | kvtop / llama-bench "
          "| within 10% | kvtop's verdict per run |")
    print("| --- | --- | ---: | ---: | ---: | --- | --- |")
    for r in rows:
        lb, kv, agree = r.lb_ratio, r.kv_ratio, r.agreement
        print(f"| {r.pair} | {r.test} | {'-' if lb is None else f'{lb:.2f}'} ({span(r.lb_rounds)}) "
              f"| {'-' if kv is None else f'{kv:.2f}'} ({span(r.kv_rounds)}) | {'-' if agree is None else f'{agree:.2f}'} "
              f"| {'-' if r.within is None else 'yes' if r.within else 'no'} | {verdicts(r)} |")
    print()
    print("| pair | test | arm | llama-bench t/s | kvtop tune t/s | kvtop / llama-bench |")
    print("| --- | --- | --- | ---: | ---: | ---: |")
    for r in rows:
        for arm in ("base", "cand"):
            lb_ts, kv_ts = r.means(arm)
            name = "-fa on -t 2" if arm == "base" else r.flag
            rel = f"{kv_ts / lb_ts:.2f}" if lb_ts and kv_ts is not None else "-"
            print(f"| {r.pair} | {r.test} | {name} | {'-' if lb_ts is None else f'{lb_ts:.1f}'} "
                  f"| {'-' if kv_ts is None else f'{kv_ts:.1f}'} | {rel} |")
    g = goals(rows)
    print()
    print(f"within 10% of llama-bench: {g.within} of {g.rows} rows")
    why = f" ({g.busy} more judged nothing: busy)" if g.busy else "" if g.checked else " (no row beyond the band)"
    print(f"recommendation agrees where llama-bench's ratio is beyond 1.15 or below 0.87: {g.agree} of {g.checked} "
          f"kvtop runs{why}")
    if g.unequal_reps:
        print(f"not comparable: the tools measured different repetitions in {', '.join(g.unequal_reps)} "
              f"(kvtop's --budget {a.budget} too small?)")


def report_saved(path: str) -> int:
    with open(path) as f:
        saved = json.load(f)
    rows: dict[tuple[str, str], Row] = {}
    for r in saved["rounds"]:
        add_round(rows, r["pair"], r["llama_bench"], {"candidates": r["kvtop_tune"]})
    a = argparse.Namespace(**saved["args"])
    report(ordered_rows(rows), a, saved["others_cpu"], saved.get("elapsed_s", 0.0))
    return 0


def ordered_rows(rows: dict[tuple[str, str], Row]) -> list[Row]:
    return [rows[(p, t)] for t in ("pp", "tg") for p in PAIRS if (p, t) in rows]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", nargs="?", default=demo_model_path())
    ap.add_argument("--depth", type=int, default=512)
    ap.add_argument("-p", type=int, default=256)
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("-r", type=int, default=2, help="repetitions per arm in each round, for both tools (2 or more)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--budget", type=int, default=600, help="kvtop tune's budget for each pair")
    ap.add_argument("--save", metavar="PATH", help="write every sample of both tools here (json)")
    ap.add_argument("--report", metavar="PATH", help="measure nothing: print the tables of a run --save wrote")
    a = ap.parse_args()
    if a.report:
        return report_saved(a.report)
    if a.r < 2:
        ap.error("-r must be 2 or more: kvtop tune judges nothing on one repetition")
    binary = llama_bench_path()
    if binary is None:
        print("llama-bench could not be built (.ci/build-llama-bench): nothing to compare against", file=sys.stderr)
        return 1
    t0 = time.monotonic()
    rows: dict[tuple[str, str], Row] = {}
    raw: list[object] = []
    load = [others_now()]
    for i in range(a.rounds):
        one_round(i, binary, a, rows, raw)
        load.append(others_now())
        share = "?" if load[-1] is None else f"{load[-1]:.0%}"
        print(f"round {i + 1}/{a.rounds} done at {time.monotonic() - t0:.0f} s (others' share of the CPU: {share})",
              file=sys.stderr, flush=True)
    elapsed = time.monotonic() - t0
    report(ordered_rows(rows), a, load, elapsed)
    if a.save:
        with open(a.save, "w") as f:
            json.dump({"args": vars(a), "others_cpu": load, "elapsed_s": elapsed, "rounds": raw}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
