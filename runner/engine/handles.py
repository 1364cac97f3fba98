"""Owned llama.cpp objects: each handle frees what it holds, once.

The layer under the engine, as ``_internals.py`` is under llama-cpp-python's
``Llama``: a model, a context, a sampler chain and a token buffer, each a tiny class
whose ``close()`` frees its C object (a second call does nothing) and which works as
a context manager. Pointers they merely borrow (the model's vocabulary, the
context's memory) are plain attributes and are never freed here.

Nothing is freed by the garbage collector: a model and its context in one reference
cycle would be finalized in any order, and a context freed after its model reads
freed memory. Whoever opens a handle closes it (the engine in ``close()``).
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, ClassVar, cast

import llama_cpp

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self is 3.11+

_PIECE_BYTES = 256
_to_piece = llama_cpp.llama_token_to_piece


class Handle:
    """A C pointer owned by Python; ``close()`` frees it with ``_free`` once."""

    __slots__ = ("ptr",)
    # the llama_cpp function that frees ``ptr`` (each subclass sets it)
    _free: ClassVar[Callable[[object], None]]

    # ``ptr``: the C pointer as llama_cpp's ctypes functions return it (an int or a
    # ctypes pointer; None once freed), only ever handed back to them
    def __init__(self, ptr: object) -> None:
        self.ptr = ptr

    def close(self) -> None:
        ptr, self.ptr = self.ptr, None
        if ptr:
            type(self)._free(ptr)

    @property
    def closed(self) -> bool:
        return not self.ptr

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


class Vocab:
    """The model's vocabulary (borrowed: it lives as long as the model), with one
    reusable buffer for token pieces."""

    __slots__ = ("ptr", "_buf")

    def __init__(self, ptr: object) -> None:
        self.ptr = ptr
        self._buf = ctypes.create_string_buffer(_PIECE_BYTES)

    def piece(self, tok: int) -> bytes:
        """The bytes of one token (possibly part of a UTF-8 character). Called per
        generated token: the common case is one C call and one bytes object."""
        buf = self._buf
        n = _to_piece(self.ptr, tok, buf, _PIECE_BYTES, 0, False)
        if n < 0:
            big = ctypes.create_string_buffer(-n)
            n = _to_piece(self.ptr, tok, big, -n, 0, False)
            return big.raw[:n]
        # a char array's slice is the bytes themselves (.raw copies all 256); typeshed calls it a list
        return cast(bytes, buf[:n])

    def token_text(self, tok: int) -> str:
        """A special token's text as the template writes it ("" for none)."""
        if tok < 0:
            return ""
        n = llama_cpp.llama_token_to_piece(self.ptr, tok, self._buf, _PIECE_BYTES, 0, True)
        return self._buf.raw[: max(n, 0)].decode("utf-8", errors="replace")

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        data = text.encode("utf-8", errors="replace")  # lone surrogates become '?'
        n_max = len(data) + 16
        arr = (ctypes.c_int32 * n_max)()
        n = llama_cpp.llama_tokenize(self.ptr, data, len(data), arr, n_max, add_special, parse_special)
        if n < 0:
            n_max = -n
            arr = (ctypes.c_int32 * n_max)()
            n = llama_cpp.llama_tokenize(self.ptr, data, len(data), arr, n_max, add_special, parse_special)
        return list(arr[:n])

    def bos(self) -> int:
        return int(llama_cpp.llama_vocab_bos(self.ptr))

    def n_tokens(self) -> int:
        return int(llama_cpp.llama_vocab_n_tokens(self.ptr))

    def eos(self) -> int:
        return int(llama_cpp.llama_vocab_eos(self.ptr))


