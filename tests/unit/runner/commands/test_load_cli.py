"""``kvtop load`` as a command, against the stand-in server on loopback: rows per level
in each format, usage errors as exit 2, an unreachable server as one line and exit 1."""

from __future__ import annotations

import json

import pytest
from fake_llama_server import FakeLlamaServer

from kvtop.runner.commands.load import load_main
from kvtop.runner.commands.load_json import flat_levels


def test_a_sweep_prints_one_json_row_per_level(capsys):
    with FakeLlamaServer() as srv:
        rc = load_main([srv.url, "--users", "1,3", "-p", "24", "-n", "6", "--requests", "2", "-o", "json"])
        prompts = [len(p) for p in srv.state.prompts]
    out, err = capsys.readouterr()
    assert rc == 0, err
    rows = flat_levels(out)
    assert [r["users"] for r in rows] == [1, 3]
    assert [r["completed"] for r in rows] == [2, 6]
    assert [r["generated_tokens"] for r in rows] == [12, 36]
    assert [r["server_generated_tokens"] for r in rows] == [12, 36]
    assert [r["prompt_tokens"] for r in rows] == [24, 24]
    assert prompts == [24] * (3 + 2 + 6)  # the warm-up: one request per user of the largest level
    assert "level 2/2: 3 users" in err
    assert rows[0]["batched_roof_tok_s"] is None  # the stand-in names no model file


def test_rates_give_rows_by_rate_and_md_names_them(capsys):
    with FakeLlamaServer() as srv:
        rc = load_main([srv.url, "--rate", "20,40", "-p", "8", "-n", "2", "--requests", "4", "--quiet",
                        "--no-warmup", "--slo-tok-s", "1"])
    out, _ = capsys.readouterr()
    assert rc == 0
    lines = out.splitlines()
    assert lines[2].startswith("|  20/s |") and lines[3].startswith("|  40/s |")
    assert "knee: rate 40/s is the most that meets the targets" in out


@pytest.mark.parametrize("args, says", [
    (["http://127.0.0.1:1", "--users", "1", "--rate", "2"], "not both"),
    (["http://127.0.0.1:1", "-p", "8", "--shared-prefix", "9"], "longer than the prompt"),
    (["http://127.0.0.1:1", "--plot", "x.png"], "SVG"),
    (["http://127.0.0.1:1", "--requests", "2", "--duration", "3"], "not allowed with"),
    ([], "give a llama-server URL"),
])
def test_usage_errors_exit_2(args, says, capsys):
    with pytest.raises(SystemExit) as e:
        load_main(args)
    assert e.value.code == 2 and says in capsys.readouterr().err


def test_an_unreachable_server_is_one_line_and_exit_1(capsys):
    from llama_server import free_port

    rc = load_main([f"http://127.0.0.1:{free_port()}", "--quiet"])
    err = capsys.readouterr().err.strip()
    assert rc == 1 and err.startswith("kvtop: ") and "\n" not in err


def test_a_request_larger_than_a_slot_is_refused_before_any_load(capsys):
    with FakeLlamaServer() as srv:
        rc = load_main([srv.url, "-p", "1000", "-n", "100", "--quiet"])
        sent = len(srv.state.prompts)
    err = capsys.readouterr().err
    assert rc == 1 and "do not fit a slot's context (1,024 tokens)" in err and sent == 0


@pytest.mark.parametrize("output, where", [("md", "out"), ("json", "err")])
def test_ctrl_c_says_the_stop_line_once(output, where, capsys):
    """Ctrl+C in the second level (as SIGINT does: KeyboardInterrupt in the main thread). A
    trial read the stop line twice on its terminal: on stderr as progress, then under the
    md table. Once: with the table's notes, or on stderr where no note is printed (json)."""
    import _thread
    import threading
    import time

    with FakeLlamaServer(token_s=0.02) as srv:
        def interrupt() -> None:
            deadline = time.monotonic() + 20
            while srv.state.busy < 3 and time.monotonic() < deadline:  # level 2: 3 users (level 1 has 1)
                time.sleep(0.02)
            _thread.interrupt_main()

        threading.Thread(target=interrupt, daemon=True).start()
        rc = load_main([srv.url, "--users", "1,3", "-p", "8", "-n", "30", "--requests", "2", "--no-warmup",
                        "-o", output])
        busy_after = srv.state.busy
    out, err = capsys.readouterr()
    assert rc == 130 and busy_after == 0, err
    stop = "stopped: streams in flight closed; no slot was busy afterwards"
    assert (out + err).count(stop) == 1, (out, err)
    assert stop in (out if where == "out" else err)
    if output == "md":
        assert out.splitlines()[2].startswith("|     1 |"), out  # level 1's row, with the note under it
    else:
        assert [r["users"] for r in flat_levels(out)] == [1]


def test_json_starts_with_a_run_header_and_keeps_the_levels_counts_apart_from_a_requests(capsys):
    """A trial read "requests": 4 (the level's) beside --requests 2 (per user), and
    "prompt_tokens" 24 (one request's) beside "generated_tokens" 36 (the level's)."""
    import os

    with FakeLlamaServer() as srv:
        rc = load_main([srv.url, "--users", "1,3", "-p", "24", "-n", "6", "--requests", "2", "-o", "json",
                        "--no-warmup", "--quiet"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    doc = json.loads(out)
    run = doc["run"]
    assert run["kvtop"] and run["command"] == "kvtop load"
    assert run["servers"] == [{"url": srv.url, "build": "b1-fake", "slots": 4, "n_ctx_per_slot": 1024,
                               "model_path": run["servers"][0]["model_path"], "local": True}]
    assert run["settings"]["requests_per_user"] == 2 and run["settings"]["levels"] == [1, 3]
    assert (run["settings"]["n_prompt"], run["settings"]["n_predict"], run["settings"]["warmup"]) == (24, 6, False)
    assert run["machine"]["cpu_count"] == os.cpu_count() and run["machine"]["cpu_name"]
    assert "formula" in run["roof"] and "others_cpu_share" in run and "busy" in run
    three = doc["levels"][1]
    assert three["users"] == 3 and three["level"]["requests"] == 6 and three["level"]["generated_tokens"] == 36
    assert three["per_request"]["prompt_tokens"] == 24 and three["per_request"]["generated_tokens_per_request"] == 6
    with FakeLlamaServer() as srv:
        rc = load_main([srv.url, "--users", "1", "-p", "8", "-n", "4", "--requests", "1", "-o", "jsonl",
                        "--no-warmup", "--quiet"])
    lines = capsys.readouterr().out.splitlines()
    assert rc == 0 and list(json.loads(lines[0])) == ["run"] and json.loads(lines[1])["level"]["completed"] == 1
