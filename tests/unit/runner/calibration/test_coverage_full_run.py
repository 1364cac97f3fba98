"""Issue 35's coverage benchmark, the full run (data/coverage_full_run.json: 30 turns of
64-3,000 prompt tokens per regime, SmolLM2 and Gemma-3, quiet / a ``yes`` on one core /
on both / one that stops and starts every 5 s), played again as the app plays it: from
an empty calibration per regime, each turn forecast at the load read before it (frozen),
then offered to the calibration at the load read through it.

Live, that run's forecasts priced the load read before a turn as it read, while the
samples were priced at what the load held through the turn: with both cores held the
median TTFT forecast was 1.42x (SmolLM2) and 1.52x (Gemma-3) of the measured, Gemma's
decode 0.71x. Goals (issue 35): 70-90% of the turns inside the 80% interval, the median
forecast/measured 0.8-1.25 after the 3rd turn, in every regime. A regime's share moves in
steps of one turn in 30 (3.3%): the coverage is held within one turn of 70-90%.

data/coverage_both_rerun.json is the live rerun of the "both" regime on the code that fixed
that (held_load): its Gemma-3 intervals held 97% of the turns for TTFT and decode, too
wide, one early 2.7x miss's square holding the spread up (fixed by the robust spread in
runner.calibration.interval)."""

import json
import os
import statistics

import pytest

from kvtop.runner.calibration.calibration import Calibration
from kvtop.runner.calibration.interval import inside, measured_ttft
from kvtop.runner.calibration.load import CPULoad
from kvtop.runner.calibration.pace import TurnLoad
from kvtop.runner.calibration.service import EngineSite, ForecastService
from kvtop.runner.events import TurnMetrics
from kvtop.runner.records.trace import Trace
from kvtop.runner.settings import Settings

DATA = os.path.join(os.path.dirname(__file__), "data", "coverage_full_run.json")
RERUN = os.path.join(os.path.dirname(__file__), "data", "coverage_both_rerun.json")
ONE_TURN = 1 / 30 + 1e-9


def _regimes(data=DATA):
    with open(data) as fh:
        rec = json.load(fh)
    out: dict[tuple[str, str], list] = {}
    for t in rec["turns"]:
        m = TurnMetrics(**dict(t["metrics"], ubatches=tuple(tuple(u) for u in t["metrics"]["ubatches"])))
        sent = CPULoad(t["sent_others"], rec["cores"]) if t["sent_others"] is not None else None
        load = TurnLoad(t["load"][0], t["load"][1], tuple(t["load"][2])) if t["load"] else None
        out.setdefault((t["model"], t["regime"]), []).append((m, sent, load))
    return rec, out


def _play(path, rec, turns, cache):
    from kvtop.runner.model.inspect import load_facts
    from kvtop.runner.physics.here import Here

    hw = Trace({"hardware": rec["hardware"]}, []).hardware
    facts = load_facts(path, need_weights=True)
    # the run's engine: 2 threads that follow the load (no -t, on its 2 cores), whatever this
    # test process's affinity (a pytest-xdist worker is pinned to one core)
    cores = rec["cores"]
    settings = Settings(path, n_ctx=rec["lengths"][1] + rec["n_gen"] + 64, n_threads=cores).resolved()
    service = ForecastService(Here.at(facts, hw, settings), Calibration(cache, {"replay": path}),
                              EngineSite(cores, cores, picks_threads=True))
    rows = []
    for i, (m, sent, load) in enumerate(turns, 1):
        fc = service.forecast(m.prompt_tokens, 0, m.decode_tokens, sent)
        service.admit(m, load, fc)
        rows.append((i, fc, m, inside(fc, m)))
    return rows


def _seen(data, model, path, tmp_path) -> dict:
    rec, regimes = _regimes(data)
    seen = {}
    for (label, regime), turns in regimes.items():
        if label != model:
            continue
        rows = _play(path, rec, turns, str(tmp_path / regime))
        t_cover = sum(t for *_, (t, _d) in rows) / len(rows)
        d_cover = sum(d for *_, (_t, d) in rows) / len(rows)
        t_ratio = statistics.median(fc.ttft_s / measured_ttft(m) for i, fc, m, _ in rows if i > 3)
        d_ratio = statistics.median(fc.decode_tok_s / m.decode_tok_s for i, fc, m, _ in rows if i > 3)
        seen[regime] = (len(rows), t_cover, d_cover, t_ratio, d_ratio)
    return seen


def _meets_the_goals(seen: dict, cover_slack: float) -> None:
    for regime, (_n, t_cover, d_cover, t_ratio, d_ratio) in seen.items():
        lo, hi = 0.7 - cover_slack, 0.9 + cover_slack
        assert lo <= t_cover <= hi and lo <= d_cover <= hi, (regime, seen)
        assert 0.8 <= t_ratio <= 1.25 and 0.8 <= d_ratio <= 1.25, (regime, seen)


@pytest.mark.parametrize("model", ["SmolLM2-135M Q4_1", "Gemma-3 270M Q4_K_M"])
def test_the_full_coverage_run_meets_the_goals_in_every_regime(model, smollm_path, gemma_path, tmp_path):
    seen = _seen(DATA, model, smollm_path if model.startswith("SmolLM2") else gemma_path, tmp_path)
    assert set(seen) == {"quiet", "one", "both", "flicker"} and all(v[0] == 30 for v in seen.values()), seen
    _meets_the_goals(seen, ONE_TURN)


@pytest.mark.parametrize("model", ["SmolLM2-135M Q4_1", "Gemma-3 270M Q4_K_M"])
def test_the_rerun_with_both_cores_held_meets_the_goals(model, smollm_path, gemma_path, tmp_path):
    seen = _seen(RERUN, model, smollm_path if model.startswith("SmolLM2") else gemma_path, tmp_path)
    assert set(seen) == {"both"} and seen["both"][0] == 30, seen
    _meets_the_goals(seen, ONE_TURN)
