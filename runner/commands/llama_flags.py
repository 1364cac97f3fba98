"""Every llama.cpp flag has an answer: kvtop reads it, accepts it with no effect (said
once), or refuses it in one line that says what to use instead.

``LLAMA_CPP_ARGS`` (llama_cpp_args.py, generated from the vendored llama.cpp's
common/arg.cpp) lists every flag llama-cli, llama-completion and llama-server take.
A flag that a kvtop parser has is read by that parser; any other is answered here.
``prescan`` runs before argparse, so no flag is ever read as another: argparse joins a
short flag with what follows it (``-cnv`` became ``-c nv``, ``-np 2`` became ``-n p``),
so a single-dash token that is not one of the parser's flags never reaches it.
"""

from __future__ import annotations

import argparse
import re
import sys

from kvtop.runner.commands.llama_cpp_args import LLAMA_CPP_ARGS

ATTACH = "run llama-server with it and attach: kvtop --server URL"
NO_EFFECT: dict[str, str] = {}  # flag -> why it changes nothing in kvtop
REASONS: dict[str, str] = {}  # flag -> why it is refused and what to use instead


def _no_effect(why: str, *firsts: str) -> None:
    for f in firsts:
        NO_EFFECT[f] = why


def _refuse(why: str, *firsts: str) -> None:
    for f in firsts:
        REASONS[f] = why


_no_effect("kvtop is always an interactive chat", "-cnv", "-i", "-if", "-mli", "-st", "--simple-io")
_no_effect("kvtop's dashboard draws its own colours and logs", "-co", "--log-colors", "--log-disable",
           "--log-prefix", "--log-timestamps", "-v", "-lv", "--verbose-prompt", "--display-prompt",
           "--perf", "--show-timings", "--offline")
_no_effect("kvtop sends -p TEXT as given: it never expands escapes", "--no-escape")
_refuse("kvtop sends -p TEXT as given, without expanding \\n: put the text in a file and use -f FILE", "-e", "--escape")
_no_effect("kvtop does not warm the model up (its first turn's prefill is shown as it is)", "--warmup")
_no_effect("kvtop runs one chat at a time", "-cb", "-kvu", "--kv-unified-per-slot")
_no_effect("kvtop keeps the whole chat's KV cache between turns", "--cache-prompt")
_refuse("kvtop reuses the chat's cached prefix every turn (the Prefill pane shows it): for a cold prefill "
        "use kvtop bench", "--no-cache-prompt")

_refuse("kvtop downloads nothing: give the path of a local .gguf (llama-cli -hf keeps its downloads in "
        "~/.cache/llama.cpp)", "-mu", "-dr", "-hff", "-hft", "-mmu", "-cl", "--spec-draft-hf")
_refuse("a preset that downloads a model: kvtop downloads nothing; give a local .gguf",
        *(f for (names, _) in LLAMA_CPP_ARGS for f in names[:1] if f.endswith(("-default", "-spec"))))
_refuse("kvtop chats in text only: " + ATTACH + " (llama-server's web UI takes images)", "-mm",
        "--mmproj-auto", "--mmproj-offload", "--image", "--image-min-tokens", "--image-max-tokens",
        "--mtmd-batch-max-tokens", "--video-fps", "--video-timestamp-interval", "--video-ffmpeg-dir")
_refuse("kvtop runs on one device with -ngl: for several GPUs " + ATTACH, "-dev", "-sm", "-ts", "-mg",
        "--rpc", "-fit", "-fitt", "-fitc", "--list-devices", "--op-offload", "--no-host", "--repack")
_refuse("kvtop does not run a draft model: for speculative decoding " + ATTACH,
        *(f for (names, _) in LLAMA_CPP_ARGS for f in names[:1] if f.startswith(("--spec-", "--draft"))))
