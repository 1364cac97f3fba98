"""A small stand-in for llama-server on a loopback port, for the unit tests of ``kvtop
load``'s driver: it speaks the endpoints the driver uses (/health, /props, /tokenize,
/completion streamed, /slots, /metrics), remembers every prompt it was sent, counts the
tokens it streamed, and notices a client that goes away. ``reply`` makes it misbehave:
"cut" (2 tokens, then the connection ends without a stop event), "chunked" (2 tokens in
HTTP chunks, then a clean last chunk), "empty" (headers, then the connection ends),
"loading" (503 as llama-server while it loads); ``queue`` sends no headers before a slot
is free (as llama-server does); ``kill()`` ends it as kill -9 would (connections reset,
the port refused). The real server's behaviour
is checked in tests/e2e against llama-server itself."""

from __future__ import annotations

import http.server
import json
import threading
import time


class FakeState:
    def __init__(self, token_s: float = 0.005, slots: int = 4, reply: str = "full", queue: bool = False):
        self.token_s, self.slots, self.reply = token_s, slots, reply
        self.free = threading.Semaphore(slots) if queue else None
        self.dead = False
        self.started = str(time.monotonic_ns())
        self.lock = threading.Lock()
        self.prompts: list[list[int]] = []
        self.busy = 0
        self.generated = 0
        self.disconnects = 0


def make_handler(state: FakeState):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def log_message(self, *args):  # quiet
            pass

        def _json(self, obj, status: int = 200):
            body = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):  # noqa: N802
            if self.path == "/health":
                return self._json({"status": "ok"})
            if self.path == "/props":
                return self._json({"default_generation_settings": {"n_ctx": 1024}, "total_slots": state.slots,
                                   "build_info": "b1-fake", "model_path": ""})
            if self.path == "/v1/models":
                return self._json({"data": [{"id": "fake"}]})
            if self.path == "/slots":
                with state.lock:
                    busy = state.busy
                return self._json([{"id": i, "n_ctx": 1024, "is_processing": i < busy, "n_prompt_tokens": 0}
                                   for i in range(state.slots)])
            if self.path == "/metrics":
                text = (f"llamacpp:tokens_predicted_total {state.generated}\n"
                        f"llamacpp:prompt_tokens_total 0\nllamacpp:requests_deferred 0\n")
                body = text.encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Process-Start-Time-Unix", state.started)  # one value per server
                self.end_headers()
                self.wfile.write(body)
                return
            self._json({"error": {"message": "not found"}}, 404)

        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            if self.path == "/tokenize":
                return self._json({"tokens": [100 + i for i, _ in enumerate(body["content"].split())]})
            if self.path == "/detokenize":
                return self._json({"content": " ".join(f"w{t}" for t in body["tokens"])})
            chat = self.path == "/v1/chat/completions"
            if not chat and self.path != "/completion":
                return self._json({"error": {"message": "not found"}}, 404)
            prompt = body["messages"][-1]["content"].split() if chat else list(body["prompt"])
            if state.reply == "loading":
                return self._json({"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}},
                                  503)
            if state.free is not None:
                state.free.acquire()
            try:
                self._stream(state, body, chat, prompt)
            finally:
                if state.free is not None:
                    state.free.release()

        def _die(self):
            import socket
            import struct

            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            raise ConnectionResetError("killed")

        def _stream(self, state, body, chat, prompt):
            with state.lock:
                state.prompts.append(prompt)
                state.busy += 1
            n, t0 = body["max_tokens" if chat else "n_predict"], time.monotonic()
            if state.reply in ("cut", "chunked", "empty"):
                return self._short(state, chat)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            token = (b'data: {"choices": [{"delta": {"content": "x"}}]}\n\n' if chat else
                     b'data: {"content": "x", "tokens": [7], "stop": false}\n\n')
            try:
                for _ in range(n):
                    time.sleep(state.token_s)
                    if state.dead:
                        self._die()
                    self.wfile.write(token)
                    self.wfile.flush()
                ms = (time.monotonic() - t0) * 1000
                final = {"content": "", "stop": True, "timings": {"prompt_n": len(prompt), "prompt_ms": 1.0,
                                                                  "predicted_n": n, "predicted_ms": ms}}
                if chat:
                    final = {"choices": [{"delta": {}, "finish_reason": "length"}], "timings": final["timings"]}
                self.wfile.write(f"data: {json.dumps(final)}\n\n".encode())
                if chat:
                    self.wfile.write(b"data: [DONE]\n\n")
                with state.lock:
                    state.generated += n
            except (BrokenPipeError, ConnectionResetError):
                with state.lock:
                    state.disconnects += 1
            finally:
                with state.lock:
                    state.busy -= 1

        def _short(self, state, chat):
            token = (b'data: {"choices": [{"delta": {"content": "x"}}]}\n\n' if chat else
                     b'data: {"content": "x", "tokens": [7], "stop": false}\n\n')
            try:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                if state.reply == "chunked":
                    self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for _ in range(0 if state.reply == "empty" else 2):
                    time.sleep(state.token_s)
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(token), token) if state.reply == "chunked" else token)
                if state.reply == "chunked":
                    self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            finally:
                with state.lock:
                    state.busy -= 1

    return Handler


class FakeLlamaServer:
    def __init__(self, token_s: float = 0.005, slots: int = 4, reply: str = "full", queue: bool = False):
        self.state = FakeState(token_s, slots, reply, queue)
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), make_handler(self.state))
        self.httpd.daemon_threads = True
        self.httpd.block_on_close = False  # server_close() would join the handlers (tests/fake_servers.py)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def kill(self) -> None:
        """As kill -9: streams in flight reset, the port refuses connections from now on."""
        self.state.dead = True
        self.httpd.shutdown()
        self.httpd.server_close()

    def __exit__(self, *exc):
        if not self.state.dead:
            self.httpd.shutdown()
            self.httpd.server_close()
