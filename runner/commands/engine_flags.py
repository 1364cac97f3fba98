"""llama.cpp's own flags, added to every kvtop command's parser (``kvtop``, ``kvtop
bench``), so a user can paste their llama-cli/llama-server flags; ``settings_from_args``
(runner/settings.py) turns the parsed flags into ``Settings``.

Here, above runner/settings.py and runner/engine/, because a flag's check may need the
engine (``--chat-template`` names a llama.cpp chat format or a Jinja file).
"""

from __future__ import annotations

import argparse
import os

from kvtop.runner.cli_types import INT32_MAX, UINT32_MAX, float_in, int_in, non_negative_int, positive_int
from kvtop.runner.model.quant_types import KV_CACHE_TYPES
from kvtop.runner.settings import DEFAULT_CTX

MAX_THREADS = 512  # GGML_MAX_N_THREADS
MAX_TEMP = 100.0
MAX_PENALTY = 100.0  # llama.cpp takes any finite value; a bound keeps 1/penalty finite too


def add_engine_flags(p: argparse.ArgumentParser, chat: bool = True) -> None:
    """llama.cpp's flag names, so a user can paste their llama-cli/llama-server flags;
    ``chat=False`` (``kvtop bench``): the load settings only, no sampler or chat flags."""
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
    g.add_argument("-ctk", "--cache-type-k", dest="cache_type_k", choices=list(KV_CACHE_TYPES), default="f16",
                   help="K cache type (default: f16)")
    g.add_argument("-ctv", "--cache-type-v", dest="cache_type_v", choices=list(KV_CACHE_TYPES), default="f16",
                   help="V cache type (default: f16)")
    g.add_argument("--swa-full", dest="swa_full", action="store_true",
                   help="keep a full-size cache for sliding-window layers")
    g.add_argument("--numa", choices=["distribute", "isolate", "numactl"], default="",
                   help="llama.cpp's NUMA placement of its threads and memory (default: off)")
    g.add_argument("-kvo", "--kv-offload", dest="kv_offload", action="store_true", default=True,
                   help="with -ngl, keep the KV cache on the GPU (llama.cpp's default)")
    g.add_argument("-nkvo", "--no-kv-offload", dest="kv_offload", action="store_false",
                   help="with -ngl, keep the KV cache in host memory")
    g.add_argument("--rope-freq-base", dest="rope_freq_base", type=float_in(0.0, 1e12), default=0.0, metavar="N",
                   help="RoPE base frequency (default: 0 = the model's)")
    g.add_argument("--rope-freq-scale", dest="rope_freq_scale", type=float_in(0.0, 1e6), default=0.0, metavar="N",
                   help="RoPE frequency scaling factor, expands the context by 1/N (default: 0 = the model's)")
    g.add_argument("--mlock", action="store_true")
    g.add_argument("--no-mmap", dest="mmap", action="store_false")
    g.add_argument("-n", "--predict", "--n-predict", dest="n_predict", type=int_in(-1, INT32_MAX),
                   default=None if chat else -1,  # None: not given (the demo model has a reply limit)
                   help="tokens to generate per turn (-1 = until end of turn or context full; default -1, "
                        "for the demo model 512, at most a quarter of the context)" if chat else
                        "tokens to generate per turn")
    if chat:
        g.add_argument("-ot", "--override-tensor", dest="override_tensor", action=TensorOverrides, default=(),
                       metavar="PATTERN=TYPE,...", help="weights whose names match a regex go to that buffer type")
        g.add_argument("-cmoe", "--cpu-moe", dest="override_tensor", action=TensorOverrides, nargs=0,
                       help="keep all Mixture of Experts (MoE) weights in the CPU")
        g.add_argument("-ncmoe", "--n-cpu-moe", dest="override_tensor", action=TensorOverrides, metavar="N",
                       help="keep the MoE weights of the first N layers in the CPU")
        g.add_argument("-ncffn", "--n-cpu-ffn", dest="override_tensor", action=TensorOverrides, metavar="N",
                       help="keep the dense FFN weights of the first N layers in the CPU")
        g.add_argument("--lora", dest="lora", action=LoraFiles, default=(), metavar="FNAME",
                       help="a LoRA adapter GGUF (comma-separated for several; scale 1)")
        g.add_argument("--lora-scaled", dest="lora", action=LoraFiles, default=(), metavar="FNAME:SCALE,...",
                       help="LoRA adapters with their scales")
        add_chat_flags(g)
        add_spec_flags(p.add_argument_group("speculative decoding (llama.cpp's --spec-* flags and defaults)"))


