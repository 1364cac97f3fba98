"""The rule tests/unit/conftest.py enforces holds: a unit test that starts a process,
loads a model or runs the CPU probe fails at once and says where the test belongs."""

import subprocess

import pytest
from helpers import FIXED_PROBE, UnitTestRule


def test_a_subprocess_is_refused():
    with pytest.raises(UnitTestRule, match="tests/e2e"):
        subprocess.run(["true"])


def test_a_model_load_is_refused(smollm_shaped):
    import llama_cpp

    from kvtop.runner.engine.handles import Model

    with pytest.raises(UnitTestRule, match="no model"):
        Model.load(smollm_shaped, llama_cpp.llama_model_default_params())


def test_the_cpu_figures_are_the_fixed_probe(tmp_path):
    from kvtop.runner.system.cpu_probe import cpu_profile

    probe = cpu_profile(str(tmp_path), refresh=True)
    assert probe.bandwidth_gbs == FIXED_PROBE["bandwidth_gbs"] and probe.machine == "test-machine"
