"""A context on the tiny random-weight llama (tests/gguf_factory.py) for the engine's
own tests: llama.cpp runs in them, so they live in tests/e2e (tests/unit loads no model)."""

import pytest
from helpers import tiny_context


@pytest.fixture(scope="module")
def tiny_model(tiny_llama):
    """(model, context) with n_ctx 256 and n_ubatch 16, closed after the module."""
    with tiny_context(tiny_llama) as mc:
        yield mc


@pytest.fixture
def kv(tiny_model):
    """An empty KVCache on the tiny context, cleared again afterwards."""
    from kvtop.runner.engine.prompt_cache import KVCache

    cache = KVCache(tiny_model[1].mem)
    cache.clear()
    yield cache
    cache.clear()
