"""A test engine behind the engine contract that plays a fixed script of events.

Used for deterministic UI tests (SVG snapshots with a fixed clock) and for showing
a recorded run without a model. Events carry their own timestamps, so what the
panes compute from them (rates, TTFT) is the same on every run.
"""

from __future__ import annotations

import dataclasses
import queue
import sys
import threading
import time
from collections.abc import Callable

from kvtop.runner import events as ev
from kvtop.runner.llama_buffers import KVBufferLine, LlamaBuffers
from kvtop.runner.process.contract import LOCAL
from kvtop.runner.settings import Settings


def smollm_loaded(path: str, n_ctx: int = 4096) -> ev.Loaded:
    """A ``Loaded`` event as SmolLM2-135M-Instruct Q4_1 reports it on a 2-core CPU."""
    kv_mib = 45.0 * n_ctx / 2048  # 22.5 KiB per cell
    return ev.Loaded(
        path=path, name="SmolLM2 135M Instruct", description="llama 256M Q4_1", architecture="llama",
        file_type="Q4_1", n_params=134515008, model_bytes=96576768, n_ctx=n_ctx, n_ctx_train=8192,
        n_threads=2, n_threads_batch=2, n_batch=512, n_ubatch=512, n_gpu_layers=0, flash_attn="auto",
        type_k="f16", type_v="f16", swa_full=False,
        buffers=LlamaBuffers({"CPU": 92.10}, (KVBufferLine("full", kv_mib, n_ctx, 30, "f16", kv_mib / 2, "f16", kv_mib / 2),),
                             0.0, {"CPU": 98.44}, {"CPU": 0.19}),
        has_chat_template=True, load_s=0.2, pid=0,
    )


def scripted_turn(turn_id: int, t0: float, prompt_tokens: int, reused: int, pieces: list[str],
                  pp_tok_s: float = 400.0, tg_tok_s: float = 150.0, ubatch: int = 512,
                  stop_reason: str = "eog", timeline: bool = False) -> list[object]:
    """The events of one turn with regular timings, starting at ``t0``; ``timeline``: its
    metrics carry a TTFT waterfall as the real engine's do (template, one segment per
    micro-batch, the first decode)."""
    out: list[object] = [ev.TurnStarted(turn_id, prompt_tokens, reused, 4096, "gguf", None, 0.002, 0.0005, None, t0)]
    t = t0 + 0.003
    done = reused
    todo = prompt_tokens - reused
    ubatches = []
    start = t
    while done < prompt_tokens:
        n = min(ubatch, prompt_tokens - done)
        dt = n / pp_tok_s
        t += dt
        done += n
        ubatches.append((n, dt))
        out.append(ev.PrefillProgress(turn_id, done, prompt_tokens, reused, t - start, (done - reused) / (t - start), n, dt, t))
    prefill_s = t - start
    pos = prompt_tokens
    times = []
    for i, piece in enumerate(pieces):
        t += 1 / tg_tok_s
        times.append(t)
        out.append(ev.TokenEvent(turn_id, i, 100 + i, piece, pos, t))
        pos += 1
    dec_s = times[-1] - times[0] if len(times) > 1 else 0.0
    m = ev.TurnMetrics(
        prompt_tokens=prompt_tokens, reused_tokens=reused, prefill_tokens=todo, prefill_s=prefill_s,
        prefill_tok_s=todo / prefill_s if prefill_s else None, template_s=0.002, tokenize_s=0.0005, wait_s=0.0,
        ttft_s=(times[0] - t0) if times else None, decode_tokens=len(pieces), decode_s=dec_s,
        decode_tok_s=(len(times) - 1) / dec_s if dec_s else None, itl_p50_ms=1000 / tg_tok_s,
        itl_p95_ms=1000 / tg_tok_s, kv_cells_used=pos - 1 if stop_reason == "eog" else pos, n_ctx=4096,
        first_token_s=1 / tg_tok_s, ubatches=tuple(ubatches),
        timeline=_timeline(ubatches, 1 / tg_tok_s) if timeline else (),
    )
    out.append(ev.TurnDone(turn_id, stop_reason, "".join(pieces), m, t))
    return out


def _timeline(ubatches: list[tuple[int, float]], first_s: float) -> tuple[tuple[str, float, float], ...]:
    """A waterfall as the engine records it: (segment, start, seconds) from the turn's start."""
    out = [("wait for engine", 0.0, 0.004), ("template", 0.004, 0.003), ("tokenize", 0.007, 0.001)]
    t = 0.008
    for i, (_n, dt) in enumerate(ubatches):
        out.append((f"ubatch {i + 1}", t, dt))
        t += dt
    out.append(("first decode+sample", t, first_s))
    return tuple(out)


