"""The in-process engine answers a command that comes before any Load with an EngineError
that says so (it ran the command on no engine and reported "AttributeError: 'NoneType'
object has no attribute …"); the model is never loaded here."""

from kvtop.runner import events as ev
from kvtop.runner.process.commands import Quit, Reset, Tokenize
from kvtop.runner.process.inprocess import InProcessEngine
from kvtop.runner.settings import Settings


def test_a_command_before_load_is_an_engine_error_naming_it(tmp_path):
    engine = InProcessEngine(Settings(str(tmp_path / "m.gguf")))
    engine.submit(Tokenize(1, "hi", True))
    engine.submit(Reset())
    engine._work.put(Quit())
    got: list[object] = []
    engine.pump(got.append)
    errors = [e.reason for e in got if isinstance(e, ev.EngineError)]
    assert errors == ["Tokenize before the model was loaded", "Reset before the model was loaded"], got
    assert isinstance(got[-1], ev.EngineClosed)
