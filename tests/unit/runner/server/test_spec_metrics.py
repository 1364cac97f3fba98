"""A speculating llama-server's /metrics counters (runner/server/spec_metrics.py): read
as counts or not at all, rates between polls, a turn's timings."""

from kvtop.runner.server.spec_metrics import SpecWatch, parse_spec, spec_phrases, turn_spec_fields

TEXT = """# HELP llamacpp:spec_decode_num_draft_tokens_total Speculative: Total draft tokens generated
# TYPE llamacpp:spec_decode_num_draft_tokens_total counter
llamacpp:spec_decode_num_draft_tokens_total {d}
llamacpp:spec_decode_num_accepted_tokens_total {a}
llamacpp:spec_decode_num_drafts_total {n}
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="0"}} 3
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="1"}} 2
llamacpp:tokens_predicted_total 99
"""


def test_the_counters_and_the_rates_between_two_polls():
    w = SpecWatch()
    first = w.update(10.0, TEXT.format(d=48, a=36, n=4))
    assert first is not None and first.interval_s == 0 and first.drafted_s is None
    assert (first.totals.drafted, first.totals.accepted, first.totals.drafts, first.totals.per_pos) == (48, 36, 4, (3, 2))
    r = w.update(12.0, TEXT.format(d=68, a=46, n=6))
    assert r.drafted_s == 10.0 and r.accepted_s == 5.0 and r.acceptance_now == 0.5
    assert r.tokens_per_pass == 1 + 46 / 6 and r.per_pos_rates() == (0.5, 2 / 6)
    text = " ".join(spec_phrases(r))
    assert "speculation: 46 of 68 drafted accepted (68%)" in text and "by position 50% 33%" in text


def test_a_server_that_does_not_speculate_or_lies_has_no_counters():
    assert parse_spec("llamacpp:tokens_predicted_total 99\n") is None
    assert parse_spec(TEXT.format(d=-1, a=0, n=0)) is None
    assert parse_spec(TEXT.format(d="1e99", a=0, n=0)) is None
    assert spec_phrases(SpecWatch().update(1.0, TEXT.format(d=0, a=0, n=0))) == []


def test_a_restarted_servers_counters_start_the_rates_again():
    w = SpecWatch()
    w.update(1.0, TEXT.format(d=100, a=50, n=5))
    r = w.update(2.0, TEXT.format(d=10, a=5, n=1))
    assert r.interval_s == 0 and r.drafted_s is None


def test_a_turns_timings():
    assert turn_spec_fields({"predicted_n": 10}) == {}
    assert turn_spec_fields({"draft_n": 48, "draft_n_accepted": 36}) == {
        "spec_type": "llama-server", "spec_drafted": 48, "spec_accepted": 36}
    assert turn_spec_fields({"draft_n": 4, "draft_n_accepted": 9})["spec_accepted"] == 4  # never more than drafted
    assert turn_spec_fields({"draft_n": True}) == {}
