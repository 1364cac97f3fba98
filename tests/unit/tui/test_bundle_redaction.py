"""Ctrl+E's debug bundle is safe to post by default: no prompt, reply, token or system
prompt text, no home folder, user or host name, and it says so at its top and on screen;
the text goes in only when the user asks. The redacted bundle still replays with the
same numbers in every pane (issue: sharing without leaking)."""

import csv
import dataclasses
import json
import os
import platform

import pytest
from helpers import make_app, screen_text, send, wait_until
from scripted_engine import ScriptedEngine, scripted_turn, smollm_loaded

from kvtop.runner.records.replay import ReplayEngine
from kvtop.runner.records.trace import read_trace
from kvtop.runner.settings import Settings
from kvtop.runner.system.hardware import SystemMemory
from kvtop.runner.system.memory import MemorySample

USER = "alicekvtop"
HOST = "alicekvtop-laptop"
FIRST = "Tell me about my PAPAYA plantation in Quetzaltenango"
SECOND = "And the MANGO trees near Huehuetenango?"
REPLY1 = ["The ", "ZEBRAFISH ", "answer ", "is ", "here."]
REPLY2 = ["QUOKKA ", "says ", "hello."]
SYSTEM = "You are FLAMINGO, my private assistant"
SECRETS = ["PAPAYA", "Quetzaltenango", "MANGO", "Huehuetenango", "ZEBRAFISH", "QUOKKA", "FLAMINGO", USER, HOST]
MEMORY = MemorySample(engine_rss=250 * 2**20, ui_rss=60 * 2**20,
                      system=SystemMemory(24 * 2**30, 22 * 2**30, 2 * 2**30, 0, 2**30), gpus=(), gpu_note="no NVIDIA GPU")


def _turns():
    second = scripted_turn(2, 1010.0, 60, 30, REPLY2)
    # the second prompt left the cached tokens at token 31: its text around there is the user's
    second[0] = dataclasses.replace(second[0], first_diff_index=31, diff_context=("PAPAYA plantation", "MANGO trees"))
    return [scripted_turn(1, 1000.0, 30, 0, REPLY1), second]


@pytest.fixture
def home(tmp_path, monkeypatch, smollm_shaped):
    """A home folder whose path holds the user's name, the model inside it, kvtop's files
    under it, and a host name that says whose laptop it is."""
    home = tmp_path / "home" / USER
    (home / "models").mkdir(parents=True)
    model = home / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    os.symlink(smollm_shaped, model)
    monkeypatch.setenv("HOME", str(home))
    for name in ("USER", "LOGNAME"):
        monkeypatch.setenv(name, USER)
    monkeypatch.setattr(platform, "node", lambda: HOST)
    return home, str(model)


def live_app(home, model, **kw):
    loaded = smollm_loaded(model)
    settings = Settings(model, n_ctx=4096, n_threads=2, system_prompt=SYSTEM, prompt_cache=f"{home}/cache.bin")
    argv = ["kvtop", model, "-sys", SYSTEM, "-p", FIRST, "--prompt-cache", f"{home}/cache.bin"]
    return make_app(settings, lambda s: ScriptedEngine(s, loaded, _turns()), home / ".kvtop", argv=argv,
                    live_system=False, memory_sample=MEMORY, clock=lambda: 100.0, **kw)


async def chat_two_turns(pilot):
    app = pilot.app
    await wait_until(pilot, lambda: app.loaded is not None and app.session.trace is not None, what="load")
    for i, text in enumerate((FIRST, SECOND), 1):
        await send(pilot, text)
        await wait_until(pilot, lambda: len(app.turns) == i and not app.turn_running, what=f"turn {i}")
    await pilot.pause(0.2)


async def export(pilot, key: str | None):
    """Ctrl+E, then ``key`` in the dialog (None: Enter, the default); the bundle's path."""
    app = pilot.app
    before = app.share.last_saved
    await pilot.press("ctrl+e")
    await wait_until(pilot, lambda: type(app.screen).__name__ == "ExportScreen", what="the export dialog")
    dialog = screen_text(app)
    await pilot.press(key or "enter")
    await wait_until(pilot, lambda: app.share.last_saved != before, what="the bundle")
    return app.share.last_saved, dialog


