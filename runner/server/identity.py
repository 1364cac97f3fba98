"""Is the server behind the URL still the one kvtop attached to?

A llama-server that restarts is a new server: its slots, their caches, its counters and
any reply it was streaming are gone, and it may come back with another ``-np``, ``-c``,
model or build. Without noticing, kvtop kept the old server's slot count and n_ctx in
the status bar and physics, and a lost turn's "no token for 2m13s" ran into the next one.

``RestartWatch`` is fed every poll's snapshot and says once when the server is another
process. What a llama-server itself shows of that (its source, ``tools/server``):

- ``/props``: ``build_info``, ``model_path``, ``total_slots`` (``-np``) and
  ``default_generation_settings.n_ctx`` (per slot). A change in any is a new server.
- ``/slots``: one entry per slot with its ``n_ctx``, so a new slot count or size shows
  on the next poll without asking ``/props``; ``id_task`` comes from one counter per
  process that only grows, so the highest task id going back means a new process.
- ``/metrics``: counters "since the server started" (``prompt_tokens_total``,
  ``tokens_predicted_total``) only grow within one process; going back means a restart.
  Its ``Process-Start-Time-Unix`` header (``monitor.START_HEADER``) is one value per
  process: another value is a restart, the one sign that shows a restart with the same
  settings and no traffic (counters at 0 both sides, no task ids) at the next poll.
- A gap (unreachable, or answering 503 while it loads its model) followed by answers:
  ``/props`` is read again and compared; same answers and counters that did not go back
  are a network blip, not a restart.

``/props`` is read only at the first answer and after a sign, never every poll (it
carries the chat template: kilobytes).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvtop.runner.sanitize import clean_line
from kvtop.runner.units import fmt_int

if TYPE_CHECKING:
    from kvtop.runner.server.monitor import ServerSnapshot


def _count(v: object, lo: int, hi: int) -> int | None:
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and lo <= v <= hi:
        return int(v)
    return None


@dataclass(frozen=True)
class ServerIdentity:
    """What makes one llama-server process different from another on the same URL."""

    build_info: str | None
    model: str | None  # the model's file name (the path's last part)
    total_slots: int | None
    n_ctx: int | None  # per slot
    engine: str = "llama-server"  # what the server said it is (a vLLM: runner/server/vllm_info.py)

    @classmethod
    def from_props(cls, props: object) -> ServerIdentity | None:
        """``/props`` as llama-server answers it; None when it is not a dict."""
        if not isinstance(props, dict):
            return None
        gen = props.get("default_generation_settings")
        path, build = props.get("model_path"), props.get("build_info")
        return cls(
            build_info=clean_line(build, 80) if isinstance(build, str) and build else None,
            model=clean_line(path.replace("\\", "/").rsplit("/", 1)[-1], 120) if isinstance(path, str) and path else None,
            total_slots=_count(props.get("total_slots"), 1, 1 << 20),
            n_ctx=_count(gen.get("n_ctx"), 1, 1 << 40) if isinstance(gen, dict) else None,
            engine="vLLM" if props.get("engine") == "vLLM" else "llama-server",
        )

    def changed(self, old: ServerIdentity) -> tuple[str, ...]:
        """The fields that differ from ``old`` (an unknown on either side is no change)."""
        return tuple(f for f in ("model", "total_slots", "n_ctx", "build_info")
                     if getattr(self, f) is not None and getattr(old, f) is not None
                     and getattr(self, f) != getattr(old, f))

    def describe(self, fields: Iterable[str]) -> list[str]:
        """Those fields as a user reads them: ``2 slots``, ``n_ctx 1,024/slot``."""
        out = []
        for f in fields:
            v = getattr(self, f)
            if v is None:
                continue
            out.append({"model": f"model {v}", "build_info": f"build {v}", "n_ctx": f"n_ctx {fmt_int(v)}/slot",
                        "total_slots": f"{fmt_int(v)} slot{'' if v == 1 else 's'}"}[f])
        return out


@dataclass(frozen=True)
class ServerRestart:
    """A restart seen: the new server, the old one, and how it showed."""

    identity: ServerIdentity
    old: ServerIdentity
    sign: str  # how it showed when /props is the same ("its token counters started over")

    @property
    def changed(self) -> tuple[str, ...]:
        return self.identity.changed(self.old)

    def line(self) -> str:
        """One line for the chat and the server pane:
        ``llama-server restarted: now 2 slots, n_ctx 1,024/slot (was 4 slots)``."""
        changed = self.changed
        shown = [f for f in ("model", "build_info") if f in changed] + ["total_slots", "n_ctx"]
        now = ", ".join(self.identity.describe(shown)) or "unknown settings"
        why = f"was {', '.join(self.old.describe(changed))}" if changed else f"same settings; {self.sign}"
        return clean_line(f"{self.identity.engine} restarted: now {now} ({why})", 300)


@dataclass
class _Seen:
    """The last answering poll's figures that only change with a new process."""

    slots: tuple[int, int | None] | None = None  # (count, n_ctx of the first) from /slots
    totals: tuple[int | None, int | None] = (None, None)  # prompt, generated tokens since start
    top_task: int | None = None  # the highest id_task in /slots
    started: str | None = None  # /metrics' Process-Start-Time-Unix: one value per process


