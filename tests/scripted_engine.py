"""An engine that plays back a fixed list of events: same interface as ``EngineProcess``.

Used for deterministic UI tests (SVG snapshots with a fixed clock) and for showing
a recorded run without a model. Events carry their own timestamps, so what the
panes compute from them (rates, TTFT) is the same on every run.
"""

from __future__ import annotations

from . import events as ev
from .llama_log import KVBufferLine, LlamaBuffers
from .settings import Settings
from .trace import ReplayEngine


def smollm_loaded(path: str, n_ctx: int = 4096) -> ev.Loaded:
    """A ``Loaded`` event as SmolLM2-135M-Instruct Q4_1 reports it on a 2-core CPU."""
    kv_mib = 45.0 * n_ctx / 2048  # 22.5 KiB per cell
    return ev.Loaded(
        path=path, name="SmolLM2 135M Instruct", description="llama 256M Q4_1", architecture="llama",
        file_type="Q4_1", n_params=134515008, model_bytes=96576768, n_ctx=n_ctx, n_ctx_train=8192,
        n_threads=2, n_threads_batch=2, n_batch=512, n_ubatch=512, n_gpu_layers=0, flash_attn="auto",
        type_k="f16", type_v="f16", swa_full=False,
        buffers=LlamaBuffers({"CPU": 92.10}, (KVBufferLine("full", kv_mib, n_ctx, 30, "f16", kv_mib / 2, "f16", kv_mib / 2),),
                             0.0, {"CPU": 98.44}, {"CPU": 0.19}),
        has_chat_template=True, load_s=0.2, pid=0,
    )


def scripted_turn(turn_id: int, t0: float, prompt_tokens: int, reused: int, pieces: list[str],
                  pp_tok_s: float = 400.0, tg_tok_s: float = 150.0, ubatch: int = 512,
                  stop_reason: str = "eog") -> list[object]:
    """The events of one turn with regular timings, starting at ``t0``."""
    out: list[object] = [ev.TurnStarted(turn_id, prompt_tokens, reused, 4096, "gguf", None, 0.002, 0.0005, None, t0)]
    t = t0 + 0.003
    done = reused
    todo = prompt_tokens - reused
    ubatches = []
    start = t
    while done < prompt_tokens:
        n = min(ubatch, prompt_tokens - done)
        dt = n / pp_tok_s
        t += dt
        done += n
        ubatches.append((n, dt))
        out.append(ev.PrefillProgress(turn_id, done, prompt_tokens, reused, t - start, (done - reused) / (t - start), n, dt, t))
    prefill_s = t - start
    pos = prompt_tokens
    times = []
    for i, piece in enumerate(pieces):
        t += 1 / tg_tok_s
        times.append(t)
        out.append(ev.TokenEvent(turn_id, i, 100 + i, piece, pos, t))
        pos += 1
    dec_s = times[-1] - times[0] if len(times) > 1 else 0.0
    m = ev.TurnMetrics(
        prompt_tokens=prompt_tokens, reused_tokens=reused, prefill_tokens=todo, prefill_s=prefill_s,
        prefill_tok_s=todo / prefill_s if prefill_s else None, template_s=0.002, tokenize_s=0.0005, wait_s=0.0,
        ttft_s=(times[0] - t0) if times else None, decode_tokens=len(pieces), decode_s=dec_s,
        decode_tok_s=(len(times) - 1) / dec_s if dec_s else None, itl_p50_ms=1000 / tg_tok_s,
        itl_p95_ms=1000 / tg_tok_s, kv_cells_used=pos - 1 if stop_reason == "eog" else pos, n_ctx=4096,
        first_token_s=1 / tg_tok_s, ubatches=tuple(ubatches),
    )
    out.append(ev.TurnDone(turn_id, stop_reason, "".join(pieces), m, t))
    return out


class ScriptedEngine(ReplayEngine):
    """Plays ``loaded`` on start and the next script on each chat, instantly."""

    def __init__(self, settings: Settings, loaded: ev.Loaded, turns: list[list[object]]):
        super().__init__(speed=0, loaded=loaded, turns=turns)
        self.settings = settings.resolved()
