"""A llama-server's first token is on screen when it arrives, however slowly the rest of
the reply comes. A slow-loris server that sent the first token whole and then trickled
the next event showed "model: …" for 25-30 s: the bridge held the first decode update
until the next event (a local engine's first update waits one interval; a server turn
starts at its first chunk, so the hold became a wait for the next chunk).

The server is a real socket on 127.0.0.1; the engine is kvtop's ``ServerEngine`` and the
bridge the app's own, so this is the path from the socket to the message the chat pane
draws.
"""

from __future__ import annotations

import json
import threading
import time

from fake_servers import FakeServer, Reply, llama_routes

from kvtop.runner.process.commands import Chat, ChatMessage
from kvtop.runner.server.engine import ServerEngine
from kvtop.runner.settings import Settings
from kvtop.tui.base import messages as msg
from kvtop.tui.events.bridge import TurnBridge

TOKEN = json.dumps({"choices": [{"delta": {"content": "Hello"}}]})


def test_the_first_token_of_a_slow_server_is_posted_when_it_arrives():
    # the first token at once, then "[DONE]" one byte every 0.5 s (7 s)
    slow = Reply(events=[TOKEN, "[DONE]"], event_trickle_s=0.5, trickle_from=1)
    with FakeServer(llama_routes(**{"/v1/chat/completions": slow})) as url:
        engine = ServerEngine(Settings("served.gguf"), url)
        posted: list = []
        bridge = TurnBridge(posted.append, interval=1.0)
        threading.Thread(target=engine.pump, args=(bridge,), daemon=True).start()
        engine.submit(Chat(1, (ChatMessage("user", "hi"),), time.monotonic()))
        t0 = time.monotonic()
        deadline = t0 + 3.0
        while time.monotonic() < deadline and not any(isinstance(m, msg.DecodeUpdate) for m in posted):
            time.sleep(0.02)
        updates = [m for m in posted if isinstance(m, msg.DecodeUpdate)]
        engine.close()
    assert updates and updates[0].text == "Hello", posted
    assert not any(isinstance(m, msg.TurnFinished) for m in posted[:posted.index(updates[0])])
