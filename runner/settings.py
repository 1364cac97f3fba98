"""Engine settings under llama.cpp's own flag names, and kvtop's defaults.

Defaults are chosen to be faster than llama-cpp-python's: it uses half the
logical cores for decode (1 thread on a 2-core machine). kvtop uses every core
it may run on, capped at the physical core count (hyper-threads slow decode).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import asdict, dataclass, replace

from runner.cli_types import INT32_MAX, UINT32_MAX, float_in, int_in, non_negative_int, positive_int
from runner.physics.kv_bytes import pad
from runner.model.quant_types import KV_CACHE_TYPES

DEFAULT_CTX = 4096
MAX_THREADS = 512  # GGML_MAX_N_THREADS
MAX_TEMP = 100.0
MAX_PENALTY = 100.0  # llama.cpp takes any finite value; a bound keeps 1/penalty finite too


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
    system_prompt: str = ""
    prompt_cache: str = ""
    chat_template: str = ""  # --chat-template NAME|FILE: "" = the GGUF's, else the model family's format
    context_shift: bool = True  # a full context drops the chat's oldest turns (False: the turn is refused)
    keep: int = -1  # --keep N: turns that begin in the first N tokens stay too (-1, 0: the system prompt only)
    threads_why: str = ""

    def resolved(self) -> "Settings":
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

    def to_dict(self) -> dict:
        return asdict(self)


def add_engine_flags(p: argparse.ArgumentParser) -> None:
    """llama.cpp's flag names, so a user can paste their llama-cli/llama-server flags."""
    g = p.add_argument_group("llama.cpp settings")
    g.add_argument("-c", "--ctx-size", dest="n_ctx", type=int_in(0, INT32_MAX), default=DEFAULT_CTX,
                   help="context size in tokens (padded to 256; 0 = the model's trained context)")
    g.add_argument("-t", "--threads", dest="n_threads", type=int_in(0, MAX_THREADS), default=0,
                   help="decode threads (default: physical cores, capped at usable cores)")
    g.add_argument("-tb", "--threads-batch", dest="n_threads_batch", type=int_in(0, MAX_THREADS), default=0,
                   help="prefill threads (default: same as --threads)")
    g.add_argument("-b", "--batch-size", dest="n_batch", type=positive_int, default=512)
    g.add_argument("-ub", "--ubatch-size", dest="n_ubatch", type=positive_int, default=512)
    g.add_argument("-ngl", "--n-gpu-layers", "--gpu-layers", dest="n_gpu_layers", type=int_in(-1, INT32_MAX), default=0)
    g.add_argument("-fa", "--flash-attn", dest="flash_attn", choices=["on", "off", "auto"], default="auto",
                   nargs="?", const="on", help="on, off or auto; a bare -fa (older llama.cpp) means on")
    g.add_argument("-ctk", "--cache-type-k", dest="cache_type_k", choices=list(KV_CACHE_TYPES), default="f16")
    g.add_argument("-ctv", "--cache-type-v", dest="cache_type_v", choices=list(KV_CACHE_TYPES), default="f16")
    g.add_argument("--swa-full", dest="swa_full", action="store_true",
                   help="keep a full-size cache for sliding-window layers")
    g.add_argument("--mlock", action="store_true")
    g.add_argument("--no-mmap", dest="mmap", action="store_false")
    g.add_argument("-n", "--n-predict", dest="n_predict", type=int_in(-1, INT32_MAX), default=-1,
                   help="tokens to generate per turn (-1 = until end of turn or context full)")
    g.add_argument("--ignore-eos", dest="ignore_eos", action="store_true",
                   help="keep generating past end-of-generation tokens (for benchmarks)")
    g.add_argument("--temp", type=float_in(0.0, MAX_TEMP), default=0.8)
    g.add_argument("--top-k", dest="top_k", type=non_negative_int, default=40)
    g.add_argument("--top-p", dest="top_p", type=float_in(0.0, 1.0), default=0.95)
    g.add_argument("--min-p", dest="min_p", type=float_in(0.0, 1.0), default=0.05, metavar="N",
                   help="min-p sampling (default: 0.05, 0.0 = disabled)")
    g.add_argument("--repeat-penalty", dest="repeat_penalty", type=float_in(0.0, MAX_PENALTY, lo_open=True),
                   default=1.0, metavar="N", help="penalize repeated tokens (default: 1.0 = disabled)")
    g.add_argument("--repeat-last-n", dest="repeat_last_n", type=int_in(0, INT32_MAX), default=64, metavar="N",
                   help="last n tokens the penalties consider (default: 64, 0 = disabled)")
    g.add_argument("--presence-penalty", dest="presence_penalty", type=float_in(-MAX_PENALTY, MAX_PENALTY),
                   default=0.0, metavar="N", help="repeat alpha presence penalty (default: 0.0 = disabled)")
    g.add_argument("--frequency-penalty", dest="frequency_penalty", type=float_in(-MAX_PENALTY, MAX_PENALTY),
                   default=0.0, metavar="N", help="repeat alpha frequency penalty (default: 0.0 = disabled)")
    g.add_argument("--seed", type=int_in(-1, UINT32_MAX), default=-1)
    g.add_argument("-sys", "--system-prompt", dest="system_prompt", default="")
    g.add_argument("--prompt-cache", dest="prompt_cache", default="", metavar="FILE",
                   help="save the first prompt's KV state here, and restore it on the next start")
    g.add_argument("--chat-template", dest="chat_template", type=chat_template_arg, default="", metavar="NAME|FILE",
                   help="a llama.cpp chat format (gemma, llama3, chatml, phi3, ...) or a Jinja template file, "
                        "instead of the GGUF's template (or, without one, the format picked from the model)")
    g.add_argument("--context-shift", dest="context_shift", action="store_true", default=None,
                   help="when the chat no longer fits the context, leave its oldest whole turns out of the "
                        "prompt, keeping the system prompt (kvtop's default; llama.cpp's is off)")
    g.add_argument("--no-context-shift", dest="context_shift", action="store_false", default=None,
                   help="when the chat no longer fits the context, refuse the turn instead")
    g.add_argument("--keep", dest="keep", type=int_in(-1, INT32_MAX), default=None, metavar="N",
                   help="tokens at the start of the chat a context shift keeps, in whole turns "
                        "(default -1: the system prompt only)")


