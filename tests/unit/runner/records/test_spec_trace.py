"""A speculative turn's figures survive the trace (issue 36 item 7): TurnDone's spec_*
fields pass the trace's number checks and come back equal, so a replay's decode pane
says the same speculation line."""

import dataclasses
import json

from scripted_engine import scripted_turn

from kvtop.runner import events as ev
from kvtop.runner.policy.speculation import spec_line
from kvtop.runner.records import trace_check
from kvtop.runner.records.trace import _build


def test_spec_fields_round_trip_through_a_trace_record():
    done = next(e for e in scripted_turn(1, 0.0, 20, 0, ["a"] * 5) if isinstance(e, ev.TurnDone))
    m = dataclasses.replace(done.metrics, spec_type="ngram-simple", spec_drafted=4, spec_accepted=3, spec_passes=1,
                            spec_tokens=4, spec_s=0.05, spec_accepted_per_pos=(1, 1, 1, 0), spec_plain_step_s=0.02)
    data = json.loads(json.dumps(dataclasses.asdict(dataclasses.replace(done, metrics=m))))
    trace_check.check_record(ev.TurnDone, data)
    back = _build(ev.TurnDone, data).metrics
    assert back == m and spec_line(back) == spec_line(m) and spec_line(m).startswith("speculation: 4.0 tok/pass")


def test_a_negative_draft_count_is_refused_by_the_trace_check():
    done = next(e for e in scripted_turn(1, 0.0, 20, 0, ["a"] * 5) if isinstance(e, ev.TurnDone))
    data = json.loads(json.dumps(dataclasses.asdict(done)))
    data["metrics"]["spec_drafted"] = -5
    try:
        trace_check.check_record(ev.TurnDone, data)
    except Exception as exc:  # the checker's own error type
        assert "spec_drafted" in str(exc)
    else:
        raise AssertionError("a negative draft count passed the trace check")