def svg_text(svg: str) -> str:
    """The words an SVG screenshot shows, row by row."""
    import html
    import re

    rows: dict[float, list[tuple[float, str]]] = {}
    for x, y, text in re.findall(r'<text[^>]*?x="([\d.]+)"[^>]*?y="([\d.]+)"[^>]*>(.*?)</text>', svg):
        rows.setdefault(float(y), []).append((float(x), html.unescape(re.sub(r"<[^>]+>", "", text)).replace("\xa0", " ")))
    return "\n".join("".join(t for _x, t in sorted(parts)) for _y, parts in sorted(rows.items()))


def screen_grid(app) -> list[str]:
    """The terminal as rows of cells: each SVG text run placed at its column (Rich writes
    x = column × 12.2 and names the row in the run's clip path)."""
    import html
    import re

    from rich.cells import cell_len

    width, height = app.size
    grid = [[" "] * width for _ in range(height)]
    runs = re.findall(r'<text[^>]*?x="([\d.]+)"[^>]*?clip-path="url\(#terminal-\d+-line-(\d+)\)"[^>]*>(.*?)</text>',
                      app.export_screenshot())
    for x, row, text in runs:
        col = round(float(x) / 12.2)
        for ch in html.unescape(re.sub(r"<[^>]+>", "", text)).replace("\xa0", " "):
            if 0 <= col < width:
                grid[int(row)][col] = ch
            col += max(1, cell_len(ch))
    return ["".join(r) for r in grid]


def pane_text(app, grid: list[str], selector: str) -> list[str]:
    r = app.query_one(selector).region
    return [line[r.x:r.right] for line in grid[r.y:r.bottom]]


PANES = ("#prefill", "#kv", "#decode", "#memory", "#estimate")


def figures(shown: dict[str, list[str]], pane: str) -> list[str]:
    """A pane's lines; for the decode pane its summary and legend, not the chart drawn
    at whatever height the dashboard left it."""
    lines = shown[pane]
    if pane == "#decode":
        return lines[:4] + lines[-2:]
    return [line for line in lines if line.strip("│ ")]  # a grid row pads the shorter pane


async def panes(pilot) -> dict[str, list[str]]:
    await pilot.pause()
    grid = screen_grid(pilot.app)
    return {p: pane_text(pilot.app, grid, p) for p in PANES}


async def test_escape_writes_nothing_the_screenshot_leaves_the_chat_out_and_the_text_goes_in_only_when_asked(home):
    """The dialog's three ways out, one after the other on one chat (each was a test of its
    own, with its own App and two turns): Escape writes nothing; the third choice blanks the
    chat pane and says so, while Ctrl+S still saves what the user sees; "t" writes the
    bundle with the text."""
    home_dir, model = home
    app = live_app(home_dir, model)
    async with app.run_test(size=(150, 50), notifications=True) as pilot:
        await chat_two_turns(pilot)
        # Escape writes nothing
        await pilot.press("ctrl+e")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "ExportScreen", what="the dialog")
        await pilot.press("ctrl+e")  # a second Ctrl+E opens no second dialog
        await pilot.pause()
        assert len(app.screen_stack) == 2
        await pilot.press("escape")
        await wait_until(pilot, lambda: len(app.screen_stack) == 1, what="the dialog closed")
        await pilot.pause(0.3)
        assert app.share.last_saved is None and not (home_dir / ".kvtop" / "data" / "exports").exists()

        # the screenshot without the chat
        app.query_one("#prompt").value = "half-typed GUAVA question"
        path, _ = await export(pilot, "s")
        assert path.endswith(".svg")
        svg = open(path, encoding="utf-8").read()
        for secret in SECRETS[:6] + ["GUAVA"]:
            assert secret not in svg, secret
        shot = svg_text(svg)
        assert "chat left out of this screenshot" in shot and "─ Prefill ─" in shot
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: app.share.last_saved != path, what="Ctrl+S")
        assert "ZEBRAFISH" in open(app.share.last_saved, encoding="utf-8").read()

        # the text goes in only when asked
        path, _dialog = await export(pilot, "t")
        await wait_until(pilot, lambda: "WITH the conversation text" in screen_text(app), timeout=5,
                         what="the warning that the bundle holds the text")
    bundle = json.load(open(path))
    assert bundle["redacted"] is False and "people you trust" in bundle["redaction"]
    assert [t["user"] for t in bundle["turns"]] == [FIRST, SECOND]
    assert bundle["settings"]["system_prompt"] == SYSTEM and "ZEBRAFISH" in json.dumps(bundle["trace"])
    assert "--api-key" not in bundle["command_line"]


