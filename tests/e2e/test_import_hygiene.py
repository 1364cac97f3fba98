"""runner/ is the engine: no module of it may pull in Textual or Rich (the UI's)."""

import os
import pkgutil
import subprocess
import sys

import kvtop.runner

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def all_runner_modules() -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages(kvtop.runner.__path__, "kvtop.runner."))


def test_every_runner_module_is_walked():
    mods = all_runner_modules()
    # the walk finds the folders' modules, not a hand-kept list
    for expected in ("kvtop.runner.process.contract", "kvtop.runner.session.chat", "kvtop.runner.engine.engine",
                     "kvtop.runner.records.replay", "kvtop.runner.physics.kv_bytes"):
        assert expected in mods
    assert len(mods) > 30


def test_runner_imports_no_textual_or_rich():
    mods = all_runner_modules()
    code = ("import importlib, sys\n"
            f"for m in {mods!r}: importlib.import_module(m)\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'rich', 'textual_plotext'))\n"
            "print(','.join(bad))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "", f"runner imported UI modules: {out.stdout.strip()}"


def test_the_probe_imports_no_ui():
    import subprocess
    import sys

    code = ("import sys, kvtop.runner.system.memory\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'rich')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
