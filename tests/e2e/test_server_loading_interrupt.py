"""``kvtop --server URL`` waits up to 2 minutes for a llama-server that is still loading
its model (``/health`` answers 503 "Loading model"). Ctrl+C during that wait printed a
Python traceback (``KeyboardInterrupt`` out of ``time.sleep`` in the wait); it now exits
quietly: one line at most, exit status 130 (128 + SIGINT). ``kvtop estimate --server
URL`` and ``kvtop load URL`` wait the same way (runner.server.props) and traced back
the same way until they too caught it (runner.commands.common.stopped_before).

kvtop runs as a user runs it (``python -m kvtop``, a process of its own); the server is a
loopback fake that answers what the vendored llama-server answers while it loads
(recorded from the built binary: HTTP 503 with this body)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from fake_servers import FakeServer, Reply

LOADING = Reply(b'{"error":{"message":"Loading model","type":"unavailable_error","code":503}}', 503)


def _ctrl_c_while_the_server_loads(tmp_path, args: list[str]) -> None:
    """Run ``kvtop ARGS URL`` against a server still loading its model, press Ctrl+C
    once kvtop is waiting (two /health polls seen), and check how it exits."""
    server = FakeServer({path: LOADING for path in ("/health", "/props", "/slots", "/metrics", "/v1/models")})
    with server as url:
        proc = subprocess.Popen([sys.executable, "-m", "kvtop", *args, url], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env={**os.environ, "KVTOP_HOME": str(tmp_path)})
        try:
            deadline = time.monotonic() + 60  # start-up on a busy machine
            while time.monotonic() < deadline and proc.poll() is None and server.requests.count("/health") < 2:
                time.sleep(0.05)
            assert proc.poll() is None and server.requests.count("/health") >= 2, "kvtop is not waiting"
            proc.send_signal(signal.SIGINT)  # what Ctrl+C sends
            out, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    text = (out + err).strip()
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text
    assert len(text.splitlines()) <= 1, text
    assert proc.returncode == 130, (proc.returncode, text)


def test_ctrl_c_while_the_server_loads_its_model_exits_130_in_one_line(tmp_path):
    _ctrl_c_while_the_server_loads(tmp_path, ["--server"])


def test_ctrl_c_in_estimate_while_the_server_loads_exits_130_in_one_line(tmp_path):
    _ctrl_c_while_the_server_loads(tmp_path, ["estimate", "--server"])


def test_ctrl_c_in_load_while_the_server_loads_exits_130_in_one_line(tmp_path):
    _ctrl_c_while_the_server_loads(tmp_path, ["load"])
