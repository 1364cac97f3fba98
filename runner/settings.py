"""Engine settings under llama.cpp's own flag names, and kvtop's defaults.

Defaults are chosen to be faster than llama-cpp-python's: it uses half the
logical cores for decode (1 thread on a 2-core machine). kvtop uses every core
it may run on, capped at the physical core count (hyper-threads slow decode).
llama.cpp's flags themselves (argparse) are runner/commands/engine_flags.py's.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import asdict, dataclass, replace
from typing import Any

from kvtop.runner.units import pad

DEFAULT_CTX = 4096


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask, e.g. under taskset or a cgroup)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def default_threads() -> tuple[int, str]:
    """(threads, why) for decode: usable cores, at most the physical ones."""
    usable = usable_cores()
    physical = None
    try:
        import psutil

        physical = psutil.cpu_count(logical=False)
    except Exception:
        pass
    if physical and physical < usable:
        return physical, f"{physical} physical cores of {usable} usable"
    return usable, f"all {usable} usable cores"


@dataclass(frozen=True)
class Settings:
    model: str
    n_ctx: int = DEFAULT_CTX
    n_threads: int = 0  # 0: default_threads()
    n_threads_batch: int = 0  # 0: same as n_threads
    n_batch: int = 512
    n_ubatch: int = 512
    n_gpu_layers: int = 0
    flash_attn: str = "auto"  # on / off / auto
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    swa_full: bool = False
    numa: str = ""  # --numa distribute|isolate|numactl ("": off)
    kv_offload: bool = True  # -nkvo/--no-kv-offload: the KV cache stays in host memory with -ngl
    rope_freq_base: float = 0.0  # --rope-freq-base (0: the model's)
    rope_freq_scale: float = 0.0  # --rope-freq-scale (0: the model's)
    override_tensor: tuple[tuple[str, str], ...] = ()  # -ot (and -cmoe, -ncmoe, -ncffn): (regex, buffer type)
    lora: tuple[tuple[str, float], ...] = ()  # --lora / --lora-scaled: (adapter GGUF, scale), applied in order
    mlock: bool = False
    mmap: bool = True
    n_predict: int = -1
    ignore_eos: bool = False
    temp: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05  # llama.cpp's sampling defaults (common/common.h), so a pasted command samples alike
    repeat_penalty: float = 1.0  # 1.0: off
    repeat_last_n: int = 64  # tokens the penalties look back over (0: off)
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int = -1
    typical_p: float = 1.0  # --typical (1.0: off)
    top_n_sigma: float = -1.0  # --top-nsigma (-1: off)
    xtc_probability: float = 0.0  # --xtc-probability (0: off)
    xtc_threshold: float = 0.1  # --xtc-threshold (> 0.5: off)
    mirostat: int = 0  # --mirostat 1 or 2 (0: off); it replaces top-k/top-p/min-p and the penalties, as in llama.cpp
    mirostat_lr: float = 0.1  # --mirostat-lr (eta)
    mirostat_ent: float = 5.0  # --mirostat-ent (tau)
    dry_multiplier: float = 0.0  # --dry-multiplier (0: off): DRY, llama.cpp's repetition penalty for sequences
    dry_base: float = 1.75  # --dry-base: the penalty is multiplier * base ^ (length - allowed length)
    dry_allowed_length: int = 2  # --dry-allowed-length: repeats up to this long go unpenalised
    dry_penalty_last_n: int = 64  # --dry-penalty-last-n: tokens DRY looks back over (0: off)
    dry_sequence_breakers: tuple[str, ...] = ("\n", ":", "\"", "*")  # --dry-sequence-breaker (llama.cpp's)
    grammar: str = ""  # GBNF the reply must follow (--grammar, --grammar-file, -j/--json-schema, -jf)
    system_prompt: str = ""
    prompt_cache: str = ""
    chat_template: str = ""  # --chat-template NAME|FILE: "" = the GGUF's, else the model family's format
    context_shift: bool = True  # a full context drops the chat's oldest turns (False: the turn is refused)
    keep: int = -1  # --keep N: turns that begin in the first N tokens stay too (-1, 0: the system prompt only)
    threads_why: str = ""

    def resolved(self) -> Settings:
        """Fill the automatic values (threads, padded n_ctx, ubatch <= batch)."""
        s = self
        if s.n_threads <= 0:
            n, why = default_threads()
            s = replace(s, n_threads=n, threads_why=why)
        elif not s.threads_why:
            s = replace(s, threads_why="set by -t")
        if s.n_threads_batch <= 0:
            s = replace(s, n_threads_batch=s.n_threads)
        if s.n_ctx > 0:
            # llama.cpp pads n_ctx to 256; llama-cpp-python 0.3.36 then fails on
            # prompts that land in the padding, so kvtop asks for the padded size.
            s = replace(s, n_ctx=pad(s.n_ctx))
        s = replace(s, n_ubatch=min(s.n_ubatch, s.n_batch))
        return s

    @property
    def threads_follow_load(self) -> bool:
        """kvtop chose the threads (no ``-t``), so a turn may run on fewer of them: the
        cores other processes leave free (runner.calibration.load.turn_threads). With
        ``-t`` the user's threads stay, whatever the load."""
        return self.n_threads <= 0 or self.threads_why not in ("", "set by -t")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def penalties_on(s: Settings) -> bool:
    """Whether llama.cpp's penalties sampler would change anything (it returns early otherwise)."""
    return s.repeat_last_n != 0 and (s.repeat_penalty != 1.0 or s.frequency_penalty != 0.0
                                     or s.presence_penalty != 0.0)


