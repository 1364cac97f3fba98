"""kvtop in a real terminal (tmux): type a message, read the answer off the screen, quit cleanly."""

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid

import pytest

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is installed by .ci/run")


SOCKET = [""]  # this test's own tmux server (-L): a shared default server that exits as another
# test's last session ends fails a new session ("server exited unexpectedly"), as in a CI run


def tmux(*args, check=True):
    return subprocess.run(["tmux", "-L", SOCKET[0], *args], capture_output=True, text=True, check=check)


def capture(session):
    return tmux("capture-pane", "-t", session, "-p").stdout


def wait_screen(session, predicate, timeout=60, what=""):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        screen = capture(session)
        if predicate(screen):
            return screen
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}; screen:\n{capture(session)}")


def engine_pids(session) -> set[int]:
    """The engine children running under this test's tmux pane (not the whole machine's:
    other pytest workers run engines of their own at the same time)."""
    import psutil

    out = tmux("list-panes", "-t", session, "-F", "#{pane_pid}", check=False).stdout.split()
    if not out:
        return set()
    try:
        kids = psutil.Process(int(out[0])).children(recursive=True)
    except psutil.NoSuchProcess:
        return set()
    found = set()
    for p in kids:
        try:
            if "kvtop.runner.process.child" in " ".join(p.cmdline()):
                found.add(p.pid)
        except psutil.Error:
            pass
    return found


def alive(pids: set[int]) -> set[int]:
    """Those of ``pids`` still running (a zombie has exited)."""
    import psutil

    left = set()
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                left.add(pid)
        except psutil.NoSuchProcess:
            pass
    return left


@pytest.fixture
def session(tmp_path):
    name = f"kvtop-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    SOCKET[0] = name
    yield name
    tmux("kill-server", check=False)


@pytest.mark.parametrize("size", [(120, 40), (80, 24)])
def test_chat_in_a_real_terminal(session, tmp_path, size):
    home = tmp_path / "home"
    cmd = (f"KVTOP_HOME={home} {sys.executable} -m kvtop -n 24 --temp 0 -c 1024; "
           f"echo KVTOP-EXIT=$?; sleep 30")
    tmux("new-session", "-d", "-s", session, "-x", str(size[0]), "-y", str(size[1]), cmd)
    wait_screen(session, lambda s: "n_ctx 1,024" in s, what="the model to load")
    tmux("send-keys", "-t", session, "Say hello to the world", "Enter")
    screen = wait_screen(session, lambda s: re.search(r"TTFT \d", s), what="the answer")
    assert "you: Say hello to the world" in screen
    assert "model:" in screen
    assert "tok/s" in screen
    kids = engine_pids(session)
    assert kids  # the engine runs in its own process
    tmux("send-keys", "-t", session, "C-s")
    wait_screen(session, lambda s: "saved" in s, what="the screenshot path")
    shots = sorted((home / "data" / "screenshots").glob("*.svg"))
    # what the terminal shows, and (smaller than 160x48: panes on pages) every pane at 160 columns
    assert [p.name.endswith("-dashboard.svg") for p in shots] == [True, False]
    assert all(p.read_text().lstrip().startswith("<svg") for p in shots)
    whole = shots[0].read_text()
    assert all(title in whole for title in ("Prefill", "Decode", "Estimate", "Memory"))
    tmux("send-keys", "-t", session, "C-q")
    wait_screen(session, lambda s: "KVTOP-EXIT=0" in s, timeout=20, what="a clean exit")
    time.sleep(0.5)
    assert not alive(kids), "the engine child outlived the UI"


@pytest.mark.parametrize("stop", ["SIGTERM", "SIGHUP", "C-c"])
def test_stopping_during_a_turn_stops_the_engine(session, tmp_path, stop):
    home = tmp_path / "home"
    cmd = f"KVTOP_HOME={home} {sys.executable} -m kvtop -n -1 --temp 0 -c 4096; echo KVTOP-EXIT=$?; sleep 30"
    tmux("new-session", "-d", "-s", session, "-x", "120", "-y", "40", cmd)
    wait_screen(session, lambda s: "n_ctx 4,096" in s, what="the model to load")
    tmux("send-keys", "-t", session, "Write a very long essay about oceans.", "Enter")
    # the KV pane (on the first page at any size) projects the fill from the decode rate
    wait_screen(session, lambda s: re.search(r"at [\d.,]+ tok/s", s), what="decode to start")
    kids = engine_pids(session)
    assert len(kids) == 1
    ui = int(subprocess.run(["ps", "-o", "ppid=", "-p", str(next(iter(kids)))],
                            capture_output=True, text=True).stdout)
    if stop == "C-c":
        tmux("send-keys", "-t", session, "C-c")
    else:
        os.kill(ui, getattr(signal, stop))
    screen = wait_screen(session, lambda s: "KVTOP-EXIT=" in s, timeout=20, what=f"exit after {stop}")
    time.sleep(0.5)
    assert not alive(kids), f"the engine child outlived {stop}"
    # the terminal is restored: the shell's own output is on a normal screen again
    assert "n_ctx" not in screen
