"""What watching costs: decode tok/s with the UI live in a real terminal vs ``kvtop bench``.

Runs kvtop under tmux (a real terminal), sends a message that generates exactly
``-n`` tokens (``--ignore-eos``), and reads the turn's measured decode tok/s from
the session transcript. Then ``kvtop bench`` runs headless on the same model and
settings with the same prompt length. R rounds, each a UI turn and a bench run back
to back; the result is the median of the rounds' own ratios

    ratio = UI decode tok/s / bench decode tok/s     (goal: >= 0.97)

(this machine is shared and its speed drifts between rounds: the ratio of the two
medians, printed beside it, mixes that drift in). Every round starts kvtop with an
empty home, as a first start: the CPU probe runs before the model loads.

    python bench/ui_overhead.py [MODEL] [-n 256] [-r 3] [-t N]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from kvtop.runner.demo import demo_model_path  # noqa: E402

PROMPT = "Write a long essay about the history of lighthouses."


def tmux(*args):
    return subprocess.run(["tmux", *args], capture_output=True, text=True)


def ui_turn(model: str, n: int, threads: int, home: str) -> dict:
    session = f"kvtop-bench-{os.getpid()}"
    flags = f"-n {n} --ignore-eos -c 2048 --temp 0.8" + (f" -t {threads}" if threads else "")
    cmd = f"cd {ROOT} && KVTOP_HOME={home} {sys.executable} -m kvtop {model} {flags}"
    tmux("new-session", "-d", "-s", session, "-x", "160", "-y", "50", cmd)
    try:
        deadline = time.monotonic() + 60
        while "n_ctx" not in tmux("capture-pane", "-t", session, "-p").stdout:
            if time.monotonic() > deadline:
                raise RuntimeError("kvtop did not load")
            time.sleep(0.2)
        time.sleep(1.0)
        tmux("send-keys", "-t", session, PROMPT, "Enter")
        deadline = time.monotonic() + 300
        while True:
            files = glob.glob(os.path.join(home, "data", "sessions", "*.jsonl"))
            turns = []
            for f in files:
                with open(f) as fh:
                    turns += [json.loads(x) for x in fh if '"type": "turn"' in x]
            if turns:
                return turns[-1]["metrics"]
            if time.monotonic() > deadline:
                raise RuntimeError("no turn finished")
            time.sleep(1.0)  # this script is a process too: while the turn runs it wakes rarely
    finally:
        tmux("send-keys", "-t", session, "C-q")
        time.sleep(1.0)
        tmux("kill-session", "-t", session)


def bench_turn(model: str, n: int, threads: int, prompt_tokens: int) -> dict:
    """``kvtop bench``'s tgN @ dP: N decodes after a context of the UI turn's prompt length."""
    cmd = [sys.executable, "-m", "kvtop", "bench", model, "-p", "0", "-n", str(n), "-d", str(prompt_tokens), "-r", "1",
           "-c", "2048", "--json"] + (["-t", str(threads)] if threads else [])
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=True)
    (row,) = json.loads(out.stdout)
    return row


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default=demo_model_path())
    ap.add_argument("-n", type=int, default=256)
    ap.add_argument("-r", type=int, default=3)
    ap.add_argument("-t", type=int, default=0)
    a = ap.parse_args()
    if shutil.which("tmux") is None:
        print("tmux is needed", file=sys.stderr)
        return 1
    ui, hb = [], []
    for i in range(a.r):
        home = tempfile.mkdtemp(prefix="kvtop-bench-")  # a first start: the CPU probe runs too
        m = ui_turn(a.model, a.n, a.t, home)
        ui.append(m["decode_tok_s"])
        b = bench_turn(a.model, a.n, a.t, m["prompt_tokens"])
        hb.append(b["avg_ts"])
        shutil.rmtree(home, ignore_errors=True)
        print(f"round {i + 1}: UI {ui[-1]:.1f} tok/s ({m['decode_tokens']} tokens after a {m['prompt_tokens']}-token "
              f"prompt), bench {hb[-1]:.1f} tok/s")
    u, b = statistics.median(ui), statistics.median(hb)
    paired = sorted(x / y for x, y in zip(ui, hb))
    print(f"per-round ratios: {' '.join(f'{r:.3f}' for r in paired)}")
    print(f"decode tok/s: UI live {u:.1f}, kvtop bench {b:.1f} (ratio of medians {u / b:.3f}); "
          f"ratio {statistics.median(paired):.3f} (median of {len(paired)} rounds; goal >= 0.97)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
