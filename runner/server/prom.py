"""Prometheus text exposition (what ``/metrics`` answers), read without a client library.

Every sample is kept with its labels; a histogram is its ``_bucket`` lines (cumulative
counts per upper bound ``le``), ``_sum`` and ``_count``. Percentiles come from the
*difference* of two readings of one histogram (``Histogram.minus``): the requests that
ended in that window, not every request since the server started. Inside a bucket the
value is interpolated linearly, as Prometheus' own ``histogram_quantile`` does, so a
percentile is only as fine as the server's buckets (it says which bucket it fell in).

The text is a server's: lines and labels are bounded, and a value that is not a number
is skipped, never raised.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass

MAX_LINES = 50_000
MAX_LINE = 8_192
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{.*\})?\s+(\S+)(?:\s+\S+)?$")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Sample:
    name: str
    labels: Labels
    value: float

    def label(self, key: str) -> str | None:
        return next((v for k, v in self.labels if k == key), None)


def parse_samples(text: str) -> Iterator[Sample]:
    """Every sample line of the text (comments, blank and malformed lines skipped)."""
    for n, line in enumerate(text.splitlines()):
        if n >= MAX_LINES:
            return
        if not line or line[0] == "#" or len(line) > MAX_LINE:
            continue
        m = _SAMPLE.match(line.strip())
        if not m:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        labels = tuple(_LABEL.findall(m.group(2) or ""))
        yield Sample(m.group(1), labels, value)


@dataclass(frozen=True)
class Histogram:
    """One histogram (its labels summed over, e.g. every engine): cumulative counts per bound."""

    buckets: tuple[tuple[float, float], ...]  # (le, cumulative count), ascending, +Inf last
    count: float
    total: float  # the sum of the observed values

    def minus(self, old: Histogram | None) -> Histogram:
        """The observations between ``old`` and this reading (a counter that went back,
        a restart, gives this reading whole)."""
        if old is None or [b for b, _ in old.buckets] != [b for b, _ in self.buckets] or old.count > self.count:
            return self
        return Histogram(tuple((b, max(c - oc, 0.0)) for (b, c), (_, oc) in zip(self.buckets, old.buckets)),
                         self.count - old.count, max(self.total - old.total, 0.0))

    def quantile(self, q: float) -> float | None:
        """The ``q`` quantile (0–1) by linear interpolation inside its bucket; None with no
        observations. One that falls in the +Inf bucket is the highest finite bound."""
        if self.count <= 0 or not self.buckets:
            return None
        rank = q * self.count
        lo_bound, lo_count = 0.0, 0.0
        for bound, cum in self.buckets:
            if cum >= rank and cum > lo_count:
                if math.isinf(bound):
                    return lo_bound
                return lo_bound + (bound - lo_bound) * (rank - lo_count) / (cum - lo_count)
            lo_bound, lo_count = (bound if math.isfinite(bound) else lo_bound), cum
        return lo_bound

    @property
    def mean(self) -> float | None:
        return self.total / self.count if self.count > 0 else None


class Metrics:
    """One ``/metrics`` answer: ``value(name)`` sums a metric over its labels."""

    def __init__(self, text: str):
        self.samples: dict[str, list[Sample]] = {}
        for s in parse_samples(text):
            self.samples.setdefault(s.name, []).append(s)

    def names(self) -> set[str]:
        return set(self.samples)

    def value(self, name: str) -> float | None:
        found = [s.value for s in self.samples.get(name, ()) if math.isfinite(s.value)]
        return sum(found) if found else None

    def first(self, name: str) -> Sample | None:
        found = self.samples.get(name)
        return found[0] if found else None

    def histogram(self, name: str) -> Histogram | None:
        by_le: dict[float, float] = {}
        for s in self.samples.get(name + "_bucket", ()):
            le = s.label("le")
            try:
                bound = float(le) if le is not None else math.nan
            except ValueError:
                continue
            if math.isnan(bound) or not (math.isfinite(s.value) and s.value >= 0):
                continue
            by_le[bound] = by_le.get(bound, 0.0) + s.value
        count, total = self.value(name + "_count"), self.value(name + "_sum")
        if not by_le or count is None:
            return None
        buckets = tuple(sorted(by_le.items()))
        if any(b[1] > a[1] + 1e-9 for a, b in zip(buckets[1:], buckets)):
            return None  # not cumulative: not a histogram kvtop can read
        return Histogram(buckets, count, total or 0.0)
