"""Acceptance measured before, per model file and ``--spec-type``: what ``kvtop
estimate --spec-type`` quotes when no ``--acceptance`` is given. The app's speculative
turns add their drafted and accepted counts (``ForecastService.admit``); one small JSON
file per model and type under ``<cache>/speculation/v1/<key hash>.json``, written
atomically; a file that does not parse is ignored. Acceptance depends on the text as
much as on the model, so the file keeps the totals and the turn count, said with it.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvtop.runner.calibration.key import file_identity, key_hash
from kvtop.runner.calibration.store import write_json_atomically

if TYPE_CHECKING:
    from kvtop.runner.events import TurnMetrics

VERSION = 1


@dataclass(frozen=True)
class Measured:
    drafted: int
    accepted: int
    passes: int
    turns: int
    updated_at: float

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def draft_per_pass(self) -> float:
        return self.drafted / self.passes if self.passes else 0.0


def spec_path(cache_dir: str, model: str, spec_type: str) -> str | None:
    ident = file_identity(model)
    if ident is None:
        return None
    key: dict[str, object] = {"model": ident, "spec_type": spec_type, "what": "speculation"}
    return os.path.join(cache_dir, "speculation", f"v{VERSION}", f"{key_hash(key)}.json")


def load_measured(cache_dir: str, model: str, spec_type: str) -> Measured | None:
    path = spec_path(cache_dir, model, spec_type)
    if path is None or not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            d = json.load(fh)
        return Measured(int(d["drafted"]), int(d["accepted"]), int(d["passes"]), int(d["turns"]),
                        float(d["updated_at"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def record_turn(cache_dir: str, model: str, m: TurnMetrics, now: float | None = None) -> Measured | None:
    """Add a speculative turn's counts (nothing for a turn that drafted nothing); an
    ``OSError`` is the caller's."""
    if not m.spec_type or m.spec_drafted <= 0:
        return None
    path = spec_path(cache_dir, model, m.spec_type)
    if path is None:
        return None
    old = load_measured(cache_dir, model, m.spec_type) or Measured(0, 0, 0, 0, 0.0)
    new = Measured(old.drafted + m.spec_drafted, old.accepted + m.spec_accepted, old.passes + m.spec_passes,
                   old.turns + 1, time.time() if now is None else now)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_json_atomically(path, {"version": VERSION, "spec_type": m.spec_type, "drafted": new.drafted,
                                 "accepted": new.accepted, "passes": new.passes, "turns": new.turns,
                                 "updated_at": new.updated_at}, ".spec-")
    return new
