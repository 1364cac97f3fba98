"""Bad model files: one line naming the file and the reason, exit 1, an error screen in the UI."""

import struct
import subprocess
import sys

import pytest

from gguf_factory import write_header_only, write_tiny_llama
from helpers import make_app, screen_text, send, wait_until
from runner.process.parent import EngineProcess
from runner.settings import Settings
from tui.screens import ErrorScreen


def gguf_bytes(version=3, n_tensors=0, n_kv=0, body=b""):
    return b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv) + body


def make_cases(tmp_path, smollm_path):
    cases = {}
    cases["missing"] = (str(tmp_path / "nope.gguf"), "no such file")
    d = tmp_path / "adir.gguf"
    d.mkdir()
    cases["directory"] = (str(d), "is a directory")
    for name, data, reason in [
        ("empty", b"", "is empty"),
        ("text", b"hello, I am a text file\n" * 10, "is not a GGUF file"),
        ("random", bytes(range(256)) * 4, "is not a GGUF file"),
        ("wrong_magic", b"GGML" + b"\x00" * 60, "is not a GGUF file"),
        ("wrong_version", gguf_bytes(version=99), "unsupported GGUF version 99"),
        ("absurd_tensors", gguf_bytes(n_tensors=2**62), "absurd tensor count"),
        ("absurd_kv", gguf_bytes(n_kv=2**62), "absurd metadata count"),
        ("truncated_metadata", gguf_bytes(n_kv=3, body=struct.pack("<Q", 10) + b"general.ar"), "truncated inside its metadata"),
    ]:
        p = tmp_path / f"{name}.gguf"
        p.write_bytes(data)
        cases[name] = (str(p), reason)
    with open(smollm_path, "rb") as src:
        data = src.read()
    p = tmp_path / "truncated_data.gguf"
    p.write_bytes(data[: len(data) // 2])
    cases["truncated_data"] = (str(p), "truncated inside its tensor data")
    cases["unknown_arch"] = (write_header_only(tmp_path / "arch.gguf", "nonsense", {"block_count": 2}),
                             "unknown model architecture")
    return cases


@pytest.fixture(scope="module")
def cases(tmp_path_factory, smollm_path):
    return make_cases(tmp_path_factory.mktemp("bad"), smollm_path)


CASE_NAMES = ["missing", "directory", "empty", "text", "random", "wrong_magic", "wrong_version",
              "absurd_tensors", "absurd_kv", "truncated_metadata", "truncated_data", "unknown_arch"]


@pytest.mark.parametrize("name", CASE_NAMES)
def test_bench_exits_1_with_one_line(cases, name):
    path, reason = cases[name]
    r = subprocess.run([sys.executable, "-m", "tui", "bench", path, "-r", "1", "-p", "8", "-n", "2"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and path in lines[0] and reason in lines[0]
    assert r.stdout == ""


def test_estimate_of_a_truncated_file_uses_the_header_and_says_so(cases):
    path, _ = cases["truncated_data"]
    r = subprocess.run([sys.executable, "-m", "tui", "estimate", path], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "tensor data missing or truncated" in r.stdout
    assert "45.00 MiB" not in r.stdout and "90.00 MiB at 4,096 tokens" in r.stdout


@pytest.mark.parametrize("name", [n for n in CASE_NAMES if n not in ("unknown_arch", "truncated_data")])
def test_estimate_exits_1_with_one_line(cases, name):
    path, reason = cases[name]
    r = subprocess.run([sys.executable, "-m", "tui", "estimate", path], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and path in lines[0] and reason in lines[0]


def test_block_count_1000_is_refused_by_bench_and_estimate_alike(tmp_path, smollm_path):
    """One check for every command (runner.model.inspect.load_facts): bench used to start
    the engine and let llama.cpp abort on a file estimate refused with a reason."""
    path = write_tiny_llama(tmp_path / "k1000.gguf", smollm_path, block_count=1000)
    reason = "block_count says 1000 layers but the tensors describe 2"
    for cmd in (["bench", path, "-r", "1", "-p", "8", "-n", "2"], ["estimate", path]):
        r = subprocess.run([sys.executable, "-m", "tui", *cmd], capture_output=True, text=True, timeout=120)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 1 and len(lines) == 1 and path in lines[0] and reason in lines[0], (cmd, r.stderr)
        assert "SIGABRT" not in r.stderr and r.stdout == ""


def test_the_same_file_aborts_llama_cpp_in_the_child_not_kvtop(tmp_path, smollm_path):
    """What the check spares the user: llama.cpp asserts on the file, and the abort ends
    only the engine's child process."""
    from runner.commands.bench import open_engine
    from runner.process.contract import EngineUnavailable

    path = write_tiny_llama(tmp_path / "k1000.gguf", smollm_path, block_count=1000)
    eng = open_engine(Settings(path, n_ctx=512), in_process=False)
    try:
        with pytest.raises(EngineUnavailable) as exc:
            eng.start(lambda e: None)
    finally:
        eng.close()
    assert "SIGABRT" in str(exc.value) and "GGML_ASSERT" in str(exc.value) and "n_layer" in str(exc.value)


def test_missing_model_on_the_command_line(tmp_path):
    r = subprocess.run([sys.executable, "-m", "tui", str(tmp_path / "x.gguf")], capture_output=True, text=True)
    assert r.returncode == 1 and "no such file" in r.stderr


@pytest.mark.parametrize("name", ["text", "truncated_data", "unknown_arch"])
async def test_ui_shows_an_error_screen_and_stays_up(cases, tmp_path, name):
    path, reason = cases[name]
    app = make_app(Settings(path, n_ctx=512), EngineProcess, tmp_path, live_system=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, ErrorScreen), what="error screen")
        assert reason in app.screen.reason and path in app.screen.reason
        shown = str(app.screen.query_one("#error-reason").render())
        assert reason in shown and path in shown
        assert "Could not load the model" in screen_text(app)
        await pilot.press("escape")
        await pilot.pause()
        await send(pilot, "hello?")
        await pilot.pause()
        assert app.is_running and not app.turn_running


async def test_engine_abort_while_loading_is_reported_in_the_ui(tmp_path, smollm_path):
    path = write_tiny_llama(tmp_path / "k1000.gguf", smollm_path, block_count=1000)
    # the estimate refuses the file first; the UI reports that, and never starts the engine
    app = make_app(Settings(path, n_ctx=512), EngineProcess, tmp_path, live_system=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, ErrorScreen), what="error screen")
        assert "block_count says 1000" in app.screen.reason
        assert app.engine.proc is None


async def test_preflight_warns_before_loading_a_model_too_big_for_memory(tmp_path, smollm_path):
    from helpers import FIXED_HW
    from dataclasses import replace
    from tui.screens import PreflightScreen

    tiny_ram = replace(FIXED_HW, memory_free=64 * 2**20)  # 64 MiB free: the model needs ~260 MiB
    app = make_app(Settings(smollm_path, n_ctx=2048), EngineProcess, tmp_path, live_system=False, hardware=tiny_ram)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, PreflightScreen), what="preflight")
        text = screen_text(app)
        assert "may not fit" in text and "GiB RAM free" in text
        assert app.engine.proc is None  # nothing loaded yet
        await pilot.click("#go")
        await wait_until(pilot, lambda: app.loaded is not None, what="load after 'Load anyway'")
    app2 = make_app(Settings(smollm_path, n_ctx=2048), EngineProcess, tmp_path, live_system=False, hardware=tiny_ram)
    async with app2.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: isinstance(app2.screen, PreflightScreen), what="preflight")
        await pilot.click("#stop")
        await pilot.pause(0.5)
    assert app2.return_code == 1 and app2.engine.proc is None