def penalties_on(s: Settings) -> bool:
    """Whether llama.cpp's penalties sampler would change anything (it returns early otherwise)."""
    return s.repeat_last_n != 0 and (s.repeat_penalty != 1.0 or s.frequency_penalty != 0.0
                                     or s.presence_penalty != 0.0)


def sampler_text(s: Settings) -> str:
    """The sampler as the status line shows it: the penalties only when they act, so
    the usual line stays short and a changed one is visible."""
    text = f"temp {s.temp:g} top-k {s.top_k} top-p {s.top_p:g} min-p {s.min_p:g}"
    if penalties_on(s):
        text += f" repeat {s.repeat_penalty:g}/{s.repeat_last_n}"
        if s.presence_penalty:
            text += f" presence {s.presence_penalty:g}"
        if s.frequency_penalty:
            text += f" frequency {s.frequency_penalty:g}"
    return text + f" seed {s.seed}"


def chat_template_arg(value: str) -> str:
    from runner.engine.chat_template import check_override

    return check_override(value)


UNSET_MEANS_DEFAULT = ("context_shift", "keep")  # None: not on the command line (``--server`` refuses them)


def settings_from_args(model: str, ns: argparse.Namespace) -> Settings:
    fields = Settings.__dataclass_fields__
    kwargs = {k: getattr(ns, k) for k in fields if k != "model" and hasattr(ns, k)}
    for k in UNSET_MEANS_DEFAULT:
        if kwargs.get(k, 0) is None:
            del kwargs[k]
    return Settings(model=model, **kwargs)
