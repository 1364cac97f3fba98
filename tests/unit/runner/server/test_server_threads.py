"""The compute roof over a local llama-server is its threads' share of the probe's FLOPS:
a trial ran the server with -t 1 on 2 cores and the load pane's roof said 132 tok/s beside
a measured 20 (the probe had timed 2 threads). llama-server does not publish its threads,
so kvtop reads them from the command line of the process listening on the port."""

from types import SimpleNamespace

import pytest

from kvtop.runner.commands import load_physics
from kvtop.runner.server import props
from kvtop.runner.server.props import threads_from_cmdline


@pytest.mark.parametrize("argv,threads", [
    (["llama-server", "-m", "m.gguf", "-t", "1", "--port", "8080"], 1),
    (["llama-server", "--threads", "3"], 3),
    (["llama-server", "--threads=4", "-np", "4"], 4),
    (["llama-server", "-t", "-1"], None),  # llama.cpp's default: every physical core
    (["llama-server", "-m", "m.gguf", "-tb", "2"], None),  # batch threads are not decode's
    (["llama-server", "-t"], None),
    (["llama-server", "-t", "x"], None),
])
def test_the_threads_on_the_command_line(argv, threads):
    assert threads_from_cmdline(argv) == threads


def _hw(threads=2, gpus=()):
    return SimpleNamespace(cpu=SimpleNamespace(threads=threads), gpus=gpus)


def test_a_server_on_fewer_threads_than_the_probe_gets_their_share(monkeypatch):
    monkeypatch.setattr(props, "local_server_threads", lambda url: 1)
    tf, source = load_physics.server_share(0.04, "CPU probe (2 threads)", _hw(2), "http://127.0.0.1:1", 0)
    assert tf == pytest.approx(0.02) and source.endswith("; x1/2 for the server's -t 1")


@pytest.mark.parametrize("threads,hw,ngl", [(None, _hw(2), 0), (2, _hw(2), 0), (4, _hw(2), 0),
                                             (1, _hw(2, gpus=("GPU",)), 99), (1, SimpleNamespace(cpu=None, gpus=()), 0)])
def test_otherwise_the_probe_as_it_is(monkeypatch, threads, hw, ngl):
    monkeypatch.setattr(props, "local_server_threads", lambda url: threads)
    assert load_physics.server_share(0.04, "probe", hw, "http://127.0.0.1:1", ngl) == (0.04, "probe")
