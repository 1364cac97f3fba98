"""Owned handles on the real tiny model: close frees once, with-blocks close."""

import ctypes

import llama_cpp
import pytest

from kvtop.runner.engine.handles import Context, Model, SamplerChain, TokenBuffer


def _model_params():
    mp = llama_cpp.llama_model_default_params()
    mp.n_gpu_layers = 0
    return mp


def _context_params():
    cp = llama_cpp.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_threads, cp.n_threads_batch = 256, 16, 16, 1, 1
    return cp


def test_model_and_context_close_once(tiny_llama, monkeypatch):
    freed = []
    monkeypatch.setattr(Model, "_free", staticmethod(lambda p: (freed.append("model"), llama_cpp.llama_model_free(p))))
    monkeypatch.setattr(Context, "_free", staticmethod(lambda p: (freed.append("ctx"), llama_cpp.llama_free(p))))
    llama_cpp.llama_backend_init()
    with Model.load(tiny_llama, _model_params()) as model:
        assert not model.closed and model.vocab.ptr
        assert model.meta("general.name") == "tiny-llama" and model.meta("no.such.key") is None
        assert model.n_ctx_train() == 2048 and model.n_params() > 0 and model.size() > 0
        with Context.create(model, _context_params()) as ctx:
            assert ctx.model is model and ctx.mem
            assert (ctx.n_ctx(), ctx.n_batch(), ctx.n_ubatch()) == (256, 16, 16)
        assert ctx.closed and ctx.ptr is None
        ctx.close()
        assert freed == ["ctx"]
    assert model.closed
    model.close()
    model.close()
    assert freed == ["ctx", "model"]


def test_a_file_llama_cpp_refuses_is_none(tmp_path):
    bad = tmp_path / "empty-tensors.gguf"
    from gguf import GGUFWriter

    w = GGUFWriter(str(bad), "llama")  # a valid GGUF with no tensors: no model in it
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    llama_cpp.llama_backend_init()
    assert Model.load(str(bad), _model_params()) is None


def test_vocab_tokenize_and_pieces(tiny_model):
    model, _ = tiny_model
    vocab = model.vocab
    text = "日本語 🎉 naïve"
    toks = vocab.tokenize(text, add_special=False)
    pieces = [vocab.piece(t) for t in toks]
    assert all(type(p) is bytes for p in pieces)
    assert b"".join(pieces).decode("utf-8") == text
    buf = ctypes.create_string_buffer(256)  # what llama-cpp-python's own detokenize reads
    for t in toks:
        n = llama_cpp.llama_token_to_piece(vocab.ptr, t, buf, 256, 0, False)
        assert vocab.piece(t) == buf.raw[:n]
    assert vocab.token_text(-1) == ""
    assert vocab.token_text(vocab.eos()) == "<|im_end|>"
    long = "x" * 5000  # more tokens than the first guess of the buffer? still all of them
    assert b"".join(vocab.piece(t) for t in vocab.tokenize(long, False)) == long.encode()


def test_sampler_chain_closes_once(tiny_model):
    for temp in (0.0, 0.8):
        chain = SamplerChain.build(temp, top_k=40, top_p=0.95, seed=1)
        assert llama_cpp.llama_sampler_chain_n(chain.ptr) == (1 if temp <= 0 else 4)
        chain.close()
        chain.close()
        assert chain.closed
    with SamplerChain.build(0.7, top_k=0, top_p=1.0, seed=-1) as chain:
        assert llama_cpp.llama_sampler_chain_n(chain.ptr) == 2  # temperature and the draw
    assert chain.closed


def test_token_buffer_views_and_close(tiny_model):
    _, ctx = tiny_model
    buf = TokenBuffer([5, 6, 7, 8])
    b = buf.batch(2, 2)
    assert b.n_tokens == 2 and b.token[0] == 7 and b.token[1] == 8
    one = TokenBuffer([0])
    assert one.single() is one.single()
    one.arr[0] = 42
    assert one.single().token[0] == 42  # the batch reads the array: set it, decode again
    llama_cpp.llama_memory_clear(ctx.mem, True)
    assert llama_cpp.llama_decode(ctx.ptr, buf.batch(0, 4)) == 0
    assert llama_cpp.llama_decode(ctx.ptr, one.single()) == 0
    assert llama_cpp.llama_memory_seq_pos_max(ctx.mem, 0) == 4
    llama_cpp.llama_memory_clear(ctx.mem, True)
    with buf:
        pass
    buf.close()
    assert buf.closed
    with pytest.raises(ValueError):
        buf.batch(0, 1)
