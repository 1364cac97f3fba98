"""``/file PATH`` and ``--prompt-file PATH``: a path is untrusted; each kind of file
that is not a text file is refused in one line that names what it is (issue 12)."""

import os
import socket
import threading
import time

import pytest

from kvtop.runner.records.prompt_file import MAX_BYTES, PromptFileError, looks_binary, read_prompt_file


def refusal(path) -> str:
    t0 = time.monotonic()
    with pytest.raises(PromptFileError) as err:
        read_prompt_file(str(path))
    assert time.monotonic() - t0 < 2.0  # refused at once, never waits
    text = str(err.value)
    assert "\n" not in text
    return text


def test_a_text_file_is_read_and_cleaned(tmp_path):
    p = tmp_path / "q.txt"
    p.write_bytes(b"  What is \x1b[31mred\x1b[0m?\n[b]x[/b]\n\n")
    assert read_prompt_file(str(p)) == "What is red?\n[b]x[/b]"


def test_a_fifo_without_a_writer_is_refused_at_once(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert "is a FIFO (named pipe)" in refusal(fifo)


def test_dev_zero_is_a_character_device():
    assert refusal("/dev/zero") == "/dev/zero is a character device, not a text file: not sent"


def test_a_directory(tmp_path):
    assert "is a directory" in refusal(tmp_path)


def test_a_socket(tmp_path):
    path = str(tmp_path / "s.sock")
    s = socket.socket(socket.AF_UNIX)
    try:
        s.bind(path)
        assert "is a socket" in refusal(path)
    finally:
        s.close()


def test_a_symlink_loop(tmp_path):
    os.symlink(tmp_path / "b", tmp_path / "a")
    os.symlink(tmp_path / "a", tmp_path / "b")
    assert refusal(tmp_path / "a").endswith("a: a symbolic link loop")


def test_a_link_to_a_fifo_names_the_fifo(tmp_path):
    os.mkfifo(tmp_path / "pipe")
    os.symlink(tmp_path / "pipe", tmp_path / "innocent.txt")
    assert "innocent.txt is a FIFO" in refusal(tmp_path / "innocent.txt")


def test_missing_empty_huge_and_unreadable(tmp_path):
    assert refusal(tmp_path / "nope.txt").endswith("nope.txt: no such file")
    (tmp_path / "empty.txt").write_text(" \n\t\n")
    assert "is empty" in refusal(tmp_path / "empty.txt")
    big = tmp_path / "big.txt"
    with open(big, "wb") as fh:
        fh.truncate(MAX_BYTES + 1)  # sparse: no disk used
    assert "the limit is 4 MiB" in refusal(big)
    locked = tmp_path / "locked.txt"
    locked.write_text("secret")
    locked.chmod(0)
    try:
        if os.geteuid() != 0:
            assert "Permission denied" in refusal(locked)
    finally:
        locked.chmod(0o600)


@pytest.mark.parametrize("data", [
    b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 4,  # an executable
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + os.urandom(512),  # an image
    b"text with one NUL\x00byte",
    bytes(range(1, 9)) * 200 + b"\xff\xfe",  # control bytes, not UTF-8 (the last bytes once passed)
], ids=["elf", "png", "nul", "controls"])
def test_binary_files_are_refused(tmp_path, data):
    p = tmp_path / "blob.bin"
    p.write_bytes(data)
    assert refusal(p) == f"{p} is a binary file, not text: not sent"


def test_latin1_text_is_text(tmp_path):
    """Not UTF-8 but text (é in Latin-1): sent, the odd byte replaced."""
    p = tmp_path / "latin1.txt"
    p.write_bytes("Café au lait, s'il vous plaît.".encode("latin-1"))
    assert read_prompt_file(str(p)) == "Caf\ufffd au lait, s'il vous pla\ufffdt."
    assert not looks_binary("ü".encode() * 40000)  # a character cut by the sample's end, not the file's
    assert looks_binary(b"\x01\x02\x03" * 100 + "ü".encode()[:1])  # cut by the file's end: not UTF-8


def test_a_file_swapped_for_a_fifo_after_the_check_does_not_hang(tmp_path, monkeypatch):
    """The check-then-open race: the path becomes a FIFO between stat and open. The
    open is non-blocking and the opened file is checked again."""
    path = tmp_path / "q.txt"
    path.write_text("hello")
    real_stat = os.stat

    def stat_then_swap(p, *a, **kw):
        st = real_stat(p, *a, **kw)
        if str(p) == str(path):
            os.unlink(path)
            os.mkfifo(path)
        return st

    monkeypatch.setattr(os, "stat", stat_then_swap)
    done = threading.Event()
    result = {}

    def read():
        try:
            read_prompt_file(str(path))
        except PromptFileError as exc:
            result["error"] = str(exc)
        done.set()

    threading.Thread(target=read, daemon=True).start()
    assert done.wait(5), "reading a swapped-in FIFO hung"
    assert "changed into a FIFO" in result["error"]


def test_markup_and_escapes_in_the_path_are_shown_as_text(tmp_path):
    name = tmp_path / "[b]x[/b]\x1b[2J.txt"
    msg = refusal(name)
    assert "[b]x[/b]" in msg and "\x1b" not in msg
