"""The bridge is a table from engine event to message (tui/events/bridge.py), and a refused
turn is a message of its own: before, ``TurnFinished`` carried either a ``TurnDone`` or
a ``TurnRefused`` and the handler told them apart with ``hasattr(r, "metrics")``."""

from __future__ import annotations

import dataclasses
import inspect

from helpers import scripted_app, send, wait_until

from kvtop.runner import events as ev
from kvtop.runner.policy import tune_messages as tune_ev
from kvtop.tui.base import messages as msg
from kvtop.tui.events.bridge import MESSAGES, STEPS, TurnBridge

NOT_FOR_THE_SCREEN = {ev.Tokenized, ev.EventBatch, ev.TurnMetrics, ev.KldPair}  # answers a caller waits for; a
# batch's events reach the bridge one by one; metrics travel inside TurnDone, a KLD pair inside KldMeasured


def test_every_engine_event_has_one_way_to_the_screen():
    events = {c for _, c in inspect.getmembers(ev, inspect.isclass)
              if c.__module__ == ev.__name__ and dataclasses.is_dataclass(c)}
    events |= {tune_ev.TuneProgress, tune_ev.TuneMeasured}  # "find faster settings" (its command and rows: not events)
    assert not set(MESSAGES) & set(STEPS)
    assert events - NOT_FOR_THE_SCREEN == set(MESSAGES) | set(STEPS)


def test_every_message_is_data():
    bases = {msg.TurnMessage, msg.TurnSink}  # what a turn's messages share, and what they go to
    for _, cls in inspect.getmembers(msg, inspect.isclass):
        if cls.__module__ == msg.__name__ and cls not in bases:
            assert dataclasses.is_dataclass(cls), cls


def test_a_turns_messages_have_one_handler_that_hands_them_to_the_turns_view():
    """Each kind had an App handler that only forwarded (``if is_current: self.turn.X(m)``)."""
    from kvtop.tui.app import KvtopApp

    kinds = [cls for _, cls in inspect.getmembers(msg, inspect.isclass)
             if issubclass(cls, msg.TurnMessage) and cls is not msg.TurnMessage]
    assert {k.__name__ for k in kinds} >= {"TurnBegan", "PrefillUpdate", "DecodeUpdate", "TurnFinished",
                                          "TurnRefused", "ContextShiftNote"}
    assert all(k.handler_name == "on_turn_message" for k in kinds)
    assert hasattr(KvtopApp, "on_turn_message")
    assert not [n for n in dir(KvtopApp) if n in {"on_turn_began", "on_prefill_update", "on_decode_update",
                                                  "on_turn_finished", "on_turn_refused", "on_context_shift_note"}]


def test_a_refused_turn_is_its_own_message():
    posted: list = []
    bridge = TurnBridge(posted.append)
    refusal = ev.TurnRefused(3, "the prompt does not fit", 5000, 4096)
    bridge(refusal)
    assert len(posted) == 1 and type(posted[0]) is msg.TurnRefused and posted[0].refusal is refusal


async def test_a_refused_turn_says_why_under_its_reply(tmp_path, smollm_shaped):
    app = scripted_app(tmp_path, smollm_shaped, ["never sent"])
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: app.loaded is not None, what="load")
        app.engine.cancel(10**6)  # the scripted engine refuses every turn up to this id before it starts
        await send(pilot, "Hello")
        await wait_until(pilot, lambda: app.session.active is None, what="the refusal")
        from kvtop.tui.panes.chat import ChatMessage

        reply = list(app.dash.chat.query(ChatMessage))[-1]
        assert reply.footer == "refused: cancelled before it started" and app.turns == []
        assert app.dash.prefill.note == "cancelled before it started"
        assert [m.role for m in app.session.messages] == []
