"""Every interval in runner.pacing; the older homes re-export it, nobody keeps a copy."""

import kvtop.runner.pacing as pacing
from kvtop.runner.pacing import chart_interval, prefill_interval, refresh_interval


def test_intervals():
    assert pacing.BATCH_S == 0.25
    assert (pacing.MIN_S, pacing.MAX_S) == (pacing.BATCH_S, 10.0)
    assert pacing.CHAT_INTERVAL_S == 10.0 and pacing.MEMORY_SAMPLE_S == 1.0


def test_the_redraw_pace():
    assert refresh_interval(None, 2, 2) == (1.0, "2 decode threads on 2 cores")
    assert refresh_interval(None, 8, 16) == (0.25, "8 of 16 cores spare")
    assert refresh_interval(0.5, 2, 2) == (0.5, "set by --refresh")
    # values from elsewhere than the command line are held to --refresh's bounds
    assert refresh_interval(0.001, 2, 2)[0] == 0.25 and refresh_interval(1000, 2, 2)[0] == 10.0
    assert chart_interval(1.0) == 4.0 and chart_interval(0.1) == 1.0
    assert prefill_interval(1.0) == 0.5 and prefill_interval(0.25) == 0.25


def test_the_engine_batches_tokens_at_the_pace_the_ui_assumes():
    """``--refresh``'s floor is the engine's token batch: the child batches at it."""
    from kvtop.runner.process import child

    assert child.BATCH_S is pacing.BATCH_S and pacing.MIN_S == pacing.BATCH_S
