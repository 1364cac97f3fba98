"""``kvtop tune``'s result cache (runner.calibration.tune_store: one file per machine,
build, model and settings; any change is another file) and its summary lines and
recommended command line (runner.commands.tune_output), from recorded timings."""

import json

from kvtop.runner.calibration.tune_store import load_tune, save_tune, tune_path
from kvtop.runner.commands.tune_cache import measured
from kvtop.runner.commands.tune_measure import Sizes
from kvtop.runner.commands.tune_output import Outcome, _strip, recommended, summary_lines, verdict_text
from kvtop.runner.policy.tune_evidence import Measured
from kvtop.runner.policy.tuning import Base, Judgement, Metric, candidate_list
from kvtop.runner.settings import Settings

BASE = Base(2, 2, 512, 512, "auto")
CANDS = {c.flag: c for c in candidate_list(BASE, 2, False, 256)}
FA_WINS = Judgement(CANDS["-fa off"], {"decode": Metric((32.1, 32.9, 32.5), (55.0, 55.6, 55.3)),
                                       "prefill": Metric((410.0, 402.0, 405.0), (394.0, 392.0, 390.0))})
T1_SAME = Judgement(CANDS["-t 1"], {"decode": Metric((60.0, 62.0, 61.0), (61.0, 60.5, 61.5))})


def model_file(tmp_path, body=b"GGUF" + b"\0" * 64):
    p = tmp_path / "m.gguf"
    p.write_bytes(body)
    return str(p)


def test_a_result_is_kept_for_its_settings_only(tmp_path):
    s = Settings(model_file(tmp_path), n_threads=2)
    results = [measured(FA_WINS), measured(T1_SAME)]
    assert results == [Measured("-fa off", "flash_attn", "faster", FA_WINS.metrics["decode"].gain,
                                FA_WINS.metrics["prefill"].gain),
                       Measured("-t 1", "threads", "same", T1_SAME.metrics["decode"].gain, None)]
    save_tune(str(tmp_path), s, 512, results, now=123.0)
    ev = load_tune(str(tmp_path), s)
    assert ev is not None and ev.results == tuple(results) and ev.measured_at == 123.0 and ev.depth == 512
    # another setting, another model file: not this result
    assert load_tune(str(tmp_path), Settings(s.model, n_threads=1)) is None
    assert load_tune(str(tmp_path), Settings(s.model, n_threads=2, flash_attn="off")) is None
    other = tmp_path / "o"
    other.mkdir()
    assert load_tune(str(tmp_path), Settings(model_file(other, b"GGUF" + b"\1" * 64), n_threads=2)) is None
    # a broken or foreign file is ignored
    path = tune_path(str(tmp_path), s)
    with open(path, "w") as fh:
        fh.write("{not json")
    assert load_tune(str(tmp_path), s) is None
    with open(path, "w") as fh:
        json.dump({"version": 1, "measured_at": "x", "results": []}, fh)
    assert load_tune(str(tmp_path), s) is None


def test_a_busy_or_cut_candidate_is_cached_as_not_judged():
    busy = Judgement(CANDS["-fa off"], FA_WINS.metrics, busy=0.9)
    cut = Judgement(CANDS["-fa off"], FA_WINS.metrics, partial=True)
    assert measured(busy).verdict == "not judged" and measured(cut).verdict == "not judged"


def outcome(argv, judged, **kw):
    return Outcome("m.gguf", argv, kw.pop("base", BASE), Sizes(512, 256, 32, 3), 60, judged=judged, **kw)


def test_the_recommended_line_keeps_the_users_other_flags():
    argv = ["m.gguf", "-fa", "-c", "4096", "--budget", "20", "--depth=256", "-t", "2", "--mlock"]
    assert _strip(argv, "m.gguf") == ["-c", "4096", "--mlock"]
    line, wins = recommended(outcome(argv, [FA_WINS, T1_SAME]))
    assert line == "kvtop m.gguf -c 4096 --mlock -t 2 -tb 2 -fa off" and wins == [FA_WINS]
    lines = summary_lines(outcome(["m.gguf"], [FA_WINS, T1_SAME]))
    assert lines[0] == "`-fa off`: decode 1.70x, prefill 0.97x at depth 512 (spread decode 3%, prefill 3%): faster"
    assert lines[1].startswith("`-t 1`: decode 1.00x at depth 512") and lines[1].endswith(": no change beyond the spread")
    assert lines[2] == "recommended: kvtop m.gguf -fa off"
    assert lines[3] == "  (`-fa off`: decode 1.70x, prefill 0.97x at depth 512; each measured alone against your settings)"


def test_fewer_decode_threads_keep_the_prefill_threads():
    t1 = Judgement(CANDS["-t 1"], {"decode": Metric((30.0, 30.2), (45.0, 45.1))})
    assert recommended(outcome(["m.gguf"], [t1]))[0] == "kvtop m.gguf -t 1 -tb 2"


def test_nothing_judged_recommends_nothing():
    busy = Judgement(CANDS["-fa off"], FA_WINS.metrics, busy=0.91)
    lines = summary_lines(outcome([], [busy], skipped=[(CANDS["-t 1"], "the budget ran out")], stopped=True))
    assert verdict_text(busy, 512).endswith(": not judged, other processes used 91% of the CPU")
    assert "`-t 1`: not measured (the budget ran out; --budget 60)" in lines
    assert any(x.startswith("recommended: none yet") for x in lines)
    assert any(x.startswith("partial: stopped by Ctrl+C; 1 of 2 candidates measured") for x in lines)
