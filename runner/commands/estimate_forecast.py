"""``kvtop estimate``'s forecast: what this machine did for this model before
(runner.calibration, filled by the app's turns and ``kvtop bench``), beside the
roofline; "roofline" with no calibration yet. The same key as the app's: the model
file, the machine and the settings given here (``-t``, ``-ngl``, KV types, ``-fa``,
``-b``, ``-ub``)."""

from __future__ import annotations

from runner.units import fmt_int, fmt_rate, fmt_seconds


def add_forecast_flags(p) -> None:
    from runner.cli_types import non_negative_int

    p.add_argument("-t", "--threads", type=non_negative_int, default=0,
                   help="the threads the forecast is for (default: kvtop's, as the app uses)")


def forecast_block(facts, layout, hw, a, server: str | None = None) -> dict | None:
    """The ``forecast`` JSON key for a prompt of ``--prompt-tokens`` and a reply of
    ``--output-tokens`` on an empty cache; None without a model file to key it by."""
    from runner.calibration.basis import roofline_basis
    from runner.calibration.calibration import calibration_for
    from runner.records.paths import default_paths
    from runner.settings import Settings

    if not a.model:
        return None
    s = Settings(a.model, n_ctx=a.ctx, n_threads=a.threads, n_batch=a.batch_size, n_ubatch=a.ubatch_size,
                 n_gpu_layers=a.n_gpu_layers, flash_attn=a.flash_attn, cache_type_k=a.cache_type_k,
                 cache_type_v=a.cache_type_v, swa_full=a.swa_full).resolved()
    cal = calibration_for(s, default_paths().cache_dir, server, tuple(g.name for g in hw.gpus))
    fc = cal.forecaster(roofline_basis(facts, layout, hw, s)).forecast(max(a.prompt_tokens, 1), 0,
                                                                       max(a.output_tokens, 1))
    return {**fc.to_dict(), "label": fc.label(), "threads": s.n_threads, "calibration_file": cal.path}


def forecast_line(r: dict) -> tuple[str, str] | None:
    fc = r.get("forecast")
    if not fc:
        return None
    return ("forecast", f"TTFT {fmt_seconds(fc['ttft_s'])}, prefill {fmt_rate(fc['prefill_tok_s'])}, "
                        f"decode {fmt_rate(fc['decode_tok_s'])}, reply of {fmt_int(fc['reply_tokens'])} "
                        f"{fmt_seconds(fc['reply_s'])} ({fc['label']})")
