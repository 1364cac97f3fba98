"""``kvtop estimate``'s forecast: what this machine did for this model before
(runner.calibration, filled by the app's turns and ``kvtop bench``), beside the
roofline; "roofline" with no calibration yet. The same key as the app's: the model
file, the machine and the settings given here (``-t``, ``-ngl``, KV types, ``-fa``,
``-b``, ``-ub``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvtop.runner.commands.common import Report
from kvtop.runner.units import fmt_int, fmt_rate, fmt_seconds

if TYPE_CHECKING:
    import argparse

    from kvtop.runner.calibration.load import CPULoad
    from kvtop.runner.physics.here import Here
    from kvtop.runner.policy.tune_evidence import TuneEvidence
    from kvtop.runner.settings import Settings


def add_forecast_flags(p: argparse.ArgumentParser) -> None:
    from kvtop.runner.cli_types import non_negative_int

    p.add_argument("-t", "--threads", type=non_negative_int, default=0,
                   help="the threads the forecast is for (default: kvtop's, as the app uses)")


LOAD_S = 1.0  # today's load: what other processes use over one second, as the Memory pane's line


def load_here(a: argparse.Namespace, server: str | None) -> CPULoad | None:
    """Other processes' use of this CPU now (``CPULoad``), measured over ``LOAD_S``; None
    for a server elsewhere (its machine's load is not this one's) or without a model."""
    from kvtop.runner.calibration.load import CPULoad
    from kvtop.runner.server.urls import is_loopback
    from kvtop.runner.system.cpu_use import others_over

    if not a.model or (server and not is_loopback(server)):
        return None
    use = others_over(LOAD_S)
    return CPULoad(use.others, use.cores) if use.others is not None else None


def estimate_settings(a: argparse.Namespace) -> Settings:
    """The llama.cpp settings the flags give (``-c``, ``-t``, ``-b``, ``-ub``, ``-ngl``,
    ``-fa``, KV types, ``--swa-full``), resolved as the app resolves its own: the
    calibration's key and the machine model's settings."""
    from kvtop.runner.settings import Settings

    return Settings(a.model, n_ctx=a.ctx, n_threads=a.threads, n_batch=a.batch_size, n_ubatch=a.ubatch_size,
                    n_gpu_layers=a.n_gpu_layers, flash_attn=a.flash_attn, cache_type_k=a.cache_type_k,
                    cache_type_v=a.cache_type_v, swa_full=a.swa_full).resolved()


def forecast_block(here: Here, a: argparse.Namespace, server: str | None = None,
                   load: CPULoad | None = None) -> Report | None:
    """The ``forecast`` JSON key for a prompt of ``--prompt-tokens`` and a reply of
    ``--output-tokens`` on an empty cache, on ``here`` (runner.physics.here.Here, whose
    settings are ``estimate_settings(a)``), priced at ``load`` (``runner.calibration.load``;
    None: a quiet machine); None without a model file to key it by."""
    from kvtop.runner.calibration.load import load_note
    from kvtop.runner.calibration.service import ForecastService
    from kvtop.runner.records.paths import default_paths
    from kvtop.runner.session.site import flags_site

    if not a.model:
        return None
    s = here.settings
    service = ForecastService.open(here, s, default_paths().cache_dir, flags_site(s, here.facts, here.hw, server))
    fc = service.forecast(max(a.prompt_tokens, 1), 0, max(a.output_tokens, 1), load)
    from kvtop.runner.commands.tune_cache import evidence_for

    tuned = None if server else evidence_for(s)  # kvtop tune measures kvtop's engine, not a server's
    return {**fc.to_dict(), "label": fc.label(), "threads": s.n_threads, "calibration_file": service.calibration.path,
            "load_note": load_note(fc, tuned), "tune": tune_block(tuned)}


def tune_block(tuned: TuneEvidence | None) -> Report | None:
    """What ``kvtop tune`` measured for these settings here (None: not measured), and the
    setting it names as the cause of a gap the roofline cannot see."""
    from kvtop.runner.policy.tune_evidence import ago, roofline_gap

    if tuned is None:
        return None
    return {"measured_at": tuned.measured_at, "measured_ago": ago(tuned.measured_at), "depth": tuned.depth,
            "results": [{"flag": m.flag, "verdict": m.verdict, "decode_gain": m.decode_gain,
                         "prefill_gain": m.prefill_gain} for m in tuned.results],
            "decode_gap": roofline_gap(tuned, "decode"), "prefill_gap": roofline_gap(tuned, "prefill")}


def tune_line(r: Report) -> tuple[str, str]:
    """The ``measured`` row: each candidate's verdict, and the cause of a ceiling's gap."""
    t = (r.get("forecast") or {}).get("tune")
    if not t:
        return ("settings", "not measured: `kvtop tune` measures which settings are faster here")
    said = {"faster": "faster", "slower": "slower", "same": "no faster", "not judged": "not judged (busy)"}
    parts = []
    for m in t["results"]:
        gains = ", ".join(f"{k} {g:.2f}x" for k, g in (("decode", m["decode_gain"]), ("prefill", m["prefill_gain"]))
                          if g)
        parts.append(f"{m['flag']} {said.get(m['verdict'], m['verdict'])}" + (f" ({gains})" if gains else ""))
    text = f"kvtop tune {t['measured_ago']} at depth {t['depth']}: " + "; ".join(parts)
    for gap in (t["decode_gap"], t["prefill_gap"]):
        if gap:
            text += f". The ceilings leave out {gap}"
    return ("settings", text)


def forecast_line(r: Report) -> tuple[str, str] | None:
    fc = r.get("forecast")
    if not fc:
        return None
    text = (f"TTFT {fmt_seconds(fc['ttft_s'])}, prefill {fmt_rate(fc['prefill_tok_s'])}, "
            f"decode {fmt_rate(fc['decode_tok_s'])}, reply of {fmt_int(fc['reply_tokens'])} "
            f"{fmt_seconds(fc['reply_s'])} ({fc['label']})")
    if fc.get("ttft_s_low") is not None and fc.get("ttft_s_high") is not None:
        n = fc.get("interval_turns") or 0
        rests = ("roofline" if fc["basis"] != "calibrated" else
                 f"from {n} turn{'s' if n != 1 else ''} at this load" if n else "no turn at this load yet: wide")
        text += (f"; 80%: TTFT {fmt_seconds(fc['ttft_s_low'])}–{fmt_seconds(fc['ttft_s_high'])}, decode "
                 f"{fmt_rate(fc['decode_tok_s_low'])}–{fmt_rate(fc['decode_tok_s_high'])} ({rests})")
    if fc.get("load_note"):  # "at today's load: other processes use 63% of the CPU (TTFT 800 ms on a quiet machine)"
        text += "; " + fc["load_note"]
    return ("forecast", text)
