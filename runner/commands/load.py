"""``kvtop load URL``: many users on a running llama-server, and the roof over them.

For each concurrency level (``--users 1,2,4,8``), that many users each send streamed
requests of exactly ``-p`` prompt tokens and ``-n`` generated tokens, one after another
(closed loop); or, with ``--rate``, requests arrive at random (Poisson) at each rate.
One row per level: the throughput all users got together and what each one got, the
time to first token and between tokens, and beside them the batched roof of the
server pane (B x bandwidth / (weights + sum of KV)), the compute roof and how many more
conversations the KV left holds. Batching shares each read of the weights, so the
total should rise with users while each user's rate falls; where the measured curve
leaves the roof, something else binds (compute, the CPU, the client).

Ctrl+C stops at once: every stream in flight is closed (llama-server stops those
tasks), kvtop waits until no slot is busy, and prints the rows that finished.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kvtop.runner.cli_types import int_in, positive_float, positive_int
from kvtop.runner.commands.common import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, Report, fail, stopped_before
from kvtop.runner.commands.load_output import FORMATS, knee, meets, render, write_plot

if TYPE_CHECKING:
    from kvtop.runner.server.credentials import Credentials
    from kvtop.runner.server.load_driver import LevelRun, LoadDriver
    from kvtop.runner.server.props import ServerInfo


def _float_list(text: str) -> list[float]:
    return [positive_float(x) for x in text.split(",")]


def build_parser() -> argparse.ArgumentParser:
    from kvtop.runner.commands.bench_plan import int_list
    from kvtop.runner.model.quant_types import KV_CACHE_TYPES

    p = argparse.ArgumentParser(
        prog="kvtop load", allow_abbrev=False, formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Drive a running llama-server with many concurrent users and show throughput against the\n"
            "batched roof. Each level sends streamed requests of exactly -p prompt tokens (token ids the\n"
            "server tokenised, different for every request) and -n generated tokens (ignore_eos)."),
        epilog=(
            "Start the server with --metrics --slots (kvtop reads deferred requests, its own token\n"
            "counters and the KV in use from them) and -np at least the largest --users level.\n"
            "gen t/s: all users' tokens / the level's time; per user t/s: the median of the server's\n"
            "own decode rate per request; TTFT, ITL and e2e: this client's clock."))
    p.add_argument("url", nargs="*", help="llama-server URL(s); several spread the same load (a fleet)")
    p.add_argument("--server", action="append", default=[], metavar="URL", help="another server (repeatable)")
    p.add_argument("--api-key", metavar="KEY", help="the server's --api-key (default: $LLAMA_API_KEY)")
    g = p.add_argument_group("the load")
    g.add_argument("--users", type=int_list(1, 4096), default=None, metavar="N,N",
                   help="concurrency levels, comma list or range (default: 1,2,4,8 up to the server's slots)")
    g.add_argument("--rate", type=_float_list, default=None, metavar="R,R",
                   help="Poisson arrivals per second instead of --users (open loop), one row per rate")
    g.add_argument("-p", "--n-prompt", dest="n_prompt", type=int_in(1, 1 << 20), default=256, metavar="N",
                   help="prompt tokens of each request (default: 256)")
    g.add_argument("-n", "--n-predict", dest="n_predict", type=int_in(1, 1 << 20), default=128, metavar="N",
                   help="generated tokens of each request (default: 128)")
    stop = g.add_mutually_exclusive_group()
    stop.add_argument("--requests", type=positive_int, default=None, metavar="N",
                      help="requests per user at each level (--rate: in all, per rate) (default: 4; --rate 16)")
    stop.add_argument("--duration", type=positive_float, default=None, metavar="S",
                      help="seconds each level sends requests for, instead of --requests")
    g.add_argument("--shared-prefix", type=int_in(0, 1 << 20), default=0, metavar="T",
                   help="the first T prompt tokens the same in every request (the prefix cache reuses them)")
    g.add_argument("--endpoint", choices=("completion", "chat"), default="completion",
                   help="/completion (token ids: exact prompt length; default) or /v1/chat/completions "
                        "(the text of those ids, plus the chat template's tokens)")
    g.add_argument("--no-warmup", dest="warmup", action="store_false", help="skip the unmeasured warm-up round")
    r = p.add_argument_group("the roof (as kvtop estimate)")
    r.add_argument("--model", metavar="FILE", help="the server's GGUF, when its own path is not readable here")
    r.add_argument("--bandwidth-gbs", type=positive_float, metavar="X", help="the server machine's bandwidth, GB/s")
    r.add_argument("--tflops", type=positive_float, metavar="X", help="the server machine's peak TFLOPS")
    r.add_argument("-ngl", "--n-gpu-layers", dest="n_gpu_layers", type=int_in(-1), default=0, metavar="N",
                   help="the server's -ngl: which device's figures the roof uses (default: 0, the CPU)")
    r.add_argument("-ctk", "--cache-type-k", dest="cache_type_k", choices=list(KV_CACHE_TYPES), default="f16",
                   help="K cache type (default: f16; the server's -ctk)")
    r.add_argument("-ctv", "--cache-type-v", dest="cache_type_v", choices=list(KV_CACHE_TYPES), default="f16",
                   help="V cache type (default: f16; the server's -ctv)")
    o = p.add_argument_group("output")
    o.add_argument("-o", "--output", choices=FORMATS, default="md", help="md (default), csv, json or jsonl")
    o.add_argument("--plot", metavar="FILE.svg", help="also write throughput vs users with the roof as SVG")
    o.add_argument("--slo-ttft", type=positive_float, metavar="S", help="target TTFT p95, seconds (the knee)")
    o.add_argument("--slo-tok-s", type=positive_float, metavar="R", help="target per-user tok/s (the knee)")
    o.add_argument("--no-tui", action="store_true", help="print the rows only (also when stdout is not a terminal)")
    o.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    return p


def check_args(p: argparse.ArgumentParser, a: argparse.Namespace) -> list[str]:
    urls = list(dict.fromkeys(list(a.url) + list(a.server)))
    if not urls:
        p.error("give a llama-server URL (kvtop load http://127.0.0.1:8080)")
    if a.users and a.rate:
        p.error("give --users or --rate (a closed loop of users, or arrivals at a rate), not both")
    if a.shared_prefix > a.n_prompt:
        p.error(f"--shared-prefix {a.shared_prefix} is longer than the prompt (-p {a.n_prompt})")
    if a.plot and not a.plot.lower().endswith(".svg"):
        p.error("--plot writes SVG: give a FILE ending in .svg")
    return urls


def load_main(argv: list[str], live: Live | None = None) -> int:
    """``live(a, urls, key, infos) -> SweepResult``: the live view (tui/start/launch_server.py ``load_live``), used
    on a terminal unless --no-tui; runner/ itself never imports the UI."""
    from kvtop.runner.server.credentials import Credentials
    from kvtop.runner.server.http import ServerClient, ServerError
    from kvtop.runner.server.props import read_server_info
    from kvtop.runner.server.urls import api_key_from_env

    p = build_parser()
    a = p.parse_args(argv)
    # the key and the URLs' logins stay inside Credentials (the HTTP header): no URL kept,
    # printed or plotted holds a user:password (runner/server/credentials.py)
    key = Credentials(api_key_from_env(a.api_key))
    try:
        urls = [key.add(u) for u in check_args(p, a)]
    except ServerError as exc:
        p.error(str(exc))
    infos: list[ServerInfo] = []
    for url in urls:
        client = ServerClient(url, key)
        try:
            infos.append(read_server_info(client, wait_s=30))
        except ServerError as exc:
            return fail(str(exc))
        except KeyboardInterrupt:  # Ctrl+C while the server loads its model
            return stopped_before(url)
        finally:
            client.close()
    small = min(infos, key=lambda i: i.n_ctx)
    if a.n_prompt + a.n_predict > small.n_ctx:
        return fail(f"-p {a.n_prompt} + -n {a.n_predict} tokens do not fit a slot's context ({small.n_ctx} tokens): "
                    f"give smaller -p/-n, or start llama-server with a larger -c")
    if live is not None and not a.no_tui and sys.stdout.isatty() and sys.stdin.isatty():
        out = live(a, urls, key, infos)
        return finish(a, urls, out) if out is not None else EXIT_INTERRUPTED
    return run_sweep(a, urls, key, infos)


def levels_of(a: argparse.Namespace, infos: Sequence[ServerInfo]) -> list[float]:
    if a.rate:
        return list(a.rate)
    if a.users:
        return list(a.users)
    slots = sum(i.total_slots for i in infos)
    return [u for u in (1, 2, 4, 8) if u <= max(slots, 1)]


STOPPED = "stopped: streams in flight closed; "


@dataclass
class SweepResult:
    rows: list[Report] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    stopped: bool = False


# the live view (tui/start/launch_server.py load_live): None when it was stopped before any row
Live = Callable[[argparse.Namespace, list[str], "Credentials", list["ServerInfo"]], "SweepResult | None"]


def sweep(a: argparse.Namespace, urls: list[str], key: Credentials, infos: Sequence[ServerInfo],
          on_rows: Callable[[list[Report]], None] | None = None,
          driver_ready: Callable[[LoadDriver], None] | None = None,
          say: Callable[[str], None] | None = None) -> SweepResult:
    """Every level, one after another. ``on_rows(rows)`` gets each level's rows as it ends
    (the live view), ``driver_ready(driver)`` the driver (to stop it), ``say(text)`` the
    progress (default: stderr). Ctrl+C (or ``driver.stop()``) ends the level in flight."""
    from kvtop.runner.commands.load_physics import physics_for
    from kvtop.runner.commands.load_rows import build_row
    from kvtop.runner.server.http import ServerError
    from kvtop.runner.server.load_driver import LoadDriver

    say = say or (lambda text: progress(a, text))
    out = SweepResult()
    levels = levels_of(a, infos)
    driver = None
    try:
        physics = physics_for(infos[0], urls[0], a)
        out.notes = [server_note(urls, infos, a), physics.note]
        driver = LoadDriver(urls, key, a.n_prompt, a.shared_prefix, a.endpoint)
        if driver_ready:
            driver_ready(driver)
        if a.warmup and not driver.stopped:
            say("warm-up (not measured)")
            driver.warm_up(int(min(max(levels) if not a.rate else 1, sum(i.total_slots for i in infos))))
        for li, level in enumerate(levels):
            if driver.stopped:
                break
            say(f"level {li + 1}/{len(levels)}: " + (f"rate {level:g}/s" if a.rate else f"{level} user{'s' if level != 1 else ''}"))
            run = one_level(driver, a, level, li)
            if run.stopped:
                break  # a level cut short is not a measurement
            level_rows = [build_row(run, None, physics, len(urls))]
            if len(urls) > 1:
                level_rows = [build_row(run, i, physics, len(urls)) for i in range(len(urls))] + level_rows
            out.rows += level_rows
            if on_rows:
                on_rows(level_rows)
    except KeyboardInterrupt:
        out.stopped = True
    except ServerError as exc:
        out.error = str(exc)
    if driver is not None and (out.stopped or driver.stopped):
        out.stopped = True
        driver.stop()
        idle = driver.wait_idle()
        # a note, not progress: ``finish`` prints it once, with the table or alone (the live view
        # shows it in its status line); said here too, a stop on a terminal read it twice
        out.notes.append(STOPPED + ("no slot was busy afterwards" if idle
                                    else "a slot was still busy 15 s after (or /slots is off)"))
    out.notes += summary_notes(out.rows, a)
    return out


def run_sweep(a: argparse.Namespace, urls: list[str], key: Credentials, infos: Sequence[ServerInfo]) -> int:
    return finish(a, urls, sweep(a, urls, key, infos))


def finish(a: argparse.Namespace, urls: list[str], out: SweepResult) -> int:
    """The rows on stdout (and the plot); the exit code: 130 after a stop, 1 after an error."""
    error = out.error
    notes_printed = bool(out.rows) and a.output == "md"  # md prints the notes under the table
    if not notes_printed:
        for note in out.notes:
            if note.startswith(STOPPED):
                progress(a, note)
    if out.rows:
        from kvtop.runner.redact import scrub, scrub_json

        text = render(a.output, out.rows, out.notes if a.output == "md" else [])
        print(scrub_json(text) if a.output in ("json", "jsonl") else scrub(text), flush=True)
        if a.plot:
            try:
                write_plot(a.plot, out.rows, f"kvtop load: {urls[0]} -p {a.n_prompt} -n {a.n_predict}")
            except OSError as exc:
                error = error or f"cannot write {a.plot}: {exc.strerror or exc}"
    if error:
        return fail(error)
    if out.stopped:
        return EXIT_INTERRUPTED
    return EXIT_OK if out.rows else EXIT_ERROR


def one_level(driver: LoadDriver, a: argparse.Namespace, level: float, li: int) -> LevelRun:
    if a.rate:
        requests = a.requests or (None if a.duration else 16)
        return driver.open_loop(level, a.n_predict, requests, a.duration, ("rate", li))
    requests = a.requests or (None if a.duration else 4)
    return driver.closed_loop(int(level), a.n_predict, requests, a.duration, ("level", li))  # users: whole numbers


def progress(a: argparse.Namespace, text: str) -> None:
    if not a.quiet:
        print(f"kvtop load: {text}", file=sys.stderr, flush=True)


def server_note(urls: Sequence[str], infos: Sequence[ServerInfo], a: argparse.Namespace) -> str:
    parts = [f"{u} ({i.build_info}, {i.total_slots} slots of {i.n_ctx} tokens)" for u, i in zip(urls, infos)]
    return (f"kvtop load: -p {a.n_prompt} -n {a.n_predict} via /{a.endpoint}, "
            f"shared prefix {a.shared_prefix}; " + "; ".join(parts))


def summary_notes(rows: list[Report], a: argparse.Namespace) -> list[str]:
    notes = []
    if any(r["client_saturated"] for r in rows):
        notes.append("the client used most of a core in some level: it may limit what it measured there")
    if any(r["failed"] for r in rows):
        notes.append(f"{sum(r['failed'] for r in rows)} requests failed")
    if a.slo_ttft is not None or a.slo_tok_s is not None:
        mine = [r for r in rows if r["server"] == "all"] or rows
        k = knee(mine, a.slo_ttft, a.slo_tok_s)
        bad = [r for r in mine if not meets(r, a.slo_ttft, a.slo_tok_s)]
        level: Callable[[Report], str] = (lambda r: f"{r['users']} user{'s' if r['users'] != 1 else ''}"
                                          if r["users"] is not None else f"rate {r['rate']:g}/s")
        notes.append("knee: " + (f"{level(k)} is the most that meets the targets" if k else "no level meets the targets")
                     + (f"; {level(bad[0])} misses them" if bad else ""))
    return notes
