"""``EngineSource``: the one place every engine kvtop runs is built.

The command line chooses what kvtop watches (a model in its child process or in this
process, one or more running llama-servers, a recorded trace); the source keeps that
choice and makes an engine from it whenever one is needed: the first one, a restart
(Ctrl+R, a server that restarted), the next server of a fleet (F4), ``kvtop bench``.
What the app may then do with an engine, it reads from the engine's own
``capabilities`` (``runner.process.contract``), never from which kind it is.

It sits in the session's layer because it builds engines of every layer below it
(``runner.process``, ``runner.records``) and of its own (``runner.server``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvtop.runner.process.contract import EngineClient, EngineFactory
from kvtop.runner.settings import Settings

if TYPE_CHECKING:
    from kvtop.runner.records.trace import Trace
    from kvtop.runner.server.credentials import Credentials


@dataclass(frozen=True)
class EngineSource:
    """``servers``: the llama-servers kvtop attaches to (``api_key``: their
    ``Credentials``); ``replay``: a ``Trace`` played at ``speed``; ``in_process``: the
    engine in this process instead of its child. ``given``: the engine a caller makes
    itself (tests' scripted engine, ``launch_main``'s seam); with servers it makes only
    the first engine, and a restart or F4 attaches to the chosen server as always."""

    servers: tuple[str, ...] = ()
    api_key: str | Credentials | None = None
    in_process: bool = False
    replay: Trace | None = None
    speed: float = 1.0
    given: EngineFactory | None = None

    def engine(self, settings: Settings, server: int | None = None) -> EngineClient:
        """A fresh engine with ``settings``; ``server``: which of ``servers`` (None: the first engine)."""
        if self.servers and (server is not None or self.given is None):
            from kvtop.runner.server.engine import ServerEngine

            return ServerEngine(settings, self.servers[server or 0], self.api_key)
        if self.given is not None:
            return self.given(settings)
        if self.replay is not None:
            from kvtop.runner.records.replay import ReplayEngine

            return ReplayEngine(self.replay, self.speed, settings)
        if self.in_process:
            from kvtop.runner.process.inprocess import InProcessEngine

            return InProcessEngine(settings)
        from kvtop.runner.process.parent import EngineProcess

        return EngineProcess(settings)
