"""kvtop load on a busy machine says so in every output format, as bench does: md under
the table (and the row's others CPU cell), csv and json on stderr, json and jsonl in the
run header and each level. A trial's run had ``others CPU`` 1.2-1.3 of 2 cores and no
word about it. The busy machine here is made: a process per core spinning, at nice 19,
beside the stand-in server (which runs in this process: its CPU is kvtop's own)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from fake_llama_server import FakeLlamaServer

from kvtop.runner.commands.load import load_main


@pytest.fixture
def spinning():
    """Spinners that are not this process's children: the stand-in server runs in this
    process, and kvtop counts a local server's child processes as the server's CPU (vLLM's
    engine core is its API server's child), so spinners started by it read as the server."""
    n = os.cpu_count() or 1
    out = subprocess.run(["bash", "-c", f"for i in $(seq {n}); do nice -n 19 {sys.executable} -c 'while True: pass' "
                          "</dev/null >/dev/null 2>&1 & echo $!; done"], capture_output=True, text=True, check=True)
    pids = [int(x) for x in out.stdout.split()]
    try:
        yield
    finally:
        for pid in pids:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass


ARGS = ["--users", "1,2", "-p", "8", "-n", "60", "--requests", "1", "--no-warmup", "--quiet"]


def test_every_format_says_the_machine_was_busy(spinning, capsys):
    with FakeLlamaServer(token_s=0.02) as srv:
        outs = {}
        for fmt in ("md", "csv", "json", "jsonl"):
            rc = load_main([srv.url, *ARGS, "-o", fmt])
            outs[fmt] = capsys.readouterr()
            assert rc == 0, outs[fmt].err
    md = outs["md"].out
    assert "other processes used" in md and "of the CPU during this run: figures are low" in md, md
    assert any(line.startswith("|     1 |") and " busy |" in line for line in md.splitlines()), md
    for fmt in ("csv", "json", "jsonl"):
        assert "of the CPU during this run: figures are low" in outs[fmt].err, (fmt, outs[fmt].err)
    doc = json.loads(outs["json"].out)
    assert doc["run"]["busy"].endswith("of the CPU during this run: figures are low")
    assert doc["run"]["others_cpu_share"] >= 0.25
    assert all(lv["busy"] and lv["level"]["others_cpu_share"] >= 0.25 for lv in doc["levels"]), doc["levels"]
    assert json.loads(outs["jsonl"].out.splitlines()[0])["run"]["busy"]


def test_a_quiet_machine_gets_no_warning(capsys):
    with FakeLlamaServer(token_s=0.02) as srv:
        rc = load_main([srv.url, *ARGS, "-o", "json"])
    out, err = capsys.readouterr()
    doc = json.loads(out)
    if doc["run"]["others_cpu_share"] is not None and doc["run"]["others_cpu_share"] >= 0.25:
        pytest.skip(f"this machine is busy now (others {doc['run']['others_cpu_share']:.0%}): no quiet run to check")
    assert rc == 0 and doc["run"]["busy"] is None and "figures are low" not in err
