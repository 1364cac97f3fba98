"""The engine: load a GGUF, prefill in micro-batches with progress, decode with events.

It talks to llama.cpp through llama-cpp-python's low-level ctypes API rather than
``Llama``, because ``Llama.eval`` has no progress or abort hook and its sampling
copies the logits to numpy on every token. In layers, as llama-cpp-python goes
``llama_cpp.py`` -> ``_internals.py`` -> ``llama.py``:

* ``handles``: owned model, context, sampler chain and token buffer (``close()``);
* ``prompt_cache``: the cached token list, prefix match and trim, ``--prompt-cache``;
* ``prefill``: one ``llama_decode`` per ``n_ubatch`` tokens, a report after each,
  cancel through llama.cpp's abort callback (installed only during prefill);
* ``decode``: sampling in llama.cpp's sampler chain (no copies), an incremental
  UTF-8 decoder flushed on every stop path, a flag check per token for cancel;
* ``timeline``: the TTFT waterfall and ``TurnMetrics`` from the timestamps;
* this module: loading, and a turn as lookup -> prefill -> decode -> metrics.

The engine knows nothing of processes or UIs: it reports through ``emit(event)``.
``runner.process.parent`` runs it in a child process.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import replace

import llama_cpp

from kvtop.runner import events as ev
from kvtop.runner.engine.chat_template import RenderedPrompt, render_chat
from kvtop.runner.engine.decode import Decode, Sampling
from kvtop.runner.engine.draft_model import speculation
from kvtop.runner.engine.errors import EngineLoadError
from kvtop.runner.engine.handles import Context, Model, backend_init
from kvtop.runner.engine.kv_shift import cached_after_shift, shift_for, why_no_shift
from kvtop.runner.engine.llama_log import CAPTURE
from kvtop.runner.engine.load_params import apply_loras, context_params, model_params
from kvtop.runner.engine.prefill import Prefill
from kvtop.runner.engine.prompt_cache import KVCache, PromptCacheFile, common_prefix, diff_windows, first_difference
from kvtop.runner.engine.timeline import TOKENS, PromptInfo, TurnClock, turn_metrics
from kvtop.runner.llama_buffers import parse_buffers
from kvtop.runner.model.gguf_header import check_loadable, read_header
from kvtop.runner.policy.context_shift import Fitted, fit_turns, prompt_fits, reply_room, turn_ranges
from kvtop.runner.policy.system_prompt import with_system_prompt
from kvtop.runner.sanitize import clean_line
from kvtop.runner.settings import Settings
from kvtop.runner.units import fmt_int

Emit = Callable[[object], None]

__all__ = ["Engine", "EngineLoadError", "PromptInfo"]


def _check_header(path: str) -> None:
    """Our own bounded header read first: a clear reason for bad files (some abort llama.cpp)."""
    try:
        check_loadable(read_header(path))
    except FileNotFoundError:
        raise EngineLoadError(f"{clean_line(path)}: no such file") from None
    except (OSError, ValueError) as exc:
        raise EngineLoadError(f"{clean_line(path)}: {clean_line(str(exc))}") from None


class Engine:
    def __init__(self, settings: Settings, emit: Emit, cancel: threading.Event | None = None):
        self.settings = settings.resolved()
        self.emit = emit
        self.cancel_event = cancel or threading.Event()
        self._model: Model | None = None
        self._ctx: Context | None = None
        self.n_ctx = 0
        self._kv = KVCache()  # tokens whose KV is in the cache, in order
        self._prompt_file = PromptCacheFile(self.settings.prompt_cache)
        self._prefill = Prefill()
        self._decode: Decode | None = None
        self.loaded: ev.Loaded | None = None
        self._template: str | None = None
        self._architecture: str | None = None
        self._bos_text = self._eos_text = ""
        self._threads = (self.settings.n_threads, self.settings.n_threads_batch)  # the context's, as created
        self._no_shift: str | None = "not loaded"
        # ctypes callbacks stay referenced for the engine's life (a collected one crashes)
        self._progress_cb = llama_cpp.llama_progress_callback(self._on_load_progress)
        self._last_progress = -1.0

    @property
    def cached(self) -> list[int]:
        """The tokens whose KV is in the cache, in order."""
        return self._kv.tokens

    @cached.setter
    def cached(self, tokens: list[int]) -> None:
        self._kv.tokens = tokens

    # ---------------------------------------------------------------- loading
    def _on_load_progress(self, fraction: float, _data: object) -> bool:
        if fraction >= 1.0 or fraction - self._last_progress >= 0.05:
            self._last_progress = fraction
            self.emit(ev.LoadProgress(float(fraction)))
        return not self.cancel_event.is_set()

    def load(self) -> ev.Loaded:
        s = self.settings
        t0 = time.monotonic()
        path = os.path.abspath(s.model)
        _check_header(path)
        CAPTURE.install()
        backend_init(s.numa)
        mark = CAPTURE.mark()
        self._model = Model.load(path, model_params(s, self._progress_cb))
        if self._model is None:
            reason = CAPTURE.last_error() or "llama.cpp could not load the model"
            raise EngineLoadError(f"{clean_line(path)}: {clean_line(reason)}")
        n_ctx = s.n_ctx if s.n_ctx > 0 else self._model.n_ctx_train()
        self._ctx = Context.create(self._model, context_params(s, n_ctx))
        if self._ctx is None:
            reason = CAPTURE.last_error() or "llama.cpp could not create the context"
            self._model.close()
            self._model = None
            raise EngineLoadError(f"{clean_line(path)}: {clean_line(reason)}")
        if (why := apply_loras(self._model, self._ctx, s.lora)) is not None:  # --lora
            self.close()
            raise EngineLoadError(why)
        self._kv.mem = self._ctx.mem
        self._no_shift = why_no_shift(self._model.ptr, self._ctx.mem)  # None: a shift keeps the cache
        self.n_ctx = self._ctx.n_ctx()
        spec = speculation(s, self._model, self._ctx, model_params(s, self._progress_cb), context_params(s, n_ctx))
        self._decode = Decode(self._ctx.ptr, self._model.vocab, self._kv, self.n_ctx, spec)
        log = CAPTURE.since(mark)
        self.loaded = self._describe(path, log, t0)
        self.emit(self.loaded)
        return self.loaded

    def _parts(self) -> tuple[Model, Context, Decode]:
        if self._model is None or self._ctx is None or self._decode is None:
            raise RuntimeError("the engine is not loaded (or was closed)")
        return self._model, self._ctx, self._decode

    def _describe(self, path: str, log: str, t0: float) -> ev.Loaded:
        s, (model, ctx, _) = self.settings, self._parts()
        vocab = model.vocab
        buffers = parse_buffers(log)
        self._template = model.chat_template()
        self._architecture = model.meta("general.architecture")
        self._bos_text = vocab.token_text(vocab.bos())
        self._eos_text = vocab.token_text(vocab.eos())
        desc = model.description()
        name = model.meta("general.name") or os.path.basename(path)
        fa = "auto"
        for line in log.splitlines():
            if "flash_attn" in line and "=" in line:
                fa = line.split("=", 1)[1].strip()
        return ev.Loaded(
            path=path, name=clean_line(name),
            description=clean_line(desc),
            architecture=clean_line(self._architecture or "?"),
            file_type=clean_line(desc.split()[-1] if desc else "?"),
            n_params=model.n_params(),
            model_bytes=model.size(),
            n_ctx=self.n_ctx,
            n_ctx_train=model.n_ctx_train(),
            n_threads=s.n_threads, n_threads_batch=s.n_threads_batch,
            n_batch=ctx.n_batch(), n_ubatch=ctx.n_ubatch(),
            n_gpu_layers=s.n_gpu_layers, flash_attn=fa,
            type_k=s.cache_type_k, type_v=s.cache_type_v,
            swa_full=s.swa_full,
            buffers=buffers,
            has_chat_template=self._template is not None,
            load_s=time.monotonic() - t0,
            pid=os.getpid(),
            lora=", ".join(f"{clean_line(os.path.basename(p))} x{k:g}" for p, k in s.lora),
        )

    # ------------------------------------------------------------- tokenizing
    def piece(self, tok: int) -> bytes:
        """The bytes of one token (possibly part of a UTF-8 character)."""
        return self._parts()[0].vocab.piece(tok)

    def tokenize(self, text: str, add_special: bool = True) -> list[int]:
        return self._parts()[0].vocab.tokenize(text, add_special)

    def render(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> RenderedPrompt:
        msgs = with_system_prompt(self.settings.system_prompt, messages)
        return render_chat(self._template, msgs, self._bos_text, self._eos_text, add_generation_prompt,
                           override=self.settings.chat_template,
                           architecture=self._parts()[0].meta("general.architecture"), tokenize=self.tokenize)

    def _detok(self, toks: list[int]) -> str:
        return b"".join(self.piece(t) for t in toks).decode("utf-8", errors="replace")

    # -------------------------------------------------------------------- KV
    def reset(self) -> None:
        self._kv.clear()
        self.emit(ev.CacheCleared())

    def kv_cells_used(self) -> int:
        return self._kv.cells_used()

    # ------------------------------------------------------------------ turns
    def chat(self, messages: list[dict[str, str]], turn_id: int = 0, t_submit: float | None = None,
             n_predict: int | None = None, threads: tuple[int, int] | None = None) -> ev.TurnDone | ev.TurnRefused:
        t_submit = time.monotonic() if t_submit is None else t_submit
        t_start = time.monotonic()
        rendered = self.render(messages)
        t1 = time.monotonic()
        tokens = self._prompt_tokens(rendered.text)
        t2 = time.monotonic()
        n_predict = self.settings.n_predict if n_predict is None else n_predict
        fitted = self._fit(messages, tokens, n_predict)
        marks = [("template", t_start, t1), ("tokenize", t1, t2)]
        if fitted.dropped_turns:  # the renders and tokenizations that found what fits
            n = len(fitted.dropped_turns)
            marks.append((f"context shift (dropped turn{'' if n == 1 else 's'} {turn_ranges(fitted.dropped_turns)})",
                          t2, time.monotonic()))
        prompt = PromptInfo(rendered.template_name, rendered.fallback_reason, rendered.seconds, t2 - t1, tuple(marks))
        return self.generate(fitted.tokens, turn_id=turn_id, t_submit=t_submit, t_start=t_start,
                             n_predict=n_predict, ignore_eog=self.settings.ignore_eos, prompt=prompt, fitted=fitted,
                             threads=threads)

    def _prompt_tokens(self, text: str) -> list[int]:
        """The rendered chat as tokens (BOS added only when the template did not write it)."""
        return self.tokenize(text, add_special=not (self._bos_text and text.startswith(self._bos_text)))

    def _chat_tokens(self, messages: list[dict[str, str]]) -> list[int]:
        return self._prompt_tokens(self.render(messages).text)

    def _turn_start(self, messages: list[dict[str, str]]) -> int:
        """Where a turn after ``messages`` would begin, in tokens (``--keep N``)."""
        return len(self._prompt_tokens(self.render(messages, add_generation_prompt=False).text))

    def _fit(self, messages: list[dict[str, str]], tokens: list[int], n_predict: int) -> Fitted:
        """``--context-shift``: the oldest turns left out until the prompt and room for the
        reply fit (``runner.policy.context_shift``); ``--no-context-shift``: all of it."""
        s = self.settings
        if not s.context_shift:
            return Fitted(messages, tokens, (), len(tokens))
        return fit_turns(messages, tokens, self._chat_tokens, self.n_ctx, reply_room(self.n_ctx, n_predict),
                         s.keep, self._turn_start)

    def measure(self, messages: list[dict[str, str]]) -> tuple[int, int]:
        """(prompt tokens, of which cached) were ``messages`` the next turn: rendered,
        tokenized and shifted exactly as ``chat`` would, matched against the KV cache. The
        last token is always computed (its logits start the reply), so at most n - 1 are cached."""
        m = self.measure_prompt(0, messages)
        return m.prompt_tokens, m.cached_tokens or 0  # an engine's count is never None

    def measure_prompt(self, request_id: int, messages: list[dict[str, str]]) -> ev.PromptMeasured:
        """``MeasurePrompt``'s answer: ``measure`` and how many turns the shift would drop."""
        fitted = self._fit(messages, self._chat_tokens(messages), self.settings.n_predict)
        tokens = fitted.tokens
        cached = common_prefix(self._kv.tokens, tokens)
        if fitted.dropped_turns:  # the turn will cut the dropped turns' cells out and keep the rest
            cached = cached_after_shift(self._kv.tokens, tokens, cached, self._no_shift)
        cached = min(cached, max(len(tokens) - 1, 0))
        return ev.PromptMeasured(request_id, len(tokens), cached, self.n_ctx, len(fitted.dropped_turns))

    def generate(self, tokens: list[int], turn_id: int = 0, t_submit: float | None = None,
                 t_start: float | None = None, n_predict: int | None = None,
                 ignore_eog: bool = False, prompt: PromptInfo = TOKENS,
                 fitted: Fitted | None = None, threads: tuple[int, int] | None = None) -> ev.TurnDone | ev.TurnRefused:
        """One turn on prompt ``tokens``: ContextShifted when ``fitted`` dropped turns,
        TurnStarted, PrefillProgress per ubatch, TokenEvent per token, then TurnDone (or
        only TurnRefused). ``prompt`` says how the tokens were made (``chat`` fills it in).
        ``threads``: (decode, prefill) threads for this turn, at most the engine's (the
        free cores, chosen by the caller); None: the engine's own."""
        s = self.settings
        now = time.monotonic()
        t_submit = now if t_submit is None else t_submit
        t_start = now if t_start is None else t_start
        n_predict = s.n_predict if n_predict is None else n_predict
        refused = self._refusal(turn_id, len(tokens), fitted)
        if refused is not None:
            self.emit(refused)
            return refused
        reused, t_lookup = self._lookup(tokens, turn_id, prompt, fitted)
        clock = TurnClock(t_submit, t_start, t_lookup)
        _, context, decode = self._parts()
        ctx, emit = context.ptr, self.emit
        n_threads, n_threads_batch = self._use_threads(threads)
        llama_cpp.llama_perf_context_reset(ctx)
        pf = self._prefill.run(ctx, self._kv, tokens, reused, turn_id, self.cancel_event, emit)
        if self._prompt_file.wants_save(pf.stop):
            self._prompt_file.save(ctx, self._kv, emit)
        dec = decode.run(turn_id, n_predict, ignore_eog, pf.stop, Sampling.of(s), self.cancel_event, emit)
        t_end = time.monotonic()
        perf = llama_cpp.llama_perf_context(ctx)
        metrics = turn_metrics(clock, prompt, len(tokens), reused, pf, dec, self.kv_cells_used(), self.n_ctx, {
            "t_p_eval_ms": perf.t_p_eval_ms, "n_p_eval": perf.n_p_eval,
            "t_eval_ms": perf.t_eval_ms, "n_eval": perf.n_eval,
        })
        metrics = replace(metrics, n_threads=n_threads, n_threads_batch=n_threads_batch)
        done_ev = ev.TurnDone(turn_id, dec.stop or "eog", "".join(dec.text), metrics, t_end)
        self.emit(done_ev)
        return done_ev

    def _use_threads(self, threads: tuple[int, int] | None) -> tuple[int, int]:
        """Set the context's threads for this turn (``llama_set_n_threads``: it takes
        effect at the next decode, and costs nothing when unchanged) and return them."""
        s = self.settings
        want = (s.n_threads, s.n_threads_batch)
        if threads is not None:
            want = (min(max(threads[0], 1), s.n_threads), min(max(threads[1], 1), s.n_threads_batch))
        if want != self._threads:
            llama_cpp.llama_set_n_threads(self._parts()[1].ptr, *want)
            self._threads = want
        return want

    def _refusal(self, turn_id: int, n_prompt: int, fitted: Fitted | None = None) -> ev.TurnRefused | None:
        if n_prompt == 0:
            return ev.TurnRefused(turn_id, "empty prompt", 0, self.n_ctx)
        if not prompt_fits(n_prompt, self.n_ctx):
            dropped = fitted.dropped_turns if fitted is not None else ()
            even = (f" even with turn{'' if len(dropped) == 1 else 's'} {turn_ranges(dropped)} dropped,"
                    if dropped else "")
            return ev.TurnRefused(
                turn_id,
                f"prompt is {fmt_int(n_prompt)} tokens{even} but the context holds {fmt_int(self.n_ctx)}: "
                f"start a new chat or raise -c",
                n_prompt, self.n_ctx)
        return None

    def _lookup(self, tokens: list[int], turn_id: int, prompt: PromptInfo,
                fitted: Fitted | None = None) -> tuple[int, float]:
        """Restore the prompt cache file if due, keep the cached prefix the prompt
        starts with, and emit ContextShifted (when turns were dropped) and TurnStarted.
        Returns (tokens reused, when it ended)."""
        kv = self._kv
        if self._prompt_file.wants_restore(kv):
            self._prompt_file.restore(self._parts()[1].ptr, kv, self.n_ctx, self.emit)
        dropped = fitted is not None and bool(fitted.dropped_turns)
        shifted = shift_for(kv, tokens, self._no_shift) if dropped else 0
        common = common_prefix(kv.tokens, tokens)
        first_diff = first_difference(kv.tokens, common)
        diff_context = None
        if first_diff is not None:
            old, new = diff_windows(kv.tokens, tokens, common)
            diff_context = (self._detok(old), self._detok(new))
        kv.keep(common)
        reused = len(kv.tokens)
        t_lookup = time.monotonic()
        if dropped and fitted is not None:
            self.emit(ev.ContextShifted(turn_id, fitted.dropped_turns, fitted.full_tokens - len(tokens),
                                        fitted.kept_tokens, len(tokens), reused, first_diff, self.n_ctx, t_lookup,
                                        shifted, None if shifted else self._no_shift))
        self.emit(ev.TurnStarted(turn_id, len(tokens), reused, self.n_ctx, prompt.template_name,
                                 prompt.template_fallback, prompt.template_s, prompt.tokenize_s,
                                 first_diff, t_lookup, diff_context))
        return reused, t_lookup

    # ---------------------------------------------------------------- cleanup
    def close(self) -> None:
        """Free the draft, the context, then its model; a second call does nothing."""
        if self._decode is not None:
            self._decode.close()
        if self._ctx is not None:
            self._ctx.close()
            self._ctx = None
        if self._model is not None:
            self._model.close()
            self._model = None
        self._decode = None