async def test_bundle_text_flag_makes_enter_write_the_text(home):
    home_dir, model = home
    app = live_app(home_dir, model, bundle_text=True)
    async with app.run_test(size=(150, 50)) as pilot:
        await chat_two_turns(pilot)
        path, dialog = await export(pilot, None)
    assert "--bundle-text: Enter writes the bundle with the text." in dialog
    assert json.load(open(path))["turns"][0]["user"] == FIRST


def footers(app) -> list[str]:
    from kvtop.tui.panes.chat import ChatLog

    return [m.footer for m in app.query_one(ChatLog).children if m.role == "assistant"]


def _leaks_no_text_and_no_home(app, home_dir, tmp_path, raw, csv_raw, live_metrics):
    for secret in SECRETS + [str(home_dir)]:
        assert secret not in raw, secret
        assert secret not in csv_raw, secret
    bundle = json.loads(raw)
    assert list(bundle)[:3] == ["kvtop_bundle_version", "redacted", "redaction"]
    assert bundle["redacted"] is True and "--bundle-text" in bundle["redaction"]
    # numbers exact, text replaced by its length
    assert [t["metrics"] for t in bundle["turns"]] == json.loads(json.dumps(live_metrics))
    assert [t["user"] for t in bundle["turns"]] == [f"<redacted: {len(FIRST)} chars>", f"<redacted: {len(SECOND)} chars>"]
    assert bundle["turns"][1]["diff_context"] == ["<redacted: 17 chars>", "<redacted: 11 chars>"]
    assert bundle["settings"]["model"] == "~/models/SmolLM2-135M-Instruct.Q4_1.gguf"
    assert bundle["settings"]["system_prompt"] == f"<redacted: {len(SYSTEM)} chars>"
    assert bundle["command_line"][1:5] == ["~/models/SmolLM2-135M-Instruct.Q4_1.gguf", "-sys",
                                           f"<redacted: {len(SYSTEM)} chars>", "-p"]
    assert bundle["loaded"]["path"].startswith("~/") and bundle["trace_file"].startswith("~/.kvtop/")
    header, *records = bundle["trace"]
    assert header["redacted"] is True and "host" not in header and header["facts"]["path"].startswith("~/")
    # a reply token's id or length would give the reply back (the vocabulary is public)
    tokens = [(r["data"]["token_id"], r["data"]["text"]) for r in records if r.get("event") == "TokenEvent"]
    assert tokens == [(0, "·")] * len(REPLY1 + REPLY2)
    assert [r["text"] for r in records if r["type"] == "user"] == [f"<redacted: {len(FIRST)} chars>",
                                                                   f"<redacted: {len(SECOND)} chars>"]
    shot = svg_text(bundle["screenshot_svg"])
    assert "chat left out of this screenshot" in shot and "─ Prefill ─" in shot and "Export a debug bundle" not in shot
    rows = list(csv.reader(open(tmp_path / "home" / USER / ".kvtop" / "data" / "exports" /
                                os.path.basename(app.share.last_csv))))
    assert rows[1][1] == f"<redacted: {len(FIRST)} chars>" and rows[1][3] == "30"


