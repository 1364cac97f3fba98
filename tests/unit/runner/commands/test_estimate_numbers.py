"""``kvtop estimate`` writes its numbers as the panes do (issue 33, item 6): it printed
"prefill 2000 tok" beside the dashboard's "4,096", and "306.6 tok/s" for the decode
ceiling the Decode pane calls "307 tok/s"."""

from helpers import FIXED_HW

from kvtop.runner.commands.estimate import estimate_report, format_report
from kvtop.runner.model.inspect import load_facts
from kvtop.runner.units import fmt_rate, fmt_seconds


def test_estimate_formats_counts_rates_and_times_as_the_panes_do(smollm_shaped):
    r = estimate_report(load_facts(smollm_shaped), FIXED_HW, 4096, prompt_tokens=2000, output_tokens=1500)
    lines = dict(line.split("  ", 1) for line in format_report(r).splitlines() if "  " in line)
    rows = {k.strip(): v.strip() for k, v in lines.items()}
    assert f"{fmt_seconds(r['prefill_s'])} ({fmt_rate(r['prefill_tok_s'])})" == rows["prefill 2,000 tok"]
    assert rows["response +1,500 tok"] == fmt_seconds(r["response_s"])
    assert rows["decode ceiling"] == f"{fmt_rate(r['decode_ceiling_tok_s'])} (bandwidth)"
    assert rows["compute ceiling"].startswith(fmt_rate(r["compute_ceiling_tok_s"]))
