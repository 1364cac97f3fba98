"""Contexts that return the logits of every position asked for: ``kvtop kld`` runs the
same chunk through two of them (a base cache and a candidate, on one model or two) and
compares what they predict, as llama-perplexity's KL-divergence mode does.

The engine's prefill hands llama.cpp a view of its token buffer (``llama_batch_get_one``:
the last token's logits only). Here each position carries its own output flag, so the
batch is llama.cpp's own (``llama_batch_init``), filled per call. A call decodes at most
``n_ubatch`` tokens; the rows of logits it returns are copied out of llama.cpp's buffer,
which the next decode reuses.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace

import llama_cpp
import numpy as np
import numpy.typing as npt

from kvtop.runner.engine.engine import _check_header
from kvtop.runner.engine.errors import EngineLoadError
from kvtop.runner.engine.handles import Context, Model, backend_init
from kvtop.runner.engine.llama_log import CAPTURE
from kvtop.runner.engine.load_params import context_params, model_params
from kvtop.runner.sanitize import clean_line
from kvtop.runner.settings import Settings

Logits = npt.NDArray[np.float32]


class ScoringError(RuntimeError):
    """llama.cpp failed a decode: one line."""


def load_model(s: Settings) -> Model:
    """The GGUF at ``s.model`` (``EngineLoadError`` with llama.cpp's reason)."""
    path = os.path.abspath(s.model)
    _check_header(path)
    CAPTURE.install()
    backend_init(s.numa)
    cb = llama_cpp.llama_progress_callback(lambda _f, _d: True)
    model = Model.load(path, model_params(s, cb))
    if model is None:
        reason = CAPTURE.last_error() or "llama.cpp could not load the model"
        raise EngineLoadError(f"{clean_line(path)}: {clean_line(reason)}")
    return model


def tokenize_plain(model: Model, text: str) -> list[int]:
    """``common_tokenize(ctx, text, true)`` as llama-perplexity calls it: the vocabulary's
    BOS added when it adds one, special-token text read as plain text."""
    return model.vocab.tokenize(text, add_special=True, parse_special=False)


def adds_bos(model: Model) -> bool:
    return bool(llama_cpp.llama_vocab_get_add_bos(model.vocab.ptr))


class ScoringContext:
    """One context of ``n_ctx`` cells on ``model`` with the cache types of ``s``; one
    sequence. ``close()`` frees the batch and the context (the model stays open)."""

    def __init__(self, model: Model, s: Settings, n_ctx: int) -> None:
        s = replace(s.resolved(), n_batch=max(s.n_ubatch, 1), n_ubatch=max(s.n_ubatch, 1))
        self.model = model
        self.n_vocab = model.vocab.n_tokens()
        mark = CAPTURE.mark()
        ctx = Context.create(model, context_params(s, n_ctx))
        if ctx is None:
            reason = CAPTURE.last_error() or "llama.cpp could not create the context"
            raise EngineLoadError(f"-ctk {s.cache_type_k} -ctv {s.cache_type_v} (-fa {s.flash_attn}): "
                                  f"{clean_line(reason)}")
        self.log = CAPTURE.since(mark)
        self.ctx = ctx
        self.n_ctx = ctx.n_ctx()
        self.step = max(1, ctx.n_ubatch())
        self._batch: llama_cpp.llama_batch | None = llama_cpp.llama_batch_init(self.step, 0, 1)

    def clear(self) -> None:
        llama_cpp.llama_memory_clear(self.ctx.mem, True)

    def decode(self, tokens: list[int], pos0: int, first_out: int) -> Logits | None:
        """Decode ``tokens`` at positions ``pos0``...; the logits of those at ``first_out``
        or later, one row each and in order (None when there are none)."""
        b = self._batch
        if b is None:
            raise ScoringError("the scoring context is closed")
        n_out = 0
        for k, tok in enumerate(tokens):
            out = int(pos0 + k >= first_out)
            b.token[k] = tok
            b.pos[k] = pos0 + k  # type: ignore[call-overload]  # llama_cpp types pos as an array of arrays
            b.n_seq_id[k] = 1
            b.logits[k] = out
            b.seq_id[k][0] = 0
            n_out += out
        b.n_tokens = len(tokens)
        rc = llama_cpp.llama_decode(self.ctx.ptr, b)
        if rc != 0:
            reason = CAPTURE.last_error() or f"llama_decode returned {rc}"
            raise ScoringError(f"llama.cpp failed to decode positions {pos0}-{pos0 + len(tokens) - 1}: "
                               f"{clean_line(reason)}")
        if not n_out:
            return None
        rows = np.ctypeslib.as_array(llama_cpp.llama_get_logits(self.ctx.ptr), shape=(n_out, self.n_vocab))
        return np.array(rows, dtype=np.float32, copy=True)

    def slices(self, n: int) -> list[tuple[int, int]]:
        """(start, length) of the decode calls over ``n`` tokens: ``n_ubatch`` a call."""
        return [(s, min(self.step, n - s)) for s in range(0, n, self.step)]

    def decode_rate(self, tokens: list[int], depth: int, n_gen: int) -> float:
        """Tokens per second of ``n_gen`` one-token decodes after ``depth`` tokens of
        ``tokens`` (the cache holds at least those: the chunk just scored). The cells
        after ``depth`` are removed first; where the cache cannot remove them (a
        recurrent or windowed layer), it is cleared and ``depth`` tokens prefilled again."""
        if not llama_cpp.llama_memory_seq_rm(self.ctx.mem, 0, depth, -1):
            self.clear()
            for start, n in self.slices(depth):
                self.decode(tokens[start:start + n], start, depth)
        t0 = time.perf_counter()
        for k in range(n_gen):
            self.decode([tokens[depth + k]], depth + k, 0)
        llama_cpp.llama_synchronize(self.ctx.ptr)
        return n_gen / max(time.perf_counter() - t0, 1e-9)

    def close(self) -> None:
        b, self._batch = self._batch, None
        if b is not None:
            llama_cpp.llama_batch_free(b)
        self.ctx.close()
