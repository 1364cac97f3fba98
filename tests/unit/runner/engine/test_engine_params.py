"""Every setting kvtop gives llama.cpp lands in a field of its ctypes structs. Setting a
name the struct lacks only adds a Python attribute: --no-mmap and --mlock did nothing
for a whole release that way (llama.cpp had replaced use_mmap/use_mlock with load_mode)."""

import llama_cpp
import pytest

from kvtop.runner.engine.load_params import context_params as _context_params
from kvtop.runner.engine.load_params import model_params as _model_params
from kvtop.runner.settings import Settings


@pytest.mark.parametrize("mmap,mlock,mode", [(True, False, None), (False, False, llama_cpp.LLAMA_LOAD_MODE_NONE),
                                             (True, True, llama_cpp.LLAMA_LOAD_MODE_MMAP_MLOCK),
                                             (False, True, llama_cpp.LLAMA_LOAD_MODE_MLOCK)])
def test_model_params_set_only_real_fields(smollm_shaped, mmap, mlock, mode):
    progress = llama_cpp.llama_progress_callback(lambda p, user: True)
    mp = _model_params(Settings(smollm_shaped, mmap=mmap, mlock=mlock), progress)
    assert vars(mp) == {}, f"not fields of llama_model_params: {sorted(vars(mp))}"
    default = llama_cpp.llama_model_default_params().load_mode
    assert mp.load_mode == (default if mode is None else mode)


def test_context_params_set_only_real_fields(smollm_shaped):
    cp = _context_params(Settings(smollm_shaped, n_threads=2, flash_attn="on", cache_type_k="q8_0"), 2048)
    assert vars(cp) == {}, f"not fields of llama_context_params: {sorted(vars(cp))}"
    assert (cp.n_ctx, cp.n_threads, cp.flash_attn_type) == (2048, 2, 1)
