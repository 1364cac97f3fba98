"""The engine's reports: plain frozen dataclasses, picklable across the process pipe.

Everything the UI shows comes from these. Times are ``time.monotonic()`` seconds,
which on Linux is one clock for all processes, so the child's timestamps and the
parent's submit time can be subtracted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from kvtop.runner.llama_buffers import LlamaBuffers


@dataclass(frozen=True)
class LoadProgress:
    fraction: float


@dataclass(frozen=True)
class Loaded:
    path: str
    name: str
    description: str
    architecture: str
    file_type: str
    n_params: int
    model_bytes: int
    n_ctx: int
    n_ctx_train: int
    n_threads: int
    n_threads_batch: int
    n_batch: int
    n_ubatch: int
    n_gpu_layers: int
    flash_attn: str
    type_k: str
    type_v: str
    swa_full: bool
    buffers: LlamaBuffers
    has_chat_template: bool
    load_s: float
    pid: int
    server: str | None = None  # kvtop --server: the URL; None for a model kvtop runs itself
    build_info: str | None = None  # llama.cpp's build, as the server reports it
    total_slots: int = 1
    lora: str = ""  # --lora: the adapters applied, "name.gguf x1, other.gguf x0.5" ("": none)


@dataclass(frozen=True)
class LoadFailed:
    reason: str


@dataclass(frozen=True)
class TurnStarted:
    """The prompt is tokenized and checked; prefill is about to start."""

    turn_id: int
    prompt_tokens: int
    reused_tokens: int
    n_ctx: int
    template_name: str
    template_fallback: str | None
    template_s: float
    tokenize_s: float
    first_diff_index: int | None  # where the new prompt left the cached tokens
    t: float
    diff_context: tuple[str, str] | None = None  # (cached text, new text) around that index


@dataclass(frozen=True)
class ContextShifted:
    """The chat no longer fit the context (``--context-shift``): this turn's prompt leaves
    out the oldest turns. Emitted before the turn's ``TurnStarted``; the chat keeps every
    message, only this prompt leaves them out."""

    turn_id: int
    dropped_turns: tuple[int, ...]  # 1-based numbers of the chat's turns left out
    dropped_tokens: int  # the whole chat's prompt minus this one
    kept_tokens: int  # leading tokens this prompt shares with the whole chat's (system prompt, --keep)
    prompt_tokens: int  # this prompt, after the shift
    reused_tokens: int  # of which the KV cache held
    prefix_broken_at: int | None  # the first cached token this prompt does not reuse (None: all reused)
    n_ctx: int
    t: float
    shifted_cells: int = 0  # cells of the dropped turns cut out of the cache, the rest moved back (kv_shift)
    no_shift: str | None = None  # why the cache could not be shifted (the prompt was recomputed instead)

    @property
    def recomputed_tokens(self) -> int:
        return self.prompt_tokens - self.reused_tokens


@dataclass(frozen=True)
class PrefillProgress:
    turn_id: int
    done: int  # prompt tokens whose KV is ready, reused ones included
    total: int
    reused: int
    elapsed_s: float  # since prefill of the computed part started
    tok_s: float  # computed tokens / elapsed
    ubatch_tokens: int
    ubatch_s: float
    t: float


@dataclass(frozen=True)
class TokenEvent:
    turn_id: int
    index: int  # 0 for the first generated token
    token_id: int
    text: str  # UTF-8-safe delta: may be "" while a character is incomplete
    pos: int  # KV position of this token
    t: float


@dataclass(frozen=True)
class TurnMetrics:
    prompt_tokens: int
    reused_tokens: int
    prefill_tokens: int
    prefill_s: float
    prefill_tok_s: float | None
    template_s: float
    tokenize_s: float
    wait_s: float  # from submit until the engine started the turn
    ttft_s: float | None  # submit -> first visible character
    decode_tokens: int
    decode_s: float
    decode_tok_s: float | None
    itl_p50_ms: float | None
    itl_p95_ms: float | None
    kv_cells_used: int
    n_ctx: int
    first_token_s: float | None = None  # prefill end -> first token sampled
    ubatches: tuple[tuple[int, float], ...] = ()  # (tokens, seconds) per prefill micro-batch
    # llama_perf_context cross-check. A Mapping, not a dict[...]: the trace check reads these
    # hints, and checks an untyped mapping's numbers under their own names (records.trace_check)
    perf: Mapping[str, object] = field(default_factory=dict)  # a server's: {"server_timings": {...}}
    timeline: tuple[tuple[str, float, float], ...] = ()  # TTFT waterfall: (segment, start, seconds)
    # the threads this turn ran on (decode, prefill): fewer than the engine's when kvtop ran
    # it on the cores other processes left free; 0: not recorded (a server, an older trace)
    n_threads: int = 0
    n_threads_batch: int = 0
    # speculative decoding (runner/engine/speculative.py); spec_type "" = it did not speculate
    spec_type: str = ""
    spec_drafted: int = 0  # draft tokens verified
    spec_accepted: int = 0  # of which the target kept
    spec_passes: int = 0  # verify passes (one llama_decode of the sampled token and a draft)
    spec_plain_steps: int = 0  # one-token steps (no draft found, or the engine's first, timed, step)
    spec_tokens: int = 0  # tokens the turn's steps produced (but a first, timed, plain step)
    spec_s: float = 0.0  # the time those steps took, drafting included
    spec_draft_s: float = 0.0  # of which drafting
    spec_verify_s: float = 0.0  # of which verify passes
    spec_accepted_per_pos: tuple[int, ...] = ()  # passes that kept the draft's token i
    spec_plain_step_s: float | None = None  # a plain decode step's time: this turn's median, else the last's

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class TurnDone:
    turn_id: int
    stop_reason: str  # "eog", "n_predict", "context_full", "cancelled"
    text: str
    metrics: TurnMetrics
    t: float


@dataclass(frozen=True)
class TurnRefused:
    turn_id: int
    reason: str
    prompt_tokens: int
    n_ctx: int


@dataclass(frozen=True)
class CacheCleared:
    pass


@dataclass(frozen=True)
class PromptCache:
    """The KV state of a prompt saved to, or restored from, ``--prompt-cache FILE``."""

    action: str  # "restored" or "saved"
    path: str
    tokens: int
    bytes: int
    seconds: float


@dataclass(frozen=True)
class EngineError:
    reason: str


@dataclass(frozen=True)
class EngineWarning:
    """Something the user should know that does not stop the engine."""

    reason: str


@dataclass(frozen=True)
class EngineDied:
    """The engine's child process ended on its own (abort, OOM kill, crash)."""

    exitcode: int | None
    reason: str


