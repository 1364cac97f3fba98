"""Token bytes -> text deltas that never split a character.

Byte-level tokenizers cut multi-byte UTF-8 characters (CJK, emoji) across tokens.
An incremental decoder holds the incomplete bytes until the character is whole;
bytes that can never form a character become U+FFFD instead of vanishing, and
``flush`` (called on every stop path: end, -n, context full, cancel) emits what
is left.
"""

from __future__ import annotations

import codecs


class Utf8Stream:
    def __init__(self) -> None:
        self._dec = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, piece: bytes) -> str:
        return self._dec.decode(piece)

    def flush(self) -> str:
        return self._dec.decode(b"", final=True)
