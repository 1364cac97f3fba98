"""No secret is ever written or shown (issue 21, item 4): a real llama-server started with
``--api-key``, kvtop attached through a URL with ``user:password@`` and the key, and every
kind of file kvtop writes (trace, session file, both kinds of Ctrl+E bundle and their
CSVs, Ctrl+S SVGs, the calibration it keeps, ``kvtop bench`` and ``kvtop estimate``
output, the quit summary) and the screen are searched for the secret strings. Each kind
is checked to exist, so the search cannot pass on nothing."""

import asyncio
import base64
import glob
import json
import os
import subprocess
import sys

from helpers import screen_text, send, wait_until
from llama_server import llama_server

KEY = "sk-SECRET123"
PASSWORD = "pw-SECRET"
SECRETS = (KEY, PASSWORD, "alice:" + PASSWORD, base64.b64encode(f"alice:{PASSWORD}".encode()).decode())


def leaks(text: str) -> list[str]:
    return [s for s in SECRETS if s in text]


def login_url(url: str) -> str:
    return url.replace("http://", f"http://alice:{PASSWORD}@")


async def drive(app, seen: dict) -> None:
    """As a user would: one turn, Ctrl+S, Ctrl+E redacted and with text, then quit."""
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, timeout=180, what="connect")  # after a CPU probe
        await wait_until(pilot, lambda: "busy" in screen_text(app), timeout=30, what="the server pane's first poll")
        await send(pilot, "Say hello.")
        await wait_until(pilot, lambda: app.turns and not app.turn_running, timeout=120, what="the turn")
        seen["screens"] = [screen_text(app)]
        saved = app.share.last_saved
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: app.share.last_saved != saved, timeout=20, what="Ctrl+S")
        for key in ("r", "t"):  # the redacted bundle (safe to post), then the one with the text
            saved = app.share.last_saved
            await pilot.press("ctrl+e")
            await wait_until(pilot, lambda: type(app.screen).__name__ == "ExportScreen", what="the export dialog")
            seen["screens"].append(screen_text(app))
            await pilot.press(key)
            await wait_until(pilot, lambda: app.share.last_saved != saved, timeout=30, what=f"Ctrl+E {key}")
            seen[key] = app.share.last_saved
        await pilot.pause(0.3)
        seen["screens"].append(screen_text(app))  # the notices that name the files
        seen["session"] = app.session
        await pilot.press("ctrl+q")


