"""``kvtop load`` when the server misbehaves, against the stand-in on loopback
(tests/fake_llama_server.py): every request ends in a named outcome counted in the rows
(truncated streams, an empty body, 503 while loading), the reasons printed under the
table; a server killed mid-level ends the run with a reason, a partial row and exit 1,
later levels not run (a fleet too); a request queued for a slot waits for it; stdout that
cannot be written is one line on stderr. The real llama-server: tests/e2e/test_load_faults.py."""

from __future__ import annotations

import threading
import time

import pytest
from fake_llama_server import FakeLlamaServer

from kvtop.runner.commands.load import load_main
from kvtop.runner.commands.load_json import flat_levels
from kvtop.runner.server.load_driver import LoadDriver


@pytest.mark.parametrize("reply, says", [
    ("cut", "without a stop event after 2 of 8 tokens"),
    ("chunked", "without a stop event after 2 of 8 tokens"),
    ("empty", "without a stop event after 0 of 8 tokens"),
])
def test_a_reply_that_ends_early_is_truncated_not_completed(reply, says, capsys):
    with FakeLlamaServer(reply=reply) as srv:
        rc = load_main([srv.url, "--users", "1", "-p", "8", "-n", "8", "--requests", "2", "--no-warmup",
                        "--quiet", "-o", "json"])
    out, err = capsys.readouterr()
    (row,) = flat_levels(out)
    assert (row["completed"], row["truncated"], row["failed"]) == (0, 2, 2), row
    assert row["generated_tokens"] == 0 and row["ttft_p50_s"] is None  # over completed requests only
    assert says in err and "2 truncated" in err  # json: the reasons on stderr
    assert rc == 0  # the server answered: a measurement of a bad server, not a failed run


def test_a_refusal_names_the_status_and_the_servers_message_under_the_table(capsys):
    with FakeLlamaServer(reply="loading") as srv:
        load_main([srv.url, "--users", "2", "-p", "8", "-n", "4", "--requests", "1", "--no-warmup", "--quiet"])
    out, _ = capsys.readouterr()
    assert "2 refused" in out
    assert '2 users: 2 refused (first: "/completion answered HTTP 503: Loading model")' in out, out


def test_a_server_killed_mid_level_ends_the_run_with_a_reason_and_exit_1(capsys):
    with FakeLlamaServer(token_s=0.02) as srv:
        def kill_in_level_2():
            deadline = time.monotonic() + 20
            while len(srv.state.prompts) < 3 and time.monotonic() < deadline:  # level 1 sends 2
                time.sleep(0.01)
            time.sleep(0.1)
            srv.kill()

        threading.Thread(target=kill_in_level_2, daemon=True).start()
        t0 = time.monotonic()
        rc = load_main([srv.url, "--users", "1,2,4", "-p", "8", "-n", "40", "--requests", "2", "--no-warmup",
                        "-o", "json"])
        took = time.monotonic() - t0
    out, err = capsys.readouterr()
    rows = flat_levels(out)
    assert rc == 1, err
    assert [r["users"] for r in rows] == [1, 2]  # level 3 not run against a dead server
    assert rows[0]["partial"] is None and rows[0]["completed"] == 2
    assert rows[1]["partial"] and "stopped answering" in rows[1]["partial"]
    last = err.strip().splitlines()[-1]
    assert last.startswith("kvtop: ") and "stopped answering" in last and "2 users (level 2/3) is partial" in last
    assert "1 later level not run" in last and "Traceback" not in err
    assert "level 3/3" not in err and took < 15


