"""``kvtop kld``: what a quantized KV cache (or a second weights file) costs in quality, by
llama-perplexity's KL-divergence statistics, beside the bytes it saves and its decode speed.

    kvtop kld [MODEL] [-f TEXT] -ctk q8_0 -ctv q8_0 [--base-ctk f16 --base-ctv f16] [-c 512] [--chunks N]
    kvtop kld BASE.gguf OTHER.gguf [-f TEXT]

One process: the same tokens through the base (f16/f16 by default) and the candidate, two
contexts on one model (or one on each model), the second half of every ``-c`` chunk scored
(runner.physics.kld says how, and where it differs from llama-perplexity). Progress and
an ETA go to stderr; Ctrl+C prints the statistics so far, marked partial, and exits 130.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from dataclasses import replace
from functools import partial
from typing import Any

from kvtop.runner.cli_types import INT32_MAX, int_in
from kvtop.runner.commands.common import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, fail, to_stderr
from kvtop.runner.commands.llama_flags import parse_flags
from kvtop.runner.model.quant_types import KV_CACHE_TYPES
from kvtop.runner.settings import Settings, settings_from_args

DEFAULT_TEXT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kld_text.txt")
DEFAULT_CTX = 512  # llama-perplexity's
MAX_TEXT_BYTES = 64 << 20


def build_parser() -> argparse.ArgumentParser:
    from kvtop.runner.commands.engine_flags import add_engine_flags

    p = argparse.ArgumentParser(
        prog="kvtop kld", allow_abbrev=False, conflict_handler="resolve",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "KL divergence of a KV cache type (or a second model file) from a base, as llama-perplexity\n"
            "--kl-divergence measures it, in one run: the same tokens through both, the second half of each\n"
            "-c chunk scored. Also what the candidate cache saves, and its decode speed against the base's."),
        epilog=("examples:\n  kvtop kld -ctk q8_0 -ctv q8_0              the demo model, kvtop's own text\n"
                "  kvtop kld model.gguf -f wiki.txt -ctk q4_0 -ctv q4_0 -c 512 --chunks 20\n"
                "  kvtop kld model-f16.gguf model-q4_k_m.gguf  a weights quantization, f16 caches\n"
                "A quantized V cache needs flash attention (-fa auto turns it on where it can)."))
    p.add_argument("model", nargs="?", help="a .gguf file (default: the demo model)")
    p.add_argument("other", nargs="?", help="a second .gguf of the same vocabulary, measured against MODEL")
    add_engine_flags(p, chat=False)
    g = p.add_argument_group("measurement")
    g.add_argument("-f", "--file", dest="text_file", metavar="TEXT",
                   help="the text to score (default: kvtop's own, about 9,000 tokens)")
    g.add_argument("-c", "--ctx-size", dest="n_ctx", type=int_in(4, INT32_MAX), default=DEFAULT_CTX, metavar="N",
                   help=f"tokens per chunk (default: {DEFAULT_CTX}, as llama-perplexity)")
    g.add_argument("--chunks", type=int_in(-1, INT32_MAX), default=-1, metavar="N",
                   help="at most N chunks (default: -1, all the text gives)")
    g.add_argument("--base-ctk", "--base-cache-type-k", dest="base_ctk", choices=list(KV_CACHE_TYPES),
                   default="f16", help="the base's K cache type (default: f16)")
    g.add_argument("--base-ctv", "--base-cache-type-v", dest="base_ctv", choices=list(KV_CACHE_TYPES),
                   default="f16", help="the base's V cache type (default: f16)")
    g.add_argument("--decode-tokens", type=int_in(0, 4096), default=32, metavar="N",
                   help="tokens of each decode-speed run at depth (default: 32; 0 = not measured)")
    g.add_argument("-o", "--output", choices=["md", "json"], default="md", help="report format (default: md)")
    return p


def read_text(path: str) -> str:
    """The text file's contents (``OSError``/``ValueError`` with a reason)."""
    with open(path, "rb") as fh:
        data = fh.read(MAX_TEXT_BYTES + 1)
    if len(data) > MAX_TEXT_BYTES:
        raise ValueError(f"{path}: over {MAX_TEXT_BYTES >> 20} MiB")
    return data.decode("utf-8", errors="replace")


def sides(a: argparse.Namespace) -> tuple[Settings, Settings]:
    """(base, candidate) Settings: the candidate has -ctk/-ctv, the base --base-ctk/--base-ctv
    (with a second model file, each model its own: both f16 unless given)."""
    scalars = argparse.Namespace(**{k: v for k, v in vars(a).items() if k in Settings.__dataclass_fields__})
    cand = settings_from_args(a.other or a.model, scalars)
    base = replace(cand, model=a.model, cache_type_k=a.base_ctk, cache_type_v=a.base_ctv)
    return base, cand


def kv_saving(a: argparse.Namespace, base: Settings, cand: Settings) -> dict[str, Any]:
    """KV bytes of each side at -c and at the model's trained context (kv_bytes.py)."""
    from kvtop.runner.model.inspect import load_facts
    from kvtop.runner.physics.kv_bytes import kv_layout

    fb, fc = load_facts(base.model), load_facts(cand.model)
    at = []
    for what, n in (("-c", a.n_ctx), ("trained context", fb.n_ctx_train or 0)):
        if n <= 0:
            continue
        lb = kv_layout(fb, n, base.cache_type_k, base.cache_type_v, base.swa_full, base.n_ubatch)
        lc = kv_layout(fc, n, cand.cache_type_k, cand.cache_type_v, cand.swa_full, cand.n_ubatch)
        at.append({"what": what, "n_ctx": lb.n_ctx, "base_bytes": lb.bytes_allocated,
                   "candidate_bytes": lc.bytes_allocated})
    return {"at": at}


