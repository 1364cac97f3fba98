"""The engine: load a GGUF, prefill in micro-batches with progress, decode with events.

It talks to llama.cpp through llama-cpp-python's low-level ctypes API rather than
``Llama``, because ``Llama.eval`` has no progress or abort hook and its sampling
copies the logits to numpy on every token. Here:

* prefill calls ``llama_decode`` once per ``n_ubatch`` tokens and reports after each;
* the KV prefix shared with the previous turn is kept (``llama_memory_seq_rm`` from
  the first differing token), and the report says how many tokens were reused;
* sampling runs in llama.cpp's sampler chain (``llama_sampler_sample``), no copies;
* cancel is llama.cpp's abort callback during prefill (installed only then: a Python
  callback per graph node would tax every decode step) and a flag check per token;
* text is decoded with an incremental UTF-8 decoder, flushed on every stop path.

The engine knows nothing of processes or UIs: it reports through ``emit(event)``.
``runner.process.parent`` runs it in a child process.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from typing import Callable

from runner import events as ev
from runner.engine.chat_template import render_chat
from runner.engine.llama_log import CAPTURE, parse_buffers
from runner.model.quant_types import KV_CACHE_TYPES
from runner.sanitize import clean_line
from runner.settings import Settings
from runner.engine.utf8_stream import Utf8Stream

Emit = Callable[[object], None]


class EngineLoadError(Exception):
    pass


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    k = (len(s) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


class Engine:
    def __init__(self, settings: Settings, emit: Emit, cancel: threading.Event | None = None):
        self.settings = settings.resolved()
        self.emit = emit
        self.cancel_event = cancel or threading.Event()
        self.model = None
        self.ctx = None
        self.vocab = None
        self.mem = None
        self.n_ctx = 0
        self.cached: list[int] = []  # tokens whose KV is in the cache, in order
        self._prompt_cache_done = False
        self.loaded: ev.Loaded | None = None
        self._template: str | None = None
        self._bos_text = ""
        self._eos_text = ""
        self._piece_buf = ctypes.create_string_buffer(256)
        self._one = (ctypes.c_int32 * 1)()
        # ctypes callbacks stay referenced for the engine's life (a collected one crashes)
        import llama_cpp

        self._abort_cb = llama_cpp.ggml_abort_callback(self._should_abort)
        self._null_abort = llama_cpp.ggml_abort_callback()
        self._progress_cb = llama_cpp.llama_progress_callback(self._on_load_progress)
        self._last_progress = -1.0

    # ---------------------------------------------------------------- loading
    def _should_abort(self, _data) -> bool:
        return self.cancel_event.is_set()

    def _on_load_progress(self, fraction: float, _data) -> bool:
        if fraction >= 1.0 or fraction - self._last_progress >= 0.05:
            self._last_progress = fraction
            self.emit(ev.LoadProgress(float(fraction)))
        return not self.cancel_event.is_set()

    def load(self) -> ev.Loaded:
        import llama_cpp

        from runner.model.gguf_header import check_loadable, read_header

        s = self.settings
        t0 = time.monotonic()
        path = os.path.abspath(s.model)
        # Our own bounded header read first: a clear reason for bad files, before
        # llama.cpp sees them (some malformed files abort it outright).
        try:
            header = read_header(path)
            check_loadable(header)
        except FileNotFoundError:
            raise EngineLoadError(f"{clean_line(path)}: no such file") from None
        except (OSError, ValueError) as exc:
            raise EngineLoadError(f"{clean_line(path)}: {clean_line(str(exc))}") from None

        CAPTURE.install()
        llama_cpp.llama_backend_init()
        mark = CAPTURE.mark()
        mp = llama_cpp.llama_model_default_params()
        mp.n_gpu_layers = s.n_gpu_layers if s.n_gpu_layers >= 0 else 999
        mp.use_mmap = s.mmap
        mp.use_mlock = s.mlock
        mp.progress_callback = self._progress_cb
        self.model = llama_cpp.llama_model_load_from_file(path.encode(), mp)
        if not self.model:
            reason = CAPTURE.last_error() or "llama.cpp could not load the model"
            raise EngineLoadError(f"{clean_line(path)}: {clean_line(reason)}")
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)

        cp = llama_cpp.llama_context_default_params()
        n_ctx = s.n_ctx if s.n_ctx > 0 else llama_cpp.llama_model_n_ctx_train(self.model)
        cp.n_ctx = n_ctx
        cp.n_batch = s.n_batch
        cp.n_ubatch = s.n_ubatch
        cp.n_seq_max = 1
        cp.n_threads = s.n_threads
        cp.n_threads_batch = s.n_threads_batch
        cp.flash_attn_type = {"on": 1, "off": 0, "auto": -1}[s.flash_attn]
        cp.type_k = KV_CACHE_TYPES[s.cache_type_k]
        cp.type_v = KV_CACHE_TYPES[s.cache_type_v]
        cp.swa_full = s.swa_full
        cp.no_perf = False
        self.ctx = llama_cpp.llama_init_from_model(self.model, cp)
        if not self.ctx:
            reason = CAPTURE.last_error() or "llama.cpp could not create the context"
            self._free_model()
            raise EngineLoadError(f"{clean_line(path)}: {clean_line(reason)}")
        self.mem = llama_cpp.llama_get_memory(self.ctx)
        self.n_ctx = llama_cpp.llama_n_ctx(self.ctx)
        log = CAPTURE.since(mark)
        buffers = parse_buffers(log)

        tmpl = llama_cpp.llama_model_chat_template(self.model, None)
        self._template = tmpl.decode("utf-8", errors="replace") if tmpl else None
        self._bos_text = self._token_text(llama_cpp.llama_vocab_bos(self.vocab))
        self._eos_text = self._token_text(llama_cpp.llama_vocab_eos(self.vocab))
        buf = ctypes.create_string_buffer(256)
        llama_cpp.llama_model_desc(self.model, buf, 256)
        desc = buf.value.decode(errors="replace")
        name = self._meta("general.name") or os.path.basename(path)
        fa = "auto"
        for line in log.splitlines():
            if "flash_attn" in line and "=" in line:
                fa = line.split("=", 1)[1].strip()
        self.loaded = ev.Loaded(
            path=path,
            name=clean_line(name),
            description=clean_line(desc),
            architecture=clean_line(self._meta("general.architecture") or "?"),
            file_type=clean_line(desc.split()[-1] if desc else "?"),
            n_params=int(llama_cpp.llama_model_n_params(self.model)),
            model_bytes=int(llama_cpp.llama_model_size(self.model)),
            n_ctx=self.n_ctx,
            n_ctx_train=int(llama_cpp.llama_model_n_ctx_train(self.model)),
            n_threads=s.n_threads,
            n_threads_batch=s.n_threads_batch,
            n_batch=llama_cpp.llama_n_batch(self.ctx),
            n_ubatch=llama_cpp.llama_n_ubatch(self.ctx),
            n_gpu_layers=s.n_gpu_layers,
            flash_attn=fa,
            type_k=s.cache_type_k,
            type_v=s.cache_type_v,
            swa_full=s.swa_full,
            buffers=buffers,
            has_chat_template=self._template is not None,
            load_s=time.monotonic() - t0,
            pid=os.getpid(),
        )
        self.emit(self.loaded)
        return self.loaded

    def _meta(self, key: str) -> str | None:
        import llama_cpp

        buf = ctypes.create_string_buffer(1024)
        n = llama_cpp.llama_model_meta_val_str(self.model, key.encode(), buf, 1024)
        if n < 0:
            return None
        return buf.value.decode("utf-8", errors="replace")

    def _token_text(self, tok: int) -> str:
        import llama_cpp

        if tok < 0:
            return ""
        n = llama_cpp.llama_token_to_piece(self.vocab, tok, self._piece_buf, 256, 0, True)
        return self._piece_buf.raw[: max(n, 0)].decode("utf-8", errors="replace")

    def piece(self, tok: int) -> bytes:
        """The bytes of one token (possibly part of a UTF-8 character)."""
        import llama_cpp

        n = llama_cpp.llama_token_to_piece(self.vocab, tok, self._piece_buf, 256, 0, False)
        if n < 0:
            big = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self.vocab, tok, big, -n, 0, False)
            return big.raw[:n]
        return self._piece_buf.raw[:n]

    # ------------------------------------------------------------- tokenizing
    def tokenize(self, text: str, add_special: bool = True) -> list[int]:
        import llama_cpp

        data = text.encode("utf-8", errors="replace")  # lone surrogates become '?'
        n_max = len(data) + 16
        arr = (ctypes.c_int32 * n_max)()
        n = llama_cpp.llama_tokenize(self.vocab, data, len(data), arr, n_max, add_special, True)
        if n < 0:
            n_max = -n
            arr = (ctypes.c_int32 * n_max)()
            n = llama_cpp.llama_tokenize(self.vocab, data, len(data), arr, n_max, add_special, True)
        return list(arr[:n])

    def render(self, messages: list[dict]):
        msgs = list(messages)
        if self.settings.system_prompt and not any(m.get("role") == "system" for m in msgs):
            msgs = [{"role": "system", "content": self.settings.system_prompt}] + msgs
        return render_chat(self._template, msgs, self._bos_text, self._eos_text)

    # -------------------------------------------------------------------- KV
    def reset(self) -> None:
        import llama_cpp

        llama_cpp.llama_memory_clear(self.mem, True)
        self.cached = []
        self.emit(ev.CacheCleared())

    def kv_cells_used(self) -> int:
        import llama_cpp

        return int(llama_cpp.llama_memory_seq_pos_max(self.mem, 0)) + 1

    def _trim_cache(self, keep: int) -> None:
        import llama_cpp

        if keep < len(self.cached):
            ok = llama_cpp.llama_memory_seq_rm(self.mem, 0, keep, -1)
            if not ok:  # recurrent caches cannot cut in the middle: start over
                llama_cpp.llama_memory_clear(self.mem, True)
                keep = 0
            self.cached = self.cached[:keep]

    # ------------------------------------------------------------------ turns
    def chat(self, messages: list[dict], turn_id: int = 0, t_submit: float | None = None,
             n_predict: int | None = None) -> ev.TurnDone | ev.TurnRefused:
        t_submit = time.monotonic() if t_submit is None else t_submit
        t_start = time.monotonic()
        rendered = self.render(messages)
        t1 = time.monotonic()
        tokens = self.tokenize(rendered.text, add_special=not (
            self._bos_text and rendered.text.startswith(self._bos_text)))
        tokenize_s = time.monotonic() - t1
        return self.generate(tokens, turn_id=turn_id, t_submit=t_submit, t_start=t_start,
                             n_predict=n_predict, ignore_eog=self.settings.ignore_eos,
                             template_name=rendered.template_name,
                             template_fallback=rendered.fallback_reason,
                             template_s=rendered.seconds, tokenize_s=tokenize_s,
                             marks=(("template", t_start, t1), ("tokenize", t1, t1 + tokenize_s)))

    def generate(self, tokens: list[int], turn_id: int = 0, t_submit: float | None = None,
                 t_start: float | None = None, n_predict: int | None = None,
                 ignore_eog: bool = False, template_name: str = "tokens",
                 template_fallback: str | None = None, template_s: float = 0.0,
                 tokenize_s: float = 0.0, marks: tuple = ()) -> ev.TurnDone | ev.TurnRefused:
        import llama_cpp

        s = self.settings
        now = time.monotonic()
        t_submit = now if t_submit is None else t_submit
        t_start = now if t_start is None else t_start
        n_predict = s.n_predict if n_predict is None else n_predict
        n_prompt = len(tokens)
        if n_prompt == 0:
            r = ev.TurnRefused(turn_id, "empty prompt", 0, self.n_ctx)
            self.emit(r)
            return r
        if n_prompt >= self.n_ctx:
            r = ev.TurnRefused(
                turn_id,
                f"prompt is {n_prompt} tokens but the context holds {self.n_ctx}: "
                f"start a new chat or raise -c",
                n_prompt, self.n_ctx)
            self.emit(r)
            return r

        if self.settings.prompt_cache and not self._prompt_cache_done and not self.cached:
            self._restore_prompt_cache()
        # Prefix reuse: keep the cached tokens the new prompt starts with. At least one
        # token is always computed, so there are logits to sample from.
        common = 0
        limit = min(len(self.cached), n_prompt - 1)
        while common < limit and self.cached[common] == tokens[common]:
            common += 1
        first_diff = common if common < len(self.cached) else None
        diff_context = None
        if first_diff is not None:
            diff_context = (self._detok(self.cached[max(0, common - 8): common + 8]),
                            self._detok(tokens[max(0, common - 8): common + 8]))
        self._trim_cache(common)
        reused = len(self.cached)
        t_lookup = time.monotonic()
        self.emit(ev.TurnStarted(turn_id, n_prompt, reused, self.n_ctx, template_name,
                                 template_fallback, template_s, tokenize_s, first_diff,
                                 t_lookup, diff_context))
        llama_cpp.llama_perf_context_reset(self.ctx)

        # ---- prefill, one ubatch per llama_decode
        ub = max(1, llama_cpp.llama_n_ubatch(self.ctx))
        todo = tokens[reused:]
        arr = (ctypes.c_int32 * len(todo))(*todo)
        t_pf = time.monotonic()
        done = 0
        ubatches: list[tuple[int, float]] = []
        ubatch_ends: list[float] = []
        stop = None
        llama_cpp.llama_set_abort_callback(self.ctx, self._abort_cb, None)
        try:
            while done < len(todo):
                if self.cancel_event.is_set():
                    stop = "cancelled"
                    break
                n = min(ub, len(todo) - done)
                t_u = time.monotonic()
                ptr = ctypes.cast(ctypes.byref(arr, done * 4), ctypes.POINTER(ctypes.c_int32))
                rc = llama_cpp.llama_decode(self.ctx, llama_cpp.llama_batch_get_one(ptr, n))
                t_e = time.monotonic()
                if rc != 0:
                    # 2: aborted by our callback. The partial ubatch may have written
                    # cells: drop everything after the last complete one.
                    self._trim_cache_after_failure(reused + done)
                    stop = "cancelled" if (rc == 2 or self.cancel_event.is_set()) else "error"
                    if stop == "error":
                        raise RuntimeError(f"llama_decode failed ({rc}) during prefill")
                    break
                self.cached.extend(todo[done: done + n])
                done += n
                ubatches.append((n, t_e - t_u))
                ubatch_ends.append(t_e)
                el = t_e - t_pf
                self.emit(ev.PrefillProgress(turn_id, reused + done, n_prompt, reused, el,
                                             done / el if el > 0 else 0.0, n, t_e - t_u, t_e))
        finally:
            llama_cpp.llama_set_abort_callback(self.ctx, self._null_abort, None)
        prefill_s = time.monotonic() - t_pf
        if self.settings.prompt_cache and not self._prompt_cache_done and stop is None:
            self._save_prompt_cache()

        # ---- decode
        decoder = Utf8Stream()
        out_text: list[str] = []
        token_times: list[float] = []
        t_first_visible = None
        t_first_token = None
        n_out = 0
        smpl = self._make_sampler() if stop is None else None
        pos = len(self.cached)
        try:
            while stop is None:
                tok = llama_cpp.llama_sampler_sample(smpl, self.ctx, -1)
                if not ignore_eog and llama_cpp.llama_vocab_is_eog(self.vocab, tok):
                    stop = "eog"
                    break
                now = time.monotonic()
                if t_first_token is None:
                    t_first_token = now
                text = decoder.feed(self.piece(tok))
                if text and t_first_visible is None:
                    t_first_visible = now
                token_times.append(now)
                out_text.append(text)
                self.emit(ev.TokenEvent(turn_id, n_out, tok, text, pos, now))
                n_out += 1
                if n_predict >= 0 and n_out >= n_predict:
                    stop = "n_predict"
                    break
                if pos + 1 >= self.n_ctx:
                    stop = "context_full"
                    break
                if self.cancel_event.is_set():
                    stop = "cancelled"
                    break
                self._one[0] = tok
                rc = llama_cpp.llama_decode(self.ctx, llama_cpp.llama_batch_get_one(self._one, 1))
                if rc != 0:
                    self._trim_cache_after_failure(pos)
                    stop = "context_full" if rc == 1 else "error"
                    if stop == "error":
                        raise RuntimeError(f"llama_decode failed ({rc}) during decode")
                    break
                self.cached.append(tok)
                pos += 1
        finally:
            if smpl is not None:
                llama_cpp.llama_sampler_free(smpl)
            tail = decoder.flush()
            if tail:
                out_text.append(tail)
                now = time.monotonic()
                if t_first_visible is None:
                    t_first_visible = now
                self.emit(ev.TokenEvent(turn_id, n_out, -1, tail, pos, now))

        t_end = time.monotonic()
        timeline = self._timeline(t_submit, t_start, marks, t_lookup, t_pf, ubatches, ubatch_ends,
                                  t_first_token, t_first_visible, reused)
        itl = [(b - a) * 1000 for a, b in zip(token_times, token_times[1:])]
        dec_s = token_times[-1] - token_times[0] if len(token_times) > 1 else 0.0
        perf = llama_cpp.llama_perf_context(self.ctx)
        metrics = ev.TurnMetrics(
            prompt_tokens=n_prompt,
            reused_tokens=reused,
            prefill_tokens=done,
            prefill_s=prefill_s,
            prefill_tok_s=done / prefill_s if done and prefill_s > 0 else None,
            template_s=template_s,
            tokenize_s=tokenize_s,
            wait_s=max(0.0, t_start - t_submit),
            ttft_s=(t_first_visible - t_submit) if t_first_visible else None,
            decode_tokens=n_out,
            decode_s=dec_s,
            decode_tok_s=(len(token_times) - 1) / dec_s if dec_s > 0 else None,
            itl_p50_ms=_percentile(itl, 0.5),
            itl_p95_ms=_percentile(itl, 0.95),
            kv_cells_used=self.kv_cells_used(),
            n_ctx=self.n_ctx,
            first_token_s=(t_first_token - (t_pf + prefill_s)) if t_first_token else None,
            ubatches=tuple(ubatches),
            timeline=timeline,
            perf={
                "t_p_eval_ms": perf.t_p_eval_ms, "n_p_eval": perf.n_p_eval,
                "t_eval_ms": perf.t_eval_ms, "n_eval": perf.n_eval,
            },
        )
        done_ev = ev.TurnDone(turn_id, stop or "eog", "".join(out_text), metrics, t_end)
        self.emit(done_ev)
        return done_ev

    def _restore_prompt_cache(self) -> None:
        """Load ``--prompt-cache`` (llama.cpp's seq state file) into the cache, if it exists."""
        import llama_cpp

        path = self.settings.prompt_cache
        if not os.path.isfile(path):
            return
        t0 = time.monotonic()
        cap = self.n_ctx
        toks = (ctypes.c_int32 * cap)()
        n = ctypes.c_size_t(0)
        size = llama_cpp.llama_state_seq_load_file(self.ctx, os.fsencode(path), 0, toks, cap, ctypes.byref(n))
        self._prompt_cache_done = True
        if size == 0 or n.value == 0:
            llama_cpp.llama_memory_clear(self.mem, True)
            self.emit(ev.EngineWarning(f"prompt cache {clean_line(path)} could not be restored (other model or settings?)"))
            return
        self.cached = list(toks[: n.value])
        self.emit(ev.PromptCache("restored", path, n.value, int(size), time.monotonic() - t0))

    def _save_prompt_cache(self) -> None:
        import llama_cpp

        path = self.settings.prompt_cache
        self._prompt_cache_done = True
        t0 = time.monotonic()
        arr = (ctypes.c_int32 * len(self.cached))(*self.cached)
        size = llama_cpp.llama_state_seq_save_file(self.ctx, os.fsencode(path), 0, arr, len(self.cached))
        if size:
            self.emit(ev.PromptCache("saved", path, len(self.cached), int(size), time.monotonic() - t0))

    def _detok(self, toks: list[int]) -> str:
        return b"".join(self.piece(t) for t in toks).decode("utf-8", errors="replace")

    @staticmethod
    def _timeline(t_submit, t_start, marks, t_lookup, t_pf, ubatches, ubatch_ends, t_first_token,
                  t_first_visible, reused) -> tuple[tuple[str, float, float], ...]:
        """Contiguous (label, start, seconds) segments from submit to the first visible
        character, offsets from submit. Each boundary is a measured timestamp, so the
        segments add up to TTFT; a ubatch segment includes the progress report before it."""
        if t_first_visible is None:
            return ()
        bounds: list[tuple[str, float]] = [("wait for engine", t_start)]
        for label, _a, b in marks:
            bounds.append((label, b))
        bounds.append((f"cache lookup ({reused} reused)", t_lookup))
        bounds.append(("prefill setup", t_pf))
        for i, ((n, _dt), end) in enumerate(zip(ubatches, ubatch_ends)):
            bounds.append((f"ubatch {i + 1} ({n} tok)", end))
        if t_first_token is not None:
            bounds.append(("first decode+sample", t_first_token))
        bounds.append(("first visible char", t_first_visible))
        out = []
        prev = t_submit
        for label, end in bounds:
            end = max(end, prev)
            out.append((label, prev - t_submit, end - prev))
            prev = end
        return tuple(out)

    def _trim_cache_after_failure(self, keep: int) -> None:
        import llama_cpp

        if not llama_cpp.llama_memory_seq_rm(self.mem, 0, keep, -1):
            llama_cpp.llama_memory_clear(self.mem, True)
            keep = 0
        self.cached = self.cached[:keep]

    def _make_sampler(self):
        import llama_cpp

        s = self.settings
        chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
        if s.temp <= 0:
            llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_greedy())
            return chain
        seed = s.seed if s.seed >= 0 else 0xFFFFFFFF  # LLAMA_DEFAULT_SEED: random
        if s.top_k > 0:
            llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_top_k(s.top_k))
        if 0 < s.top_p < 1:
            llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_top_p(s.top_p, 1))
        llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_temp(s.temp))
        llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_dist(seed))
        return chain

    # ---------------------------------------------------------------- cleanup
    def _free_model(self) -> None:
        import llama_cpp

        if self.model:
            llama_cpp.llama_model_free(self.model)
            self.model = None

    def close(self) -> None:
        import llama_cpp

        if self.ctx:
            llama_cpp.llama_free(self.ctx)
            self.ctx = None
        self._free_model()
