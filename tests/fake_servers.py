"""Misbehaving HTTP servers on 127.0.0.1, for the faults a real llama-server (or a proxy in
front of one) can show: a trickle of one byte every few seconds, a hang after the request,
a blackhole that accepts and never reads, JSON nested 100,000 deep, a huge body, hostile
numbers, a redirect, a slow-loris stream.

A ``FakeServer`` runs in a thread (``with FakeServer(routes) as url``); ``routes`` maps a
path to a ``Reply``. Run as a script it serves llama-servers in a process of its own (for
kvtop run as a user runs it, and the idle-cost measurement), one URL a line:
``python tests/fake_servers.py 50xgood blackhole trickle`` (kinds: ``hostile_routes``).
"""

from __future__ import annotations

import json
import socket
import socketserver
import threading
import time
from dataclasses import dataclass, field


@dataclass
class Reply:
    """What a path answers. ``trickle_s``: the whole answer (status line and headers
    included) goes out one byte per ``trickle_s``; ``hang``: read the request, never answer;
    ``events``: a stream of server-sent events, ``event_gap_s`` apart, each event's bytes
    ``event_trickle_s`` apart (0: written at once) from event ``trickle_from`` on."""

    body: bytes = b"{}"
    status: int = 200
    content_type: str = "application/json"
    headers: dict = field(default_factory=dict)
    trickle_s: float = 0.0
    hang: bool = False
    events: list | None = None
    event_gap_s: float = 0.0
    event_trickle_s: float = 0.0
    trickle_from: int = 0
    chunked: bool = False  # events in HTTP chunks, as llama-server (cpp-httplib) sends them


def json_reply(obj, **kw) -> Reply:
    return Reply(json.dumps(obj).encode(), **kw)


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


HEALTH = {"status": "ok"}


def props(n_ctx=1024, slots=2, model="/models/served.gguf") -> dict:
    return {"default_generation_settings": {"n_ctx": n_ctx}, "total_slots": slots, "model_path": model,
            "build_info": "b1-fake", "chat_template": "{{ messages }}"}


def slot(i: int, n_ctx=1024, processing=False, n_prompt=0, decoded=0, **extra) -> dict:
    return {"id": i, "id_task": -1, "n_ctx": n_ctx, "is_processing": processing, "n_prompt_tokens": n_prompt,
            "n_prompt_tokens_processed": n_prompt, "n_prompt_tokens_cache": 0,
            "next_token": [{"n_decoded": decoded}], **extra}


METRICS = ("# HELP llamacpp:prompt_tokens_total x\nllamacpp:prompt_tokens_total 100\n"
           "llamacpp:tokens_predicted_total 50\nllamacpp:requests_processing 0\nllamacpp:requests_deferred 0\n")


def llama_routes(n_slots: int = 2, **overrides) -> dict:
    """A well-behaved idle llama-server's answers; ``overrides`` replace some paths."""
    routes = {
        "/health": json_reply(HEALTH),
        "/props": json_reply(props(slots=n_slots)),
        "/v1/models": json_reply({"data": [{"id": "served", "meta": {"n_params": 1000, "size": 2000}}]}),
        "/slots": json_reply([slot(i) for i in range(n_slots)]),
        "/metrics": Reply(METRICS.encode(), content_type="text/plain"),
    }
    routes.update(overrides)
    return routes


