"""kvtop load's outputs: csv and json hold every field (None as empty / null, never NaN),
json and jsonl under a run header with each level's counts apart from what describes one
request, the md table reads like llama-bench's, a fleet gets a server column, the knee is
the last level meeting both targets, and the plot is an SVG with labelled ticks and the
live view's scale rule (a roof far above is named, not drawn: the measured lines stay tall)."""

from __future__ import annotations

import csv
import io
import json
import re

from kvtop.runner.commands.load_json import flat_levels, format_json, format_jsonl
from kvtop.runner.commands.load_output import format_csv, format_md, knee
from kvtop.runner.commands.load_plot import plot_svg
from kvtop.runner.commands.load_rows import FIELDS


def row(users, gen, per_user, ttft95, server="http://127.0.0.1:8080", roof=100.0):
    r = dict.fromkeys(FIELDS)
    r.update(server=server, users=users, requests=4, completed=4, failed=0, generated_tokens=64, gen_tok_s=gen,
             per_user_gen_tok_s=per_user, ttft_p50_s=ttft95 / 2, ttft_p95_s=ttft95, ttft_p99_s=ttft95,
             itl_p50_s=0.01, itl_p95_s=0.02, itl_p99_s=0.03, e2e_p50_s=1.5, batched_roof_tok_s=roof,
             kv_cells_used=320, client_saturated=False, others_cpu=float("nan"))
    return r


ROWS = [row(1, 10.0, 10.0, 0.2), row(2, 18.0, 9.0, 0.4), row(4, 30.0, 7.5, 0.9)]


HEADER = {"kvtop": "0.1.0", "settings": {"requests_per_user": 1}}


def test_json_and_jsonl_hold_a_run_header_and_every_field_and_no_nan():
    parsed = json.loads(format_json(ROWS, HEADER))
    assert parsed["run"] == HEADER and len(parsed["levels"]) == 3
    level = parsed["levels"][2]
    # the level's counts and totals apart from what one request was and saw
    assert level["users"] == 4 and level["level"]["requests"] == 4 and level["level"]["generated_tokens"] == 64
    assert level["per_request"]["generated_tokens_per_request"] == 16 and "generated_tokens" not in level["per_request"]
    assert level["per_request"]["ttft_p95_s"] == 0.9 and "requests" not in level["per_request"]
    assert level["level"]["gen_tok_s"] == 30.0 and level["level"]["others_cpu"] is None and level["rate"] is None
    assert level["roof"]["batched_roof_tok_s"] == 100.0
    flat = flat_levels(format_json(ROWS, HEADER))
    assert [{k: r[k] for k in FIELDS} for r in flat] == json.loads(json.dumps(ROWS).replace("NaN", "null"))
    lines = format_jsonl(ROWS, HEADER).splitlines()
    assert len(lines) == 4 and json.loads(lines[0]) == {"run": HEADER} and json.loads(lines[2])["users"] == 2
    assert [r["users"] for r in flat_levels(format_jsonl(ROWS, HEADER))] == [1, 2, 4]


def test_csv_has_a_header_of_every_field_and_a_line_per_row():
    rows = list(csv.reader(io.StringIO(format_csv(ROWS))))
    assert rows[0] == list(FIELDS)
    assert len(rows) == 4
    got = dict(zip(rows[0], rows[3]))
    assert got["users"] == "4" and got["gen_tok_s"] == "30.000000" and got["rate"] == "" and got["others_cpu"] == ""


def test_md_is_a_table_with_the_notes_under_it():
    out = format_md(ROWS, ["a note"])
    lines = out.splitlines()
    assert lines[0].startswith("| users |") and "gen t/s (all, with waits)" in lines[0] and "bw roof t/s" in lines[0]
    # what each rate covers is in its heading: the total counts the waits for first tokens, the per-user rate
    # is the server's decode; the roof columns say which roof (a trial read 'roof' as the pane's lower one)
    assert "per user decode t/s" in lines[0] and "compute roof t/s" in lines[0]
    assert set(lines[1]) <= set("|-: ")
    assert "30.00" in lines[4]
    assert "0.450 / 0.900 / 0.900" in lines[4]  # TTFT p50/95/99 in seconds
    assert "10.0 / 20.0 / 30.0" in lines[4]  # ITL in ms
    assert len({len(x) for x in lines[:5]}) == 1  # every line of the table as wide
    assert lines[-1] == "a note" and "server" not in lines[0]


def test_md_of_a_fleet_says_which_server():
    rows = [row(1, 5.0, 5.0, 0.2, "http://a"), row(1, 5.0, 5.0, 0.2, "http://b"), row(2, 10.0, 5.0, 0.2, "all")]
    assert format_md(rows, []).splitlines()[0].startswith("| server ")


def test_the_knee_is_the_most_users_meeting_both_targets():
    assert knee(ROWS, 0.5, 8.0)["users"] == 2
    assert knee(ROWS, None, 7.0)["users"] == 4
    assert knee(ROWS, 0.1, None) is None


def _texts(svg: str) -> list[str]:
    return re.findall(r">([^<>]+)</text>", svg)


def _ys(svg: str, cls: str) -> list[float]:
    points = re.search(rf'class="{cls}" points="([^"]+)"', svg).group(1)
    return [float(p.split(",")[1]) for p in points.split()]


def test_the_plot_is_svg_with_labelled_ticks_the_curve_and_the_roof():
    rows = [row(1, 10.0, 10.0, 0.2, roof=40.0), row(2, 18.0, 9.0, 0.4, roof=60.0), row(4, 30.0, 7.5, 0.9, roof=80.0)]
    svg = plot_svg(rows, "kvtop load <test>", roof_text="roof = min(B x 20.0 GB/s ...); B = the users")
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert svg.count("<polyline") == 3 and "roof (bandwidth or compute, the lower)" in svg and "&lt;test&gt;" in svg
    texts = _texts(svg)
    assert {"0", "20", "40", "60", "80"} <= set(texts), texts  # the y ticks, labelled
    assert {"1", "2", "4"} <= set(texts) and "users" in texts and "tok/s" in texts  # the x ticks
    assert "roof = min(B x 20.0 GB/s ...)" in texts and "B = the users" in texts  # the formula under the title


def test_a_roof_far_above_the_curve_is_named_and_the_curve_fills_the_plot():
    """A trial's SVG: the measured lines flat on the x axis under a roof 40x above them."""
    rows = [row(1, 6.4, 7.8, 0.7, roof=206.0), row(2, 5.2, 3.6, 3.0, roof=409.0)]
    svg = plot_svg(rows, "t")
    assert svg.count("<polyline") == 2 and 'class="roof"' not in svg
    assert "\u2191 roof up to 409 tok/s, 52x the top rate: above the chart" in svg
    top, bottom = 84, 480 - 56  # the plot's frame (load_plot.py)
    assert min(_ys(svg, "per_user")) < top + 0.2 * (bottom - top)  # the tallest point near the top
    texts = _texts(svg)
    assert "8" in texts and "409" not in texts, texts  # ticks to the curve's top, not the roof's


def test_an_unexplained_level_is_marked_on_the_plot():
    rows = [row(1, 1.53, 1.53, 0.2), row(2, 21.6, 10.82, 0.2), row(3, 3.2, 1.08, 0.2)]
    rows[1]["unexplained"] = "each user's rate rose 7.1x"
    assert plot_svg(rows, "t").count('class="unexplained"') == 1
