"""``kvtop load`` run as a user runs it, when things go wrong: SIGTERM (``timeout``) and
SIGHUP keep the levels that finished; stdout that is full, a closed pipe or closed gives
one line on stderr and exit 1, never a traceback; a bad URL in ``kvtop --server`` and
``kvtop estimate --server`` is a usage error; the real llama-server killed with -9 in the
middle of a level ends the run with a reason, the partial level marked and exit 1; one
slot shared by four users with long replies queues them past 10 s and every request
completes; the same real server under two names is refused. The stand-in server (tests/fake_llama_server.py) runs in this process; kvtop
in a child."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from fake_llama_server import FakeLlamaServer
from llama_server import get_json, llama_server

from kvtop.runner.commands.load_json import flat_levels

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KVTOP = [sys.executable, "-m", "kvtop"]


def until(cond, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline
        time.sleep(0.02)


@pytest.mark.parametrize("sig, rc", [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_sigterm_and_sighup_keep_the_levels_that_finished(sig, rc):
    with FakeLlamaServer(token_s=0.02) as srv:
        p = subprocess.Popen([*KVTOP, "load", srv.url, "--users", "1,2", "-p", "8", "-n", "100", "--requests", "1",
                              "--no-warmup", "-o", "json"], cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        try:
            until(lambda: srv.state.busy >= 2)  # level 2 under way
            p.send_signal(sig)
            out, err = p.communicate(timeout=30)
        finally:
            if p.poll() is None:
                p.kill()
    assert p.returncode == rc, err
    assert "Traceback" not in err
    rows = flat_levels(out)
    assert [r["users"] for r in rows] == [1] and rows[0]["completed"] == 1  # level 1 kept
    assert "2 users (level 2/2) was stopped before it ended: no row" in err


def test_timeout_keeps_the_rows_too():
    """``timeout 7 kvtop load``: the issue's case printed 0 bytes though level 1 was done."""
    with FakeLlamaServer(token_s=0.02, slots=1, queue=True) as srv:  # level 1: 2 s; level 2: 8 s in a queue
        r = subprocess.run(["timeout", "7", *KVTOP, "load", srv.url, "--users", "1,4", "-p", "8", "-n", "100",
                            "--requests", "1", "--no-warmup", "--no-tui"],
                           cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 124 and "Traceback" not in r.stderr, r.stderr  # timeout's own code: it sent TERM
    lines = r.stdout.splitlines()
    assert lines[0].startswith("| users |") and lines[2].lstrip("| ").startswith("1 |"), r.stdout


@pytest.mark.parametrize("shell, says", [
    ("{kvtop} > /dev/full", "cannot write the results to stdout: No space left on device"),
    ("{kvtop} | true", "cannot write the results to stdout: Broken pipe"),
    ("{kvtop} >&-", "stdout is closed"),
])
def test_stdout_that_cannot_be_written_is_one_line_and_exit_1(shell, says):
    with FakeLlamaServer() as srv:
        kvtop = " ".join([*KVTOP, "load", srv.url, "--users", "1", "-p", "8", "-n", "4", "--requests", "1",
                          "--no-warmup", "--quiet"])
        # true must exit before kvtop writes: the pipe is then closed for good
        r = subprocess.run(["bash", "-c", "set -o pipefail; " + shell.format(kvtop=kvtop)
                            + "; echo rc=${PIPESTATUS[0]} >&2"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    err = [line for line in r.stderr.splitlines() if not line.startswith("rc=")]
    assert err == [f"kvtop: {says}"] or (len(err) == 1 and says in err[0]), r.stderr
    assert "rc=1" in r.stderr


@pytest.mark.parametrize("argv", [["--server", "http://127.0.0.1:99999"], ["estimate", "--server", "http://[::1"],
                                  ["--server", "http://127.0.0.1:8080\nx"], ["estimate", "--server", "http://h:abc"]])
def test_a_bad_server_url_is_a_usage_error_in_every_command(argv):
    r = subprocess.run([*KVTOP, *argv], cwd=ROOT, capture_output=True, text=True, timeout=60,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "not a server URL" in r.stderr or "control character" in r.stderr, r.stderr


def busy(url: str) -> int:
    return sum(1 for s in get_json(url + "/slots") if s.get("is_processing"))


def test_the_real_server_killed_mid_level_ends_the_run(llama_server_bin, smollm_path, tmp_path):
    with llama_server(llama_server_bin, smollm_path, slots=4, ctx=512, log_dir=str(tmp_path)) as (url, proc):
        p = subprocess.Popen([*KVTOP, "load", url, "--users", "1,2,4", "-p", "16", "-n", "200", "--requests", "2",
                              "--no-warmup", "-o", "json"], cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        try:
            until(lambda: busy(url) >= 2, 240)  # level 2
            proc.kill()
            proc.wait()
            out, err = p.communicate(timeout=60)
        finally:
            if p.poll() is None:
                p.kill()
    assert p.returncode == 1, err
    rows = flat_levels(out)
    assert [r["users"] for r in rows] == [1, 2], rows
    assert rows[0]["partial"] is None and rows[0]["completed"] == 2
    assert rows[1]["partial"] and "stopped answering" in rows[1]["partial"], rows[1]
    # the first to break finds the server gone; kvtop then closes the other stream (cancelled)
    assert rows[1]["truncated"] >= 1 and rows[1]["truncated"] + rows[1]["cancelled"] == 2, rows[1]
    last = err.strip().splitlines()[-1]
    assert last.startswith("kvtop: ") and "2 users (level 2/3) is partial, 1 later level not run" in last, err
    assert "level 3/3" not in err and "Traceback" not in err


def test_one_slot_four_users_queue_past_ten_seconds_and_all_complete(llama_server_bin, smollm_path, tmp_path):
    """llama-server sends no headers while a request waits for its slot: the fourth user
    waits for three replies (~4-5 s each on one core); before, kvtop cancelled it at 10 s."""
    with llama_server(llama_server_bin, smollm_path, slots=1, ctx=1024, log_dir=str(tmp_path)) as (url, _):
        # the same server under two names first: refused by its identity, nothing sent
        two = subprocess.run([*KVTOP, "load", url, url.replace("127.0.0.1", "localhost"), "--quiet"], cwd=ROOT,
                             capture_output=True, text=True, timeout=120)
        assert two.returncode == 1 and "are one llama-server" in two.stderr, two.stderr
        r = subprocess.run([*KVTOP, "load", url, "--users", "4", "-p", "16", "-n", "600", "--requests", "1",
                            "--no-warmup", "--force", "-o", "json"], cwd=ROOT, capture_output=True, text=True,
                           timeout=400)
    assert r.returncode == 0, r.stderr
    (row,) = flat_levels(r.stdout)
    assert (row["completed"], row["failed"], row["users"], row["slots"]) == (4, 0, 4, 1), (row, r.stderr)
    assert row["ttft_p99_s"] > 10.0, row  # the queue's wait is in the TTFT: the case that was cut at 10 s


def test_a_closed_stderr_keeps_progress_out_of_the_rows():
    """With descriptor 2 closed, ``print(file=sys.stderr)`` is ``print(file=None)``: stdout.
    The progress lines went into the json (seen: "kvtop load: level 1/1: 1 user" above the [)."""
    with FakeLlamaServer() as srv:
        r = subprocess.run(["bash", "-c", " ".join([*KVTOP, "load", srv.url, "--users", "1", "-p", "8", "-n", "4",
                                                    "--requests", "1", "--no-warmup", "-o", "json"]) + " 2>&-"],
                           cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and flat_levels(r.stdout)[0]["completed"] == 1, r.stdout
