"""Every pane at every terminal size (tui/dashboard.py): planned into pages when they do
not fit, none cut, F6 and clicks turn the pages, a click focuses a pane, a click on a
finished reply opens its waterfall."""

import pytest
from helpers import one_turn, screen_text, scripted_app, wait_until

from kvtop.tui.dashboard import Unit, pager_labels, plan_pages, row_heights

ALL = ("Prefill", "KV cache", "Decode", "Estimate vs actual", "Memory")


def units(**heights) -> list[Unit]:
    return [Unit((name,), h) for name, h in heights.items()]


def test_everything_on_one_page_when_it_fits():
    us = units(prefill=5, kv=7, decode=12, estimate=11, memory=8)
    assert plan_pages(us, 43) == [us]
    # the decode pane takes all the rows the others leave
    assert row_heights(us, 50) == [5, 7, 19, 11, 8]


def test_pages_fill_in_order_and_leave_a_row_for_the_pager():
    us = units(prefill=5, kv=7, decode=12, estimate=11, memory=12)
    pages = plan_pages(us, 38)  # 120x40: 37 rows once the pager has one
    assert [[u.panes[0] for u in p] for p in pages] == [["prefill", "kv", "decode", "estimate"], ["memory"]]
    assert row_heights(pages[0], 37) == [5, 7, 14, 11]
    pages = plan_pages(us, 22)  # 80x24
    assert [[u.panes[0] for u in p] for p in pages] == [["prefill", "kv"], ["decode"], ["estimate"], ["memory"]]
    assert row_heights(pages[1], 21) == [21]


def test_a_pane_taller_than_a_page_gets_a_page_of_its_own():
    us = units(prefill=5, estimate=30, memory=8)
    assert [[u.panes[0] for u in p] for p in plan_pages(us, 20)] == [["prefill"], ["estimate"], ["memory"]]


def test_pager_names_shorten_when_they_do_not_fit():
    pages = plan_pages(units(prefill=5, kv=7, decode=12, estimate=11, memory=12), 22)
    assert pager_labels(pages, 80) == ["Prefill KV", "Decode", "Estimate", "Memory"]
    assert pager_labels(pages, 44) == ["PP KV", "TG", "Est", "Mem"]


def titles_on_screen(app) -> set[str]:
    text = screen_text(app)
    return {t for t in ALL if f"─ {t} ─" in text}


@pytest.mark.parametrize("size", [(80, 24), (100, 30), (120, 40), (140, 40), (160, 48), (200, 60)])
async def test_every_pane_is_on_a_page_and_none_is_cut(tmp_path, smollm_shaped, size):
    app = scripted_app(tmp_path, smollm_shaped, ["Hello", " there", "."])
    async with app.run_test(size=size) as pilot:
        await one_turn(pilot, "hi")
        await pilot.pause(0.2)
        seen: set[str] = set()
        count = max(1, len(app.query_one("#pager").labels))
        for _ in range(count):
            shown = titles_on_screen(app)
            seen |= shown
            metrics = app.query_one("#metrics")
            # nothing cut: the panes of a page fit without scrolling
            assert metrics.max_scroll_y == 0, (size, shown)
            await pilot.press("f6")
            await pilot.pause(0.1)
        assert seen == set(ALL), size
        assert (count > 1) == app.query_one("#pager").display
        assert (size[1] < 45) == (count > 1) or size[0] >= 140


async def test_a_click_on_a_page_name_shows_it_and_a_click_on_a_pane_focuses_it(tmp_path, smollm_shaped):
    app = scripted_app(tmp_path, smollm_shaped, ["Hello", "."])
    async with app.run_test(size=(80, 24)) as pilot:
        await one_turn(pilot, "hi")
        pager = app.query_one("#pager")
        start, _end, index = next(s for s in pager._spans if s[2] == 3)
        await pilot.click("#pager", offset=(start + 1, 0))
        await pilot.pause(0.1)
        assert titles_on_screen(app) == {"Memory"}
        await pilot.click("#memory", offset=(3, 2))
        await pilot.pause()
        assert app.focused is app.query_one("#memory")
        await pilot.press("x")  # typing goes back to the prompt, nothing lost
        await pilot.pause()
        assert app.query_one("#prompt").value == "x" and app.focused is app.query_one("#prompt")


async def test_a_click_on_a_finished_reply_opens_its_waterfall(tmp_path, smollm_shaped):
    from kvtop.tui.panes.chat import ChatMessage
    from kvtop.tui.turn.waterfall import WaterfallScreen

    app = scripted_app(tmp_path, smollm_shaped, ["Hello", "."])
    async with app.run_test(size=(160, 48)) as pilot:
        await one_turn(pilot, "hi")
        reply = [m for m in app.query(ChatMessage) if m.role == "assistant"][-1]
        assert reply.turn_index == 0
        await pilot.click(reply)
        await wait_until(pilot, lambda: isinstance(app.screen, WaterfallScreen), what="waterfall")
        assert app.screen.pos == 0 and "Turn 1 of 1" in screen_text(app)


async def test_after_ctrl_l_the_kv_pane_is_laid_out_whole_at_80x24(tmp_path, smollm_shaped):
    """Ctrl+L at 80x24 left the KV pane at its old height, its last line ("yet)") cut."""
    app = scripted_app(tmp_path, smollm_shaped, ["Hello", "."])
    async with app.run_test(size=(80, 24)) as pilot:
        await one_turn(pilot, "hi")
        await pilot.press("ctrl+l")
        await pilot.pause(0.2)
        text = screen_text(app)
        assert "(no decode rate yet)" in text and "0/4,096 cells" in text
