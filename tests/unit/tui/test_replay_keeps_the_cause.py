"""A replay shows the verdict that was shown live, word for word: the trace records
the CPU share other processes took during each turn. A replayed bundle dropped the
verdict's first cause ("other processes used 74% of the CPU"), so whoever received
the bundle was misled."""

import glob
import os

from helpers import make_app, wait_until
from scripted_engine import ScriptedEngine, scripted_turn, smollm_loaded

from kvtop.runner.physics.verdicts import estimate_verdict
from kvtop.runner.settings import Settings
from kvtop.tui.panes.estimate import EstimatePane


async def test_the_replay_names_the_busy_cpu_as_the_live_run_did(tmp_path, smollm_shaped):
    from kvtop.runner.records.trace import read_trace

    # slow on purpose (far below the roofline) so the verdict has a gap to explain
    turns = [scripted_turn(1, 1000.0, 700, 0, ["Hi"] * 8, pp_tok_s=90, tg_tok_s=8),
             scripted_turn(2, 2000.0, 760, 700, ["Ok"] * 8, pp_tok_s=90, tg_tok_s=8)]
    loaded = smollm_loaded(smollm_shaped)
    app = make_app(Settings(smollm_shaped, n_ctx=4096, n_threads=2), lambda s: ScriptedEngine(s, loaded, turns),
                   tmp_path, live_system=False, write_transcript=False)
    shares = iter([0.74, 0.05])
    live = []
    async with app.run_test(size=(160, 50)) as pilot:
        app.cpu_watch.turn_others_share = lambda: next(shares)
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        for text in ("hello", "again"):
            inp = app.query_one("#prompt")
            inp.focus()
            inp.insert_text_at_cursor(text)
            n = len(app.turns)
            await pilot.press("enter")
            await wait_until(pilot, lambda: len(app.turns) > n and not app.turn_running, what="turn")
            live.append(estimate_verdict(app.query_one(EstimatePane).rows))
    assert live[0].startswith("other processes used 74% of the CPU during this turn; ")
    assert "other processes" not in live[1]
    (path,) = glob.glob(os.path.join(tmp_path, "data", "sessions", "trace-*.jsonl"))
    trace = read_trace(path)
    assert [obj for kind, obj in trace.records if kind == "cpu"] == [(1, 0.74), (2, 0.05)]

    assert await _replayed_verdicts(trace, tmp_path / "r") == live

    # a redacted debug bundle embeds the trace (its cpu records kept): the same verdicts
    import json

    from kvtop.runner.commands.bundle import trace_records
    from kvtop.runner.records.trace import read_bundle_trace
    from kvtop.runner.redact import Redactor

    bundle = tmp_path / "bundle.json"
    bundle.write_text(json.dumps({"kvtop_bundle_version": 1, "trace": [Redactor().trace_record(x)
                                                                      for x in trace_records(path)]}))
    assert await _replayed_verdicts(read_bundle_trace(str(bundle)), tmp_path / "b") == live


async def _replayed_verdicts(trace, root) -> list[str]:
    """The Estimate pane's verdict after each turn of a replay of ``trace``."""
    from kvtop.runner.records.replay import ReplayEngine

    replay = make_app(trace.settings(), lambda s: ReplayEngine(trace, speed=0.0), root,
                      live_system=False, write_transcript=False, record_trace=False, facts=trace.facts,
                      hardware=trace.hardware)
    shown = []
    async with replay.run_test(size=(160, 50)) as pilot:
        pane = replay.query_one(EstimatePane)
        original = pane.set_rows

        def spy(rows):
            if rows.turn is not None:
                shown.append(estimate_verdict(rows))
            original(rows)

        pane.set_rows = spy
        await wait_until(pilot, lambda: len(replay.turns) == 2 and not replay.turn_running, what="replayed turns")
        assert [t.others_cpu for t in replay.turns] == [0.74, 0.05]
    return shown


def test_a_cpu_record_out_of_range_is_refused(tmp_path):
    import json

    import pytest

    from kvtop.runner.records.trace import TraceError, read_trace

    path = tmp_path / "t.jsonl"
    header = {"type": "kvtop-trace", "version": None, "settings": {"model": "m"}}
    from kvtop.runner.records.trace import TRACE_VERSION

    header["version"] = TRACE_VERSION
    path.write_text(json.dumps(header) + "\n" + json.dumps({"type": "cpu", "turn_id": 1, "others_cpu": 7}) + "\n")
    with pytest.raises(TraceError, match="cpu record"):
        read_trace(str(path))
