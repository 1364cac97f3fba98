"""Make untrusted text (model output, GGUF metadata, file names, errors) safe to show.

Rich and Textual strip only a few control codes; ESC sequences, C1 controls
(0x80-0x9F) and NUL would reach the terminal. This removes every C0/C1 control
except newline and tab, whole ANSI/OSC escape sequences first, and replaces lone
surrogates (which cannot be encoded) with U+FFFD. Markup is not this module's job:
the UI renders the result as plain ``Text``/``Content``, never as markup.
"""

from __future__ import annotations

import re

from kvtop.runner.redact import no_login, scrub_secrets

# CSI ... final byte, OSC ... BEL/ST, other two-byte ESC sequences; 8-bit CSI/OSC too.
_ESCAPES = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"
    r"|(?:\x1b\]|\x9d)[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[PX^_][^\x1b\x9c]*(?:\x1b\\|\x9c)?"
    r"|\x1b[@-Z\\-_]?"
)
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_SURROGATES = re.compile(r"[\ud800-\udfff]")


def clean_text(text: str, keep_newlines: bool = True) -> str:
    text = scrub_secrets(text)  # the API key and passwords kvtop was given (runner/redact.py)
    text = _SURROGATES.sub("\ufffd", text)
    text = _ESCAPES.sub("", text)
    text = _CONTROLS.sub("", text)
    if not keep_newlines:
        text = text.replace("\n", " ").replace("\t", " ")
    return text


def clean_line(text: str, limit: int = 200) -> str:
    """One line for a status bar or an error: no newlines, bounded length, no URL login."""
    text = " ".join(clean_text(no_login(text), keep_newlines=False).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
