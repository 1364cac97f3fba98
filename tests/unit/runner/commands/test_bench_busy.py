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
