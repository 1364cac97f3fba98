"""kvtop load's live view: the chart's plan as numbers (the curve, the roof over it, the
knee against the targets) and the app itself on the stand-in server: the ``kvtop --server``
dashboard with the load pane in the chat's place, rows arriving level by level, Esc (or q)
stopping the load with no request left in flight, Ctrl+C stopping it and then quitting."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

from fake_llama_server import FakeLlamaServer

from kvtop.runner.commands.load_rows import FIELDS
from kvtop.tui.panes.load import plan_load_chart


def row(users, gen, per_user, ttft95, roof=None, server="http://a"):
    r = dict.fromkeys(FIELDS)
    r.update(server=server, users=users, gen_tok_s=gen, per_user_gen_tok_s=per_user, ttft_p95_s=ttft95,
             batched_roof_tok_s=roof, completed=2, failed=0)
    return r


def test_the_plan_draws_the_curve_under_its_roof_and_marks_the_knee():
    rows = [row(1, 10.0, 10.0, 0.2, 30.0), row(2, 18.0, 9.0, 0.3, 55.0), row(4, 28.0, 7.0, 0.9, 80.0)]
    plan = plan_load_chart(rows, 0.5, None)
    assert plan.xs == [1.0, 2.0, 4.0] and plan.measured == [10.0, 18.0, 28.0] and plan.per_user == [10.0, 9.0, 7.0]
    assert plan.roof == [30.0, 55.0, 80.0] and plan.y_top >= 80.0 and plan.roof_above is None
    assert plan.knee == 2.0
    assert plan_load_chart(rows, None, None).knee is None


def test_the_roof_is_the_lower_of_bandwidth_and_compute():
    """As the server pane's batched ceiling: a trial saw the load pane's 261 tok/s roof
    beside the server pane's compute-bound 132 tok/s for the same 2 users."""
    rows = [row(1, 40.0, 40.0, 0.2, 130.0), row(2, 60.0, 30.0, 0.3, 261.0)]
    for r in rows:
        r["compute_roof_tok_s"] = 132.0
    assert plan_load_chart(rows, None, None).roof == [130.0, 132.0]


def test_a_roof_far_above_the_curve_is_named_not_drawn():
    """A roof 20x above (measured on a busy 2-core CPU: 6 tok/s under a 206-409 tok/s roof)
    drew the curve on the bottom row; the legend names it, as the decode chart does."""
    from kvtop.tui.panes.load import table

    rows = [row(1, 6.4, 7.8, 0.7, 206.0), row(2, 5.2, 3.6, 3.0, 409.0)]
    plan = plan_load_chart(rows, None, None)
    assert plan.roof == [] and plan.y_top >= 7.8 and plan.y_top < 10
    assert plan.roof_above == "roof up to 409 tok/s, 52x the top rate: above the chart"
    legend = table(rows, plan).plain.splitlines()[0]
    assert "52x the top rate: above the chart" in legend and "━ roof" not in legend


def test_the_pane_names_the_outcomes_and_a_partial_level():
    from kvtop.tui.panes.load import table

    r = row(2, 6.0, 3.0, 0.5)
    r.update(completed=1, failed=3, truncated=2, refused=1, partial="http://a stopped answering")
    text = table([r], plan_load_chart([r], None, None)).plain
    assert "2 users (partial):" in text and "1 ok, 2 truncated, 1 refused" in text, text


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
    from kvtop.runner.process.contract import SERVER

    return [SimpleNamespace(total_slots=slots, n_ctx=1024, build_info="b1-fake", model_path="", local_model="", capabilities=SERVER)]


