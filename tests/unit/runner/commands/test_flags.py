"""Every numeric flag of every command is finite and in range, or a usage error (exit 2)
that names the range; nothing is silently replaced by another value."""

import argparse
import math

import pytest

from kvtop.runner.cli_types import INT32_MAX, float_in, int_in, refresh_seconds
from kvtop.runner.commands.common import json_safe


def parsers():
    from kvtop.runner.commands.bench import build_parser as bench_parser
    from kvtop.runner.commands.engine_flags import add_engine_flags
    from kvtop.runner.commands.estimate import build_parser as estimate_parser

    engine = argparse.ArgumentParser(prog="kvtop")
    engine.add_argument("model")
    add_engine_flags(engine)
    return {"engine": engine, "estimate": estimate_parser(), "bench": bench_parser()}


def usage_error(parser, argv, capsys) -> str:
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err


def test_no_numeric_flag_is_left_unchecked():
    """A plain ``type=int`` or ``type=float`` takes -5, nan and inf: every numeric flag
    has a range-checking type from runner.cli_types."""
    unchecked = [(name, a.option_strings[0]) for name, p in parsers().items() for a in p._actions
                 if a.type in (int, float)]
    assert unchecked == []


BAD = {
    "engine": [("-c", "-5"), ("-t", "-1"), ("-t", "100000"), ("-tb", "-2"), ("-b", "0"), ("-ub", "0"),
               ("-ngl", "-2"), ("-ngl", str(2**32)), ("-n", "-2"), ("--temp", "nan"), ("--temp", "-1"),
               ("--temp", "inf"), ("--top-k", "-1"), ("--top-p", "1.5"), ("--top-p", "nan"), ("--seed", "-2"),
               ("--seed", str(2**32)), ("-c", "1e3"), ("-c", "")],
    "estimate": [("-c", "-5"), ("-c", "0"), ("-ub", "0"), ("-ngl", "-2"), ("--prompt-tokens", "-1"),
                 ("--output-tokens", "-1"), ("--bandwidth-gbs", "-1"), ("--bandwidth-gbs", "0"),
                 ("--bandwidth-gbs", "nan"), ("--bandwidth-gbs", "inf"), ("--bandwidth-gbs", "-inf"),
                 ("--tflops", "nan"), ("--tflops", "-0.5"), ("--tflops", "1e999")],
    "bench": [("-p", "-1"), ("-r", "0"), ("-n", "-5"), ("-c", "-5"), ("-p", "128,-1"), ("-t", "513"), ("-ub", "0"),
              ("-d", "-1"), ("-ngl", "-2")],
}


@pytest.mark.parametrize("cmd,flag,value", [(c, f, v) for c, cases in BAD.items() for f, v in cases])
def test_out_of_range_is_a_usage_error_naming_the_range(cmd, flag, value, capsys):
    argv = [f"{flag}={value}"] if flag.startswith("--") else [flag, value]  # "-inf" is not an option
    err = usage_error(parsers()[cmd], ["m.gguf", *argv], capsys)
    assert "must be" in err and ("from" in err or "above" in err or "at least" in err), err


GOOD = {
    "engine": [("-c", "0", 0), ("-ngl", "-1", -1), ("-ngl", "99", 99), ("-n", "-1", -1), ("-n", "0", 0),
               ("--temp", "0", 0.0), ("--top-p", "1", 1.0), ("--seed", str(2**32 - 1), 2**32 - 1),
               ("-t", "512", 512)],
    "estimate": [("--bandwidth-gbs", "0.5", 0.5), ("--tflops", "1e3", 1000.0), ("--prompt-tokens", "0", 0)],
    "bench": [("-p", "0", [0]), ("-n", "0", [0]), ("-r", "1", 1), ("-p", "128,512", [128, 512]),
              ("-ngl", "-1", [-1]), ("-d", "256-1024*4", [256, 1024])],
}


@pytest.mark.parametrize("cmd,flag,value,parsed", [(c, *case) for c, cases in GOOD.items() for case in cases])
def test_in_range_values_parse_unchanged(cmd, flag, value, parsed):
    ns = parsers()[cmd].parse_args(["m.gguf", flag, value])
    assert parsed in vars(ns).values()


def test_the_message_names_the_range():
    with pytest.raises(argparse.ArgumentTypeError, match=r"must be an integer from 0 to 2,147,483,647 \(got -5\)"):
        int_in(0, INT32_MAX)("-5")
    with pytest.raises(argparse.ArgumentTypeError, match=r"must be a number above 0 \(got nan\)"):
        float_in(0.0, None, lo_open=True)("nan")
    with pytest.raises(argparse.ArgumentTypeError, match=r"must be a number from 0.25 to 10 \(got 0.1\)"):
        refresh_seconds("0.1")
    assert refresh_seconds("0.25") == 0.25 and refresh_seconds("10") == 10.0


def test_json_safe_turns_non_finite_numbers_into_null():
    assert json_safe({"a": math.nan, "b": [math.inf, 1.5, {"c": -math.inf}], "d": "x", "e": None}) == \
        {"a": None, "b": [None, 1.5, {"c": None}], "d": "x", "e": None}
