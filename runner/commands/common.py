"""What the headless commands share: exit codes and the one-line error.

Exit codes: 0 ok, 1 runtime error (one line on stderr), 2 usage error (argparse).
"""

from __future__ import annotations

import math
import sys

from runner.sanitize import clean_line

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2


def fail(msg: str) -> int:
    """One line on stderr, exit code 1."""
    print(f"kvtop: {clean_line(msg, 400)}", file=sys.stderr)
    return EXIT_ERROR


def json_safe(x):
    """``x`` with every non-finite float replaced by None: JSON has no NaN or Infinity
    (``json.dumps`` would write them, and strict readers reject the file)."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
    return x
