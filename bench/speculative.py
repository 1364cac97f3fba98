"""Speculative decoding, kvtop's against llama-server's, side by side in one run.

    kvtop speedup  = kvtop's tg tok/s with --spec-type / kvtop's without    (same prompt, same tokens)
    server speedup = llama-server's tg tok/s with --spec-type / without     (its /completion timings)
    ratio          = kvtop speedup / server speedup                        (goal >= 0.95)
    acceptance     = accepted / drafted, kvtop's and the server's           (goal: within 10 points)

Both run the same raw prompt (no chat template) greedily for -n tokens, so the text and
the drafts are the same; the four set-ups take turns, -r rounds, and each figure is the
median. The server is the one the tests build (tests/llama_server.py), with -np 1.

    python bench/speculative.py [MODEL] [--spec-type ngram-simple] [-n 128] [-t 2] [-r 3] [-- SPEC FLAGS]

A copy-heavy prompt by default (a text, then "Copy:" and the text again, twice, then
"Copy:"); --chat for an ordinary question, where drafts rarely match.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from llama_server import cached_binary, llama_server, post_json  # noqa: E402

from kvtop.runner.demo import demo_model_path  # noqa: E402
from kvtop.runner.engine.engine import Engine  # noqa: E402
from kvtop.runner.settings import Settings  # noqa: E402

TEXT = ("The old lighthouse keeper climbed the spiral stairs every evening at dusk. He wound the great clock, "
        "trimmed the wick, polished the brass lens until it shone, and wrote the weather in his logbook: wind "
        "from the north-west, a heavy swell, rain before midnight. Ships passed far out on the dark water, and "
        "each one answered his light with a long low horn.")
COPY = f"Text: {TEXT}\nCopy: {TEXT}\n\nText: {TEXT}\nCopy:"
CHAT = "Question: Why is the sky blue? Explain it simply, in a short paragraph.\nAnswer:"


def spec_flags(extra: list[str]) -> dict[str, object]:
    """kvtop Settings fields for llama.cpp's --spec-* flags (the ones given after --)."""
    import argparse as ap

    from kvtop.runner.commands.engine_flags import add_spec_flags

    p = ap.ArgumentParser()
    add_spec_flags(p)
    ns = p.parse_args(extra)
    return vars(ns)


def kvtop_run(engine: Engine, tokens: list[int], n: int) -> tuple[float, int, int]:
    """(tg tok/s, drafted, accepted) for one turn from an empty cache."""
    engine.reset()
    done = engine.generate(tokens, n_predict=n, ignore_eog=True)
    m = done.metrics
    return m.decode_tok_s or 0.0, m.spec_drafted, m.spec_accepted


def server_run(url: str, prompt: str, n: int) -> tuple[float, int, int]:
    r = post_json(url + "/completion", {"prompt": prompt, "n_predict": n, "temperature": 0, "cache_prompt": False,
                                        "ignore_eos": True}, timeout=600)
    t = r["timings"]
    return float(t["predicted_per_second"]), int(t.get("draft_n", 0)), int(t.get("draft_n_accepted", 0))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", default=demo_model_path())
    ap.add_argument("--spec-type", default="ngram-simple")
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("-r", type=int, default=3)
    ap.add_argument("--chat", action="store_true", help="an ordinary question instead of the copy prompt")
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    a = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    binary = cached_binary()
    if binary is None:
        print("llama-server is not built: run .ci/build-llama-server (the tests build it)", file=sys.stderr)
        return 1
    prompt = CHAT if a.chat else COPY
    fields = spec_flags(["--spec-type", a.spec_type, *extra])
    base = dict(n_ctx=2048, n_threads=a.t, temp=0.0)
    plain = Engine(Settings(a.model, **base), lambda _e: None)
    spec = Engine(Settings(a.model, **base, **fields), lambda _e: None)  # type: ignore[arg-type]
    plain.load()
    spec.load()
    tokens = plain.tokenize(prompt, add_special=True)
    flags = ["-t", str(a.t), "--spec-type", a.spec_type, *extra]
    rows: dict[str, list[tuple[float, int, int]]] = {"kvtop plain": [], "kvtop spec": [], "server plain": [],
                                                     "server spec": []}
    try:
        with llama_server(binary, a.model, "-t", str(a.t), slots=1, ctx=2048) as (url_plain, _), \
                llama_server(binary, a.model, *flags, slots=1, ctx=2048) as (url_spec, _):
            for _ in range(a.r):
                rows["server plain"].append(server_run(url_plain, prompt, a.n))
                rows["kvtop plain"].append(kvtop_run(plain, tokens, a.n))
                rows["server spec"].append(server_run(url_spec, prompt, a.n))
                rows["kvtop spec"].append(kvtop_run(spec, tokens, a.n))
    finally:
        plain.close()
        spec.close()
    med = {k: statistics.median(r[0] for r in v) for k, v in rows.items()}
    acc = {k: (sum(r[2] for r in v), sum(r[1] for r in v)) for k, v in rows.items()}
    print(f"{os.path.basename(a.model)}, {'chat' if a.chat else 'copy'} prompt ({len(tokens)} tokens), "
          f"-n {a.n}, -t {a.t}, {' '.join(flags[2:])}, {a.r} rounds (medians)")
    print(f"{'':14} {'tg tok/s':>9} {'drafted':>8} {'accepted':>9} {'acceptance':>11}")
    for k in rows:
        got, drafted = acc[k]
        rate = f"{got / drafted:.0%}" if drafted else "-"
        print(f"{k:14} {med[k]:9.1f} {drafted // a.r:8d} {got // a.r:9d} {rate:>11}")
    kx, sx = med["kvtop spec"] / med["kvtop plain"], med["server spec"] / med["server plain"]
    print(f"speedup: kvtop {kx:.2f}x, llama-server {sx:.2f}x; kvtop's / llama-server's = {kx / sx:.2f} (goal >= 0.95)")
    # the same ratio as two side-by-side factors, each round's (its four runs are minutes
    # apart at most), so that a load that moves between rounds is seen for what it is
    rk = [s[0] / p[0] for s, p in zip(rows["kvtop spec"], rows["server spec"])]
    rp = [s[0] / p[0] for s, p in zip(rows["kvtop plain"], rows["server plain"])]
    per_round = [a / b for a, b in zip(rk, rp)]
    print(f"per round: kvtop spec / server spec {', '.join(f'{x:.2f}' for x in rk)}; kvtop plain / server plain "
          f"{', '.join(f'{x:.2f}' for x in rp)}; their ratio {', '.join(f'{x:.2f}' for x in per_round)} "
          f"(median {statistics.median(per_round):.2f})")
    ka, sa = (acc["kvtop spec"][0] / acc["kvtop spec"][1] if acc["kvtop spec"][1] else 0.0,
              acc["server spec"][0] / acc["server spec"][1] if acc["server spec"][1] else 0.0)
    print(f"acceptance: kvtop {ka:.0%}, llama-server {sa:.0%}: {abs(ka - sa) * 100:.0f} points apart (goal <= 10)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
