"""The ``kvtop`` command: the live monitor, ``kvtop bench``, ``kvtop estimate``, ``kvtop load`` and ``kvtop kld``.

The headless commands never import Textual. Exit codes: 0 ok, 1 runtime error
with a one-line message, 2 usage error.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "bench":
        from kvtop.runner.commands.bench import bench_main

        return bench_main(argv[1:])
    if argv and argv[0] == "estimate":
        from kvtop.runner.commands.estimate import estimate_main

        return estimate_main(argv[1:])
    if argv and argv[0] == "kld":
        from kvtop.runner.commands.kld import kld_main

        return kld_main(argv[1:])
    if argv and argv[0] == "load":
        from kvtop.runner.commands.load import load_main

        def live(*args):  # the --server dashboard with the sweep, on a terminal (Textual only imported then)
            from kvtop.tui.start.launch_server import load_live

            return load_live(*args)

        return load_main(argv[1:], live)
    if argv and argv[0] == "replay":
        from kvtop.tui.start.launch import replay_main

        return replay_main(argv[1:], terminal=True)
    from kvtop.tui.start.launch import launch_main

    return launch_main(argv, terminal=True)  # the real command: a terminal, a guarded quit


if __name__ == "__main__":
    sys.exit(main())