async def wait_for(pilot, cond, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert cond()


def live_app(a, url):
    """kvtop load's live view as ``kvtop load URL`` builds it on a terminal."""
    from helpers import FIXED_HW

    from kvtop.tui.start.launch_server import load_app

    return load_app(a, [url], None, infos(), hardware=FIXED_HW)


async def test_the_server_dashboard_shows_and_rows_fill_the_load_pane_level_by_level():
    from kvtop.tui.panes.chat import ChatLog
    from kvtop.tui.panes.load import LoadPane
    from kvtop.tui.panes.server import ServerPane

    with FakeLlamaServer() as srv:
        app = live_app(args(), srv.url)
        run = app.options.load
        async with app.run_test(size=(120, 40)) as pilot:
            # the --server dashboard: its panes, the server polled; no chat, no prompt
            server = app.query_one(ServerPane)
            await wait_for(pilot, lambda: server.snapshot is not None)
            assert {"#kv", "#server", "#decode", "#memory"} <= {f"#{w.id}" for w in app.query(".pane")}
            assert not app.query_one(ChatLog).display and app.query_one("#prompt").disabled
            await wait_for(pilot, lambda: run.result is not None)
            await pilot.pause()
            pane = app.query_one(LoadPane)
            assert [r["users"] for r in pane.rows] == [1, 2]
            text = app.query_one("#load-table").render().plain
            assert "1 user:" in text and "2 users:" in text
            await wait_for(pilot, lambda: "done" in app.query_one("#load-status").render().plain)
            await pilot.press("q")
        assert not app.is_running
    assert run.settle() is run.result and [r["users"] for r in run.result.rows] == [1, 2]


async def test_esc_stops_the_load_and_the_server_is_left_idle_then_q_quits():
    with FakeLlamaServer(token_s=0.05) as srv:
        app = live_app(args(users=[3], n_predict=400, requests=5), srv.url)
        run = app.options.load
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda: srv.state.busy == 3)
            await pilot.press("q")  # q while it runs: stops it, does not quit
            await wait_for(pilot, lambda: run.result is not None, timeout=10)
            assert app.is_running and run.result.stopped and run.result.rows == []
            assert srv.state.busy == 0 and len(srv.state.prompts) == 3
            await wait_for(pilot, lambda: "stopped: streams in flight closed; no slot was busy afterwards"
                           in app.query_one("#load-status").render().plain)
            await pilot.pause()
            from kvtop.tui.panes.prefill import PrefillPane

            assert "no chat turn: the load shows in the Server" in app.query_one(PrefillPane).render().plain.replace("\n", " ")
            keys = app.query_one("#keys").render().plain
            assert "quit and print the table" in keys and "stop the load" not in keys, keys  # nothing left to stop
            await pilot.press("q")
        assert not app.is_running


async def test_esc_mid_level_stops_and_ctrl_c_quits_once_the_server_is_idle():
    with FakeLlamaServer(token_s=0.05) as srv:
        app = live_app(args(users=[2], n_predict=400, requests=5), srv.url)
        run = app.options.load
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda: srv.state.busy == 2)
            await pilot.press("escape")
            await wait_for(pilot, lambda: run.result is not None, timeout=10)
            assert app.is_running and run.result.stopped and srv.state.busy == 0
        app = live_app(args(users=[2], n_predict=400, requests=5), srv.url)
        run = app.options.load
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda: srv.state.busy == 2)
            await pilot.press("ctrl+c")  # stop, then quit by itself once stopped
            await wait_for(pilot, lambda: not app.is_running, timeout=10)
        assert run.result.stopped and srv.state.busy == 0


async def test_f1_lists_the_keys_of_the_load_view_not_the_chats():
    """A trial's F1 in kvtop load listed Enter, Ctrl+L, Ctrl+Z, Ctrl+R, F2 and F3: keys of
    the chat, which is not there. The help names what works, and Esc closes it without
    stopping the load."""
    from helpers import screen_text

    from kvtop.tui.base.screens import HelpScreen

    with FakeLlamaServer(token_s=0.05) as srv:
        app = live_app(args(users=[2], n_predict=400, requests=5), srv.url)
        run = app.options.load
        async with app.run_test(size=(120, 48)) as pilot:
            await wait_for(pilot, lambda: srv.state.busy == 2)
            await pilot.press("f1")
            await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
            await pilot.pause()
            text = screen_text(app)
            for gone in ("send the message", "Ctrl+L", "new chat", "Ctrl+Z", "Ctrl+R", "restart the engine",
                         "F2", "waterfall", "F3", "Markdown", "Ctrl+O", "attach", "/file"):
                assert gone not in text, (gone, text)
            for shown in ("stop the load", "quit once the server is idle", "Ctrl+S", "Ctrl+T", "F6", "PgUp",
                          "tok/s by users"):
                assert shown in text, (shown, text)
            await pilot.press("escape")  # closes the help; the load goes on
            await wait_for(pilot, lambda: not isinstance(app.screen, HelpScreen))
            assert run.result is None and not run.stopping and srv.state.busy == 2
            await pilot.press("ctrl+c")
            await wait_for(pilot, lambda: not app.is_running, timeout=10)


