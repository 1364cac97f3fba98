"""The app's "find faster settings" (the command palette): ``kvtop tune`` for the
engine's model and settings, run between turns in a process of its own, beside the
chat (the chat and its engine are untouched; the engine idles while it runs). Its
result lands in the cache ``kvtop tune`` keeps (runner.calibration.tune_store), so the
Estimate pane's and F2's advice quote it from the next verdict on, and the
recommended command line is shown. The same entry again while it runs stops it
(Ctrl+C to it: what was measured is kept); quitting kvtop stops it too.

Not yet: measuring inside the app's own engine, a progress bar, and restarting the
engine with the winner (issue 39 item 2): the recommendation is shown to restart with.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvtop.runner.settings import Settings
    from kvtop.tui.app import KvtopApp

BUDGET_S = 60


def tune_argv(s: Settings) -> list[str]:
    """``kvtop tune``'s arguments for resolved settings ``s``: the model and its load flags."""
    out = [s.model, "-t", str(s.n_threads), "-tb", str(s.n_threads_batch), "-b", str(s.n_batch), "-ub", str(s.n_ubatch),
           "-fa", s.flash_attn, "-ctk", s.cache_type_k, "-ctv", s.cache_type_v, "-ngl", str(s.n_gpu_layers)]
    out += ["--swa-full"] * s.swa_full + ["--no-mmap"] * (not s.mmap) + ["--mlock"] * s.mlock
    return out + (["--numa", s.numa] if s.numa else [])


class TuneRunner:
    def __init__(self, app: KvtopApp) -> None:
        self.app = app
        self.proc: subprocess.Popen[str] | None = None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def toggle(self) -> None:
        app = self.app
        if self.running:
            self.stop()
            app.notify("stopping kvtop tune: what it measured is kept", markup=False)
            return
        caps = app.session.engine.capabilities
        if not caps.can_restart or not caps.llama_buffers:
            app.notify("find faster settings measures kvtop's own engine: not a server's or a replay",
                       severity="warning", markup=False)
            return
        if app.session.turn_running:
            app.notify("find faster settings runs between turns: when this reply ends", severity="warning",
                       markup=False)
            return
        cmd = [sys.executable, "-m", "kvtop", "tune", *tune_argv(app.settings.resolved()), "-o", "json",
               "--budget", str(BUDGET_S)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        app.notify(f"finding faster settings: kvtop tune measures for up to {BUDGET_S} s beside the chat "
                   f"(this entry again stops it)", markup=False)
        threading.Thread(target=self._wait, args=(self.proc,), daemon=True, name="kvtop-tune").start()

    def stop(self) -> None:
        if self.running and self.proc is not None:
            self.proc.send_signal(signal.SIGINT)

    def _wait(self, proc: subprocess.Popen[str]) -> None:
        out, _ = proc.communicate()
        try:
            self.app.call_from_thread(self._done, out)
        except RuntimeError:  # the app has ended
            pass

    def _done(self, out: str) -> None:
        from kvtop.runner.commands.tune_cache import evidence_for

        app = self.app
        app.estimates.tuned = evidence_for(app.settings.resolved())
        try:
            j = json.loads(out)
        except ValueError:
            app.notify("kvtop tune measured nothing", severity="warning", markup=False)
            return
        rec = j.get("recommended") if isinstance(j, dict) else None
        partial = " (partial)" if isinstance(j, dict) and j.get("partial") else ""
        if rec:
            app.notify(f"faster here{partial}: {rec.get('command', '')}", timeout=30, markup=False)
        else:
            app.notify(f"kvtop tune{partial}: keep these settings (nothing was faster beyond its spread, or the "
                       f"machine was busy)", timeout=15, markup=False)
