"""``kvtop --resume`` in the app: the restored chat shows as text, the chat says which
transcript and how many turns, or that there was nothing (issue 12)."""

import os
import signal
import time

from helpers import make_app, screen_text, send, wait_until
from helpers import test_paths as paths_under
from scripted_engine import ScriptedEngine, scripted_turn, smollm_loaded

from kvtop.runner.records.sessions import resume_last
from kvtop.runner.records.trace import TraceWriter
from kvtop.runner.records.transcript import Transcript, read_messages
from kvtop.runner.settings import Settings
from kvtop.tui.panes.chat import ChatLog


def system_lines(app) -> list[str]:
    return [m.text for m in app.query_one(ChatLog).children if getattr(m, "role", None) == "system"]


def scripted(smollm_shaped, tmp_path, **kw):
    loaded = smollm_loaded(smollm_shaped)
    turns = [scripted_turn(1, 1.0, 40, 0, ["ok"])]
    return make_app(Settings(smollm_shaped), lambda s: ScriptedEngine(s, loaded, turns), tmp_path,
                    live_system=False, **kw)


async def test_resume_restores_the_transcript_not_the_trace_beside_it(tmp_path, smollm_shaped):
    sessions = paths_under(tmp_path).sessions_dir
    t = Transcript(sessions, {"model": smollm_shaped})
    t.turn("[b]x[/b] is it bold?", "[red]no[/red] [@click=app.quit]q[/]", "eog", {})
    t.close()
    TraceWriter(os.path.join(sessions, "trace-20991231-000000.jsonl"), {"argv": []}).close()
    messages, note = resume_last(sessions)
    app = scripted(smollm_shaped, tmp_path, resume_messages=messages, resume_note=note)
    async with app.run_test(size=(140, 40)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        text = screen_text(app)
        assert "you: [b]x[/b] is it bold?" in text and "model: [red]no[/red] [@click=app.quit]q[/]" in text
        assert system_lines(app) == [f"resumed 1 turn from {os.path.basename(t.path)}"]
        await send(pilot, "And why?")
        await wait_until(pilot, lambda: app.turns, what="turn")
        assert [m["content"] for m in app.engine.chats[-1]] == [
            "[b]x[/b] is it bold?", "[red]no[/red] [@click=app.quit]q[/]", "And why?"]
        assert app.is_running  # the [@click=app.quit] link was text, not an action
        # the new transcript holds the restored chat too: the next --resume gets both turns, not only the new one
        await wait_until(pilot, lambda: len(read_messages(app.session.transcript_path)) == 4, what="transcript")
    again, note = resume_last(sessions)
    assert [m.content for m in again] == ["[b]x[/b] is it bold?", "[red]no[/red] [@click=app.quit]q[/]",
                                          "And why?", "ok"]
    assert note == f"resumed 2 turns from {os.path.basename(app.session.transcript_path)}"


async def test_resume_with_nothing_to_restore_says_so(tmp_path, smollm_shaped):
    messages, note = resume_last(paths_under(tmp_path).sessions_dir)
    app = scripted(smollm_shaped, tmp_path, resume_messages=messages, resume_note=note)
    async with app.run_test(size=(140, 40)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        assert len(system_lines(app)) == 1 and "nothing to restore" in system_lines(app)[0]
        assert app.session.messages == []


async def test_resume_after_a_launch_without_turns_shows_the_last_real_chat(tmp_path, smollm_shaped):
    """Issue 33: a launch that quit before its first turn left the newest transcript empty,
    and the next --resume showed "nothing to restore" instead of the chat before it."""
    sessions = paths_under(tmp_path).sessions_dir
    real = Transcript(sessions, {"model": smollm_shaped})
    real.turn("What is the capital of France?", "Paris.", "eog", {})
    real.close()
    time.sleep(0.01)
    Transcript(sessions, {"model": smollm_shaped}).close()  # the launch without turns, newer
    messages, note = resume_last(sessions)
    app = scripted(smollm_shaped, tmp_path, resume_messages=messages, resume_note=note)
    async with app.run_test(size=(140, 40)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        text = screen_text(app)
        assert "you: What is the capital of France?" in text and "model: Paris." in text
        assert system_lines(app) == [f"resumed 1 turn from {os.path.basename(real.path)}"]
        assert [m.content for m in app.session.messages] == ["What is the capital of France?", "Paris."]


def test_launch_passes_what_resume_found_to_the_app(tmp_path, smollm_shaped, monkeypatch):
    """``kvtop --resume``: launch reads the last transcript and hands the app its
    messages and the note (the app is not run here)."""
    from kvtop.runner.records.paths import default_paths
    from kvtop.tui.app import KvtopApp
    from kvtop.tui.base import collector
    from kvtop.tui.start import launch

    monkeypatch.setenv("KVTOP_HOME", str(tmp_path / "home"))
    t = Transcript(default_paths().sessions_dir, {"model": smollm_shaped})
    t.turn("q1", "a1", "eog", {})
    t.turn("q2", "a2", "eog", {})
    t.close()
    seen = {}

    def run(self, **kw):
        seen["options"] = self.options
        return 0

    monkeypatch.setattr(KvtopApp, "run", run)
    monkeypatch.setattr(collector, "freeze_startup_objects", lambda: None)
    monkeypatch.setattr(signal, "signal", lambda *a: None)
    assert launch.launch_main(["--resume", smollm_shaped]) == 0
    opts = seen["options"]
    assert [m.content for m in opts.resume_messages] == ["q1", "a1", "q2", "a2"]
    assert opts.resume_note == f"resumed 2 turns from {os.path.basename(t.path)}"
