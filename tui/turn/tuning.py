"""The app's "find faster settings" (the command palette): ``kvtop tune``'s A/Bs run in
the engine that holds the chat, between turns (``MeasureSettings``,
runner/engine/tune_in_engine.py: each arm a context of its own on the loaded model, so
the chat's context and KV cache are never touched), at the chat's typical depth (its
turns' median prompt; 512 before the first). Progress is the Prefill pane's
bottom line ("A/B 2/5: -t 1, about 12 s left, Esc stops"); Esc, the entry again, or a
message sent stops it at the next ``llama_decode``, and the chat and the engine are
as they were. Its result lands in the cache ``kvtop tune`` keeps
(runner.calibration.tune_store), so the advice quotes it from the next verdict on;
a winner is offered as a restart of the engine with its flags (the chat kept, the
status line shows the new settings); "keep" changes nothing.

The busy rule is ``kvtop tune``'s: the other processes' share of the CPU over the run
(the engine's own CPU against the machine's) too high, and no candidate is judged.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import TYPE_CHECKING

from textual.message import Message

if TYPE_CHECKING:
    from kvtop.runner.policy.tune_messages import MeasureSettings, TuneMeasured, TuneProgress
    from kvtop.runner.policy.tuning import Base, Judgement
    from kvtop.runner.settings import Settings
    from kvtop.runner.system.cpu_use import CPUReading
    from kvtop.tui.app import KvtopApp

BUDGET_S = 60
DEPTH, N_PROMPT, N_GEN, REPS = 512, 256, 32, 3  # kvtop tune's defaults (DEPTH: before the chat has a turn)


class TuneProgressed(Message):
    def __init__(self, event: TuneProgress) -> None:
        super().__init__()
        self.event = event


class TuneFinished(Message):
    def __init__(self, event: TuneMeasured) -> None:
        super().__init__()
        self.event = event


def tune_argv(s: Settings) -> list[str]:
    """``kvtop tune``'s arguments for resolved settings ``s``: the model and its load flags."""
    out = [s.model, "-t", str(s.n_threads), "-tb", str(s.n_threads_batch), "-b", str(s.n_batch), "-ub", str(s.n_ubatch),
           "-fa", s.flash_attn, "-ctk", s.cache_type_k, "-ctv", s.cache_type_v, "-ngl", str(s.n_gpu_layers)]
    out += ["--swa-full"] * s.swa_full + ["--no-mmap"] * (not s.mmap) + ["--mlock"] * s.mlock
    return out + (["--numa", s.numa] if s.numa else [])


def settings_with(s: Settings, b: Base) -> Settings:
    """``s`` with the tuned fields of ``b`` (threads said as set by kvtop tune)."""
    out = replace(s, n_threads=b.n_threads, n_threads_batch=b.n_threads_batch, n_ubatch=b.n_ubatch, n_batch=b.n_batch,
                  flash_attn=b.flash_attn, cache_type_k=b.cache_type_k, cache_type_v=b.cache_type_v,
                  n_gpu_layers=b.n_gpu_layers)
    if (b.n_threads, b.n_threads_batch) != (s.n_threads, s.n_threads_batch):
        out = replace(out, threads_why="set by find faster settings (kvtop tune)")
    return out


