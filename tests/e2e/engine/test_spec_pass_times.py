"""A verify pass's tokens carry its one time (issue 36, the decode chart's bursts): the
real demo model speculating on a copy prompt. Stamped one by one as they were handed
over, a pass's tokens were 0.01-9 ms apart, and the chart took some of them for passes
of their own (a pass's mark one position late, its wait a stall)."""

import threading
from collections import Counter

from kvtop.runner.engine.engine import Engine
from kvtop.runner.settings import Settings
from kvtop.tui.base.decode_series import DecodeSeries

COPY = ("Repeat this text exactly, word for word: The quick brown fox jumps over the lazy dog. A journey "
        "of a thousand miles begins with a single step. All that glitters is not gold.")


def test_a_verify_pass_s_tokens_share_one_time_and_the_chart_counts_them(smollm_path):
    tokens = []

    def emit(e):
        if type(e).__name__ == "TokenEvent" and e.token_id >= 0:
            tokens.append(e)

    settings = Settings(model=smollm_path, n_predict=40, n_ctx=1024, temp=0.0, ignore_eos=True, spec_type="ngram-simple",
                        spec_ngram_simple_size_n=2, spec_ngram_simple_size_m=8)
    eng = Engine(settings, emit, threading.Event())  # ignore_eos: no end token kept in a pass but not shown
    eng.load()
    try:
        m = eng.chat([{"role": "user", "content": COPY}]).metrics
    finally:
        eng.close()
    assert m.spec_accepted > 0, "the test needs a pass that kept drafts"
    at_once = Counter(e.t for e in tokens)
    # each verify pass gives its accepted drafts and one more token, at one time
    assert sum(n - 1 for n in at_once.values()) == m.spec_accepted
    series = DecodeSeries()
    for e in tokens:
        series.add(e.pos, e.t)
    firsts = {min(e.pos for e in tokens if e.t == t): n for t, n in at_once.items() if n > 1}
    assert dict(series.passes) == firsts and series.stalls == []