def test_every_file_and_the_screen_hold_no_secret(llama_server_bin, smollm_path, tmp_path, monkeypatch, capsys):
    from kvtop.runner import redact
    from kvtop.tui.start import launch
    home = tmp_path / "home"
    monkeypatch.setenv("KVTOP_HOME", str(home))
    monkeypatch.delenv("LLAMA_API_KEY", raising=False)
    seen: dict = {}
    monkeypatch.setattr(launch, "run_until_quit", lambda app, **kw: asyncio.run(drive(app, seen)) or 0)
    with llama_server(llama_server_bin, smollm_path, "--api-key", KEY, log_dir=str(tmp_path)) as (url, _):
        port = url.rsplit(":", 1)[1]
        rc = launch.launch_main(["--server", login_url(url), "--api-key", KEY, "-n", "8"])
        launch.print_summary(seen["session"])
        summary = capsys.readouterr()
        env = {**os.environ, "KVTOP_HOME": str(home), "LLAMA_API_KEY": KEY}  # the key from the environment
        commands = {
            "bench md": ["bench", "--server", login_url(url), "-p", "16", "-n", "4", "-r", "1"],
            "bench json": ["bench", "--server", login_url(url), "-p", "16", "-n", "4", "-r", "1", "-o", "json"],
            "estimate": ["estimate", "--server", login_url(url)],
            "estimate json": ["estimate", "--server", login_url(url), "--json"],
            "refused": ["estimate", "--server", login_url(url).replace(port, "1")],  # an error names the URL
        }
        outputs = {name: subprocess.run([sys.executable, "-m", "kvtop", *args], env=env, capture_output=True,
                                        text=True, timeout=300) for name, args in commands.items()}
    redact.forget_secrets()
    assert rc == 0
    for name, out in outputs.items():
        assert out.returncode == (1 if name == "refused" else 0), (name, out.stderr[-2000:])
        assert not leaks(out.stdout + out.stderr), name
        if name != "bench json":  # the server is still named, without its login
            assert "127.0.0.1" in out.stdout + out.stderr, name
    for text in seen["screens"] + [summary.out, summary.err]:
        assert not leaks(text)
    assert f"127.0.0.1:{port}" in seen["screens"][0] and f"127.0.0.1:{port}" in summary.out

    files = {kind: sorted(glob.glob(str(home / "**" / pattern), recursive=True)) for kind, pattern in (
        ("trace", "trace-*.jsonl"), ("session", "session-*.jsonl"), ("svg", "*.svg"), ("bundle", "kvtop-debug-*.json"),
        ("csv", "*.csv"))}
    assert len(files["bundle"]) == 2 and len(files["csv"]) == 2 and files["svg"] and files["trace"] and files["session"]
    everything = [p for p in glob.glob(str(home / "**" / "*"), recursive=True) if os.path.isfile(p)]
    for path in everything:  # every file kvtop wrote, the calibration and probe caches included
        with open(path, encoding="utf-8", errors="replace") as fh:
            assert not leaks(fh.read()), path

    trace_head = json.loads(open(files["trace"][0], encoding="utf-8").readline())
    assert "<redacted>" in trace_head["argv"] and f"http://<redacted>@127.0.0.1:{port}" in trace_head["argv"]
    with open(seen["r"], encoding="utf-8") as fh:
        bundle = json.load(fh)
    tokens = [x["data"] for x in bundle["trace"] if x.get("event") == "TokenEvent"]
    assert tokens and {t["token_id"] for t in tokens} <= {0, -1} and {t["text"] for t in tokens} == {"·"}
    assert bundle["turns"][0]["metrics"]["decode_tokens"] > 0  # counts and timings kept
    with open(seen["t"], encoding="utf-8") as fh:
        with_text = json.load(fh)
    assert any(x["data"]["token_id"] > 0 for x in with_text["trace"] if x.get("event") == "TokenEvent")


def test_a_redacted_bundle_of_a_server_session_replays(llama_server_bin, smollm_path, tmp_path, monkeypatch):
    """The redacted bundle keeps no token id and no token text, and still replays: the
    same turns and counts."""
    from kvtop.runner.records.replay import ReplayEngine
    from kvtop.runner.records.trace import read_trace
    from kvtop.tui.start import launch
    home = tmp_path / "home"
    monkeypatch.setenv("KVTOP_HOME", str(home))
    seen: dict = {}
    monkeypatch.setattr(launch, "run_until_quit", lambda app, **kw: asyncio.run(drive(app, seen)) or 0)
    with llama_server(llama_server_bin, smollm_path, "--api-key", KEY, log_dir=str(tmp_path)) as (url, _):
        assert launch.launch_main(["--server", url, "--api-key", KEY, "-n", "8"]) == 0
    trace = read_trace(seen["r"])
    from helpers import make_app

    app = make_app(trace.settings(), lambda s: ReplayEngine(trace, speed=0), tmp_path / "replay",
                   hardware=trace.hardware, facts=trace.facts, live_system=False, write_transcript=False,
                   record_trace=False)

    async def replay():
        async with app.run_test(size=(160, 50)) as pilot:
            await wait_until(pilot, lambda: len(app.turns) == 1 and not app.turn_running, what="replayed")
            return screen_text(app)

    shown = asyncio.run(replay())
    live = seen["session"].turns[0].metrics
    assert app.turns[0].metrics.decode_tokens == live.decode_tokens
    assert app.turns[0].metrics.prompt_tokens == live.prompt_tokens
    assert "<redacted:" in shown
