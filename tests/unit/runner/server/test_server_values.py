"""What a server says is checked where it enters: a negative, NaN, infinite or absurd
count is refused with one line naming it on that server, and the number is never on the
snapshot (so never drawn, never in the physics). A large but valid answer (100,000 slots)
is an answer, counted, not "unreachable".

The polls go to a real socket on 127.0.0.1 (``tests/fake_servers.py``).
"""

from __future__ import annotations

import json

import pytest
from fake_servers import FakeServer, Reply, json_reply, llama_routes, slot

from kvtop.runner.server.checks import MAX_CTX, Refused, count
from kvtop.runner.server.http import ServerClient
from kvtop.runner.server.monitor import ServerMonitor, check_metrics, parse_metrics


def poll(**routes):
    with FakeServer(llama_routes(**routes)) as url:
        client = ServerClient(url, deadline_s=5.0)
        try:
            return ServerMonitor(client).poll()
        finally:
            client.close()


@pytest.mark.parametrize("field, value, says", [
    ("n_prompt_tokens", -1_000_000_000, "slot 1 n_prompt_tokens -1,000,000,000 is negative"),
    ("n_ctx", 1e15, "slot 1 n_ctx 1,000,000,000,000,000 is more than any machine holds"),
    ("n_ctx", 1.7e308, "slot 1 n_ctx 1.7e+308 is more than any machine holds"),
    ("n_prompt_tokens_cache", float("nan"), "slot 1 n_prompt_tokens_cache is NaN"),
    ("n_prompt_tokens_processed", float("inf"), "slot 1 n_prompt_tokens_processed inf is more than any machine holds"),
    ("n_ctx", "4096", "slot 1 n_ctx is a str, not a number"),
    ("n_prompt_tokens", 12.5, "slot 1 n_prompt_tokens 12.5 is not a whole number"),
])
def test_a_slot_with_a_hostile_number_refuses_the_answer_in_one_line(field, value, says):
    slots = [slot(0, n_prompt=10), {**slot(1), field: value}]
    s = poll(**{"/slots": Reply(json.dumps(slots).encode())})
    assert s.reachable and s.error is None
    assert s.slots == () and s.slots_note == f"/slots refused: {says}"
    assert s.rates is not None  # /metrics is still read: the rest keeps working


def test_a_decoded_count_below_zero_is_refused_too():
    bad = {**slot(0), "next_token": [{"n_decoded": -7}]}
    s = poll(**{"/slots": json_reply([bad])})
    assert s.slots == () and s.slots_note == "/slots refused: slot 0 n_decoded -7 is negative"


def test_idle_slots_with_task_minus_one_are_fine():
    s = poll()
    assert [sl.id_task for sl in s.slots] == [-1, -1] and s.slots_note is None


def test_hostile_counters_are_refused_and_named_never_shown():
    text = ("llamacpp:prompt_tokens_total -5\nllamacpp:tokens_predicted_total NaN\n"
            "llamacpp:requests_processing 1.7e308\nllamacpp:requests_deferred -3\n")
    s = poll(**{"/metrics": Reply(text.encode(), content_type="text/plain")})
    r = s.rates
    assert (r.prompt_tokens_total, r.gen_tokens_total, r.requests_processing, r.requests_deferred) == (None,) * 4
    assert s.metrics_note == ("/metrics refused: prompt_tokens_total -5 is negative; tokens_predicted_total is NaN; "
                              "requests_processing 1.7e+308 is more than any machine holds; "
                              "requests_deferred -3 is negative")


def test_good_counters_pass_and_others_are_ignored():
    m, note = check_metrics(parse_metrics("llamacpp:requests_deferred 2\nllamacpp:n_busy_slots_per_decode -1\n"
                                          "other_metric -9\n"))
    assert m == {"requests_deferred": 2.0} and note is None


def test_a_hundred_thousand_slots_are_an_answer_counted_not_unreachable():
    one = '{"id": %d, "id_task": -1, "n_ctx": 1024, "is_processing": %s, "n_prompt_tokens": 5, "next_token": []}'
    body = ("[" + ",".join(one % (i, "true" if i % 10 == 0 else "false") for i in range(100_000)) + "]").encode()
    assert len(body) > 8 * 2**20  # over the bound that called it "unreachable"
    s = poll(**{"/slots": Reply(body)})
    assert s.reachable and s.error is None and s.slots_note is None
    assert len(s.slots) == 100_000 and s.busy == 10_000 and s.kv_used == 500_000


def test_count_bounds():
    assert count(4096, "n_ctx", MAX_CTX) == 4096 and count(4096.0, "n_ctx", MAX_CTX) == 4096
    for bad in (True, None, [1], -1, MAX_CTX + 1):
        with pytest.raises(Refused):
            count(bad, "n_ctx", MAX_CTX)


def test_an_openai_style_url_is_told_to_drop_its_path():
    """``http://host:port/v1`` (what OpenAI clients take): llama-server answers /v1/health
    too, so only /props failed, with a bare 404; the line now says what to give."""
    from fake_servers import HEALTH

    from kvtop.runner.server.http import ServerError
    from kvtop.runner.server.props import read_server_info

    with FakeServer({"/v1/health": json_reply(HEALTH)}) as url:
        client = ServerClient(url + "/v1", deadline_s=5.0)
        try:
            with pytest.raises(ServerError) as err:
                read_server_info(client, wait_s=0)
        finally:
            client.close()
    assert "give llama-server's root URL, without /v1" in str(err.value), err.value
