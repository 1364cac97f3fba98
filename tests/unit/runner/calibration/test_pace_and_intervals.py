"""Issue 35: every turn teaches at its own load (runner.calibration.pace), servers are
their own machines, and every forecast carries an 80% interval from the calibration's
own residuals (runner.calibration.interval)."""

import math
from dataclasses import replace

import pytest
from helpers import FIXED_HW
from scripted_engine import scripted_turn, smollm_loaded

from kvtop.runner.calibration.forecast import Basis, Forecaster
from kvtop.runner.calibration.interval import interval, residual_of, with_interval
from kvtop.runner.calibration.load import CPULoad
from kvtop.runner.calibration.pace import TurnLoad, price
from kvtop.runner.calibration.samples import samples_from_turn
from kvtop.runner.calibration.service import Admission, ForecastService
from kvtop.runner.calibration.store import Samples, load_samples
from kvtop.runner.process.contract import LOCAL, SERVER
from kvtop.runner.session.site import engine_site
from kvtop.runner.settings import Settings

ROOF = Basis(lambda n, d: n * (1e-3 + 1e-7 * (d + n / 2)), lambda d: 5e-3 + 1e-6 * d, 512)


def _machine_turn(prompt: int, others: float, g: float, threads=(2, 2), cores=2):
    """A turn of a machine 1.8x the roofline's prefill and 1.3x its decode, slowed at a load
    by the pace model's shape to the strength ``g`` (its own: not the prior's 1)."""
    from kvtop.runner.events import TurnMetrics

    k_pre = price(others, cores, threads[1], threads[1], True, g)
    k_tok = price(others, cores, threads[0], threads[0], False, g)
    ub, depth = [], 0
    while depth < prompt:
        n = min(512, prompt - depth)
        ub.append((n, 1.8 * ROOF.prefill_s(n, depth) * k_pre))
        depth += n
    pre = sum(s for _, s in ub)
    dec = sum(1.3 * ROOF.token_s(prompt + i) * k_tok for i in range(31))
    return TurnMetrics(prompt_tokens=prompt, reused_tokens=0, prefill_tokens=prompt, prefill_s=pre,
                       prefill_tok_s=prompt / pre, template_s=0.0, tokenize_s=0.0, wait_s=0.0, ttft_s=pre,
                       decode_tokens=32, decode_s=dec, decode_tok_s=31 / dec, itl_p50_ms=None, itl_p95_ms=None,
                       kv_cells_used=prompt + 32, n_ctx=8192, ubatches=tuple(ub), n_threads=threads[0],
                       n_threads_batch=threads[1])


def _samples(turns):
    s = Samples()
    for prompt, others, g in turns:
        s.add(samples_from_turn(_machine_turn(prompt, others, g), TurnLoad(others, 2)))
    return s


def test_busy_turns_alone_are_brought_to_quiet_by_the_price_they_ran_at():
    """Only turns with 1.5 of 2 cores held (as the prior shape says): the quiet forecast is the machine's."""
    fc = Forecaster(ROOF, _samples([(p, 1.5, 1.0) for p in (300, 900, 1500)]), (2, 2))
    quiet = _machine_turn(700, 0.0, 1.0)
    got = fc.forecast(700, 0, 32)
    assert got.ttft_s / quiet.ttft_s == pytest.approx(1.0, abs=0.03)
    assert got.decode_tok_s / quiet.decode_tok_s == pytest.approx(1.0, abs=0.03)
    assert fc.pace.g_prefill == pytest.approx(1.0) and fc.pace.n_prefill > 0  # one load: g keeps its prior


def test_quiet_and_busy_turns_of_the_same_settings_fit_the_price_itself():
    """A machine whose load costs more than the shape (g = 1.6): quiet turns pin the
    efficiency, busy ones at two loads then say g; the busy forecast follows."""
    turns = [(p, 0.0, 1.6) for p in (200, 800)] + [(p, o, 1.6) for p in (400, 1200) for o in (1.0, 1.9)]
    fc = Forecaster(ROOF, _samples(turns), (2, 2))
    assert fc.pace.g_prefill == pytest.approx(1.6, abs=0.25) and fc.pace.g_decode == pytest.approx(1.6, abs=0.25)
    prior = Forecaster(ROOF, _samples(turns[:2]), (2, 2)).pace
    assert prior.g_prefill == 1.0 and prior.n_prefill == 0  # quiet turns alone: nothing to fit it from


