"""The ``kvtop`` command: the live monitor, ``kvtop bench``, ``kvtop estimate``, ``kvtop load`` and
``kvtop sessions``.

The headless commands never import Textual. Exit codes: 0 ok, 1 runtime error
with a one-line message, 2 usage error.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("bench", "estimate") and sys.stdout is None:  # started with descriptor 1 closed
        from kvtop.runner.commands.common import fail

        return fail(f"stdout is closed: nowhere to write kvtop {argv[0]}'s results (give it a file: > out.md)")
    if argv and argv[0] == "bench":
        from kvtop.runner.commands.bench import bench_main

        return bench_main(argv[1:])
    if argv and argv[0] == "estimate":
        from kvtop.runner.commands.estimate import estimate_main

        return estimate_main(argv[1:])
    if argv and argv[0] == "load":
        from kvtop.runner.commands.load import load_main

        def live(*args):  # the --server dashboard with the sweep, on a terminal (Textual only imported then)
            from kvtop.tui.start.launch_server import load_live

            return load_live(*args)

        return load_main(argv[1:], live)
    if argv and argv[0] == "sessions":
        from kvtop.runner.commands.sessions import sessions_main

        return sessions_main(argv[1:])
    if argv and argv[0] == "replay":
        from kvtop.tui.start.launch import replay_main

        return replay_main(argv[1:], terminal=True)
    from kvtop.tui.start.launch import launch_main

    return launch_main(argv, terminal=True)  # the real command: a terminal, a guarded quit


if __name__ == "__main__":
    sys.exit(main())
