"""The server pane (kvtop --server): its slot table never wraps where the dashboard
gives it less room (120x40 gave it 62 columns and each slot took two lines), and an
idle server polled again redraws nothing."""

from textual.app import App

from kvtop.runner.server.monitor import ServerRates, ServerSnapshot, SlotState
from kvtop.tui.panes.server import HEADER, NARROW_HEADER, TINY_HEADER, ServerPane

URL = "http://127.0.0.1:8080"


def snapshot(decoded: int = 1106) -> ServerSnapshot:
    slots = (SlotState(0, 4096, False, None, 0, 0, 0, 0), SlotState(1, 4096, True, 4314, 1147, 1, 40, decoded))
    rates = ServerRates(1.0, 0.0, 56.0, 1, 0, 42, 4055)
    return ServerSnapshot(URL, 0.0, True, None, slots, None, rates, None, "m.gguf")


class PaneApp(App):
    def __init__(self, width: int):
        super().__init__()
        self.width = width

    def compose(self):
        pane = ServerPane(URL)
        pane.styles.width = self.width
        yield pane


async def _lines(width: int) -> list[str]:
    app = PaneApp(width)
    async with app.run_test(size=(160, 40)) as pilot:
        pane = app.query_one(ServerPane)
        pane.set_snapshot(snapshot())
        await pilot.pause()
        assert pane.content_region.width == width
        return pane.render().plain.split("\n")


async def test_the_slot_table_takes_its_narrow_form_where_the_full_one_would_wrap():
    narrow = await _lines(62)
    assert NARROW_HEADER in narrow and HEADER not in narrow
    table = narrow[narrow.index(NARROW_HEADER):]
    assert all(len(line) <= 62 for line in table), table
    assert table[2].split() == ["1", "busy", "4314", "1,147", "1", "40", "1,106", "28%"]
    wide = await _lines(100)
    assert HEADER in wide and wide[-1].split()[-1] == "1,147/4,096"
    tiny = await _lines(40)  # a terminal under ~55 columns
    table = tiny[tiny.index(TINY_HEADER):]
    assert all(len(line) <= 40 for line in table), table
    assert table[2].split() == ["1", "busy", "40", "1,106", "28%"]


async def test_a_poll_that_changes_nothing_redraws_nothing():
    app = PaneApp(100)
    async with app.run_test(size=(160, 40)) as pilot:
        pane = app.query_one(ServerPane)
        pane.set_snapshot(snapshot())
        await pilot.pause()
        calls = []
        real = pane.refresh
        pane.refresh = lambda *a, **kw: (calls.append(kw), real(*a, **kw))[1]
        pane.set_snapshot(snapshot())  # the same figures, polled again
        assert calls == []
        pane.set_snapshot(snapshot(decoded=1200))  # a slot decoded more: it shows
        assert len(calls) == 1
        assert "1,200" in pane.render().plain


async def test_a_poll_while_the_pane_has_no_width_does_not_crash():
    """A poll reached the pane before it was laid out (or while it was on another page):
    measuring its lines at width 0 raised in rich's wrap and ended kvtop --server."""
    app = PaneApp(62)
    async with app.run_test(size=(160, 40)) as pilot:
        pane = app.query_one(ServerPane)
        pane.display = False
        await pilot.pause()
        assert pane.content_region.width == 0
        pane.set_snapshot(snapshot())
        pane.set_snapshot(snapshot(decoded=1200))
        pane.display = True
        await pilot.pause()
        assert "1,200" in pane.render().plain