@dataclass(frozen=True)
class PromptMeasured:
    """The reply to ``MeasurePrompt``: the would-be prompt's tokens, how many of them
    are cached (None where the engine cannot know, e.g. a server's slot), the context."""

    request_id: int
    prompt_tokens: int
    cached_tokens: int | None
    n_ctx: int
    dropped_turns: int = 0  # oldest turns the context shift would leave out of this prompt


@dataclass(frozen=True)
class Tokenized:
    """The reply to a ``Tokenize`` command (matched by ``request_id``)."""

    request_id: int
    tokens: tuple[int, ...]


@dataclass(frozen=True)
class KldPair:
    """One cache type pair's quality on the chat (in ``KldMeasured``): numbers only."""

    type_k: str
    type_v: str
    count: int = 0  # positions scored
    kld_mean: float = 0.0
    kld_99: float = 0.0  # the 99th percentile of the per-position KLD
    same_top: float = 0.0  # fraction of positions where both put the same token first
    rms_p_diff: float = 0.0
    error: str | None = None  # why it was not measured (llama.cpp's reason), or None


@dataclass(frozen=True)
class KldProgress:
    """``MeasureKld`` under way: the chat's tokens through every scoring context so far."""

    turn_id: int  # the measurement's id (from the turns' counter: Esc cancels it as a turn)
    done: int
    total: int
    elapsed_s: float
    t: float


@dataclass(frozen=True)
class KldMeasured:
    """The reply to ``MeasureKld``: the chat's tokens through a base cache and each
    candidate, in contexts of their own beside the chat's (runner.engine.live_kld)."""

    turn_id: int
    n_tokens: int  # the chat's tokens measured (at most the context)
    chat_tokens: int  # the chat's tokens in all
    base_type_k: str
    base_type_v: str
    pairs: tuple[KldPair, ...]
    seconds: float
    stopped: str | None = None  # None: complete; "cancelled", or why it stopped (one line)
    t: float = 0.0


@dataclass(frozen=True)
class EngineClosed:
    """The last event of an engine closed on purpose: its reader returns after it."""

    reason: str = "closed"


@dataclass(frozen=True)
class RecordedUser:
    """Replay only: a message the user sent in the recorded session."""

    text: str


@dataclass(frozen=True)
class RecordedNewChat:
    """Replay only: the user started a new chat in the recorded session."""


@dataclass(frozen=True)
class RecordedUndoNewChat:
    """Replay only: the user brought back the chat the last new chat put aside (Ctrl+Z)."""


@dataclass(frozen=True)
class RecordedForecast:
    """A replay's forecast record: what the live run forecast when the turn started."""

    forecast: object  # runner.calibration.forecast.Forecast


@dataclass(frozen=True)
class RecordedCPU:
    """A replay's record of the CPU share other processes took during a turn (played
    just before the turn's end, so the verdict names it as the live run did)."""

    turn_id: int
    others_cpu: float


@dataclass(frozen=True)
class EventBatch:
    """Token events sent over the pipe together (the parent unpacks them in order).

    Every token still has its own event and timestamp; batching only spares the
    receiving process a wake-up per token, which on a small machine steals time from
    llama.cpp's threads."""

    events: tuple[object, ...]


STOP_LABELS = {
    "eog": "end of turn",
    "n_predict": "-n reached",
    "context_full": "context full",
    "cancelled": "cancelled",
    "new_chat": "cut by a new chat (Ctrl+L)",
}
