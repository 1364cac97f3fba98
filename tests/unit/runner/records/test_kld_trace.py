"""The KV quality measurement in a trace, a replay and a debug bundle (issue 37 item 5):
``KldMeasured`` is written to the trace, passes its number checks and comes back equal; a
replay's KV pane shows the quality line the live run showed; the redacted bundle's trace
keeps the numbers, and nothing of a token or the chat's text was there to begin with."""

import dataclasses
import json

import pytest
from helpers import make_app, wait_until

from kvtop.runner import events as ev
from kvtop.runner.records import trace_check
from kvtop.runner.records.trace import read_bundle_trace, read_trace
from kvtop.runner.redact import Redactor

MEASURED = ev.KldMeasured(7, 1204, 1204, "f16", "f16", (
    ev.KldPair("q8_0", "q8_0", 1203, 0.00093, 0.0081, 0.993, 0.011),
    ev.KldPair("q4_0", "q4_0", error="-ctk q4_0 -ctv q4_0 (-fa off): quantized V cache requires flash_attn")),
    12.5, None, 1010.0)


def _with_measurement(write_trace, path):
    write_trace(path)
    with open(path, "a", encoding="utf-8") as fh:  # as TraceWriter.event writes it, after the turn
        fh.write(json.dumps({"type": "event", "event": "KldMeasured", "data": dataclasses.asdict(MEASURED)}) + "\n")
    return str(path)


def test_the_measurement_round_trips_through_a_trace(tmp_path, write_trace):
    trace = read_trace(_with_measurement(write_trace, tmp_path / "t.jsonl"))
    assert [obj for kind, obj in trace.records if isinstance(obj, ev.KldMeasured)] == [MEASURED]


def test_a_nan_kld_is_refused_by_the_trace_check():
    data = json.loads(json.dumps(dataclasses.asdict(MEASURED)))
    data["pairs"][0]["kld_mean"] = float("nan")
    with pytest.raises(trace_check._Bad, match="kld_mean"):
        trace_check.check_record(ev.KldMeasured, data)


def test_the_trace_writer_writes_it(tmp_path):
    from kvtop.runner.records.trace import TraceWriter

    w = TraceWriter(str(tmp_path / "w.jsonl"), {"argv": ["kvtop"]})
    w.event(MEASURED)
    w.close()
    (line,) = (tmp_path / "w.jsonl").read_text().splitlines()[1:]
    assert json.loads(line) == {"type": "event", "event": "KldMeasured",
                                "data": json.loads(json.dumps(dataclasses.asdict(MEASURED)))}


async def test_a_replay_and_a_redacted_bundle_show_the_quality_line(tmp_path, write_trace):
    from kvtop.runner.commands.bundle import trace_records
    from kvtop.runner.records.replay import ReplayEngine

    path = _with_measurement(write_trace, tmp_path / "t.jsonl")
    records = [Redactor().trace_record(x) for x in trace_records(path)]
    (kept,) = [r for r in records if r.get("event") == "KldMeasured"]
    assert kept["data"] == json.loads(json.dumps(dataclasses.asdict(MEASURED)))  # numbers and type names only
    bundle = tmp_path / "bundle.json"
    bundle.write_text(json.dumps({"kvtop_bundle_version": 1, "trace": records}))
    for i, trace in enumerate((read_trace(path), read_bundle_trace(str(bundle)))):
        app = make_app(trace.settings(), lambda s, t=trace: ReplayEngine(t, speed=0.0), tmp_path / f"r{i}",
                       live_system=False, write_transcript=False, record_trace=False, facts=trace.facts,
                       hardware=trace.hardware)
        async with app.run_test(size=(160, 50)) as pilot:
            await wait_until(pilot, lambda: app.dash.kv.quality, what="the replayed quality line")
            q8, q4 = app.dash.kv.quality
            assert q8.startswith("q8_0/q8_0: \u221247% KV (") and "KLD 0.0009 (99%: 0.008), same top token 99.3% " \
                "over this chat's 1,204 tokens" in q8
            assert q4 == "q4_0/q4_0: not measured: -ctk q4_0 -ctv q4_0 (-fa off): quantized V cache requires flash_attn"
            assert app.dash.estimate.quality.startswith("-ctk q8_0 -ctv q8_0 would fit 1.9x the context")
