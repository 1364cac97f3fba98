"""mypy (strict for kvtop.runner; configured in pyproject.toml) is clean over runner/.

mypy cannot follow the editable install's import finder, and the repository's folders are
not named as the package (runner/ is kvtop.runner), so the package is laid out as
installed in a temporary folder of symlinks and checked there."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def package_tree(where: str) -> str:
    """``where``/kvtop as pyproject's package-dir installs it: __init__.py and __main__.py
    from tui/kvtop_package, and runner, tui, themes linked from the repository."""
    pkg = os.path.join(where, "kvtop")
    os.mkdir(pkg)
    for name in ("__init__.py", "__main__.py"):
        os.symlink(os.path.join(ROOT, "tui", "kvtop_package", name), os.path.join(pkg, name))
    for sub in ("runner", "tui", "themes"):
        os.symlink(os.path.join(ROOT, sub), os.path.join(pkg, sub))
    return where


def test_mypy_is_clean_over_runner(tmp_path):
    cwd = package_tree(str(tmp_path))
    r = subprocess.run([sys.executable, "-m", "mypy", "-p", "kvtop.runner",
                        "--config-file", os.path.join(ROOT, "pyproject.toml"),
                        "--python-executable", sys.executable, "--cache-dir", os.path.join(cwd, ".mypy_cache")],
                       capture_output=True, text=True, cwd=cwd, timeout=600)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-2000:]