def typical_depth(turns: list) -> int:
    """The chat's typical depth: its turns' median prompt, in tokens; ``DEPTH`` before any turn."""
    depths = sorted(t.metrics.prompt_tokens for t in turns if t.metrics.prompt_tokens)
    return depths[len(depths) // 2] if depths else DEPTH


def judged(m: TuneMeasured, busy: float | None) -> list[Judgement]:
    """``kvtop tune``'s judgements of the engine's rates (runner.policy.tuning)."""
    from kvtop.runner.policy.tuning import Judgement, Metric

    out = []
    for p in m.pairs:
        a, b = dict(p.base), dict(p.cand)
        metrics = {k: Metric(a.get(k, ()), b.get(k, ())) for k in p.candidate.measures if a.get(k) or b.get(k)}
        out.append(Judgement(p.candidate, metrics, busy, p.partial))
    return out


class TuneRunner:
    def __init__(self, app: KvtopApp) -> None:
        self.app = app
        self.request: MeasureSettings | None = None
        self.engine: object = None  # the engine measuring: a restart (Ctrl+R, a death) ends the run with it
        self.cpu_start: CPUReading | None = None
        self.last: list[Judgement] = []  # the last run's judgements (tests read them)

    @property
    def running(self) -> bool:
        if self.request is not None and self.engine is not self.app.session.engine:
            self.request = None  # its engine was replaced: the run went with it
            self._show("")
        return self.request is not None

    def toggle(self) -> None:
        if self.running:
            self.cancel()
            return
        self.start()

    def start(self) -> None:
        app = self.app
        caps = app.session.engine.capabilities
        if not caps.can_restart or not caps.llama_buffers or not caps.runs_model:
            app.notify("find faster settings measures kvtop's own engine: not a server's or a replay",
                       severity="warning", markup=False)
            return
        if app.session.turn_running or app.session.loaded is None:
            app.notify("find faster settings runs between turns: when this reply ends (or the model has loaded)",
                       severity="warning", markup=False)
            return
        from kvtop.runner.commands.tune import base_of
        from kvtop.runner.policy.tune_messages import MeasureSettings
        from kvtop.runner.policy.tuning import candidate_list
        from kvtop.runner.settings import usable_cores

        s = app.settings.resolved()
        base = base_of(s)
        cands = tuple(candidate_list(base, usable_cores(), False, N_PROMPT))  # -ngl: kvtop tune's (a load of its own)
        depth = min(typical_depth(app.turns), max(0, app.session.loaded.n_ctx - N_PROMPT - N_GEN - 8))
        # an id in the turns' sequence: a later turn's cancel covers it, and its cancel no later turn
        app.session._next_turn += 1
        self.request = MeasureSettings(app.session._next_turn, base, cands, depth, N_PROMPT, N_GEN, REPS,
                                       float(BUDGET_S))
        self.cpu_start = self._cpu()
        self.engine = app.session.engine
        app.session.engine.submit(self.request)
        self._show(f"find faster settings: starting, up to {BUDGET_S} s (Esc stops)")
        app.notify(f"finding faster settings in the engine, between turns, for up to {BUDGET_S} s: Esc stops it "
                   f"and leaves the chat as it is", markup=False)

    def cancel(self) -> bool:
        """Esc, the entry again, or a message sent: stop the run in flight (True if one was)."""
        if not self.running or self.request is None:
            return False
        self.app.session.engine.cancel(self.request.turn_id)
        self._show("find faster settings: stopping…")
        return True

    def _cpu(self) -> CPUReading | None:
        from kvtop.runner.system.cpu_use import read_cpu

        pid = self.app.session.engine.pid
        return read_cpu(pid, os.getpid()) if pid else None

    def _show(self, text: str) -> None:
        self.app.dash.prefill.border_subtitle = text

    def progress(self, e: TuneProgress) -> None:
        if not self.running or self.request is None or e.turn_id != self.request.turn_id:
            return
        eta = f", about {e.eta_s:.0f} s left" if e.eta_s is not None else ""
        self._show(f"find faster settings: A/B {e.index}/{e.total}: {e.flag}{eta} (Esc stops)")

    def finished(self, e: TuneMeasured) -> None:
        from kvtop.runner.calibration.busy import too_busy
        from kvtop.runner.system.cpu_use import cpu_use

        if not self.running or self.request is None or e.turn_id != self.request.turn_id:
            return
        req, self.request = self.request, None
        self._show("")
        end = self._cpu()
        share = cpu_use(self.cpu_start, end).others_share if self.cpu_start and end else None
        self.last = judged(e, share if too_busy(share) else None)
        self._save(req)
        if e.cancelled:
            self.app.notify("find faster settings stopped: the chat and the engine are as they were"
                            + ("; what it measured whole is kept" if any(not j.partial for j in self.last) else ""),
                            markup=False)
            return
        from kvtop.runner.policy.tune_messages import TOO_SMALL

        small = next((why for _c, why in e.skipped if why.startswith(TOO_SMALL)), None)
        if small is not None and not self.last:  # not even one A/B fitted: say which budget would
            self.app.notify(f"find faster settings: {BUDGET_S} s cannot hold one A/B here ({small} s): "
                            f"kvtop tune --budget {small.rsplit(' ', 1)[1]} measures it", severity="warning",
                            timeout=15, markup=False)
            return
        self._offer(req)

    def _save(self, req: MeasureSettings) -> None:
        from kvtop.runner.calibration.tune_store import save_tune
        from kvtop.runner.commands.tune_cache import evidence_for, measured
        from kvtop.runner.records.paths import default_paths

        app = self.app
        results = [measured(j) for j in self.last if not j.partial]
        if results:  # where kvtop tune keeps its results, and the advice reads them
            try:
                save_tune(default_paths().cache_dir, app.settings.resolved(), req.depth, results)
            except OSError:
                pass
        app.estimates.tuned = evidence_for(app.settings.resolved())

    def _offer(self, req: MeasureSettings) -> None:
        from kvtop.runner.policy.tuning import recommend
        from kvtop.tui.turn.tuning_dialog import RestartWithWinner

        app = self.app
        wins = recommend(self.last)
        if not wins:
            busy = any(j.busy is not None for j in self.last)
            app.notify("find faster settings: keep these settings ("
                       + ("the machine was busy: nothing judged" if busy else
                          "nothing was faster beyond its run-to-run spread" if self.last else "nothing was measured")
                       + ")", timeout=15, markup=False)
            return
        b = req.base
        for j in wins:
            b = j.candidate.applied(b)
        flags = " ".join(j.candidate.flag for j in wins)
        gains = "; ".join(f"{j.candidate.flag}: {j.gains_text(req.depth)}" for j in wins)
        new = settings_with(app.settings.resolved(), b)

        def answer(yes: bool | None) -> None:
            if yes:
                self.restart_with(new, flags, gains)

        app.push_screen(RestartWithWinner(flags, gains), answer)

    def restart_with(self, new: Settings, flags: str, gains: str) -> None:
        """Restart the engine with the winner's settings; the chat stays."""
        app = self.app
        app.settings = new.resolved()
        app.session.settings = app.settings
        app.control.fresh("turn lost: the engine was restarted", f"engine restarted with {flags} ({gains}, measured "
                          f"by find faster settings)")
