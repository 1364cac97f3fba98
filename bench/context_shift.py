"""The turn after a context shift: TTFT when the shift keeps the cache (the dropped turns'
cells cut out, the rest moved back: runner/engine/kv_shift.py) vs a turn that computes
the same new message without any shift, and vs the old way (recompute from where the
prefix broke, forced here as for a model that cannot shift).

    shift ratio     = TTFT after a cache-keeping shift / TTFT of the same message unshifted  (goal <= 1.2)
    recompute ratio = TTFT when the shift recomputes  / TTFT of the same message unshifted  (what it was)

One chat of long questions fills -c (default 1024) until turn 1 is dropped; the same
chat runs on an engine whose context is large enough never to shift (the baseline), and
on one told it cannot shift. Greedy (temp 0), so the three chats are the same text.

    python bench/context_shift.py [MODEL] [-c 1024] [-n 64] [-t N] [-r 3]

Measured on SmolLM2-135M Q4_1 (-c 512 -n 48 -t 2 -r 1, a 2-core machine other processes
kept busy): turn 6 dropped turn 1 (83 cells cut out) and prefilled 36 tokens, as the
unshifted chat did; TTFT 3.21 s vs 3.64 s (0.88x), the recompute 363 tokens, 15.4 s (4.24x).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kvtop.runner import events as ev  # noqa: E402
from kvtop.runner.demo import demo_model_path  # noqa: E402
from kvtop.runner.engine.engine import Engine  # noqa: E402
from kvtop.runner.settings import Settings  # noqa: E402

TOPICS = ["tides", "the colour of the sky", "bread", "passwords", "bees", "cats", "cycling", "leap years",
          "pancakes", "volcanoes", "rainbows", "trains", "glaciers", "coffee", "owls", "chess"]


def question(i: int) -> str:
    return (f"Tell me about {TOPICS[i % len(TOPICS)]}: how it works, one surprising fact, and a short example, "
            f"in a few sentences please.")


def run_chat(model: str, n_ctx: int, n_predict: int, threads: int, replies: list[str] | None,
             no_shift: str | None = None, until: int | None = None):
    """(the first shifted turn's number, its TurnDone, the replies): the chat is fed the
    recorded ``replies`` when given, so every engine sees the same messages."""
    seen: list = []
    engine = Engine(Settings(model, n_ctx=n_ctx, n_threads=threads, n_predict=n_predict, temp=0.0, seed=1),
                    seen.append)
    engine.load()
    if no_shift is not None:
        engine._no_shift = no_shift  # as for a model that cannot shift: the old recompute
    msgs, out = [], []
    try:
        for i in range(until or 64):
            msgs.append({"role": "user", "content": question(i)})
            done = engine.chat(list(msgs), turn_id=i + 1)
            if not isinstance(done, ev.TurnDone):
                raise SystemExit(f"turn {i + 1} refused: {done.reason}")
            text = replies[i] if replies is not None else done.text
            out.append(text)
            msgs.append({"role": "assistant", "content": text})
            shifted = [e for e in seen if isinstance(e, ev.ContextShifted)]
            if until is None and shifted:
                return i + 1, done, out, shifted[0]
            if until is not None and i + 1 == until:
                return i + 1, done, out, (shifted[0] if shifted else None)
        raise SystemExit("no context shift in 64 turns")
    finally:
        engine.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", nargs="?", default=None)
    p.add_argument("-c", type=int, default=1024)
    p.add_argument("-n", type=int, default=64)
    p.add_argument("-t", type=int, default=max(1, len(os.sched_getaffinity(0))))
    p.add_argument("-r", type=int, default=3)
    a = p.parse_args()
    model = a.model or demo_model_path()
    rows = {"shift": [], "recompute": [], "baseline": []}
    detail = None
    for _ in range(a.r):
        turn, done, replies, shift = run_chat(model, a.c, a.n, a.t, None)
        _, base, _, none = run_chat(model, 8 * a.c, a.n, a.t, replies, until=turn)
        _, old, _, fell = run_chat(model, a.c, a.n, a.t, replies, no_shift="forced by the benchmark", until=turn)
        assert none is None and fell is not None and fell.shifted_cells == 0
        rows["shift"].append(done.metrics.ttft_s)
        rows["baseline"].append(base.metrics.ttft_s)
        rows["recompute"].append(old.metrics.ttft_s)
        detail = (turn, shift, done.metrics.prefill_tokens, base.metrics.prefill_tokens, old.metrics.prefill_tokens)
    med = {k: statistics.median(v) for k, v in rows.items()}
    turn, shift, pf_shift, pf_base, pf_old = detail
    print(f"turn {turn}: dropped turns {shift.dropped_turns} ({shift.dropped_tokens} tokens), "
          f"{shift.shifted_cells} cells cut out; prefill tokens: shifted {pf_shift}, unshifted {pf_base}, "
          f"recompute {pf_old}")
    print(f"TTFT median of {a.r}: shifted {med['shift'] * 1000:.0f} ms, same message unshifted "
          f"{med['baseline'] * 1000:.0f} ms, recompute {med['recompute'] * 1000:.0f} ms")
    print(f"shift ratio {med['shift'] / med['baseline']:.2f} (goal <= 1.2)   "
          f"recompute ratio {med['recompute'] / med['baseline']:.2f}")


if __name__ == "__main__":
    main()
