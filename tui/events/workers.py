"""The app's worker threads. None of them touches a widget: they only ``post_message``.

* ``inspect_model``: reads the GGUF header and the hardware (the CPU probe can take
  seconds, over 30 on a busy machine: ``HardwareProbing`` says so on the status bar),
  posts ``ModelInspected``; the app then asks about memory if needed and starts the
  engine.
* ``read_prompt_file``: ``/file`` and ``--prompt-file`` (a FIFO must not freeze the UI).
* ``FleetWatch``: ``kvtop --server``'s polls, on the fleet poller's threads.

The engine's own reader (``pump``) and closing an old engine (``stop``) are
``EngineControl``'s (tui/events/lifecycle.py): they are the engine's life.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual import work

from kvtop.runner.sanitize import clean_line
from kvtop.tui.base import messages as msg

if TYPE_CHECKING:
    from kvtop.tui.app import KvtopApp


class EngineWorkers:
    """Mixed into the App: the workers run in threads and report through messages."""

    @work(thread=True, exclusive=True, group="inspect", exit_on_error=False)
    def inspect_model(self) -> None:
        from kvtop.runner.model.inspect import ModelFileError, load_facts
        from kvtop.runner.physics.here import Here
        from kvtop.runner.system.hardware import hardware_profile

        s, opts, caps = self.settings, self.options, self.session.engine.capabilities
        try:
            facts = opts.facts or load_facts(s.model, need_weights=caps.runs_model)
        except ModelFileError as exc:
            if not caps.runs_model:  # the server runs the model: the physics waits for a readable GGUF
                self.post_message(msg.Notice(f"no GGUF header for the physics ({exc}): give --model PATH"))
                self.post_message(msg.ModelInspected(None, opts.hardware, None, None))
                return
            self.post_message(msg.EngineFailed(str(exc)))
            return
        except Exception as exc:  # never let a worker error kill the UI
            self.post_message(msg.EngineFailed(clean_line(f"{type(exc).__name__}: {exc}")))
            return
        hw = opts.hardware
        if hw is None:
            self.post_message(msg.HardwareProbing(True))
            try:  # ended in any case: a probe that raised must not leave the bar counting
                hw = hardware_profile(s.n_gpu_layers, cache_dir=self.paths.cache_dir)
            finally:
                self.post_message(msg.HardwareProbing(False))
        self.session.open_trace(facts, hw, lambda text: self.post_message(msg.Notice(text)))
        here = Here.at(facts, hw, s)  # the KV cache at the settings' n_ctx, before the engine says its own
        self.post_message(msg.ModelInspected(facts, hw, here.layout, here.memory_check()))

    @work(thread=True, exclusive=True, group="file", exit_on_error=False)
    def read_prompt_file(self, path: str) -> None:
        from kvtop.runner.records.prompt_file import PromptFileError, read_prompt_file

        try:
            self.post_message(msg.PromptFileRead(path, read_prompt_file(path), None))
        except PromptFileError as exc:
            self.post_message(msg.PromptFileRead(path, None, str(exc)))


class FleetWatch:
    """``kvtop --server``: every server polled on kvtop's pace
    (``runner.server.fleet.FleetPoller``), and a server that restarted told from the one
    attached to. The App holds one as ``app.fleet_watch`` once it shows servers; the
    polls reach it only as messages (``ServerPolled``, ``ServerRestarted``)."""

    def __init__(self, app: KvtopApp) -> None:
        from kvtop.runner.pacing import SERVER_POLL_S
        from kvtop.runner.server.fleet import FleetPoller
        from kvtop.runner.server.http import ServerClient
        from kvtop.runner.server.monitor import ServerMonitor

        self.app = app
        self.monitors = [ServerMonitor(ServerClient(url, app.options.api_key)) for url in app.options.servers]
        self.restart_watches = [restart_watch(m) for m in self.monitors]
        # one scheduler and a pool (runner/server/fleet.py): a hanging server holds only
        # its own row, and its daemon threads never hold up quitting
        self.poller = FleetPoller(self.monitors, self.polled, max(app.refresh_s, SERVER_POLL_S),
                                  focus=lambda: app.server_index)

    def start(self) -> None:
        self.poller.start()

    def polled(self, index: int, snapshot) -> None:
        """On a poll thread, after each poll of one server. Once the app has closed (its
        messages are refused) the polls stop: the threads would otherwise poll on in a
        process that outlives the app (the tests, an embedding program)."""
        self.note_restart(index, snapshot)
        if not self.app.post_message(msg.ServerPolled(index, snapshot)):
            self.poller.stop()

    def note_restart(self, index: int, snapshot) -> None:
        """A server that restarted is a new server: said once (``ServerRestarted``), and
        the monitor reads the new one's model name again."""
        restart = self.restart_watches[index].observe(snapshot)
        if restart is not None:
            self.monitors[index].model = None
            self.app.post_message(msg.ServerRestarted(index, restart))


def restart_watch(monitor):
    from kvtop.runner.server.identity import RestartWatch
    from kvtop.runner.server.vllm_info import restart_props

    return RestartWatch(lambda: restart_props(monitor.client, monitor.batching is not None))