_refuse("a llama-server setting: start llama-server with it, then kvtop --server URL", "--host", "--port",
        "--reuse-port", "--path", "--cors-origins", "--cors-methods", "--cors-headers", "--cors-credentials",
        "--api-prefix", "--ui-config", "--ui-config-file", "--ui-mcp-proxy", "--tools", "--tools-runtime",
        "--mcp-servers-config", "--mcp-servers-json", "-ag", "--ui", "--embedding", "--rerank",
        "--api-key-file", "--ssl-key-file", "--ssl-cert-file", "-to", "--sse-ping-interval", "--threads-http",
        "--cache-reuse", "--metrics", "--props", "--slots", "--slot-save-path", "--media-path", "--models-dir",
        "--models-preset", "--models-max", "--models-autoload", "-np", "-a", "--tags", "--sleep-idle-seconds",
        "-sps", "--server-base", "-cram", "--cache-idle-slots", "-ctxcp", "-cms", "--log-file", "--log-jsonl",
        "--log-prompts-dir", "--prefill-assistant", "--skip-chat-parsing", "--embd-normalize", "--pooling",
        "-o", "-dt", "--lora-init-without-apply", "-lm", "-lzm")
_refuse("not in kvtop's sampler chain (temp, top-k, top-p, min-p, typical, top-nsigma, XTC, DRY, mirostat, "
        "penalties, seed): use those, or " + ATTACH,
        "--adaptive-target", "--adaptive-decay", "--dynatemp-range",
        "--dynatemp-exp", "--samplers", "--sampler-seq", "-l", "-bs")
_refuse("kvtop takes --rope-freq-base and --rope-freq-scale; for the others " + ATTACH, "--rope-scaling",
        "--rope-scale", "--yarn-orig-ctx", "--yarn-ext-factor",
        "--yarn-attn-factor", "--yarn-beta-slow", "--yarn-beta-fast", "-gan", "-gaw")
_refuse("kvtop applies LoRA adapters (--lora, --lora-scaled), not control vectors: " + ATTACH,
        "--control-vector", "--control-vector-scaled", "--control-vector-layer-range")
_refuse("kvtop leaves thread placement to the OS (use taskset to pin it): -t and -tb set the threads",
        "-C", "-Cr", "--cpu-strict", "--prio", "--poll", "-Cb", "-Crb", "--cpu-strict-batch", "--prio-batch",
        "--poll-batch")
_refuse("kvtop's chat takes the system prompt with -sys TEXT and the first message with -f FILE or -p TEXT",
        "-sysf", "-bf", "--in-prefix", "--in-suffix", "--in-prefix-bos", "-r", "-ptc", "--spm-infill", "-sp")
_refuse("kvtop saves the first prompt's KV state with --prompt-cache FILE only", "--prompt-cache-all",
        "--prompt-cache-ro", "-lcs", "-lcd")
_refuse("kvtop renders the GGUF's chat template: --chat-template NAME|FILE replaces it", "--chat-template-file",
        "--chat-template-kwargs", "--reasoning-format", "-rea", "--reasoning-effort", "--reasoning-budget",
        "--reasoning-budget-message", "--reasoning-preserve")
_refuse("kvtop reads the GGUF as it is: " + ATTACH + " to override its metadata", "--override-kv",
        "--check-tensors")
_refuse("kvtop prints its usage with -h", "--usage", "--completion-bash")
_refuse("kvtop always renders the GGUF's Jinja template (sandboxed): --chat-template NAME|FILE replaces it", "--jinja")

GROUPS: dict[str, tuple[str, ...]] = {f: names for (names, _) in LLAMA_CPP_ARGS for f in names}
VALUES: dict[str, int] = {f: n for (names, n) in LLAMA_CPP_ARGS for f in names}