def _service(model, tmp_path, loaded=None, capabilities=LOCAL):
    from kvtop.runner.model.inspect import load_facts
    from kvtop.runner.physics.here import Here
    from kvtop.runner.physics.kv_bytes import kv_layout

    facts = load_facts(model)
    s = Settings(model, n_ctx=4096, n_threads=2).resolved()
    here = Here(facts, kv_layout(facts, 4096, "f16", "f16", False, 512), FIXED_HW, s)
    L = loaded or smollm_loaded(model)
    return ForecastService.open(here, s, str(tmp_path / "cache"), engine_site(L, capabilities, s, here.facts, here.hw))


def _turn(prompt, pp, tg):
    return scripted_turn(1, 1000.0, prompt, 0, ["Hi"] * 10, pp_tok_s=pp, tg_tok_s=tg)[-1].metrics


def test_a_servers_samples_never_change_the_local_forecast(smollm_shaped, tmp_path):
    """Issue 35 item 2: a --server turn calibrates that server (its own key), never the local engine."""
    local = _service(smollm_shaped, tmp_path)
    local.admit(_turn(600, 900.0, 80.0), 0.1)
    before = local.forecast(600, 0, 64, None)
    remote_loaded = replace(smollm_loaded(smollm_shaped), server="http://10.1.2.3:8080")
    remote = _service(smollm_shaped, tmp_path, remote_loaded, SERVER)
    for _ in range(3):
        assert remote.admit(_turn(600, 90.0, 8.0), TurnLoad(1.9, 2)) is Admission.ADDED
    again = _service(smollm_shaped, tmp_path)
    assert again.forecast(600, 0, 64, None) == before and again.calibration.turns == 1
    assert remote.calibration.turns == 3 and remote.calibration.path != again.calibration.path
    # this machine's load is not the remote server's: its samples keep none, its forecast says so
    assert all(o is None for *_, o, _t in load_samples(remote.calibration.path).prefill)
    fc = remote.forecast(600, 0, 64, CPULoad.of_share(0.9, 2))
    assert fc.others_cpu is None and fc.label() == "calibrated on 3 turns at the server's load"


def test_a_local_servers_turns_are_priced_at_this_machines_load(smollm_shaped, tmp_path):
    """A llama-server on loopback shares this CPU: its busy turns are brought to quiet as the app's are."""
    here_loaded = replace(smollm_loaded(smollm_shaped), server="http://127.0.0.1:8080")
    server = _service(smollm_shaped, tmp_path, here_loaded, SERVER)
    sent = server.forecast(600, 0, 64, CPULoad.of_share(0.75, 2))  # frozen at Enter: 1.5 cores busy before it
    server.admit(_turn(600, 300.0, 30.0), TurnLoad(1.5, 2), sent)  # and they held 1.5 through it
    assert load_samples(server.calibration.path).prefill[0][3] == 1.5
    assert load_samples(server.calibration.path).held == [(1.5, 1.5, 0, 0)]
    fc = server.forecast(600, 0, 64, None)
    assert fc.prefill_tok_s > 300.0 * 1.5  # quiet: faster than it ran with 1.5 cores held
    assert server.forecast(600, 0, 64, CPULoad.of_share(0.75, 2)).ttft_s == pytest.approx(
        600 / 300.0 + fc.ttft_s - fc.prefill_s, rel=0.1)  # at the load it ran at: what it measured


def test_a_load_read_before_a_turn_is_priced_as_what_it_holds_through_it(smollm_shaped, tmp_path):
    """Issue 35's full run: two ``yes`` on 2 cores read as 2.0 cores before a turn but held
    1.18-1.33 through it, beside the engine's one thread; the samples are priced at the
    latter, the forecast was priced at the former, and TTFT was forecast 1.42x (SmolLM2)
    and 1.52x (Gemma-3) of the measured. Without an earlier turn at that load the even
    share says what they will hold; after one, what they held."""
    from kvtop.runner.calibration.load import held_load
    from kvtop.runner.system.cpu_pace import held_beside

    assert held_beside(1.0, 2, 1) == 1.0  # one yes beside one thread: room for both
    assert held_beside(2.0, 2, 1) == pytest.approx(4 / 3)  # three runnable threads on two cores
    assert held_load(2.0, 2, 1, [(2.0, 1.2, 1, 1)]) == pytest.approx(1.2)  # learned
    assert held_load(2.0, 2, 1, [(2.0, 1.2, 2, 2)]) == pytest.approx(4 / 3)  # other threads: not the same
    assert held_load(1.75, 2, 2, [(1.7, 1.7, 2, 2)]) == pytest.approx(1.75)  # busy neighbours stay busy
    service = _service(smollm_shaped, tmp_path)
    both = CPULoad(2.0, 2)
    first = service.forecast(600, 0, 64, both)
    service.admit(replace(_turn(600, 150.0, 40.0), n_threads=1, n_threads_batch=1), TurnLoad(1.2, 2), first)
    assert service.calibration.samples.held == [(2.0, 1.2, 1, 1)]
    again = service.forecast(600, 0, 64, both)  # the load before it as the turn held it: what it measured
    assert again.prefill_s == pytest.approx(600 / 150.0, rel=0.1)


