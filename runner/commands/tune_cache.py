"""``kvtop tune``'s result into the cache (runner.calibration.tune_store), and read back
for the advice the commands and the app print."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvtop.runner.policy.tune_evidence import Measured, TuneEvidence

if TYPE_CHECKING:
    from kvtop.runner.commands.tune_output import Outcome
    from kvtop.runner.policy.tuning import Judgement
    from kvtop.runner.settings import Settings


def measured(j: Judgement) -> Measured:
    verdict = "not judged" if j.busy is not None or j.partial else \
        "faster" if j.wins else "slower" if j.loses else "same"
    d, p = j.metrics.get("decode"), j.metrics.get("prefill")
    return Measured(j.candidate.flag, j.candidate.group, verdict, d.gain if d else None, p.gain if p else None,
                    j.candidate.precision)


def save_result(settings: Settings, out: Outcome) -> bool:
    """Keep the run's judged candidates (a run stopped before any finished keeps nothing);
    False where the cache folder cannot be written."""
    from kvtop.runner.calibration.tune_store import save_tune
    from kvtop.runner.records.paths import default_paths

    results = [measured(j) for j in out.judged if not j.partial]
    if not results:
        return False
    try:
        save_tune(default_paths().cache_dir, settings, out.sizes.depth, results)
    except OSError:
        return False
    return True


def evidence_for(settings: Settings) -> TuneEvidence | None:
    """The cached evidence for these settings in kvtop's cache folder, or None."""
    from kvtop.runner.calibration.tune_store import load_tune
    from kvtop.runner.records.paths import default_paths

    try:
        return load_tune(default_paths().cache_dir, settings)
    except OSError:
        return None
