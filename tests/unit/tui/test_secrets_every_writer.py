"""Every kind of file kvtop writes, and the screen, with a known secret (issue 21, item 4):
``kvtop --server http://alice:pw-SECRET@127.0.0.1:PORT --api-key sk-SECRET123`` through
the real command-line path against a server on loopback, one turn whose reply echoes the
key (a server or model that repeats it), Ctrl+S, Ctrl+E redacted and with the text, the
quit summary, and ``kvtop estimate --server``; then every file under KVTOP_HOME and every
screen is searched for the secrets. Each kind of file must exist, so the search cannot
pass on nothing. tests/e2e/test_secrets_never_written.py does the same on a real
llama-server started with --api-key, with ``kvtop bench`` too."""

from __future__ import annotations

import asyncio
import base64
import glob
import json
import os

from fake_servers import FakeServer, Reply, json_reply, llama_routes, props
from helpers import screen_text, send, wait_until

KEY = "sk-SECRET123"
PASSWORD = "pw-SECRET"
SECRETS = (KEY, PASSWORD, f"alice:{PASSWORD}", base64.b64encode(f"alice:{PASSWORD}".encode()).decode())
REPLY = ["Your ", "key ", "is ", KEY, " and ", "that ", "is ", "all."]


def leaks(text: str) -> list[str]:
    return [s for s in SECRETS if s in text]


def chunks() -> list[str]:
    out = [json.dumps({"choices": [{"delta": {"content": piece}}]}) for piece in REPLY]
    done = {"choices": [{"delta": {}, "finish_reason": "stop"}],
            "timings": {"prompt_n": 12, "prompt_ms": 30.0, "predicted_n": len(REPLY), "predicted_ms": 80.0,
                        "cache_n": 0}}
    return out + [json.dumps(done), "[DONE]"]


async def drive(app, seen: dict) -> None:
    async with app.run_test(size=(160, 50), notifications=True) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, timeout=20, what="connect")
        await wait_until(pilot, lambda: app.server_snapshots, timeout=20, what="the first poll")
        await send(pilot, "What is my key?")
        await wait_until(pilot, lambda: app.turns and not app.turn_running, timeout=20, what="the turn")
        await pilot.pause(0.3)
        seen["screens"] = [screen_text(app)]
        saved = app.share.last_saved
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: app.share.last_saved != saved, timeout=20, what="Ctrl+S")
        for key in ("r", "t"):
            saved = app.share.last_saved
            await pilot.press("ctrl+e")
            await wait_until(pilot, lambda: type(app.screen).__name__ == "ExportScreen", what="the export dialog")
            seen["screens"].append(screen_text(app))
            await pilot.press(key)
            await wait_until(pilot, lambda: app.share.last_saved != saved, timeout=20, what=f"Ctrl+E {key}")
            seen[key] = app.share.last_saved
        await pilot.pause(0.2)
        seen["screens"].append(screen_text(app))
        seen["session"] = app.session
        await pilot.press("ctrl+q")


def test_no_file_and_no_screen_holds_the_key_or_the_password(tmp_path, monkeypatch, capsys, smollm_shaped):
    from kvtop.runner.commands.estimate import estimate_main
    from kvtop.tui.start import launch
    home = tmp_path / "home"
    monkeypatch.setenv("KVTOP_HOME", str(home))
    monkeypatch.delenv("LLAMA_API_KEY", raising=False)
    seen: dict = {}
    monkeypatch.setattr(launch, "run_until_quit", lambda app, **kw: asyncio.run(drive(app, seen)) or 0)
    # the served model's GGUF is readable here: the physics and the trace (kept from the
    # model's facts on) are on, as on the server's own machine
    routes = llama_routes(2, **{"/v1/chat/completions": Reply(events=chunks()),
                                "/props": json_reply(props(slots=2, model=smollm_shaped))})
    with FakeServer(routes) as url:
        login = url.replace("http://", f"http://alice:{PASSWORD}@")
        port = url.rsplit(":", 1)[1]
        assert launch.launch_main(["--server", login, "--api-key", KEY, "--tflops", "1", "--bandwidth-gbs", "10"]) == 0
        launch.print_summary(seen["session"])
        summary = capsys.readouterr()
        monkeypatch.setenv("LLAMA_API_KEY", KEY)  # the key from the environment, this time
        estimates = []
        for extra in ([], ["--json"]):
            rc = estimate_main(["--server", login, smollm_shaped, "--tflops", "1", "--bandwidth-gbs", "10", *extra])
            estimates.append((rc, capsys.readouterr()))
        refused = estimate_main(["--server", login.replace(port, "1"), smollm_shaped])
        estimates.append((refused, capsys.readouterr()))

    assert [rc for rc, _ in estimates] == [0, 0, 1]
    for _rc, out in estimates:
        assert not leaks(out.out + out.err) and "127.0.0.1" in out.out + out.err
    for text in seen["screens"] + [summary.out, summary.err]:
        assert not leaks(text), text
    assert f"127.0.0.1:{port}" in seen["screens"][0] and "<redacted>" in seen["screens"][0]  # the echoed key
    assert f"127.0.0.1:{port}" in summary.out

    found = {kind: glob.glob(str(home / "**" / pattern), recursive=True) for kind, pattern in (
        ("trace", "trace-*.jsonl"), ("session", "session-*.jsonl"), ("svg", "*.svg"),
        ("bundle", "kvtop-debug-*.json"), ("csv", "*.csv"))}
    assert len(found["bundle"]) == 2 and len(found["csv"]) == 2 and all(found.values()), found
    files = [p for p in glob.glob(str(home / "**" / "*"), recursive=True) if os.path.isfile(p)]
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as fh:
            assert not leaks(fh.read()), path
    with open(found["trace"][0], encoding="utf-8") as fh:
        header = json.loads(fh.readline())
        assert "<redacted>" in fh.read()  # the reply's echoed key, in the user's own trace
    assert header["argv"][1:5] == ["--server", f"http://<redacted>@127.0.0.1:{port}", "--api-key", "<redacted>"]
    with open(seen["r"], encoding="utf-8") as fh:
        bundle = json.load(fh)
    tokens = [x["data"] for x in bundle["trace"] if x.get("event") == "TokenEvent"]
    assert len(tokens) == len(REPLY) and {(t["token_id"] <= 0, t["text"]) for t in tokens} == {(True, "·")}
