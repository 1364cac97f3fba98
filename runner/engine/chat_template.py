"""Chat templating: the GGUF's own Jinja template, rendered only in a sandbox.

A chat template comes from an untrusted file (CVE-2024-34359 was an SSTI through
exactly this). It is rendered in Jinja's ``ImmutableSandboxedEnvironment`` with a
small ``range`` limit, an output-size limit checked while rendering, and a time
limit. Any failure (sandbox violation, syntax error, runaway loop, huge output)
falls back to a named format (ChatML) and says why.
"""

from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass
from datetime import datetime

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

MAX_RANGE = 10_000
MAX_OUTPUT_CHARS = 4 * 1024 * 1024
TIME_LIMIT_S = 2.0


class TemplateTimeout(Exception):
    pass


class TemplateTooLarge(Exception):
    pass


class _Sandbox(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset(["*", "**"])

    def call_binop(self, context, operator, left, right):
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


def _raise_exception(message: str):
    raise jinja2.exceptions.TemplateError(message)


def _make_env() -> _Sandbox:
    env = _Sandbox(trim_blocks=True, lstrip_blocks=True, autoescape=False)
    bounded_range = env.globals["range"]

    def safe_range(*args):
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
    template_name: str  # "gguf" or the fallback's name
    fallback_reason: str | None
    seconds: float


def _render_bounded(template: jinja2.Template, ctx: dict, deadline: float) -> str:
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


def _with_alarm(fn, seconds: float):
    """Run fn under SIGALRM when on the main thread (bounds loops that emit nothing)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        return fn()

    def on_alarm(signum, frame):
        raise TemplateTimeout(f"rendering took over {seconds:g} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return fn()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def render_chat(
    template_source: str | None,
    messages: list[dict],
    bos_token: str = "",
    eos_token: str = "",
    add_generation_prompt: bool = True,
) -> RenderedPrompt:
    t0 = time.perf_counter()
    ctx = {
        "messages": messages,
        "add_generation_prompt": add_generation_prompt,
        "bos_token": bos_token,
        "eos_token": eos_token,
    }
    reason = None
    if template_source:
        env = _make_env()
        try:
            def go():
                tmpl = env.from_string(template_source)
                return _render_bounded(tmpl, ctx, time.monotonic() + TIME_LIMIT_S)

            text = _with_alarm(go, TIME_LIMIT_S)
            return RenderedPrompt(text, "gguf", None, time.perf_counter() - t0)
        except jinja2.exceptions.SecurityError as exc:
            reason = f"sandbox refused the template: {exc}"
        except jinja2.exceptions.TemplateSyntaxError as exc:
            reason = f"template syntax error line {exc.lineno}: {exc.message}"
        except (TemplateTimeout, TemplateTooLarge) as exc:
            reason = f"template stopped: {exc}"
        except RecursionError:
            reason = "template stopped: recursion too deep"
        except Exception as exc:  # TemplateError, TypeError from odd templates...
            reason = f"template failed: {type(exc).__name__}: {exc}"
    else:
        reason = "the GGUF has no chat template"
    env = _make_env()
    text = env.from_string(CHATML).render(**ctx)
    return RenderedPrompt(text, "chatml", reason, time.perf_counter() - t0)
