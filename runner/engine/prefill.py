"""Prefill: the prompt's uncached tokens through ``llama_decode``, one ubatch a call.

One call per ``n_ubatch`` tokens (rather than one per ``n_batch``) so that progress
is reported after each micro-batch, with its own timing. Cancel works inside a
ubatch through llama.cpp's abort callback, installed only for the prefill: a Python
callback per graph node would tax every decode step.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import llama_cpp

from kvtop.runner import events as ev
from kvtop.runner.engine.handles import TokenBuffer
from kvtop.runner.engine.prompt_cache import KVCache


@dataclass(slots=True)
class Prefilled:
    """What one prefill did; the timestamps are ``time.monotonic()``."""

    t_start: float  # just before the first ubatch
    seconds: float = 0.0  # t_start -> the abort callback removed again
    done: int = 0  # tokens computed (reused ones not counted)
    ubatches: list[tuple[int, float]] = field(default_factory=list)  # (tokens, seconds)
    ubatch_ends: list[float] = field(default_factory=list)
    stop: str | None = None  # "cancelled" when cut short, else None


class Prefill:
    """Runs prefills for one engine. Holds the ctypes abort callbacks: they must stay
    referenced while llama.cpp may call them (a collected one crashes)."""

    def __init__(self) -> None:
        self.cancel = threading.Event()  # the running prefill's; set by run()
        self._abort_cb = llama_cpp.ggml_abort_callback(self._should_abort)
        self._null_abort = llama_cpp.ggml_abort_callback()

    def _should_abort(self, _data: object) -> bool:
        return self.cancel.is_set()

    def run(self, ctx: object, kv: KVCache, tokens: list[int], reused: int, turn_id: int,
            cancel: threading.Event, emit: Callable[[object], None]) -> Prefilled:
        """Compute ``tokens[reused:]`` into ``kv`` (``ctx``: context pointer), emitting
        ``PrefillProgress`` after each ubatch and stopping early once ``cancel`` is
        set. A llama.cpp failure other than an abort raises ``RuntimeError`` after
        the partial batch is removed."""
        self.cancel = cancel
        ub = max(1, llama_cpp.llama_n_ubatch(ctx))
        todo = tokens[reused:]
        buf = TokenBuffer(todo)
        out = Prefilled(time.monotonic())
        llama_cpp.llama_set_abort_callback(ctx, self._abort_cb, None)
        try:
            self._ubatches(ctx, kv, buf, todo, ub, reused, len(tokens), turn_id, emit, out)
        finally:
            llama_cpp.llama_set_abort_callback(ctx, self._null_abort, None)
        out.seconds = time.monotonic() - out.t_start
        buf.close()
        return out

    def _ubatches(self, ctx: object, kv: KVCache, buf: TokenBuffer, todo: list[int], ub: int, reused: int,
                  n_prompt: int, turn_id: int, emit: Callable[[object], None], out: Prefilled) -> None:
        cancel, t_pf, n_todo = self.cancel, out.t_start, len(todo)
        done = 0
        while done < n_todo:
            if cancel.is_set():
                out.stop = "cancelled"
                return
            n = min(ub, n_todo - done)
            t_u = time.monotonic()
            rc = llama_cpp.llama_decode(ctx, buf.batch(done, n))
            t_e = time.monotonic()
            if rc != 0:
                # 2: aborted by our callback. The partial ubatch may have written
                # cells: drop everything after the last complete one.
                kv.drop_from(reused + done)
                if rc == 2 or cancel.is_set():
                    out.stop = "cancelled"
                    return
                raise RuntimeError(f"llama_decode failed ({rc}) during prefill")
            kv.tokens.extend(todo[done: done + n])
            done += n
            out.done = done
            out.ubatches.append((n, t_e - t_u))
            out.ubatch_ends.append(t_e)
            el = t_e - t_pf
            emit(ev.PrefillProgress(turn_id, reused + done, n_prompt, reused, el,
                                    done / el if el > 0 else 0.0, n, t_e - t_u, t_e))
