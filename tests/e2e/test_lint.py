"""ruff (pyflakes, bugbear, import order, pyupgrade; configured in pyproject.toml) is clean
over everything the repository holds in Python. Part of the README's test command."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_ruff_is_clean():
    r = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise",
                        "runner", "tui", "themes", "tests", "bench"],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