def _progress(done: int, total: int, seconds: float, decode_tokens: int = 0) -> None:
    """One chunk scored. The ETA is of the chunks, rounded up (it read "ETA 0 s" with a
    chunk to go); the decode speed measured after them is said, not counted in it (it
    read 0 for the 12 s the decode speed then took: new-user trial)."""
    then = ", then the decode speed" if decode_tokens > 0 else ""
    if done >= total:
        rest = f"; measuring the decode speed ({decode_tokens} tokens a side)" if decode_tokens > 0 else ""
        to_stderr(f"kvtop kld: chunk {done}/{total}, {seconds:.1f} s: every chunk scored{rest}")
        return
    left = seconds / done * (total - done) if done else 0.0
    to_stderr(f"kvtop kld: chunk {done}/{total}, {seconds:.1f} s, ETA {max(1, math.ceil(left))} s{then}")


def kld_main(argv: list[str]) -> int:
    p = build_parser()
    a = parse_flags(p, argv)
    if not a.model:
        from kvtop.runner.demo import INSTALL_HINT, demo_model_path

        a.model = demo_model_path()
        if not a.model:
            p.error(f"give a MODEL (or install the demo model: {INSTALL_HINT})")
    from kvtop.runner.model.inspect import ModelFileError, load_facts

    for path in (a.model, a.other):
        if path:
            try:
                load_facts(path, need_weights=True)
            except ModelFileError as exc:
                return fail(str(exc))
    path = a.text_file or DEFAULT_TEXT
    try:
        text = read_text(path)
    except (OSError, ValueError) as exc:
        return fail(f"cannot read the text {path}: {exc.strerror if isinstance(exc, OSError) else exc}")
    base, cand = sides(a)
    from kvtop.runner.commands.kld_memory import fit_problem, free_memory

    free, where = free_memory(cand)
    if why := fit_problem((load_facts(base.model), base.resolved()), (load_facts(cand.model), cand.resolved()),
                          a.n_ctx, free, where):
        return fail(why)
    return measure(a, base, cand, text, path)


def measure(a: argparse.Namespace, base: Settings, cand: Settings, text: str, text_path: str) -> int:
    from kvtop.runner.commands.kld_output import format_json, format_md, report
    from kvtop.runner.commands.kld_run import KldError, KldRun
    from kvtop.runner.engine.engine import EngineLoadError
    from kvtop.runner.engine.scoring import ScoringError

    def name(s: Settings) -> str:
        return f"{os.path.basename(s.model)} {s.cache_type_k}/{s.cache_type_v}"

    meta = {"base": name(base), "candidate": name(cand), "model": base.model, "other_model": a.other,
            "base_type_k": base.cache_type_k, "base_type_v": base.cache_type_v, "type_k": cand.cache_type_k,
            "type_v": cand.cache_type_v, "flash_attn": cand.flash_attn, "text": os.path.abspath(text_path),
            "n_ctx": a.n_ctx}
    run = None
    try:
        run = KldRun(base, cand, text, a.n_ctx, a.chunks)
        to_stderr(f"kvtop kld: {len(run.tokens):,} tokens, {run.n_chunk} chunks of {a.n_ctx}; "
                  f"{meta['candidate']} against {meta['base']}")
        res = run.run(partial(_progress, decode_tokens=a.decode_tokens), a.decode_tokens)
    except KldError as exc:
        if exc.stats is not None:
            meta.update(n_tokens=len(run.tokens) if run else 0, seconds=0.0)
            print(_render(a, report(exc.stats, meta, {}, {}), format_md, format_json))
        return fail(str(exc))
    except (EngineLoadError, ScoringError) as exc:
        return fail(str(exc))
    except KeyboardInterrupt:
        fail("stopped before the first chunk was scored")
        return EXIT_INTERRUPTED
    finally:
        if run is not None:
            run.close()
    meta.update(n_tokens=res.n_tokens, seconds=res.seconds)
    if not res.stats.partial and not a.other:  # kept for kvtop estimate's KV type list
        from kvtop.runner.commands.kld_cache import entry_of, remember, text_digest
        from kvtop.runner.records.paths import default_paths

        remember(default_paths().cache_dir, base.model, entry_of(res.stats, cand.cache_type_k, cand.cache_type_v,
                 base.cache_type_k, base.cache_type_v, a.n_ctx, text_digest(text)))
    rep = report(res.stats, meta, kv_saving(a, base, cand), res.decode)
    print(_render(a, rep, format_md, format_json))
    if res.interrupted:
        to_stderr("kvtop kld: stopped by Ctrl+C: the statistics above are partial"
                  if res.stats.partial else "kvtop kld: stopped by Ctrl+C during the decode-speed runs")
        return EXIT_INTERRUPTED
    return EXIT_OK if not res.stats.partial else EXIT_ERROR


def _render(a: argparse.Namespace, rep: dict[str, Any], md: Any, js: Any) -> str:
    return str(js(rep) if a.output == "json" else md(rep))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(kld_main(sys.argv[1:]))
