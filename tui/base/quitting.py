"""kvtop quits within a second, whatever a worker is blocked in, and never outlives its terminal.

What kept kvtop processes alive, spinning, after their terminal was gone (issue 21):

* Textual's writer thread dies on its first ``EIO`` once the terminal is gone; every
  later write then waits for ever on its full queue, so the main thread hung in the
  app's shutdown and a SIGTERM handler (which runs on that thread) could not end it;
* meanwhile Textual's input thread reads the closed stdin in a loop (``read(0) = 0``):
  17-30% of a core, for ever (Textual 8 has no case for the end of its input);
* Python's exit waits for every worker thread: a poll blocked in a silent server held
  the exit (and Ctrl+Q) for seconds.

So every way to quit (Ctrl+Q, SIGTERM, SIGHUP, the terminal hanging up) arms one hard
deadline: a daemon thread that, if the process is still here ``QUIT_DEADLINE_S``
later, kills the processes kvtop started, flushes the trace, restores the terminal's
modes and leaves with ``os._exit``. The graceful path normally ends well before it.
A terminal that hung up is noticed by ``poll`` (HUP on its file descriptors) even when
no SIGHUP comes, and then kvtop leaves at once: the turn in flight is saved, there is no
screen to restore and no one to print the summary for.

Only ``kvtop``'s own entry point installs this (its last resort is ``os._exit``): tests
that run the app in-process never do.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from textual.app import App

QUIT_DEADLINE_S = 0.9  # the product target: no kvtop process 1 s after the key or the signal
STEP_S = 0.1  # each step of the hard exit (a write to a terminal nobody reads can block)
# what Textual's driver sets and undoes on a normal exit (textual/drivers/linux_driver.py)
RESTORE = ("\x1b[?1000l\x1b[?1003l\x1b[?1015l\x1b[?1006l\x1b[?1016l"  # mouse reports off
           "\x1b[?2004l\x1b[?2048l\x1b[?7h"  # bracketed paste and in-band resize off, line wrap on
           "\x1b[<u\x1b[?1049l\x1b[?25h\x1b[?1004l")  # kitty keys off, main screen, cursor, no focus events
NO_TERMINAL = "kvtop needs a terminal; for scripts use kvtop bench / estimate / load"
NO_REPLAY_TERMINAL = "kvtop replay needs a terminal; for scripts use kvtop bench / estimate"


def has_terminal() -> bool:
    """Keys come from a terminal and the screen goes to one. Without it Textual draws
    into a pipe and reads a stdin that ends at once, in a loop."""
    return os.isatty(0) and os.isatty(1)


def follow_the_terminal_size() -> None:
    """Forget COLUMNS and LINES when the screen is a terminal.

    Textual sizes the screen with ``shutil.get_terminal_size``, which believes those
    variables before the terminal, and on every resize. Inherited ones are stale: a
    process that imported ``readline`` without a terminal (pytest does) exports 80x24
    to every child, so kvtop started from it in a 160x50 tmux window drew at 80x24
    and never followed a resize. A full-screen app follows the terminal it draws on."""
    try:
        if not os.isatty(1):
            return
    except OSError:
        return
    for name in ("COLUMNS", "LINES"):
        os.environ.pop(name, None)


def terminal_fds() -> list[int]:
    fds = []
    for fd in (0, 1, 2):
        try:
            if os.isatty(fd):
                fds.append(fd)
        except OSError:
            pass
    return fds


def hung_up(fds: list[int], timeout_ms: int | None = 0) -> bool:
    """True when ``poll`` reports a hang-up or an error on one of ``fds`` (a pty whose
    other side closed: tmux kill-server, a closed terminal window, a dropped ssh).
    The mask asks for nothing else, so input waiting to be read is never taken."""
    if not fds:
        return False
    p = select.poll()
    for fd in fds:
        p.register(fd, 0)  # POLLHUP, POLLERR and POLLNVAL are always reported
    return bool(p.poll(timeout_ms))


def bounded(fn, seconds: float = STEP_S) -> None:
    """Run ``fn`` on a daemon thread and wait for it at most ``seconds``: a step of the
    hard exit must not block it (a lock held by the interrupted main thread, a write to
    a terminal nobody reads)."""
    def run() -> None:
        try:
            fn()
        except Exception:
            pass

    t = threading.Thread(target=run, daemon=True, name="kvtop-exit-step")
    t.start()
    t.join(seconds)


def kill_children() -> None:
    """SIGKILL every process kvtop started (the engine child, a CPU probe) and theirs."""
    import psutil

    try:
        kids = psutil.Process().children(recursive=True)
    except psutil.Error:
        return
    for kid in kids:
        try:
            kid.kill()
        except psutil.Error:
            pass


class QuitGuard:
    """The hard deadline, the signal handlers and the hang-up watcher of one app."""

    def __init__(self, app: App, deadline_s: float = QUIT_DEADLINE_S) -> None:
        self.app = app
        self.deadline_s = deadline_s
        self.rc: int | None = None
        self._lock = threading.Lock()
        self._fds = terminal_fds()
        self._tty_attrs = None
        if 0 in self._fds:
            import termios

            try:
                self._tty_attrs = termios.tcgetattr(0)  # as the shell left it, before Textual
            except termios.error:
                pass

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self.on_signal)
        signal.signal(signal.SIGHUP, self.on_signal)
        self.app.quit_begun = self.arm
        threading.Thread(target=self._watch_terminal, daemon=True, name="kvtop-hangup").start()

    def arm(self, rc: int) -> None:
        """Start the hard deadline; the first way to quit decides the exit status."""
        with self._lock:
            if self.rc is not None:
                return
            self.rc = rc
        at = time.monotonic() + self.deadline_s
        threading.Thread(target=self._deadline, args=(at,), daemon=True, name="kvtop-quit-deadline").start()

    def _deadline(self, at: float) -> None:
        time.sleep(max(0.0, at - time.monotonic()))
        self.hard_exit(self.rc if self.rc is not None else 1)

    def on_signal(self, signum, frame) -> None:
        """SIGTERM, SIGHUP (on the main thread): quit now, the turn in flight saved."""
        rc = 128 + signum
        self.arm(rc)
        if signum == signal.SIGHUP and hung_up(self._fds):
            bounded(self.app.control.save_turn_in_flight, 0.3)  # a write and an fsync
            self.hard_exit(rc)
        try:
            self.app.control.quit_now(rc)
        except Exception:  # an app not mounted yet, or mid-update: the deadline ends it
            pass

    def _watch_terminal(self) -> None:
        """Wait for the terminal to hang up; then quit as on SIGHUP (which may never come:
        kvtop in another process group, or a SIGHUP that was ignored)."""
        try:
            if not hung_up(self._fds, None):
                return
        except (OSError, ValueError):
            return
        self.arm(128 + signal.SIGHUP)
        os.kill(os.getpid(), signal.SIGHUP)

    def hard_exit(self, rc: int) -> None:
        bounded(kill_children)
        bounded(self._flush_records)
        if not hung_up(self._fds):
            bounded(self._restore_terminal)
        os._exit(rc)

    def _flush_records(self) -> None:
        """The transcript is written and synced turn by turn; the trace is flushed per
        turn: what its buffer holds of the turn in flight goes out now. A killed engine
        leaves no log in the temp folder."""
        session = self.app.session
        trace = session.trace
        if trace is not None:
            trace.flush()
        log = getattr(session.engine, "log_path", None)
        if log and getattr(session.engine, "died", None) is None:
            try:
                os.unlink(log)
            except OSError:
                pass

    def _restore_terminal(self) -> None:
        if 2 in self._fds:
            os.write(2, RESTORE.encode())
        if self._tty_attrs is not None:
            import termios

            termios.tcsetattr(0, termios.TCSANOW, self._tty_attrs)

    def finish(self, rc: int) -> int:
        """After the app has ended and the summary is out: nothing kvtop started is left,
        and a worker still blocked (a poll on a silent server, a CPU probe) is not waited
        for: Python's exit would join it."""
        bounded(kill_children, 1.0)
        deadline = time.monotonic() + 0.3
        for t in threading.enumerate():
            if t is not threading.main_thread() and not t.daemon:
                t.join(max(0.0, deadline - time.monotonic()))
        if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):
                    pass
            os._exit(rc)
        return rc
