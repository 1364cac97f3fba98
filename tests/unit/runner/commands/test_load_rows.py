"""kvtop load's per-level figures from known requests: percentiles as numpy computes
them, throughput over the level's window, each user's rate from the server's own
timings, and the physics columns beside them."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kvtop.runner.commands.load_rows import FIELDS, build_row, percentile, union_seconds
from kvtop.runner.server.load_driver import RequestResult


def test_percentiles_interpolate_linearly_like_numpy():
    xs = [4.0, 1.0, 3.0, 2.0]
    assert percentile(xs, 50) == pytest.approx(2.5)
    assert percentile(xs, 95) == pytest.approx(3.85)  # numpy.percentile([1,2,3,4], 95)
    assert percentile(xs, 99) == pytest.approx(3.97)
    assert percentile([], 50) is None
    assert percentile([0.7], 99) == 0.7


def test_union_counts_overlapping_time_once():
    assert union_seconds([(0, 2), (1, 3), (5, 6)]) == pytest.approx(4.0)
    assert union_seconds([]) == 0.0


def request(server: int, t_send: float, ttft: float, n: int, gap: float, predicted_ms: float | None = None):
    r = RequestResult(server, t_send)
    r.chunks = [(t_send + ttft + i * gap, 1) for i in range(n)]
    r.t_end = r.chunks[-1][0] + 0.001
    r.ok = True
    r.prompt_n, r.prompt_ms = 32, ttft * 1000 / 2
    r.predicted_n, r.predicted_ms = n, predicted_ms if predicted_ms is not None else (n - 1) * gap * 1000
    return r


def watch(urls=("http://a",), generated=(40,), deferred=(0,), kv=(100,), cells=(4096,), cpu=(0.1, 0.2)):
    return SimpleNamespace(urls=list(urls), generated=lambda i: generated[i], max_deferred=list(deferred),
                           max_kv=list(kv), cells_total=list(cells), cpu=lambda: cpu)


def test_a_level_row_from_its_requests():
    results = [request(0, 0.0, 0.1, 10, 0.05), request(0, 0.0, 0.3, 10, 0.1), request(0, 1.0, 0.2, 10, 0.05)]
    failed = RequestResult(0, 0.5, 0.6, error="HTTP 500")
    cancelled = RequestResult(0, 0.5, 0.6, cancelled=True)
    run = SimpleNamespace(users=2, rate=None, results=results + [failed, cancelled], t_start=0.0, t_end=2.0,
                          watch=watch(generated=(30,)))
    row = build_row(run, None)
    assert list(row) == list(FIELDS)
    assert (row["requests"], row["completed"], row["failed"]) == (4, 3, 1)  # the cancelled one is not counted
    assert row["generated_tokens"] == 30 and row["server_generated_tokens"] == 30
    window = max(r.t_end for r in results) - 0.0
    assert row["window_s"] == pytest.approx(window)
    assert row["gen_tok_s"] == pytest.approx(30 / window)
    # the median of the server's rates: 10 tokens in 0.45 s, 0.9 s, 0.45 s
    assert row["per_user_gen_tok_s"] == pytest.approx(10 / 0.45)
    assert row["ttft_p50_s"] == pytest.approx(0.2)
    assert row["ttft_p50_s"] <= row["ttft_p95_s"] <= row["ttft_p99_s"] <= 0.3
    assert row["itl_p50_s"] <= row["itl_p95_s"] <= row["itl_p99_s"] == pytest.approx(0.1)
    assert row["server"] == "http://a" and row["users"] == 2
    assert (row["kvtop_cpu"], row["others_cpu"], row["client_saturated"]) == (0.1, 0.2, False)
    assert row["batched_roof_tok_s"] is None  # no physics given


def test_fleet_rows_split_users_and_requests_by_server():
    results = [request(0, 0.0, 0.1, 10, 0.05), request(1, 0.0, 0.1, 20, 0.05), request(0, 0.0, 0.1, 10, 0.05)]
    run = SimpleNamespace(users=3, rate=None, results=results, t_start=0.0, t_end=2.0,
                          watch=watch(("http://a", "http://b"), (20, 20), (0, 1), (50, 60), (4096, 4096)))
    a, b, both = build_row(run, 0, None, 2), build_row(run, 1, None, 2), build_row(run, None, None, 2)
    assert (a["server"], a["users"], a["generated_tokens"]) == ("http://a", 2, 20)
    assert (b["server"], b["users"], b["generated_tokens"]) == ("http://b", 1, 20)
    assert (both["server"], both["users"], both["generated_tokens"]) == ("all", 3, 40)
    assert both["server_generated_tokens"] == 40 and both["deferred"] == 1 and both["kv_cells_used"] == 110


def test_physics_columns_take_each_levels_users_as_the_batch():
    from kvtop.runner.commands.load_physics import LoadPhysics

    phys = LoadPhysics(None, None, 10.0, 1.0, 4, 64, 16, "")
    seen = []
    phys.roofs = lambda b: (seen.append(b) or 10.0 * b, 100.0)
    run = SimpleNamespace(users=8, rate=None, results=[request(0, 0.0, 0.1, 10, 0.05)], t_start=0.0, t_end=1.0,
                          watch=watch(kv=(400,), cells=(1000,)))
    row = build_row(run, None, phys)
    assert seen == [8] and row["batched_roof_tok_s"] == 80.0 and row["compute_roof_tok_s"] == 100.0
    assert row["more_conversations_fit"] == (1000 - 400) // (64 + 16)


def test_the_roof_caps_the_batch_at_the_servers_slots(smollm_shaped):
    from kvtop.runner.commands.load_physics import LoadPhysics
    from kvtop.runner.model.inspect import load_facts
    from kvtop.runner.physics.kv_bytes import kv_layout

    facts = load_facts(smollm_shaped)
    phys = LoadPhysics(facts, kv_layout(facts, 1024), 20.0, 0.5, 4, 64, 16, "")
    one, four, eight = phys.roofs(1)[0], phys.roofs(4)[0], phys.roofs(8)[0]
    assert one < four == eight  # batching shares the weights; a fifth user waits for a slot
    assert four < 4 * one


def test_kv_cells_are_never_fewer_than_one_request_held():
    """A level shorter than the 0.5 s between /slots polls saw no busy slot: the row said
    0 cells for a completed 32 + 16 token request (a new user's trial)."""
    r = request(0, 0.0, 0.1, 16, 0.01)  # 32 prompt tokens (the server's timings), 16 generated
    unseen = SimpleNamespace(users=1, rate=None, results=[r], t_start=0.0, t_end=0.3, watch=watch(kv=(0,)))
    assert build_row(unseen, None)["kv_cells_used"] == 32 + 16
    seen = SimpleNamespace(users=1, rate=None, results=[r], t_start=0.0, t_end=0.3, watch=watch(kv=(70,)))
    assert build_row(seen, None)["kv_cells_used"] == 70  # the polls saw more (another slot too)
