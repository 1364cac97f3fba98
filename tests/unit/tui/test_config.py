"""Whatever is in config.json (or in its place), kvtop starts with the defaults and
one line saying why."""

import json
import os
import shutil
import tempfile

import pytest

from kvtop.tui.base.config import Preferences, load_preferences, save_preferences


def write(tmp_path, data: bytes) -> str:
    p = tmp_path / "config.json"
    p.write_bytes(data)
    return str(p)


def test_a_missing_file_is_the_first_run_not_a_problem(tmp_path):
    prefs = load_preferences(str(tmp_path / "config.json"))
    assert prefs == Preferences() and prefs.notice is None


def test_a_good_file(tmp_path):
    prefs = load_preferences(write(tmp_path, b'{"theme": "kvtop-light", "markdown": true, "future": 1}'))
    assert (prefs.theme, prefs.markdown, prefs.notice) == ("kvtop-light", True, None)


def test_deeply_nested_json_does_not_stop_kvtop(tmp_path):
    """100k nested arrays raised RecursionError out of the app's constructor."""
    prefs = load_preferences(write(tmp_path, b"[" * 100_000 + b"]" * 100_000))
    assert prefs == Preferences() and "nested too deeply" in prefs.notice


def test_a_directory_in_its_place(tmp_path):
    d = tmp_path / "config.json"
    d.mkdir()
    prefs = load_preferences(str(d))
    assert prefs == Preferences() and "is a directory" in prefs.notice


@pytest.mark.parametrize("data,why", [
    (b"{not json", "is not valid JSON"),
    (b"", "is not valid JSON"),
    (b"\xff\xfe\x00garbage", "is not UTF-8 text"),
    (b"[1, 2, 3]", "is not a JSON object"),
    (b'"kvtop-light"', "is not a JSON object"),
    (b"null", "is not a JSON object"),
    (b"NaN", "is not a JSON object"),
    (b" " * (1024 * 1024 + 1), "is larger than 1 MiB"),
    (b'{"theme": {"nested": [1]}}', "ignored theme (wrong type)"),
    (b'{"theme": ""}', "ignored theme (wrong type)"),
    (b'{"markdown": "yes"}', "ignored markdown (wrong type)"),
    (b'{"theme": 5, "markdown": 1}', "ignored theme and markdown (wrong type)"),
])
def test_any_content_gives_defaults_and_one_line(tmp_path, data, why):
    prefs = load_preferences(write(tmp_path, data))
    assert prefs.theme == "kvtop-dark" and prefs.markdown is False
    assert why in prefs.notice and "\n" not in prefs.notice and len(prefs.notice) <= 300


def test_a_fifo_or_a_device_in_its_place_does_not_block_the_start(tmp_path):
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    assert "is not a regular file" in load_preferences(str(fifo)).notice
    link = tmp_path / "zero.json"
    link.symlink_to("/dev/zero")
    assert "is not a regular file" in load_preferences(str(link)).notice


def _as_nobody(load, path: str) -> str:
    """``load(path).notice`` in a forked child that has dropped to uid 65534."""
    rd, wr = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no exceptions may escape into pytest's own code
        try:
            os.setgid(65534)
            os.setuid(65534)
            os.write(wr, str(load(path).notice).encode())
        finally:
            os._exit(0)
    os.close(wr)
    with os.fdopen(rd, "rb") as fh:
        out = fh.read().decode()
    os.waitpid(pid, 0)
    return out


def test_an_unreadable_file():
    """Mode 000 as a user who is not root (root reads every file: the check then runs in
    a forked child as ``nobody``, so it is made as root too, as CI runs)."""
    folder = tempfile.mkdtemp()
    try:
        os.chmod(folder, 0o755)
        p = os.path.join(folder, "config.json")
        with open(p, "wb") as fh:
            fh.write(b"{}")
        os.chmod(p, 0)
        notice = load_preferences(p).notice if os.geteuid() != 0 else _as_nobody(load_preferences, p)
        assert "cannot be read" in notice and "config.json" in notice
    finally:
        shutil.rmtree(folder)


def test_one_good_field_is_kept_beside_a_bad_one(tmp_path):
    prefs = load_preferences(write(tmp_path, b'{"theme": "kvtop-light", "markdown": "yes"}'))
    assert prefs.theme == "kvtop-light" and prefs.markdown is False and "markdown" in prefs.notice


def test_the_notice_is_never_saved(tmp_path):
    path = str(tmp_path / "cfg" / "config.json")
    save_preferences(path, Preferences(theme="kvtop-light", markdown=True, notice="something"))
    assert json.load(open(path)) == {"theme": "kvtop-light", "markdown": True}
    assert load_preferences(path) == Preferences(theme="kvtop-light", markdown=True)
