"""The order in which pytest-xdist hands test files to its workers (``--dist loadfile``).

xdist's default for loadfile re-sorts the files by their number of tests, most first
(``--loadscope-reorder``), so the files of one or two long tests came last: in one CI run
the last file started was the live KV-quality measurement (69 s, one test), run by one
worker while the other, out of work, waited. Here the files go slowest first (the longest
job first: each worker's last file is then a short one), each file whole and in its own
order so a file's module fixtures stay on one worker, and the vLLM file (its server's
start is 39 s) starts at once instead of part-way through.

The seconds are the last CI run's (its slowest items, summed per file: lower bounds) and
docs/test-timings.md's for a few unit files; a file not listed is estimated from its number
of tests. While a first run builds
llama-server (a cold cache), the files that need the server still go last, so the build
runs while the others' tests do (tests/conftest.py).
"""

from __future__ import annotations

import os

# seconds per file on the last CI run (2 cores, warm cache), slowest first
SLOW_FILES = {
    "e2e/test_kld_matches_llama_perplexity.py": 102.0,
    "e2e/test_vllm.py": 97.0,
    "e2e/test_load_faults.py": 77.0,
    "e2e/test_kv_quality_app.py": 69.0,
    "e2e/test_key_abuse.py": 67.0,
    "e2e/test_server_engine.py": 53.0,
    "e2e/test_server_app.py": 30.0,
    "e2e/test_waterfall_long_prompt.py": 29.0,
    "e2e/test_server_faults.py": 24.0,
    "e2e/test_kld_cli.py": 23.0,
    "e2e/test_secrets_never_written.py": 21.0,
    "e2e/test_bench_cli.py": 20.0,
    "e2e/test_server_restart.py": 18.0,
    # unit files of a few long App tests (docs/test-timings.md, a busy run): before the bulk of
    # short unit files, not at the end of the run
    "unit/tui/test_screenshot_dialog.py": 18.0,
    "unit/tui/test_secrets_every_writer.py": 15.0,
    "unit/tui/test_textual_private.py": 13.0,
    "unit/tui/test_markdown_toggle.py": 12.0,
    "unit/tui/test_waterfall_turns.py": 11.0,
    "unit/tui/test_server_restart_ui.py": 10.0,
    "unit/tui/test_layout_stays_put.py": 10.0,
}
E2E_TEST_S = 3.0  # a guess per test for a file not listed: e2e tests start models and servers
UNIT_TEST_S = 0.3


def estimate_s(rel_path: str, n_tests: int) -> float:
    """Seconds a test file is expected to take (``rel_path`` relative to tests/)."""
    rel = rel_path.replace(os.sep, "/")
    if rel in SLOW_FILES:
        return SLOW_FILES[rel]
    return n_tests * (E2E_TEST_S if rel.startswith("e2e/") else UNIT_TEST_S)


def order_items(items: list, tests_dir: str, server_last: bool, uses_server) -> None:
    """Sort ``items`` in place: whole files, slowest first; ``server_last`` puts the files
    with a test for which ``uses_server(item)`` is true after all the others."""
    counts: dict = {}
    server: set = set()
    for item in items:
        counts[item.path] = counts.get(item.path, 0) + 1
        if server_last and uses_server(item):
            server.add(item.path)
    first_seen = {}
    for i, item in enumerate(items):
        first_seen.setdefault(item.path, i)

    def key(item) -> tuple:
        path = item.path
        rel = os.path.relpath(str(path), tests_dir)
        return (path in server, -estimate_s(rel, counts[path]), first_seen[path])

    items.sort(key=key)
