"""A llama.cpp flag accepted with no effect (``-cnv``, ``--color``) is said once, in the chat
(and on stderr before the app starts: tests/unit/runner/commands/test_llama_flag_table.py)."""

from helpers import make_app, wait_until
from scripted_engine import ScriptedEngine, scripted_turn, smollm_loaded

from kvtop.runner.settings import Settings
from kvtop.tui.panes.chat import ChatLog
from kvtop.tui.start.launch import build_parser, parse_flags


async def test_no_effect_flags_are_said_once_in_the_chat(tmp_path, smollm_shaped):
    notes = parse_flags(build_parser(), ["-cnv", "--color", "-cnv"]).flag_notes
    loaded = smollm_loaded(smollm_shaped)
    app = make_app(Settings(smollm_shaped), lambda s: ScriptedEngine(s, loaded, [scripted_turn(1, 1.0, 40, 0, ["ok"])]),
                   tmp_path, live_system=False, notes=notes)
    async with app.run_test(size=(140, 40)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        lines = [m.text for m in app.query_one(ChatLog).children if getattr(m, "role", None) == "system"]
        assert lines == ["-cnv: accepted, no effect (kvtop is always an interactive chat)",
                         "--color: accepted, no effect (kvtop's dashboard draws its own colours and logs)"]
