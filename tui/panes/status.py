"""The status bar: what is loaded and with which settings, or the load's progress.

The model is named by its file, as the user gave it; the GGUF's ``general.name`` is
added only where the file name does not say which model it is (``model.gguf``, an
ollama blob): metadata names are often a training run's ("Smollm2 135M 8k Lc100K
Mix1 Ep2"). The quant is the GGUF's file type (``Q4_K_M``) from kvtop's own header
reader: llama.cpp's description ends in "Q4_K - Medium", whose last word is no quant.
"""

from __future__ import annotations

import os
import re
import time

from textual.content import Content

from kvtop.runner.process.contract import Capabilities
from kvtop.runner.sanitize import clean_line
from kvtop.runner.units import fmt_int
from kvtop.tui.base.format import bar
from kvtop.tui.panes.base import PaneWidget


def _words(text: str) -> set[str]:
    return {w for w in re.split(r"[^0-9a-z]+", text.lower()) if len(w) >= 3}


def model_label(path: str, meta_name: str | None) -> tuple[str, str | None]:
    """(file name, metadata name or None): the metadata name when it shares no word of
    three or more letters with the file name, so it says something the file name does not."""
    file_name = clean_line(os.path.basename(path) or path)
    meta = clean_line(meta_name or "", 48)
    if not meta or _words(meta) & _words(file_name):
        return file_name, None
    return file_name, meta


