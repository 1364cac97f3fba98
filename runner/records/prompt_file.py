"""Reading a file the user sends as a message (``/file PATH``, ``--prompt-file PATH``).

A path is untrusted: it may name a FIFO (opening it blocks until a writer comes), a
device (``/dev/zero`` never ends), a directory, a socket, a symlink loop, a huge file
or a binary. Each gets a one-line refusal that names what the path really is; only a
regular text file up to ``MAX_BYTES`` is read. The file is opened non-blocking and
checked again after opening, so swapping it for a FIFO after the check does not hang.
"""

from __future__ import annotations

import errno
import os
import stat

from kvtop.runner.sanitize import clean_line, clean_text

MAX_BYTES = 4 * 2**20

KINDS = [
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
]


class PromptFileError(Exception):
    """Why the file cannot be sent; one line for the user."""


def kind_of(mode: int) -> str:
    for test, name in KINDS:
        if test(mode):
            return name
    return "a regular file" if stat.S_ISREG(mode) else "not a regular file"


def looks_binary(data: bytes) -> bool:
    """NUL bytes, or text that is not UTF-8 with many control bytes: not a prompt."""
    sample = data[:65536]
    if b"\0" in sample:
        return True
    try:
        sample.decode("utf-8")
        return False
    except UnicodeDecodeError as exc:
        # a character cut by the sample's end, not by the file's: the file may be UTF-8
        if len(data) > len(sample) and exc.reason == "unexpected end of data":
            return False
    controls = sum(1 for b in sample if b < 9 or 13 < b < 32 or b == 127)
    return controls > len(sample) // 100


def read_prompt_file(path: str, max_bytes: int = MAX_BYTES) -> str:
    shown = clean_line(path)
    full = os.path.expanduser(path)
    try:
        st = os.stat(full)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise PromptFileError(f"{shown}: a symbolic link loop") from None
        if exc.errno == errno.ENOENT:
            raise PromptFileError(f"{shown}: no such file") from None
        raise PromptFileError(f"cannot read {shown}: {clean_line(exc.strerror or str(exc))}") from None
    if not stat.S_ISREG(st.st_mode):
        raise PromptFileError(f"{shown} is {kind_of(st.st_mode)}, not a text file: not sent")
    if st.st_size > max_bytes:
        raise PromptFileError(f"{shown} is {st.st_size:,} bytes; the limit is {max_bytes // 2**20} MiB")
    try:
        fd = os.open(full, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise PromptFileError(f"cannot read {shown}: {clean_line(exc.strerror or str(exc))}") from None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise PromptFileError(f"{shown} changed into {kind_of(os.fstat(fd).st_mode)}: not sent")
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise PromptFileError(f"{shown} grew over {max_bytes // 2**20} MiB while it was read")
    if looks_binary(data):
        raise PromptFileError(f"{shown} is a binary file, not text: not sent")
    text = clean_text(data.decode("utf-8", errors="replace")).strip()
    if not text:
        raise PromptFileError(f"{shown} is empty ({len(data)} bytes)")
    return text
