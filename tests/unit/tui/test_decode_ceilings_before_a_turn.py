"""The decode pane's ceilings come from the model's facts before anything ran."""

from helpers import screen_text, scripted_app, wait_until

from kvtop.runner.physics.roofline import decode_ceilings_at
from kvtop.tui.base.format import fmt_rate


async def test_the_decode_ceilings_show_before_the_first_message(tmp_path, smollm_shaped):
    """The physics is known once the model is: the decode pane says what to expect
    before anything is sent, not N/A."""
    app = scripted_app(tmp_path, smollm_shaped, ["Hi"])
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        await pilot.pause()
        bw, comp = decode_ceilings_at(app.facts, app.here.layout, app.hw.bandwidth_gbs, app.hw.tflops, 0)
        text = screen_text(app)
        assert f"bandwidth ceiling {fmt_rate(bw)} at depth 0" in text
        assert f"compute ceiling {fmt_rate(comp)}" in text and "bandwidth-bound" in text
        assert "N/A no turn yet" in text and "N/A live" not in text
