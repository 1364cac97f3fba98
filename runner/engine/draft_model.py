"""The drafters a turn speculates with, from the --spec-* settings; ``draft-simple``'s
draft model.

``speculation(settings, model, ctx)`` builds what ``Decode`` runs: the n-gram drafters
(runner/policy/ngram.py) and, for ``draft-simple``, a second model drafting greedily in
its own context, as common/speculative.cpp's ``common_speculative_impl_draft_simple``:
its cache follows the target's tokens, it decodes the sampled token and then each
token it drafts, keeps the most likely of its top 10 while that one's probability
(among the 10) is at least ``--spec-draft-p-min``, stops at ``--spec-draft-n-max``,
and drops a draft shorter than ``--spec-draft-n-min``.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import llama_cpp

from kvtop.runner.engine.errors import EngineLoadError
from kvtop.runner.engine.handles import Context, Model, TokenBuffer
from kvtop.runner.engine.prompt_cache import KVCache, common_prefix
from kvtop.runner.engine.speculative import SpecLoop
from kvtop.runner.policy.ngram import ORDER, Drafter, NgramMap, NgramMod, NgramSimple, Speculator
from kvtop.runner.sanitize import clean_line

if TYPE_CHECKING:
    from kvtop.runner.engine.decode import Decode
    from kvtop.runner.settings import Settings

SPEC_TYPES = ("none", *ORDER)  # what kvtop's --spec-type takes
SPEC_VOCAB_MAX_SIZE_DIFFERENCE = 128  # common/speculative.cpp
SPEC_VOCAB_CHECK_START_TOKEN_ID = 5
TOP_K = 10  # draft-simple's sampler: top-k 10


def spec_types(value: str) -> tuple[str, ...]:
    """--spec-type's comma-separated names in llama.cpp's order of preference (``none``
    alone turns speculation off); ValueError names an unknown one."""
    names = [n.strip() for n in value.split(",") if n.strip()]
    for n in names:
        if n not in SPEC_TYPES:
            raise ValueError(f"unknown speculative type: {n} (kvtop takes {', '.join(SPEC_TYPES)})")
    if not names or "none" in names:
        return ()
    return tuple(t for t in ORDER if t in names)


def vocab_difference(tgt: object, dft: object) -> str | None:
    """``common_speculative_are_compatible``: why the draft's vocabulary is not the
    target's (vocabulary pointers), or None when they match."""
    lc = llama_cpp
    if lc.llama_vocab_type(tgt) != lc.llama_vocab_type(dft):
        return "its tokenizer type differs from the model's"
    for what, add, tok in (("BOS", lc.llama_vocab_get_add_bos, lc.llama_vocab_bos),
                           ("EOS", lc.llama_vocab_get_add_eos, lc.llama_vocab_eos)):
        if add(tgt) != add(dft) or (add(tgt) and tok(tgt) != tok(dft)):
            return f"its {what} token differs from the model's"
    n_tgt, n_dft = lc.llama_vocab_n_tokens(tgt), lc.llama_vocab_n_tokens(dft)
    if abs(n_tgt - n_dft) > SPEC_VOCAB_MAX_SIZE_DIFFERENCE:
        return f"its vocabulary has {n_dft:,} tokens, the model's {n_tgt:,}"
    for i in range(SPEC_VOCAB_CHECK_START_TOKEN_ID, min(n_tgt, n_dft)):
        if lc.llama_vocab_get_text(tgt, i) != lc.llama_vocab_get_text(dft, i):
            return f"its token {i} differs from the model's"
    return None


