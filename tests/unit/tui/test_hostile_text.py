"""Untrusted text: chat templates, GGUF metadata strings and model output never act."""

import io
import xml.etree.ElementTree as ET

from helpers import make_app, screen_text, send, wait_until
from scripted_engine import ScriptedEngine, scripted_turn, smollm_loaded

from kvtop.runner.engine.chat_template import TIME_LIMIT_S, render_chat
from kvtop.runner.sanitize import clean_line, clean_text
from kvtop.runner.settings import Settings
from kvtop.tui.base.export import safe_cell, write_turns_csv
from kvtop.tui.panes.chat import ChatMessage

MSGS = [{"role": "user", "content": "hi"}]
EVIL = "[bold]b[/] [@click=app.quit]quit[/] [link=file:///etc/passwd]pw[/link] [/] \x1b[31mred\x1b[0m " \
       "\x1b]8;;https://evil.example\x07osc\x1b]8;;\x07 nul\x00 c1\x9b2J bel\x07"


# ---------------------------------------------------------------- templates
def test_ssti_payload_is_refused_by_the_sandbox():
    payload = "{{ cycler.__init__.__globals__.os.popen('echo pwned > /tmp/kvtop-pwned').read() }}"
    r = render_chat(payload, MSGS)
    assert r.template_name == "chatml" and "sandbox" in r.fallback_reason
    assert "<|im_start|>user\nhi<|im_end|>" in r.text
    import os

    assert not os.path.exists("/tmp/kvtop-pwned")


def test_template_syntax_error_falls_back_with_the_line():
    r = render_chat("{% for m in messages %}{{ m.content }", MSGS)
    assert r.template_name == "chatml" and "syntax error" in r.fallback_reason


def test_range_bomb_is_bounded():
    r = render_chat("{% for i in range(10**9) %}x{% endfor %}", MSGS)
    assert r.template_name == "chatml" and "range" in r.fallback_reason


def test_loop_that_never_finishes_is_stopped_in_time(monkeypatch):
    import kvtop.runner.engine.chat_template as chat_template

    assert TIME_LIMIT_S == 2.0  # what a user's template gets
    # the same timer at a tenth of the limit: the test spun the CPU for the whole 2 s before
    limit = TIME_LIMIT_S / 10
    monkeypatch.setattr(chat_template, "TIME_LIMIT_S", limit)
    bomb = "{% for a in range(9999) %}{% for b in range(9999) %}{% for c in range(9999) %}{% endfor %}{% endfor %}{% endfor %}"
    r = render_chat(bomb, MSGS)
    assert r.template_name == "chatml" and f"took over {limit:g} s" in r.fallback_reason
    # stopped at the limit; unbounded it runs for hours. The ceiling is generous for a busy
    # machine, where the timer's signal waits for the CPU.
    assert limit <= r.seconds < 10 * limit


def test_huge_prompt_is_bounded():
    r = render_chat("{% for i in range(9000) %}{{ 'x' * 9000 }}{% endfor %}", MSGS)
    assert r.template_name == "chatml" and ("size limit" in r.fallback_reason or "characters" in r.fallback_reason)


# ---------------------------------------------------------------- sanitizing
def test_clean_text_strips_escapes_and_controls_but_keeps_markup_text():
    out = clean_text(EVIL)
    assert "\x1b" not in out and "\x00" not in out and "\x9b" not in out and "\x07" not in out
    assert "[@click=app.quit]quit[/]" in out and "[link=file:///etc/passwd]" in out
    assert "https://evil.example" not in out  # the OSC 8 hyperlink is removed whole
    assert clean_text("a\ud800b") == "a\ufffdb"
    assert "\n" not in clean_line("a\nb\tc")


