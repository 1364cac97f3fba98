"""``kvtop kld``'s report: llama-perplexity's sections and numbers (md), or all of it as
JSON; with what the candidate cache saves and its decode speed beside the base's."""

from __future__ import annotations

import json
from typing import Any

from kvtop.runner.commands.common import json_safe
from kvtop.runner.physics.kld import KldStats
from kvtop.runner.units import fmt_bytes


def report(stats: KldStats, meta: dict[str, Any], kv: dict[str, Any], decode: dict[str, float]) -> dict[str, Any]:
    return {"kvtop_kld": 1, **meta, "partial": stats.partial, "statistics": stats.to_dict(), "kv_bytes": kv,
            "decode": decode or None}


def format_json(rep: dict[str, Any]) -> str:
    return json.dumps(json_safe(rep), indent=2)


def _pm(x: float, u: float, spec: str = "10.6f") -> str:
    return f"{x:{spec}} ± {u:{spec}}"


def format_md(rep: dict[str, Any]) -> str:
    s = rep["statistics"]
    lines = [f"# kvtop kld: {rep['candidate']} against {rep['base']}" + (" (PARTIAL: stopped early)"
                                                                          if rep["partial"] else ""),
             "",
             f"{s['count']:,} positions scored: the second half of {s['chunks']} chunks of {rep['n_ctx']} tokens "
             f"({rep['n_tokens']:,} tokens in the text, {rep['seconds']:.1f} s)",
             "",
             "====== Perplexity statistics ======",
             f"Mean PPL(Q)                   : {_pm(s['ppl_q'], s['ppl_q_unc'])}",
             f"Mean PPL(base)                : {_pm(s['ppl_base'], s['ppl_base_unc'])}",
             f"Cor(ln(PPL(Q)), ln(PPL(base))): {100 * s['cor_ln_ppl']:6.2f}%",
             f"Mean ln(PPL(Q)/PPL(base))     : {_pm(s['ln_ppl_ratio'], s['ln_ppl_ratio_unc'])}",
             "",
             "====== KL divergence statistics ======",
             f"Mean    KLD: {_pm(s['kld_mean'], s['kld_unc'])}"]
    for name, v in s["kld_percentiles"].items():
        lines.append(f"{_label(name)} KLD: {v:10.6f}")
    lines += ["", "====== Token probability statistics ======",
              f"Mean    Δp: {100 * s['p_diff_mean']:6.3f} ± {100 * s['p_diff_unc']:5.3f} %"]
    for name, v in s["p_diff_percentiles"].items():
        lines.append(f"{_label(name)} Δp: {100 * v:6.3f}%")
    lines += [f"RMS Δp    : {100 * s['rms_p_diff']:6.3f} ± {100 * s['rms_p_diff_unc']:5.3f} %",
              f"Same top p: {100 * s['same_top']:6.3f} ± {100 * s['same_top_unc']:5.3f} %", ""]
    lines += _kv_lines(rep["kv_bytes"]) + _decode_lines(rep.get("decode"))
    return "\n".join(lines)


def _label(name: str) -> str:
    return {"max": "Maximum", "min": "Minimum", "median": "Median "}.get(name, f"{name:>5}  ")


def _kv_lines(kv: dict[str, Any]) -> list[str]:
    if not kv:
        return []
    out = ["====== What the candidate saves ======"]
    for at in kv.get("at", []):
        base, cand = at["base_bytes"], at["candidate_bytes"]
        pct = f"{100 * (cand - base) / base:+.0f}%" if base else "?"
        out.append(f"KV cache at {at['n_ctx']:>7,} tokens ({at['what']}): {fmt_bytes(base)} -> {fmt_bytes(cand)} "
                   f"({pct}, {fmt_bytes(base - cand)} saved)")
    return out + [""]


def _decode_lines(d: dict[str, float] | None) -> list[str]:
    if not d:
        return []
    b, c = d["base"], d["candidate"]
    return ["====== Decode speed at depth (measured, median of 3, the two taking turns) ======",
            f"base      : {b:8.1f} tok/s over {int(d['tokens'])} tokens after {int(d['depth']):,}",
            f"candidate : {c:8.1f} tok/s ({c / b:.2f}x the base)" if b else f"candidate : {c:8.1f} tok/s", ""]
