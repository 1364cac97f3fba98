"""What the headless commands share: exit codes and the one-line error.

Exit codes: 0 ok, 1 runtime error (one line on stderr), 2 usage error (argparse),
130 stopped by Ctrl+C (128 + SIGINT, what a shell reports).
"""

from __future__ import annotations

import math
import sys
from typing import Any

from kvtop.runner.sanitize import clean_line

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED = 130


def to_stderr(text: str) -> None:
    """A line on stderr, if there is one: with descriptor 2 closed ``sys.stderr`` is None,
    and ``print(file=None)`` would write it to stdout, into the rows; a stderr that cannot
    be written (a full disk) costs the line, not a traceback."""
    if sys.stderr is None:
        return
    try:
        print(text, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def fail(msg: str) -> int:
    """One line on stderr, exit code 1."""
    to_stderr(f"kvtop: {clean_line(msg, 400)}")
    return EXIT_ERROR


def stopped_before(url: str) -> int:
    """Ctrl+C while a llama-server still loads its model (``read_server_info`` waits out
    its 503s, for up to minutes): one line on stderr and 130, as ``kvtop --server`` does
    (tui/start/launch_server.py), not a traceback out of the wait's ``time.sleep``. ``url``
    carries no login (runner/server/credentials.py took it out)."""
    to_stderr(f"kvtop: stopped before {clean_line(url, 200)} answered")
    return EXIT_INTERRUPTED


# a command's JSON report (estimate, load): built here, read back by its text form
Report = dict[str, Any]


def json_safe(x: object) -> Any:
    """``x`` with every non-finite float replaced by None: JSON has no NaN or Infinity
    (``json.dumps`` would write them, and strict readers reject the file)."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
    return x


def write_stdout(text: str) -> str | None:
    """Print ``text``; a stdout that cannot take it (a full disk, a closed pipe or
    descriptor) is one line for ``fail``, and stdout points at /dev/null after it, so
    Python's own flush at exit finds nothing to complain about."""
    import os

    try:
        if sys.stdout is None:
            raise OSError(9, "stdout is closed")
        print(text, flush=True)
        return None
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.close(devnull)
        except OSError:
            pass
        sys.stdout = None
        return f"cannot write the results to stdout: {why}"
