"""``ServerEngine``: a running llama-server behind the engine contract.

kvtop does not load a model here: ``start`` connects, and ``Loaded`` is built from what
the server publishes (``/props``, ``/v1/models``). A ``Chat`` streams
``/v1/chat/completions`` (the server applies its own chat template), a ``Generate``
streams ``/completion`` with token ids (``kvtop bench --server``); both ask for
``return_progress`` and ``timings_per_token`` so the panes show llama.cpp's own
figures. ``cancel`` closes the stream, which makes the server stop the task. The
thread that pumps runs the requests: it is still the one reader of this engine.
"""

from __future__ import annotations

import os
import queue
import sys
import time
from typing import TYPE_CHECKING

from kvtop.runner import events as ev
from kvtop.runner.llama_buffers import LlamaBuffers
from kvtop.runner.policy.system_prompt import with_system_prompt
from kvtop.runner.process.commands import Chat, Command, Generate, Load, MeasurePrompt, Quit, Reset, Tokenize
from kvtop.runner.process.contract import SERVER, QueuedCommands, ReaderGuard, Sink
from kvtop.runner.sanitize import clean_line
from kvtop.runner.server.http import ServerClient, ServerError
from kvtop.runner.server.openai_request import openai_prompt_tokens, openai_request
from kvtop.runner.server.props import ServerInfo, read_server_info
from kvtop.runner.server.stream import TurnTranslator
from kvtop.runner.server.urls import is_loopback
from kvtop.runner.server.vllm_depth import Salts, prefix_hits
from kvtop.runner.server.vllm_timing import prefill_counts, prefill_ms_since
from kvtop.runner.settings import Settings

if TYPE_CHECKING:
    from kvtop.runner.server.credentials import Credentials


