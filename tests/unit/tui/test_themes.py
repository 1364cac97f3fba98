"""Themes (issue 15 item 14): the picker offers kvtop's four themes, each of which sets
every colour kvtop draws with, and the decode chart follows a change of theme."""

from helpers import one_turn, scripted_app, wait_until

from kvtop.themes import THEMES


async def test_the_picker_lists_kvtops_themes_only(tmp_path, smollm_shaped):
    app = scripted_app(tmp_path, smollm_shaped, ["Hi"])
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert set(app.available_themes) == {t.name for t in THEMES}
        await pilot.press("ctrl+t")
        await pilot.pause(0.3)
        from textual.command import CommandPalette

        await wait_until(pilot, lambda: isinstance(app.screen, CommandPalette), what="the theme picker")
        listed = [str(o.prompt) for o in app.screen.query("OptionList").first().options]
        assert sorted(listed) == sorted(t.name for t in THEMES), listed


async def test_the_chart_is_drawn_again_in_the_new_themes_colours(tmp_path, smollm_shaped):
    from kvtop.tui.panes.decode import DecodePane

    app = scripted_app(tmp_path, smollm_shaped, ["The", " moon", "."])
    async with app.run_test(size=(160, 48)) as pilot:
        await one_turn(pilot, "hi")
        pane = app.query_one(DecodePane)
        seen = []
        original = pane._color
        pane._color = lambda var: seen.append((app.theme, var)) or original(var)
        app.theme = "kvtop-phosphor"
        await pilot.pause(0.2)
        assert ("kvtop-phosphor", "kvtop-measured") in seen
        phosphor = original("kvtop-measured")
        app.theme = "kvtop-dark"
        await pilot.pause(0.2)
        assert original("kvtop-measured") != phosphor  # the colour the chart drew with changed