class Model(Handle):
    """A loaded GGUF (``llama_model_free`` on close)."""

    __slots__ = ("vocab",)
    _free = staticmethod(llama_cpp.llama_model_free)

    def __init__(self, ptr: object) -> None:
        super().__init__(ptr)
        self.vocab = Vocab(llama_cpp.llama_model_get_vocab(ptr))

    @classmethod
    def load(cls, path: str, params: llama_cpp.llama_model_params) -> Model | None:
        """The model at ``path``, or None when llama.cpp refuses it (its log says why)."""
        ptr = llama_cpp.llama_model_load_from_file(path.encode(), params)
        return cls(ptr) if ptr else None

    def meta(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(1024)
        n = llama_cpp.llama_model_meta_val_str(self.ptr, key.encode(), buf, 1024)
        if n < 0:
            return None
        return buf.value.decode("utf-8", errors="replace")

    def description(self) -> str:
        buf = ctypes.create_string_buffer(256)
        llama_cpp.llama_model_desc(self.ptr, buf, 256)
        return buf.value.decode(errors="replace")

    def chat_template(self) -> str | None:
        tmpl = llama_cpp.llama_model_chat_template(self.ptr, None)
        return tmpl.decode("utf-8", errors="replace") if tmpl else None

    def n_ctx_train(self) -> int:
        return int(llama_cpp.llama_model_n_ctx_train(self.ptr))

    def n_params(self) -> int:
        return int(llama_cpp.llama_model_n_params(self.ptr))

    def size(self) -> int:
        return int(llama_cpp.llama_model_size(self.ptr))


class Context(Handle):
    """An inference context on a model (``llama_free`` on close). It keeps its model
    referenced; the model must still be open when the context is closed."""

    __slots__ = ("model", "mem")
    _free = staticmethod(llama_cpp.llama_free)

    def __init__(self, model: Model, ptr: object) -> None:
        super().__init__(ptr)
        self.model = model
        self.mem = llama_cpp.llama_get_memory(ptr)  # borrowed: the context's KV memory

    @classmethod
    def create(cls, model: Model, params: llama_cpp.llama_context_params) -> Context | None:
        ptr = llama_cpp.llama_init_from_model(model.ptr, params)
        return cls(model, ptr) if ptr else None

    def n_ctx(self) -> int:
        return int(llama_cpp.llama_n_ctx(self.ptr))

    def n_batch(self) -> int:
        return int(llama_cpp.llama_n_batch(self.ptr))

    def n_ubatch(self) -> int:
        return int(llama_cpp.llama_n_ubatch(self.ptr))


NUMA = {"distribute": llama_cpp.GGML_NUMA_STRATEGY_DISTRIBUTE, "isolate": llama_cpp.GGML_NUMA_STRATEGY_ISOLATE,
        "numactl": llama_cpp.GGML_NUMA_STRATEGY_NUMACTL}


def backend_init(numa: str = "") -> None:
    """``llama_backend_init``, then llama.cpp's NUMA strategy (``--numa``), as llama-cli
    does (a second call keeps the first strategy: ggml initialises NUMA once)."""
    llama_cpp.llama_backend_init()
    if numa:
        llama_cpp.llama_numa_init(NUMA[numa])


class SamplerChain(Handle):
    """llama.cpp's sampler chain (``llama_sampler_free`` on close frees the samplers
    added to it too)."""

    __slots__ = ()
    _free = staticmethod(llama_cpp.llama_sampler_free)

    @classmethod
    def build(cls, temp: float, top_k: int, top_p: float, seed: int, min_p: float = 0.0, n_vocab: int = 0,
              repeat_last_n: int = 0, repeat_penalty: float = 1.0, frequency_penalty: float = 0.0,
              presence_penalty: float = 0.0, *, typical_p: float = 1.0, top_n_sigma: float = -1.0,
              xtc_probability: float = 0.0, xtc_threshold: float = 0.1, mirostat: int = 0,
              mirostat_lr: float = 0.1, mirostat_ent: float = 5.0, dry_multiplier: float = 0.0, dry_base: float = 1.75,
              dry_allowed_length: int = 2, dry_penalty_last_n: int = 64, dry_sequence_breakers: Sequence[str] = (),
              grammar: str = "", vocab: object = None, suppress: Sequence[int] = ()) -> SamplerChain:
        """llama.cpp's default order (common/sampling.cpp): penalties, DRY, top-n-sigma, top-k,
        typical, top-p, min-p, XTC, temperature, then a draw (``seed < 0``: llama.cpp's
        random seed); greedy when ``temp <= 0``, after the penalties, which change which
        token is the most likely. ``mirostat`` 1 or 2: temperature then mirostat, nothing
        else (as llama.cpp). A stage that would change nothing is left out (the penalties
        and mirostat 1 need ``n_vocab``; DRY needs the model's ``vocab``, which tokenizes its
        sequence breakers). ``grammar`` (GBNF, with ``vocab``) comes after the penalties and
        DRY: tokens it does not allow are out before the rest see them. ``suppress``: tokens
        biased to -inf before all of them, as llama.cpp's ``--ignore-eos`` does to the
        end-of-generation tokens (common/common.cpp's ``logit_bias_eog``, the chain's first stage)."""
        lc = llama_cpp
        chain = cls(lc.llama_sampler_chain_init(lc.llama_sampler_chain_default_params()))
        add = lc.llama_sampler_chain_add
        if suppress:
            bias = (lc.llama_logit_bias * len(suppress))(*(lc.llama_logit_bias(t, -math.inf) for t in suppress))
            add(chain.ptr, lc.llama_sampler_init_logit_bias(n_vocab, len(suppress), bias))
        seed = seed if seed >= 0 else 0xFFFFFFFF  # LLAMA_DEFAULT_SEED: random
        if mirostat:
            cls._grammar(chain, grammar, vocab)
            add(chain.ptr, lc.llama_sampler_init_temp(temp))
            add(chain.ptr, lc.llama_sampler_init_mirostat(n_vocab, seed, mirostat_ent, mirostat_lr, 100)
                if mirostat == 1 else lc.llama_sampler_init_mirostat_v2(seed, mirostat_ent, mirostat_lr))
            return chain
        if repeat_last_n != 0 and (repeat_penalty != 1.0 or frequency_penalty != 0.0 or presence_penalty != 0.0):
            add(chain.ptr, lc.llama_sampler_init_penalties(n_vocab, repeat_last_n, repeat_penalty,
                                                           frequency_penalty, presence_penalty))
        if dry_multiplier != 0.0 and dry_base >= 1.0 and dry_penalty_last_n != 0:
            cls._dry(chain, vocab, dry_multiplier, dry_base, dry_allowed_length, dry_penalty_last_n,
                     dry_sequence_breakers)
        cls._grammar(chain, grammar, vocab)
        if temp <= 0:
            add(chain.ptr, lc.llama_sampler_init_greedy())
            return chain
        if top_n_sigma > 0:
            add(chain.ptr, lc.llama_sampler_init_top_n_sigma(top_n_sigma))
        if top_k > 0:
            add(chain.ptr, lc.llama_sampler_init_top_k(top_k))
        if typical_p < 1:
            add(chain.ptr, lc.llama_sampler_init_typical(typical_p, 1))
        if 0 < top_p < 1:
            add(chain.ptr, lc.llama_sampler_init_top_p(top_p, 1))
        if min_p > 0:
            add(chain.ptr, lc.llama_sampler_init_min_p(min_p, 1))
        if xtc_probability > 0 and xtc_threshold <= 0.5:
            add(chain.ptr, lc.llama_sampler_init_xtc(xtc_probability, xtc_threshold, 1, seed))
        add(chain.ptr, lc.llama_sampler_init_temp(temp))
        add(chain.ptr, lc.llama_sampler_init_dist(seed))
        return chain

    @staticmethod
    def _dry(chain: SamplerChain, vocab: object, multiplier: float, base: float, allowed: int, last_n: int,
             breakers: Sequence[str]) -> None:
        if vocab is None:
            chain.close()
            raise ValueError("DRY sampling needs the model's vocabulary (its sequence breakers are tokenized)")
        words = [b.encode() for b in breakers]
        arr = (ctypes.c_char_p * max(1, len(words)))(*words)
        llama_cpp.llama_sampler_chain_add(chain.ptr, llama_cpp.llama_sampler_init_dry(
            vocab, multiplier, base, allowed, last_n, arr, len(words)))

    @staticmethod
    def _grammar(chain: SamplerChain, grammar: str, vocab: object) -> None:
        if not grammar:
            return
        g = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode(), b"root")
        if not g:
            chain.close()
            raise RuntimeError("llama.cpp could not parse the grammar (--grammar, --grammar-file or --json-schema)")
        llama_cpp.llama_sampler_chain_add(chain.ptr, g)