class _Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        server = self.server
        sock = self.request
        if server.blackhole:
            server.stopped.wait()
            return
        sock.settimeout(30)
        try:
            while not server.stopped.is_set():
                path = self._read_request(sock)
                if path is None:
                    return
                reply = server.routes.get(path.split("?")[0], Reply(b'{"error": "not found"}', 404))
                server.requests.append(path)
                if not self._answer(sock, reply):
                    return
        except OSError:
            return

    @staticmethod
    def _read_request(sock) -> str | None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                return None
            data += chunk
        head, rest = data.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
        while len(rest) < length:
            chunk = sock.recv(65536)
            if not chunk:
                return None
            rest += chunk
        return lines[0].split(" ")[1]

    def _answer(self, sock, reply: Reply) -> bool:
        """Writes the reply; whether the connection may serve another request."""
        stopped = self.server.stopped
        if reply.hang:
            stopped.wait()
            return False
        reason = {200: "OK", 301: "Moved", 302: "Found", 404: "Not Found"}.get(reply.status, "X")
        head = [f"HTTP/1.1 {reply.status} {reason}", f"Content-Type: {reply.content_type}"]
        head += [f"{k}: {v}" for k, v in reply.headers.items()]
        if reply.events is not None:
            head += ["Transfer-Encoding: chunked"] if reply.chunked else []
            sock.sendall(("\r\n".join(head + ["Connection: close", "", ""])).encode())
            for i, data in enumerate(reply.events):
                if i and stopped.wait(reply.event_gap_s):
                    return False
                line = f"data: {data}\n\n".encode()
                if reply.chunked:
                    line = f"{len(line):x}\r\n".encode() + line + b"\r\n"
                if reply.event_trickle_s and i >= reply.trickle_from:
                    for b in line:
                        sock.sendall(bytes([b]))
                        if stopped.wait(reply.event_trickle_s):
                            return False
                else:
                    sock.sendall(line)
            if reply.chunked:
                sock.sendall(b"0\r\n\r\n")
            return False
        raw = ("\r\n".join(head + [f"Content-Length: {len(reply.body)}", "", ""])).encode() + reply.body
        if reply.trickle_s:
            for b in raw:
                sock.sendall(bytes([b]))
                if stopped.wait(reply.trickle_s):
                    return False
        else:
            sock.sendall(raw)
        return True


class FakeServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    # server_close() would join every handler thread, daemon or not (socketserver's
    # block_on_close): a stream still writing its 2,000 events held a test's teardown for
    # up to 117 s. The handlers die with the process.
    block_on_close = False
    allow_reuse_address = True

    def __init__(self, routes: dict | None = None, blackhole: bool = False):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.routes = llama_routes() if routes is None else routes
        self.blackhole = blackhole
        self.stopped = threading.Event()
        self.requests: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def __enter__(self) -> str:
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
        return self.url

    def __exit__(self, *exc) -> None:
        self.stopped.set()
        self.shutdown()
        self.server_close()


def silent_listener() -> socket.socket:
    """A port that accepts connections (the kernel's backlog) and never reads them."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(64)
    return s


def hostile_routes(kind: str) -> dict | None:
    """A llama-server with one fault, by name (None: a blackhole)."""
    slow_text = Reply(METRICS.encode(), content_type="text/plain", trickle_s=2.0)
    bad_slots = [slot(0, n_ctx=int(1e15)), slot(1, n_prompt=-1_000_000_000)]
    kinds = {
        "good": {},
        "trickle": {"/metrics": slow_text, "/health": Reply(b'{"status": "ok"}', trickle_s=2.0)},
        "slowmetrics": {"/metrics": slow_text},
        "hang": {"/slots": Reply(hang=True), "/metrics": Reply(hang=True)},
        "nested": {"/health": Reply(nested(100_000)), "/props": Reply(nested(100_000))},
        "nestedprops": {"/props": Reply(nested(100_000))},
        "hostile": {"/slots": json_reply(bad_slots), "/metrics": Reply(
            METRICS.replace("requests_deferred 0", "requests_deferred -3").encode(), content_type="text/plain")},
    }
    if kind == "blackhole":
        return None
    if kind == "many":  # 100,000 slots, about 11 MB
        return llama_routes(**{"/slots": json_reply([slot(i) for i in range(100_000)])})
    return llama_routes(**kinds[kind])


def write_polls(servers: list, path: str, every_s: float = 0.1) -> None:
    """Forever: how many times each server has answered /metrics (one poll of kvtop's each),
    one number per server on one line, replaced in ``path`` at once."""
    import os

    while True:
        with open(path + ".tmp", "w", encoding="utf-8") as fh:
            fh.write(" ".join(str(srv.requests.count("/metrics")) for srv in servers))
        os.replace(path + ".tmp", path)
        time.sleep(every_s)


if __name__ == "__main__":  # python tests/fake_servers.py KIND… (good, blackhole, trickle, …); prints URLs
    import os
    import sys

    servers = []
    for arg in sys.argv[1:]:
        count_, _, kind = arg.rpartition("x") if "x" in arg and arg.split("x")[0].isdigit() else ("1", "", arg)
        for _ in range(int(count_)):
            routes = hostile_routes(kind)
            servers.append(FakeServer(routes, blackhole=routes is None))
    for srv in servers:
        srv.__enter__()
        print(srv.url, flush=True)
    if os.environ.get("FAKES_POLLS"):  # a file for the test to read the polls from (write_polls)
        threading.Thread(target=write_polls, args=(servers, os.environ["FAKES_POLLS"]), daemon=True).start()
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
