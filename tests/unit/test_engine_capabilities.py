"""Capabilities, declared once (issue 24 item 1): every engine says what it can do, one
``EngineSource`` builds them all, and the app asks the engine, not which kind it is."""

import ast
import dataclasses
import os
import re

from ast_cache import parsed

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def python_files(*tops):
    for top in tops:
        path = os.path.join(ROOT, top)
        if path.endswith(".py"):
            yield top, open(path, encoding="utf-8").read()
            continue
        for dirpath, _dirs, files in os.walk(path):
            for f in files:
                if f.endswith(".py"):
                    full = os.path.join(dirpath, f)
                    yield os.path.relpath(full, ROOT), open(full, encoding="utf-8").read()


def engine_classes(*tops):
    """(file, class) for every class that implements the contract's reader (``pump``)."""
    for rel, _text in python_files(*tops):
        for node in ast.walk(parsed(os.path.join(ROOT, rel))):
            if isinstance(node, ast.ClassDef) and any(
                    isinstance(b, ast.FunctionDef) and b.name == "pump" for b in node.body):
                yield rel, node


def declares_capabilities(cls: ast.ClassDef) -> bool:
    for node in ast.walk(cls):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name) and t.id == "capabilities":
                    return True
                if isinstance(t, ast.Attribute) and t.attr == "capabilities" and \
                        isinstance(t.value, ast.Name) and t.value.id == "self":
                    return True
    return False


def test_server_engine_is_built_in_one_place():
    sites = [f"{rel}:{i + 1}" for rel, text in python_files("runner", "tui")
             for i, line in enumerate(text.splitlines())
             if re.search(r"\bServerEngine\(", line) and not line.lstrip().startswith("class ")]
    assert len(sites) == 1 and sites[0].startswith(os.path.join("runner", "session", "source.py") + ":"), sites


def test_every_engine_declares_its_capabilities():
    found = list(engine_classes("runner", "tests/scripted_engine.py"))
    names = {cls.name for _rel, cls in found}
    assert {"EngineProcess", "InProcessEngine", "ReplayEngine", "ServerEngine", "ScriptedEngine"} <= names, names
    assert [f"{rel}:{cls.name}" for rel, cls in found if not declares_capabilities(cls)] == []


def test_the_declared_capabilities_are_what_the_app_branches_on(tmp_path):
    from scripted_engine import ScriptedEngine, smollm_loaded

    from kvtop.runner.process.contract import Capabilities, EngineClient
    from kvtop.runner.process.inprocess import InProcessEngine
    from kvtop.runner.process.parent import EngineProcess
    from kvtop.runner.server.engine import ServerEngine
    from kvtop.runner.settings import Settings

    s = Settings(str(tmp_path / "m.gguf"))
    for cls in (EngineProcess, InProcessEngine):
        assert cls.capabilities == Capabilities()
    scripted = ScriptedEngine(s, smollm_loaded(s.model), [])
    server = ServerEngine(s, "http://127.0.0.1:9")
    assert isinstance(scripted, EngineClient) and isinstance(server, EngineClient)
    assert scripted.capabilities == Capabilities()
    c = server.capabilities
    assert (c.takes_input, c.can_restart, c.slots, c.llama_buffers, c.runs_model) == (True, True, True, False, False)
    server.close()


def test_a_replay_declares_no_input_no_restart_and_the_recorded_buffers(tmp_path):
    from scripted_engine import smollm_loaded

    from kvtop.runner.records.replay import ReplayEngine

    class Trace:  # what ReplayEngine reads of a trace at construction
        header = {"settings": {"model": "m.gguf"}}

        def __init__(self, loaded):
            self._loaded = loaded

        def loaded(self):
            return self._loaded

    local = ReplayEngine(Trace(smollm_loaded("m.gguf")), 0).capabilities
    assert (local.takes_input, local.replaying, local.can_restart, local.llama_buffers) == (False, True, False, True)
    served = dataclasses.replace(smollm_loaded("m.gguf"), server="http://127.0.0.1:8080")
    assert ReplayEngine(Trace(served), 0).capabilities.llama_buffers is False


def test_the_source_builds_each_engine_from_the_options(tmp_path):
    from kvtop.runner.process.inprocess import InProcessEngine
    from kvtop.runner.process.parent import EngineProcess
    from kvtop.runner.server.engine import ServerEngine
    from kvtop.runner.session.source import EngineSource
    from kvtop.runner.settings import Settings

    s = Settings(str(tmp_path / "m.gguf"))
    assert type(EngineSource().engine(s)) is EngineProcess
    assert type(EngineSource(in_process=True).engine(s)) is InProcessEngine
    fleet = EngineSource(servers=("http://127.0.0.1:9", "http://127.0.0.1:10"))
    first, second = fleet.engine(s), fleet.engine(s, 1)
    assert (type(first), first.url, second.url) == (ServerEngine, "http://127.0.0.1:9", "http://127.0.0.1:10")
    given = EngineSource(servers=("http://127.0.0.1:9",), given=lambda _s: "first")
    assert given.engine(s) == "first" and given.engine(s, 0).url == "http://127.0.0.1:9"
    for e in (first, second, given.engine(s, 0)):
        e.close()


def test_the_app_never_reads_the_kind_flags():
    """``session.replaying`` and ``Loaded.server is None`` meant "what can this engine
    do"; the capabilities say it now (``options.servers`` stays where it is the URLs, and
    a pane may draw the server's URL that ``Loaded`` carries)."""
    offenders = [f"{rel}:{i + 1}" for rel, text in python_files("tui") if not rel.startswith(os.path.join("tui", "panes"))
                 for i, line in enumerate(text.splitlines())
                 if "session.replaying" in line or re.search(r"\.server is (not )?None", line)
                 or re.search(r"(if|and|or|not) self\.options\.servers\b(?!\[)", line)]
    assert offenders == []
    # nor do the panes, nor the forecast: the status bar asked ``loaded.server is not None``
    # and the forecast ``fits=not L.server`` (issue 32); a pane still draws the URL
    branches = [f"{rel}:{i + 1}" for rel, text in python_files("tui") for i, line in enumerate(text.splitlines())
                if re.search(r"\b(loaded|L)\.server is (not )?None|(if|and|or|not|elif) [\w.]*\b(loaded|L)\.server\b", line)]
    assert branches == []