class TokenBuffer:
    """Tokens in a C ``int32`` array, handed to ``llama_decode`` as batch views
    (``llama_batch_get_one``: no copy, llama.cpp assigns the positions). The array
    is Python memory; ``close()`` drops it, and a view after that raises."""

    __slots__ = ("arr", "_one")

    def __init__(self, tokens: Sequence[int]) -> None:
        self.arr: ctypes.Array[ctypes.c_int32] | None = (ctypes.c_int32 * len(tokens))(*tokens)
        self._one: llama_cpp.llama_batch | None = None

    def batch(self, start: int, n: int) -> llama_cpp.llama_batch:
        """A batch of the ``n`` tokens from index ``start``."""
        if self.arr is None:
            raise ValueError("token buffer is closed")
        ptr = ctypes.cast(ctypes.byref(self.arr, start * 4), ctypes.POINTER(ctypes.c_int32))
        batch: llama_cpp.llama_batch = llama_cpp.llama_batch_get_one(ptr, n)
        return batch

    def single(self) -> llama_cpp.llama_batch:
        """One batch over the first token, built once: set ``arr[0]`` and decode it
        again (``llama_decode`` takes the batch by value)."""
        if self._one is None:
            self._one = self.batch(0, 1)
        return self._one

    def close(self) -> None:
        self.arr = None
        self._one = None

    @property
    def closed(self) -> bool:
        return self.arr is None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
