"""The kvtop Textual app: it composes the panes, binds the keys and starts the workers.

What a session is (messages, turns, trace, transcript) lives in
``runner.session.ChatSession``; the engine is anything behind
``runner.process.contract.EngineClient``; the workers (``tui/workers.py``) only post
messages, and the handlers (``tui/routing.py``) turn them into pane updates on the
main thread.
"""

from __future__ import annotations

import os
from typing import Callable, Iterable

from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Input

from runner.pacing import MEMORY_SAMPLE_S, chart_interval, prefill_interval, refresh_interval
from runner.process.commands import ChatMessage
from runner.process.contract import EngineClient
from runner.records.paths import Paths
from runner.sanitize import clean_line
from runner.session.chat import ChatSession
from runner.settings import Settings, usable_cores
from themes import APP_VARIABLE_DEFAULTS, DEFAULT_THEME, THEMES, register_all

from .collector import TurnCollector
from .config import load_preferences, save_preferences
from .options import AppOptions
from .panes.about import AboutBar
from .panes.chat import ChatLog, StreamTail, TypedKeys
from .panes.decode import DecodePane
from .panes.estimate import EstimatePane
from .panes.keys import KeyBar
from .panes.kv import KVPane
from .panes.memory import MemoryPane
from .panes.prefill import PrefillPane
from .panes.status import StatusBar
from .prompt_input import PromptInput
from .chat_undo import ChatUndo
from .cpu_watch import CeilingCheck, CPUWatch
from .dashboard import WIDE_COLUMNS, Dashboard, MetricsScroll, PagerBar
from .forecasting import Forecasting
from .lifecycle import EngineLifecycle
from .load_view import LoadView
from .machine_figures import MachineFigures
from .routing import EngineRouting
from .server_routing import ServerRouting
from .turn_view import TurnView
from .screens import HelpScreen
from .workers import EngineWorkers, ServerPolling

ABOUT_REFRESH_S = 10.0
KVTOP_THEME_NAMES = frozenset(t.name for t in THEMES)
_SVG_BAD_XML = dict.fromkeys(i for i in range(32) if i not in (9, 10, 13))


