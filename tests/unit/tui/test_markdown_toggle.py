"""F3 renders finished model replies as Markdown: formatting applies, links are shown
as text with their target and never become clickable, markup stays text, and the
choice is remembered."""

import json

from helpers import one_turn, screen_text, scripted_app, wait_until

from kvtop.tui.panes.chat import ChatMessage

PIECES = ["**Lighthouses**", " guide", " ships.", " See", " [the", " list](http://evil.example/x)",
          " and", " [@click=app.quit]q[/]", " and", " `code`", "."]




def transcript(app) -> str:
    """The transcript as the user reads it: its lines joined, wrapping undone."""
    lines = []
    for m in app.query(ChatMessage):
        lines += [strip.text for strip in m.render_lines(m.region.reset_offset)]
    return " ".join(" ".join(lines).split())


def reply_segments(app):
    reply = [m for m in app.query(ChatMessage) if m.role == "assistant"][-1]
    return [seg for strip in reply.render_lines(reply.region.reset_offset) for seg in strip]


async def test_f3_renders_markdown_without_links_and_is_remembered(tmp_path, smollm_shaped):
    app = scripted_app(tmp_path, smollm_shaped, PIECES)
    async with app.run_test(size=(160, 50)) as pilot:
        await one_turn(pilot, "Tell me about lighthouses.")
        await pilot.pause()
        plain = transcript(app)
        assert "you: Tell me about lighthouses." in plain
        assert "**Lighthouses**" in plain and "[the list](http://evil.example/x)" in plain

        await pilot.press("f3")
        await pilot.pause()
        text = transcript(app)
        assert "you: Tell me about lighthouses." in text
        assert "**" not in text and "Lighthouses guide ships." in text
        assert "the list (http://evil.example/x)" in text  # the target is shown, as text
        assert "[@click=app.quit]q[/]" in text  # console markup is not interpreted
        assert "TTFT" in text  # the turn footer stays
        assert "Lighthouses guide" in screen_text(app)  # and it is on screen
        segments = reply_segments(app)
        assert segments
        for seg in segments:
            style = seg.style
            assert style is None or (not style.link and "@click" not in (style.meta or {}))
        assert json.load(open(app.paths.config_file))["markdown"] is True
        assert app.is_running  # the [@click=app.quit] text did nothing

        def label_colour():
            seg = next(x for x in reply_segments(app) if x.text.startswith("model:"))
            return seg.style.color.triplet.hex

        assert label_colour() == app.theme_variables["primary"].lower()
        app.theme = "kvtop-light"
        await pilot.pause()
        assert label_colour() == app.theme_variables["primary"].lower()  # follows the new theme

    app2 = scripted_app(tmp_path, smollm_shaped, PIECES)
    async with app2.run_test(size=(160, 50)) as pilot:
        await one_turn(pilot, "Tell me about lighthouses.")
        # remembered: the reply is drawn as Markdown (once the screen has laid it out)
        await wait_until(pilot, lambda: "the list (http://evil.example/x)" in transcript(app2), timeout=10,
                         what="the reply as Markdown")
        await pilot.press("f3")
        await pilot.pause()
        assert "**Lighthouses**" in transcript(app2)
    assert json.load(open(app2.paths.config_file))["markdown"] is False