class StatusBar(PaneWidget):
    def __init__(self, model_label: str, **kw) -> None:
        super().__init__(**kw)
        self.model_label = model_label
        self.meta_name: str | None = None
        self.fields: list[tuple[str, str]] = []
        self.load_fraction: float | None = 0.0
        self.problem: str | None = None
        self.probe_since: float | None = None
        self._probe_timer = None
        self.narrow_threads: str | None = None  # "2, last turn 1": the last turn's threads, when fewer

    def set_probing(self, running: bool) -> None:
        """The CPU probe runs before the engine starts and can take over 30 s on a busy
        machine: a frozen "loading 0%" said nothing, so the bar says what is measured
        and counts its seconds (redrawn each second) until the probe ends."""
        if self._probe_timer is not None:
            self._probe_timer.stop()
            self._probe_timer = None
        self.probe_since = time.monotonic() if running else None
        if running:
            self._probe_timer = self.set_interval(1.0, self.refresh)
        self.refresh()

    def set_loading(self, fraction: float) -> None:
        self.load_fraction = fraction
        self.refresh()

    def set_loaded(self, loaded, capabilities: Capabilities, threads_why: str, refresh_s: float, facts=None) -> None:
        """``facts``: the GGUF header's (``runner.model.facts.ModelFacts``), when read."""
        self.load_fraction = None
        self.narrow_threads = None  # a new engine: no turn ran on it yet
        if capabilities.polls_server:  # kvtop --server: which one, which build, how many slots
            self.model_label, self.meta_name = loaded.name, None
            per = "/slot" if capabilities.slots else ""  # a batching server has one context limit
            self.fields = [
                ("server", loaded.server or "?"),
                ("build", loaded.build_info or "?"),
                ("slots" if capabilities.slots else "batch", fmt_int(loaded.total_slots) if capabilities.slots
                 else "continuous"),
                ("n_ctx", f"{fmt_int(loaded.n_ctx)}{per}"),
                ("refresh", f"{refresh_s:g} s"),
            ]
            self.refresh()
            return
        self.model_label, self.meta_name = model_label(loaded.path, (facts.name if facts else None) or loaded.name)
        quant = (facts.file_type if facts is not None else None) or loaded.file_type
        self.fields = [
            ("arch", loaded.architecture),
            ("quant", clean_line(quant or "?")),
            ("n_ctx", fmt_int(loaded.n_ctx)),
            ("threads", f"{fmt_int(loaded.n_threads)}/{fmt_int(loaded.n_threads_batch)} ({threads_why})"),
            ("ngl", fmt_int(loaded.n_gpu_layers)),
            ("fa", loaded.flash_attn),
            ("kv", f"{loaded.type_k}/{loaded.type_v}" + (" swa-full" if loaded.swa_full else "")),
            *([("lora", loaded.lora)] if loaded.lora else []),
            ("refresh", f"{refresh_s:g} s"),
        ]
        self.refresh()

    def set_turn_threads(self, threads: int, threads_batch: int, engine: tuple[int, int], why: str) -> None:
        """The threads the last turn ran on: said beside the engine's when kvtop ran it on
        fewer (the free cores on a busy machine), so the bar never claims 2 while 1 ran."""
        own = f"{fmt_int(engine[0])}/{fmt_int(engine[1])}"
        self.narrow_threads = None
        value = f"{own} ({why})"
        if threads and (threads, threads_batch) != engine:
            ran = f"{fmt_int(threads)}/{fmt_int(threads_batch)}"
            value = f"{own} ({why}; last turn {ran})"
            # where the reasons do not fit, in words ("1/1 of 2/2" read as a fraction): one figure
            # each where decode and prefill have the same threads
            same = threads == threads_batch and engine[0] == engine[1]
            self.narrow_threads = (f"{fmt_int(engine[0])}, last turn {fmt_int(threads)}" if same
                                   else f"{own}, last turn {ran}")
        self.fields = [(k, value if k == "threads" else v) for k, v in self.fields]
        self.refresh()

    def set_problem(self, text: str | None) -> None:
        self.problem = text
        self.refresh()

    def render(self) -> Content:
        parts: list = [(" kvtop ", "bold $text on $primary"), " ", (self.model_label, "bold")]
        if self.meta_name:
            parts += [(f" ({self.meta_name})", "$text-muted")]
        if self.problem:
            parts += ["  ", (self.problem, "bold $kvtop-critical")]
        elif self.probe_since is not None:
            seconds = time.monotonic() - self.probe_since
            parts += [f"  measuring this machine's CPU (bandwidth, FLOPS)… {seconds:.0f} s"]
        elif self.load_fraction is not None:
            w = max(0, min(30, self.size.width - len(self.model_label) - 30))
            parts += ["  loading ", bar(w, [(self.load_fraction, "$kvtop-measured")]),
                      f" {self.load_fraction * 100:3.0f}%"]
        else:
            meta, fields = self.fitted(self.size.width or 10**6)
            if self.meta_name and not meta:
                parts.pop()  # the metadata name goes before the settings do
            for k, v in fields:
                parts += ["  ", (k, "$text-muted"), " ", v]
        return Content.assemble(*parts)

    def fitted(self, width: int) -> tuple[bool, list[tuple[str, str]]]:
        """(keep the metadata name, the fields that fit ``width``): what goes first is
        what a bug report needs least (the redraw pace, the architecture, the threads'
        reason, flash attention, KV types, ngl, then the metadata name, shown only where
        the file name says nothing, and the quant, which the file's name mostly says); n_ctx and
        the threads stay (narrowed to "2, last turn 1" when the last turn ran on fewer threads)."""
        base = len(" kvtop  ") + len(self.model_label)
        meta = bool(self.meta_name)
        fields = list(self.fields)

        def total() -> int:
            return base + (len(self.meta_name) + 3 if meta else 0) + sum(3 + len(k) + len(v) for k, v in fields)

        for step in ("usable", "refresh", "arch", "threads-why", "fa", "kv", "ngl", "lora", "meta", "quant"):
            if total() <= width:
                break
            if step == "usable":  # "all 2 usable cores" as "all 2 cores": at 160 columns, after a turn on
                # fewer threads ("; last turn 1/1"), "refresh 1 s" went for the 7 cells it took
                fields = [(k, re.sub(r"\(all (\S+) usable cores", r"(all \1 cores", v) if k == "threads" else v)
                          for k, v in fields]
            elif step == "meta":
                meta = False
            elif step == "threads-why":
                short = self.narrow_threads
                fields = [(k, (short or re.sub(r" \([^)]*\)", "", v)) if k == "threads" else v) for k, v in fields]
            else:  # the quant last: the file's name mostly says it
                fields = [f for f in fields if f[0] != step]
        return meta, fields
