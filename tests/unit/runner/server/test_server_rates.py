"""Server rates while a reply is being made: llama-server adds a task's tokens to its
counters only when the reply (or the prompt) ends, so the server pane read "gen 0.0
tok/s" through a whole reply and then a burst. The monitor adds what /slots shows in
flight. These are the numbers a real llama-server gave for one 2,690-token prompt and
a 60-token reply (polled every 0.25 s)."""

from __future__ import annotations

import pytest

from kvtop.runner.server.monitor import ServerMonitor


class FakeClient:
    url = "http://127.0.0.1:1"

    def __init__(self):
        self.slots: list[dict] = []
        self.metrics = ""

    def get_json(self, path):
        return self.slots if path == "/slots" else {}

    def get_text(self, path):
        return self.metrics

    def get_text_and_header(self, path, header):
        return self.metrics, None


def slot(processing, task, processed, decoded):
    return {"id": 0, "n_ctx": 4096, "is_processing": processing, "id_task": task, "n_prompt_tokens": 2690,
            "n_prompt_tokens_processed": processed, "n_prompt_tokens_cache": 0,
            "next_token": [{"n_decoded": decoded}]}


def poll(mon, client, t, monkeypatch, slots, prompt_total, gen_total):
    client.slots = slots
    client.metrics = (f"llamacpp:prompt_tokens_total {prompt_total}\n"
                      f"llamacpp:tokens_predicted_total {gen_total}\n")
    monkeypatch.setattr("kvtop.runner.server.monitor.time.monotonic", lambda: t)
    return mon.poll().rates


def test_generated_tokens_count_while_the_reply_is_made_not_in_a_burst_at_its_end(monkeypatch):
    client = FakeClient()
    mon = ServerMonitor(client)
    poll(mon, client, 0.0, monkeypatch, [slot(True, 3, 2048, 0)], 0, 0)
    # the prompt is computed (the counter takes it) and 9 tokens are made
    r = poll(mon, client, 1.0, monkeypatch, [slot(True, 3, 2690, 9)], 2690, 0)
    assert r.prompt_tok_s == pytest.approx(642) and r.gen_tok_s == pytest.approx(9)
    # decoding, the counters unchanged: the rate is what the slot made
    r = poll(mon, client, 1.5, monkeypatch, [slot(True, 3, 2690, 41)], 2690, 0)
    assert r.gen_tok_s == pytest.approx(64) and r.prompt_tok_s == 0
    # the reply ends at 60: the counter takes all 60, the 41 seen before are not counted twice
    r = poll(mon, client, 2.0, monkeypatch, [slot(False, 3, 2690, 60)], 2690, 60)
    assert r.gen_tok_s == pytest.approx(38)
    r = poll(mon, client, 3.0, monkeypatch, [slot(False, 3, 2690, 60)], 2690, 60)
    assert r.gen_tok_s == 0 and r.prompt_tok_s == 0


def test_a_task_that_started_and_ended_between_two_polls_is_counted_once(monkeypatch):
    client = FakeClient()
    mon = ServerMonitor(client)
    poll(mon, client, 0.0, monkeypatch, [slot(True, 3, 100, 20)], 100, 0)
    # task 3 ended (30 tokens), task 4 came and went (50 tokens): 10 + 50 in this second
    r = poll(mon, client, 1.0, monkeypatch, [slot(False, 4, 100, 50)], 200, 80)
    assert r.gen_tok_s == pytest.approx(60) and r.prompt_tok_s == pytest.approx(100)


def test_without_slots_the_counters_alone_give_the_rates(monkeypatch):
    client = FakeClient()

    def no_slots(path):
        from kvtop.runner.server.http import ServerError

        if path == "/slots":
            raise ServerError("not found", 501)
        return {}

    client.get_json = no_slots
    mon = ServerMonitor(client)
    poll(mon, client, 0.0, monkeypatch, [], 0, 0)
    r = poll(mon, client, 2.0, monkeypatch, [], 100, 40)
    assert r.gen_tok_s == pytest.approx(20) and r.prompt_tok_s == pytest.approx(50)
