"""A llama-server that restarts is a new server. Before, after a restart with ``-np 2``
(was 4) kvtop kept "slots 4" and nothing said the server came back. These feed the
monitor llama-server's own answers (recorded from the vendored build: /props, /slots,
/metrics, trimmed to the fields kvtop reads) through a restart and check that it is said
once, with what changed, and that a network blip or a busy server is not a restart."""

from __future__ import annotations

import pytest

from kvtop.runner.server.http import ServerError
from kvtop.runner.server.identity import RestartWatch, ServerIdentity
from kvtop.runner.server.monitor import ServerMonitor

BUILD = "b1-unknown"  # what the vendored llama.cpp, built outside git, answers


def props(slots: int, n_ctx: int, model: str = "/models/SmolLM2-135M-Instruct-Q8_0.gguf", build: str = BUILD):
    return {"default_generation_settings": {"params": {"n_predict": -1}, "n_ctx": n_ctx}, "total_slots": slots,
            "model_alias": model.rsplit("/", 1)[-1], "model_path": model, "build_info": build,
            "is_sleeping": False, "chat_template": "{{ messages }}"}


def slot(i: int, n_ctx: int, task: int | None = None, tokens: int = 0, processing: bool = False) -> dict:
    s = {"id": i, "n_ctx": n_ctx, "speculative": False, "is_processing": processing}
    if task is not None:  # a slot that never ran a task has no id_task
        s.update({"id_task": task, "n_prompt_tokens": tokens, "n_prompt_tokens_processed": tokens,
                  "n_prompt_tokens_cache": 0, "next_token": [{"has_next_token": False, "n_decoded": 8}]})
    return s


def metrics(prompt: int, gen: int) -> str:
    return ("# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.\n"
            "# TYPE llamacpp:prompt_tokens_total counter\n"
            f"llamacpp:prompt_tokens_total {prompt}\n"
            f"llamacpp:tokens_predicted_total {gen}\n"
            "llamacpp:requests_processing 0\nllamacpp:requests_deferred 0\n")


class Server:
    """One llama-server's answers, changed by the test as the server would change them."""

    url = "http://127.0.0.1:8080"

    def __init__(self, slots: int = 4, n_ctx: int = 1024, **kw):
        self.up, self.loading = True, False
        self.start(slots, n_ctx, **kw)
        self.props_reads = 0

    def start(self, slots: int, n_ctx: int, **kw) -> None:
        """A (new) process: empty slots, counters at 0, its own start on /metrics (the
        vendored build's Process-Start-Time-Unix: the monotonic clock's µs at start)."""
        self.props = props(slots, n_ctx, **kw)
        self.started = str(int(getattr(self, "started", "12001830957")) + 2_919_967)
        self.slots = [slot(i, n_ctx) for i in range(slots)]
        self.totals = (0, 0)

    def work(self, task: int, prompt: int, gen: int) -> None:
        """A request ran on slot 0: its task id, and the counters grow."""
        self.slots[0] = slot(0, self.slots[0]["n_ctx"], task, prompt + gen)
        self.totals = (self.totals[0] + prompt, self.totals[1] + gen)

    def _answer(self, path: str):
        if not self.up:
            raise ServerError(f"cannot reach {self.url}: connection refused or no route (is llama-server running?)")
        if self.loading:  # llama-server answers 503 on every endpoint while it loads the model
            raise ServerError(f"{path} answered HTTP 503: Loading model", 503)
        if path == "/props":
            self.props_reads += 1
            return self.props
        return self.slots if path == "/slots" else metrics(*self.totals)

    def get_json(self, path: str):
        return self._answer(path)

    def get_text(self, path: str):
        return self._answer(path)

    def get_text_and_header(self, path: str, header: str):
        text = self._answer(path)
        return text, self.started if path == "/metrics" and header == "Process-Start-Time-Unix" else None


def watched(server: Server):
    mon = ServerMonitor(server)
    watch = RestartWatch(lambda: server.get_json("/props"))

    def poll():
        return watch.observe(mon.poll())

    return watch, poll


def test_a_restart_with_fewer_slots_is_said_once_with_what_changed():
    srv = Server(slots=4, n_ctx=1024)
    watch, poll = watched(srv)
    assert poll() is None
    srv.work(task=5, prompt=40, gen=8)
    assert poll() is None
    srv.start(slots=2, n_ctx=1024)  # restarted between two polls: no gap seen
    r = poll()
    assert r is not None
    assert r.line() == "llama-server restarted: now 2 slots, n_ctx 1,024/slot (was 4 slots)"
    assert watch.identity.total_slots == 2
    assert poll() is None and poll() is None  # said once


