"""A model's recommended sampling (issue 33): a GGUF's ``general.sampling.*`` keys, read as
llama.cpp reads them and checked (the file is untrusted), win over llama.cpp's defaults for
every value no flag sets; the demo model, which carries none, gets its authors'
recommendation and a reply limit that fits the context."""

import argparse

from gguf_factory import write_header_only

from kvtop.runner.commands.chat_sampling import chat_settings, reply_limit
from kvtop.runner.model.sampling import DEMO_SAMPLING, from_metadata, recommended


def parse(model, *argv):
    from kvtop.tui.start.launch import build_parser

    return chat_settings(model, build_parser().parse_args([model, *argv]))


def test_general_sampling_keys_are_read_and_checked():
    md = {"general.sampling.temp": 0.6, "general.sampling.top_k": 20, "general.sampling.top_p": 0.95,
          "general.sampling.min_p": 0.0, "general.sampling.penalty_repeat": 1.05,
          "general.sampling.penalty_last_n": 128, "general.sampling.mirostat_tau": 4.0}
    assert from_metadata(md) == {"temp": 0.6, "top_k": 20, "top_p": 0.95, "min_p": 0.0, "repeat_penalty": 1.05,
                                 "repeat_last_n": 128, "mirostat_ent": 4.0}
    hostile = {"general.sampling.temp": float("nan"), "general.sampling.top_p": 7.0,
               "general.sampling.top_k": 2.5, "general.sampling.min_p": "0.1", "general.sampling.mirostat": True,
               "general.sampling.penalty_repeat": 0.0, "general.sampling.xtc_probability": float("inf"),
               "general.sampling.sequence": "edkypmxt"}
    assert from_metadata(hostile) == {}


def test_a_gguf_that_recommends_wins_over_llama_cpps_defaults_and_flags_win_over_it(tmp_path):
    path = write_header_only(tmp_path / "qwen-like.gguf", "llama", {
        "general.sampling.temp": 0.7, "general.sampling.top_k": 20, "general.sampling.top_p": 0.8})
    rec = recommended(path)
    assert rec.values == {"temp": 0.7, "top_k": 20, "top_p": 0.8} and not rec.demo
    s, note = parse(path)
    assert (s.temp, s.top_k, s.top_p, s.min_p, s.n_predict) == (0.7, 20, 0.8, 0.05, -1)  # no reply limit
    assert note == ("the model's sampling: temp 0.7 top-k 20 top-p 0.8 min-p 0.05 (the GGUF's general.sampling.*); "
                    "flags override")
    s, note = parse(path, "--top-k", "5")
    assert (s.temp, s.top_k) == (0.7, 5) and note.endswith("(set by a flag: top_k)")
    plain = write_header_only(tmp_path / "plain.gguf", "llama", {})
    s, note = parse(plain)
    assert note is None and (s.temp, s.top_k, s.top_p, s.min_p, s.n_predict) == (0.8, 40, 0.95, 0.05, -1)


def test_the_demo_gets_its_recommendation_and_a_reply_limit(smollm_shaped):
    rec = recommended(smollm_shaped)  # SmolLM2-135M-Instruct.Q4_1.gguf: no general.sampling.* keys
    assert rec.demo and rec.values == DEMO_SAMPLING
    s, note = parse(smollm_shaped)
    assert (s.temp, s.top_p, s.top_k, s.min_p, s.repeat_penalty, s.n_predict) == (0.2, 0.9, 50, 0.0, 1.1, 512)
    assert note.startswith("demo sampling: temp 0.2 top-k 50 top-p 0.9 min-p 0 repeat 1.1/64, replies ≤ 512 tokens")
    assert parse(smollm_shaped, "-c", "1024")[0].n_predict == 256
    assert parse(smollm_shaped, "-c", "0")[0].n_predict == 512  # the trained context (8,192)
    s, note = parse(smollm_shaped, "-n", "-1", "--temp", "0.8", "--top-p", "0.95", "--top-k", "40",
                    "--min-p", "0.05", "--repeat-penalty", "1")
    assert (s.temp, s.top_p, s.top_k, s.min_p, s.repeat_penalty, s.n_predict) == (0.8, 0.95, 40, 0.05, 1.0, -1)
    assert "replies ≤" not in note


def test_reply_limit_fits_the_context():
    assert [reply_limit(n, None) for n in (4096, 2048, 1024, 256, 0)] == [512, 512, 256, 64, 512]
    assert reply_limit(0, 8192) == 512 and reply_limit(0, 1024) == 256 and reply_limit(32, None) == 16


def test_no_flag_given_is_told_apart_from_a_flag_set_to_the_default(smollm_shaped):
    from kvtop.runner.commands.chat_sampling import given
    from kvtop.tui.start.launch import build_parser

    assert given(build_parser().parse_args([])) == frozenset()
    assert given(build_parser().parse_args(["--temp", "0.8", "-n", "-1"])) == {"temp", "n_predict"}
    assert given(argparse.Namespace()) == frozenset()
