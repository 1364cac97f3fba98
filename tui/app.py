"""The kvtop Textual app: chat with a model while every pane shows where time and memory go.

Threads: the engine is driven from ``@work(thread=True)`` workers; they never touch
widgets, only ``post_message`` (through ``TurnBridge``). Message handlers below,
on the main thread, own every widget update.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Callable, Iterable

from textual import on, work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Input

from runner.physics.roofline import decode_ceilings_at, predict
from runner.system.hardware import HardwareProfile
from runner.physics.kv_bytes import kv_layout
from runner.records.paths import Paths, unique_file
from runner.process.parent import EngineUnavailable
from runner.sanitize import clean_line, clean_text
from runner.settings import Settings, usable_cores
from themes import APP_VARIABLE_DEFAULTS, DEFAULT_THEME, THEMES, register_all

from . import messages as msg
from .bridge import TurnBridge
from .collector import TurnCollector
from .config import Preferences, load_preferences, save_preferences
from .panes.chat import ChatLog, ChatMessage, StreamTail, turn_footer
from .panes.decode import DecodePane
from .panes.estimate import EstimatePane
from .panes.kv import KVPane
from .panes.memory import MemoryPane, MemorySample, take_sample
from .panes.prefill import PrefillPane
from .panes.status import StatusBar
from .refresh import chart_interval, prefill_interval, refresh_interval
from .screens import ErrorScreen, HelpScreen, PreflightScreen

WIDE_COLUMNS = 140
_SVG_BAD_XML = dict.fromkeys(i for i in range(32) if i not in (9, 10, 13))


def _release_removed_widget_caches() -> None:
    """Textual 8.2 memoises ``StylesCache.get_inner_outer`` with ``functools.lru_cache``
    on the method, so up to 1,024 StylesCache objects of *removed* widgets (each holding
    its rendered lines) stay alive. After a new chat removes the transcript's widgets,
    clearing that cache lets them go (found by the soak in bench/soak.py)."""
    try:
        from textual._styles_cache import StylesCache

        StylesCache.get_inner_outer.cache_clear()
    except (ImportError, AttributeError):
        pass


class KvtopApp(App[int]):
    CSS_PATH = "app.tcss"
    TITLE = "kvtop"
    BINDINGS = [
        Binding("escape", "cancel_turn", "Cancel", priority=True),
        Binding("ctrl+s", "screenshot", "Screenshot", priority=True),
        Binding("ctrl+e", "export", "Export", priority=True),
        Binding("ctrl+l", "new_chat", "New chat", priority=True),
        Binding("ctrl+t", "change_theme", "Theme", priority=True),
        Binding("f1", "help", "Help"),
        Binding("f2", "waterfall", "TTFT waterfall"),
        Binding("f3", "toggle_markdown", "Markdown"),
        Binding("ctrl+o", "attach_file", "Attach file", show=False, priority=True),
        Binding("ctrl+q", "quit", "Quit", priority=True),
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True),
    ]

    # seconds between full transcript redraws while decoding (the tail streams): each one
    # re-wraps the reply and re-lays out the screen, measured 30 ms of CPU at 1,000 tokens
    CHAT_INTERVAL = 10.0

    def __init__(
        self,
        settings: Settings,
        engine_factory: Callable[[Settings], object],
        paths: Paths,
        *,
        hardware: HardwareProfile | None = None,
        live_system: bool = True,
        memory_sample: MemorySample | None = None,
        clock: Callable[[], float] = time.monotonic,
        argv: list[str] | None = None,
        resume_messages: list[dict] | None = None,
        write_transcript: bool = True,
        ui_nice: int = 0,
        prompt_file: str | None = None,
        trace_path: str | None = None,
        record_trace: bool = True,
        facts=None,
        replay_messages: list[str] | None = None,
        refresh: float | None = None,
    ) -> None:
        super().__init__()
        self.settings = settings.resolved()
        self.refresh_s, self.refresh_why = refresh_interval(refresh, self.settings.n_threads, usable_cores())
        self.engine = engine_factory(self.settings)
        self.paths = paths
        self.fixed_hardware = hardware
        self.live_system = live_system
        self.fixed_memory = memory_sample
        self.clock = clock
        self.argv = list(sys.argv if argv is None else argv)
        self.prefs: Preferences = load_preferences(paths.config_file)
        self.messages: list[dict] = list(resume_messages or [])
        self.write_transcript = write_transcript
        self.ui_nice = ui_nice
        self.transcript = None
        self.facts = None
        self.layout_kv = None
        self.hw: HardwareProfile | None = None
        self.loaded = None
        self.load_error: str | None = None
        self.turn_running = False
        self.turns: list[dict] = []
        self.current_reply: ChatMessage | None = None
        self.current_user = ""
        self._engine_ready = threading.Event()
        self._preflight_go = threading.Event()
        self._preflight_answer = True
        self.last_saved: str | None = None
        self._stopping = False
        self._turn_started = None
        self._prompt_cache_restored = 0
        self.prompt_file = prompt_file
        self.trace_path = trace_path
        self.record_trace = record_trace
        self.trace = None
        self.fixed_facts = facts
        self.replay_messages = list(replay_messages or [])
        self._last_chat_update = -1e9
        self._turn_streaming = False  # between TurnBegan and TurnFinished
        self.collector = TurnCollector()

    # ------------------------------------------------------------------ setup
    def get_theme_variable_defaults(self) -> dict[str, str]:
        return dict(APP_VARIABLE_DEFAULTS)

    def compose(self) -> ComposeResult:
        name = clean_line(os.path.basename(self.settings.model))
        yield StatusBar(name, id="status")
        with Horizontal(id="body"):
            with Vertical(id="chat-column"):
                yield ChatLog(id="chat")
                yield StreamTail(id="stream-tail")
                # A steady cursor: blinking redraws the screen twice a second, for ever,
                # and on a small machine every redraw is taken from llama.cpp's threads.
                prompt = Input(placeholder="Message (Enter to send, F1 for help)", id="prompt")
                prompt.cursor_blink = False
                yield prompt
            with VerticalScroll(id="metrics"):
                yield PrefillPane(id="prefill", classes="pane")
                yield KVPane(id="kv", classes="pane")
                yield DecodePane(chart_interval(self.refresh_s), id="decode", classes="pane")
                yield EstimatePane(id="estimate", classes="pane")
                yield MemoryPane(id="memory", classes="pane")
        yield Footer()

    def on_mount(self) -> None:
        register_all(self)
        names = {t.name for t in THEMES} | set(self.available_themes)
        self.theme = self.prefs.theme if self.prefs.theme in names else DEFAULT_THEME
        self.theme_changed_signal.subscribe(self, self._remember_theme)
        self._apply_width(self.size.width)
        chat = self.query_one(ChatLog)
        chat.markdown = self.prefs.markdown
        for m in self.messages:
            chat.add(m["role"], m["content"])
        if self.messages:
            chat.add("system", f"resumed {len(self.messages) // 2} turns from the last session")
        if self.fixed_memory is not None:
            self.query_one(MemoryPane).set_sample(self.fixed_memory)
        if self.live_system:
            self._sample_memory()
            self.set_interval(1.0, self._sample_memory)
        self.query_one("#prompt", Input).focus()
        self._load_engine()
        if self.prompt_file:
            text = self._read_prompt_file(self.prompt_file)
            if text:
                self._send(self.query_one("#prompt", Input), text)

    def _remember_theme(self, theme) -> None:
        self.prefs.theme = theme.name
        self._save_preferences()
        self.query_one(ChatLog).restyle()

    def _save_preferences(self) -> None:
        try:
            save_preferences(self.paths.config_file, self.prefs)
        except OSError as exc:
            self.notify(f"could not save preferences: {clean_line(str(exc))}", severity="warning", markup=False)

    def on_resize(self, event) -> None:
        self._apply_width(event.size.width)

    def _apply_width(self, width: int) -> None:
        self.set_class(width >= WIDE_COLUMNS, "-wide")

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand("Cancel turn", "Stop the running prefill or decode (Esc)", self.action_cancel_turn)
        yield SystemCommand("Screenshot", "Save an SVG screenshot (Ctrl+S)", self.action_screenshot)
        yield SystemCommand("Export debug bundle", "Write settings, hardware, timings (Ctrl+E)", self.action_export)
        yield SystemCommand("New chat", "Clear the chat and the KV cache (Ctrl+L)", self.action_new_chat)
        yield SystemCommand("Markdown on/off", "Render model replies as Markdown; links shown, never opened (F3)",
                            self.action_toggle_markdown)
        yield SystemCommand("kvtop help", "Keys and panes (F1)", self.action_help)

    # ---------------------------------------------------------------- workers
    @work(thread=True, exclusive=True, group="load", exit_on_error=False)
    def _load_engine(self) -> None:
        from runner.system.hardware import hardware_profile
        from runner.physics.report import ModelFileError, load_facts, memory_check

        bridge = self._bridge()
        try:
            s = self.settings
            try:
                facts = self.fixed_facts or load_facts(s.model)
            except ModelFileError as exc:
                raise EngineUnavailable(str(exc)) from None
            hw = self.fixed_hardware or hardware_profile(s.n_gpu_layers, cache_dir=self.paths.cache_dir)
            self._open_trace(facts, hw)
            layout = kv_layout(facts, s.n_ctx, s.cache_type_k, s.cache_type_v, s.swa_full, s.n_ubatch)
            pre = memory_check(facts, layout, hw, s.n_gpu_layers)
            self.post_message(msg.ModelInspected(facts, hw, layout, pre))
            if pre.fits is False:
                self._preflight_go.wait()
                if not self._preflight_answer:
                    raise EngineUnavailable("loading stopped by the user after the memory warning")
            self.engine.start(self._recorded(bridge))
        except EngineUnavailable as exc:
            self.load_error = str(exc)
            self.post_message(msg.EngineFailed(str(exc)))
        except Exception as exc:  # never let a worker error kill the UI
            self.load_error = clean_line(f"{type(exc).__name__}: {exc}")
            self.post_message(msg.EngineFailed(self.load_error))
        finally:
            self._engine_ready.set()

    @work(thread=True, exclusive=True, group="turn", exit_on_error=False)
    def _run_turn(self, messages: list[dict], t_submit: float) -> None:
        self._engine_ready.wait()
        if self.load_error is not None:
            self.post_message(msg.EngineFailed(self.load_error))
            return
        bridge = self._bridge()
        try:
            self.engine.chat(messages, self._recorded(bridge), t_submit=t_submit)
        except EngineUnavailable as exc:
            self.post_message(msg.EngineFailed(str(exc), died=True))
        except Exception as exc:
            self.post_message(msg.EngineFailed(clean_line(f"{type(exc).__name__}: {exc}"), died=True))

    @work(thread=True, exclusive=True, group="turn", exit_on_error=False)
    def _reset_engine(self) -> None:
        self._engine_ready.wait()
        if self.load_error is not None:
            return
        try:
            self.engine.reset(self._bridge())
        except EngineUnavailable as exc:
            self.post_message(msg.EngineFailed(str(exc), died=True))

    def _bridge(self) -> TurnBridge:
        return TurnBridge(self.post_message, interval=self.refresh_s, clock=self.clock,
                          prefill_interval=prefill_interval(self.refresh_s))

    def _recorded(self, bridge):
        """Every engine event goes to the trace (if any), then to the UI bridge."""
        trace = self.trace
        if trace is None:
            return bridge

        def on_event(e) -> None:
            trace.event(e)
            bridge(e)

        return on_event

    def _open_trace(self, facts, hw) -> None:
        if not self.record_trace or self.trace is not None:
            return
        from dataclasses import asdict

        from runner.records.trace import TraceWriter

        header = {"argv": self.argv, "settings": self.settings.to_dict(),
                  "hardware": hw.to_dict() if hw else None, "facts": asdict(facts) if facts else None}
        try:
            if self.trace_path:
                self.trace = TraceWriter(self.trace_path, header)
            else:
                path, fh = unique_file(self.paths.sessions_dir, time.strftime("trace-%Y%m%d-%H%M%S"), "jsonl")
                self.trace = TraceWriter(path, header, fh)
        except OSError as exc:
            self.post_message(msg.Notice(f"no trace: {clean_line(str(exc))}"))

    def on_prompt_cache_note(self, m: msg.PromptCacheNote) -> None:
        e = m.event
        self._prompt_cache_restored = e.tokens if e.action == "restored" else 0
        mib = e.bytes / 2**20
        self.query_one(PrefillPane).set_cache_note(
            f"prompt cache {e.action}: {e.tokens:,} tokens, {mib:.2f} MiB in {e.seconds * 1000:.0f} ms")

    def on_notice(self, m: msg.Notice) -> None:
        self.notify(m.text, severity="warning", markup=False)

    # --------------------------------------------------------------- handlers
    @on(Input.Submitted, "#prompt")
    def _submit(self, event: Input.Submitted) -> None:
        text = clean_text(event.value).strip()
        if not text:
            return
        if text.startswith("/file "):
            loaded = self._read_prompt_file(text[6:].strip())
            if loaded is None:
                return
            text = loaded
        self._send(event.input, text)

    MAX_PROMPT_FILE = 4 * 1024 * 1024

    def _read_prompt_file(self, path: str) -> str | None:
        """A file's text as the message (``/file PATH`` or ``--prompt-file``), bounded in size."""
        try:
            with open(os.path.expanduser(path), "rb") as fh:
                data = fh.read(self.MAX_PROMPT_FILE + 1)
        except OSError as exc:
            reason = f"cannot read {clean_line(path)}: {clean_line(exc.strerror or str(exc))}"
            self.notify(reason, severity="error", markup=False)
            return None
        if len(data) > self.MAX_PROMPT_FILE:
            self.notify(f"{clean_line(path)} is over 4 MiB", severity="error", markup=False)
            return None
        return clean_text(data.decode("utf-8", errors="replace")).strip() or None

    def _send(self, input_widget: Input, text: str) -> None:
        if self.turn_running:
            self.notify("A turn is running: Esc cancels it.", severity="warning", markup=False)
            return
        if self.load_error is not None:
            self.notify("No engine: " + self.load_error, severity="error", markup=False)
            return
        input_widget.value = ""
        if self.trace is not None:
            self.trace.user(text)
        self.turn_running = True
        self.current_user = text
        self.messages.append({"role": "user", "content": text})
        chat = self.query_one(ChatLog)
        chat.add("user", text)
        self.current_reply = chat.add("assistant", "", streaming=True)
        if not self._engine_ready.is_set():
            self.current_reply.set_footer("waiting for the model to load…")
        self._run_turn(list(self.messages), self.clock())

    def on_model_inspected(self, m: msg.ModelInspected) -> None:
        self.facts, self.hw, self.layout_kv = m.facts, m.hardware, m.layout
        self.query_one(KVPane).set_layout(self.layout_kv, self.layout_kv.n_ctx, None)
        self.query_one(DecodePane).set_ceilings(self._ceilings)
        self._update_estimate()
        if m.preflight.fits is False:
            self.push_screen(PreflightScreen(m.preflight.message), self._preflight_done)

    def _preflight_done(self, go: bool | None) -> None:
        self._preflight_answer = bool(go)
        if not go:
            self._stopping = True
            self.exit(return_code=1)
        self._preflight_go.set()

    def on_engine_load_progress(self, m: msg.EngineLoadProgress) -> None:
        self.query_one(StatusBar).set_loading(m.fraction)

    def on_engine_loaded(self, m: msg.EngineLoaded) -> None:
        self.loaded = L = m.loaded
        if self.ui_nice and L.pid != os.getpid():
            # Yield the CPU to the engine: llama.cpp's threads wait on each other at every
            # barrier, so a redraw that preempts one of them stalls them all. The child
            # started first and keeps its priority; only the UI process lowers its own.
            try:
                os.nice(self.ui_nice)
            except OSError:
                pass
        self.query_one(StatusBar).set_loaded(L, self.settings.threads_why, self.refresh_s)
        self.query_one(MemoryPane).set_buffers(L.buffers)
        if self.facts is not None:
            s = self.settings
            self.layout_kv = kv_layout(self.facts, L.n_ctx, s.cache_type_k, s.cache_type_v, s.swa_full, L.n_ubatch)
        if self.layout_kv is not None:
            self.query_one(KVPane).set_layout(self.layout_kv, L.n_ctx, L.buffers.kv_mib * 1024 * 1024)
            self.query_one(DecodePane).set_ceilings(self._ceilings)  # at the loaded n_ctx
        if self.current_reply is not None and self.turn_running:
            self.current_reply.set_footer("")
        self._next_replay_message()
        if self.write_transcript and self.transcript is None:
            from runner.records.transcript import Transcript

            try:
                self.transcript = Transcript(self.paths.sessions_dir, {
                    "model": L.path, "settings": self.settings.to_dict(), "argv": self.argv})
            except OSError as exc:
                self.notify(f"no transcript: {clean_line(str(exc))}", severity="warning", markup=False)
        self._update_estimate()

    def on_engine_failed(self, m: msg.EngineFailed) -> None:
        if self._stopping:
            return
        reason = clean_line(m.reason, 600)
        self.query_one(StatusBar).set_problem("engine died" if m.died else "model not loaded")
        if self.turn_running:
            self._turn_over()
            if self.current_reply is not None:
                self.current_reply.set_footer("turn lost: " + reason)
        if m.died:
            self.load_error = reason
        self.query_one(ChatLog).add("system", reason)
        self.push_screen(ErrorScreen("The engine died" if m.died else "Could not load the model", reason))

    def on_turn_began(self, m: msg.TurnBegan) -> None:
        self._turn_streaming = True
        self.collector.turn_started()
        self._turn_started = m.started
        self._last_chat_update = self.clock()  # the stream tail shows the reply first
        self.query_one(DecodePane).begin(self._last_chat_update)
        self.query_one(PrefillPane).begin(m.started)
        self.query_one(KVPane).set_cells(m.started.reused_tokens)

    def _turn_over(self) -> None:
        """A turn ended, finished or lost: what waited for it runs now."""
        self.turn_running = False
        self._turn_streaming = False
        self.collector.turn_ended()
        self.query_one(MemoryPane).redraw_if_stale()

    def on_prefill_update(self, m: msg.PrefillUpdate) -> None:
        self.query_one(MemoryPane).redraw_if_stale()
        self.query_one(PrefillPane).progress(m.progress)
        self.query_one(KVPane).set_cells(m.progress.done)

    def on_decode_update(self, m: msg.DecodeUpdate) -> None:
        now = self.clock()
        # Re-wrapping the growing reply in the transcript is the costliest redraw, so the
        # fixed-height tail streams it and the transcript catches up every CHAT_INTERVAL.
        self.query_one(StreamTail).show(m.text)  # cleaned by the bridge
        if self.current_reply is not None and now - self._last_chat_update >= self.CHAT_INTERVAL:
            self._last_chat_update = now
            self.current_reply.set_text(m.text)
        self.query_one(DecodePane).update_live(m, now)
        self.query_one(MemoryPane).redraw_if_stale()
        self.query_one(KVPane).set_cells(m.pos + 1, m.tok_s)

    def on_turn_finished(self, m: msg.TurnFinished) -> None:
        r = m.result
        self._turn_over()
        if not hasattr(r, "metrics"):  # refused before prefill
            self.messages.pop()
            if self.current_reply is not None:
                self.current_reply.set_text("")
                self.current_reply.set_footer("refused: " + r.reason)
            self.query_one(PrefillPane).refused(r.reason)
            return
        mt = r.metrics
        text = clean_text(r.text)
        self.query_one(StreamTail).show("")
        self._last_chat_update = -1e9
        if self.current_reply is not None:
            self.current_reply.finish(text, turn_footer(r))
        self.messages.append({"role": "assistant", "content": text})
        self.query_one(PrefillPane).finish(mt, r.stop_reason)
        self.query_one(DecodePane).finish(mt, m.series)
        self.query_one(KVPane).set_cells(mt.kv_cells_used, mt.decode_tok_s)
        started = self._turn_started
        self.turns.append({"user": self.current_user, "stop_reason": r.stop_reason, "metrics": mt.to_dict(),
                           "first_diff_index": started.first_diff_index if started else None,
                           "diff_context": started.diff_context if started else None})
        self._update_estimate(mt)
        if self._prompt_cache_restored and mt.prefill_tok_s:
            saved = min(self._prompt_cache_restored, mt.reused_tokens) / mt.prefill_tok_s
            self.query_one(PrefillPane).set_cache_note(
                f"{self.query_one(PrefillPane).cache_note}; saved ≈ {saved:.2f} s of prefill")
            self._prompt_cache_restored = 0
        self.call_later(self._next_replay_message)
        if r.stop_reason == "context_full":
            self.notify("Context full: Ctrl+L starts a new chat.", severity="warning", markup=False)
        if self.transcript is not None:
            try:
                self.transcript.turn(self.current_user, text, r.stop_reason, mt)
            except OSError as exc:
                self.notify(f"transcript write failed: {clean_line(str(exc))}", severity="error", markup=False)

    def _next_replay_message(self) -> None:
        if self.replay_messages and not self.turn_running:
            self._send(self.query_one("#prompt", Input), self.replay_messages.pop(0))

    def on_cache_reset(self, m: msg.CacheReset) -> None:
        self.query_one(KVPane).set_cells(0)

    # ------------------------------------------------------------- estimates
    def _ceilings(self, depth: int) -> tuple[float | None, float | None]:
        if self.facts is None or self.layout_kv is None or self.hw is None:
            return None, None
        return decode_ceilings_at(self.facts, self.layout_kv, self.hw.bandwidth_gbs, self.hw.tflops, depth)

    def _update_estimate(self, mt=None) -> None:
        if self.facts is None or self.layout_kv is None or self.hw is None:
            return
        f, lay, hw = self.facts, self.layout_kv, self.hw
        rows: dict = {}
        mib = 1024 * 1024
        buffers = self.loaded.buffers if self.loaded else None
        rows["kv"] = (lay.bytes_allocated, buffers.kv_mib * mib if buffers else None)
        rows["weights"] = (f.weights_bytes, buffers.weights_mib * mib if buffers else None)
        peak_pred = None
        if f.weights_bytes is not None:
            peak_pred = f.weights_bytes + lay.bytes_allocated + (buffers.compute_total_mib * mib if buffers else 0)
        # Measured peak only once a turn ran: at load, llama.cpp's mmap-ed weights are not
        # paged in yet and the engine's RSS is a fraction of what a turn needs.
        ran = mt is not None or bool(self.turns)
        rows["peak"] = (peak_pred, self.query_one(MemoryPane).peak_engine_rss if ran else None)
        ctx = {
            "gpu_present": bool(hw.gpus), "n_gpu_layers": self.settings.n_gpu_layers,
            "n_ubatch": self.settings.n_ubatch, "on_cpu": not (hw.gpus and self.settings.n_gpu_layers),
            "kv_quantised": self.settings.cache_type_k not in ("f16", "f32", "bf16")
            or self.settings.cache_type_v not in ("f16", "f32", "bf16"),
            "kv_types": f"{self.settings.cache_type_k}/{self.settings.cache_type_v}",
            "weights_bytes": f.weights_bytes,
        }
        note = f"hardware: {hw.source}"
        if mt is not None:
            p = predict(f, lay, hw.bandwidth_gbs, hw.tflops, prompt_tokens=max(mt.prefill_tokens, 1),
                        output_tokens=mt.decode_tokens, reused_tokens=mt.reused_tokens)
            ttft_pred = (p.prefill_s or 0) + mt.template_s + mt.tokenize_s if p.prefill_s is not None else None
            rows["ttft"] = (ttft_pred, mt.ttft_s)
            rows["prefill"] = (p.prefill_tok_s, mt.prefill_tok_s)
            dec_pred = min(x for x in (p.decode_ceiling_tok_s, p.compute_ceiling_tok_s) if x is not None) \
                if (p.decode_ceiling_tok_s or p.compute_ceiling_tok_s) else None
            rows["decode"] = (dec_pred, mt.decode_tok_s)
            ctx["prompt_tokens"] = mt.prefill_tokens
        self.query_one(EstimatePane).set_rows(rows, ctx, note)

    # ---------------------------------------------------------------- system
    def _sample_memory(self) -> None:
        """Once a second. While a turn runs the sample waits for the turn's next update,
        so the pane redraws in the same frame as the figures instead of in one more."""
        pid = self.engine.pid if self.engine is not None else None
        same = pid == os.getpid()
        pane = self.query_one(MemoryPane)
        wait = self._turn_streaming and time.monotonic() - pane.drawn_at < 2.0
        pane.set_sample(take_sample(pid, os.getpid(), same_process=same), redraw=not wait)
        if self.loaded is not None and not self.engine.alive() and self.load_error is None:
            self.load_error = "the engine process is gone"
            died = getattr(self.engine, "died", None)
            self.post_message(msg.EngineFailed(died.reason if died else "the engine process exited", died=True))

    # --------------------------------------------------------------- actions
    def action_cancel_turn(self) -> None:
        if len(self.screen_stack) > 1:  # Esc closes a dialog first
            self.screen.dismiss()
            return
        if self.turn_running:
            self.engine.cancel()
            self.notify("Cancelling…", markup=False, timeout=2)

    def action_new_chat(self) -> None:
        if self.turn_running:
            self.engine.cancel()
        self.messages.clear()
        self.query_one(ChatLog).remove_children()
        self.call_after_refresh(_release_removed_widget_caches)
        self.current_reply = None
        if self.transcript is not None:
            self.transcript.event("new_chat")
        if self.trace is not None:
            self.trace.new_chat()
        self._reset_engine()

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.refresh_s, self.refresh_why))

    def action_attach_file(self) -> None:
        """Start a ``/file PATH`` message: the file's text is sent when Enter is pressed."""
        inp = self.query_one("#prompt", Input)
        inp.value = "/file "
        inp.cursor_position = len(inp.value)
        inp.focus()

    def action_toggle_markdown(self) -> None:
        self.prefs.markdown = not self.prefs.markdown
        self.query_one(ChatLog).set_markdown(self.prefs.markdown)
        self._save_preferences()
        self.notify("Markdown on: links are shown as text (url) and never opened" if self.prefs.markdown
                    else "Markdown off: replies are plain text", markup=False, timeout=3)

    def action_waterfall(self) -> None:
        from .waterfall import WaterfallScreen

        self.push_screen(WaterfallScreen(self.turns[-1] if self.turns else None, self.facts,
                                         self.hw.tflops if self.hw else None))

    def action_screenshot(self) -> None:
        svg = self.export_screenshot(title="kvtop").translate(_SVG_BAD_XML)
        try:
            path, fh = unique_file(self.paths.screenshots_dir, time.strftime("kvtop-%Y%m%d-%H%M%S"), "svg")
            with fh:
                fh.write(svg)
        except OSError as exc:
            self.notify(f"screenshot failed: {clean_line(str(exc))}", severity="error", markup=False)
            return
        self.last_saved = path
        self.notify(f"saved {path}", markup=False, timeout=6)

    def debug_bundle(self) -> dict:
        from dataclasses import asdict

        from runner.physics.report import estimate_report

        est = None
        if self.facts is not None and self.hw is not None:
            s = self.settings
            est = estimate_report(self.facts, self.hw, s.n_ctx, s.cache_type_k, s.cache_type_v,
                                  s.swa_full, s.n_ubatch, n_gpu_layers=s.n_gpu_layers)
        facts = None
        if self.facts is not None:
            facts = {k: v for k, v in asdict(self.facts).items() if k != "chat_template"}
        return {
            "kvtop_bundle_version": 1,
            "command_line": self.argv,
            "settings": self.settings.to_dict(),
            "ui": {"refresh_s": self.refresh_s, "refresh_why": self.refresh_why},
            "loaded": asdict(self.loaded) if self.loaded else None,
            "hardware": self.hw.to_dict() if self.hw else None,
            "gguf": facts,
            "turns": self.turns,
            "estimate": est,
            "load_error": self.load_error,
            "transcript": self.transcript.path if self.transcript else None,
            "trace_file": self.trace.path if self.trace else None,
            "trace": self._trace_lines(),
            "screenshot_svg": self.export_screenshot(title="kvtop").translate(_SVG_BAD_XML),
        }

    def _trace_lines(self, limit: int = 32 * 1024 * 1024) -> list | None:
        if self.trace is None:
            return None
        self.trace.flush()
        try:
            with open(self.trace.path, encoding="utf-8") as fh:
                data = fh.read(limit)
        except OSError:
            return None
        return [json.loads(line) for line in data.splitlines() if line.strip()][: 10**6]

    def action_export(self) -> None:
        """The debug bundle (JSON) and the per-turn timings as CSV beside it."""
        from .export import write_turns_csv

        stem = time.strftime("kvtop-debug-%Y%m%d-%H%M%S")
        try:
            path, fh = unique_file(self.paths.exports_dir, stem, "json")
            with fh:
                json.dump(self.debug_bundle(), fh, indent=2, default=str)
            csv_path, cfh = unique_file(self.paths.exports_dir, stem + "-turns", "csv")
            with cfh:
                write_turns_csv(cfh, self.turns)
        except OSError as exc:
            self.notify(f"export failed: {clean_line(str(exc))}", severity="error", markup=False)
            return
        self.last_saved = path
        self.last_csv = csv_path
        self.notify(f"debug bundle {path}", markup=False, timeout=6)

    async def action_quit(self) -> None:
        self.shutdown_engine()
        self.exit(0)

    def shutdown_engine(self) -> None:
        self._stopping = True
        self._preflight_answer = False
        self._preflight_go.set()  # a load worker waiting on the memory warning ends
        if self.engine is not None:
            try:
                self.engine.close()
            except Exception:
                pass
        if self.transcript is not None:
            self.transcript.close()
            self.transcript = None
        if self.trace is not None:
            self.trace.close()

    def on_unmount(self) -> None:
        self.collector.turn_ended()  # never leave the collector paused behind us
        self.shutdown_engine()
