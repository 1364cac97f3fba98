"""The speculative roof (runner/physics/spec_roof.py): tokens a verify pass yields at an
acceptance, over what a pass of that many tokens costs on the machine model, against
plain decode at the same depth; and where it stops paying."""

from dataclasses import replace

import pytest
from helpers import FIXED_HW

from kvtop.runner.model.inspect import load_facts
from kvtop.runner.physics.here import Here
from kvtop.runner.physics.spec_roof import roof_table, spec_roof
from kvtop.runner.settings import Settings


def here_for(model, hw=FIXED_HW) -> Here:
    return Here.at(load_facts(model), hw, Settings(model, n_ctx=4096, n_threads=2).resolved())


def test_a_bandwidth_bound_pass_costs_one_step_and_every_accepted_token_is_a_gain(smollm_shaped):
    # a huge FLOPS figure: every pass is a read of the weights, as a plain step is
    here = here_for(smollm_shaped, replace(FIXED_HW, tflops=1000.0))
    r = spec_roof(here, 4, 0.5, depth=100)
    assert r is not None and r.bound == "bandwidth"
    assert r.pass_cost == pytest.approx(1.0)
    assert r.tokens_per_pass == 3.0 and r.speedup == pytest.approx(3.0)
    assert r.break_even == 0.0
    bw, _ = here.ceilings(100)
    assert r.roof_tok_s == pytest.approx(3 * bw)


def test_a_compute_bound_pass_stops_paying_below_its_break_even(smollm_shaped):
    # 0.25 TFLOPS: a pass of 49 tokens is compute-bound, and costs many plain steps
    here = here_for(smollm_shaped)
    r = spec_roof(here, 48, 0.68, depth=100)
    assert r is not None and r.bound == "compute" and r.pass_cost > 2
    be = r.break_even
    assert be is not None and 0 < be < 1
    at_be = spec_roof(here, 48, be, depth=100)
    assert at_be is not None and at_be.speedup == pytest.approx(1.0)
    below = spec_roof(here, 48, be * 0.9, depth=100)
    assert below is not None and below.speedup < 1 < r.speedup


def test_the_drafters_extra_bytes_make_a_pass_dearer(smollm_shaped):
    here = here_for(smollm_shaped, replace(FIXED_HW, tflops=1000.0))
    plain = spec_roof(here, 3, 0.7, depth=10)
    mtp = spec_roof(here, 3, 0.7, depth=10, extra_bytes=20e6)
    assert plain is not None and mtp is not None
    # 3 drafted tokens x 20 MB at 30 GB/s = 2 ms more a pass
    assert mtp.pass_s - plain.pass_s == pytest.approx(3 * 20e6 / 30e9)


def test_the_table_runs_to_the_largest_draft_and_includes_it(smollm_shaped):
    rows = roof_table(here_for(smollm_shaped), 0.5, 100, 20)
    assert [r.draft for r in rows] == [1, 2, 3, 4, 8, 16, 20]