# kvtop flags that set up the local engine, and llama-server's flag to restart it with
# (``kvtop --server`` refuses them: a running server's load settings cannot change)
LOCAL_ONLY: dict[str, str] = {
    "-c": "-c", "--ctx-size": "-c", "-t": "-t", "--threads": "-t", "-tb": "-tb", "--threads-batch": "-tb",
    "-b": "-b", "--batch-size": "-b", "-ub": "-ub", "--ubatch-size": "-ub", "-ngl": "-ngl",
    "--n-gpu-layers": "-ngl", "--gpu-layers": "-ngl", "-fa": "-fa", "--flash-attn": "-fa",
    "-ctk": "-ctk", "--cache-type-k": "-ctk", "-ctv": "-ctv", "--cache-type-v": "-ctv",
    "--swa-full": "--swa-full", "--mlock": "--mlock", "--no-mmap": "--no-mmap",
    "--prompt-cache": "--slot-save-path", "--chat-template": "--chat-template",
    "--numa": "--numa", "-kvo": "-kvo", "--kv-offload": "-kvo", "-nkvo": "-nkvo", "--no-kv-offload": "-nkvo",
    "--rope-freq-base": "--rope-freq-base", "--rope-freq-scale": "--rope-freq-scale",
    "--lora": "--lora", "--lora-scaled": "--lora-scaled", "-ot": "-ot", "--override-tensor": "-ot",
    "-cmoe": "-cmoe", "--cpu-moe": "-cmoe", "-ncmoe": "-ncmoe", "--n-cpu-moe": "-ncmoe", "-ncffn": "-ncffn",
    "--n-cpu-ffn": "-ncffn",
}


def answer(flag: str) -> tuple[str, str]:
    """("no effect" | "refused" | "unknown", why) for a flag kvtop's parser does not have."""
    first = flag if flag in NO_EFFECT or flag in REASONS else GROUPS.get(flag, (flag,))[0]
    if first in NO_EFFECT:
        return "no effect", NO_EFFECT[first]
    if first in REASONS:
        return "refused", REASONS[first]
    if flag in GROUPS:
        return "refused", "not in kvtop: " + ATTACH
    return "unknown", "neither kvtop nor llama.cpp has this flag (kvtop -h lists kvtop's)"


_NUMBER = re.compile(r"^-\d|^-\.\d")


def prescan(argv: list[str], parser: argparse.ArgumentParser, *, server: bool = False,
            reasons: dict[str, str] | None = None) -> tuple[list[str], list[str]]:
    """(argv for argparse, one note per flag accepted with no effect); a refused, unknown
    or (with ``server``) local-engine flag is a usage error (exit 2) naming it; ``reasons``:
    a command's own word for a flag it does not take."""
    known = set(parser._option_string_actions)  # noqa: SLF001 (argparse keeps no public list)
    kept: list[str] = []
    notes: list[str] = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        i += 1
        if tok == "--":
            kept += argv[i - 1:]
            break
        if not tok.startswith("-") or tok == "-" or _NUMBER.match(tok):
            kept.append(tok)
            continue
        name = tok.split("=", 1)[0] if tok.startswith("--") else tok
        if name in known:
            if server and name in LOCAL_ONLY:
                parser.error(f"{name} sets up a local engine; with --server it cannot change the running "
                             f"server: restart llama-server with {LOCAL_ONLY[name]}")
            kept.append(tok)
            continue
        kind, why = answer(name)
        if reasons and name in reasons:
            parser.error(f"{name} {reasons[name]}")
        if parser.prog != "kvtop" and name in kvtop_flags():
            parser.error(f"{name}: {parser.prog} does not use it (see {parser.prog} -h)")
        if kind != "no effect":
            parser.error(f"{name}: {why}")
        notes.append(f"{name}: accepted, no effect ({why})")
        if VALUES.get(name, 0) and "=" not in tok:
            for _ in range(VALUES[name]):
                if i < len(argv) and not (argv[i].startswith("-") and not _NUMBER.match(argv[i])):
                    i += 1
    return kept, list(dict.fromkeys(notes))  # each said once


def kvtop_flags() -> set[str]:
    """The llama.cpp flags ``kvtop`` itself reads (a subcommand that does not is told so)."""
    from kvtop.runner.commands.engine_flags import add_engine_flags

    p = argparse.ArgumentParser(add_help=False)
    add_engine_flags(p)
    return set(p._option_string_actions)  # noqa: SLF001


def parse_flags(p: argparse.ArgumentParser, argv: list[str], reasons: dict[str, str] | None = None) -> argparse.Namespace:
    """``prescan`` then argparse, for the headless commands: the notes go to stderr."""
    kept, notes = prescan(argv, p, reasons=reasons)
    a = p.parse_args(kept)
    for note in notes:
        print(f"{p.prog}: {note}", file=sys.stderr)
    return a
