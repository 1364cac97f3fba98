"""``kvtop --server``: the real app on a real llama-server (pilot and tmux)."""

import os
import re
import shutil
import subprocess
import sys
import time

import pytest
from helpers import make_app, screen_text, send, wait_until
from llama_server import llama_server

from kvtop.runner.server.engine import ServerEngine
from kvtop.runner.settings import Settings
from kvtop.tui.panes.estimate import EstimatePane
from kvtop.tui.panes.kv import KVPane
from kvtop.tui.panes.prefill import PrefillPane

LONG = "The tide comes in and the tide goes out, and the gulls count the waves. " * 120


def server_app(tmp_path, urls, model, **kw):
    settings = Settings(model, n_ctx=4096, temp=0, n_predict=kw.pop("n_predict", 16))
    return make_app(settings, lambda s: ServerEngine(s, urls[0]), tmp_path, servers=tuple(urls),
                    live_system=False, **kw)


async def test_a_turn_through_the_server_fills_every_pane(served, smollm_path, tmp_path):
    url, _ = served
    app = server_app(tmp_path, [url], smollm_path)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="connect")
        text = screen_text(app)
        assert f"server {url}" in text and "slots 2" in text and "build" in text
        await wait_until(pilot, lambda: "busy" in screen_text(app), what="first poll")
        await send(pilot, LONG + " Summarise.")
        pre = app.query_one(PrefillPane)
        await wait_until(pilot, lambda: app.turns and not app.turn_running, timeout=120, what="turn")
        m = app.turns[-1].metrics
        assert pre.total == m.prompt_tokens > 1500 and pre.done == pre.total
        text = screen_text(app)
        # the compact waterfall on the prefill pane: where the first token's time went
        # "TTFT 812 ms", "TTFT 4.20 s" or, on a busy machine, "TTFT 1m49.3s"
        assert re.search(r"TTFT (\d+m)?[\d.]+ ?m?s: ■ prefill \(server-measured\) \d+%", text), text
        assert re.search(r"gen [\d.,]+ tok/s", text)  # the server's own counters as rates
        assert "batched ceiling" in text and "tok/s" in text
        # the KV allocated is every slot's (2 of 4,096 tokens), the fill is this chat's slot
        assert app.here.layout.n_ctx == 2 * 4096
        kv_text = app.query_one(KVPane).render().plain  # the pane scrolls in this layout
        assert "all 2 slots" in kv_text and "of 180 MiB allocated" in kv_text and "/4,096 cells" in kv_text
        assert app.query_one(EstimatePane).rows.kv.predicted == app.here.layout.bytes_allocated
        await pilot.press("f2")
        await wait_until(pilot, lambda: "network + server queue" in screen_text(app), timeout=5, what="waterfall")


async def test_a_fleet_of_two_servers_and_f4_moves_the_chat(llama_server_bin, smollm_path, tmp_path):
    with llama_server(llama_server_bin, smollm_path, log_dir=str(tmp_path)) as (u1, _), \
            llama_server(llama_server_bin, smollm_path, slots=1, log_dir=str(tmp_path)) as (u2, _):
        app = server_app(tmp_path, [u1, u2], smollm_path)
        async with app.run_test(size=(160, 50)) as pilot:
            await wait_until(pilot, lambda: app.loaded is not None, what="connect")
            await wait_until(pilot, lambda: len(app.server_snapshots) == 2, what="both polled")
            await wait_until(pilot, lambda: u2[7:] in screen_text(app), timeout=5, what="the fleet pane")
            text = screen_text(app)
            assert u1[7:] in text and u2[7:] in text and "0/2" in text and "0/1" in text
            await pilot.press("f4")
            await wait_until(pilot, lambda: app.loaded is not None and app.loaded.server == u2, what="attach 2")
            await send(pilot, "Hi")
            await wait_until(pilot, lambda: app.turns and not app.turn_running, timeout=60, what="turn on 2")
            assert app.session.engine.url == u2


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is installed by .ci/run")
def test_kvtop_server_in_a_real_terminal(served, tmp_path):
    url, _ = served
    name = f"kvtop-srv-{os.getpid()}"  # its own tmux server too (-L): see test_tmux.py
    cmd = f"KVTOP_HOME={tmp_path} {sys.executable} -m kvtop --server {url} -n 16; echo KVTOP-EXIT=$?; sleep 30"
    subprocess.run(["tmux", "-L", name, "new-session", "-d", "-s", name, "-x", "160", "-y", "48", cmd], check=True)
    try:
        def screen():
            return subprocess.run(["tmux", "-L", name, "capture-pane", "-t", name, "-p"], capture_output=True,
                                  text=True).stdout

        def wait(pred, what, timeout=60):
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                s = screen()
                if pred(s):
                    return s
                time.sleep(0.2)
            raise AssertionError(f"timed out waiting for {what}:\n{screen()}")

        wait(lambda s: f"server {url}" in s, "connect")
        subprocess.run(["tmux", "-L", name, "send-keys", "-t", name, "Say hello", "Enter"], check=True)
        s = wait(lambda s: re.search(r"TTFT \d", s), "the answer")
        assert "you: Say hello" in s and "slot" in s
        subprocess.run(["tmux", "-L", name, "send-keys", "-t", name, "C-q"], check=True)
        s = wait(lambda s: "KVTOP-EXIT=0" in s, "exit 0", timeout=15)
        # the quit summary, as for a local model, with the server's own figures
        assert "kvtop: 1 turn with SmolLM2" in s and f"on {url}" in s, s
        assert re.search(r"connect time = +[\d.]+ ms", s), s
        rate = r"\( *[\d.]+ ms per token, +[\d.]+ tokens per second\)"
        prompt = re.search(r"prompt eval time = +[\d.]+ ms / +(\d+) tokens " + rate, s)
        runs = re.search(r"eval time = +[\d.]+ ms / +(\d+) runs +" + rate, s)
        total = re.search(r"total time = +[\d.]+ ms / +(\d+) tokens \((\d+) prompt, (\d+) generated", s)
        assert prompt and runs and total, s
        assert int(prompt.group(1)) > 0 and 0 < int(runs.group(1)) <= 15  # -n 16: at most 15 gaps
        assert int(total.group(2)) == int(prompt.group(1)) and int(total.group(3)) == int(runs.group(1)) + 1
        transcript = re.search(r"transcript: (\S+)", s).group(1)
        assert os.path.isfile(transcript) and transcript.startswith(str(tmp_path)), s
        assert re.search(r"trace: \S", s), s
    finally:
        subprocess.run(["tmux", "-L", name, "kill-server"], capture_output=True)
