"""A llama-server that restarts is a new server, on screen. After a restart with ``-np 2``
(was 4) the status bar kept "slots 4", nothing said the server came back, the decode pane
counted "no token for 2m13s" into the next turn and the stream tail kept the lost reply.

The server here is a real socket on 127.0.0.1 answering as llama-server does (the real
one is in tests/e2e/test_server_restart.py); it "restarts" by answering as a new process:
two slots, counters from 0. Its old stream goes on, as one through a proxy that did not
notice would: kvtop ends that turn itself."""

from __future__ import annotations

import json
import time

from fake_servers import FakeServer, Reply, llama_routes
from helpers import make_app, screen_text, send, wait_until

from kvtop.runner.server.engine import ServerEngine
from kvtop.runner.settings import Settings
from kvtop.tui.panes.chat import ChatLog, StreamTail
from kvtop.tui.panes.decode import DecodePane
from kvtop.tui.panes.kv import KVPane
from kvtop.tui.panes.server import ServerPane
from kvtop.tui.panes.status import StatusBar

TOKEN = json.dumps({"choices": [{"delta": {"content": " wave"}}]})
RESTARTED = "llama-server restarted: now 2 slots, n_ctx 1,024/slot (was 4 slots)"
FRESH_METRICS = ("llamacpp:prompt_tokens_total 0\nllamacpp:tokens_predicted_total 0\n"
                 "llamacpp:requests_processing 0\nllamacpp:requests_deferred 0\n")


def said(chat) -> int:
    return sum(RESTARTED in getattr(w, "text", "") for w in chat.children)


async def test_a_server_back_with_two_slots_is_said_once_and_the_lost_turn_leaves_no_live_state(tmp_path,
                                                                                              smollm_shaped):
    endless = Reply(events=[TOKEN] * 2000, event_gap_s=0.02)  # 40 s of reply: still streaming at the restart
    server = FakeServer(llama_routes(4, **{"/v1/chat/completions": endless}))
    with server as url:
        app = make_app(Settings(smollm_shaped, n_ctx=1024, n_threads=2), lambda s: ServerEngine(s, url), tmp_path,
                       servers=(url,), live_system=False, write_transcript=False)
        async with app.run_test(size=(120, 40)) as pilot:
            status, pane = app.query_one(StatusBar), app.query_one(ServerPane)
            await wait_until(pilot, lambda: app.loaded is not None and pane.snapshot is not None, timeout=10,
                             what="attached and polled")
            assert "slots 4" in status.render().plain
            await send(pilot, "Tell me about the sea.")
            decode = app.query_one(DecodePane)
            await wait_until(pilot, lambda: decode.state == "decoding", timeout=10, what="decoding")
            server.routes = llama_routes(2, **{"/metrics": Reply(FRESH_METRICS.encode(), content_type="text/plain"),
                                               "/v1/chat/completions": Reply(events=[TOKEN, "[DONE]"])})
            chat = app.query_one(ChatLog)
            await wait_until(pilot, lambda: said(chat) == 1, timeout=10, what="the restart said in the chat")
            await wait_until(pilot, lambda: "slots 2" in status.render().plain, timeout=10, what="the status bar")
            assert "n_ctx 1,024/slot" in status.render().plain
            assert RESTARTED in pane.render().plain
            await wait_until(pilot, lambda: "0/2 busy" in pane.render().plain, timeout=10, what="the pane's 2 slots")
            # the lost turn: said under its reply, and none of its live state is left
            assert any(getattr(w, "footer", "") == "turn lost: the server restarted" for w in chat.children)
            assert not app.turn_running
            assert decode.state == "idle" and decode.waiting_s is None
            assert app.query_one(KVPane).cells == 0
            assert app.query_one(StreamTail).text == ""
            # the next turn goes to the new server and finishes
            await send(pilot, "Hi")
            await wait_until(pilot, lambda: app.turns and not app.turn_running, timeout=10, what="the next turn")
            assert app.turns[-1].user == "Hi" and chat.children[-1].text.strip() == "wave"
            await pilot.pause(2.5)  # more polls of the same new server: not said again
            assert said(chat) == 1


