"""A speculating llama-server's /metrics counters (runner/server/spec_metrics.py): read
as counts or not at all, rates between polls, a turn's timings."""

from kvtop.runner.server.spec_metrics import SpecWatch, parse_spec, spec_phrases, turn_spec_fields

BODY = """# HELP llamacpp:spec_decode_num_draft_tokens_total Speculative: Total draft tokens generated
# TYPE llamacpp:spec_decode_num_draft_tokens_total counter
llamacpp:spec_decode_num_draft_tokens_total {d}
llamacpp:spec_decode_num_accepted_tokens_total {a}
llamacpp:spec_decode_num_drafts_total {n}
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="0"}} {p0}
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="1"}} {p1}
llamacpp:tokens_predicted_total 99
"""


def metrics_text(d, a, n, p0=3, p1=2):
    return BODY.format(d=d, a=a, n=n, p0=p0, p1=p1)


def test_the_counters_and_the_rates_between_two_polls():
    w = SpecWatch()
    first = w.update(10.0, metrics_text(d=48, a=36, n=4))
    assert first is not None and first.interval_s == 0 and first.drafted_s is None
    assert (first.totals.drafted, first.totals.accepted, first.totals.drafts, first.totals.per_pos) == (48, 36, 4, (3, 2))
    r = w.update(12.0, metrics_text(d=68, a=46, n=6))
    assert r.drafted_s == 10.0 and r.accepted_s == 5.0 and r.acceptance_now == 0.5
    assert r.tokens_per_pass == 1 + 46 / 6 and r.per_pos_rates() == (0.5, 2 / 6)
    text = " ".join(spec_phrases(r))
    assert "speculation: 46 of 68 drafted accepted (68%)" in text
    # the per-position counts did not grow over the 2 passes: the last requests kept none there
    assert "accepted by position (last 2 passes): 1–2 0%" in text
    assert "accepted by position (since the server started): 1 75% · 2 50%" in " ".join(spec_phrases(first))


def test_per_position_acceptance_is_the_last_requests_delta_and_stays_until_the_next():
    """The server pane's positions are the /metrics deltas of the last passes (the issue:
    "…_per_pos_total{position} deltas"), kept over polls where nothing was verified."""
    w = SpecWatch()
    w.update(1.0, metrics_text(d=48, a=36, n=4, p0=4, p1=3))
    r = w.update(2.0, metrics_text(d=60, a=44, n=8, p0=8, p1=6))  # 4 passes: position 1 kept 4, position 2 kept 3
    line = " ".join(spec_phrases(r))
    assert "accepted by position (last 4 passes): 1 100% · 2 75%" in line
    r = w.update(3.0, metrics_text(d=60, a=44, n=8, p0=8, p1=6))  # idle: the last requests' stay
    assert r.recent == (4, (4, 3)) and "(last 4 passes): 1 100% · 2 75%" in " ".join(spec_phrases(r))
    r = w.update(4.0, metrics_text(d=61, a=44, n=9, p0=8, p1=6))  # one pass kept nothing
    assert "(last 1 pass): 1–2 0%" in " ".join(spec_phrases(r))


def test_a_server_that_does_not_speculate_or_lies_has_no_counters():
    assert parse_spec("llamacpp:tokens_predicted_total 99\n") is None
    assert parse_spec(metrics_text(d=-1, a=0, n=0)) is None
    assert parse_spec(metrics_text(d="1e99", a=0, n=0)) is None
    assert spec_phrases(SpecWatch().update(1.0, metrics_text(d=0, a=0, n=0))) == []


def test_a_restarted_servers_counters_start_the_rates_again():
    w = SpecWatch()
    w.update(1.0, metrics_text(d=100, a=50, n=5))
    r = w.update(2.0, metrics_text(d=10, a=5, n=1))
    assert r.interval_s == 0 and r.drafted_s is None


def test_a_turns_timings():
    assert turn_spec_fields({"predicted_n": 10}) == {}
    assert turn_spec_fields({"draft_n": 48, "draft_n_accepted": 36}) == {
        "spec_type": "llama-server", "spec_drafted": 48, "spec_accepted": 36}
    assert turn_spec_fields({"draft_n": 4, "draft_n_accepted": 9})["spec_accepted"] == 4  # never more than drafted
    assert turn_spec_fields({"draft_n": True}) == {}
