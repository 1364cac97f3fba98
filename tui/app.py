"""The kvtop Textual app: it composes the panes, binds the keys and starts the workers.

What a session is (messages, turns, trace, transcript) lives in
``runner.session.ChatSession``; the engine is anything behind
``runner.process.contract.EngineClient``; the workers (``tui/events/workers.py``) only post
messages, and the handlers (``tui/events/routing.py``) turn them into pane updates on the
main thread. The App routes: what a key does is done by the object that owns it
(``share``: screenshots and the bundle, tui/sharing/share.py; ``looks``: the remembered theme
and Markdown, tui/looks.py; ``load_view``: kvtop load's view, tui/server/load_view.py), each
found through tui/base/palette.py's routes.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Iterable

from textual.actions import parse as parse_action
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Input

from kvtop.runner.pacing import MEMORY_SAMPLE_S, chart_interval, prefill_interval, refresh_interval
from kvtop.runner.physics.here import Here
from kvtop.runner.process.contract import EngineClient
from kvtop.runner.records.paths import Paths
from kvtop.runner.sanitize import clean_line
from kvtop.runner.session.chat import ChatSession
from kvtop.runner.session.source import EngineSource
from kvtop.runner.settings import Settings, usable_cores
from kvtop.themes import APP_VARIABLE_DEFAULTS, THEMES
from kvtop.tui.base.collector import TurnCollector
from kvtop.tui.base.options import AppOptions
from kvtop.tui.base.palette import handler
from kvtop.tui.base.prompt_input import PromptInput
from kvtop.tui.base.screens import HelpScreen
from kvtop.tui.dashboard import WIDE_COLUMNS, Dashboard, MetricsScroll, PagerBar
from kvtop.tui.events.lifecycle import EngineControl, EngineLifecycle
from kvtop.tui.events.routing import EngineRouting
from kvtop.tui.events.workers import EngineWorkers, FleetWatch
from kvtop.tui.looks import Looks
from kvtop.tui.panes.about import AboutBar
from kvtop.tui.panes.chat import ChatLog, StreamTail, TypedKeys
from kvtop.tui.panes.decode import DecodePane
from kvtop.tui.panes.estimate import EstimatePane
from kvtop.tui.panes.keys import KeyBar
from kvtop.tui.panes.kv import KVPane
from kvtop.tui.panes.memory import MemoryPane
from kvtop.tui.panes.prefill import PrefillPane
from kvtop.tui.panes.status import StatusBar
from kvtop.tui.server.load_view import LoadView
from kvtop.tui.server.server_routing import ServerRouting
from kvtop.tui.sharing.share import Share
from kvtop.tui.turn.chat_undo import ChatUndo
from kvtop.tui.turn.cpu_watch import CPUWatch, CPUWatching
from kvtop.tui.turn.forecasting import Estimates, ForecastBorder, Forecasting
from kvtop.tui.turn.machine import Machine
from kvtop.tui.turn.quality import LiveQuality, QualityRouting
from kvtop.tui.turn.tuning import TuneRunner
from kvtop.tui.turn.turn_view import TurnView

KVTOP_THEME_NAMES = frozenset(t.name for t in THEMES)


class KvtopApp(EngineWorkers, ServerRouting, EngineLifecycle, Forecasting, CPUWatching,
               EngineRouting, QualityRouting, App[int]):
    CSS_PATH = "app.tcss"
    # app.tcss paints every Screen opaque, which would hide the dashboard behind a dialog
    # (on screen and in Ctrl+S); a dialog's screen lets it show through, dimmed. Inline
    # CSS is read after CSS_PATH, so this wins the tie with ``Screen``.
    CSS = "ModalScreen { background: $background 60%; }"
    TITLE = "kvtop"
    BINDINGS = [
        Binding("escape", "cancel_turn", "Cancel", priority=True),
        Binding("ctrl+s", "screenshot", "Screenshot", priority=True),
        Binding("ctrl+e", "export", "Export", priority=True),
        Binding("ctrl+l", "new_chat", "New chat", priority=True),
        Binding("ctrl+z", "undo_new_chat", "Bring back the last chat", show=False, priority=True),
        Binding("ctrl+t", "change_theme", "Theme", priority=True),
        Binding("f1", "help", "Help"),
        Binding("f2", "waterfall", "TTFT waterfall"),
        Binding("f3", "toggle_markdown", "Markdown"),
        Binding("f4", "next_server", "Next server", show=False),
        Binding("f6", "next_page", "Next page of panes", show=False),
        Binding("f7", "measure_quality", "Measure KV quality", show=False),
        Binding("f8", "find_faster", "Find faster settings", show=False),  # tui/turn/tuning.py
        Binding("ctrl+r", "restart_engine", "Restart engine", show=False, priority=True),
        Binding("ctrl+o", "attach_file", "Attach file", show=False, priority=True),
        Binding("ctrl+q", "quit", "Quit", priority=True),
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True),
    ]

    def __init__(self, settings: Settings, engines: EngineSource | Callable[[Settings], EngineClient], paths: Paths,
                 options: AppOptions | None = None) -> None:
        """``engines``: what the command line chose (``runner.session.source``); a bare
        factory (the tests' seam) makes the first engine, the options' servers the rest."""
        super().__init__()
        self.options = opts = options or AppOptions()
        self.settings = settings.resolved()
        self.paths = paths
        self.control = EngineControl(self, engines if isinstance(engines, EngineSource) else
                                     EngineSource(servers=opts.servers, api_key=opts.api_key, given=engines))
        self.refresh_s, self.refresh_why = refresh_interval(opts.refresh, self.settings.n_threads, usable_cores())
        self.looks = Looks(self)  # the theme and Markdown the user chose, remembered
        self.session = ChatSession(self.control.source.engine(self.settings), self.settings, paths, argv=opts.argv,
                                   write_transcript=opts.write_transcript, record_trace=opts.record_trace,
                                   trace_path=opts.trace_path, resume=opts.resume_messages, clock=opts.clock)
        self.facts = self.hw = None  # known once the model is inspected
        self.machine = Machine(self)  # owns here: the model on this machine, and the panes drawn from it
        self.estimates = Estimates(self)  # the Estimate pane's rows and forecast, the calibration
        self.forecast_border = ForecastBorder(self)  # the prompt's forecast before Enter
        self.cpu_watch = CPUWatch(self)  # memory and CPU samples, today's load, the CPU re-probes
        self.collector = TurnCollector()
        self.dash = Dashboard(self)  # the panes, typed, and the plan of their pages
        self.turn = TurnView(self)  # what the turn in flight shows
        self.chats = ChatUndo(self)  # Ctrl+L's chat put aside, Ctrl+Z's brought back
        self.server_snapshots: dict[int, object] = {}  # kvtop --server: the last poll of each server
        self.server_index = 0  # which server the chat and the panes follow
        self.fleet_watch: FleetWatch | None = None  # kvtop --server: the polls (tui/events/workers.py)
        self.share = Share(self)  # Ctrl+S, Ctrl+E and the files they saved
        self.quality = LiveQuality(self)  # F7: the KV cache's quality measured on this chat
        self.tuning = TuneRunner(self)  # the palette's "find faster settings": kvtop tune's A/Bs in the engine
        self.load_view: LoadView | None = None  # kvtop load's live view, once composed
        self._quitting = False
        self.quit_begun: Callable[[int], None] | None = None  # kvtop's QuitGuard arms its deadline here
        self.typed_keys = TypedKeys(self)  # raw keystrokes for the prompt, inserted in one edit

    @property
    def engine(self) -> EngineClient:
        return self.session.engine

    @property
    def here(self) -> Here | None:
        """runner.physics.here.Here: the model on this machine, once facts and hardware
        are known (changed only through ``self.machine``)."""
        return self.machine.here

    @property
    def turns(self):
        return self.session.turns

    @property
    def turn_running(self) -> bool:
        return self.session.turn_running

    @property
    def loaded(self):
        return self.session.loaded

    @property
    def available_themes(self):
        """kvtop's four themes only (the theme picker, Ctrl+T, lists these): each sets every
        colour kvtop draws with, the chart's lines included; Textual's own themes set none
        of kvtop's. Before kvtop's are registered, Textual's starting theme stays valid."""
        themes = App.available_themes.fget(self)
        mine = {name: t for name, t in themes.items() if name in KVTOP_THEME_NAMES}
        if self.theme not in mine and self.theme in themes:
            mine[self.theme] = themes[self.theme]
        return mine

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return dict(APP_VARIABLE_DEFAULTS)

    def compose(self) -> ComposeResult:
        yield StatusBar(clean_line(os.path.basename(self.settings.model)), id="status")
        yield AboutBar(self.settings, server=not self.session.engine.capabilities.runs_model, live=self.options.live_system, id="about")
        with Horizontal(id="body"):
            with Vertical(id="chat-column"):
                if self.options.load is not None:  # kvtop load: the load pane in the chat's place
                    self.load_view = LoadView(self.options.load, id="load-view")
                    yield self.load_view
                yield ChatLog(id="chat")
                yield StreamTail(id="stream-tail")
                # A steady cursor: blinking redraws the screen twice a second, for ever,
                # and on a small machine every redraw is taken from llama.cpp's threads.
                prompt = PromptInput(placeholder="Message (Enter to send, F1 for help)",
                                     short_placeholder="Message (Enter sends, F1 help)", id="prompt")
                prompt.cursor_blink = False
                prompt.select_on_focus = False  # Ctrl+O's "/file " must not be replaced by the next key
                yield prompt
            with Vertical(id="metrics-column"):
                yield PagerBar(id="pager")
                with MetricsScroll(id="metrics"):
                    yield PrefillPane(prefill_interval(self.refresh_s), self.options.clock, id="prefill", classes="pane")
                    yield KVPane(id="kv", classes="pane")
                    if self.session.engine.capabilities.polls_server:  # what the server does for everyone, right under the turn's panes
                        from kvtop.tui.panes.fleet import FleetPane
                        from kvtop.tui.panes.server import ServerPane

                        yield ServerPane(self.options.servers[0], id="server", classes="pane")
                        if len(self.options.servers) > 1:
                            yield FleetPane(self.options.servers, id="fleet", classes="pane")
                    yield DecodePane(chart_interval(self.refresh_s), id="decode", classes="pane")
                    yield EstimatePane(id="estimate", classes="pane")
                    yield MemoryPane(id="memory", classes="pane")
        yield KeyBar(several_servers=len(self.options.servers) > 1, load=self.options.load is not None, id="keys")

    def on_mount(self) -> None:
        self.dash.bind()
        self.looks.apply()
        self.set_class(self.size.width >= WIDE_COLUMNS, "-wide")
        self.call_after_refresh(self.dash.fit)
        chat = self.dash.chat
        for m in self.session.messages:
            chat.add(m.role, m.content)
        if self.session.messages:  # --resume: a chat of turns beside "no turn yet" read as lost
            self.dash.prefill.show(None, "KV cache empty: the next turn prefills the resumed chat")
        for note in (self.options.resume_note, self.options.banner, *self.options.notes):
            if note:
                chat.add("system", note)
        if self.looks.prefs.notice:
            self.notify(self.looks.prefs.notice, severity="warning", markup=False)
        prompt = self.query_one("#prompt", Input)
        if not self.session.engine.capabilities.takes_input:
            prompt.placeholder = "Replay: input is off (Ctrl+Q quits)"
            prompt.disabled = True
        if self.session.engine.capabilities.replaying:
            self.dash.memory.set_not_sampled(
                "RSS, RAM and GPU memory are not recorded in a trace; llama.cpp's buffers are")
        if self.options.memory_sample is not None:
            self.dash.memory.set_sample(self.options.memory_sample)
        if self.options.live_system:
            self.cpu_watch.sample()
            self.set_interval(MEMORY_SAMPLE_S, self.cpu_watch.sample)
        prompt.focus()
        if self.session.engine.capabilities.polls_server:
            self.set_class(True, "-server")
            self.set_class(len(self.options.servers) > 1, "-fleet")
            self.fleet_watch = FleetWatch(self)
            self.fleet_watch.start()
        if self.load_view is not None:
            self.load_view.start()
        self.inspect_model()
        if self.options.prompt_file:
            self.read_prompt_file(self.options.prompt_file)
        elif self.options.prompt_text and self.options.prompt_text.strip():
            from kvtop.runner.sanitize import clean_text

            self.turn.send(clean_text(self.options.prompt_text).strip())

    async def on_event(self, event) -> None:
        shortcut = self.typed_keys.shortcut(event)  # q and ? outside the prompt
        if shortcut:
            await self.run_action(shortcut)
            return
        if self.typed_keys.take(event):  # linear typing: see TypedKeys
            return
        self.typed_keys.flush()  # keys typed before this event land first
        await super().on_event(event)

    def on_resize(self, event) -> None:
        self.set_class(event.size.width >= WIDE_COLUMNS, "-wide")
        self.call_after_refresh(self.dash.fit)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """The command palette: every kvtop action once, by the words a user types (tui/base/palette.py)."""
        from kvtop.tui.base.palette import palette_commands

        yield from palette_commands(self, super().get_system_commands(screen))

    # --------------------------------------------------------------- actions
    async def run_action(self, action, default_namespace=None, namespaces=None) -> bool:
        """Keys, the key bar and clicks: an action a composed object owns (tui/base/palette.py
        ``ROUTES``; kvtop load's view first) goes to it, checked as Textual checks any."""
        if namespaces is None:
            target, name, params = action if isinstance(action, tuple) else parse_action(action)
            on_app = target == "app" or (target == "" and default_namespace in (None, self))
            routed = handler(self, name) if on_app else None
            if routed is not None:
                if not self.check_action(name, params):
                    return False
                result = routed(*params)
                if inspect.isawaitable(result):
                    await result
                return True
        return await super().run_action(action, default_namespace, namespaces)

    def check_action(self, action: str, parameters) -> bool | None:
        """kvtop load's view refuses the chat's actions (tui/server/load_view.py ``allows``)."""
        if self.load_view is not None and not self.load_view.allows(action):
            return False
        return super().check_action(action, parameters)

    def action_help(self) -> None:
        from kvtop.tui.turn.spec_view import help_spec

        self.push_screen(HelpScreen(self.refresh_s, self.refresh_why, load=self.options.load is not None,
                                    roof=getattr(self.options.load, "roof_text", None), spec=help_spec(self)))

    def action_attach_file(self) -> None:
        """Start a ``/file PATH`` message: the file's text is sent when Enter is pressed."""
        inp = self.query_one("#prompt", Input)
        inp.focus()
        inp.value = "/file "
        inp.cursor_position = len(inp.value)

    def action_waterfall(self, turn: int | None = None) -> None:
        """F2: the TTFT waterfall of the newest turn (or of ``turn``: a click on a reply)."""
        from kvtop.tui.turn.waterfall import WaterfallScreen, live_turn

        def source():  # every turn of the session, and the one in flight
            return list(self.turns), live_turn(self)

        prefill_s = self.here.prefill_seconds if self.here is not None else None  # at this machine's roofline
        screen = WaterfallScreen(source, self.facts, prefill_s, prefill_interval(self.refresh_s),
                                 self.estimates.engine_cpu(), self.estimates.tuned)
        if turn is not None and 0 <= turn < len(screen.turns):
            screen.pos = turn
        self.push_screen(screen)

    def on_tune_progressed(self, m) -> None:  # "find faster settings" (tui/turn/tuning.py)
        self.tuning.progress(m.event)

    def on_tune_finished(self, m) -> None:
        self.tuning.finished(m.event)

    def on_unmount(self) -> None:
        self.collector.turn_ended()  # never leave the collector paused behind us
        if self.fleet_watch is not None:  # the polls end with the app, not at their next poll
            self.fleet_watch.poller.stop()
        self.control.shutdown()
