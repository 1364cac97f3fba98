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
tasks), kvtop waits until no slot is busy, and prints the rows that finished. SIGTERM
(``timeout``) and SIGHUP (a closed terminal) stop it the same way; the exit code is
128 + the signal's number.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kvtop.runner.commands.common import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_OK,
    Report,
    fail,
    stopped_before,
    to_stderr,
    write_stdout,
)
from kvtop.runner.commands.load_args import build_parser, check_args, check_concurrency, check_identity, in_flight_bound
from kvtop.runner.commands.load_json import render
from kvtop.runner.commands.load_output import knee, meets
from kvtop.runner.commands.load_plot import write_plot
from kvtop.runner.units import fmt_int

if TYPE_CHECKING:
    from kvtop.runner.server.credentials import Credentials
    from kvtop.runner.server.load_driver import LevelRun, LoadDriver
    from kvtop.runner.server.props import ServerInfo


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised in the main thread as Ctrl+C is: the same stop."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


_signalled: list[int] = []


def _on_signal(signum: int, _frame: object) -> None:
    if not _signalled:  # the first one stops; a second while stopping is not a traceback
        _signalled.append(signum)
        raise Stopped(signum)


def catch_signals() -> dict[int, Any]:
    """SIGTERM and SIGHUP stop the run as Ctrl+C does, until ``restore(the answer)``
    (headless only: the live view is Textual's, and its q and Esc)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return {}
    _signalled.clear()
    sigs = [getattr(signal, n) for n in ("SIGTERM", "SIGHUP") if hasattr(signal, n)]
    return {sig: signal.signal(sig, _on_signal) for sig in sigs}


def restore(previous: dict[int, Any]) -> None:
    import signal

    for sig, handler in previous.items():
        signal.signal(sig, handler)


def load_main(argv: list[str], live: Live | None = None) -> int:
    previous = catch_signals()
    try:
        return _load_main(argv, live, previous)
    finally:
        restore(previous)


def _load_main(argv: list[str], live: Live | None, previous: dict[int, Any]) -> int:
    """``live(a, urls, key, infos) -> SweepResult``: the live view (tui/start/launch_server.py ``load_live``), used
    on a terminal unless --no-tui; runner/ itself never imports the UI."""
    from kvtop.runner.commands.llama_flags import parse_flags
    from kvtop.runner.server.credentials import Credentials
    from kvtop.runner.server.http import ServerClient, ServerError
    from kvtop.runner.server.props import read_server_info
    from kvtop.runner.server.urls import api_key_from_env

    p = build_parser()
    a = parse_flags(p, argv)
    if sys.stdout is None:  # started with descriptor 1 closed: nowhere for the rows to go
        return fail("stdout is closed: nowhere to write the results (give it a file: > rows.md)")
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
        except KeyboardInterrupt as exc:  # Ctrl+C (or a signal) while the server loads its model
            stopped_before(url)
            return 128 + getattr(exc, "signum", 2)
        finally:
            client.close()
    refused = check_concurrency(a, [i.total_slots for i in infos]) or \
        (check_identity(urls, key, infos) if len(urls) > 1 else None)
    if refused:
        return fail(refused)
    small = min(infos, key=lambda i: i.n_ctx)
    if a.n_prompt + a.n_predict > small.n_ctx:
        return fail(f"-p {a.n_prompt} + -n {a.n_predict} tokens do not fit a slot's context ({fmt_int(small.n_ctx)} tokens): "
                    f"give smaller -p/-n, or start llama-server with a larger -c")
    if live is not None and not a.no_tui and sys.stdout is not None and sys.stdout.isatty() \
            and sys.stdin is not None and sys.stdin.isatty():
        restore(previous)
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
    signum: int = 2  # what stopped it: SIGINT, SIGTERM or SIGHUP
    physics: Any = None  # runner/commands/load_physics.py LoadPhysics: the roof (the json header, the plot)
    infos: Sequence[Any] = ()  # the servers' /props (the json header)
    local: bool = False  # a server on this machine: its others' CPU is the server's machine's


# the live view (tui/start/launch_server.py load_live): None when it was stopped before any row
Live = Callable[[argparse.Namespace, list[str], "Credentials", list["ServerInfo"]], "SweepResult | None"]


def sweep(a: argparse.Namespace, urls: list[str], key: Credentials, infos: Sequence[ServerInfo],
          on_rows: Callable[[list[Report]], None] | None = None,
          driver_ready: Callable[[LoadDriver], None] | None = None,
          say: Callable[[str], None] | None = None, on_physics: Callable[[Any], None] | None = None) -> SweepResult:
    """Every level, one after another. ``on_rows(rows)`` gets each level's rows as it ends
    (the live view), ``driver_ready(driver)`` the driver (to stop it), ``say(text)`` the
    progress (default: stderr), ``on_physics`` the roof (its formula on screen). Ctrl+C
    (or ``driver.stop()``) ends the level in flight."""
    from kvtop.runner.commands.load_checks import run_busy
    from kvtop.runner.commands.load_physics import physics_for
    from kvtop.runner.commands.load_rows import build_row
    from kvtop.runner.commands.load_say import HEADLESS_EVERY_S, LIVE_EVERY_S, Ticker, check_level
    from kvtop.runner.server.http import ServerError
    from kvtop.runner.server.load_driver import LoadDriver
    from kvtop.runner.server.urls import is_loopback

    every = getattr(a, "progress", HEADLESS_EVERY_S) if say is None else LIVE_EVERY_S
    say = say or (lambda text: progress(a, text))
    out = SweepResult(infos=infos, local=any(is_loopback(u) for u in urls))
    levels = levels_of(a, infos)
    driver, in_flight = None, None
    try:
        out.physics = physics = physics_for(infos[0], urls[0], a)
        out.notes = [server_note(urls, infos, a), physics.formula() or physics.note]
        _ = on_physics(physics) if on_physics else None
        slots = [i.total_slots for i in infos]
        driver = LoadDriver(urls, key, a.n_prompt, a.shared_prefix, a.endpoint, slots=slots,
                            max_in_flight=in_flight_bound(a, slots), openai=openai_servers(infos))
        if driver_ready:
            driver_ready(driver)
        driver.on_tick = ticker = Ticker(driver, say, every)
        if a.warmup and not driver.stopped:
            say("warm-up (not measured)")
            driver.warm_up(int(min(max(levels) if not a.rate else 1, sum(slots))))
            if driver.dead:
                out.error = f"{driver.dead} in the warm-up: no level was run"
        started: list[str | None] = [None] * len(urls)  # each server's process, as /metrics names it
        for li, level in enumerate(levels):
            if driver.stopped:
                break
            name = level_name(a, level)
            say(f"level {li + 1}/{len(levels)}: {name}")
            ticker.start(f"level {li + 1}/{len(levels)}: {name}")
            in_flight = f"{name} (level {li + 1}/{len(levels)})"
            run = one_level(driver, a, level, li)
            if run.stopped and not run.dead:
                out.notes.append(f"{in_flight} was stopped before it ended: no row")
                break  # a level cut short by the user is not a measurement
            in_flight = None
            run.restarted = restarts(run, started)
            level_rows = [build_row(run, None, physics, len(urls))]
            if len(urls) > 1:
                level_rows = [build_row(run, i, physics, len(urls)) for i in range(len(urls))] + level_rows
            out.notes += check_level(level_rows, out.rows, out.local, name)
            out.rows += level_rows
            out.notes += level_notes(run, name, sum(slots), driver.max_in_flight)
            if on_rows:
                on_rows(level_rows)
            if run.dead:  # the row is marked partial; the levels after it are not run
                later = len(levels) - li - 1
                out.error = f"{run.dead}: {name} (level {li + 1}/{len(levels)}) is partial" + \
                    (f", {later} later level{'s' if later != 1 else ''} not run" if later else "")
                break
    except KeyboardInterrupt as exc:
        out.stopped, out.signum = True, getattr(exc, "signum", 2)
        _signalled.append(out.signum)  # a SIGTERM or SIGHUP while it stops is no traceback
        if in_flight:
            out.notes.append(f"{in_flight} was stopped before it ended: no row")
    except ServerError as exc:
        out.error = str(exc)
    if driver is not None and not driver.dead and (out.stopped or driver.stopped):
        out.stopped = True
        driver.stop()
        idle = driver.wait_idle()
        # a note, not progress: ``finish`` prints it once, with the table or alone (the live view
        # shows it in its status line); said here too, a stop on a terminal read it twice
        out.notes.append(STOPPED + ("no slot was busy afterwards" if idle
                                    else "a slot was still busy 15 s after (or /slots is off)"))
    out.notes += summary_notes(out.rows, a) + [n for n in [run_busy(out.rows, out.local)] if n and len(levels) > 1]
    return out


def run_sweep(a: argparse.Namespace, urls: list[str], key: Credentials, infos: Sequence[ServerInfo]) -> int:
    out = sweep(a, urls, key, infos)
    _signalled.append(0)  # measured: a SIGTERM or SIGHUP from now on does not cut the rows' printing
    return finish(a, urls, out)


def finish(a: argparse.Namespace, urls: list[str], out: SweepResult) -> int:
    """The rows on stdout (and the plot); the exit code: 130 after a stop, 1 after an error."""
    error = out.error
    notes_printed = bool(out.rows) and a.output == "md"  # md prints the notes under the table
    if not notes_printed:  # the others: what went wrong on stderr (the counts are in the rows)
        for note in out.notes[2:]:
            if not note.startswith(("knee", "the client used")):  # not progress: said with --quiet too
                to_stderr(f"kvtop load: {note}")
    if out.rows:
        from kvtop.runner.commands.load_json import run_header
        from kvtop.runner.redact import scrub, scrub_json

        header = run_header(a, urls, out.infos, out.physics, out.rows, out.local) \
            if a.output in ("json", "jsonl") else None
        text = render(a.output, out.rows, out.notes if a.output == "md" else [], header)
        problem = write_stdout(scrub_json(text) if a.output in ("json", "jsonl") else scrub(text))
        if problem:
            return fail(problem)
        if a.plot:
            try:
                write_plot(a.plot, out.rows, f"kvtop load: {urls[0]} -p {a.n_prompt} -n {a.n_predict}",
                           a.slo_ttft, a.slo_tok_s, out.physics.formula() if out.physics is not None else None)
            except OSError as exc:
                error = error or f"cannot write {a.plot}: {exc.strerror or exc}"
    if error:
        return fail(error)
    if out.stopped:
        return 128 + out.signum  # 130 for Ctrl+C (EXIT_INTERRUPTED), 143 SIGTERM, 129 SIGHUP
    return EXIT_OK if out.rows else EXIT_ERROR


def restarts(run: LevelRun, started: list[str | None]) -> str | None:
    """A server whose process changed since the last level or during this one (its
    /metrics start stamp): the level is marked with it. ``started`` is kept up to date."""
    changed = []
    for i, (first, last) in enumerate(zip(run.watch.first, run.watch.last)):
        stamps = [s.started for s in (first, last) if s is not None and s.started]
        if (was := started[i]) is not None:
            stamps.insert(0, was)
        if len(set(stamps)) > 1:
            changed.append(run.watch.urls[i])
        if stamps:
            started[i] = stamps[-1]
    return f"{', '.join(changed)} restarted (another process answers)" if changed else None


def level_name(a: argparse.Namespace, level: float) -> str:
    return f"rate {level:g}/s" if a.rate else f"{level} user{'s' if level != 1 else ''}"


def level_notes(run: LevelRun, name: str, slots: int, in_flight: int) -> list[str]:
    """Under the table: why requests did not complete, a queue, arrivals held back."""
    from kvtop.runner.server.load_outcomes import reasons

    notes = []
    why = reasons(run.results)
    if why:
        notes.append(f"{name}: " + "; ".join(why))
    if run.users is not None and slots and run.users > slots:
        notes.append(f"{name} shared {slots} slot{'s' if slots != 1 else ''}: TTFT includes the wait for one")
    if run.restarted:
        notes.append(f"{name}: {run.restarted}: its row is marked partial")
    if run.held_back:
        notes.append(f"{name}: {run.held_back} arrivals waited for a request in flight to end (kvtop keeps at "
                     f"most {in_flight} in flight; --force: 1024)")
    return notes


def one_level(driver: LoadDriver, a: argparse.Namespace, level: float, li: int) -> LevelRun:
    if a.rate:
        requests = a.requests or (None if a.duration else 16)
        return driver.open_loop(level, a.n_predict, requests, a.duration, ("rate", li))
    requests = a.requests or (None if a.duration else 4)
    return driver.closed_loop(int(level), a.n_predict, requests, a.duration, ("level", li))  # users: whole numbers


def progress(a: argparse.Namespace, text: str) -> None:
    if not a.quiet:
        to_stderr(f"kvtop load: {text}")


def server_note(urls: Sequence[str], infos: Sequence[ServerInfo], a: argparse.Namespace) -> str:
    parts = [f"{u} ({i.build_info}, {i.total_slots} slots of {fmt_int(i.n_ctx)} tokens)" if i.capabilities.slots
             else f"{u} ({i.build_info}, a batch of up to {i.total_slots} requests, {fmt_int(i.n_ctx)} tokens each; "
             f"via OpenAI's /v1 endpoints)" for u, i in zip(urls, infos)]
    return (f"kvtop load: -p {a.n_prompt} -n {a.n_predict} via /{a.endpoint}, "
            f"shared prefix {a.shared_prefix}; " + "; ".join(parts))


def summary_notes(rows: list[Report], a: argparse.Namespace) -> list[str]:
    notes = []
    if any(r["client_saturated"] for r in rows):
        notes.append("the client used most of a core in some level: it may limit what it measured there")
    if any(r["failed"] for r in rows):
        notes.append(f"{sum(r['failed'] for r in rows if r['server'] != 'all')} requests did not complete: rates "
                     f"and percentiles are over the completed ones")
    if a.slo_ttft is not None or a.slo_tok_s is not None:
        mine = [r for r in rows if r["server"] == "all"] or rows
        k = knee(mine, a.slo_ttft, a.slo_tok_s)
        bad = [r for r in mine if not meets(r, a.slo_ttft, a.slo_tok_s)]
        level: Callable[[Report], str] = (lambda r: f"{r['users']} user{'s' if r['users'] != 1 else ''}"
                                          if r["users"] is not None else f"rate {r['rate']:g}/s")
        notes.append("knee: " + (f"{level(k)} is the most that meets the targets" if k else "no level meets the targets")
                     + (f"; {level(bad[0])} misses them" if bad else ""))
    return notes


def openai_servers(infos: Sequence[ServerInfo]) -> list[bool]:
    """Each server that publishes no per-token timings (vLLM): OpenAI's endpoints, with usage."""
    return [not i.capabilities.token_timings for i in infos]
