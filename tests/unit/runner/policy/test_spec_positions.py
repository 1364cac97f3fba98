"""The per-position acceptance line (F1, F2; the Server pane's from /metrics deltas)."""

from kvtop.runner.events import TurnMetrics
from kvtop.runner.policy.speculation import position_line, position_phrase


def test_the_share_of_passes_that_kept_each_position():
    assert position_phrase((23, 18, 10), 25) == "1 92% · 2 72% · 3 40%"
    assert position_phrase((), 3) is None and position_phrase((1,), 0) is None


def test_equal_shares_in_a_row_are_one_run_and_it_stops_after_the_first_none_kept():
    assert position_phrase((5, 2, 0, 0, 0), 5) == "1 100% · 2 40% · 3–5 0%"
    assert position_phrase((1,) * 27 + (0,) * 18, 1) == "1–27 100% · 28–45 0%"  # a pass of 45 kept 27
    assert position_phrase((4, 4, 0, 3), 4) == "1–2 100% · 3 0% …"
    assert position_phrase(tuple(range(20, 0, -1)), 20).endswith("8 65% …")


def test_a_turns_line():
    m = TurnMetrics(prompt_tokens=1, reused_tokens=0, prefill_tokens=1, prefill_s=0.1, prefill_tok_s=10.0,
                    template_s=0.0, tokenize_s=0.0, wait_s=0.0, ttft_s=0.1, decode_tokens=9, decode_s=0.1,
                    decode_tok_s=80.0, itl_p50_ms=None, itl_p95_ms=None, kv_cells_used=10, n_ctx=64,
                    spec_type="ngram-simple", spec_drafted=12, spec_accepted=6, spec_passes=4,
                    spec_accepted_per_pos=(4, 2, 0))
    assert position_line(m) == "accepted by position: 1 100% · 2 50% · 3 0%"
    assert position_line(TurnMetrics(**{**m.to_dict(), "spec_passes": 0, "spec_accepted_per_pos": ()})) is None