class ScriptedEngine:
    """Loads ``loaded`` and plays the next script on each ``Chat``; ``Reset`` clears.

    ``speed`` 0 plays a script at once; 1 keeps its recorded spacing (capped by
    ``max_gap``), so keys can land in the middle of a turn. Cancel ends the running
    script with its ``TurnDone`` marked cancelled, as the real engine does."""

    kind = "scripted"
    capabilities = LOCAL  # it plays what a model kvtop runs reports

    def __init__(self, settings: Settings, loaded: ev.Loaded, turns: list[list[object]], *,
                 speed: float = 0.0, max_gap: float = 1.0, load_s: float = 0.0, real_clock: bool = False,
                 load_gate: threading.Event | None = None,
                 hold: tuple[Callable[[object], bool], threading.Event] | list | None = None):
        self.settings = settings.resolved()
        self.loaded = loaded
        self.turn_scripts = list(turns)
        self.speed = speed
        self.max_gap = max_gap
        self.load_s = load_s
        self.load_gate = load_gate  # the load ends when the test sets it (not after a time a busy machine may pass)
        # (is_it, gate), or a list of them taken in turn: after the first event ``is_it`` picks, the
        # script waits for the test to set ``gate`` (a turn held where the test looks at it, not paced
        # slowly enough for a busy machine to catch it)
        self.holds = list(hold) if isinstance(hold, list) else [hold] if hold is not None else []
        self.real_clock = real_clock  # stamp events with time.monotonic() as they are played, as engines do
        self.chats: list[list[dict]] = []
        self.commands: list[object] = []
        self._work: queue.SimpleQueue = queue.SimpleQueue()
        self._cancel_upto = 0
        self._running = 0
        self._cancelled = threading.Event()
        self._closed = threading.Event()
        self._killed = threading.Event()  # kill(): the rest of the script is never sent, as a killed process
        self._reading = threading.Lock()
        self.died = None

    @property
    def pid(self):
        return None

    def alive(self) -> bool:
        return not self._closed.is_set()

    def start(self) -> None:
        self._work.put(("load",))

    def submit(self, command) -> None:
        self.commands.append(command)
        self._work.put(command)

    def cancel(self, upto: int) -> None:
        self._cancel_upto = max(self._cancel_upto, upto)
        if self._running and self._running <= self._cancel_upto:
            self._cancelled.set()

    def close(self, timeout: float = 0) -> None:
        self._closed.set()
        self.cancel(sys.maxsize)
        self._work.put(None)

    def kill(self) -> None:
        """Ends the running script at once and sends nothing more of it (not even its
        ``TurnDone``): what an engine process that is killed does."""
        self._killed.set()
        self._cancelled.set()

    def pump(self, sink) -> None:
        from kvtop.runner.process.commands import Chat, MeasurePrompt, Reset, Tokenize
        from kvtop.runner.process.contract import SecondReader

        if not self._reading.acquire(blocking=False):
            raise SecondReader("another thread is already reading this engine's events")
        try:
            while True:
                cmd = self._work.get()
                if cmd is None:
                    break
                if cmd == ("load",):
                    if self.load_s and self._closed.wait(self.load_s):
                        break
                    while self.load_gate is not None and not self.load_gate.wait(0.02):
                        if self._closed.is_set():
                            break
                    if self._closed.is_set():
                        break
                    sink(ev.LoadProgress(1.0))
                    sink(self.loaded)
                elif isinstance(cmd, Chat):
                    self._chat(cmd, sink)
                elif isinstance(cmd, Reset):
                    sink(ev.CacheCleared())
                elif isinstance(cmd, Tokenize):
                    sink(ev.Tokenized(cmd.request_id, tuple(range(len(cmd.text.split())))))
                elif isinstance(cmd, MeasurePrompt):
                    n, cached = self.measure(cmd.messages)
                    sink(ev.PromptMeasured(cmd.request_id, n, cached, self.loaded.n_ctx))
            sink(ev.EngineClosed())
        finally:
            self._reading.release()

    def measure(self, messages) -> tuple[int, int]:
        """A stand-in tokenizer: 4 tokens of template per message plus one per word; the
        chat's earlier messages count as cached (as the real engine's KV prefix would)."""
        sizes = [4 + len(m.content.split()) for m in messages]
        return sum(sizes), sum(sizes[:-1])

    def _chat(self, cmd, sink) -> None:
        self.chats.append([m.as_dict() for m in cmd.messages])
        if cmd.turn_id <= self._cancel_upto:
            sink(ev.TurnRefused(cmd.turn_id, "cancelled before it started", 0, self.loaded.n_ctx))
            return
        self._running = cmd.turn_id
        self._cancelled.clear()
        if cmd.turn_id <= self._cancel_upto:
            self._cancelled.set()
        script = self.turn_scripts.pop(0) if self.turn_scripts else []
        prev_t = None
        try:
            for e in script:
                e = _with_turn_id(e, cmd.turn_id)
                t = getattr(e, "t", None)
                if self._killed.is_set():
                    return
                if isinstance(e, ev.TurnDone) and self._cancelled.is_set():
                    sink(dataclasses.replace(e, stop_reason="cancelled"))
                    return
                if self.speed > 0 and t is not None and prev_t is not None and t > prev_t:
                    self._cancelled.wait(min(t - prev_t, self.max_gap) / self.speed)
                    if self._killed.is_set():
                        return
                if t is not None:
                    prev_t = t
                if self._cancelled.is_set() and isinstance(e, (ev.TokenEvent, ev.PrefillProgress)):
                    continue
                if self.real_clock and t is not None:
                    e = dataclasses.replace(e, t=time.monotonic())
                sink(e)
                if self.holds and self.holds[0][0](e):
                    gate = self.holds.pop(0)[1]
                    while not gate.wait(0.02) and not self._cancelled.is_set():
                        pass
        finally:
            self._running = 0


def _with_turn_id(e, turn_id: int):
    """Scripts are written with their own turn ids; the app numbers its turns."""
    if hasattr(e, "turn_id") and e.turn_id != turn_id:
        return dataclasses.replace(e, turn_id=turn_id)
    return e
