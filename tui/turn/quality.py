"""The palette's "measure quality of the KV cache" (F7): the chat on screen through a base
cache and each candidate in contexts of their own on the engine's model
(runner/engine/live_kld.py), between turns; the chat's own context and cache stay as they
were, so its next turn is the turn it would have been. The prefill pane shows the
measurement's progress, Esc stops it (a message sent stops it too, then goes), the KV
pane then carries a quality line per cache type and the Estimate pane the advice it
gives. Each finished measurement is kept per model, cache types and chat (numbers only:
runner/commands/kld_cache.py), and the best kept one is shown from the next start with
the tokens it rests on. An engine that cannot open a second context (a llama-server, a
replay) says so in one line.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from textual.message import Message

from kvtop.runner import events as ev
from kvtop.runner.physics.kv_quality import Quality, advice, brief, chat_digest, entry, kept, line
from kvtop.tui.base.guards import while_running

if TYPE_CHECKING:
    from kvtop.tui.app import KvtopApp


@dataclass(eq=False)
class QualityProgress(Message):
    progress: ev.KldProgress

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, QualityProgress)


@dataclass(eq=False)
class QualityMeasured(Message):
    measured: ev.KldMeasured


def _name(pair: tuple[str, str]) -> str:
    return f"{pair[0]}/{pair[1]}"


class LiveQuality:
    def __init__(self, app: KvtopApp) -> None:
        self.app = app
        self.turn_id: int | None = None  # the measurement in flight (an id from the turns' counter)
        self.digest = ""  # the measured chat's key in the kept measurements
        self.engine: object = None  # the engine asked: a restarted one never answers
        self.shown: list[Quality] = []  # what the KV pane's lines say
        # the last whole measurement's seconds per chat token (its base and candidates'
        # passes and the KLD over the vocabulary), with the cache types it ran
        self.pace: tuple[tuple[str, str], float] | None = None

    @property
    def running(self) -> bool:
        engine = self.app.session.engine
        return self.turn_id is not None and engine is self.engine and engine.alive()

    def _running_types(self) -> tuple[str, str]:
        s = self.app.settings
        return s.cache_type_k, s.cache_type_v

    def toggle(self) -> None:
        """The palette's entry and F7: measure now, or stop the measurement in flight."""
        from kvtop.runner.engine.live_kld import live_pairs
        from kvtop.runner.process.commands import MeasureKld
        from kvtop.runner.session.chat import reserve_id

        app = self.app
        if self.running:
            self.cancel()
            return
        session = app.session
        why = None
        if not session.engine.capabilities.second_context:
            why = ("measuring the KV cache's quality needs a second context on the model, beside the chat's: "
                   "kvtop's own engine has one, a llama-server's or a replay's does not")
        elif session.turn_running:
            why = "the KV cache's quality is measured between turns: when this reply ends"
        elif session.loaded is None:
            why = "the model is still loading"
        elif not session.messages:
            why = "nothing to measure yet: the measurement runs on the chat on screen (send a message first)"
        if why:
            app.notify(why, severity="warning", markup=False)
            return
        base, cands = live_pairs(*self._running_types())
        self.digest = chat_digest([(m.role, m.content) for m in session.messages] + [("n_ctx", str(self._n_ctx()))])
        if self._show_measured(base, cands):
            return
        self.turn_id, self.engine = reserve_id(session), session.engine
        session.engine.submit(MeasureKld(self.turn_id, tuple(session.messages)))
        what = ", ".join(_name(c) for c in cands)
        app.dash.prefill.measuring(f"measuring {what} against {_name(base)} (Esc stops)")
        app.notify(f"measuring the KV cache's quality on this chat: {what} against {_name(base)}, in contexts of "
                   f"their own beside the chat's (Esc stops)", markup=False)

    def _show_measured(self, base: tuple[str, str], cands: tuple[tuple[str, str], ...]) -> bool:
        """This very chat measured before with these caches (kept): shown, not measured again."""
        from kvtop.runner.commands.kld_cache import measured

        mine = [e for e in measured(self.app.paths.cache_dir, self.app.settings.model)
                if e.get("text_sha256") == self.digest and e.get("source") == "chat"]
        found = [kept(mine, base, pair) for pair in cands]
        if not all(found):
            return False
        self._show([self._kept(e, base, pair, here=True) for e, pair in zip(found, cands) if e is not None])
        self.app.notify("this chat's KV quality was measured before with these caches: shown from what was kept",
                        markup=False)
        return True

    def _kept(self, e: dict[str, Any], base: tuple[str, str], pair: tuple[str, str], here: bool = False) -> Quality:
        return Quality(pair[0], pair[1], base[0], base[1], e["count"], e["kld_mean"], e["kld_99"], e["same_top"],
                       int(e.get("n_ctx") or e["count"]), here, self._bytes(pair), self._bytes(base), self._n_ctx(),
                       source=str(e.get("source", "")))

    def cancel(self) -> bool:
        """Esc (or a message sent): stop the measurement in flight; False when none runs."""
        if not self.running:
            return False
        self.app.session.engine.cancel(self.turn_id)
        self.app.notify("stopping the quality measurement", markup=False, timeout=2)
        return True

    def chat_cleared(self) -> None:
        """A new chat (or one brought back): a measurement in flight stops, and the lines
        say what they rest on ("an earlier chat", no longer "this chat")."""
        self.cancel()
        if any(q.here for q in self.shown):
            self._show([replace(q, here=False) for q in self.shown])

    def chat_back(self) -> None:
        """Ctrl+Z brought a chat back: lines measured on it are of this chat again (they
        read "an earlier chat" after Ctrl+Z of the very chat they were measured on)."""
        messages = self.app.session.messages
        if not self.digest or not messages or all(q.here for q in self.shown):
            return
        now = chat_digest([(m.role, m.content) for m in messages] + [("n_ctx", str(self._n_ctx()))])
        if now == self.digest:
            self._show([replace(q, here=True) for q in self.shown])

    def _show(self, shown: list[Quality], suffix: str = "", errors: list[str] | None = None) -> None:
        self.shown = shown
        self.app.dash.kv.set_quality([line(q, self._running_types()) + suffix for q in shown] + (errors or []),
                                     [brief(q) for q in shown] + (errors or []))
        self.app.dash.estimate.set_quality(advice(shown, self._running_types()))

    def progress(self, p: ev.KldProgress) -> None:
        if p.turn_id == self.turn_id or self.app.session.engine.capabilities.replaying:
            self.app.dash.prefill.measured_so_far(p.done, p.total, p.elapsed_s)
            if p.done == 0:  # the chat's size, before its first slice: the ETA is the forecast's until one reports
                self.app.dash.prefill.expect(self._forecast_s(p.total), 0)
            elif p.done >= p.total and p.elapsed_s > 0:
                self.pace = (self._running_types(), p.elapsed_s / p.total)

    def _forecast_s(self, n: int) -> float | None:
        """The measurement's forecast: the chat's ``n`` tokens computed from scratch, once
        through the base cache and once through each candidate (None: no calibration). The
        last measurement's own pace when there is one: the prefill forecast leaves out the
        KLD over the whole vocabulary at every token (a trial: 7.66 s forecast, 26 s taken)."""
        from kvtop.runner.engine.live_kld import live_pairs

        if self.pace is not None and self.pace[0] == self._running_types():
            return n * self.pace[1]
        fc = self.app.estimates.forecast(n, 0, 1)
        if fc is None or fc.prefill_s is None:
            return None
        return fc.prefill_s * (1 + len(live_pairs(*self._running_types())[1]))

    def measured(self, m: ev.KldMeasured) -> None:
        app = self.app
        replaying = app.session.engine.capabilities.replaying
        if m.turn_id != self.turn_id and not replaying:
            return  # a measurement the engine answered after a restart: not this one
        self.turn_id = None
        app.dash.prefill.measurement_over(m.stopped)
        done = [p for p in m.pairs if p.error is None and p.count]
        if m.stopped and m.stopped != "cancelled" and not done:
            app.notify(f"quality not measured: {m.stopped}", severity="warning", markup=False)
        shown = [self._quality(m, p) for p in done]
        if not replaying and not m.stopped:
            self._keep(shown, {(p.type_k, p.type_v): p.rms_p_diff for p in done})
        errors = [f"{p.type_k}/{p.type_v}: not measured: {p.error}" for p in m.pairs if p.error is not None]
        if shown or errors:
            self._show(shown, errors=errors)

    def _quality(self, m: ev.KldMeasured, p: ev.KldPair) -> Quality:
        cand, base = self._bytes((p.type_k, p.type_v)), self._bytes((m.base_type_k, m.base_type_v))
        return Quality(p.type_k, p.type_v, m.base_type_k, m.base_type_v, p.count, p.kld_mean, p.kld_99, p.same_top,
                       m.n_tokens, True, cand, base, self._n_ctx(), partial=m.stopped is not None)

    def _n_ctx(self) -> int:
        loaded = self.app.session.loaded
        return loaded.n_ctx if loaded is not None else self.app.settings.n_ctx

    def _bytes(self, pair: tuple[str, str]) -> int | None:
        """KV bytes at the chat's context with ``pair`` (runner/physics/kv_bytes.py)."""
        from kvtop.runner.physics.kv_bytes import kv_layout

        facts, s = self.app.facts, self.app.settings
        if facts is None or not getattr(facts, "layers", None):
            return None
        try:
            return int(kv_layout(facts, self._n_ctx(), pair[0], pair[1], s.swa_full, s.n_ubatch).bytes_allocated)
        except (KeyError, ValueError):
            return None

    def _keep(self, shown: list[Quality], rms: dict[tuple[str, str], float]) -> None:
        from kvtop.runner.commands.kld_cache import remember

        for q in shown:
            remember(self.app.paths.cache_dir, self.app.settings.model,
                     entry(q, rms[(q.type_k, q.type_v)], self.digest))

    def show_kept(self) -> None:
        """At load: the best kept measurement for these cache types, with the tokens it rests on."""
        from kvtop.runner.commands.kld_cache import measured
        from kvtop.runner.engine.live_kld import live_pairs

        app = self.app
        if app.session.engine.capabilities.replaying or self.shown:  # a restart keeps what this run measured
            return
        try:
            entries = measured(app.paths.cache_dir, app.settings.model)
        except OSError:
            return
        base, cands = live_pairs(*self._running_types())
        shown = []
        for pair in cands:
            e = kept(entries, base, pair)
            if e is not None:
                shown.append(self._kept(e, base, pair))
        if shown:
            self._show(shown, " (kept; F7 measures this one)")


class QualityRouting:
    """Mixed into the App: the measurement's messages (tui/events/bridge.py posts them)."""

    quality: LiveQuality

    @while_running
    def on_quality_progress(self, m: QualityProgress) -> None:
        self.quality.progress(m.progress)

    @while_running
    def on_quality_measured(self, m: QualityMeasured) -> None:
        self.quality.measured(m.measured)
