"""The forecast on turns recorded on a machine that is never quiet (issue 35): the
development machine (2 cores) with its neighbours holding 83-90% of the CPU, and a
``yes`` on one core, on both, or starting and stopping every 5 s (data/recorded_turns.json,
recorded by ``bench/forecast_accuracy.py --coverage --record``). Each regime is played
again as the app plays it: from an empty calibration, each turn is forecast at the load
measured before it (frozen), then offered to the calibration at the load read through it.

Before issue 35 every one of these turns was refused (others held a quarter of the CPU
or more), and the forecast stayed the roofline for good."""

import json
import os
import statistics

import pytest
from helpers import FIXED_HW

from kvtop.runner.calibration.calibration import Calibration
from kvtop.runner.calibration.interval import inside, measured_ttft
from kvtop.runner.calibration.load import CPULoad
from kvtop.runner.calibration.pace import TurnLoad
from kvtop.runner.calibration.service import Admission, EngineSite, ForecastService
from kvtop.runner.events import TurnMetrics
from kvtop.runner.settings import Settings

DATA = os.path.join(os.path.dirname(__file__), "data", "recorded_turns.json")


def _recorded():
    with open(DATA) as fh:
        rec = json.load(fh)["smollm"]  # the saturated run
    by_regime: dict[str, list] = {}
    for t in rec["turns"]:
        m = dict(t["metrics"], ubatches=tuple(tuple(u) for u in t["metrics"]["ubatches"]))
        load = TurnLoad(t["load"][0], t["load"][1], tuple(t["load"][2])) if t["load"] else None
        by_regime.setdefault(t["regime"], []).append((TurnMetrics(**m), t["sent_others"], load))
    return rec["cores"], by_regime


def _service(model, cache):
    from kvtop.runner.model.inspect import load_facts
    from kvtop.runner.physics.here import Here

    facts = load_facts(model)
    s = Settings(model, n_ctx=1024 + 16 + 64, n_threads=2).resolved()
    cal = Calibration(cache, {"recorded": "smollm"})
    return ForecastService(Here.at(facts, FIXED_HW, s), cal, EngineSite(2, 2, picks_threads=True))


def _play(model, tmp_path, turns, cores):
    service = _service(model, str(tmp_path))
    out = []
    for i, (m, sent, load) in enumerate(turns, 1):
        before = CPULoad(sent, cores) if sent is not None else None
        fc = service.forecast(m.prompt_tokens, 0, m.decode_tokens, before)
        out.append((i, fc, m, service.admit(m, load, fc)))
    return out


def test_every_recorded_busy_turn_teaches_and_the_forecast_leaves_the_roofline(smollm_shaped, tmp_path):
    cores, regimes = _recorded()
    for regime, turns in regimes.items():
        played = _play(smollm_shaped, tmp_path / regime, turns, cores)
        assert all(a is Admission.ADDED for *_, a in played), regime  # a steady (saturated) load: one price fits
        assert played[0][1].basis == "roofline" and all(fc.basis == "calibrated" for _, fc, *_ in played[1:])
        first_ratio = played[0][1].ttft_s / measured_ttft(played[0][2])
        later = [fc.ttft_s / measured_ttft(m) for i, fc, m, _ in played if i > 3]
        assert first_ratio < 0.2 and 0.7 < statistics.median(later) < 1.5, (regime, first_ratio, later)


def test_the_80_percent_interval_covers_the_recorded_turns(smollm_shaped, tmp_path):
    """Pooled over the four regimes (8 turns each, the first one the roofline's): the share
    of turns inside the interval, TTFT and decode, and the median forecast/measured after
    the 3rd turn. Goal per regime (issue 35): 70-90% inside, 0.8-1.25; on 8 turns a
    regime's share moves in steps of 12.5%, so the pooled figures are what is held here.
    On so few turns the interval is wide by design (few residuals): its width is held
    too, so that coverage cannot come from an interval wide enough to hold anything."""
    cores, regimes = _recorded()
    t_in, d_in, t_ratio, d_ratio, widths = [], [], [], [], []
    for regime, turns in regimes.items():
        for i, fc, m, _ in _play(smollm_shaped, tmp_path / regime, turns, cores):
            t, d = inside(fc, m)
            t_in.append(t)
            d_in.append(d)
            if i > 1:
                widths.append((i, (fc.ttft_s_high - fc.ttft_s_low) / fc.ttft_s))
            if i > 3:
                t_ratio.append(fc.ttft_s / measured_ttft(m))
                d_ratio.append(fc.decode_tok_s / m.decode_tok_s)
    assert None not in t_in + d_in
    assert sum(t_in) / len(t_in) >= 0.7 and sum(d_in) / len(d_in) >= 0.7, (t_in, d_in)
    early = statistics.median(w for i, w in widths if i <= 3)
    late = statistics.median(w for i, w in widths if i >= 6)
    # narrower as the turns come (0.59 before the forecast priced a load read before a turn
    # as what it holds through it, 0.63 after: this saturated run's 2nd turn has no earlier
    # turn to learn that from, and its miss stays among the residuals)
    assert late < 0.65 and late < early / 1.5, (early, late)
    assert statistics.median(t_ratio) == pytest.approx(1.0, abs=0.25)
    assert statistics.median(d_ratio) == pytest.approx(1.0, abs=0.25)


def test_a_calibration_fitted_only_from_busy_recorded_turns_forecasts_the_quiet_ones(gemma_path, tmp_path):
    """Issue 35: Gemma-3's turns recorded with a ``yes`` on one core or both (others held
    40-67% of the CPU; most turns ran on 1 thread, the free core) calibrate alone; the
    turns recorded quiet (others under 5%, on 2 threads) are then forecast by it: the
    median forecast/measured within 0.8-1.25, TTFT and decode. Before issue 35 none of
    the busy turns was a sample, and the forecast was the roofline."""
    with open(DATA) as fh:
        rec = json.load(fh)["gemma"]
    turns = [(TurnMetrics(**dict(t["metrics"], ubatches=tuple(tuple(u) for u in t["metrics"]["ubatches"]))),
              TurnLoad(t["load"][0], t["load"][1], tuple(t["load"][2]))) for t in rec["turns"]]
    busy = [(m, load) for m, load in turns if load.share >= 0.4]
    quiet = [m for m, load in turns if load.share < 0.05]
    assert len(busy) >= 12 and len(quiet) >= 6 and sum(m.n_threads == 1 for m, _ in busy) >= len(busy) / 2

    from kvtop.runner.model.inspect import load_facts
    from kvtop.runner.physics.here import Here

    s = Settings(gemma_path, n_ctx=512 + 16 + 64, n_threads=2).resolved()
    service = ForecastService(Here.at(load_facts(gemma_path), FIXED_HW, s), Calibration(str(tmp_path), {"g": 1}),
                              EngineSite(2, 2, picks_threads=True))
    for m, load in busy:
        assert service.admit(m, load) is Admission.ADDED
    t_ratio, d_ratio = [], []
    for m in quiet:
        fc = service.forecast(m.prompt_tokens, 0, m.decode_tokens, None)
        assert fc.basis == "calibrated" and fc.others_cpu is None  # a quiet machine's forecast
        t_ratio.append(fc.ttft_s / measured_ttft(m))
        d_ratio.append(fc.decode_tok_s / m.decode_tok_s)
    assert 0.8 <= statistics.median(t_ratio) <= 1.25, t_ratio
    assert 0.8 <= statistics.median(d_ratio) <= 1.25, d_ratio
