"""Running the app as the ``kvtop`` command does, for a local model, ``--server`` and
``kvtop replay`` alike: what refuses a start, the signals, the app's own event loop,
its exit status and the summary printed on quit. Below tui/start/launch.py and
tui/start/launch_server.py, which both use it (they used to import each other for it).
"""

from __future__ import annotations

import argparse
import signal
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvtop.tui.app import KvtopApp


def refusal(a: argparse.Namespace, terminal: bool) -> str | None:
    """Why kvtop will not start, before anything starts: a prompt file it cannot send,
    or (``terminal``) no terminal to run in. Without one, Textual drew into the pipe and
    read a stdin that had ended, in a loop, for ever."""
    if a.prompt_file:
        from kvtop.runner.records.prompt_file import PromptFileError, read_prompt_file

        try:
            read_prompt_file(a.prompt_file)  # non-blocking: a FIFO or a device is refused, not read
        except PromptFileError as exc:
            return f"kvtop: -f: {exc}"
    model = getattr(a, "model", None) or getattr(a, "model_flag", None)
    if getattr(a, "spec_type", "none") != "none" or getattr(a, "spec_draft_model", ""):
        from kvtop.runner.commands.engine_flags import draft_refusal
        from kvtop.runner.demo import demo_model_path

        why = draft_refusal(model or demo_model_path() or "", a.spec_type, a.spec_draft_model)
        if why:
            return f"kvtop: {why}"
    if terminal:
        from kvtop.tui.base.quitting import NO_TERMINAL, has_terminal

        if not has_terminal():
            return NO_TERMINAL
    return None


def run_until_quit(app: KvtopApp, guarded: bool = False) -> int:
    """Run the app as ``kvtop`` does (a local model or ``--server``): SIGTERM/SIGHUP stop
    it and its engine, the startup objects leave the collector's way, and on a clean
    quit the session's summary is printed; the exit status. ``guarded``: every way to
    quit ends the process within a second (tui/base/quitting.py; never in-process tests)."""
    from kvtop.tui.base.collector import freeze_startup_objects

    guard = None
    if guarded:
        from kvtop.tui.base.quitting import QuitGuard

        guard = QuitGuard(app)
        guard.install()
    else:
        def on_signal(signum, frame):
            app.control.quit_now(128 + signum)

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGHUP, on_signal)
    freeze_startup_objects()  # everything imported so far lives as long as the app
    try:
        rc = run_app(app)
    finally:
        app.control.shutdown()
    if rc == 0:
        print_summary(app.session)
    return guard.finish(rc) if guard is not None else rc


def print_summary(session) -> None:
    """After the app has left the alternate screen: the session's figures and files, as
    llama-cli prints its perf block on exit (nothing when no model loaded)."""
    from kvtop.runner.session.summary import session_summary

    text = session_summary(session)
    if text:
        try:
            print(text, flush=True)
        except OSError:  # the terminal is gone (SIGHUP)
            pass


def run_app(app: KvtopApp, **run_kw) -> int:
    """Run the app; its exit status. Textual catches an exception raised inside the app,
    prints the traceback and returns None from ``run()``: that read as 0. Its
    ``return_code`` is 1 after such a crash (and after ``exit(return_code=1)``, the
    error dialog's Quit), so any crash exits non-zero; ``exit(N)`` (a signal) gives N.

    The app runs on a loop of its own: ``asyncio.run`` (Textual's default) ends by
    waiting for every worker thread, and a poll blocked in a silent server held the
    quit for seconds; here the loop closes without waiting for them."""
    import asyncio

    from kvtop.tui.base.quitting import follow_the_terminal_size

    follow_the_terminal_size()
    loop = asyncio.new_event_loop()
    ran: list[bool] = []
    loop.call_soon(ran.append, True)
    try:
        rc = app.run(loop=loop, **run_kw)
    finally:
        close_loop(loop, bool(ran))
    if app.return_code:
        return app.return_code
    return rc if isinstance(rc, int) else 0


def close_loop(loop, ran: bool) -> None:
    """What ``asyncio.run`` does on its way out (cancel the tasks left, finish async
    generators), except waiting for the default executor's threads. A loop that never
    ran (``run`` replaced in a test, inside the test's own loop) has nothing to finish."""
    import asyncio

    try:
        if ran:
            tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for t in tasks:
                t.cancel()
            if tasks:
                loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        loop.close()  # its executor is shut down without waiting