async def test_a_turn_the_server_lost_stops_counting_no_token_and_keeps_its_reply_in_the_chat(tmp_path,
                                                                                             smollm_shaped):
    """The server went away mid-reply (here: it says so in the stream): the decode pane
    said "no token for 2m13s" until, and into, the next turn; the tail kept the reply."""
    lost = Reply(events=[TOKEN] * 12 + [json.dumps({"error": {"message": "the server went away"}})],
                 event_gap_s=0.05)
    with FakeServer(llama_routes(2, **{"/v1/chat/completions": lost})) as url:
        app = make_app(Settings(smollm_shaped, n_ctx=1024, n_threads=2), lambda s: ServerEngine(s, url), tmp_path,
                       servers=(url,), live_system=False, write_transcript=False)
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_until(pilot, lambda: app.loaded is not None, timeout=10, what="attached")
            await send(pilot, "Tell me about the sea.")
            chat = app.query_one(ChatLog)
            await wait_until(pilot, lambda: "turn lost" in getattr(chat.children[-1], "footer", ""), timeout=10,
                             what="the turn lost")
            decode = app.query_one(DecodePane)
            # the once-a-second sample (tui/turn/cpu_watch.py), as it would run past the 3 s
            # after which a decoding turn says "no token for …". With live_system=False the app
            # takes no samples: the fixed 3.5 s wait here before never called it
            after = max(3.0, 3 * app.refresh_s)
            decode.note_waiting(time.monotonic() + after + 0.5, after)
            assert decode.waiting_s is None and decode.state == "lost"
            while not decode.display:  # at 120x40 with --server the Decode pane is on page 2
                await pilot.press("f6")
                await pilot.pause(0.2)
            assert "until lost" in screen_text(app) and "no token for" not in screen_text(app)
            assert app.query_one(StreamTail).text == ""
            assert chat.children[-1].text.count("wave") == 12  # the reply so far, whole


async def test_a_restart_seen_before_the_model_is_inspected_does_not_read_the_engine_twice(tmp_path, smollm_shaped,
                                                                                          monkeypatch):
    """On a busy machine the GGUF header and the CPU probe can take longer than the server
    takes to restart: the new engine must then be started once, by the inspection's end,
    not also by the restart (a second reader of one engine is "the engine died")."""
    import threading

    import kvtop.runner.model.inspect as inspect

    real = inspect.load_facts
    inspected = threading.Event()  # the inspection ends once the restart was seen (a fixed 4 s sleep before)
    monkeypatch.setattr(inspect, "load_facts", lambda *a, **k: (inspected.wait(30), real(*a, **k))[1])
    server = FakeServer(llama_routes(4))
    with server as url:
        app = make_app(Settings(smollm_shaped, n_ctx=1024, n_threads=2), lambda s: ServerEngine(s, url), tmp_path,
                       servers=(url,), live_system=False, write_transcript=False)
        async with app.run_test(size=(120, 40)) as pilot:
            pane = app.query_one(ServerPane)
            await wait_until(pilot, lambda: pane.snapshot is not None, timeout=10, what="polled")
            assert app.loaded is None  # still inspecting
            server.routes = llama_routes(2, **{"/metrics": Reply(FRESH_METRICS.encode(), content_type="text/plain"),
                                               "/v1/chat/completions": Reply(events=[TOKEN, "[DONE]"])})
            chat = app.query_one(ChatLog)
            await wait_until(pilot, lambda: said(chat) == 1, timeout=10, what="the restart said")
            assert app.loaded is None  # seen before the inspection ended
            inspected.set()
            await wait_until(pilot, lambda: app.loaded is not None and app.facts is not None, timeout=15,
                             what="the new server attached and the model inspected")
            await pilot.pause(1.0)
            assert "slots 2" in app.query_one(StatusBar).render().plain
            assert len(app.screen_stack) == 1, "no error dialog"
            assert "died" not in screen_text(app) and app.loaded.total_slots == 2
            await send(pilot, "Hi")
            await wait_until(pilot, lambda: app.turns and not app.turn_running, timeout=10, what="a turn")
