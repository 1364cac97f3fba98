import pytest


@pytest.fixture
def write_trace(smollm_shaped):
    """``write_trace(path, turns=[...], new_chat_after=None)``: a valid trace of scripted
    turns on SmolLM2's facts, written with kvtop's own TraceWriter (no model run)."""
    from dataclasses import asdict

    from helpers import FIXED_HW
    from scripted_engine import scripted_turn, smollm_loaded

    from runner import events as ev
    from runner.model.inspect import load_facts
    from runner.records.trace import TraceWriter
    from runner.settings import Settings

    def write(path, turns=(("hi", ["Hello", " there"]),), new_chat_after=None) -> str:
        s = Settings(smollm_shaped, n_ctx=4096, n_threads=2).resolved()
        w = TraceWriter(str(path), {"argv": ["kvtop"], "settings": s.to_dict(), "hardware": FIXED_HW.to_dict(),
                                    "facts": asdict(load_facts(smollm_shaped))})
        w.event(ev.LoadProgress(1.0))
        w.event(smollm_loaded(smollm_shaped))
        for i, (text, pieces) in enumerate(turns, 1):
            w.user(text)
            for e in scripted_turn(i, 1000.0 * i, 30, 0, pieces):
                w.event(e)
            if new_chat_after == i:
                w.new_chat()
                w.event(ev.CacheCleared())
        w.close()
        return str(path)

    return write