def test_a_fleet_with_one_member_killed_says_which_and_exits_1(capsys):
    with FakeLlamaServer(token_s=0.02) as a, FakeLlamaServer(token_s=0.02) as b:
        def kill_b():
            deadline = time.monotonic() + 20
            while len(b.state.prompts) < 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.1)
            b.kill()

        threading.Thread(target=kill_b, daemon=True).start()
        rc = load_main([a.url, b.url, "--users", "2,4", "-p", "8", "-n", "40", "--requests", "3", "--no-warmup",
                        "--quiet", "-o", "json"])
    out, err = capsys.readouterr()
    rows = flat_levels(out)
    assert rc == 1
    assert [r["users"] for r in rows] == [1, 1, 2]  # a, b, all of level 1; level 2 not run
    assert all(r["partial"] and b.url in r["partial"] for r in rows)
    assert b.url in err.strip().splitlines()[-1]


def test_a_request_queued_for_the_one_slot_waits_for_it():
    """1 slot, 3 users, replies of ~0.6 s, kvtop asking after 0.3 s: the third waits ~1.2 s
    for the slot and completes (llama-server sends no headers while a request is queued)."""
    with FakeLlamaServer(token_s=0.03, slots=1, queue=True) as srv:
        d = LoadDriver([srv.url], None, prompt_tokens=8, slots=[1], answer_s=0.3)
        run = d.closed_loop(3, 20, 1, None, ("level", 0))
    assert [r.kind for r in run.results] == ["completed"] * 3, [(r.kind, r.error) for r in run.results]
    ttfts = sorted(r.ttft_s for r in run.results)
    assert ttfts[-1] > 0.9  # the queue's wait is in the TTFT
    assert run.slots == [1] and run.dead is None


def test_a_hung_server_times_out_rather_than_waiting_for_ever():
    """A server whose one slot is idle yet does not answer: the request is not queued, so
    the wait ends after ``answer_s`` as timed out."""
    with FakeLlamaServer(slots=1) as srv:
        d = LoadDriver([srv.url], None, prompt_tokens=8, slots=[1], answer_s=0.3)
        srv.state.free = threading.Semaphore(0)  # every request waits, and /slots says nothing is busy
        t0 = time.monotonic()
        run = d.closed_loop(1, 4, 1, None, ("level", 0))
        took = time.monotonic() - t0
    (r,) = run.results
    assert r.kind == "timed_out" and "did not start its answer" in r.error and took < 5, (r.kind, r.error)


BAD_URLS = [
    ("http://127.0.0.1:99999", "port must be a number from 1 to 65535"),
    ("http://127.0.0.1:abc", "port must be a number from 1 to 65535"),
    ("http://127.0.0.1:0", "port must be a number from 1 to 65535"),
    ("http://[::1", "the host is not valid"),
    ("http://[zz]:80", "the host is not valid"),
    ("http://127.0.0.1:8080\nx", "control character"),
    ("http://a b:80", "control character"),
    ("ftp://127.0.0.1:80", "not an http(s) URL"),
    ("http://ex$ample:80", "not a name or an address"),
]


