"""``kvtop --server``: a llama-server that restarts is a new server. Before, after the
server came back with ``-np 2`` (was 4) the status bar kept "slots 4", nothing said it
came back, the decode pane counted "no token for 2m13s" into the next turn, the KV pane
and stream tail kept the lost reply, and once the next turn did not finish. The real
llama-server, stopped mid-reply and started again on the same port with 2 slots."""

from __future__ import annotations

import time
from contextlib import ExitStack

from helpers import make_app, screen_text, send, wait_until
from llama_server import free_port, llama_server

from kvtop.runner.server.engine import ServerEngine
from kvtop.runner.settings import Settings
from kvtop.tui.panes.chat import ChatLog, StreamTail
from kvtop.tui.panes.decode import DecodePane
from kvtop.tui.panes.kv import KVPane
from kvtop.tui.panes.server import ServerPane
from kvtop.tui.panes.status import StatusBar

RESTARTED = "llama-server restarted: now 2 slots, n_ctx 1,024/slot (was 4 slots)"


async def test_a_restart_with_two_slots_is_a_new_server_and_the_next_turn_finishes(llama_server_bin, smollm_path,
                                                                                   tmp_path):
    port = free_port()
    with ExitStack() as first:
        url, proc = first.enter_context(llama_server(llama_server_bin, smollm_path, slots=4, ctx=1024, port=port,
                                                     log_dir=str(tmp_path)))
        settings = Settings(smollm_path, n_ctx=1024, temp=0, n_predict=200)
        app = make_app(settings, lambda s: ServerEngine(s, url), tmp_path, servers=(url,), live_system=False)
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_until(pilot, lambda: app.loaded is not None, what="connect")
            status = app.query_one(StatusBar)
            assert "slots 4" in status.render().plain and "n_ctx 1,024/slot" in status.render().plain
            await send(pilot, "Write a long story about a lighthouse keeper and the sea, in many chapters.")
            decode = app.query_one(DecodePane)
            await wait_until(pilot, lambda: decode.state == "decoding" and decode.pos > 20, timeout=60,
                             what="decoding")
            first.close()  # the server stops mid-reply
            assert proc.poll() is not None
            (tmp_path / "second").mkdir()
            with llama_server(llama_server_bin, smollm_path, slots=2, ctx=1024, port=port,
                              log_dir=str(tmp_path / "second")):
                chat = app.query_one(ChatLog)
                await wait_until(pilot, lambda: _said(chat) >= 1, timeout=60, what="the restart said")
                await wait_until(pilot, lambda: "slots 2" in status.render().plain, timeout=10, what="status bar")
                assert _said(chat) == 1, "said once in the chat"
                assert RESTARTED in app.query_one(ServerPane).render().plain
                text = screen_text(app)
                assert "turn lost" in text
                # the lost turn's live state is gone: no "no token for …", no cells, no tail
                assert decode.state == "idle" and decode.waiting_s is None
                assert app.query_one(KVPane).cells == 0
                assert app.query_one(StreamTail).text == ""
                await wait_until(pilot, lambda: "0/2 busy" in app.query_one(ServerPane).render().plain,
                                 timeout=10, what="the pane's 2 slots")
                assert app.here is None or app.here.layout.n_ctx == 2 * 1024  # every slot's KV
                # the next turn works on the new server, and finishes
                turns = len(app.turns)
                t0 = time.monotonic()
                await send(pilot, "Say hello.")
                await wait_until(pilot, lambda: len(app.turns) > turns and not app.turn_running, timeout=60,
                                 what="the next turn")
                assert app.turns[-1].metrics.decode_tokens > 0 and time.monotonic() - t0 < 60
                assert "no token for" not in screen_text(app)
                assert RESTARTED in app.query_one(ServerPane).render().plain  # until another restart
                await pilot.pause(2.5)  # more polls of the same new server: not said again
                assert _said(chat) == 1


def _said(chat) -> int:
    """How many chat lines say the restart."""
    return sum(RESTARTED in getattr(w, "text", "") for w in chat.children)
