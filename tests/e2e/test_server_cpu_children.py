"""kvtop load and kvtop bench count a local server's CPU with the processes under it: vLLM's API server
answers on the port while its engine core and worker (its children) compute. Counted as
other processes, every local vLLM level read "other processes used 97% of the CPU: figures
are low" (seen against the tests' vLLM)."""

import subprocess
import sys

import psutil

from kvtop.runner.server.load_watch import _cpu_seconds
from kvtop.runner.system.cpu_use import tree_seconds

# a parent that does nothing and a child that burns about 0.4 s of CPU, then both wait
PARENT = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c",
    "import time\\nt = time.process_time()\\nwhile time.process_time() - t < 0.4: pass\\nprint('done', flush=True)\\ntime.sleep(60)"],
    stdout=sys.stdout)
time.sleep(60)
"""


def test_a_servers_cpu_includes_its_childrens():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None and parent.stdout.readline().strip() == "done"
        kids = psutil.Process(parent.pid).children(recursive=True)
        assert len(kids) == 1
        child_cpu = sum(kids[0].cpu_times()[:2])
        assert child_cpu >= 0.35
        alone, whole = _cpu_seconds(parent.pid), tree_seconds(parent.pid)
        assert alone is not None and whole is not None
        assert whole - alone >= child_cpu - 0.02, (alone, whole, child_cpu)
    finally:
        for p in psutil.Process(parent.pid).children(recursive=True):
            p.kill()
        parent.kill()
        parent.wait(10)


def test_a_server_that_is_gone_reads_none():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait(10)
    assert tree_seconds(p.pid) is None
