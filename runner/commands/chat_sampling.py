"""The chat's settings from the command line: llama.cpp's flags (engine_flags.py), then,
for every sampler value the user did not give, the model's recommendation
(runner/model/sampling.py), as llama.cpp applies a GGUF's ``general.sampling.*``; for the
bundled demo model also a reply limit that fits the context. One line says so, once, in
the chat; any sampler flag (or ``-n``) the user gave wins over it.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from kvtop.runner.model.sampling import DEMO_REPLY_TOKENS, Recommended, recommended
from kvtop.runner.settings import Settings, sampler_text, settings_from_args

# the flags that set a sampler value (their argparse default is None: "not given")
SAMPLER_FIELDS = ("temp", "top_k", "top_p", "min_p", "repeat_penalty", "repeat_last_n", "presence_penalty",
                  "frequency_penalty", "typical_p", "top_n_sigma", "xtc_probability", "xtc_threshold", "mirostat",
                  "mirostat_lr", "mirostat_ent")


def given(ns: argparse.Namespace) -> frozenset[str]:
    """The sampler values and ``n_predict`` the command line set."""
    return frozenset(k for k in (*SAMPLER_FIELDS, "n_predict") if getattr(ns, k, None) is not None)


def reply_limit(n_ctx: int, trained_ctx: int | None) -> int:
    """The demo's ``-n``: ``DEMO_REPLY_TOKENS``, at most a quarter of the context (``-c 0``:
    the model's trained context), so a reply never runs the context full."""
    ctx = n_ctx if n_ctx > 0 else (trained_ctx or 0)
    return max(16, min(DEMO_REPLY_TOKENS, ctx // 4)) if ctx > 0 else DEMO_REPLY_TOKENS


def with_recommended(s: Settings, rec: Recommended, set_by_user: frozenset[str],
                     trained_ctx: int | None = None) -> tuple[Settings, str | None]:
    """``s`` with ``rec``'s values for the fields the user did not set; the line that
    says so (None when nothing changed)."""
    values = {k: v for k, v in rec.values.items() if k not in set_by_user}
    if rec.demo and "n_predict" not in set_by_user:
        values["n_predict"] = reply_limit(s.n_ctx, trained_ctx)
    if not values:
        return s, None
    out = replace(s, **values)  # type: ignore[arg-type]  # Settings field names, checked values
    shown = [k for k in rec.values if k in values]
    text = sampler_text(out) if shown else ""
    text = text.rsplit(" seed ", 1)[0]  # the seed is not part of a recommendation
    who = "demo sampling" if rec.demo else "the model's sampling"
    parts = [f"{who}: {text}" if text else who]
    if "n_predict" in values:
        parts.append(f"replies ≤ {values['n_predict']:,} tokens")
    note = ", ".join(parts) + f" ({rec.source}); flags override"
    if set_by_user:
        note += " (set by a flag: " + ", ".join(sorted(set_by_user)) + ")"
    return out, note


def chat_settings(model: str, ns: argparse.Namespace) -> tuple[Settings, str | None]:
    """What ``kvtop MODEL [flags]`` chats with, and the line about the model's sampling."""
    s = settings_from_args(model, ns)
    rec = recommended(model)
    if not rec.values and not rec.demo:
        return s, None
    trained = None
    if s.n_ctx <= 0:  # -c 0: the trained context
        from kvtop.runner.model.inspect import load_facts

        try:
            trained = load_facts(model).n_ctx_train
        except (ValueError, OSError):  # kvtop's load says what is wrong with the file
            trained = None
    return with_recommended(s, rec, given(ns), trained)
