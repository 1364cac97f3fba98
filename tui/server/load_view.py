"""``kvtop load``'s live view: the dashboard ``kvtop --server`` shows, with the load pane
in the chat's place (tui/start/launch_server.py ``load_app`` builds it).

``LoadView`` is a widget in the chat's place that owns the whole live view: it holds the
status line and the load pane, runs the sweep (``runner.commands.load.sweep``, the same
code as the headless command) on a worker thread that only posts messages to the view
itself: a level's rows (``LoadLevelDone``), what it does now (``LoadProgress``) and its
end (``LoadEnded``); its own handlers update the pane on the main thread. The App holds
it as ``load_view`` (None without ``kvtop load``) and routes the keys that stop the load
to it (tui/base/palette.py ``LOAD_ROUTES``) and asks it which actions it allows. Esc stops the load (every stream in flight is closed and the
sweep waits until the server has no busy slot); q quits once it has stopped; Ctrl+C
(or Ctrl+Q) stops it and quits when it has, a second one at once. At the end the server
is polled at once, and the status says done (or stopped) when that poll is in the server
pane with no slot busy, so the two never disagree. The rows are printed to stdout after
the screen closes, as the headless command prints them.
"""

from __future__ import annotations

import threading
import time

from textual import work
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content

from kvtop.tui.base import messages as msg
from kvtop.tui.base.guards import while_running
from kvtop.tui.panes.base import PaneStatic
from kvtop.tui.panes.chat import TypedKeys
from kvtop.tui.panes.load import LoadPane

IDLE_POLL_S = 10.0  # after the load's end: how long the status waits for a poll showing the slots idle
SETTLE_S = 30.0  # after the screen closed mid-level: the sweep's own wait for idle slots is 15 s
PROBE_WAIT_S = 120.0  # the dashboard's CPU probe takes over 30 s on a busy machine


class LoadRun:
    """What ``kvtop load`` asked for (its flags, the servers, the key, their /props) and
    where the sweep stands. ``result`` is set on the main thread when ``LoadEnded``
    arrives; ``final`` by the worker itself, for a screen that closed before."""

    def __init__(self, a, urls: list[str], key, infos) -> None:
        self.a, self.urls, self.key, self.infos = a, urls, key, infos
        self.driver = None  # runner.server.load_driver.LoadDriver, once the sweep made it
        self.result = None
        self.final = None
        self.stopping = False
        self.roof_text = None  # the roof's formula with its inputs (the load pane's legend and F1), once known
        self.ended_at = None  # time.monotonic() when LoadEnded arrived: a poll taken after it shows the end
        self.end_said = False  # the status says done/stopped (after that poll, or IDLE_POLL_S)
        self.quit_when_ended = False
        self.ended = threading.Event()

    def stop(self) -> None:
        self.stopping = True
        if self.driver is not None:
            self.driver.stop()  # closes sockets only: quick, safe on the main thread

    def settle(self):
        """After the screen closed: a sweep still running is stopped and waited for (the
        server left idle); what it measured, or None when it never ended."""
        if self.result is None and not self.ended.is_set():
            self.stop()
            self.ended.wait(SETTLE_S)
        return self.result or self.final


CHAT_ONLY_ACTIONS = frozenset({"new_chat", "undo_new_chat", "waterfall", "toggle_markdown", "restart_engine",
                               "attach_file"})


