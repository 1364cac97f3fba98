"""The one check every command runs on a model file before llama.cpp sees it."""

import pytest
from gguf_factory import write_header_only, write_tiny_llama

from kvtop.runner.model.inspect import ModelFileError, load_facts

LLAMA = {"block_count": 2, "embedding_length": 64, "attention.head_count": 4}


def test_a_good_file(smollm_path):
    f = load_facts(smollm_path, need_weights=True)
    assert f.n_layers == 30 and f.weights_bytes and not any("truncated" in n for n in f.notes)


def test_a_header_only_file_is_fine_for_an_estimate_not_for_loading(tmp_path):
    p = write_header_only(tmp_path / "h.gguf", "llama", LLAMA, [("blk.0.attn_q.weight", (64, 64), 1),
                                                                ("blk.1.attn_q.weight", (64, 64), 1)])
    assert any("estimate from the header only" in n for n in load_facts(p).notes)
    with pytest.raises(ModelFileError, match="truncated inside its tensor data"):
        load_facts(p, need_weights=True)


@pytest.mark.parametrize("need_weights", [False, True])
def test_block_count_that_disagrees_with_the_tensors(tmp_path, smollm_path, need_weights):
    p = write_tiny_llama(tmp_path / "k1000.gguf", None, block_count=1000)
    with pytest.raises(ModelFileError, match="block_count says 1000 layers but the tensors describe 2"):
        load_facts(p, need_weights=need_weights)


def test_absurd_block_count(tmp_path):
    p = write_header_only(tmp_path / "a.gguf", "llama", dict(LLAMA, block_count=100_000))
    with pytest.raises(ModelFileError, match="absurd block_count 100000"):
        load_facts(p)


def test_missing_and_directory(tmp_path):
    with pytest.raises(ModelFileError, match="no such file"):
        load_facts(str(tmp_path / "nope.gguf"))
    with pytest.raises(ModelFileError, match="is a directory"):
        load_facts(str(tmp_path))