def add_spec_flags(g: argparse._ArgumentGroup | argparse.ArgumentParser) -> None:
    """llama.cpp's speculative decoding flags, their defaults and ranges (common/arg.cpp)."""
    from kvtop.runner.engine.draft_model import SPEC_TYPES

    g.add_argument("--spec-type", dest="spec_type", type=spec_type_arg, default="none", metavar="TYPES",
                   help=f"comma-separated drafters: {', '.join(SPEC_TYPES)} (default: none)")
    g.add_argument("-md", "--spec-draft-model", "--model-draft", dest="spec_draft_model", type=draft_model_arg,
                   default="", metavar="FILE", help="draft model for draft-simple (its vocabulary must be the model's)")
    g.add_argument("--spec-draft-n-max", dest="spec_draft_n_max", type=int_in(1, MAX_DRAFT), default=3, metavar="N",
                   help="draft-simple: tokens to draft per pass (default: 3)")
    g.add_argument("--spec-draft-n-min", dest="spec_draft_n_min", type=int_in(0, MAX_DRAFT), default=0, metavar="N",
                   help="draft-simple: a shorter draft is not verified (default: 0)")
    g.add_argument("--spec-draft-p-min", "--draft-p-min", dest="spec_draft_p_min", type=float_in(0.0, 1.0),
                   default=0.0, metavar="P", help="draft-simple: stop drafting below this probability (default: 0.00)")
    for kind in ("simple", "map-k", "map-k4v"):
        key = kind.replace("-", "_")
        g.add_argument(f"--spec-ngram-{kind}-size-n", dest=f"spec_ngram_{key}_size_n", type=int_in(1, MAX_DRAFT),
                       default=12, metavar="N", help=f"ngram-{kind}: lookup n-gram length (default: 12)")
        g.add_argument(f"--spec-ngram-{kind}-size-m", dest=f"spec_ngram_{key}_size_m", type=int_in(1, MAX_DRAFT),
                       default=48, metavar="N", help=f"ngram-{kind}: draft m-gram length (default: 48)")
        g.add_argument(f"--spec-ngram-{kind}-min-hits", dest=f"spec_ngram_{key}_min_hits", type=int_in(1, 65535),
                       default=1, metavar="N", help=f"ngram-{kind}: minimum hits (default: 1)")
    g.add_argument("--spec-ngram-mod-n-match", dest="spec_ngram_mod_n_match", type=int_in(1, MAX_DRAFT), default=24,
                   metavar="N", help="ngram-mod: lookup length (default: 24)")
    g.add_argument("--spec-ngram-mod-n-max", dest="spec_ngram_mod_n_max", type=int_in(0, MAX_DRAFT), default=64,
                   metavar="N", help="ngram-mod: most tokens drafted (default: 64)")
    g.add_argument("--spec-ngram-mod-n-min", dest="spec_ngram_mod_n_min", type=int_in(0, MAX_DRAFT), default=48,
                   metavar="N", help="ngram-mod: fewest tokens drafted (default: 48)")


MAX_DRAFT = 1024  # llama.cpp's bound on the n-gram sizes; a draft is also cut to fit one ubatch