class LoadView(Vertical):
    """kvtop load's live view in the chat's place: the status line over the load pane, the
    sweep's worker and its messages, and what the keys that stop the load do."""

    DEFAULT_CSS = "LoadView { height: 1fr; }"

    def __init__(self, run: LoadRun, **kw) -> None:
        super().__init__(**kw)
        self.run = run

    def compose(self) -> ComposeResult:
        run = self.run
        yield PaneStatic(Content("kvtop load: starting"), id="load-status", markup=False)  # the URL: the status bar
        pane = LoadPane(run.a.slo_ttft, run.a.slo_tok_s, id="load", classes="pane")
        pane.border_title = "Load: tok/s by users"
        yield pane

    def start(self) -> None:
        """The App is mounted: the chat's prompt and keys give way to the load, which starts."""
        app = self.app
        app.set_class(True, "-load")
        prompt = app.query_one("#prompt")
        prompt.disabled = True  # no chat while the load runs: it would be measured with it
        # q: while the load runs it stops it, once stopped it quits; ? is still help
        app.typed_keys.SHORTCUTS = {**TypedKeys.SHORTCUTS, "q": "quit_when_stopped"}
        # no chat turn runs: the chat's panes say where the load shows, not a bare "no turn yet"

        elsewhere = "no chat turn: the load shows in the Server, KV and Load panes"
        app.dash.prefill.note = elsewhere
        app.dash.prefill.refresh(layout=True)
        app.dash.decode.set_idle_label("(no chat turn)")
        self.run_sweep()

    @work(thread=True, exclusive=True, group="load", exit_on_error=False)
    def run_sweep(self) -> None:
        from kvtop.runner.commands.load import SweepResult, sweep

        run = self.run
        seen: list[dict] = []

        def ready(driver) -> None:
            run.driver = driver
            if run.stopping:
                driver.stop()

        def rows(level_rows: list[dict]) -> None:
            seen.extend(level_rows)
            self.post_message(msg.LoadLevelDone(level_rows))

        self._wait_for_the_probe(run)
        try:
            result = sweep(run.a, run.urls, run.key, run.infos, on_rows=rows, driver_ready=ready,
                           say=lambda text: self.post_message(msg.LoadProgress(text)),
                           on_physics=lambda ph: self.post_message(msg.LoadRoof(ph.formula(), ph.note)))
        except Exception as exc:  # a bug must not leave the screen saying "level 2/4" for ever
            result = SweepResult(rows=seen, error=f"{type(exc).__name__}: {exc}")
        run.final = result
        run.ended.set()
        self.post_message(msg.LoadEnded(result))

    def _wait_for_the_probe(self, run) -> None:
        """A server on this machine and no --bandwidth-gbs/--tflops: the roof comes from this
        CPU's probe, which the dashboard takes too (tui/events/workers.py). The sweep waits for the
        dashboard's, cached, rather than take its own at the same time (each would measure
        the other) or under the load. Worker thread: it reads a flag, touches no widget."""
        from kvtop.runner.server.urls import is_loopback

        app = self.app
        if run.a.bandwidth_gbs or run.a.tflops or not is_loopback(run.urls[0]) or app.model_inspected:
            return
        self.post_message(msg.LoadProgress("waiting for the dashboard's CPU probe (the roof uses it)"))
        deadline = time.monotonic() + PROBE_WAIT_S
        while not app.model_inspected and not run.stopping and time.monotonic() < deadline:
            time.sleep(0.1)

    def say(self, text: str) -> None:
        from kvtop.runner.sanitize import clean_line

        # an error may hold the server's own words: one line, no control characters, no markup
        self.query_one("#load-status", PaneStatic).update(Content(f"kvtop load: {clean_line(text, 600)}"))

    @while_running
    def on_load_level_done(self, m: msg.LoadLevelDone) -> None:
        self.query_one(LoadPane).add_rows(m.rows)

    @while_running
    def on_load_roof(self, m: msg.LoadRoof) -> None:
        self.run.roof_text = m.formula or m.note
        self.query_one(LoadPane).set_roof(self.run.roof_text)

    @while_running
    def on_load_progress(self, m: msg.LoadProgress) -> None:
        if self.run.result is None:
            self.say(m.text)

    @while_running
    async def on_load_ended(self, m: msg.LoadEnded) -> None:
        """The sweep ended. The status says done (or stopped) only once a poll of the server,
        taken after this, is in the server pane: said at once, it read "done" beside the
        last poll's busy slots for up to a poll's interval."""
        run, app = self.run, self.app
        run.result = r = m.result
        from kvtop.tui.panes.keys import KeyBar

        app.query_one(KeyBar).load_ended()
        if run.quit_when_ended:
            await app.action_quit()
            return
        poller = app.fleet_watch.poller if app.fleet_watch is not None else None
        if r.error or poller is None:
            self.say_end()
            return
        run.ended_at = time.monotonic()
        self.say(("stopping: the streams are closed" if r.stopped else "finishing: the last requests ended")
                 + "; waiting for the server pane to show its slots idle (q quits and prints the table)")
        for i in range(len(app.options.servers)):
            poller.poll_now(i)
        self.set_timer(IDLE_POLL_S, self.say_end)

    def server_polled(self, snapshot) -> None:
        """A poll of the server on screen is in its pane (tui/server/server_routing.py): one taken after
        the load's end with no slot busy lets the status say how the load ended."""
        run = self.run
        if run.ended_at is None or run.end_said or snapshot.t < run.ended_at:
            return
        if snapshot.busy == 0:
            self.say_end()

    def say_end(self) -> None:
        run = self.run
        if run.end_said:
            return
        run.end_said = True
        r = run.result
        from kvtop.runner.commands.load import STOPPED

        if r.stopped:
            end = next((n for n in r.notes if n.startswith(STOPPED)), "stopped")
        else:
            end = "error: " + r.error if r.error else "done"
        app = self.app
        snap = app.server_snapshots.get(app.server_index) if run.ended_at is not None else None
        if snap is not None and snap.busy:  # IDLE_POLL_S went by: say what the pane shows
            end += (f"; the server still has {snap.busy} slot{'s' if snap.busy != 1 else ''} busy "
                    f"{IDLE_POLL_S:g} s after (another client's requests?)")
        knee = [n for n in r.notes if n.startswith(("knee", "other processes used"))]  # and the busy machine
        self.say(f"{end}; q quits and prints the table" + "".join("; " + n for n in knee))

    @staticmethod
    def allows(action: str) -> bool:
        """kvtop load shows no chat, so the chat's keys do nothing there: a trial's Ctrl+R
        restarted the engine behind the hidden chat and wrote a line nobody saw."""
        return action not in CHAT_ONLY_ACTIONS

    def stop(self) -> None:
        """Esc (and its key on the key bar): stop the load; the screen stays."""
        run = self.run
        if run.result is None and not run.stopping:
            run.stop()
            self.say("stopping: closing the streams, waiting for the server's slots to be idle")

    def cancel(self) -> None:
        """Esc: stops the load (a dialog open: closes it, as without a load)."""
        if len(self.app.screen_stack) > 1:
            self.app.action_cancel_turn()
        else:
            self.stop()

    async def quit(self) -> None:
        """Ctrl+C, Ctrl+Q: a load still running is stopped first, and the app quits once the
        server is idle; pressed again while it stops, it quits at once (``settle`` waits)."""
        run = self.run
        if run.result is not None or run.quit_when_ended:
            await self.app.action_quit()
            return
        run.quit_when_ended = True
        self.stop()

    async def quit_when_stopped(self) -> None:
        """q in kvtop load: quits once the load has ended; while it runs, stops it."""
        if self.run.result is not None:
            await self.quit()
        else:
            self.stop()
