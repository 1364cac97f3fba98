"""The headless commands: ``kvtop bench`` and ``kvtop estimate``.

Exit codes: 0 ok, 1 runtime error (one line on stderr), 2 usage error (argparse).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

from runner.sanitize import clean_line

BENCH_TEXT = (
    "The history of computing is a story of ever smaller, ever faster machines. "
    "Engineers measured every cycle, and users waited for every answer. "
)


def _fail(msg: str) -> int:
    print(f"kvtop: {clean_line(msg, 400)}", file=sys.stderr)
    return 1


def estimate_main(argv: list[str]) -> int:
    from runner.settings import DEFAULT_CTX
    from runner.model.quant_types import KV_CACHE_TYPES

    p = argparse.ArgumentParser(prog="kvtop estimate", description=(
        "Predict KV cache bytes, prefill time and decode ceilings from a GGUF's header "
        "and this machine's measured (or given) bandwidth and FLOPS. No weights are loaded."))
    p.add_argument("model")
    p.add_argument("-c", "--ctx", "--ctx-size", dest="ctx", type=int, default=DEFAULT_CTX)
    p.add_argument("-ctk", "--cache-type-k", choices=list(KV_CACHE_TYPES), default="f16")
    p.add_argument("-ctv", "--cache-type-v", choices=list(KV_CACHE_TYPES), default="f16")
    p.add_argument("--swa-full", action="store_true")
    p.add_argument("-ub", "--ubatch-size", type=int, default=512)
    p.add_argument("-ngl", "--n-gpu-layers", type=int, default=0)
    p.add_argument("--prompt-tokens", type=int, default=512)
    p.add_argument("--output-tokens", type=int, default=128)
    p.add_argument("--bandwidth-gbs", type=float)
    p.add_argument("--tflops", type=float)
    p.add_argument("--reprobe", action="store_true", help="re-run the CPU probe instead of using the cached one")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    if a.ctx <= 0 or a.prompt_tokens < 0 or a.output_tokens < 0:
        p.error("--ctx must be positive; token counts must not be negative")

    from runner.system.hardware import hardware_profile
    from runner.physics.report import ModelFileError, estimate_report, format_report, load_facts

    try:
        facts = load_facts(a.model)
    except ModelFileError as exc:
        return _fail(str(exc))
    hw = hardware_profile(a.n_gpu_layers, a.bandwidth_gbs, a.tflops, refresh=a.reprobe)
    r = estimate_report(facts, hw, a.ctx, a.cache_type_k, a.cache_type_v, a.swa_full, a.ubatch_size,
                        a.prompt_tokens, a.output_tokens, a.n_gpu_layers)
    if a.json:
        print(json.dumps(r, indent=2))
    else:
        print(format_report(r))
    return 0


def bench_main(argv: list[str]) -> int:
    from runner.settings import add_engine_flags, settings_from_args

    p = argparse.ArgumentParser(prog="kvtop bench", description=(
        "Measure prefill and decode like llama-bench, through kvtop's engine in its child process."))
    p.add_argument("model")
    p.add_argument("-p", "--n-prompt", dest="n_prompt", type=int, default=512)
    p.add_argument("-r", "--repetitions", type=int, default=3)
    p.add_argument("--json", action="store_true")
    p.add_argument("--in-process", action="store_true", help="run the engine in this process")
    add_engine_flags(p)
    a = p.parse_args(argv)
    if a.n_predict < 0:
        a.n_predict = 128
    if a.n_prompt < 1 or a.repetitions < 1:
        p.error("-p and -r must be at least 1")
    settings = settings_from_args(a.model, a)

    from runner.events import LoadFailed
    from runner.process.parent import EngineProcess, EngineUnavailable, InProcessEngine

    eng = InProcessEngine(settings) if a.in_process else EngineProcess(settings)
    try:
        loaded = eng.start(lambda e: None)
        base = eng.tokenize(BENCH_TEXT)
        prompt = (base * (a.n_prompt // max(1, len(base)) + 1))[: a.n_prompt]
        if a.n_prompt + a.n_predict > loaded.n_ctx:
            return _fail(f"-p {a.n_prompt} + -n {a.n_predict} exceeds the context ({loaded.n_ctx}); raise -c")
        runs = []
        for _ in range(a.repetitions):
            eng.reset()
            done = eng.generate(prompt, lambda e: None, n_predict=a.n_predict, ignore_eog=True)
            if not hasattr(done, "metrics"):
                return _fail(done.reason)
            runs.append(done.metrics)
    except EngineUnavailable as exc:
        return _fail(str(exc))
    except LoadFailed as exc:  # pragma: no cover
        return _fail(exc.reason)
    finally:
        eng.close()
    pp = [m.prefill_tok_s for m in runs if m.prefill_tok_s]
    tg = [m.decode_tok_s for m in runs if m.decode_tok_s]
    ttft = [m.ttft_s for m in runs if m.ttft_s is not None]
    b = loaded.buffers
    result = {
        "model": loaded.path,
        "name": loaded.name,
        "description": loaded.description,
        "n_threads": loaded.n_threads,
        "n_threads_batch": loaded.n_threads_batch,
        "threads_why": eng.settings.threads_why,
        "n_ctx": loaded.n_ctx,
        "n_batch": loaded.n_batch,
        "n_ubatch": loaded.n_ubatch,
        "n_gpu_layers": loaded.n_gpu_layers,
        "flash_attn": loaded.flash_attn,
        "n_prompt": a.n_prompt,
        "n_gen": a.n_predict,
        "repetitions": a.repetitions,
        "pp_tok_s": statistics.median(pp) if pp else None,
        "pp_tok_s_runs": pp,
        "tg_tok_s": statistics.median(tg) if tg else None,
        "tg_tok_s_runs": tg,
        "ttft_s": statistics.median(ttft) if ttft else None,
        "kv_bytes_allocated": round(b.kv_mib * 1024 * 1024),
        "weights_bytes": round(b.weights_mib * 1024 * 1024),
        "compute_bytes": round(b.compute_total_mib * 1024 * 1024),
        "process": "in-process" if a.in_process else "child",
    }
    if a.json:
        print(json.dumps(result, indent=2))
        return 0

    def sd(xs):
        return statistics.stdev(xs) if len(xs) > 1 else 0.0

    print(f"model: {loaded.name} ({loaded.description}), {loaded.n_params / 1e6:.1f} M params")
    print(f"threads: {loaded.n_threads} ({eng.settings.threads_why}), batch {loaded.n_threads_batch}, "
          f"n_ubatch {loaded.n_ubatch}, flash_attn {loaded.flash_attn}, ngl {loaded.n_gpu_layers}")
    print(f"{'test':>12} | {'t/s':>16} | {'ttft':>10}")
    print(f"{'-' * 12}-+-{'-' * 16}-+-{'-' * 10}")
    print(f"{'pp' + str(a.n_prompt):>12} | {result['pp_tok_s']:>8.2f} ± {sd(pp):>5.2f} | {result['ttft_s']:>8.3f} s")
    print(f"{'tg' + str(a.n_predict) + '@d' + str(a.n_prompt):>12} | {result['tg_tok_s']:>8.2f} ± {sd(tg):>5.2f} | {'':>10}")
    print(f"KV allocated {b.kv_mib:.2f} MiB, weights {b.weights_mib:.2f} MiB, compute {b.compute_total_mib:.2f} MiB")
    return 0
