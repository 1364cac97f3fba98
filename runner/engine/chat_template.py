"""Chat templating: the GGUF's own Jinja template, rendered only in a sandbox, or one
of llama.cpp's named formats.

A chat template comes from an untrusted file (CVE-2024-34359 was an SSTI through
exactly this). It is rendered in Jinja's ``ImmutableSandboxedEnvironment`` with a
small ``range`` limit, an output-size limit checked while rendering, and a time
limit. Any failure (sandbox violation, syntax error, runaway loop, huge output)
falls back to a named format and says why.

Which named format: a GGUF without a template (Gemma-3 270M's has none) must not get
ChatML, whose tokens the model has never seen (it then echoes "<|im_end|>user").
The family is read from the vocabulary's special tokens (``<start_of_turn>`` is
Gemma's), then from the architecture, and rendered by llama.cpp's own code for that
name (``llama_chat_apply_template``: C, no Jinja). ``--chat-template NAME|FILE``
overrides all of it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from types import FrameType
from typing import Any, NoReturn, TypeVar, cast

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from kvtop.runner.units import MIB

T = TypeVar("T")

MAX_RANGE = 10_000
MAX_OUTPUT_CHARS = 4 * 1024 * 1024
TIME_LIMIT_S = 2.0


class TemplateTimeout(Exception):
    pass


class TemplateTooLarge(Exception):
    pass


class _Sandbox(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset(["*", "**"])

    def call_binop(self, context: jinja2.runtime.Context, operator: str, left: Any, right: Any) -> Any:
        # "a" * 10**9 would allocate before any size check could run.
        if operator == "*" and isinstance(left, (str, list)) and isinstance(right, int):
            if len(left) * right > MAX_OUTPUT_CHARS:
                raise TemplateTooLarge("template output exceeds the size limit")
        if operator == "*" and isinstance(right, (str, list)) and isinstance(left, int):
            if len(right) * left > MAX_OUTPUT_CHARS:
                raise TemplateTooLarge("template output exceeds the size limit")
        if operator == "**" and isinstance(right, int) and right > 64:
            raise TemplateTooLarge("exponent too large")
        return super().call_binop(context, operator, left, right)


def _raise_exception(message: str) -> NoReturn:
    raise jinja2.exceptions.TemplateError(message)


def _make_env() -> _Sandbox:
    env = _Sandbox(trim_blocks=True, lstrip_blocks=True, autoescape=False)
    bounded_range = cast(Callable[..., range], env.globals["range"])  # jinja's sandboxed range

    def safe_range(*args: int) -> range:
        r = range(*args)
        if len(r) > MAX_RANGE:
            raise TemplateTooLarge(f"range of {len(r)} exceeds {MAX_RANGE}")
        return bounded_range(*args)

    env.globals["range"] = safe_range
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@dataclass(frozen=True)
class RenderedPrompt:
    text: str
    template_name: str  # "gguf", "file" (--chat-template FILE) or a llama.cpp format's name
    fallback_reason: str | None  # why the GGUF's own template was not used (None: it was, or the flag chose)
    seconds: float


# A family is known by special tokens its vocabulary has (first match wins), else by
# the architecture's name. Names are llama.cpp's (``builtin_names()``).
FAMILY_TOKENS = (
    ("gemma", "<start_of_turn>"),
    ("llama3", "<|start_header_id|>"),
    ("chatml", "<|im_start|>"),
    ("phi3", "<|assistant|>"),
    ("mistral-v7", "[SYSTEM_PROMPT]"),
    ("llama2", "[INST]"),
)
FAMILY_ARCHITECTURES = (
    ("gemma", "gemma"), ("phi3", "phi3"), ("qwen", "chatml"), ("llama4", "llama4"),
    ("exaone", "exaone3"), ("granite", "granite"), ("deepseek2", "deepseek2"),
)
DEFAULT_FAMILY = "chatml"
MAX_TEMPLATE_FILE = MIB


def builtin_names() -> tuple[str, ...]:
    """The chat formats llama.cpp renders by name (gemma, llama3, chatml, phi3, …)."""
    import llama_cpp

    n = llama_cpp.llama_chat_builtin_templates(None, 0)
    arr = (ctypes.c_char_p * n)()
    llama_cpp.llama_chat_builtin_templates(arr, n)
    return tuple(a.decode() for a in arr)


def render_builtin(name_or_source: str, messages: list[dict[str, str]],
                   add_generation_prompt: bool = True) -> str | None:
    """The prompt in llama.cpp's format ``name_or_source`` (a name, or a template text
    llama.cpp recognises by its markers); None when llama.cpp knows no such format."""
    import llama_cpp

    keep = [(str(m.get("role", "")).replace("\0", "").encode(), str(m.get("content", "")).replace("\0", "").encode())
            for m in messages]
    chat = (llama_cpp.llama_chat_message * max(1, len(keep)))()
    for i, (role, content) in enumerate(keep):
        chat[i].role, chat[i].content = role, content
    size = 2 * sum(len(r) + len(c) for r, c in keep) + 1024
    for _ in range(2):
        buf = ctypes.create_string_buffer(size)
        n = llama_cpp.llama_chat_apply_template(name_or_source.encode(), chat, len(keep), add_generation_prompt,
                                                buf, size)
        if n < 0:
            return None
        if n <= size:
            return buf.raw[:n].decode("utf-8", errors="replace")
        size = n + 1
    return None


def pick_family(architecture: str | None, tokenize: Callable[[str, bool], list[int]] | None) -> tuple[str, str]:
    """(llama.cpp format name, why) for a model without a usable template: by a special
    token its vocabulary has as one token, else by its architecture, else ChatML."""
    if tokenize is not None:
        for family, token in FAMILY_TOKENS:
            try:
                if len(tokenize(token, False)) == 1:
                    return family, f"its vocabulary has {token}"
            except Exception:
                break
    arch = (architecture or "").lower()
    for prefix, family in FAMILY_ARCHITECTURES:
        if arch.startswith(prefix):
            return family, f"its architecture is {architecture}"
    return DEFAULT_FAMILY, "nothing in the model names a format"


def check_override(value: str) -> str:
    """``--chat-template``: a file to read, or one of llama.cpp's format names ("": none)."""
    import argparse

    if not value or os.path.isfile(value):
        return value
    names = builtin_names()
    if value in names:
        return value
    raise argparse.ArgumentTypeError(f"{value!r} is neither a file nor a llama.cpp chat format "
                                     f"({', '.join(names)})")