def test_an_interval_is_wide_on_few_turns_and_narrows_as_residuals_come():
    none, few = interval([]), interval([0.05, -0.05])
    many = interval([0.05, -0.05, 0.02, -0.03, 0.04, -0.01, 0.0, 0.03, -0.04, 0.01] * 3)
    assert none.high / none.low > few.high / few.low > many.high / many.low
    assert none.low < 0.65 and none.high > 1.6  # no residual yet: the prior, about +-70%
    assert 0.85 < many.low < 1.0 < many.high < 1.15
    biased = interval([0.4] * 10)  # a calibration 1.5x short at this load says so
    assert biased.low > 1.0 and math.log(biased.high) > 0.4


def test_one_wild_miss_does_not_hold_the_interval_wide_but_wide_misses_do():
    tight = [0.05, -0.05, 0.02, -0.03, 0.04, -0.01, 0.0, 0.03, -0.04, 0.01, 0.02, -0.02]
    calm = interval(tight)
    wild = interval([-1.0, *tight])  # one early forecast off by 2.7x, then the calibration learned
    assert wild.high / wild.low < 1.5 * (calm.high / calm.low), (calm, wild)
    wide = interval([0.4, -0.4, 0.35, -0.3, 0.45, -0.5, 0.3, -0.35, 0.4, -0.45, 0.3, -0.4])
    assert math.log(wide.high) > 0.5 and math.log(wide.low) < -0.5  # all misses large: it stays wide


def test_every_forecast_carries_an_interval_and_says_how_many_turns_it_rests_on(smollm_shaped, tmp_path):
    service = _service(smollm_shaped, tmp_path)
    roof = service.forecast(600, 0, 64, None)
    assert roof.ttft_s_low == roof.ttft_s and roof.ttft_s_high > 10 * roof.ttft_s and roof.interval_n == 0
    service.admit(_turn(600, 900.0, 80.0), 0.1, roof)  # the roofline's miss is no residual
    first = service.forecast(600, 0, 64, None)
    assert service.calibration.samples.residuals == [] and first.interval_n == 0
    assert first.ttft_s_low < first.ttft_s < first.ttft_s_high and "no turn at this load yet: wide" in first.interval_text()
    for pp in (850.0, 950.0, 900.0, 880.0):
        fc = service.forecast(600, 0, 64, None)
        service.admit(_turn(600, pp, 80.0), 0.1, fc)
    last = service.forecast(600, 0, 64, None)
    assert last.interval_n == 4 and "(4 turns at this load)" in last.interval_text()
    assert last.ttft_s_high / last.ttft_s_low < first.ttft_s_high / first.ttft_s_low
    d = last.to_dict()
    assert d["ttft_s_low"] < d["ttft_s"] < d["ttft_s_high"] and d["decode_tok_s_low"] < d["decode_tok_s_high"]
    busy = service.forecast(600, 0, 64, CPULoad.of_share(0.75, 2))  # no residual at this load: wide again
    assert busy.interval_n == 0 and busy.ttft_s_high / busy.ttft_s_low > last.ttft_s_high / last.ttft_s_low


def test_a_residual_is_the_frozen_forecasts_miss():
    m = _machine_turn(700, 0.0, 1.0)
    fc = with_interval(Forecaster(ROOF, _samples([(700, 0.0, 1.0)]), (2, 2)).forecast(700, 0, 32), [])
    r_t, r_d, load = residual_of(replace(fc, ttft_s=fc.ttft_s * 2), m)
    assert r_t == pytest.approx(-math.log(2), abs=0.01) and abs(r_d) < 0.02 and load == 0.0
