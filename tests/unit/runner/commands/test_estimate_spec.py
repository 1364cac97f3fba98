"""``kvtop estimate --spec-type`` (issue 36, items 4 and 5): what speculation would give
at an assumed, given or measured acceptance, and where it stops paying; a model with
MTP heads (``blk.N.nextn.*``: a header-only fixture, no such model ships small) is
named with ``--spec-type draft-mtp``, its extra bytes and its roof."""

import json

import pytest
from gguf import GGMLQuantizationType as Q
from gguf_factory import write_header_only

from kvtop.runner.calibration.spec_store import load_measured, record_turn
from kvtop.runner.commands.estimate import estimate_main
from kvtop.runner.events import TurnMetrics
from kvtop.runner.model.inspect import load_facts

HW = ["--bandwidth-gbs", "30", "--tflops", "0.25"]


def mtp_model(path, mtp=True) -> str:
    """Three blocks of 64 wide; the last one an MTP head (as GLM-4.5 carries its one)."""
    kv = {"block_count": 3, "context_length": 2048, "embedding_length": 64, "feed_forward_length": 128,
          "attention.head_count": 4, "attention.head_count_kv": 4, "vocab_size": 1000,
          "attention.layer_norm_rms_epsilon": 1e-5, "nextn_predict_layers": 1 if mtp else 0}
    t = [("token_embd.weight", (1000, 64), Q.F16), ("output.weight", (1000, 64), Q.F16),
         ("output_norm.weight", (64,), Q.F32)]
    for i in range(3):
        b = f"blk.{i}."
        t += [(b + n, s, Q.F16) for n, s in (("attn_q.weight", (64, 64)), ("attn_k.weight", (64, 64)),
                                               ("attn_v.weight", (64, 64)), ("attn_output.weight", (64, 64)),
                                               ("ffn_up.weight", (128, 64)), ("ffn_gate.weight", (128, 64)),
                                               ("ffn_down.weight", (64, 128)))]
        t += [(b + "attn_norm.weight", (64,), Q.F32), (b + "ffn_norm.weight", (64,), Q.F32)]
    if mtp:
        t += [("blk.2.nextn.eh_proj.weight", (64, 128), Q.F16), ("blk.2.nextn.enorm.weight", (64,), Q.F32),
              ("blk.2.nextn.hnorm.weight", (64,), Q.F32)]
    return write_header_only(path, "llama", kv, t)


def spec_turn(spec_type, drafted, accepted, passes):
    return TurnMetrics(prompt_tokens=10, reused_tokens=0, prefill_tokens=10, prefill_s=0.1, prefill_tok_s=100.0,
                       template_s=0.0, tokenize_s=0.0, wait_s=0.0, ttft_s=0.2, decode_tokens=50, decode_s=1.0,
                       decode_tok_s=50.0, itl_p50_ms=20.0, itl_p95_ms=30.0, kv_cells_used=60, n_ctx=256,
                       spec_type=spec_type, spec_drafted=drafted, spec_accepted=accepted, spec_passes=passes)