def spec_type_arg(value: str) -> str:
    from kvtop.runner.engine.draft_model import spec_types

    try:
        spec_types(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def draft_model_arg(path: str) -> str:
    """A draft GGUF kvtop can read (the vocabulary is checked once both models load)."""
    from kvtop.runner.model.gguf_header import check_loadable, read_header

    if not path:  # argparse converts the default too
        return path
    try:
        check_loadable(read_header(path))
    except FileNotFoundError:
        raise argparse.ArgumentTypeError(f"{path}: no such file") from None
    except (OSError, ValueError) as exc:
        raise argparse.ArgumentTypeError(f"{path}: {exc}") from None
    return path


FFN_EXPS = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"  # llama.cpp's LLM_FFN_EXPS_REGEX (common/common.h)
FFN_DENSE = r"\.ffn_(up|down|gate)\."  # LLM_FFN_DENSE_REGEX


class TensorOverrides(argparse.Action):
    """-ot PATTERN=TYPE[,…] and its shorthands -cmoe, -ncmoe N, -ncffn N, as common/arg.cpp
    builds llama.cpp's tensor buffer overrides: (pattern, buffer type) pairs, in order."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        from kvtop.runner.engine.tensor_overrides import split_overrides

        pairs: list[tuple[str, str]] = list(getattr(namespace, self.dest, ()) or ())
        if option_string in ("-cmoe", "--cpu-moe"):
            pairs.append((FFN_EXPS, "CPU"))
        elif option_string in ("-ot", "--override-tensor"):
            try:
                pairs += split_overrides(str(values))
            except ValueError as exc:
                parser.error(f"{option_string}: {exc}")
        else:
            n = str(values)
            if not n.isdigit() or int(n) > 100_000:
                parser.error(f"{option_string}: must be a number of layers from 0 (got {n!r})")
            regex = FFN_EXPS if option_string in ("-ncmoe", "--n-cpu-moe") else FFN_DENSE
            pairs += [(f"blk\\.{i}{regex}", "CPU") for i in range(int(n))]
        setattr(namespace, self.dest, tuple(pairs))


class LoraFiles(argparse.Action):
    """--lora FNAME[,FNAME…] (scale 1) and --lora-scaled FNAME:SCALE[,…], as llama.cpp reads
    them: each adds (path, scale) pairs, in order; a file that is not there is a usage error."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        pairs: list[tuple[str, float]] = list(getattr(namespace, self.dest, ()) or ())
        for item in str(values).split(","):
            path, scale = item, 1.0
            if option_string == "--lora-scaled":
                path, sep, num = item.rpartition(":")
                if not sep or not path:
                    parser.error(f"--lora-scaled: {item!r}: the format is FNAME:SCALE")
                try:
                    scale = float(num)
                except ValueError:
                    parser.error(f"--lora-scaled: {item!r}: the scale must be a number")
                if scale != scale or scale in (float("inf"), float("-inf")):
                    parser.error(f"--lora-scaled: {item!r}: the scale must be finite")
            if not os.path.isfile(path):
                parser.error(f"{option_string}: {path}: no such file")
            pairs.append((os.path.abspath(path), scale))
        setattr(namespace, self.dest, tuple(pairs))


DRY_BREAKERS: tuple[str, ...] = ("\n", ":", "\"", "*")  # llama.cpp's (common/common.h)


class SequenceBreakers(argparse.Action):
    """--dry-sequence-breaker, as llama.cpp reads it: the first one given clears the
    defaults, each adds one, and "none" clears them all."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        had = getattr(namespace, self.dest, DRY_BREAKERS)
        now: tuple[str, ...] = () if had is DRY_BREAKERS else tuple(had)
        setattr(namespace, self.dest, () if values == "none" else (*now, str(values)))


def add_chat_flags(g: argparse._ArgumentGroup | argparse.ArgumentParser) -> None:
    """The sampler and the chat: what a turn uses, not a bench."""
    g.add_argument("--ignore-eos", dest="ignore_eos", action="store_true",
                   help="never sample an end-of-generation token, as llama.cpp (for benchmarks)")
    g.add_argument("--temp", "--temperature", dest="temp", type=float_in(0.0, MAX_TEMP), default=None, metavar="N",
                   help="temperature (default: the model's recommendation, else 0.8)")
    g.add_argument("--top-k", dest="top_k", type=non_negative_int, default=None, metavar="N",
                   help="top-k sampling (default: the model's recommendation, else 40; 0 = disabled)")
    g.add_argument("--top-p", dest="top_p", type=float_in(0.0, 1.0), default=None, metavar="N",
                   help="top-p sampling (default: the model's recommendation, else 0.95; 1.0 = disabled)")
    g.add_argument("--min-p", dest="min_p", type=float_in(0.0, 1.0), default=None, metavar="N",
                   help="min-p sampling (default: the model's recommendation, else 0.05; 0.0 = disabled)")
    g.add_argument("--repeat-penalty", dest="repeat_penalty", type=float_in(0.0, MAX_PENALTY, lo_open=True),
                   default=None, metavar="N", help="penalize repeated tokens (default: the model's recommendation, else 1.0 = disabled)")
    g.add_argument("--repeat-last-n", dest="repeat_last_n", type=int_in(0, INT32_MAX), default=None, metavar="N",
                   help="last n tokens the penalties consider (default: the model's recommendation, else 64; 0 = disabled)")
    g.add_argument("--presence-penalty", dest="presence_penalty", type=float_in(-MAX_PENALTY, MAX_PENALTY),
                   default=None, metavar="N", help="repeat alpha presence penalty (default: 0.0 = disabled)")
    g.add_argument("--frequency-penalty", dest="frequency_penalty", type=float_in(-MAX_PENALTY, MAX_PENALTY),
                   default=None, metavar="N", help="repeat alpha frequency penalty (default: 0.0 = disabled)")
    g.add_argument("--typical", "--typical-p", dest="typical_p", type=float_in(0.0, 1.0), default=None, metavar="N",
                   help="locally typical sampling (default: 1.0 = disabled)")
    g.add_argument("--top-nsigma", "--top-n-sigma", dest="top_n_sigma", type=float_in(-1.0, MAX_PENALTY),
                   default=None, metavar="N", help="top-n-sigma sampling (default: -1 = disabled)")
    g.add_argument("--xtc-probability", dest="xtc_probability", type=float_in(0.0, 1.0), default=None, metavar="N",
                   help="XTC: the chance of removing the top tokens (default: 0.0 = disabled)")
    g.add_argument("--xtc-threshold", dest="xtc_threshold", type=float_in(0.0, 1.0), default=None, metavar="N",
                   help="XTC: the probability above which tokens are removed (default: 0.1; > 0.5 disables XTC)")
    g.add_argument("--dry-multiplier", dest="dry_multiplier", type=float_in(0.0, MAX_PENALTY), default=0.0,
                   metavar="N", help="DRY sampling multiplier (default: 0.0 = disabled)")
    g.add_argument("--dry-base", dest="dry_base", type=float_in(1.0, MAX_PENALTY), default=1.75, metavar="N",
                   help="DRY sampling base value (default: 1.75)")
    g.add_argument("--dry-allowed-length", dest="dry_allowed_length", type=int_in(0, INT32_MAX), default=2,
                   metavar="N", help="allowed length for DRY sampling (default: 2)")
    g.add_argument("--dry-penalty-last-n", dest="dry_penalty_last_n", type=int_in(0, INT32_MAX), default=64,
                   metavar="N", help="DRY penalty for the last n tokens (default: 64, 0 = disable)")
    g.add_argument("--dry-sequence-breaker", dest="dry_sequence_breakers", action=SequenceBreakers,
                   default=DRY_BREAKERS, metavar="STRING",
                   help="add a DRY sequence breaker, clearing the defaults ('\\n', ':', '\"', '*'); \"none\": no breakers")
    g.add_argument("--mirostat", type=int_in(0, 2), default=None, metavar="N",
                   help="Mirostat sampling 1 or 2, instead of top-k/top-p/min-p and the penalties (default: 0 = off)")
    g.add_argument("--mirostat-lr", dest="mirostat_lr", type=float_in(0.0, MAX_PENALTY), default=None, metavar="N",
                   help="Mirostat learning rate, eta (default: 0.1)")
    g.add_argument("--mirostat-ent", dest="mirostat_ent", type=float_in(0.0, MAX_PENALTY), default=None, metavar="N",
                   help="Mirostat target entropy, tau (default: 5.0)")
    g.add_argument("--grammar", dest="grammar", default="", metavar="GBNF",
                   help="a GBNF grammar the reply must follow (llama.cpp's grammars/ format)")
    g.add_argument("--grammar-file", dest="grammar", type=grammar_file, metavar="FILE", help="the grammar from a file")
    g.add_argument("-j", "--json-schema", dest="grammar", type=json_schema, metavar="SCHEMA",
                   help="a JSON schema the reply must follow (as a grammar), e.g. '{}' for any JSON object")
    g.add_argument("-jf", "--json-schema-file", dest="grammar", type=json_schema_file, metavar="FILE",
                   help="the JSON schema from a file")
    g.add_argument("-s", "--seed", dest="seed", type=int_in(-1, UINT32_MAX), default=-1)
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


def chat_template_arg(value: str) -> str:
    from kvtop.runner.engine.chat_template import check_override

    return check_override(value)


MAX_GRAMMAR_BYTES = 1 << 20


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read(MAX_GRAMMAR_BYTES + 1)
    except (OSError, UnicodeDecodeError) as exc:
        raise argparse.ArgumentTypeError(f"cannot read {path}: {exc.__class__.__name__}") from None
    if len(text) > MAX_GRAMMAR_BYTES or not text.strip():
        raise argparse.ArgumentTypeError(f"{path}: empty, or over {MAX_GRAMMAR_BYTES:,} bytes")
    return text


def grammar_file(path: str) -> str:
    return _read(path)


def json_schema(text: str) -> str:
    """The schema as llama.cpp's GBNF (llama-cpp-python's converter, from llama.cpp's)."""
    try:
        from llama_cpp.llama_grammar import json_schema_to_gbnf

        return str(json_schema_to_gbnf(text))
    except Exception as exc:  # bad JSON, or a schema the converter does not take
        raise argparse.ArgumentTypeError(f"not a JSON schema kvtop can follow ({exc.__class__.__name__})") from None


def json_schema_file(path: str) -> str:
    return json_schema(_read(path))


def draft_refusal(model: str, spec_type: str, draft: str) -> str | None:
    """Why the --spec-* settings cannot run, before anything starts: draft-simple without
    a draft model, or a draft whose GGUF header shows another vocabulary (tokenizer,
    size, BOS/EOS, as common_speculative_are_compatible; the engine checks every token
    once both are loaded)."""
    from kvtop.runner.engine.draft_model import SPEC_VOCAB_MAX_SIZE_DIFFERENCE, spec_types
    from kvtop.runner.model.gguf_header import ArraySummary, read_header

    types = spec_types(spec_type)
    if "draft-simple" in types and not draft:
        return "--spec-type draft-simple needs -md FILE (a draft GGUF with the model's vocabulary)"
    if not draft:
        return None
    try:
        tgt, dft = read_header(model).metadata, read_header(draft).metadata
    except (OSError, ValueError):
        return None  # the model's own check says what is wrong with it
    def size(meta: dict[str, object]) -> int:
        toks = meta.get("tokenizer.ggml.tokens")
        return toks.length if isinstance(toks, ArraySummary) else len(toks) if isinstance(toks, list) else 0
    why = None
    if tgt.get("tokenizer.ggml.model") != dft.get("tokenizer.ggml.model"):
        why = f"its tokenizer is {dft.get('tokenizer.ggml.model')}, the model's {tgt.get('tokenizer.ggml.model')}"
    elif abs(size(tgt) - size(dft)) > SPEC_VOCAB_MAX_SIZE_DIFFERENCE:
        why = f"its vocabulary has {size(dft):,} tokens, the model's {size(tgt):,}"
    else:
        for key in ("tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"):
            if tgt.get(key) != dft.get(key):
                why = f"its {key.split('.')[-1].split('_')[0].upper()} token differs from the model's"
                break
    return f"-md {draft}: not a draft for this model: {why}" if why else None
