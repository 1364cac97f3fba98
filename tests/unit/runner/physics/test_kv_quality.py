"""The KV pane's quality line and the Estimate pane's advice (runner/physics/kv_quality.py),
and the kept measurement they read, as the issue words them."""

from kvtop.runner.commands.kld_cache import row_text
from kvtop.runner.physics.kv_quality import Quality, advice, entry, kept, line

MIB = 1 << 20
Q8 = Quality("q8_0", "q8_0", "f16", "f16", 1203, 0.00093, 0.0081, 0.993, 1204, True,
             int(5.6 * MIB), int(10.6 * MIB), 2048)


def test_the_line_says_bytes_kld_and_the_tokens_it_rests_on():
    assert line(Q8, ("f16", "f16")) == ("q8_0/q8_0: \u221247% KV (5.60 MiB at 2,048), KLD 0.0009 (99%: 0.008), "
                                        "same top token 99.3% over this chat's 1,204 tokens")
    running = line(Q8, ("q8_0", "q8_0"))
    assert running.startswith("q8_0/q8_0 (running): ") and "99.3% against f16/f16 over" in running


def test_the_advice_says_what_the_cheaper_cache_buys_or_what_the_running_one_costs():
    assert advice([Q8], ("f16", "f16")) == ("-ctk q8_0 -ctv q8_0 would fit 1.9x the context at KLD 0.0009 "
                                            "(same top token 99.3%), measured here")
    assert advice([Q8], ("q8_0", "q8_0")) == ("-ctk q8_0 -ctv q8_0 costs KLD 0.0009 against f16/f16 "
                                              "(same top token 99.3%), measured here")
    assert advice([], ("f16", "f16")) == ""


def test_the_kept_one_on_the_most_positions_wins_and_estimate_names_the_chat():
    small = entry(Quality("q8_0", "q8_0", "f16", "f16", 99, 0.002, 0.01, 0.98, 100, True), 0.01, "a" * 64)
    big = entry(Q8, 0.011, "b" * 64)
    other_base = {**big, "base_type_k": "q8_0", "count": 10**6}
    assert kept([small, big, other_base], ("f16", "f16"), ("q8_0", "q8_0")) == big
    assert kept([small], ("f16", "f16"), ("q4_0", "q4_0")) is None
    text = row_text({"type_k": "q8_0", "type_v": "q8_0", "measured": big})
    assert text.endswith("over 1,203 tokens (F7 on a chat of 1,204 tokens)")
