"""One byte unit, one "unknown" (N/A) and one set of number formats for panes and commands."""

import math

import pytest

from kvtop.runner.units import (
    GIB,
    KIB,
    MIB,
    NA,
    fmt_bytes,
    fmt_int,
    fmt_num,
    fmt_rate,
    fmt_ratio,
    fmt_seconds,
    fmt_size,
    mib_to_bytes,
)


def test_units():
    assert (KIB, MIB, GIB) == (1024, 1024 * 1024, 1024 * 1024 * 1024)


@pytest.mark.parametrize("n,text", [
    (0, "0 B"), (512, "512 B"), (1023, "1,023 B"), (1024, "1.00 KiB"), (22.5 * KIB, "22.50 KiB"),
    (90 * MIB, "90.00 MiB"), (1000 * MIB, "1,000.00 MiB"), (1.5 * GIB, "1.50 GiB"),
    (2048 * 1024 * GIB, "2,048.00 TiB"),
])
def test_fmt_bytes(n, text):
    assert fmt_bytes(n) == text


@pytest.mark.parametrize("bad", [None, math.nan, math.inf, -math.inf])
def test_unknown_and_non_finite_read_na_everywhere(bad):
    for f in (fmt_bytes, fmt_size, fmt_int, fmt_num, fmt_rate, fmt_seconds):
        assert f(bad) == NA == "N/A"
    assert fmt_ratio(bad, 2.0) == NA and fmt_ratio(2.0, bad) == NA
    assert mib_to_bytes(bad) is None


@pytest.mark.parametrize("n,text", [
    (512, "512 B"), (22.5 * 1024, "22.5 KiB"), (92.1 * MIB, "92.1 MiB"), (300 * MIB, "300 MiB"),
    (1.45 * GIB, "1.45 GiB"), (2048 * 1024 * GIB, "2,048 TiB"),
])
def test_fmt_size_is_three_significant_digits(n, text):
    """The panes' bytes: the Memory pane read "300.00 MiB" beside the Estimate pane's "300 MiB"."""
    assert fmt_size(n) == text


def test_the_memory_and_estimate_panes_format_bytes_alike():
    from kvtop.tui.panes import estimate, memory

    assert memory.fmt_bytes is estimate.fmt_bytes is fmt_size


def test_fmt_int_has_thousands_separators():
    assert fmt_int(4096) == "4,096" and fmt_int(0) == "0" and fmt_int(-5) == "-5"


def test_rates_seconds_ratios():
    assert fmt_rate(150.4) == "150 tok/s" and fmt_rate(12.34) == "12.3 tok/s" and fmt_rate(1234.0) == "1,234 tok/s"
    assert fmt_seconds(0.098) == "98 ms" and fmt_seconds(2.3) == "2.30 s" and fmt_seconds(62) == "1m02.0s"
    assert fmt_ratio(98, 43) == "2.28x" and fmt_ratio(1, 0) == NA
    assert fmt_num(30.0, ",.1f", " GB/s") == "30.0 GB/s"


def test_mib_to_bytes():
    assert mib_to_bytes(90.0) == 90 * MIB and mib_to_bytes(92.1) == round(92.1 * MIB)


def test_the_panes_use_the_same_formatters():
    import kvtop.runner.units as units
    import kvtop.tui.base.format as fmt

    for name in ("NA", "fmt_int", "fmt_rate", "fmt_seconds", "fmt_ratio"):
        assert getattr(fmt, name) is getattr(units, name)
    assert fmt.fmt_bytes is units.fmt_size  # the panes' bytes: three significant digits



def test_two_ticks_asked_keep_a_label_above_zero():
    """A 3-row decode chart asks 2 ticks; to 45 tok/s it got only [0] (20 apart gives 3,
    50 apart 1), so the chart's line moved over rows with no scale (a trial)."""
    from kvtop.runner.units import nice_ticks

    assert nice_ticks(0, 45, 2) == [0, 40]
    assert nice_ticks(0, 58, 2) == [0, 50] and nice_ticks(0, 45, 3) == [0, 20, 40]
    assert nice_ticks(0, 4.5, 2) == [0, 4]
