"""kvtop replay run as a process: a trace with absurd numbers, or no trace given, ends in one line."""

import os
import subprocess
import sys

import pytest
from helpers import damaged

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("keys,value", [("hardware.bandwidth_gbs", "1e308"), ("created", "1e308"),
                                        ("settings.n_ctx", "1" + "0" * 30)])
def test_kvtop_replay_of_absurd_numbers_exits_1_with_one_line(write_trace, tmp_path, keys, value):
    bad = damaged(write_trace(tmp_path / "t.jsonl"), tmp_path, 1, keys, value)
    r = subprocess.run([sys.executable, "-m", "kvtop", "replay", "--end", bad], capture_output=True, text=True,
                       timeout=60, env=dict(os.environ, KVTOP_HOME=str(tmp_path / "home")))
    assert r.returncode == 1, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("kvtop: ") and "line 1" in r.stderr


def test_kvtop_replay_with_no_file_offers_the_last_trace(write_trace, tmp_path, monkeypatch, capsys):
    from kvtop.tui.app import KvtopApp
    from kvtop.tui.start import launch

    monkeypatch.setenv("KVTOP_HOME", str(tmp_path / "home"))
    sessions = tmp_path / "home" / "data" / "sessions"
    assert launch.replay_main([], ask=lambda q: "y") == 1
    assert "no trace given, and none in" in capsys.readouterr().err
    sessions.mkdir(parents=True)
    path = write_trace(sessions / "trace-1.jsonl")
    questions, built = [], {}
    monkeypatch.setattr(KvtopApp, "run", lambda self, **kw: built.setdefault("app", self) and 0)
    assert launch.replay_main(["--end"], ask=lambda q: questions.append(q) or "n") == 0 and not built
    assert questions == [f"kvtop replay: the last session's trace is {path} (1 message). Replay it? [Y/n] "]
    assert launch.replay_main(["--end"], ask=lambda q: "") == 0  # Enter: yes
    assert built["app"].options.banner.startswith("replay of trace-1.jsonl")
    # no terminal to ask on: one line that names the file, and a usage exit
    env = {**os.environ, "KVTOP_HOME": str(tmp_path / "home")}
    r = subprocess.run([sys.executable, "-m", "kvtop", "replay"], capture_output=True, text=True, env=env, cwd=ROOT,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 2 and r.stderr.strip() == (
        f"kvtop replay: no trace given; the last session's trace is {path} (1 message): kvtop replay {path}")
