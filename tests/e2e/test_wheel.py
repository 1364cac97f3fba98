"""The wheel installs one package, kvtop: the repository's runner/, tui/ and themes/ become
kvtop.runner, kvtop.tui and kvtop.themes, and no other top-level name is claimed (runner,
tui and themes are other projects' names on PyPI)."""

import os
import re
import shutil
import subprocess
import sys
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _source_packages() -> set[str]:
    """Every folder with an __init__.py under runner/, tui/ and themes/, by its installed name."""
    out = set()
    for top in ("runner", "tui", "themes"):
        for dirpath, _dirs, files in os.walk(os.path.join(ROOT, top)):
            if "__init__.py" in files and "__pycache__" not in dirpath:
                rel = os.path.relpath(dirpath, ROOT).replace(os.sep, ".")
                out.add("kvtop" if rel == "tui.kvtop_package" else "kvtop." + rel)
    return out


def _listed_packages() -> set[str]:
    text = open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8").read()
    block = re.search(r"^packages = \[(.*?)\]", text, re.S | re.M).group(1)
    return set(re.findall(r'"([\w.]+)"', block))


def test_pyproject_lists_every_package_folder():
    assert _listed_packages() == _source_packages()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("wheel")
    # built from a copy: setuptools writes build/ and *.egg-info into the folder it builds
    src = out / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".venv", ".git", "__pycache__", "build", "*.egg-info",
                                                              ".pytest_cache", "dist"))
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(src)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    (whl,) = [p for p in os.listdir(out) if p.endswith(".whl")]
    return str(out / whl)


def test_the_wheel_has_one_top_level_package_named_kvtop(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"kvtop"}
    assert "kvtop/__main__.py" in names and "kvtop/tui/app.tcss" in names
    assert "kvtop/runner/process/child.py" in names and "kvtop/themes/kvtop_dark.py" in names
    top_level = [n for n in names if n.endswith(".dist-info/top_level.txt")]
    if top_level:
        assert zipfile.ZipFile(wheel).read(top_level[0]).decode().split() == ["kvtop"]
    entry = zipfile.ZipFile(wheel).read([n for n in names if n.endswith("entry_points.txt")][0]).decode()
    assert "kvtop = kvtop.tui.start.cli:main" in entry


def test_python_m_kvtop_runs_from_the_installed_wheel(wheel, tmp_path):
    target = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--target", str(target), wheel],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    env = dict(os.environ, PYTHONPATH=str(target))
    # run outside the repository, so nothing is found through the working directory
    code = ("import kvtop, kvtop.tui.app, kvtop.runner.engine.engine, sys; print(kvtop.__file__); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('runner', 'tui', 'themes')))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    where, stray = r.stdout.split("\n")[:2]
    assert where.startswith(str(target)) and stray == "[]"
    r = subprocess.run([sys.executable, "-m", "kvtop", "--version"], capture_output=True, text=True, cwd=tmp_path,
                       env=env, timeout=120)
    assert r.returncode == 0 and r.stdout.startswith("kvtop 0."), (r.stdout, r.stderr[-2000:])


def test_the_editable_install_imports_no_top_level_runner_tui_or_themes():
    """From the repository's own folder (where ``runner`` would be found on the path), the
    app and the engine's child import only kvtop.*: a stray ``from runner…`` would load a
    second copy of a module under another name."""
    code = ("import sys, kvtop.tui.start.cli, kvtop.tui.app, kvtop.runner.process.child, kvtop.runner.commands.load; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('runner', 'tui', 'themes')))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == "[]"
