"""The status bar: what is loaded and with which settings, or the load's progress."""

from __future__ import annotations

from textual.content import Content

from ..format import bar
from .base import PaneWidget


class StatusBar(PaneWidget):
    def __init__(self, model_label: str, **kw) -> None:
        super().__init__(**kw)
        self.model_label = model_label
        self.fields: list[tuple[str, str]] = []
        self.load_fraction: float | None = 0.0
        self.problem: str | None = None

    def set_loading(self, fraction: float) -> None:
        self.load_fraction = fraction
        self.refresh()

    def set_loaded(self, loaded, threads_why: str, refresh_s: float) -> None:
        self.load_fraction = None
        self.model_label = loaded.name
        if loaded.server is not None:  # kvtop --server: which server, which build, how many slots
            self.fields = [
                ("server", loaded.server),
                ("build", loaded.build_info or "?"),
                ("slots", str(loaded.total_slots)),
                ("n_ctx", f"{loaded.n_ctx:,}/slot"),
                ("refresh", f"{refresh_s:g} s"),
            ]
            self.refresh()
            return
        self.fields = [
            ("arch", loaded.architecture),
            ("quant", loaded.file_type),
            ("n_ctx", f"{loaded.n_ctx:,}"),
            ("threads", f"{loaded.n_threads}/{loaded.n_threads_batch} ({threads_why})"),
            ("ngl", str(loaded.n_gpu_layers)),
            ("fa", loaded.flash_attn),
            ("kv", f"{loaded.type_k}/{loaded.type_v}" + (" swa-full" if loaded.swa_full else "")),
            ("refresh", f"{refresh_s:g} s"),
        ]
        self.refresh()

    def set_problem(self, text: str | None) -> None:
        self.problem = text
        self.refresh()

    def render(self) -> Content:
        parts: list = [(" kvtop ", "bold $text on $primary"), " ", (self.model_label, "bold")]
        if self.problem:
            parts += ["  ", (self.problem, "bold $kvtop-critical")]
        elif self.load_fraction is not None:
            w = max(0, min(30, self.size.width - len(self.model_label) - 30))
            parts += ["  loading ", bar(w, [(self.load_fraction, "$kvtop-measured")]),
                      f" {self.load_fraction * 100:3.0f}%"]
        else:
            for k, v in self.fields:
                parts += ["  ", (k, "$text-muted"), " ", v]
        return Content.assemble(*parts)