def _seen(snap: ServerSnapshot) -> _Seen:
    slots = (len(snap.slots), snap.slots[0].n_ctx) if snap.slots and not snap.slots_note else None
    r = snap.rates
    totals = (r.prompt_tokens_total, r.gen_tokens_total) if r is not None else (None, None)
    tasks = [s.id_task for s in snap.slots if s.id_task is not None and s.id_task >= 0]
    return _Seen(slots, totals, max(tasks) if tasks else None, snap.started)


def _signs(old: _Seen, new: _Seen) -> list[str]:
    """Signs of a new process between two answering polls (each impossible within one)."""
    out = []
    if old.slots is not None and new.slots is not None and old.slots != new.slots:
        out.append("its /slots changed")
    if any(o is not None and n is not None and n < o for o, n in zip(old.totals, new.totals)):
        out.append("its token counters started over")
    if old.top_task is not None and new.top_task is not None and new.top_task < old.top_task:
        out.append("its task ids started over")
    if old.started is not None and new.started is not None and old.started != new.started:
        out.append("it started again")  # the only sign of a restart with the same settings and no traffic
    return out


class RestartWatch:
    """Fed each poll of one server (``observe``); says once per restart.

    ``read_props`` returns ``/props`` (or raises); it is called at the first answer and
    after a sign or a gap, from the polling thread."""

    def __init__(self, read_props: Callable[[], object]):
        self._read_props = read_props
        self.identity: ServerIdentity | None = None
        self._seen: _Seen | None = None
        self._gap = False  # the server stopped answering since the last answer

    def _props(self) -> ServerIdentity | None:
        try:
            return ServerIdentity.from_props(self._read_props())
        except Exception:  # an answer that fails to read is no identity, never a crash
            return None

    def observe(self, snap: ServerSnapshot) -> ServerRestart | None:
        answering = snap.reachable and (bool(snap.slots) or snap.rates is not None)
        if not answering:
            self._gap = self._gap or self._seen is not None
            return None
        seen, old = _seen(snap), self._seen
        self._seen = seen
        if old is None or self.identity is None:  # the first answer: the server kvtop knows
            self.identity = self._props() or _from_slots(seen)
            return None
        signs, gap = _signs(old, seen), self._gap
        self._gap = False
        if not signs and not gap:
            return None
        new = self._props() or _from_slots(seen, self.identity.engine)  # /props did not answer: what /slots shows
        if not new.changed(self.identity) and not signs:
            return None  # back after a gap with the same answers: a network blip, not a restart
        restart = ServerRestart(new, self.identity, signs[0] if signs else "")
        self.identity = new
        return restart


def _from_slots(seen: _Seen, engine: str = "llama-server") -> ServerIdentity:
    count, n_ctx = seen.slots or (None, None)
    return ServerIdentity(None, None, count, n_ctx, engine)
