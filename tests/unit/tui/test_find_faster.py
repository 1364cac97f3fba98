"""The palette's "find faster settings" runs ``kvtop tune`` for the engine's own settings:
the flags it passes parse back, in ``kvtop tune``'s parser, to settings with the same
cache key, so the result it measures is the one the app's advice then finds."""

from dataclasses import replace

from kvtop.runner.calibration.tune_store import tune_key
from kvtop.runner.commands.llama_flags import prescan
from kvtop.runner.commands.tune import build_parser
from kvtop.runner.settings import Settings, settings_from_args
from kvtop.tui.turn.tuning import tune_argv


def test_the_flags_it_passes_key_the_same_result(tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF" + b"\0" * 64)
    p = build_parser()
    for s in (Settings(str(model)), Settings(str(model), n_threads=1, flash_attn="off", n_ubatch=128,
                                             cache_type_k="q8_0", cache_type_v="q8_0", mmap=False, swa_full=True)):
        s = s.resolved()
        kept, notes = prescan(tune_argv(s), p)
        a = p.parse_args(kept)
        assert notes == [] and a.model == str(model)
        back = settings_from_args(a.model, a).resolved()
        assert tune_key(back) == tune_key(s)
        assert (back.mmap, back.swa_full) == (s.mmap, s.swa_full)
    assert tune_key(replace(s, n_threads=2)) != tune_key(s)