def _render_bounded(template: jinja2.Template, ctx: dict[str, object], deadline: float) -> str:
    out: list[str] = []
    size = 0
    for chunk in template.generate(**ctx):
        size += len(chunk)
        if size > MAX_OUTPUT_CHARS:
            raise TemplateTooLarge(f"prompt over {MAX_OUTPUT_CHARS} characters")
        if time.monotonic() > deadline:
            raise TemplateTimeout(f"rendering took over {TIME_LIMIT_S:g} s")
        out.append(chunk)
    return "".join(out)


def _with_alarm(fn: Callable[[], T], seconds: float) -> T:
    """Run fn under SIGALRM when on the main thread (bounds loops that emit nothing)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        return fn()

    def on_alarm(signum: int, frame: FrameType | None) -> NoReturn:
        raise TemplateTimeout(f"rendering took over {seconds:g} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return fn()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _render_jinja(source: str, ctx: dict[str, object]) -> tuple[str | None, str | None]:
    """(text, None), or (None, why it failed) for a template from an untrusted file."""
    env = _make_env()
    try:
        def go() -> str:
            tmpl = env.from_string(source)
            return _render_bounded(tmpl, ctx, time.monotonic() + TIME_LIMIT_S)

        return _with_alarm(go, TIME_LIMIT_S), None
    except jinja2.exceptions.SecurityError as exc:
        return None, f"sandbox refused the template: {exc}"
    except jinja2.exceptions.TemplateSyntaxError as exc:
        return None, f"template syntax error line {exc.lineno}: {exc.message}"
    except (TemplateTimeout, TemplateTooLarge) as exc:
        return None, f"template stopped: {exc}"
    except RecursionError:
        return None, "template stopped: recursion too deep"
    except Exception as exc:  # TemplateError, TypeError from odd templates...
        return None, f"template failed: {type(exc).__name__}: {exc}"


def _read_template_file(path: str) -> str:
    with open(path, "rb") as fh:
        data = fh.read(MAX_TEMPLATE_FILE + 1)
    if len(data) > MAX_TEMPLATE_FILE:
        raise ValueError(f"over {MAX_TEMPLATE_FILE // MIB} MiB")
    return data.decode("utf-8")


def render_chat(
    template_source: str | None,
    messages: list[dict[str, str]],
    bos_token: str = "",
    eos_token: str = "",
    add_generation_prompt: bool = True,
    *,
    override: str = "",
    architecture: str | None = None,
    tokenize: Callable[[str, bool], list[int]] | None = None,
) -> RenderedPrompt:
    """The prompt for ``messages``: ``override`` (``--chat-template`` NAME or FILE) if
    given, else the GGUF's template, else the format of the model's family (see
    ``pick_family``; ``tokenize(text, add_special)`` tells which special tokens the
    vocabulary has). ``fallback_reason`` says why the GGUF's template was not used."""
    t0 = time.perf_counter()
    ctx = {
        "messages": messages,
        "add_generation_prompt": add_generation_prompt,
        "bos_token": bos_token,
        "eos_token": eos_token,
    }

    def done(text: str, name: str, why: str | None) -> RenderedPrompt:
        return RenderedPrompt(text, name, why, time.perf_counter() - t0)

    reason = None
    if override:
        if os.path.isfile(override):
            try:
                text, reason = _render_jinja(_read_template_file(override), ctx)
            except (OSError, ValueError) as exc:
                text, reason = None, f"could not read it: {exc}"
            if text is not None:
                return done(text, "file", None)
            reason = f"--chat-template {override}: {reason}"
        else:
            text = render_builtin(override, messages, add_generation_prompt)
            if text is not None:
                return done(text, override, None)
            reason = f"--chat-template {override}: not a file or a llama.cpp chat format"
    if template_source:
        text, why = _render_jinja(template_source, ctx)
        if text is not None:
            return done(text, "gguf", reason)
        reason = why if reason is None else f"{reason}; {why}"
        text = render_builtin(template_source, messages, add_generation_prompt)
        if text is not None:  # llama.cpp knows the template's format by its markers
            return done(text, "gguf (llama.cpp)", f"{reason}; llama.cpp's built-in rendering of its format used")
    elif reason is None:
        reason = "the GGUF has no chat template (often a base model, not tuned for chat)"
    family, why = pick_family(architecture, tokenize)
    text = render_builtin(family, messages, add_generation_prompt)
    if text is None:  # cannot happen for llama.cpp's own names; stay safe
        family, text = "chatml", _make_env().from_string(CHATML).render(**ctx)
    return done(text, family, f"{reason}: using llama.cpp's {family} format ({why})")
