"""``kvtop bench --spec-type`` as users run it (issue 36, item 3): the demo model in kvtop's
engine processes, each tg test plain and speculative on the copy preset, side by side;
bad input in one line, exit 2, nothing started."""

import json
import subprocess
import sys

import pytest


def bench(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "kvtop", "bench", *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def md_rows(out: str) -> list[dict[str, str]]:
    lines = [line for line in out.splitlines() if line.startswith("|")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    return [dict(zip(head, (c.strip() for c in line.strip("|").split("|")))) for line in lines[2:]]


def test_plain_and_speculative_tg_side_by_side_on_the_copy_preset(smollm_path):
    r = bench(smollm_path, "--spec-type", "ngram-simple", "-n", "32", "-r", "1", "-t", "2")
    assert r.returncode == 0, r.stderr[-2000:]
    plain, spec = md_rows(r.stdout)
    assert plain["spec_type"] == "none" and spec["spec_type"] == "ngram-simple"
    assert plain["test"] == spec["test"] and plain["test"].startswith("tg32 @ d")  # the same text and depth
    assert float(plain["t/s"].split()[0]) > 0 and float(spec["t/s"].split()[0]) > 0
    assert int(spec["drafted"]) > 0 and int(spec["accepted"]) > 0, r.stdout  # the copy preset makes drafts
    assert spec["acceptance"].endswith("%") and spec["speedup"].endswith("x") and plain["drafted"] == "-"
    assert "continues the copy text" in r.stdout and "Traceback" not in r.stderr


def test_the_json_rows_and_a_file_to_continue(smollm_path, tmp_path):
    f = tmp_path / "story.txt"
    f.write_text("One two three four five six seven eight nine ten. " * 4)
    r = bench(smollm_path, "--spec-type", "ngram-simple", "-f", str(f), "--spec-text", "copy", "-n", "24",
              "-r", "2", "--no-warmup", "--json", "-t", "2")
    assert r.returncode == 0, r.stderr[-2000:]
    plain, spec = json.loads(r.stdout)
    assert plain["kvtop_spec_type"] is None and spec["kvtop_spec_type"] == "ngram-simple"
    assert plain["n_depth"] == spec["n_depth"] > 0 and plain["n_gen"] == spec["n_gen"] == 24
    assert len(spec["samples_ns"]) == 2 and plain["avg_ts"] > 0 and spec["avg_ts"] > 0
    assert sum(spec["kvtop_spec_drafted"]) > 0 and sum(spec["kvtop_spec_accepted"]) > 0
    assert spec["kvtop_spec_speedup"] == pytest.approx(spec["avg_ts"] / plain["avg_ts"], rel=1e-3)


@pytest.mark.parametrize("argv,needle", [
    (["--spec-type", "nonsense"], "argument --spec-type: unknown speculative type: nonsense"),
    (["--spec-type", "ngram-simple", "-f", "/no/such/text"], "-f /no/such/text: No such file or directory"),
    (["--spec-type", "ngram-simple", "-p", "64"], "speculation changes generation only"),
    (["--spec-type", "ngram-simple", "--spec-draft-n-max", "0"], "must be an integer from 1 to 1,024 (got 0)"),
    (["--spec-text", "copy"], "give --spec-type"),
])
def test_bad_input_is_one_line_and_exit_2(smollm_path, argv, needle):
    r = bench(smollm_path, *argv, timeout=120)
    assert r.returncode == 2 and r.stdout == "" and needle in r.stderr.strip().splitlines()[-1], r.stderr[-500:]