@pytest.mark.parametrize("url, says", BAD_URLS)
def test_a_bad_url_is_a_usage_error_in_one_line(url, says, capsys):
    with pytest.raises(SystemExit) as e:
        load_main([url, "--no-tui"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and says in err and "Traceback" not in err, err


@pytest.mark.parametrize("url, says", BAD_URLS)
def test_the_one_url_check_is_what_every_server_command_uses(url, says):
    """``kvtop --server``, ``estimate --server``, a server file and ``load`` all take their
    URL through Credentials / client_auth, which call check_url: one ServerError, never a ValueError."""
    from kvtop.runner.server.credentials import Credentials, client_auth
    from kvtop.runner.server.urls import ServerError

    for take in (Credentials().add, lambda u: client_auth(u, None)):
        with pytest.raises(ServerError, match=says.replace("(", r"\(").replace(")", r"\)")):
            take(url)


@pytest.mark.parametrize("args, says", [
    (["--rate", "1e-300"], "--rate: must be"),
    (["--rate", "5000"], "--rate: must be"),
    (["--duration", "1e-9"], "--duration: must be"),
    (["--requests", "0"], "--requests: must be"),
    (["--users", "0"], "--users"),
])
def test_values_out_of_bounds_are_usage_errors(args, says, capsys):
    with pytest.raises(SystemExit) as e:
        load_main(["http://127.0.0.1:1", *args])
    err = capsys.readouterr().err
    assert e.value.code == 2 and says in err, err


def test_more_users_than_four_per_slot_asks_for_force(capsys):
    with FakeLlamaServer(slots=1) as srv:
        rc = load_main([srv.url, "--users", "5", "-p", "8", "-n", "2", "--requests", "1", "--quiet"])
        err = capsys.readouterr().err
        assert rc == 1 and "--users 5 on 1 slot" in err and "--force" in err, err
        assert srv.state.prompts == []  # refused before any load
        rc = load_main([srv.url, "--users", "5", "-p", "8", "-n", "2", "--requests", "1", "--quiet", "--force",
                        "--no-warmup", "-o", "json"])
    out, err = capsys.readouterr()
    (row,) = flat_levels(out)
    assert rc == 0 and row["completed"] == 5 and (row["users"], row["slots"]) == (5, 1)


def test_the_same_server_under_two_names_is_refused(capsys):
    with FakeLlamaServer() as srv:
        port = srv.url.rsplit(":", 1)[1]
        rc = load_main([f"http://127.0.0.1:{port}", f"http://localhost:{port}", "--quiet"])
        assert srv.state.prompts == []
    err = capsys.readouterr().err
    assert rc == 1 and "are one llama-server" in err, err


def test_a_server_restarted_during_a_level_marks_its_row(capsys):
    with FakeLlamaServer(token_s=0.02) as srv:
        def restart():
            deadline = time.monotonic() + 20
            while len(srv.state.prompts) < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            srv.state.started = "another process"

        threading.Thread(target=restart, daemon=True).start()
        rc = load_main([srv.url, "--users", "1,1", "-p", "8", "-n", "30", "--requests", "2", "--no-warmup", "--quiet",
                        "-o", "json"])
    out, err = capsys.readouterr()
    rows = flat_levels(out)
    assert rc == 0 and len(rows) == 2
    assert rows[0]["partial"] == f"{srv.url} restarted (another process answers)", rows[0]
    assert rows[1]["partial"] is None  # the new process, unchanged through level 2


def test_two_names_of_one_address_are_one_server_without_metrics():
    """Without --metrics, 127.0.0.1:P and localhost:P ran as a fleet of two (issue 34 trial)."""
    from kvtop.runner.commands.load_args import same_address

    assert same_address(["http://127.0.0.1:5555", "http://localhost:5555/"]) == (
        "http://127.0.0.1:5555", "http://localhost:5555/")
    assert same_address(["http://127.0.0.1:5555", "http://127.0.0.1:5556"]) is None
    assert same_address(["http://127.0.0.1:5555/a", "http://127.0.0.1:5555/b"]) is None  # a proxy's two backends
    assert same_address(["http://127.0.0.1:5555", "http://no-such-host.invalid:5555"]) is None


def test_a_slot_seen_free_once_is_not_yet_a_request_given_up():
    """Between one request's end and the next one's start the slot shows idle: a queued
    request waits one more time before kvtop gives it up (on a loaded machine the gap
    outlasted a probe and a queued request timed out as it was about to start)."""
    with FakeLlamaServer(slots=1) as srv:
        d = LoadDriver([srv.url], None, prompt_tokens=8, slots=[1], answer_s=0.3)
    seen = iter([True, False, True, False, False])
    d._queued = lambda server: next(seen)  # type: ignore[method-assign]
    wait_more = d._waits_for_slot(0, 20)
    assert [wait_more(1.0) for _ in range(5)] == [True, True, True, True, False]
    assert d._waits_for_slot(0, 20)(20.0) is False  # past the queue's limit: no probe asked
