"""The one owner of ``app.here`` (runner.physics.here ``Here``: the model on this machine).

``here`` changes three ways: the model file was read and the machine probed (the KV
cache at the settings' n_ctx), the engine loaded (the cache it allocated: kvtop's at
its n_ctx, a server's every slot's), and the CPU was probed again. Each goes through
``Machine``, and one path (``_show``) updates every pane drawn from it: the KV pane's
layout, the Decode pane's ceilings and the Estimate pane's rows; the forecast service
is opened again on the new ``here`` once an engine is loaded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvtop.runner.physics.here import CacheShown, Here

if TYPE_CHECKING:
    from kvtop.runner.events import Loaded
    from kvtop.tui.app import KvtopApp


class Machine:
    def __init__(self, app: KvtopApp) -> None:
        self.app = app
        self.here: Here | None = None
        self.cache: CacheShown | None = None

    def inspected(self, facts, layout, hw, settings) -> None:
        """The GGUF header read and the machine probed (``ModelInspected``)."""
        self.here = Here.known(facts, layout, hw, settings)
        self.cache = CacheShown(self.here.layout.n_ctx) if self.here is not None else None
        self._show()

    def loaded(self, loaded: Loaded) -> None:
        """The engine loaded: ``here`` with the cache it allocated, and the forecast service on it."""
        if self.here is not None:
            self.here, self.cache = self.here.fitted(loaded, self.app.session.engine.capabilities.llama_buffers)
        self._show(loaded)
        self.app.estimates.setup_calibration(loaded)

    def reprobed(self, hw) -> None:
        """The CPU was probed again: the same model and cache, the new figures."""
        if self.here is not None:
            self.here = self.here.with_hardware(hw)
        self._show()
        self.app.estimates.setup_calibration()

    def _show(self, loaded: Loaded | None = None) -> None:
        dash = self.app.dash
        if self.here is not None and self.cache is not None:
            c = self.cache
            dash.kv.set_layout(self.here.layout, c.n_ctx, c.allocated_bytes, c.slots)
        dash.decode.set_here(self.here)
        self.app.estimates.update(loaded=loaded)
