"""Prefix match and trim of the cached token list, and the --prompt-cache file."""

import llama_cpp
import pytest

from kvtop.runner import events as ev
from kvtop.runner.engine.handles import TokenBuffer
from kvtop.runner.engine.prompt_cache import PromptCacheFile, common_prefix, diff_windows, first_difference


@pytest.mark.parametrize("cached, prompt, common", [
    ([], [1, 2, 3], 0),                       # nothing cached
    ([1, 2, 3], [1, 2, 3, 4, 5], 3),          # the prompt extends the cache
    ([1, 2, 3, 4, 5], [1, 2, 9, 4, 5], 2),    # a changed token
    ([1, 2, 3], [1, 2, 3], 2),                # same prompt: one token left to compute
    ([1, 2, 3, 4, 5], [1, 2, 3], 2),          # a shorter prompt
    ([7, 8], [1, 2], 0),                      # nothing shared
    ([1, 2, 3], [1], 0),                      # one-token prompt is always computed
])
def test_common_prefix_leaves_at_least_one_token(cached, prompt, common):
    assert common_prefix(cached, prompt) == common
    assert common <= len(prompt) - 1


def test_first_difference_is_none_when_every_cached_token_is_kept():
    assert first_difference([1, 2, 3], 3) is None
    assert first_difference([], 0) is None
    assert first_difference([1, 2, 3], 1) == 1
    assert first_difference([1, 2, 3], 0) == 0


def test_diff_windows_are_eight_tokens_either_side():
    cached = list(range(100))
    prompt = list(range(50)) + [-1] * 50
    old, new = diff_windows(cached, prompt, 50)
    assert old == list(range(42, 58)) and new == list(range(42, 50)) + [-1] * 8
    assert diff_windows([1, 2, 3], [1, 9], 1) == ([1, 2, 3], [1, 9])


def _fill(ctx, kv, tokens):
    with TokenBuffer(tokens) as buf:
        for start in range(0, len(tokens), 16):  # n_batch 16: a bigger batch aborts llama.cpp
            assert llama_cpp.llama_decode(ctx.ptr, buf.batch(start, min(16, len(tokens) - start))) == 0
    kv.tokens.extend(tokens)


def test_keep_trims_the_cache_cells_and_the_list(tiny_model, kv):
    _, ctx = tiny_model
    _fill(ctx, kv, list(range(100, 112)))
    assert kv.cells_used() == 12
    kv.keep(12)  # keeping all of it is a no-op
    assert kv.cells_used() == 12 and len(kv.tokens) == 12
    kv.keep(5)
    assert kv.tokens == list(range(100, 105)) and kv.cells_used() == 5
    _fill(ctx, kv, [7, 8])  # positions continue after the kept prefix
    assert kv.cells_used() == 7 and kv.tokens[-2:] == [7, 8]


def test_drop_from_removes_cells_the_list_does_not_know(tiny_model, kv):
    _, ctx = tiny_model
    _fill(ctx, kv, list(range(100, 110)))
    kv.tokens = kv.tokens[:6]  # as if a failed batch wrote 4 cells past the list
    kv.drop_from(6)
    assert kv.cells_used() == 6 and len(kv.tokens) == 6


def test_clear_empties_both(tiny_model, kv):
    _, ctx = tiny_model
    _fill(ctx, kv, [1, 2, 3])
    kv.clear()
    assert kv.tokens == [] and kv.cells_used() == 0


def test_prompt_cache_file_restores_once_and_saves_once(tiny_model, kv, tmp_path):
    _, ctx = tiny_model
    seen = []
    pc = PromptCacheFile(str(tmp_path / "p.kvcache"))
    assert pc.wants_restore(kv)
    pc.restore(ctx.ptr, kv, 256, seen.append)  # no file yet: nothing, and still due
    assert seen == [] and not pc.done and pc.wants_restore(kv)
    assert not pc.wants_save("cancelled") and pc.wants_save(None)
    _fill(ctx, kv, list(range(200, 220)))
    pc.save(ctx.ptr, kv, seen.append)
    assert pc.done and not pc.wants_save(None) and not pc.wants_restore(kv)
    assert [(e.action, e.tokens) for e in seen] == [("saved", 20)] and seen[0].bytes > 0

    kv.clear()
    again = PromptCacheFile(pc.path)
    again.restore(ctx.ptr, kv, 256, seen.append)
    assert again.done and kv.tokens == list(range(200, 220)) and kv.cells_used() == 20
    assert (seen[-1].action, seen[-1].tokens, seen[-1].bytes) == ("restored", 20, seen[0].bytes)


def test_prompt_cache_file_that_does_not_fit_is_a_warning(tiny_model, kv, tmp_path):
    _, ctx = tiny_model
    bad = tmp_path / "bad.kvcache"
    bad.write_bytes(b"not a llama.cpp state file" * 10)
    seen = []
    pc = PromptCacheFile(str(bad))
    pc.restore(ctx.ptr, kv, 256, seen.append)
    assert pc.done and kv.tokens == [] and kv.cells_used() == 0
    assert len(seen) == 1 and isinstance(seen[0], ev.EngineWarning) and "could not be restored" in seen[0].reason


def test_no_prompt_cache_path_is_never_due(kv):
    pc = PromptCacheFile("")
    assert not pc.wants_restore(kv) and not pc.wants_save(None)
