"""kvtop load's outputs: csv and json hold every field (None as empty / null, never NaN),
the md table reads like llama-bench's, a fleet gets a server column, the knee is the
last level meeting both targets, and the plot is an SVG with the roof in it."""

from __future__ import annotations

import csv
import io
import json

from kvtop.runner.commands.load_output import format_csv, format_json, format_jsonl, format_md, knee, plot_svg
from kvtop.runner.commands.load_rows import FIELDS


def row(users, gen, per_user, ttft95, server="http://127.0.0.1:8080", roof=100.0):
    r = dict.fromkeys(FIELDS)
    r.update(server=server, users=users, requests=4, completed=4, failed=0, generated_tokens=64, gen_tok_s=gen,
             per_user_gen_tok_s=per_user, ttft_p50_s=ttft95 / 2, ttft_p95_s=ttft95, ttft_p99_s=ttft95,
             itl_p50_s=0.01, itl_p95_s=0.02, itl_p99_s=0.03, e2e_p50_s=1.5, batched_roof_tok_s=roof,
             kv_cells_used=320, client_saturated=False, others_cpu=float("nan"))
    return r


ROWS = [row(1, 10.0, 10.0, 0.2), row(2, 18.0, 9.0, 0.4), row(4, 30.0, 7.5, 0.9)]


def test_json_and_jsonl_hold_every_field_and_no_nan():
    parsed = json.loads(format_json(ROWS))
    assert [list(r) for r in parsed] == [list(FIELDS)] * 3
    assert parsed[2]["gen_tok_s"] == 30.0 and parsed[0]["others_cpu"] is None and parsed[0]["rate"] is None
    lines = format_jsonl(ROWS).splitlines()
    assert len(lines) == 3 and json.loads(lines[1])["users"] == 2


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


def test_the_plot_is_svg_with_throughput_and_the_roof():
    svg = plot_svg(ROWS, "kvtop load <test>")
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert svg.count("<polyline") == 3 and "batched roof" in svg and "&lt;test&gt;" in svg
