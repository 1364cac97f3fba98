"""The block kvtop prints when it quits, as ``llama-cli`` prints ``llama_perf_context_print``
and ``ollama run --verbose`` its timings: load time, prompt eval, eval, total, then
where the transcript and the trace are.

The figures are the session's turn records, the same the panes showed: for one turn
the prompt rate is the prefill pane's and the eval rate the decode pane's. As in
llama.cpp, prompt eval counts the prompt tokens computed (tokens reused from the KV
cache are said apart), and eval counts the gaps between sampled tokens ("runs"): each
turn's first token is sampled at the end of its prefill.

With ``kvtop --server`` the figures are the server's own (each turn's ``timings``, as
llama.cpp measured them) and the first line is the time to connect, not to load.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvtop.runner.events import TurnMetrics
    from kvtop.runner.session.chat import ChatSession
    from kvtop.runner.session.records import TurnRecord

FIRST_TOKEN = "first decode+sample"


def _runs(m: TurnMetrics) -> int:
    """The decode steps behind ``decode_tok_s`` (tokens after the turn's first)."""
    if not m.decode_tok_s or m.decode_s <= 0:
        return 0
    return round(m.decode_tok_s * m.decode_s)


def turn_seconds(m: TurnMetrics) -> float:
    """Submit to the turn's last token: to the first token sampled (the waterfall's
    boundary), then the decode."""
    for label, start, seconds in m.timeline:
        if label == FIRST_TOKEN:
            return start + seconds + m.decode_s
    if m.ttft_s is not None:
        return m.ttft_s + m.decode_s
    return m.wait_s + m.template_s + m.tokenize_s + m.prefill_s + (m.first_token_s or 0.0) + m.decode_s


def _rate_line(label: str, seconds: float, n: int, unit: str) -> str:
    ms = seconds * 1000
    line = f"{label:>16} = {ms:10.2f} ms / {n:5d} {unit}"
    if n > 0 and seconds > 0:
        line += f" ({ms / n:8.2f} ms per token, {n / seconds:8.2f} tokens per second)"
    return line.rstrip()


def summary_lines(load_s: float | None, turns: Sequence[TurnRecord], model: str, transcript: str | None,
                  trace: str | None, load_label: str = "load time") -> list[str]:
    """The quit summary of a session whose finished turns are ``turns`` (TurnRecords)."""
    ms = [t.metrics for t in turns]
    prompt_n = sum(m.prefill_tokens for m in ms)
    prompt_s = sum(m.prefill_s for m in ms)
    runs = sum(_runs(m) for m in ms)
    eval_s = sum(m.decode_s for m in ms if _runs(m))
    generated = sum(m.decode_tokens for m in ms)
    reused = sum(m.reused_tokens for m in ms)
    total_s = (load_s or 0.0) + sum(turn_seconds(m) for m in ms)
    n = len(turns)
    lines = [f"kvtop: {n} turn{'' if n == 1 else 's'} with {model}"]
    lines.append(f"{load_label:>16} = " + (f"{load_s * 1000:10.2f} ms" if load_s is not None else "  not loaded"))
    lines.append(_rate_line("prompt eval time", prompt_s, prompt_n, "tokens"))
    lines.append(_rate_line("eval time", eval_s, runs, "runs  "))
    total = f"{'total time':>16} = {total_s * 1000:10.2f} ms / {prompt_n + generated:5d} tokens"
    total += f" ({prompt_n} prompt, {generated} generated"
    total += f"; {reused} more prompt tokens reused from the KV cache)" if reused else ")"
    lines.append(total)
    lines.append(f"transcript: {transcript or 'none (not written)'}")
    lines.append(f"trace: {trace or 'none (not written)'}")
    return lines


def session_summary(session: ChatSession) -> str | None:
    """The quit summary of a ``ChatSession``, or None when no model was loaded and no
    turn ran (nothing to sum up)."""
    import os

    from kvtop.runner.sanitize import clean_line

    loaded = session.loaded
    if loaded is None and not session.turns:
        return None
    model = clean_line(os.path.basename(loaded.path if loaded else session.settings.model))
    server = loaded.server if loaded else None
    if server and loaded is not None:  # kvtop --server: the served model, the server, and the time to connect
        model = f"{clean_line(loaded.name) or model} on {clean_line(server)}"
    trace = session.trace.path if session.trace is not None else None
    return "\n".join(summary_lines(loaded.load_s if loaded else None, list(session.turns), model,
                                   session.transcript_path, trace, "connect time" if server else "load time"))
