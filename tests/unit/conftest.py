"""tests/unit is fast on any machine: it runs no model, no CPU probe and no subprocess.
The guard below makes that a rule, not a habit: a unit test that starts a process, loads
weights into llama.cpp or runs the probe fails at once, naming what it did (such a test
belongs in tests/e2e). The CPU figures every unit test sees are a fixed probe."""

import gc
import subprocess

import pytest
from helpers import FIXED_PROBE, UnitTestRule


@pytest.fixture(autouse=True, scope="module")
def _unit_tests_run_no_model_probe_or_process():
    """Module scope, so it is in place before any module-scoped fixture of a test file
    (autouse fixtures come first within a scope) and is gone again after the file."""
    import llama_cpp

    import kvtop.runner.system.cpu_probe as cpu_probe

    def no_process(self, args, *a, **kw):
        raise UnitTestRule(f"tests/unit starts no process (move this test to tests/e2e): {str(args)[:200]}")

    def no_model(*a, **kw):
        raise UnitTestRule("tests/unit loads no model into llama.cpp (move this test to tests/e2e)")

    probe = cpu_probe.CPUProbe(**FIXED_PROBE, version=cpu_probe.PROBE_VERSION)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(subprocess.Popen, "__init__", no_process)
        mp.setattr(llama_cpp, "llama_model_load_from_file", no_model)
        mp.setattr(cpu_probe, "probe_cpu", lambda *a, **kw: probe)
        mp.setattr(cpu_probe, "probe_cpu_in_subprocess", lambda *a, **kw: probe)
        yield


def pytest_collection_finish(session):
    """Everything imported and collected lives for the whole run: frozen out of the cyclic
    collector, as kvtop freezes what it imported before its app starts (tui/base/collector.py).
    Each full collection walked it all again: in a unit run the collector's oldest generation
    took about a quarter of the CPU (6.2 of 27.6 s over four App test files), 0.19 s each time."""
    gc.collect()
    gc.freeze()
    # and the young generation collected every 10,000 allocations, not 700 (two older ones
    # every 20): a pilot test's App allocates in bursts that survive only until its test
    # ends, and four App test files spent 3.6 of 19.9 s of CPU in the collector (1.3 of
    # 15.4 s so). The test process only: kvtop's own process keeps Python's defaults.
    gc.set_threshold(10_000, 20, 20)


@pytest.fixture(autouse=True)
def _no_app_outlives_its_test():
    """Textual 8.2 memoises ``StylesCache.get_inner_outer`` on the method, so its cache
    keeps up to 1,024 styles caches of finished Apps' widgets (each with its rendered
    lines) alive: in a unit run the heap grew by about 10,000 tracked objects a pilot test
    (300,000 after 30 of them), and every full collection walked them all. kvtop clears it
    as a new chat removes widgets (tui/base/textual_private.py); here each test ends so."""
    yield
    from kvtop.tui.base.textual_private import release_removed_widget_caches

    release_removed_widget_caches()
