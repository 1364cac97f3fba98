"""The live view of ``kvtop load`` on a terminal: the load pane filling in level by level.

The sweep runs on a worker thread (``runner.commands.load.sweep``, the same code as
the headless command); each level's rows and each progress line reach the screen by
``call_from_thread``. Esc or Ctrl+C stops the load (every stream in flight is closed
and kvtop waits until the server has no busy slot); q quits once it has stopped. The
rows are printed to stdout after the screen closes, as the headless command prints them.
"""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.content import Content

from .panes.base import PaneStatic
from .panes.load import LoadPane


class LoadApp(App):
    CSS = """
    #load-status { height: auto; padding: 0 1; background: $panel; }
    LoadPane { height: 1fr; padding: 0 1; }
    #load-chart { height: 1fr; min-height: 8; }
    #load-table { height: auto; }
    #load-keys { height: 1; padding: 0 1; color: $text-muted; }
    """
    BINDINGS = [
        Binding("escape", "stop", "stop the load", show=False),
        Binding("ctrl+c", "stop_or_quit", "stop, then quit", priority=True, show=False),
        Binding("q", "quit_when_stopped", "quit", show=False),
    ]

    def __init__(self, a, urls: list[str], key: str | None, infos) -> None:
        super().__init__()
        self.a, self.urls, self.key, self.infos = a, urls, key, infos
        self.driver = None
        self.result = None  # runner.commands.load.SweepResult once the sweep ends
        self.stopping = False

    def get_theme_variable_defaults(self) -> dict[str, str]:
        from themes import APP_VARIABLE_DEFAULTS

        return dict(APP_VARIABLE_DEFAULTS)

    def compose(self) -> ComposeResult:
        yield PaneStatic(Content(f"kvtop load {self.urls[0]}: starting"), id="load-status", markup=False)
        yield LoadPane(self.a.slo_ttft, self.a.slo_tok_s, id="load")
        yield PaneStatic(Content("Esc stop the load   q quit once stopped   Ctrl+C stop, then quit"),
                         id="load-keys", markup=False)

    def on_mount(self) -> None:
        from themes import DEFAULT_THEME, register_all

        register_all(self)
        self.theme = DEFAULT_THEME
        self.run_worker(self._sweep, thread=True, name="load-sweep")

    def _sweep(self) -> None:
        from runner.commands.load import sweep

        def ready(driver) -> None:
            self.driver = driver
            if self.stopping:
                driver.stop()

        result = sweep(self.a, self.urls, self.key, self.infos,
                       on_rows=lambda rows: self.call_from_thread(self.query_one(LoadPane).add_rows, rows),
                       driver_ready=ready, say=lambda text: self.call_from_thread(self.say, text))
        self.call_from_thread(self.finished, result)

    def say(self, text: str) -> None:
        self.query_one("#load-status", PaneStatic).update(Content(f"kvtop load {self.urls[0]}: {text}"))

    def finished(self, result) -> None:
        self.result = result
        end = "stopped" if result.stopped else "error: " + result.error if result.error else "done"
        notes = [n for n in result.notes if n.startswith("knee")]
        self.say(f"{end}; q quits and prints the table" + ("; " + notes[0] if notes else ""))

    def action_stop(self) -> None:
        if self.result is None and not self.stopping:
            self.stopping = True
            self.say("stopping: closing the streams, waiting for the server's slots to be idle")
            if self.driver is not None:
                self.driver.stop()  # closes sockets only: quick, safe on this thread

    def action_stop_or_quit(self) -> None:
        if self.result is None:
            self.action_stop()
        else:
            self.exit()

    def action_quit_when_stopped(self) -> None:
        if self.result is not None:
            self.exit()
        else:
            self.action_stop()


def run_live(a, urls: list[str], key: str | None, infos):
    """The sweep with the live view; its result (None if the screen closed before it ended)."""
    from .quitting import follow_the_terminal_size

    follow_the_terminal_size()
    app = LoadApp(a, urls, key, infos)
    app.run()
    if app.result is None and app.driver is not None:  # closed some other way: leave the server idle
        app.driver.stop()
        app.driver.wait_idle()
    return app.result
