"""Every number read from a trace is checked: finite and sane for its field (issue 12,
item 7). Before, ``kvtop replay`` of a trace with ``1e308`` in it crashed inside
Textual (a NaN reached ``int()`` in a pane) and exited 0."""

import json
import os
import subprocess
import sys

import pytest

from runner.records.trace import TraceError, number_range, read_trace


def damaged(path, tmp_path, line: int, keys: str, value: str) -> str:
    """The trace at ``path`` with the field ``keys`` (dotted) of line ``line`` set to
    ``value``, written as raw JSON text (so NaN, 1e999 and 400-digit integers survive)."""
    lines = open(path, encoding="utf-8").read().splitlines()
    obj = json.loads(lines[line - 1])
    d = obj
    *parents, last = keys.split(".")
    for k in parents:
        d = d[int(k)] if isinstance(d, list) else d[k]
    d[last] = "@@VALUE@@"
    lines[line - 1] = json.dumps(obj).replace('"@@VALUE@@"', value)
    out = tmp_path / "damaged.jsonl"
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(out)


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


@pytest.mark.parametrize("keys,value", [("hardware.bandwidth_gbs", "1e308"), ("created", "1e308"),
                                        ("settings.n_ctx", "1" + "0" * 30)])
def test_kvtop_replay_of_absurd_numbers_exits_1_with_one_line(write_trace, tmp_path, keys, value):
    bad = damaged(write_trace(tmp_path / "t.jsonl"), tmp_path, 1, keys, value)
    r = subprocess.run([sys.executable, "-m", "tui", "replay", "--end", bad], capture_output=True, text=True,
                       timeout=60, env=dict(os.environ, KVTOP_HOME=str(tmp_path / "home")))
    assert r.returncode == 1, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("kvtop: ") and "line 1" in r.stderr
