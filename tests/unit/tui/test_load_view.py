"""kvtop load's live view: the chart's plan as numbers (the curve, the roof over it, the
knee against the targets) and the app itself on the stand-in server: rows arrive level
by level, Esc stops the load with no request left in flight."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

from fake_llama_server import FakeLlamaServer

from runner.commands.load_rows import FIELDS
from tui.panes.load import plan_load_chart


def row(users, gen, per_user, ttft95, roof=None, server="http://a"):
    r = dict.fromkeys(FIELDS)
    r.update(server=server, users=users, gen_tok_s=gen, per_user_gen_tok_s=per_user, ttft_p95_s=ttft95,
             batched_roof_tok_s=roof, completed=2, failed=0)
    return r


def test_the_plan_draws_the_curve_under_its_roof_and_marks_the_knee():
    rows = [row(1, 10.0, 10.0, 0.2, 40.0), row(2, 18.0, 9.0, 0.3, 70.0), row(4, 28.0, 7.0, 0.9, 110.0)]
    plan = plan_load_chart(rows, 0.5, None)
    assert plan.xs == [1.0, 2.0, 4.0] and plan.measured == [10.0, 18.0, 28.0] and plan.per_user == [10.0, 9.0, 7.0]
    assert plan.roof == [40.0, 70.0, 110.0] and plan.y_top >= 110.0
    assert plan.knee == 2.0
    assert plan_load_chart(rows, None, None).knee is None


def test_a_fleet_plots_its_all_rows_and_no_roof_when_one_is_unknown():
    rows = [row(1, 5.0, 5.0, 0.2, 30.0, "http://a"), row(1, 5.0, 5.0, 0.2, 30.0, "http://b"),
            row(2, 10.0, 5.0, 0.2, None, "all")]
    plan = plan_load_chart(rows, None, None)
    assert plan.xs == [2.0] and plan.measured == [10.0] and plan.roof == []


def args(**kw):
    base = dict(url=[], server=[], users=[1, 2], rate=None, n_prompt=8, n_predict=4, requests=1, duration=None,
                shared_prefix=0, endpoint="completion", warmup=False, model=None, bandwidth_gbs=None, tflops=None,
                n_gpu_layers=0, cache_type_k="f16", cache_type_v="f16", output="md", plot=None, slo_ttft=None,
                slo_tok_s=None, no_tui=False, quiet=True)
    return SimpleNamespace(**{**base, **kw})


def infos(slots=4):
    return [SimpleNamespace(total_slots=slots, n_ctx=1024, build_info="b1-fake", model_path="")]


async def wait_for(pilot, cond, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert cond()


async def test_rows_fill_the_pane_level_by_level():
    from tui.load_app import LoadApp
    from tui.panes.load import LoadPane

    with FakeLlamaServer() as srv:
        app = LoadApp(args(), [srv.url], None, infos())
        async with app.run_test(size=(100, 30)) as pilot:
            await wait_for(pilot, lambda: app.result is not None)
            await pilot.pause()
            pane = app.query_one(LoadPane)
            assert [r["users"] for r in pane.rows] == [1, 2]
            text = app.query_one("#load-table").render().plain
            assert "1 users:" in text and "2 users:" in text
            assert "done" in app.query_one("#load-status").render().plain
            await pilot.press("q")
        assert not app.is_running


async def test_esc_stops_the_load_and_the_server_is_left_idle():
    from tui.load_app import LoadApp

    with FakeLlamaServer(token_s=0.05) as srv:
        app = LoadApp(args(users=[3], n_predict=400, requests=5), [srv.url], None, infos())
        async with app.run_test(size=(100, 30)) as pilot:
            await wait_for(pilot, lambda: srv.state.busy == 3)
            await pilot.press("escape")
            await wait_for(pilot, lambda: app.result is not None, timeout=10)
            assert app.result.stopped and app.result.rows == []
            assert srv.state.busy == 0 and len(srv.state.prompts) == 3
            assert "stopped" in app.query_one("#load-status").render().plain