def dry_on(s: Settings) -> bool:
    """Whether llama.cpp's DRY sampler would change anything (it returns early otherwise)."""
    return s.dry_multiplier != 0.0 and s.dry_base >= 1.0 and s.dry_penalty_last_n != 0


def sampler_text(s: Settings) -> str:
    """The sampler as the status line shows it: the penalties only when they act, so
    the usual line stays short and a changed one is visible."""
    if s.mirostat:
        return f"temp {s.temp:g} mirostat {s.mirostat} lr {s.mirostat_lr:g} ent {s.mirostat_ent:g} seed {s.seed}"
    text = f"temp {s.temp:g} top-k {s.top_k} top-p {s.top_p:g} min-p {s.min_p:g}"
    if s.typical_p < 1.0:
        text += f" typical {s.typical_p:g}"
    if s.top_n_sigma > 0:
        text += f" top-nsigma {s.top_n_sigma:g}"
    if s.xtc_probability > 0 and s.xtc_threshold <= 0.5:
        text += f" xtc {s.xtc_probability:g}/{s.xtc_threshold:g}"
    if dry_on(s):
        text += f" dry {s.dry_multiplier:g}/{s.dry_base:g}/{s.dry_allowed_length}/{s.dry_penalty_last_n}"
    if penalties_on(s):
        text += f" repeat {s.repeat_penalty:g}/{s.repeat_last_n}"
        if s.presence_penalty:
            text += f" presence {s.presence_penalty:g}"
        if s.frequency_penalty:
            text += f" frequency {s.frequency_penalty:g}"
    if s.grammar:
        text += " grammar"
    return text + f" seed {s.seed}"


UNSET_MEANS_DEFAULT = ("context_shift", "keep")  # None: not on the command line (``--server`` refuses them)


def settings_from_args(model: str, ns: argparse.Namespace) -> Settings:
    fields = Settings.__dataclass_fields__
    # None: the flag was not given (the sampler flags, -n, UNSET_MEANS_DEFAULT): Settings' default
    kwargs = {k: getattr(ns, k) for k in fields if k != "model" and getattr(ns, k, None) is not None}
    return Settings(model=model, **kwargs)
