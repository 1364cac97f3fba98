"""The block printed on quit, as llama-cli's perf print: the session's own figures, summed
over its turns, with the rates the panes showed (issue: print the session's summary)."""

from kvtop.runner import events as ev
from kvtop.runner.session.records import TurnRecord
from kvtop.runner.session.summary import summary_lines, turn_seconds


def metrics(prefill_tokens, prefill_s, decode_tokens, decode_s, reused=0, first_token_at=None):
    runs = decode_tokens - 1
    timeline = (("wait for engine", 0.0, 0.01), ("first decode+sample", 0.01, first_token_at - 0.01)) \
        if first_token_at is not None else ()
    return ev.TurnMetrics(
        prompt_tokens=prefill_tokens + reused, reused_tokens=reused, prefill_tokens=prefill_tokens,
        prefill_s=prefill_s, prefill_tok_s=prefill_tokens / prefill_s, template_s=0.001, tokenize_s=0.001,
        wait_s=0.01, ttft_s=first_token_at, decode_tokens=decode_tokens, decode_s=decode_s,
        decode_tok_s=runs / decode_s if decode_s else None, itl_p50_ms=None, itl_p95_ms=None,
        kv_cells_used=0, n_ctx=4096, timeline=timeline)


def test_one_turn_shows_the_panes_rates_like_llama_cli():
    m = metrics(32, 0.125, 128, 1.27, first_token_at=0.2)
    lines = summary_lines(0.81233, [TurnRecord("hi", "eog", m)], "SmolLM2.gguf", "/s/session-1.jsonl",
                          "/s/trace-1.jsonl")
    assert lines == [
        "kvtop: 1 turn with SmolLM2.gguf",
        "       load time =     812.33 ms",
        "prompt eval time =     125.00 ms /    32 tokens (    3.91 ms per token,   256.00 tokens per second)",
        "       eval time =    1270.00 ms /   127 runs   (   10.00 ms per token,   100.00 tokens per second)",
        "      total time =    2282.33 ms /   160 tokens (32 prompt, 128 generated)",
        "transcript: /s/session-1.jsonl",
        "trace: /s/trace-1.jsonl",
    ]
    assert f"{m.prefill_tok_s:.2f} tokens per second" in lines[2] and f"{m.decode_tok_s:.2f}" in lines[3]


def test_turns_add_up_and_reused_tokens_are_said_apart():
    turns = [TurnRecord("a", "eog", metrics(100, 0.5, 11, 0.1, first_token_at=0.6)),
             TurnRecord("b", "cancelled", metrics(50, 0.5, 1, 0.0, reused=120, first_token_at=0.7))]
    lines = summary_lines(1.0, turns, "m.gguf", None, None)
    assert lines[0] == "kvtop: 2 turns with m.gguf"
    assert lines[2].endswith("/   150 tokens (    6.67 ms per token,   150.00 tokens per second)")
    assert lines[3].endswith("/    10 runs   (   10.00 ms per token,   100.00 tokens per second)")
    assert lines[4] == ("      total time =    2400.00 ms /   162 tokens (150 prompt, 12 generated; "
                        "120 more prompt tokens reused from the KV cache)")
    assert lines[5:] == ["transcript: none (not written)", "trace: none (not written)"]


def test_a_turn_without_a_waterfall_counts_its_parts():
    m = metrics(10, 0.2, 0, 0.0)
    assert abs(turn_seconds(m) - (0.01 + 0.001 + 0.001 + 0.2)) < 1e-9
    lines = summary_lines(None, [TurnRecord("a", "cancelled", m)], "m.gguf", None, None)
    assert lines[1] == "       load time =   not loaded"
    assert lines[3] == "       eval time =       0.00 ms /     0 runs"
