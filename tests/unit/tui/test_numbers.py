"""One integer format everywhere: a count the user reads has thousands separators in
the chat as in the panes ("3,265 reused", not "3265 reused" beside "3,265")."""

import os
import re

from helpers import make_app, screen_text, send, wait_until
from scripted_engine import ScriptedEngine, scripted_turn, smollm_loaded

from kvtop.runner.settings import Settings

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


async def test_the_chat_footer_writes_counts_as_the_panes_do(tmp_path, smollm_shaped):
    settings = Settings(smollm_shaped, n_ctx=4096, n_threads=2)
    loaded = smollm_loaded(smollm_shaped)
    turns = [scripted_turn(1, 1000.0, 3300, 0, ["Hi"]),  # the second turn reuses 3,265 cached tokens
             scripted_turn(2, 2000.0, 3300, 3265, ["Hello", " again"])]
    app = make_app(settings, lambda s: ScriptedEngine(s, loaded, turns), tmp_path, live_system=False,
                   write_transcript=False)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        for n, text in enumerate(["One", "Two"], 1):
            await send(pilot, text)
            await wait_until(pilot, lambda: len(app.turns) == n and not app.turn_running, what=f"turn {n}")
        await pilot.pause(0.2)
        shown = screen_text(app)
        assert "3,265 reused" in shown and "3265" not in shown
        assert "3,300/3,300 tok" in shown  # the prefill pane, in the same format


def test_no_pane_or_screen_formats_a_count_itself():
    """Thousands separators come from ``runner.units.fmt_int``, not from an f-string's own
    ``:,`` (which also prints "-1" or "nan" where fmt_int says N/A)."""
    spec = re.compile(r"\{[^{}]*:[<>^]?\d*,d?\}")  # {n:,} {n:>8,} {n:,d}
    offenders = []
    for dirpath, _dirs, files in os.walk(os.path.join(ROOT, "tui")):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                for i, line in enumerate(open(path, encoding="utf-8"), 1):
                    if spec.search(line):
                        offenders.append(f"{os.path.relpath(path, ROOT)}:{i}")
    assert offenders == []
