"""What a fresh-clone new-user trial found on screen and the first polish branch left
(docs/closing note "Trial findings left"): each a test that reads the panes, and fails
on the code before its fix."""

from kvtop.tui.panes.decode_chart import legend, plan_chart


def test_the_ceiling_s_times_the_measured_rate_reads_the_same_at_every_width():
    """The legend's "Nx the measured rate" divided by the last bucket's mean rate, and the
    buckets follow the chart's width: the same turn read one figure at 80 columns and
    another at 160."""
    series = [(100 + i, 60.0 - i / 2) for i in range(101)]  # 60 tok/s falling to 10
    # two points a column: the decode chart's widths at 80, 120 and 160 columns, and a narrow one
    said = {legend(plan_chart(series, [], lambda depth: 400.0, buckets)).plain for buckets in (20, 76, 150, 190)}
    assert said == {"━ measured  ↑ bandwidth ceiling  40x the measured rate: above the chart"}, said