def estimate_json(capsys, *argv):
    assert estimate_main([*argv, *HW, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_gguf_reader_says_a_model_carries_mtp_heads_and_their_bytes(tmp_path):
    facts = load_facts(mtp_model(tmp_path / "mtp.gguf"))
    assert facts.mtp_layers == (2,)
    # block 2: 4 x 64x64 + 3 x 128x64 f16, 2 norms of 64 f32, eh_proj 64x128 f16, 2 norms f32
    assert facts.mtp_bytes == (4 * 64 * 64 + 3 * 128 * 64 + 64 * 128) * 2 + 4 * 64 * 4
    assert any("MTP head" in n and "draft-mtp" in n for n in facts.notes)
    plain = load_facts(mtp_model(tmp_path / "plain.gguf", mtp=False))
    assert plain.mtp_layers == () and plain.mtp_bytes is None


def test_estimate_names_draft_mtp_with_its_extra_bytes_and_roof(tmp_path, capsys):
    model = mtp_model(tmp_path / "mtp.gguf")
    assert estimate_main([model, *HW]) == 0
    text = capsys.readouterr().out
    assert "MTP heads" in text and "--spec-type draft-mtp" in text and "speculation (draft-mtp)" in text
    s = estimate_json(capsys, model, "--acceptance", "0.8")["speculation"]
    facts = load_facts(model)
    assert s["spec_type"] == "draft-mtp" and s["acceptance_source"] == "given" and s["draft"] == 3
    assert s["extra_bytes_per_draft_token"] == facts.mtp_bytes
    assert s["tokens_per_pass"] == pytest.approx(1 + 0.8 * 3)
    assert s["roof_tok_s"] == pytest.approx(s["tokens_per_pass"] / s["pass_s"])


def test_draft_mtp_on_a_model_without_heads_is_refused_in_one_line(tmp_path, capsys):
    model = mtp_model(tmp_path / "plain.gguf", mtp=False)
    assert estimate_main([model, *HW, "--spec-type", "draft-mtp"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no MTP heads" in err


def test_a_plain_model_without_spec_type_has_no_speculation_block(tmp_path, capsys):
    r = estimate_json(capsys, mtp_model(tmp_path / "plain.gguf", mtp=False))
    assert r["speculation"] is None


def test_ngram_at_a_given_acceptance_says_its_roof_and_where_it_stops_paying(smollm_shaped, capsys):
    assert estimate_main([smollm_shaped, *HW, "--spec-type", "ngram-simple", "--acceptance", "68%"]) == 0
    text = capsys.readouterr().out
    assert "speculation (ngram-simple)  68% accepted (given)" in text
    assert "stops paying" in text and "by draft size" in text
    s = estimate_json(capsys, smollm_shaped, "--spec-type", "ngram-simple", "--acceptance", "0.68")["speculation"]
    assert s["draft"] == 48 and s["extra_bytes_per_draft_token"] == 0
    be = s["break_even_acceptance"]
    assert be is not None and 0 < be < 0.68 and s["speedup"] > 1
    low = estimate_json(capsys, smollm_shaped, "--spec-type", "ngram-simple", "--acceptance", str(be / 2))
    assert low["speculation"]["speedup"] < 1


def test_without_acceptance_the_measured_one_is_quoted_else_an_assumed_one(smollm_shaped, capsys):
    from kvtop.runner.records.paths import default_paths

    s = estimate_json(capsys, smollm_shaped, "--spec-type", "ngram-map-k")["speculation"]
    assert s["acceptance"] == 0.5 and s["acceptance_source"].startswith("assumed")
    cache = default_paths().cache_dir
    record_turn(cache, smollm_shaped, spec_turn("ngram-map-k", drafted=40, accepted=30, passes=4))
    record_turn(cache, smollm_shaped, spec_turn("ngram-map-k", drafted=60, accepted=20, passes=6))
    assert load_measured(cache, smollm_shaped, "ngram-map-k").acceptance == 0.5
    record_turn(cache, smollm_shaped, spec_turn("ngram-map-k", drafted=100, accepted=90, passes=10))
    s = estimate_json(capsys, smollm_shaped, "--spec-type", "ngram-map-k")["speculation"]
    assert s["acceptance"] == pytest.approx(140 / 200)
    assert s["acceptance_source"] == "measured: 140 of 200 drafted in 3 turns"
    assert s["draft"] == 10  # the drafts' size as measured: 200 in 20 passes


def test_bad_spec_input_is_one_usage_line(smollm_shaped, capsys):
    for argv, needle in ((["--spec-type", "nonsense"], "unknown speculative type"),
                         (["--spec-type", "ngram-simple", "--acceptance", "1.5"], "between 0 and 1")):
        with pytest.raises(SystemExit) as e:
            estimate_main([smollm_shaped, *HW, *argv])
        assert e.value.code == 2 and needle in capsys.readouterr().err
    assert estimate_main([smollm_shaped, *HW, "--spec-type", "draft-simple"]) == 1
    assert "needs -md FILE" in capsys.readouterr().err
