"""The status bar keeps what a bug report needs at every width, dropping the least
needed first (at 120 columns it used to cut "fa auto  kv f16/f16  refresh 1 s" off the end)."""

from helpers import scripted_app, wait_until

from kvtop.tui.panes.status import StatusBar


async def _line(tmp_path, model, width: int) -> str:
    app = scripted_app(tmp_path, model, ["Hi"])
    async with app.run_test(size=(width, 30)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        await pilot.pause()
        bar = app.query_one(StatusBar)
        text = bar.render().plain
        assert len(text) <= width, (width, text)  # nothing cut off at the edge
        return text


async def test_the_status_bar_drops_the_least_needed_first(tmp_path, smollm_shaped):
    wide = await _line(tmp_path / "a", smollm_shaped, 160)
    assert "arch llama" in wide and "threads 2/2 (set by -t)" in wide and "kv f16/f16" in wide and "refresh 1 s" in wide
    mid = await _line(tmp_path / "b", smollm_shaped, 120)
    assert "quant Q4_1" in mid and "n_ctx 4,096" in mid and "threads 2/2" in mid and "kv f16/f16" in mid
    assert "refresh" not in mid and "arch " not in mid and "(set by -t)" in mid, mid  # F1 says the pace
    narrow = await _line(tmp_path / "c", smollm_shaped, 80)
    assert "quant Q4_1" in narrow and "n_ctx 4,096" in narrow and "threads 2/2" in narrow
