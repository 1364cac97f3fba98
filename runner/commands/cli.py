"""Compatibility shim: the headless commands live in ``runner.commands.bench`` and
``runner.commands.estimate``. Remove once tui/cli.py and bench/*.py import from there."""

from runner.commands.bench import BENCH_TEXT, bench_main  # noqa: F401
from runner.commands.estimate import estimate_main  # noqa: F401