async def test_the_status_says_done_only_once_the_server_pane_shows_the_slots_idle():
    """A trial saw "done" in the status line while the server pane, polled a second before,
    still showed the load's slots busy: the screen contradicted itself until the next poll.
    The status now waits for a poll taken after the end (asked for at once)."""
    from kvtop.tui.panes.server import ServerPane

    with FakeLlamaServer(token_s=0.03) as srv:
        app = live_app(args(users=[2], n_predict=100, requests=1), srv.url)
        run = app.options.load
        async with app.run_test(size=(120, 40)) as pilot:
            server = app.query_one(ServerPane)
            status = app.query_one("#load-status")
            await wait_for(pilot, lambda: "2/4 busy" in server.render().plain)  # the pane saw the load
            await wait_for(pilot, lambda: run.result is not None)
            said, seen = "", []
            deadline = time.monotonic() + 15
            while "done" not in said and time.monotonic() < deadline:
                said = status.render().plain
                seen.append((said, server.render().plain))
                await asyncio.sleep(0.01)
            assert "done" in said, seen[-1]
            for text, pane in seen:  # nothing it said while the pane showed busy slots claims the end
                if "0/4 busy" not in pane:
                    assert "done" not in text, (text, pane)
            assert "0/4 busy" in seen[-1][1], seen[-1]
            assert time.monotonic() - run.ended_at < 5  # a poll asked for at once, not a late fallback
            await pilot.press("q")
        assert not app.is_running


async def test_the_chats_keys_do_nothing_in_the_load_view():
    """No chat in kvtop load: a trial's Ctrl+R restarted the engine behind the hidden chat
    and wrote a line nobody saw; Ctrl+L, Ctrl+Z, F2, F3 and Ctrl+O acted on it too."""
    from kvtop.tui.panes.chat import ChatLog

    with FakeLlamaServer(token_s=0.05) as srv:
        app = live_app(args(users=[2], n_predict=400, requests=5), srv.url)
        run = app.options.load
        async with app.run_test(size=(120, 48)) as pilot:
            await wait_for(pilot, lambda: srv.state.busy == 2)
            chat = app.query_one(ChatLog)
            before = (len(chat.children), app.session.engine, app.screen)
            for key in ("ctrl+r", "ctrl+l", "ctrl+z", "f2", "f3", "ctrl+o"):
                await pilot.press(key)
            await pilot.pause(0.3)
            assert (len(chat.children), app.session.engine, app.screen) == before  # no restart, no screen, no chat line
            assert run.result is None and not run.stopping and srv.state.busy == 2  # the load goes on
            await pilot.press("ctrl+c")
            await wait_for(pilot, lambda: not app.is_running, timeout=10)


async def test_a_server_killed_mid_level_says_why_in_the_status_and_marks_the_level():
    """The live view of a dead server: the level in flight is a row marked partial, the
    status line says the server stopped answering, no later level runs."""
    from kvtop.tui.panes.load import LoadPane

    with FakeLlamaServer(token_s=0.05) as srv:
        app = live_app(args(users=[1, 2, 4], n_predict=40, requests=2), srv.url)
        run = app.options.load
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda: len(srv.state.prompts) >= 3 and srv.state.busy >= 1)  # level 2
            srv.kill()
            await wait_for(pilot, lambda: run.result is not None, timeout=15)
            await wait_for(pilot, lambda: "stopped answering" in app.query_one("#load-status").render().plain)
            assert [r["users"] for r in app.query_one(LoadPane).rows] == [1, 2]
            assert "2 users (partial):" in app.query_one("#load-table").render().plain
            await pilot.press("q")
        assert not app.is_running
    assert run.result.error and "is partial, 1 later level not run" in run.result.error


