"""The pieces of a quit that does not wait (tui/base/quitting.py): seeing a terminal hang up
without reading it, and the refusals that come before anything starts. The whole of it,
in a real terminal, is tests/e2e/test_quit_with_the_terminal.py."""

import argparse
import os
import pty

from kvtop.tui.base import quitting
from kvtop.tui.start import launch


def test_a_hang_up_is_seen_and_waiting_input_is_not_taken():
    master, slave = pty.openpty()
    try:
        os.write(master, b"typed\n")
        assert not quitting.hung_up([slave])  # a live terminal, with input waiting
        assert os.read(slave, 16) == b"typed\n"  # still there for Textual to read
        os.close(master)  # the terminal goes (tmux kill-server, a closed window)
        master = None
        assert quitting.hung_up([slave])
        assert os.read(slave, 16) == b""  # what Textual's input thread read in a loop
    finally:
        os.close(slave)
        if master is not None:
            os.close(master)


def test_no_terminal_at_all_is_never_a_hang_up():
    assert not quitting.hung_up([])


def args(**kw):
    return argparse.Namespace(**{"prompt_file": None, **kw})


def test_refusals_come_in_one_line(tmp_path, monkeypatch):
    missing = str(tmp_path / "nope.txt")
    assert launch.refusal(args(prompt_file=missing), terminal=False) == f"kvtop: -f: {missing}: no such file"
    assert launch.refusal(args(prompt_file=str(tmp_path)), terminal=False).endswith("is a directory, not a text file: not sent")
    good = tmp_path / "p.txt"
    good.write_text("Summarise this.")
    monkeypatch.setattr(quitting, "has_terminal", lambda: False)
    assert launch.refusal(args(prompt_file=str(good)), terminal=True) == quitting.NO_TERMINAL
    assert quitting.NO_TERMINAL == "kvtop needs a terminal; for scripts use kvtop bench / estimate / load"
    assert launch.refusal(args(prompt_file=str(good)), terminal=False) is None  # in-process tests run without one
    monkeypatch.setattr(quitting, "has_terminal", lambda: True)
    assert launch.refusal(args(), terminal=True) is None
