"""Every number read from a trace is checked: finite and sane for its field (issue 12,
item 7). Before, ``kvtop replay`` of a trace with ``1e308`` in it crashed inside
Textual (a NaN reached ``int()`` in a pane) and exited 0."""


import pytest
from helpers import damaged

from kvtop.runner.records.trace import TraceError, number_range, read_trace

# line 1 header, 2 LoadProgress, 3 Loaded, 4 user, 5 TurnStarted, 6 PrefillProgress,
# 7-8 TokenEvent, 9 TurnDone
BAD = [
    (1, "hardware.bandwidth_gbs", "1e308", "bandwidth_gbs is 1e+308"),
    (1, "hardware.tflops", "NaN", "tflops is nan"),
    (1, "created", "1e308", "created is 1e+308"),
    (1, "settings.n_ctx", "1" + "0" * 30, "n_ctx is 1000"),
    (1, "settings.temp", "Infinity", "temp is inf"),
    (1, "facts.n_layers", "-5", "n_layers is -5"),
    (1, "facts.layers.0.n_head", '"many"', "n_head is 'many'"),
    (1, "hardware.gpus", '[{"index": 0}]', "GPUInfo"),
    (3, "data.n_ctx", "1" + "0" * 30, "n_ctx is 1000"),
    (3, "data.buffers.kv.0.mib", "1e308", "mib"),
    (3, "data.buffers.model_mib.CPU", "NaN", "model_mib is nan"),
    (3, "data.load_s", "true", "load_s is True"),
    (5, "data.prompt_tokens", "1e308", "prompt_tokens is 1e+308, not an integer"),
    (5, "data.t", "-Infinity", "t is -inf"),
    (6, "data.tok_s", "NaN", "tok_s is nan"),
    (7, "data.pos", "1" + "0" * 30, "pos is 1000"),
    (8, "data.t", "1e999", "t is inf"),
    (9, "data.metrics.decode_tok_s", "1e308", "decode_tok_s is 1e+308"),
    (9, "data.metrics.kv_cells_used", "1" + "0" * 30, "kv_cells_used is 1000"),
    (9, "data.metrics.ubatches", '[[30, "x"]]', "ubatches is 'x'"),
    (9, "data.metrics.perf", '{"t_eval_ms": NaN}', "t_eval_ms is nan"),
    (9, "data.metrics.timeline", '[["wait", 0.0]]', "timeline has 2 items, not 3"),
]


@pytest.mark.parametrize("line,keys,value,message", BAD, ids=[f"{k}={v[:12]}" for _l, k, v, _m in BAD])
def test_a_number_out_of_its_range_is_a_trace_error_naming_the_line(write_trace, tmp_path, line, keys, value,
                                                                     message):
    bad = damaged(write_trace(tmp_path / "t.jsonl"), tmp_path, line, keys, value)
    with pytest.raises(TraceError, match=f"line {line}") as err:
        read_trace(bad)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_recorded_trace_reads_back(write_trace, tmp_path):
    trace = read_trace(write_trace(tmp_path / "t.jsonl"))
    assert [t for t, _ in trace.turns()] == ["hi"]
    assert trace.settings().n_ctx == 4096 and trace.hardware.bandwidth_gbs == 30.0


def test_ranges_fit_real_figures():
    """What a real session writes stays inside: clocks, rates, buffer sizes, pids."""
    for name, value in [("t", 3.2e6), ("created", 1.8e9), ("decode_tok_s", 4500.0), ("model_mib", 400_000.0),
                        ("n_params", 671_000_000_000), ("weights_bytes", 400 * 2**30), ("token_id", -1),
                        ("exitcode", -9), ("bandwidth_gbs", 4800.0), ("first_token_s", -1e-6), ("seed", 2**32)]:
        lo, hi = number_range(name, isinstance(value, int))
        assert lo <= value <= hi, name


@pytest.mark.parametrize("threads,ok", [([1, 1], True), (None, True), ([0, 1], False), ([1], False),
                                        (["1", 1], False), ([True, 1], False), ([1, 10**9], False)])
def test_a_forecasts_threads_are_two_thread_counts(threads, ok):
    from kvtop.runner.records.trace import parse_forecast

    data = {"prompt_tokens": 10, "cached_tokens": 0, "reply_tokens": 5, "ttft_s": 0.1, "prefill_s": 0.1,
            "prefill_tok_s": 100.0, "decode_tok_s": 50.0, "reply_s": 0.2, "basis": "roofline", "n_turns": 0,
            "threads": threads}
    if ok:
        assert parse_forecast("t.jsonl", 3, data).threads == (tuple(threads) if threads else None)
    else:
        with pytest.raises(TraceError, match="forecast threads"):
            parse_forecast("t.jsonl", 3, data)
    # a trace written before the load's fields existed still reads
    old = {k: v for k, v in data.items() if k != "threads"}
    assert parse_forecast("t.jsonl", 3, old).threads is None


def test_a_number_too_long_for_python_is_a_trace_error(write_trace, tmp_path):
    """An integer of more digits than Python converts (4300) fails json.loads with a plain
    ValueError, which has no ``msg``: reading it raised AttributeError, not TraceError."""
    bad = damaged(write_trace(tmp_path / "t.jsonl"), tmp_path, 3, "data.n_ctx", "1" * 5000)
    with pytest.raises(TraceError, match="line 3 is not JSON") as err:
        read_trace(bad)
    assert "digits" in str(err.value) and "\n" not in str(err.value)
