"""The memory probe lives in runner.system (the pane only draws it)."""

import os


def test_take_sample_of_this_process():
    from kvtop.runner.system.memory import MemorySample, take_sample

    s = take_sample(os.getpid(), os.getpid(), same_process=True)
    assert isinstance(s, MemorySample)
    assert s.engine_rss > 10 * 2**20 and s.ui_rss is None  # same process: no second UI figure
    assert s.system.total > 0 and (s.gpus or s.gpu_note)
    two = take_sample(None, os.getpid())
    assert two.engine_rss is None and two.ui_rss > 0
