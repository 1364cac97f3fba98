"""The one forecast service (runner.calibration.service): what the app's prompt border,
its Estimate pane, ``kvtop estimate`` and ``kvtop bench`` forecast and learn, tested
without a screen. These were App pilot tests (tests/unit/tui/test_forecast_*.py); the
App's tests keep only what the screen shows of it."""

from dataclasses import replace

import pytest
from helpers import FIXED_HW
from scripted_engine import scripted_turn, smollm_loaded

from kvtop.runner.calibration.load import CPULoad
from kvtop.runner.calibration.service import Admission, EngineSite, ForecastService, admit, reply_tokens
from kvtop.runner.process.contract import LOCAL, SERVER
from kvtop.runner.session.site import engine_site, flags_site
from kvtop.runner.settings import Settings
from kvtop.tui.turn.forecasting import forecast_basis_line, forecast_line

BUSY = CPULoad.of_share(0.75, 2)  # others keep 1.5 of 2 cores busy
QUIET = CPULoad.of_share(0.05, 2)


def _here(model, n_ctx=4096, threads=2):
    from kvtop.runner.model.inspect import load_facts
    from kvtop.runner.physics.here import Here
    from kvtop.runner.physics.kv_bytes import kv_layout

    facts = load_facts(model)
    s = Settings(model, n_ctx=n_ctx, n_threads=threads).resolved()
    return Here(facts, kv_layout(facts, n_ctx, "f16", "f16", False, 512), FIXED_HW, s), s


def _service(model, tmp_path, threads=2, capabilities=LOCAL, loaded=None):
    here, s = _here(model, threads=threads)
    L = loaded or smollm_loaded(model)
    site = engine_site(L, capabilities, s, here.facts, here.hw)
    return ForecastService.open(here, s, str(tmp_path / "cache"), site)


def _metrics(model, prompt=600, pp=900.0, tg=80.0):
    return scripted_turn(1, 1000.0, prompt, 0, ["Hi"] * 10, pp_tok_s=pp, tg_tok_s=tg)[-1].metrics


def test_a_busy_machine_is_priced_and_the_border_says_to_use_fewer_threads(smollm_shaped, tmp_path):
    """-t 2, 1.5 of 2 cores held: slower than the quiet forecast, said before Enter with what to do."""
    fc = _service(smollm_shaped, tmp_path).forecast(8, 0, 256, BUSY)
    assert fc.others_cpu == 0.75 and fc.ttft_s > fc.quiet_ttft_s and fc.free_cores == 1
    assert "at today's load" in forecast_line(fc, 4096, 200)
    assert forecast_basis_line(fc, 200).endswith("others use 75% of the CPU; more threads than free cores: try -t 1 (not measured: kvtop tune)")


def test_a_quiet_machine_says_nothing_of_load(smollm_shaped, tmp_path):
    fc = _service(smollm_shaped, tmp_path).forecast(8, 0, 256, QUIET)
    assert fc.quiet_ttft_s is None and fc.others_cpu is None
    assert "load" not in forecast_line(fc, 4096, 200) and "CPU" not in forecast_basis_line(fc, 200)


def test_without_t_a_busy_turn_runs_on_the_free_cores_and_the_forecast_says_so(smollm_shaped, tmp_path):
    service = _service(smollm_shaped, tmp_path, threads=0)
    assert service.site.picks_threads
    assert service.turn_threads(BUSY) == (1, 1) and service.turn_threads(QUIET) is None
    fc = service.forecast(8, 0, 256, BUSY)
    assert fc.threads == (1, 1) and fc.free_cores is None
    title = forecast_basis_line(fc, 200)
    assert title.endswith("others use 75% of the CPU; runs on 1 thread, the free cores") and "try -t" not in title


def test_with_t_the_turn_keeps_its_threads_at_any_load(smollm_shaped, tmp_path):
    service = _service(smollm_shaped, tmp_path, threads=2)
    assert not service.site.picks_threads and service.turn_threads(BUSY) is None


def test_a_server_picks_its_own_threads_and_a_remote_one_is_not_priced_at_this_load(smollm_shaped, tmp_path):
    """The site comes from the engine's capabilities: a llama-server runs its own model,
    so kvtop never narrows its threads; one elsewhere is not slowed by this machine's load."""
    here_loaded = replace(smollm_loaded(smollm_shaped), server="http://127.0.0.1:8080")
    local_server = _service(smollm_shaped, tmp_path, threads=0, capabilities=SERVER, loaded=here_loaded)
    assert not local_server.site.picks_threads and local_server.turn_threads(BUSY) is None
    assert local_server.forecast(8, 0, 256, BUSY).others_cpu == 0.75  # on this CPU: priced
    remote = _service(smollm_shaped, tmp_path, capabilities=SERVER,
                      loaded=replace(here_loaded, server="http://10.1.2.3:8080"))
    assert remote.engine() is None and remote.forecast(8, 0, 256, BUSY).others_cpu is None
    assert remote.calibration.path != local_server.calibration.path  # each server's turns are its own


def test_an_unknown_cache_is_said_not_claimed_as_zero(smollm_shaped, tmp_path):
    service = _service(smollm_shaped, tmp_path)
    assert service.forecast(600, None, 10, None).cached_tokens is None
    assert service.forecast(600, 0, 10, None).cached_tokens == 0


