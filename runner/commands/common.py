"""What the headless commands share: exit codes and the one-line error.

Exit codes: 0 ok, 1 runtime error (one line on stderr), 2 usage error (argparse).
"""

from __future__ import annotations

import sys

from runner.sanitize import clean_line

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2


def fail(msg: str) -> int:
    """One line on stderr, exit code 1."""
    print(f"kvtop: {clean_line(msg, 400)}", file=sys.stderr)
    return EXIT_ERROR

