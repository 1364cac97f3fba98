"""Which ceiling binds: one rule, in runner.physics.roofline, used by every caller."""

import pytest

from kvtop.runner.physics.roofline import binding_ceiling


@pytest.mark.parametrize("bw,comp,expected", [
    (306.0, 929.0, (306.0, "bandwidth")),
    (929.0, 306.0, (306.0, "compute")),
    (500.0, 500.0, (500.0, "bandwidth")),  # a tie: decode reads the weights, bandwidth is named
    (306.0, None, (306.0, "bandwidth")),  # an unknown ceiling never binds
    (None, 929.0, (929.0, "compute")),
    (None, None, (None, None)),
])
def test_the_lower_known_ceiling_binds(bw, comp, expected):
    assert binding_ceiling(bw, comp) == expected


def test_predict_and_the_decode_pane_use_it(smollm_path):
    from helpers import FIXED_HW

    from kvtop.runner.model.inspect import load_facts
    from kvtop.runner.physics.kv_bytes import kv_layout
    from kvtop.runner.physics.roofline import predict

    facts = load_facts(smollm_path)
    p = predict(facts, kv_layout(facts, 4096), FIXED_HW.bandwidth_gbs, FIXED_HW.tflops)
    assert (p.decode_tok_s, p.binding) == binding_ceiling(p.decode_ceiling_tok_s, p.compute_ceiling_tok_s)
    no_flops = predict(facts, kv_layout(facts, 4096), FIXED_HW.bandwidth_gbs, None)
    assert no_flops.binding == "bandwidth" and no_flops.decode_tok_s == no_flops.decode_ceiling_tok_s