async def test_the_status_line_says_the_levels_progress_while_it_runs():
    """Inside a level: requests done of how many, tokens, elapsed and the ETA (a trial's
    19 minutes showed only "level 2/3: 2 users")."""
    with FakeLlamaServer(token_s=0.03) as srv:
        app = live_app(args(users=[2], n_predict=100, requests=2), srv.url)
        run = app.options.load
        async with app.run_test(size=(160, 48)) as pilot:
            status = app.query_one("#load-status")
            await wait_for(pilot, lambda: "requests done" in status.render().plain and srv.state.busy == 2)
            text = status.render().plain
            assert "level 1/1: 2 users: " in text and "/4 requests done" in text and "/400 tokens" in text, text
            await wait_for(pilot, lambda: "ETA" in status.render().plain)
            await pilot.press("ctrl+c")
            await wait_for(pilot, lambda: not app.is_running, timeout=10)
    assert run.result.stopped


async def test_no_empty_decode_chart_the_space_goes_to_the_panes_with_data():
    """No chat turn runs in kvtop load: its Decode chart was half the screen, empty. The
    pane keeps its ceilings, and at 160x48 every pane is on the one page."""
    from kvtop.tui.panes.decode import DecodePane

    with FakeLlamaServer(token_s=0.05) as srv:
        app = live_app(args(users=[2], n_predict=400, requests=5), srv.url)
        async with app.run_test(size=(160, 48)) as pilot:
            await wait_for(pilot, lambda: srv.state.busy == 2)
            want = {"server", "kv", "decode", "estimate", "memory", "load"}

            def shown() -> set:
                return {w.id for w in app.query(".pane") if w.display}

            # the layout settles once the first figures are in (a fixed 0.5 s wait was too
            # short for a busy machine's relayout: Estimate and Memory not yet shown)
            await wait_for(pilot, lambda: want <= shown(), timeout=20)
            decode = app.query_one(DecodePane)
            assert not app.query_one("#decode-chart").display and not app.query_one("#decode-legend").display
            assert decode.display and decode.size.height <= 8, decode.size
            from kvtop.tui.panes.decode import DecodeSummary

            assert "ceiling" in decode.query_one(DecodeSummary).render().plain  # the ceilings stay
            assert want <= shown(), shown()
            assert not app.query_one("#pager").display  # one page
            await pilot.press("ctrl+c")
            await wait_for(pilot, lambda: not app.is_running, timeout=10)


async def test_the_roofs_formula_and_inputs_are_in_the_legend_and_in_f1():
    from helpers import screen_text

    from kvtop.runner.demo import demo_model_path
    from kvtop.tui.base.screens import HelpScreen

    with FakeLlamaServer(token_s=0.05) as srv:
        app = live_app(args(users=[2], n_predict=400, requests=5, model=demo_model_path(), bandwidth_gbs=20.0,
                            tflops=0.5), srv.url)
        async with app.run_test(size=(160, 48)) as pilot:
            await wait_for(pilot, lambda: srv.state.busy == 2 and app.options.load.roof_text)
            await pilot.pause()
            legend = app.query_one("#load-table").render().plain.replace("\n", " ")
            assert "roof = min(B x 20.0 GB/s / (" in legend and "0.50 TFLOPS / " in legend, legend
            assert "B = the users decoding together (at most 4 slots)" in legend, legend
            await pilot.press("f1")
            await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
            await pilot.pause()
            load = dict(app.screen.panes)["Load"]  # on screen, wrapped in its column
            assert "min(B x bandwidth / (weights + B x KV at depth), TFLOPS / FLOP per token)" in load, load
            assert "Here: roof = min(B x 20.0 GB/s / (" in load and "0.50 TFLOPS" in load, load
            assert "Here: roof" in screen_text(app)
            await pilot.press("escape")
            await pilot.press("ctrl+c")
            await wait_for(pilot, lambda: not app.is_running, timeout=10)


def test_the_pane_flags_an_unexplained_level_and_a_busy_one():
    from kvtop.tui.panes.load import table

    rows = [row(1, 1.53, 1.53, 0.2), row(2, 21.6, 10.82, 0.2)]
    rows[1].update(unexplained="each user's rate rose 7.1x (1.53 -> 10.82 tok/s) from 1 user", busy="x",
                   others_cpu_share=0.63)
    text = table(rows, plan_load_chart(rows, None, None), "roof = min(...)").plain
    assert "! not explained: each user's rate rose 7.1x (1.53 -> 10.82 tok/s) from 1 user" in text, text
    assert "! busy: other processes used 63% of the CPU: figures are low" in text, text
    assert text.splitlines()[1] == "roof = min(...)"
