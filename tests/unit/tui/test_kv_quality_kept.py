"""The KV quality measurement's app side without a model (tui/turn/quality.py): one kept
from an earlier chat is shown at load with the tokens it rests on, and the Estimate pane's
advice quotes it; an engine without a second context (a llama-server, a replay) says so
in one line; nothing is measured before the chat has a message."""

from helpers import scripted_app, wait_until
from helpers import test_paths as paths_of

from kvtop.runner.commands.kld_cache import remember
from kvtop.runner.physics.kv_quality import Quality, entry
from kvtop.runner.process.contract import Capabilities


def _keep(tmp_path, model):
    q = Quality("q8_0", "q8_0", "f16", "f16", 1203, 0.00093, 0.0081, 0.993, 1204, True)
    remember(paths_of(tmp_path).cache_dir, model, entry(q, 0.011, "0" * 64))


def _said(app) -> list[str]:
    return [n.message for n in app._notifications]


async def test_a_kept_measurement_is_shown_at_load(tmp_path, smollm_shaped):
    _keep(tmp_path, smollm_shaped)
    app = scripted_app(tmp_path, smollm_shaped, ["Hi"])
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None and app.dash.kv.quality, what="the kept line")
        (line,) = app.dash.kv.quality
        assert line.startswith("q8_0/q8_0: \u221247% KV (") and " at 4,096), KLD 0.0009 (99%: 0.008)" in line
        assert line.endswith("same top token 99.3% over 1,204 tokens of an earlier chat (kept; F7 measures this one)")
        assert app.dash.estimate.quality.startswith("-ctk q8_0 -ctv q8_0 would fit 1.9x the context at KLD 0.0009")
        assert app.dash.estimate.quality.endswith("measured on an earlier chat")
        await pilot.press("f7")  # no message yet: nothing to measure
        await pilot.pause(0.2)
        assert not app.quality.running and any(m.startswith("nothing to measure yet") for m in _said(app))


async def test_an_engine_without_a_second_context_says_so(tmp_path, smollm_shaped):
    app = scripted_app(tmp_path, smollm_shaped, ["Hi"])
    app.session.engine.capabilities = Capabilities(second_context=False)  # as a llama-server's and a replay's
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        await pilot.press("f7")
        await pilot.pause(0.2)
        assert not app.quality.running
        assert any("a llama-server's or a replay's does not" in m for m in _said(app)), _said(app)


async def test_a_measurement_asked_of_an_engine_since_replaced_is_not_running(tmp_path, smollm_shaped):
    """Ctrl+R during a measurement: the new engine never answers it, so Esc must reach turns again."""
    app = scripted_app(tmp_path, smollm_shaped, ["Hi"])
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        app.quality.turn_id, app.quality.engine = 99, app.session.engine
        assert app.quality.running
        app.quality.engine = object()  # what a restart leaves: the engine asked is gone
        assert not app.quality.running and not app.quality.cancel()


async def test_a_new_chat_turns_this_chats_lines_into_an_earlier_chats(tmp_path, smollm_shaped):
    from kvtop.runner import events as ev

    app = scripted_app(tmp_path, smollm_shaped, ["Hi"])
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        app.quality.turn_id, app.quality.engine = 5, app.session.engine
        app.quality.measured(ev.KldMeasured(5, 300, 300, "f16", "f16",
                                            (ev.KldPair("q8_0", "q8_0", 299, 0.001, 0.01, 0.99, 0.01),), 1.0))
        assert app.dash.kv.quality[0].endswith("over this chat's 300 tokens") and not app.quality.running
        app.chats.new_chat()
        await pilot.pause(0.1)
        assert app.dash.kv.quality[0].endswith("over 300 tokens of an earlier chat")


async def test_the_same_chat_measured_before_is_shown_from_what_was_kept(tmp_path, smollm_shaped):
    from helpers import one_turn

    from kvtop.runner.physics.kv_quality import chat_digest

    app = scripted_app(tmp_path, smollm_shaped, ["Hi"])
    async with app.run_test(size=(160, 50)) as pilot:
        await one_turn(pilot, "hello")
        chat = [(m.role, m.content) for m in app.session.messages]
        digest = chat_digest(chat + [("n_ctx", str(app.loaded.n_ctx))])
        for k, kld in (("q8_0", 0.001), ("q4_0", 0.02)):
            q = Quality(k, k, "f16", "f16", 299, kld, 0.01, 0.97, 300, True)
            remember(app.paths.cache_dir, smollm_shaped, entry(q, 0.01, digest))
        await pilot.press("f7")
        await pilot.pause(0.2)
        assert not app.quality.running  # nothing asked of the engine
        assert [q.split(":")[0] for q in app.dash.kv.quality] == ["q8_0/q8_0", "q4_0/q4_0"]
        assert app.dash.kv.quality[0].endswith("over this chat's 300 tokens")
        assert any("measured before" in m for m in _said(app))


async def test_ctrl_z_of_the_measured_chat_makes_its_lines_this_chats_again(tmp_path, smollm_shaped):
    """A new user measured a chat (F7), pressed Ctrl+L then Ctrl+Z, and the lines of the very
    chat on screen said "784 tokens of an earlier chat"."""
    from helpers import send

    from kvtop.runner import events as ev
    from kvtop.runner.physics.kv_quality import chat_digest

    app = scripted_app(tmp_path, smollm_shaped, ["Hi"])
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        await send(pilot, "hello")
        await wait_until(pilot, lambda: app.turns and not app.turn_running, what="the turn")
        q = app.quality  # what F7 does before it asks the engine: the chat's key
        q.digest = chat_digest([(m.role, m.content) for m in app.session.messages] + [("n_ctx", str(q._n_ctx()))])
        q.turn_id, q.engine = 5, app.session.engine
        q.measured(ev.KldMeasured(5, 300, 300, "f16", "f16",
                                  (ev.KldPair("q8_0", "q8_0", 299, 0.001, 0.01, 0.99, 0.01),), 1.0))
        assert app.dash.kv.quality[0].endswith("over this chat's 300 tokens")
        app.chats.new_chat()
        await pilot.pause(0.1)
        assert app.dash.kv.quality[0].endswith("over 300 tokens of an earlier chat")
        app.chats.bring_back()
        await pilot.pause(0.1)
        assert app.dash.kv.quality[0].endswith("over this chat's 300 tokens"), app.dash.kv.quality
