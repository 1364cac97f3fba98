"""A context on the tiny random-weight llama (tests/gguf_factory.py) for the engine's
own tests: llama.cpp runs in them, so they live in tests/e2e (tests/unit loads no model)."""

import pytest


@pytest.fixture(scope="module")
def tiny_model(tiny_llama):
    """(model, context) with n_ctx 256 and n_ubatch 16, closed after the module."""
    import llama_cpp

    from runner.engine.handles import Context, Model

    llama_cpp.llama_backend_init()
    mp = llama_cpp.llama_model_default_params()
    mp.n_gpu_layers = 0
    model = Model.load(tiny_llama, mp)
    assert model is not None
    cp = llama_cpp.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max = 256, 16, 16, 1
    cp.n_threads = cp.n_threads_batch = 1
    ctx = Context.create(model, cp)
    assert ctx is not None
    yield model, ctx
    ctx.close()
    model.close()


@pytest.fixture
def kv(tiny_model):
    """An empty KVCache on the tiny context, cleared again afterwards."""
    from runner.engine.prompt_cache import KVCache

    cache = KVCache(tiny_model[1].mem)
    cache.clear()
    yield cache
    cache.clear()