def test_a_restart_seen_through_a_gap_and_the_model_loading_names_the_new_model_and_context():
    srv = Server(slots=4, n_ctx=1024)
    _, poll = watched(srv)
    poll()
    srv.up = False
    assert poll() is None and poll() is None
    srv.up, srv.loading = True, True
    assert poll() is None  # loading: not answering yet
    srv.loading = False
    srv.start(slots=4, n_ctx=4096, model="/models/gemma-3-1b-it-Q4_K_M.gguf")
    r = poll()
    assert r.changed == ("model", "n_ctx")
    assert r.line() == ("llama-server restarted: now model gemma-3-1b-it-Q4_K_M.gguf, 4 slots, n_ctx 4,096/slot "
                        "(was model SmolLM2-135M-Instruct-Q8_0.gguf, n_ctx 1,024/slot)")


def test_a_restart_with_the_same_settings_shows_in_the_counters_starting_over():
    srv = Server(slots=2, n_ctx=2048)
    _, poll = watched(srv)
    poll()
    srv.work(task=12, prompt=300, gen=40)
    assert poll() is None
    srv.up = False
    poll()
    srv.up = True
    srv.start(slots=2, n_ctx=2048)
    r = poll()
    assert r is not None and r.changed == ()
    assert r.line() == ("llama-server restarted: now 2 slots, n_ctx 2,048/slot "
                        "(same settings; its token counters started over)")


def test_task_ids_going_back_are_a_restart_even_when_the_counters_are_not_read():
    srv = Server(slots=2, n_ctx=2048)
    _, poll = watched(srv)
    srv.work(task=90, prompt=10, gen=1)
    poll()
    srv.start(slots=2, n_ctx=2048)
    srv.work(task=0, prompt=10, gen=1)  # the new process's first task, the counters equal to the old ones
    srv.totals = (10, 1)
    r = poll()
    assert r is not None and "task ids started over" in r.line()


def test_a_busy_server_and_a_network_blip_are_not_restarts_and_props_is_read_only_after_a_sign():
    srv = Server(slots=4, n_ctx=1024)
    _, poll = watched(srv)
    poll()
    reads = srv.props_reads  # at the first answer (the monitor reads it once for the model's name too)
    for task in range(1, 30):
        srv.work(task=task, prompt=100, gen=20)
        assert poll() is None
    assert srv.props_reads == reads  # not every poll: /props carries the chat template
    srv.up = False
    poll()
    srv.up = True  # back, the same process: its counters went on
    srv.work(task=31, prompt=100, gen=20)
    assert poll() is None
    assert srv.props_reads == reads + 1  # read again after the gap, the same answers


def test_props_that_do_not_answer_after_a_restart_leave_what_slots_shows():
    srv = Server(slots=4, n_ctx=1024)
    watch, poll = watched(srv)
    poll()
    srv.start(slots=2, n_ctx=512)
    srv.props = "<html>proxy error</html>"
    r = poll()
    assert r.line() == "llama-server restarted: now 2 slots, n_ctx 512/slot (was 4 slots, n_ctx 1,024/slot)"


@pytest.mark.parametrize("answer", [
    {"default_generation_settings": {"n_ctx": 1e15}, "total_slots": -3, "model_path": 7, "build_info": ["x"]},
    {"default_generation_settings": [], "total_slots": True, "model_path": "", "build_info": ""},
    {"default_generation_settings": {"n_ctx": float("nan")}, "total_slots": float("inf")},
    "not a dict", None, [1, 2],
])
def test_hostile_props_give_unknowns_never_an_error_or_an_absurd_number(answer):
    i = ServerIdentity.from_props(answer)
    assert i is None or (i.n_ctx is None and i.total_slots is None and i.model is None and i.build_info is None)


def test_a_model_path_with_markup_and_newlines_becomes_one_plain_line():
    i = ServerIdentity.from_props(props(1, 512, model="C:\\models\\[bold]evil\n.gguf"))
    assert i.model == "[bold]evil .gguf" and "\n" not in i.model


def test_a_restart_with_the_same_settings_and_no_traffic_is_seen_at_the_next_poll():
    """Counters at 0 both sides, no task ids, the same /props and no gap between two
    polls: only /metrics' Process-Start-Time-Unix header (one value per process) shows it."""
    srv = Server(slots=2, n_ctx=2048)
    _, poll = watched(srv)
    assert poll() is None and poll() is None  # the same process: the same start
    srv.start(slots=2, n_ctx=2048)
    r = poll()
    assert r is not None and r.changed == ()
    assert r.line() == "llama-server restarted: now 2 slots, n_ctx 2,048/slot (same settings; it started again)"
    assert poll() is None


def test_a_server_that_sends_no_start_header_is_watched_as_before():
    srv = Server(slots=2, n_ctx=2048)
    srv.get_text_and_header = lambda path, header: (srv.get_text(path), None)
    _, poll = watched(srv)
    poll()
    srv.start(slots=2, n_ctx=2048)
    assert poll() is None  # nothing to tell it by (an older llama-server, a proxy that drops headers)
