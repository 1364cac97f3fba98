"""The tok/s chart gets at most two points per column, and they keep the shape of the run."""

from kvtop.tui.panes.decode_chart import bucket_series


def test_a_long_run_is_cut_to_the_bucket_count_and_keeps_its_slowdown():
    series = [(p, 100.0 if p < 500 else 50.0) for p in range(1000)]
    points = bucket_series(series, 10)
    assert len(points) == 10
    assert [r for _, r in points] == [100.0] * 5 + [50.0] * 5
    xs = [x for x, _ in points]
    assert xs == sorted(xs) and xs[0] == 49.5 and xs[-1] == 949.5


def test_uneven_runs_average_every_point_once():
    series = [(p, float(p)) for p in range(7)]
    points = bucket_series(series, 3)
    assert len(points) == 3
    # runs [0,1], [2,3], [4,5,6]: each point counted in exactly one run
    assert points == [(0.5, 0.5), (2.5, 2.5), (5.0, 5.0)]


def test_a_short_run_is_drawn_as_is():
    series = [(10, 80.0), (11, 82.5)]
    assert bucket_series(series, 140) == [(10.0, 80.0), (11.0, 82.5)]
    assert bucket_series((), 140) == []
