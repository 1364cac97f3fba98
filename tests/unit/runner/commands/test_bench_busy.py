"""``kvtop bench`` and the app pass the same busy test (runner.calibration.busy): a
bench test run while other processes took a quarter of the CPU is not a calibration
sample, and the bench says so in every output format (json/jsonl: a field; md, csv,
sql: a warning line on stderr, as their columns are llama-bench's)."""

import io
import json

import pytest

from kvtop.runner.calibration.busy import busy_run_note, too_busy
from kvtop.runner.commands.bench_busy import busy_fields, warn_if_busy
from kvtop.runner.commands.bench_output import format_json, format_jsonl
from kvtop.runner.physics.verdicts import BUSY_SHARE


def test_one_threshold_for_app_and_bench():
    assert BUSY_SHARE == 0.25
    assert [too_busy(x) for x in (None, 0.0, 0.24, 0.25, 0.48, 1.0)] == [False, False, False, True, True, True]


@pytest.mark.parametrize("fmt", ["md", "csv", "sql"])
def test_a_busy_run_warns_on_stderr_in_table_formats(fmt):
    err = io.StringIO()
    assert warn_if_busy("pp512", 0.48, fmt, err) is True
    assert err.getvalue() == ("kvtop bench: pp512: other processes used 48% of the CPU during this run: "
                              "figures are low (calibrated at that load)\n")
    quiet = io.StringIO()
    assert warn_if_busy("pp512", 0.1, fmt, quiet) is False and quiet.getvalue() == ""


@pytest.mark.parametrize("fmt,formatter", [("json", format_json), ("jsonl", format_jsonl)])
def test_a_busy_run_is_a_field_in_json_formats(fmt, formatter):
    err = io.StringIO()
    assert warn_if_busy("tg128", 0.48, fmt, err) is True and err.getvalue() == ""  # stdout stays parseable
    from test_bench_output import row as bench_row

    row = bench_row(0, 128)
    row.extras.update(busy_fields(0.48))  # as run_load adds them
    text = formatter([row])
    obj = json.loads(text)[0] if fmt == "json" else json.loads(text.splitlines()[0])
    assert obj["kvtop_others_cpu"] == 0.48
    assert obj["kvtop_busy"] == busy_run_note(0.48) == "other processes used 48% of the CPU during this run: figures are low"
    assert busy_fields(0.1) == {"kvtop_others_cpu": 0.1, "kvtop_busy": None}
    assert busy_fields(None) == {"kvtop_others_cpu": None, "kvtop_busy": None}


def _loaded(server=None):
    from dataclasses import replace

    from scripted_engine import smollm_loaded

    return replace(smollm_loaded("m.gguf"), server=server)


def test_a_busy_run_on_more_threads_than_free_cores_names_the_t_that_fits():
    """On 2 threads beside a busy machine the bench read tg 17.7 where the app on the one
    free core decoded 40-60, and said only "figures are low": where the run shows the
    threads outnumbered the free cores and did not get a core each, it names the -t."""
    from kvtop.runner.commands.bench_busy import thread_advice
    from kvtop.runner.system.cpu_use import CPUUse

    starved = CPUUse(engine=1.1, ui=0.0, others=1.0, cores=2)
    advice = thread_advice(starved, 2, _loaded())
    assert advice == "others held 1.0 of 2 cores: try -t 1"
    err = io.StringIO()
    assert warn_if_busy("tg128", starved.others_share, "md", err, advice=advice) is True
    assert err.getvalue() == ("kvtop bench: tg128: other processes used 50% of the CPU during this run: figures are low "
                              "(calibrated at that load); others held 1.0 of 2 cores: try -t 1\n")
    assert busy_fields(0.5, advice)["kvtop_busy"].endswith("figures are low; others held 1.0 of 2 cores: try -t 1")
    # what the measurement does not support is not advised
    assert thread_advice(CPUUse(engine=1.9, ui=0.0, others=1.0, cores=2), 2, _loaded()) == ""  # each got a core
    assert thread_advice(CPUUse(engine=1.0, ui=0.0, others=1.0, cores=2), 1, _loaded()) == ""  # already fits
    assert thread_advice(CPUUse(engine=3.0, ui=0.0, others=2.4, cores=8), 4, _loaded()) == ""  # 5 free cores
    assert thread_advice(starved, 2, _loaded(server="http://127.0.0.1:8080")) == ""  # a server's threads are its own
    assert thread_advice(CPUUse(engine=1.1, ui=0.0, others=None, cores=2), 2, _loaded()) == ""
    assert thread_advice(None, 2, _loaded()) == ""
