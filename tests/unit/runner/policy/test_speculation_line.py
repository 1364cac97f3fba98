"""The decode pane's one line on whether speculation paid (runner/policy/speculation.py),
from a turn's spec_* figures as the engine records them."""

from dataclasses import replace

from kvtop.runner.events import TurnMetrics
from kvtop.runner.policy.speculation import spec_line, spec_phrases, speedup, tokens_per_pass

BASE = TurnMetrics(prompt_tokens=10, reused_tokens=0, prefill_tokens=10, prefill_s=0.1, prefill_tok_s=100.0,
                   template_s=0.0, tokenize_s=0.0, wait_s=0.0, ttft_s=0.2, decode_tokens=50, decode_s=1.0,
                   decode_tok_s=50.0, itl_p50_ms=20.0, itl_p95_ms=30.0, kv_cells_used=60, n_ctx=256)


def test_a_turn_that_did_not_speculate_has_no_line():
    assert spec_line(BASE) is None and speedup(BASE) is None


def test_a_paying_turn_says_tokens_per_pass_acceptance_and_the_speedup():
    # 48 drafted, 36 accepted in 15 passes: (36 + 15) / 15 = 3.4 tok/pass; 51 tokens in
    # 0.6 s against a 0.02 s plain step: 85 tok/s over 50 = 1.7x
    m = replace(BASE, spec_type="ngram-simple", spec_drafted=48, spec_accepted=36, spec_passes=15,
                spec_tokens=51, spec_s=0.6, spec_verify_s=0.5, spec_plain_step_s=0.02)
    assert tokens_per_pass(m) == 3.4
    assert spec_line(m) == "speculation: 3.4 tok/pass, 75% of 48 drafted accepted, 1.7x plain decode"


def test_a_costly_turn_says_by_how_much_and_what_a_verify_pass_costs():
    # 4 passes of 3 drafts (a batch of 4), 1 accepted: 5 tokens + 20 plain ones in 0.53 s;
    # plain step 0.02 s: 25 / 0.53 * 0.02 = 0.94x; a pass 0.026 s = 1.3x a plain step
    m = replace(BASE, spec_type="ngram-simple", spec_drafted=12, spec_accepted=1, spec_passes=4,
                spec_tokens=25, spec_s=0.53, spec_verify_s=0.104, spec_plain_step_s=0.02)
    assert spec_line(m) == ("speculation cost 6%: 8% of 12 drafted accepted, each verify pass of 4 tok costs "
                            "1.3x a plain step (measured)")


def test_nothing_drafted_says_so_and_what_the_lookups_took():
    # a trial read "nothing drafted this turn (cost 7%)": a cost with nothing drafted is
    # the drafter's lookups, and that is what the line names (0.09 s of 0.9 s)
    m = replace(BASE, spec_type="ngram-mod", spec_plain_steps=40, spec_tokens=40, spec_s=0.9, spec_draft_s=0.09,
                spec_plain_step_s=0.02)
    assert spec_line(m) == "speculation (ngram-mod): nothing drafted this turn; drafting took 10% of decode"
    assert "cost" not in spec_line(m)


def test_nothing_drafted_with_lookups_under_a_percent_says_only_that():
    m = replace(BASE, spec_type="ngram-simple", spec_plain_steps=40, spec_tokens=40, spec_s=0.9,
                spec_draft_s=0.001, spec_plain_step_s=0.02)
    assert spec_line(m) == "speculation (ngram-simple): nothing drafted this turn"


def test_every_phrase_fits_a_40_column_pane_and_they_join_into_the_line():
    for fields in (dict(spec_drafted=48, spec_accepted=36, spec_passes=15, spec_tokens=51, spec_s=0.6,
                        spec_verify_s=0.5, spec_plain_step_s=0.02),
                   dict(spec_drafted=12_345, spec_accepted=1, spec_passes=4_000, spec_tokens=25, spec_s=0.53,
                        spec_verify_s=0.104, spec_plain_step_s=0.02),
                   dict(spec_plain_steps=40, spec_tokens=40, spec_s=0.9, spec_draft_s=0.5, spec_plain_step_s=0.02)):
        m = replace(BASE, spec_type="ngram-map-k4v", **fields)
        phrases = spec_phrases(m)
        assert phrases and all(len(p) <= 40 for p in phrases), phrases
        assert " ".join(phrases) == spec_line(m)