def test_the_calibration_is_there_on_the_next_run(smollm_shaped, tmp_path):
    first = _service(smollm_shaped, tmp_path)
    assert first.forecast(600, 0, 10, None).basis == "roofline"
    assert first.admit(_metrics(smollm_shaped), 0.1) is Admission.ADDED
    again = _service(smollm_shaped, tmp_path)
    assert again.calibration.turns == 1
    fc = again.forecast(600, 0, 10, None)
    # the scripted machine prefilled 600 tokens at 900 tok/s: the forecast says so
    assert fc.basis == "calibrated" and abs(fc.prefill_tok_s / 900 - 1) < 0.05
    assert again.roofline(600, 0, 10).basis == "roofline"  # the pane's other column stays the hardware's


def test_a_turn_on_a_busy_machine_calibrates_at_its_load_and_one_whose_load_changed_is_refused(smollm_shaped, tmp_path):
    """Issue 35: a busy turn is a sample priced at its own load (every turn on a shared
    machine was refused, and the forecast stayed the roofline); only a turn whose load
    changed so much that no single price fits it is left out."""
    from kvtop.runner.calibration.pace import TurnLoad
    service = _service(smollm_shaped, tmp_path)
    assert service.admit(_metrics(smollm_shaped), 0.6) is Admission.ADDED
    assert _service(smollm_shaped, tmp_path).calibration.samples.prefill[0][3] == pytest.approx(1.2)  # cores held
    steady = TurnLoad(1.5, 2, (1.4, 1.5, 1.6))
    assert service.admit(_metrics(smollm_shaped), steady) is Admission.ADDED
    changed = TurnLoad(1.0, 2, (0.0, 0.1, 1.9, 2.0))  # a hog started halfway through
    assert service.admit(_metrics(smollm_shaped), changed) is Admission.UNSTEADY
    assert "the load changed while it ran (other processes used 0% to 100% of the CPU)" in service.refusal(
        _metrics(smollm_shaped), changed)
    assert service.calibration.turns == 2 and _service(smollm_shaped, tmp_path).calibration.turns == 2
    assert service.admit(_metrics(smollm_shaped), None) is Admission.ADDED  # not measured: not refused


def test_the_bench_calibrates_by_the_same_rule(smollm_shaped, tmp_path, monkeypatch):
    from kvtop.runner.calibration.calibration import calibration_for
    from kvtop.runner.commands.bench import record_calibration

    monkeypatch.setenv("KVTOP_HOME", str(tmp_path))
    from kvtop.runner.records.paths import default_paths

    s = Settings(smollm_shaped, n_ctx=4096, n_threads=2)
    record_calibration(s, [_metrics(smollm_shaped)], None, 0.6)  # busy: a sample at its load, as the app's
    cal = calibration_for(s, default_paths().cache_dir)
    assert cal.turns == 1 and cal.samples.prefill[0][3] is not None and cal.samples.prefill[0][3] > 0
    record_calibration(s, [_metrics(smollm_shaped)], None, 0.1)
    assert calibration_for(s, default_paths().cache_dir).turns == 2


def test_an_empty_turn_adds_nothing(smollm_shaped, tmp_path):
    service = _service(smollm_shaped, tmp_path)
    empty = replace(_metrics(smollm_shaped), prefill_tokens=0, prefill_s=0.0, decode_tokens=0, decode_tok_s=None,
                    ubatches=())
    assert admit(service.calibration, empty, 0.0) is Admission.EMPTY


@pytest.mark.parametrize("n_predict,n_ctx,reply", [(None, 4096, 256), (0, 4096, 256), (-1, 4096, 256), (40, 4096, 40),
                                                   (None, 256, 64), (None, None, 256)])
def test_the_reply_a_forecast_assumes_is_the_room_the_engine_keeps(n_predict, n_ctx, reply):
    """-c 256: the engine keeps a quarter of the context for the reply (no -n), so a
    ~50-token draft fits (a new user saw "does not fit in 256", then the turn ran)."""
    assert reply_tokens(n_predict, n_ctx) == reply


def test_a_draft_that_fits_in_a_small_context_says_so_and_one_that_does_not_is_refused(smollm_shaped, tmp_path):
    service = _service(smollm_shaped, tmp_path)
    fits = service.forecast(44, 0, reply_tokens(None, 256), None)
    assert "does not fit" not in forecast_line(fits, 256, 200) and "reply of 64" in forecast_line(fits, 256, 200)
    refused = service.forecast(260, 0, reply_tokens(None, 256), None)
    assert "does not fit" in forecast_line(refused, 256, 200)


def test_estimate_forecasts_for_the_flags_site(smollm_shaped):
    here, s = _here(smollm_shaped, threads=0)
    assert flags_site(s, here.facts, here.hw, None).picks_threads
    server = flags_site(s, here.facts, here.hw, "http://127.0.0.1:9")
    assert not server.picks_threads and server.on_this_cpu and server.calibration_engine == "http://127.0.0.1:9"
    assert not flags_site(s, here.facts, here.hw, "http://192.0.2.1:9").on_this_cpu
    assert EngineSite(2, 2).calibration_engine is None


def test_a_speculative_turn_keeps_its_acceptance_for_estimate_at_any_load(smollm_shaped, tmp_path):
    """issue 36: ``kvtop estimate --spec-type`` quotes the acceptance the app measured."""
    from dataclasses import replace

    from kvtop.runner.calibration.spec_store import load_measured

    svc = _service(smollm_shaped, tmp_path)
    m = replace(_metrics(smollm_shaped), spec_type="ngram-simple", spec_drafted=48, spec_accepted=36, spec_passes=3)
    svc.admit(m, 1.9)  # a busy turn: acceptance is the text's, not the CPU's
    svc.admit(_metrics(smollm_shaped), 0.05)  # a plain turn adds nothing
    got = load_measured(str(tmp_path / "cache"), smollm_shaped, "ngram-simple")
    assert got is not None and (got.drafted, got.accepted, got.passes, got.turns) == (48, 36, 3, 1)