async def test_markup_and_escapes_in_model_output_are_shown_literally(tmp_path, smollm_shaped):
    loaded = smollm_loaded(smollm_shaped)
    pieces = ["Here: ", "[@click=app.quit]", "click", "[/]", " [link=file:///etc/passwd]x[/link] ", "\x1b[2J",
              "\x1b]8;;https://evil.example\x07", "osc", "\x00\x9b", " [/]", " end"]
    turns = [scripted_turn(1, 10.0, 20, 0, pieces)]
    app = make_app(Settings(smollm_shaped), lambda s: ScriptedEngine(s, loaded, turns), tmp_path,
                   live_system=False, write_transcript=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        await send(pilot, "[/] hi [@click=app.quit]x")
        await wait_until(pilot, lambda: app.turns, what="turn")
        reply = app.query(ChatMessage)[-1]
        assert reply.text.startswith("Here: [@click=app.quit]click[/]") and "\x1b" not in reply.text
        await pilot.click(ChatMessage)
        await pilot.pause()
        assert app.is_running
        svg = app.export_screenshot()
        ET.fromstring(svg)  # valid XML
        assert "\x1b" not in svg and "evil.example" not in svg
        text = screen_text(app)
        assert "[@click=app.quit]click[/]" in text and "you: [/] hi [@click=app.quit]x" in text


# ------------------------------------------------------------ exports
def test_csv_cells_that_look_like_formulas_are_escaped():
    buf = io.StringIO()
    write_turns_csv(buf, [{"user": "=HYPERLINK(\"http://x\")", "stop_reason": "eog", "metrics": {"prompt_tokens": 5}},
                          {"user": "+1", "stop_reason": "@x", "metrics": {}}, {"user": "-2", "metrics": {}}])
    import csv

    rows = list(csv.reader(io.StringIO(buf.getvalue())))
    assert rows[1][1] == "'=HYPERLINK(\"http://x\")" and rows[1][3] == "5"
    assert rows[2][1:3] == ["'+1", "'@x"] and rows[3][1] == "'-2"
    assert safe_cell("plain") == "plain" and safe_cell(None) == ""


async def test_screenshots_are_named_by_kvtop_and_never_overwrite(tmp_path, smollm_shaped):
    import os

    loaded = smollm_loaded(smollm_shaped)
    app = make_app(Settings(smollm_shaped), lambda s: ScriptedEngine(s, loaded, []), tmp_path,
                   live_system=False, write_transcript=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        shots_dir = tmp_path / "data" / "screenshots"
        shots_dir.mkdir(parents=True)
        paths = []
        for _ in range(3):
            await pilot.press("ctrl+s")
            await pilot.pause()
            paths.append(app.share.last_saved)
        assert len(set(paths)) == 3
        for p in paths:
            assert os.path.dirname(p) == str(shots_dir) and p.endswith(".svg")
            ET.parse(p)
        # a file planted where kvtop's next name would land is never replaced
        victim = tmp_path / "victim.txt"
        victim.write_text("keep me")
        await pilot.press("ctrl+e")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "ExportScreen", what="the export dialog")
        await pilot.press("t")  # the bundle with the text: this test reads the model's path back
        await wait_until(pilot, lambda: app.share.last_saved.endswith(".json"), what="the bundle")
        assert os.path.dirname(app.share.last_saved) == str(tmp_path / "data" / "exports")
        assert os.path.dirname(app.share.last_csv) == str(tmp_path / "data" / "exports")
        assert open(app.share.last_csv).readline().startswith("turn,user,stop_reason")
        assert victim.read_text() == "keep me"
        import json

        with open(app.share.last_saved) as fh:
            bundle = json.load(fh)
        assert bundle["command_line"][0] == "kvtop" and bundle["settings"]["model"] == smollm_shaped
        assert bundle["gguf"]["architecture"] == "llama" and bundle["estimate"]["kv_bytes"] == 90 * 2**20
        assert bundle["trace"][0]["type"] == "kvtop-trace" and bundle["screenshot_svg"].startswith("<svg")
        ET.fromstring(bundle["screenshot_svg"])


def test_unique_file_refuses_to_follow_or_replace(tmp_path):
    from kvtop.runner.records.paths import unique_file

    (tmp_path / "a.svg").write_text("old")
    (tmp_path / "a-1.svg").symlink_to(tmp_path / "target")
    path, fh = unique_file(str(tmp_path), "a", "svg")
    fh.close()
    assert path.endswith("a-2.svg") and (tmp_path / "a.svg").read_text() == "old"
    assert not (tmp_path / "target").exists()
    path, fh = unique_file(str(tmp_path), "../../etc/passwd", "svg")
    fh.close()
    assert path.startswith(str(tmp_path)) and "/" not in path[len(str(tmp_path)) + 1:]
