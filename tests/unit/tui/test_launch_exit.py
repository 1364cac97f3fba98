"""``kvtop`` and ``kvtop replay`` exit non-zero when the app crashes (issue 12, item 7).

Textual catches an exception raised inside the app, prints it, and ``App.run()``
returns None: kvtop exited 0 after a crash. ``App.return_code`` is 1 then (Textual 8)."""

import pytest
from textual.app import App

from kvtop.tui.start import launch


class Crashes(App[int]):
    def on_mount(self) -> None:
        raise RuntimeError("boom")


class QuitsWithOne(App[int]):
    def on_mount(self) -> None:
        self.exit(return_code=1)  # what the error dialog's Quit and the memory warning's Stop do


class ExitsWith(App[int]):
    def on_mount(self) -> None:
        self.exit(143)  # SIGTERM: launch's signal handler exits with 128 + signum


def test_textual_sets_return_code_1_on_an_unhandled_exception():
    app = Crashes()
    assert app.run(headless=True) is None  # what kvtop read as "exit 0"
    assert app.return_code == 1


@pytest.mark.parametrize("cls,code", [(Crashes, 1), (QuitsWithOne, 1), (ExitsWith, 143)])
def test_run_app_returns_the_apps_exit_status(cls, code):
    assert launch.run_app(cls(), headless=True) == code


def test_a_crash_inside_a_replay_exits_1(write_trace, tmp_path, monkeypatch):
    """The whole ``kvtop replay`` path: the app crashes on the first replayed message."""
    from kvtop.tui.app import KvtopApp
    from kvtop.tui.events.routing import EngineRouting

    def crash(self, m):
        raise RuntimeError("a pane crashed")

    monkeypatch.setenv("KVTOP_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(EngineRouting, "on_recorded_user", crash)
    monkeypatch.setattr(KvtopApp, "run", lambda self, **kw: App.run(self, headless=True, size=(120, 40), **kw))
    assert launch.replay_main(["--end", write_trace(tmp_path / "t.jsonl")]) == 1


def test_replay_shows_no_live_system_figures(write_trace, tmp_path, monkeypatch):
    """A replay must show what was recorded: the viewer's own RAM and RSS are not."""
    from kvtop.tui.app import KvtopApp

    seen = {}

    def run(self, **kw):
        seen["options"] = self.options
        return 0

    monkeypatch.setenv("KVTOP_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(KvtopApp, "run", run)
    assert launch.replay_main([write_trace(tmp_path / "t.jsonl")]) == 0
    opts = seen["options"]
    assert opts.live_system is False and opts.memory_sample is None
    assert opts.write_transcript is False and opts.record_trace is False
    assert opts.banner.startswith("replay of t.jsonl, recorded ") and opts.banner.endswith("; input is off")