class ServerEngine(QueuedCommands):
    kind = "server"
    capabilities = SERVER

    def __init__(self, settings: Settings, url: str, api_key: str | Credentials | None = None):
        self.settings = settings
        self.client = ServerClient(url, api_key)
        self.url = self.client.url
        self.info: ServerInfo | None = None
        self.loaded: ev.Loaded | None = None
        self.died = None
        self._work: queue.SimpleQueue[Command] = queue.SimpleQueue()
        self._guard = ReaderGuard()
        self._cancel_upto = 0
        self._running = 0
        self._closed = False
        self._salts = Salts()  # bench on vLLM: a depth and the prompt after it share one

    @property
    def pid(self) -> int | None:
        return self.info.pid if self.info else None

    def cancel(self, upto: int) -> None:
        self._cancel_upto = max(self._cancel_upto, upto)
        if self._running and self._running <= self._cancel_upto:
            self.client.close_stream()

    def close(self, timeout: float = 3.0) -> None:
        self._closed = True
        self.cancel(sys.maxsize)
        self._work.put(Quit())

    # ------------------------------------------------------------ the reader
    def pump(self, sink: Sink) -> None:
        with self._guard:
            try:
                while True:
                    cmd = self._work.get()
                    if isinstance(cmd, Quit):
                        break
                    if isinstance(cmd, Load):
                        if not self._load(sink):
                            sink(ev.EngineClosed("load failed"))
                            return
                    elif isinstance(cmd, (Chat, Generate)):
                        self._turn(cmd, sink)
                    elif isinstance(cmd, Reset):
                        sink(ev.CacheCleared())  # the server keeps its slot cache; the chat starts over
                    elif isinstance(cmd, Tokenize):
                        self._tokenize(cmd, sink)
                    elif isinstance(cmd, MeasurePrompt):
                        self._measure(cmd, sink)
            finally:
                self.client.close()
            sink(ev.EngineClosed())

    def _load(self, sink: Sink) -> bool:
        t0 = time.monotonic()
        try:
            self.info = read_server_info(self.client)
        except ServerError as exc:
            sink(ev.LoadFailed(str(exc)))
            return False
        self.capabilities = self.info.capabilities  # what this server publishes (before Loaded is read)
        self.loaded = loaded_event(self.info, self.url, time.monotonic() - t0)
        sink(ev.LoadProgress(1.0))
        sink(self.loaded)
        return True

    def _tokenize(self, cmd: Tokenize, sink: Sink) -> None:
        try:
            body: dict[str, object] = {"content": cmd.text, "add_special": cmd.add_special} \
                if self.capabilities.token_timings else {"prompt": cmd.text, "add_special_tokens": cmd.add_special}
            r = self.client.post_json("/tokenize", body)
            tokens = r.get("tokens") if isinstance(r, dict) else None
            if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
                raise ServerError("/tokenize answered without a list of token ids")
            sink(ev.Tokenized(cmd.request_id, tuple(tokens)))
        except ServerError as exc:
            sink(ev.EngineError(str(exc)))

    def _measure(self, cmd: MeasurePrompt, sink: Sink) -> None:
        """The server's own template (``/apply-template``) then ``/tokenize``: the count a
        chat request would prefill. Which of it the slot has cached only the server knows
        when the request arrives (another client may have used the slot): None."""
        try:
            msgs = with_system_prompt(self.settings.system_prompt, cmd.messages)
            if not self.capabilities.token_timings:  # an OpenAI-style server: /tokenize takes the messages
                n = openai_prompt_tokens(self.client, msgs)
                sink(ev.PromptMeasured(cmd.request_id, n, None, self.loaded.n_ctx if self.loaded else 0))
                return
            r = self.client.post_json("/apply-template", {"messages": msgs})
            prompt = r.get("prompt") if isinstance(r, dict) else None
            if not isinstance(prompt, str):
                raise ServerError("/apply-template answered without a prompt")
            t = self.client.post_json("/tokenize", {"content": prompt, "add_special": True})
            tokens = t.get("tokens") if isinstance(t, dict) else None
            if not isinstance(tokens, list):
                raise ServerError("/tokenize answered without a list of token ids")
            sink(ev.PromptMeasured(cmd.request_id, len(tokens), None, self.loaded.n_ctx if self.loaded else 0))
        except ServerError:
            pass  # a forecast is a nicety: the turn itself reports what is wrong

    def _request(self, cmd: Chat | Generate) -> tuple[str, dict[str, object]]:
        s = self.settings
        if not self.capabilities.token_timings:  # vLLM: the OpenAI fields it reads, usage in the last chunk
            return openai_request(s, cmd, self._salts.for_tokens(cmd.tokens) if isinstance(cmd, Generate) else None)
        common: dict[str, object] = {
                  "stream": True, "return_progress": True, "timings_per_token": True, "cache_prompt": True,
                  "temperature": s.temp, "top_k": s.top_k, "top_p": s.top_p, "min_p": s.min_p,
                  "repeat_penalty": s.repeat_penalty, "repeat_last_n": s.repeat_last_n,
                  "presence_penalty": s.presence_penalty, "frequency_penalty": s.frequency_penalty,
                  "typical_p": s.typical_p, "top_n_sigma": s.top_n_sigma, "xtc_probability": s.xtc_probability,
                  "xtc_threshold": s.xtc_threshold, "mirostat": s.mirostat, "mirostat_eta": s.mirostat_lr,
                  "mirostat_tau": s.mirostat_ent, "dry_multiplier": s.dry_multiplier, "dry_base": s.dry_base,
                  "dry_allowed_length": s.dry_allowed_length, "dry_penalty_last_n": s.dry_penalty_last_n,
                  "dry_sequence_breakers": list(s.dry_sequence_breakers)}
        if s.grammar:
            common["grammar"] = s.grammar
        if s.seed >= 0:
            common["seed"] = s.seed
        if isinstance(cmd, Chat):
            n = s.n_predict if cmd.n_predict is None else cmd.n_predict
            body = {**common, "messages": with_system_prompt(s.system_prompt, cmd.messages),
                    "max_tokens": n if n >= 0 else -1}
            if s.ignore_eos:
                body["ignore_eos"] = True
            return "/v1/chat/completions", body
        # kvtop bench: every repetition computes the whole prompt, as llama-bench does
        return "/completion", {**common, "prompt": list(cmd.tokens), "n_predict": cmd.n_predict,
                               "ignore_eos": cmd.ignore_eog, "cache_prompt": False}

    def _turn(self, cmd: Chat | Generate, sink: Sink) -> None:
        n_ctx = self.loaded.n_ctx if self.loaded else 0
        if cmd.turn_id <= self._cancel_upto:
            sink(ev.TurnRefused(cmd.turn_id, "cancelled before it started", 0, n_ctx))
            return
        path, body = self._request(cmd)
        tr = TurnTranslator(cmd.turn_id, cmd.t_submit, n_ctx, sink)
        timed = isinstance(cmd, Generate) and not self.capabilities.token_timings  # bench on vLLM: its prefill time
        before = prefill_counts(self.client) if timed else None
        hits = prefix_hits(self.client) if timed else None
        self._running = cmd.turn_id
        try:
            for chunk in self.client.stream_events(path, body):
                tr.feed(chunk, time.monotonic())
                if cmd.turn_id <= self._cancel_upto:
                    break
        except ServerError as exc:
            if cmd.turn_id > self._cancel_upto:
                refused = exc.status == 400 and "context" in str(exc).lower()
                if refused:
                    sink(ev.TurnRefused(cmd.turn_id, str(exc), 0, n_ctx))
                else:
                    sink(ev.EngineError(f"turn ended: {exc}; the chat is kept, and kvtop keeps polling the server"))
                return
        finally:
            self._running = 0
        cancelled = cmd.turn_id <= self._cancel_upto
        if timed and not cancelled:
            tr.server_prefill_ms = prefill_ms_since(self.client, before)
            after = prefix_hits(self.client) if hits is not None else None
            tr.server_cached = after - hits if after is not None and hits is not None and after >= hits else None
        sink(tr.done(time.monotonic(), "cancelled" if cancelled else None))


def loaded_event(info: ServerInfo, url: str, connect_s: float) -> ev.Loaded:
    """What the status bar and panes know of a served model, from the server's own answers."""
    return ev.Loaded(
        path=info.model_path or url, name=clean_line(os.path.basename(info.model_path or "") or info.model_id or url),
        description=info.build_info if info.engine != "llama-server" else f"llama-server {info.build_info}", architecture=info.architecture or "?",
        file_type="?", n_params=info.n_params or 0, model_bytes=info.model_bytes or 0, n_ctx=info.n_ctx,
        n_ctx_train=info.n_ctx_train or 0, n_threads=0, n_threads_batch=0, n_batch=0, n_ubatch=0,
        n_gpu_layers=0, flash_attn="?", type_k="?", type_v="?", swa_full=False,
        buffers=LlamaBuffers({}, (), 0.0, {}, {}), has_chat_template=bool(info.chat_template),
        load_s=connect_s, pid=info.pid or 0, server=url, build_info=info.build_info, total_slots=info.total_slots,
    )


__all__ = ["ServerEngine", "loaded_event", "is_loopback"]
