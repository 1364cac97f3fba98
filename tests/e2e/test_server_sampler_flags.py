"""kvtop --server sends llama.cpp's sampler flags with each request, and the real
llama-server samples with them: its /slots answer shows the task's own parameters."""

import pytest
from llama_server import get_json

from kvtop.runner import events as ev
from kvtop.runner.process.blocking import BlockingEngine
from kvtop.runner.server.engine import ServerEngine
from kvtop.runner.settings import Settings

FLAGS = {"min_p": 0.2, "repeat_penalty": 1.3, "repeat_last_n": 32, "presence_penalty": 0.4,
         "frequency_penalty": 0.3}


def test_the_server_samples_with_the_flags_kvtop_was_given(served, smollm_path):
    url, _ = served
    e = BlockingEngine(ServerEngine(Settings(smollm_path, temp=0.7, n_predict=12, **FLAGS), url))
    e.start()
    try:
        done = e.chat([{"role": "user", "content": "Name three colours."}], lambda x: None)
        assert isinstance(done, ev.TurnDone) and done.text.strip()
    finally:
        e.close()
    used = [s["params"] for s in get_json(url + "/slots") if "params" in s]
    assert any(all(p.get(k) == pytest.approx(v) for k, v in FLAGS.items()) for p in used), used


MORE = {"typical_p": 0.9, "top_n_sigma": 2.0, "xtc_probability": 0.1, "xtc_threshold": 0.2, "mirostat": 2,
        "mirostat_lr": 0.2, "mirostat_ent": 4.0, "dry_multiplier": 0.8, "dry_base": 2.0, "dry_allowed_length": 3,
        "dry_penalty_last_n": 96}
SERVER_NAMES = {"mirostat_lr": "mirostat_eta", "mirostat_ent": "mirostat_tau"}


def test_the_server_takes_typical_xtc_mirostat_and_a_grammar(served, smollm_path):
    """--typical, --top-nsigma, --xtc-*, --mirostat*, --dry-* and --grammar reach the real llama-server."""
    url, _ = served
    e = BlockingEngine(ServerEngine(Settings(smollm_path, temp=0.7, n_predict=8, grammar="root ::= [0-9]+",
                                             **MORE), url))
    e.start()
    try:
        done = e.chat([{"role": "user", "content": "Count."}], lambda x: None)
        assert isinstance(done, ev.TurnDone) and done.text.strip().isdigit(), done.text
    finally:
        e.close()
    used = [s["params"] for s in get_json(url + "/slots") if "params" in s]
    want = {SERVER_NAMES.get(k, k): v for k, v in MORE.items()}
    assert any(all(p.get(k) == pytest.approx(v) for k, v in want.items()) for p in used), used