class KvtopApp(LoadView, EngineWorkers, ServerPolling, ServerRouting, EngineLifecycle, Forecasting, CPUWatch, CeilingCheck,
               EngineRouting, MachineFigures, App[int]):
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
        Binding("ctrl+r", "restart_engine", "Restart engine", show=False, priority=True),
        Binding("ctrl+o", "attach_file", "Attach file", show=False, priority=True),
        Binding("ctrl+q", "quit", "Quit", priority=True),
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True),
    ]

    def __init__(self, settings: Settings, engine_factory: Callable[[Settings], EngineClient], paths: Paths,
                 options: AppOptions | None = None) -> None:
        super().__init__()
        self.options = opts = options or AppOptions()
        self.settings = settings.resolved()
        self.paths = paths
        self.engine_factory = engine_factory
        self.refresh_s, self.refresh_why = refresh_interval(opts.refresh, self.settings.n_threads, usable_cores())
        self.prefs = load_preferences(paths.config_file)
        self.session = ChatSession(engine_factory(self.settings), self.settings, paths, argv=opts.argv,
                                   write_transcript=opts.write_transcript, record_trace=opts.record_trace,
                                   trace_path=opts.trace_path, resume=opts.resume_messages, clock=opts.clock)
        self.facts = self.hw = self.layout_kv = None  # known once the model is inspected
        self.collector = TurnCollector()
        self.dash = Dashboard(self)  # the panes, typed, and the plan of their pages
        self.turn = TurnView(self)  # what the turn in flight shows
        self.chats = ChatUndo(self)  # Ctrl+L's chat put aside, Ctrl+Z's brought back
        self.server_snapshots: dict[int, object] = {}  # kvtop --server: the last poll of each server
        self.server_index = 0  # which server the chat and the panes follow
        self.last_saved: str | None = None
        self.last_saved_whole: str | None = None  # Ctrl+S's whole-dashboard SVG (tui/full_shot.py)
        self._stopping = False
        self._quitting = False
        self.quit_begun: Callable[[int], None] | None = None  # kvtop's QuitGuard arms its deadline here
        self.typed_keys = TypedKeys(self)  # raw keystrokes for the prompt, inserted in one edit

    def make_engine(self) -> EngineClient:
        """A fresh engine with the same settings (a restart), on the server the chat follows."""
        if self.options.servers:
            from runner.server.engine import ServerEngine

            return ServerEngine(self.settings, self.options.servers[self.server_index], self.options.api_key)
        return self.engine_factory(self.settings)

    @property
    def engine(self) -> EngineClient:
        return self.session.engine

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
        yield AboutBar(self.settings, server=bool(self.options.servers), live=self.options.live_system, id="about")
        with Horizontal(id="body"):
            with Vertical(id="chat-column"):
                if self.options.load is not None:  # kvtop load: the load pane in the chat's place
                    yield from self.compose_load()
                yield ChatLog(id="chat")
                yield StreamTail(id="stream-tail")
                # A steady cursor: blinking redraws the screen twice a second, for ever,
                # and on a small machine every redraw is taken from llama.cpp's threads.
                prompt = PromptInput(placeholder="Message (Enter to send, F1 for help)", id="prompt")
                prompt.cursor_blink = False
                prompt.select_on_focus = False  # Ctrl+O's "/file " must not be replaced by the next key
                yield prompt
            with Vertical(id="metrics-column"):
                yield PagerBar(id="pager")
                with MetricsScroll(id="metrics"):
                    yield PrefillPane(prefill_interval(self.refresh_s), self.options.clock, id="prefill", classes="pane")
                    yield KVPane(id="kv", classes="pane")
                    if self.options.servers:  # what the server does for everyone, right under the turn's panes
                        from .panes.fleet import FleetPane
                        from .panes.server import ServerPane

                        yield ServerPane(self.options.servers[0], id="server", classes="pane")
                        if len(self.options.servers) > 1:
                            yield FleetPane(self.options.servers, id="fleet", classes="pane")
                    yield DecodePane(chart_interval(self.refresh_s), id="decode", classes="pane")
                    yield EstimatePane(id="estimate", classes="pane")
                    yield MemoryPane(id="memory", classes="pane")
        yield KeyBar(several_servers=len(self.options.servers) > 1, load=self.options.load is not None, id="keys")

    def on_mount(self) -> None:
        self.dash.bind()
        register_all(self)
        names = {t.name for t in THEMES} | set(self.available_themes)
        self.theme = self.prefs.theme if self.prefs.theme in names else DEFAULT_THEME
        self.theme_changed_signal.subscribe(self, self._remember_theme)
        self.set_class(self.size.width >= WIDE_COLUMNS, "-wide")
        self.call_after_refresh(self.dash.fit)
        self.set_interval(ABOUT_REFRESH_S, self.query_one(AboutBar).refresh)  # its load and clock
        chat = self.query_one(ChatLog)
        chat.markdown = self.prefs.markdown
        for m in self.session.messages:
            chat.add(m.role, m.content)
        for note in (self.options.resume_note, self.options.banner):
            if note:
                chat.add("system", note)
        if self.prefs.notice:
            self.notify(self.prefs.notice, severity="warning", markup=False)
        prompt = self.query_one("#prompt", Input)
        if self.session.replaying:
            prompt.placeholder = "Replay: input is off (Ctrl+Q quits)"
            prompt.disabled = True
            self.query_one(MemoryPane).set_not_sampled(
                "RSS, RAM and GPU memory are not recorded in a trace; llama.cpp's buffers are")
        if self.options.memory_sample is not None:
            self.query_one(MemoryPane).set_sample(self.options.memory_sample)
        if self.options.live_system:
            self.sample_memory()
            self.set_interval(MEMORY_SAMPLE_S, self.sample_memory)
        prompt.focus()
        if self.options.servers:
            self.set_class(True, "-server")
            self.set_class(len(self.options.servers) > 1, "-fleet")
            self.start_server_polling()
        if self.options.load is not None:
            self.start_load()
        self.inspect_model()
        if self.options.prompt_file:
            self.read_prompt_file(self.options.prompt_file)
        elif self.options.prompt_text and self.options.prompt_text.strip():
            from runner.sanitize import clean_text

            self.turn.send(clean_text(self.options.prompt_text).strip())

    def _remember_theme(self, theme) -> None:
        self.prefs.theme = theme.name
        self._save_preferences()
        self.query_one(ChatLog).restyle()
        self.query_one(DecodePane).redraw_chart()  # plotext holds the old theme's colours

    def _save_preferences(self) -> None:
        try:
            save_preferences(self.paths.config_file, self.prefs)
        except OSError as exc:
            self.notify(f"could not save preferences: {clean_line(str(exc))}", severity="warning", markup=False)

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
        """The command palette: every kvtop action once, by the words a user types (tui/palette.py)."""
        from .palette import palette_commands

        yield from palette_commands(self, super().get_system_commands(screen))

    # --------------------------------------------------------------- actions
    def action_new_chat(self) -> None:
        self.chats.new_chat()  # the old chat is put aside: Ctrl+Z brings it back (tui/chat_undo.py)

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.refresh_s, self.refresh_why, load=self.options.load is not None))

    def action_attach_file(self) -> None:
        """Start a ``/file PATH`` message: the file's text is sent when Enter is pressed."""
        inp = self.query_one("#prompt", Input)
        inp.focus()
        inp.value = "/file "
        inp.cursor_position = len(inp.value)

    def action_toggle_markdown(self) -> None:
        self.prefs.markdown = not self.prefs.markdown
        self.query_one(ChatLog).set_markdown(self.prefs.markdown)
        self._save_preferences()
        self.notify("Markdown on: links are shown as text (url) and never opened" if self.prefs.markdown
                    else "Markdown off: replies are plain text", markup=False, timeout=3)

    def action_waterfall(self, turn: int | None = None) -> None:
        """F2: the TTFT waterfall of the newest turn (or of ``turn``: a click on a reply)."""
        from .waterfall import WaterfallScreen, live_turn

        def source():  # every turn of the session, and the one in flight
            return list(self.turns), live_turn(self)

        screen = WaterfallScreen(source, self.facts, self.roofline_prefill_s(), prefill_interval(self.refresh_s))
        if turn is not None and 0 <= turn < len(screen.turns):
            screen.pos = turn
        self.push_screen(screen)

    def screenshot_svg(self) -> str:
        return self.clean_svg(self.export_screenshot(title="kvtop"))

    @staticmethod
    def clean_svg(svg: str) -> str:
        """Control characters are not XML: a model's output must not break the SVG."""
        return svg.translate(_SVG_BAD_XML)

    def action_screenshot(self, hide_chat: bool = False) -> None:
        """Save what the user sees, dialogs and all (``hide_chat``: the chat pane blanked),
        never kvtop's own notices (tui/share.py)."""
        from .share import take_screenshot

        take_screenshot(self, hide_chat)

    def debug_bundle(self, redact: bool = True, screenshot_svg: str | None = None) -> dict:
        from runner.commands.bundle import debug_bundle

        svg = self.screenshot_svg() if screenshot_svg is None else screenshot_svg
        return debug_bundle(self.session, self.facts, self.hw,
                            {"refresh_s": self.refresh_s, "refresh_why": self.refresh_why}, svg, redact=redact)

    def action_export(self) -> None:
        """Ask which bundle (redacted by default, or with the text), then write it with the
        turns' CSV beside it (tui/share.py)."""
        from .share import open_export

        open_export(self)

    def on_unmount(self) -> None:
        self.collector.turn_ended()  # never leave the collector paused behind us
        self.shutdown_engine()


def resumed(messages: list[dict]) -> tuple[ChatMessage, ...]:
    return tuple(ChatMessage(m["role"], m["content"]) for m in messages)
