"""The live turn's state is the session's (``ActiveTurn``), kept by one ``apply`` with each
event of the turn the UI receives: the F2 waterfall draws the turn in flight from it, the
prefill pane's prompt-cache note reads it at the turn's end. Before, the prefill pane
kept the reports, the App the first token and the prompt-cache event."""

from kvtop.runner import events as ev
from kvtop.runner.session.records import ActiveTurn, DecodeSoFar

STARTED = ev.TurnStarted(7, 300, 100, 4096, "chatml", None, 0.01, 0.02, None, 1000.5)


def test_each_event_of_the_turn_lands_in_its_place():
    a = ActiveTurn(None, "hello", 1000.0)  # a replayed turn: the engine tells its id
    cache = ev.PromptCache("restored", "/tmp/p.cache", 100, 2**20, 0.01)
    a.apply(cache)
    a.apply(STARTED)
    a.apply(ev.PrefillProgress(7, 228, 300, 100, 0.4, 320.0, 128, 0.4, 1000.9))
    a.apply(ev.PrefillProgress(7, 300, 300, 100, 0.6, 333.3, 72, 0.2, 1001.1))
    assert a.turn_id == 7 and a.started is STARTED and a.cache_event is cache
    assert a.reports == [(228, 0.4), (300, 0.6)] and a.first_token_s is None and a.decoded == 0


def test_the_first_token_is_timed_from_the_submit_and_the_tokens_counted_on():
    a = ActiveTurn(7, "hello", 1000.0)
    a.apply(STARTED)
    a.apply(DecodeSoFar(7, 299, None))  # no token yet: nothing to time
    assert a.first_token_s is None and a.decoded == 0
    a.apply(DecodeSoFar(7, 300, 1001.25))
    assert a.first_token_s == 1.25 and a.decoded == 1
    a.apply(DecodeSoFar(7, 309, 1001.25))
    assert a.first_token_s == 1.25 and a.decoded == 10


def test_a_first_token_on_another_clock_is_not_a_time():
    a = ActiveTurn(7, "hello", 1000.0)
    a.apply(DecodeSoFar(7, 40, 999.0))  # before the submit: another process's clock
    assert a.first_token_s is None and a.decoded == 1