class DraftSimple:
    """``draft-simple``: a draft model in its own context (``close()`` frees both)."""

    name = "draft-simple"

    def __init__(self, model: Model, ctx: Context, n_max: int, n_min: int, p_min: float) -> None:
        self.model, self.ctx = model, ctx
        self.n_max, self.n_min, self.p_min = n_max, n_min, p_min
        self.kv = KVCache(ctx.mem)
        self.n_batch = ctx.n_batch()
        self.n_vocab = model.vocab.n_tokens()
        self.one = TokenBuffer([0])

    def close(self) -> None:
        self.one.close()
        self.ctx.close()
        self.model.close()

    def begin(self, prompt: Sequence[int]) -> None:
        pass

    def accept(self, n_accepted: int, is_other: bool) -> None:
        pass

    def _sync(self, tokens: Sequence[int]) -> bool:
        """The draft's cache holds ``tokens``: the shared prefix kept, the rest decoded."""
        kv = self.kv
        kv.keep(common_prefix(kv.tokens, [*tokens, -1]))
        todo = list(tokens[len(kv.tokens):])
        for i in range(0, len(todo), self.n_batch):
            chunk = todo[i:i + self.n_batch]
            with TokenBuffer(chunk) as buf:
                if llama_cpp.llama_decode(self.ctx.ptr, buf.batch(0, len(chunk))) != 0:
                    kv.drop_from(len(kv.tokens))
                    return False
            kv.tokens.extend(chunk)
        return True

    def _step(self, tok: int) -> bool:
        arr = self.one.arr
        assert arr is not None
        arr[0] = tok
        if llama_cpp.llama_decode(self.ctx.ptr, self.one.single()) != 0:
            self.kv.drop_from(len(self.kv.tokens))
            return False
        self.kv.tokens.append(tok)
        return True

    def _best(self) -> tuple[int, float]:
        """The most likely token and its probability among the top 10."""
        logits = llama_cpp.llama_get_logits_ith(self.ctx.ptr, -1)
        row = ctypes.cast(logits, ctypes.POINTER(ctypes.c_float * self.n_vocab)).contents
        import numpy as np

        a = np.frombuffer(memoryview(row), dtype=np.float32)
        top = np.argpartition(a, -TOP_K)[-TOP_K:] if a.size > TOP_K else np.arange(a.size)
        best = int(top[np.argmax(a[top])])
        z = np.exp(a[top] - a[best]).sum()
        return best, float(1.0 / z) if math.isfinite(z) and z > 0 else 0.0

    def draft(self, tokens: Sequence[int], sampled: int, n_max: int) -> list[int]:
        out: list[int] = []
        if not self._sync(tokens) or not self._step(sampled):
            return out
        while True:
            tok, p = self._best()
            if p < self.p_min:
                break
            out.append(tok)
            if self.n_max <= len(out) or (n_max > 0 and n_max <= len(out)) or not self._step(tok):
                break
        return out if len(out) >= self.n_min else []


def _load_draft(s: Settings, target: Model, mp: llama_cpp.llama_model_params,
                cp: llama_cpp.llama_context_params) -> DraftSimple:
    """The draft model, with the model's own load and context settings (``mp``, ``cp``)."""
    path = s.spec_draft_model
    mp.progress_callback = llama_cpp.llama_progress_callback()  # NULL: the load bar was the model's
    mp.tensor_buft_overrides = None  # type: ignore[assignment]  # -ot is the model's (llama.cpp has -otd for a draft)
    model = Model.load(path, mp)
    if model is None:
        raise EngineLoadError(f"-md {clean_line(path)}: llama.cpp could not load the draft model")
    why = vocab_difference(target.vocab.ptr, model.vocab.ptr)
    if why is not None:
        model.close()
        raise EngineLoadError(f"-md {clean_line(path)}: not a draft for this model: {why}")
    ctx = Context.create(model, cp)
    if ctx is None:
        model.close()
        raise EngineLoadError(f"-md {clean_line(path)}: llama.cpp could not create the draft context")
    return DraftSimple(model, ctx, s.spec_draft_n_max, s.spec_draft_n_min, s.spec_draft_p_min)


def speculation(s: Settings, target: Model, ctx: Context, mp: llama_cpp.llama_model_params,
                cp: llama_cpp.llama_context_params) -> Callable[[Decode], SpecLoop | None] | None:
    """What ``Decode`` speculates with (a draft model loads with ``mp`` and ``cp``, the
    model's own parameters), or None (``--spec-type none``, or a model whose
    cache cannot drop a rejected draft: a recurrent one). Raises ``EngineLoadError``
    for a draft model kvtop cannot use."""
    types = spec_types(s.spec_type) or (("draft-simple",) if s.spec_draft_model and s.spec_type == "none" else ())
    if not types or llama_cpp.llama_model_is_recurrent(target.ptr) or llama_cpp.llama_model_is_hybrid(target.ptr):
        return None
    drafters: list[Drafter] = []
    draft_model: DraftSimple | None = None
    for t in types:
        if t == "ngram-simple":
            drafters.append(NgramSimple(s.spec_ngram_simple_size_n, s.spec_ngram_simple_size_m))
        elif t == "ngram-map-k":
            drafters.append(NgramMap(s.spec_ngram_map_k_size_n, s.spec_ngram_map_k_size_m, True,
                                     s.spec_ngram_map_k_min_hits))
        elif t == "ngram-map-k4v":
            drafters.append(NgramMap(s.spec_ngram_map_k4v_size_n, s.spec_ngram_map_k4v_size_m, False,
                                     s.spec_ngram_map_k4v_min_hits))
        elif t == "ngram-mod":
            drafters.append(NgramMod(s.spec_ngram_mod_n_match, s.spec_ngram_mod_n_max, s.spec_ngram_mod_n_min))
        elif t == "draft-simple":
            draft_model = _load_draft(s, target, mp, cp)
            drafters.append(draft_model)
    cap = max(2, min(ctx.n_batch(), ctx.n_ubatch()))
    name = ",".join(types)
    on_close = draft_model.close if draft_model is not None else None
    return lambda dec: SpecLoop(dec, Speculator(drafters), cap, name, on_close)
