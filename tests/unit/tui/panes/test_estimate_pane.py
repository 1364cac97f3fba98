"""The Estimate pane draws EstimateRows."""

from runner.physics.estimate_rows import EstimateContext, EstimateRows, Row, TurnFigures
from runner.physics.verdicts import estimate_verdict
from runner.units import MIB
from tui.panes.estimate import EstimatePane

ROWS = EstimateRows(ttft=Row(0.043, 0.098), prefill=Row(925.0, 420.0), decode=Row(307.0, 150.0),
                    kv=Row(90 * MIB, 90 * MIB), weights=Row(92.1 * MIB, 92.1 * MIB), peak=Row(280 * MIB, 251 * MIB),
                    context=EstimateContext(weights_bytes=92 * MIB), turn=TurnFigures(prefill_tokens=37),
                    note="hardware: test profile")
def drawn(pane) -> str:
    return pane.render().plain


def test_the_pane_draws_the_rows_and_the_verdict():
    pane = EstimatePane()
    pane.set_rows(ROWS)
    text = drawn(pane)
    lines = text.split("\n")
    assert lines[1].split() == ["TTFT", "43", "ms", "98", "ms", "2.28x"]
    assert lines[2].split() == ["prefill", "925", "tok/s", "420", "tok/s", "0.45x"]
    assert lines[4].split() == ["KV", "bytes", "90.00", "MiB", "90.00", "MiB", "1.00x"]
    assert lines[-2] == estimate_verdict(ROWS) and lines[-1] == "hardware: test profile"


def test_before_any_turn_the_speed_rows_are_na():
    pane = EstimatePane()
    pane.set_rows(EstimateRows(kv=Row(90 * MIB, None)))
    lines = drawn(pane).split("\n")
    assert lines[1].split() == ["TTFT", "N/A", "N/A", "N/A"] and lines[4].split()[-2:] == ["N/A", "N/A"]
    assert lines[-1] == "send a message to compare the estimate with a measured turn"