async def replayed(trace, root):
    """The panes and reply footers a replay of ``trace`` ends with, and its chat's text."""
    app = make_app(trace.settings(), lambda s: ReplayEngine(trace, speed=0), root, hardware=trace.hardware,
                   facts=trace.facts, live_system=False, memory_sample=MEMORY, clock=lambda: 100.0,
                   write_transcript=False, record_trace=False)
    async with app.run_test(size=(150, 50)) as pilot:
        await wait_until(pilot, lambda: len(app.turns) == 2 and not app.turn_running, what="replayed turns")
        await pilot.pause(0.3)
        return await panes(pilot), footers(app), screen_text(app)


async def test_the_default_bundle_leaks_no_text_and_no_home_and_replays_with_the_same_numbers(
        home, tmp_path, monkeypatch):
    """Enter in Ctrl+E's dialog: the redacted bundle, which leaks no text and no home
    folder; ``kvtop replay BUNDLE`` then shows its trace, redacted text in the chat, the
    same figures in every pane as the live session and as a replay of the full trace. (Two
    tests before, each with its own App and two turns.)"""
    home_dir, model = home
    app = live_app(home_dir, model)
    async with app.run_test(size=(150, 50), notifications=True) as pilot:
        await chat_two_turns(pilot)
        live, live_footers = await panes(pilot), footers(app)
        assert "ZEBRAFISH" in screen_text(app)  # the live chat shows it all
        path, dialog = await export(pilot, None)
        full_trace = app.session.trace.path
        assert "Redacted, safe to post" in dialog and "With conversation text" in dialog
        await wait_until(pilot, lambda: "redacted, safe to post" in screen_text(app), timeout=5,
                         what="the notice that says the bundle is redacted")
        assert "ZEBRAFISH" in screen_text(app)  # the chat is back after the shot
        raw = open(path, encoding="utf-8").read()
        csv_raw = open(app.share.last_csv, encoding="utf-8").read()
        live_metrics = [t.metrics.to_dict() for t in app.turns]
    _leaks_no_text_and_no_home(app, home_dir, tmp_path, raw, csv_raw, live_metrics)

    redacted, redacted_footers, shown = await replayed(read_trace(path), tmp_path / "a")
    full, _f, _s = await replayed(read_trace(full_trace), tmp_path / "b")
    assert redacted == full  # redaction changes no figure of any pane
    # the estimate pane's forecast column comes from this machine's history (runner.calibration),
    # not from the trace: a replay's is the full trace's replay's (above), not the live one's
    # nor, so, the height the decode chart is left with (tui/dashboard.py): its figures are compared
    for pane in PANES[:-1]:
        assert figures(redacted, pane) == figures(live, pane), pane
    assert redacted_footers == live_footers and "150 tok/s" in live_footers[0]
    assert f"<redacted: {len(FIRST)} chars>" in shown and f"<redacted: {len(''.join(REPLY1))} chars>" in shown
    assert not any(secret in shown for secret in SECRETS)

    from kvtop.tui.app import KvtopApp
    from kvtop.tui.start import launch

    built = {}
    monkeypatch.setattr(KvtopApp, "run", lambda self, **kw: built.setdefault("app", self) and 0)
    assert launch.replay_main(["--end", path]) == 0
    assert "conversation text redacted" in built["app"].options.banner


def test_bundle_text_reaches_the_app_for_a_llama_server_too(monkeypatch, tmp_path):
    """``kvtop --server URL --bundle-text``: the flag is not dropped on the server path."""
    import kvtop.runner.server.props as props
    from kvtop.tui.app import KvtopApp
    from kvtop.tui.start import launch

    info = props.ServerInfo(None, "m", 4096, 1, "b1", None, None, None, None, None, None)
    monkeypatch.setenv("KVTOP_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(props, "read_server_info", lambda client, wait_s=120.0: info)
    built = {}
    monkeypatch.setattr(KvtopApp, "run", lambda self, **kw: built.setdefault("app", self) and 0)
    for flags, expected in (([], False), (["--bundle-text"], True)):
        built.clear()
        assert launch.launch_main(["--server", "http://127.0.0.1:9", "--tflops", "1", *flags]) == 0
        assert built["app"].options.bundle_text is expected
