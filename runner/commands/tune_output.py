"""``kvtop tune``'s output: llama-bench's rows (md, or json objects with its fields), one
line per candidate with its gains and verdict, and the recommended command line.

Each A/B gives rows for both arms (the base's rows are measured again beside each
candidate: that is the interleaving), the setting that differs in its llama-bench
column (``fa``, ``threads``, ``n_ubatch``, ``type_k``/``type_v``, ``ngl``). A prefill
row's ``threads`` is its batch threads (``-tb``), a decode row's its threads (``-t``).
"""

from __future__ import annotations

import json
import shlex
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kvtop.runner.commands.bench_output import Row, format_md, json_object, md_fields
from kvtop.runner.commands.bench_plan import Load, bench_label
from kvtop.runner.policy.tuning import Base, Candidate, Judgement, recommend

if TYPE_CHECKING:
    from kvtop.runner.commands.tune_measure import ABRun, ArmRun, Sizes

DEFAULT_BASE = Base(0, 0, 512, 512, "auto")  # kvtop's defaults (threads: its own choice)
# the flags kvtop tune sets, with how many values each takes (-fa: an optional one)
TUNED_FLAGS = {"-t": 1, "--threads": 1, "-tb": 1, "--threads-batch": 1, "-ub": 1, "--ubatch-size": 1,
               "-b": 1, "--batch-size": 1, "-fa": -1, "--flash-attn": -1, "-ctk": 1, "--cache-type-k": 1,
               "-ctv": 1, "--cache-type-v": 1, "-ngl": 1, "--n-gpu-layers": 1, "--gpu-layers": 1}
TUNE_FLAGS = {"--depth": 1, "-d": 1, "--budget": 1, "-p": 1, "--n-prompt": 1, "-n": 1, "--n-gen": 1,
              "-r": 1, "--repetitions": 1, "-o": 1, "--output": 1, "--progress": 0, "--only": 1}


@dataclass
class Outcome:
    model: str
    argv: list[str]
    base: Base
    sizes: Sizes
    budget: int
    runs: list[ABRun] = field(default_factory=list)
    judged: list[Judgement] = field(default_factory=list)
    skipped: list[tuple[Candidate, str]] = field(default_factory=list)
    stopped: bool = False
    error: str | None = None
    elapsed_s: float = 0.0
    saved: bool = False

    @property
    def partial(self) -> bool:
        return self.stopped or bool(self.error) or any(j.partial for j in self.judged)


def _meta(arm: ArmRun) -> dict[str, object]:
    from kvtop.runner.commands.bench import row_meta

    b = arm.base
    assert arm.loaded is not None  # an arm with rates was loaded
    return row_meta(arm.loaded, Load(b.n_gpu_layers, b.n_batch, b.n_ubatch, b.cache_type_k, b.cache_type_v,
                                     b.flash_attn, b.n_threads))


def arm_rows(arm: ArmRun, sizes: Sizes, flag: str, role: str) -> list[tuple[Row, str]]:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    out: list[tuple[Row, str]] = []
    for metric in ("prefill", "decode"):
        rates = arm.rates.get(metric)
        if not rates:
            continue
        n_p, n_g = (sizes.n_prompt, 0) if metric == "prefill" else (0, sizes.n_gen)
        threads = arm.base.n_threads_batch if metric == "prefill" else arm.base.n_threads
        values = {**_meta(arm), "n_threads": threads, "n_prompt": n_p, "n_gen": n_g, "n_depth": sizes.depth,
                  "test_time": now}
        ns = [round(1e9 * (n_p + n_g) / r) for r in rates]
        out.append((Row.build(values, ns, {"kvtop_tune_candidate": flag, "kvtop_tune_arm": role}),
                    bench_label(n_p, n_g, sizes.depth)))
    return out


def all_rows(out: Outcome) -> list[tuple[Row, str]]:
    rows: list[tuple[Row, str]] = []
    for ab in out.runs:
        rows += arm_rows(ab.a, out.sizes, ab.candidate.flag, "base")
        rows += arm_rows(ab.b, out.sizes, ab.candidate.flag, "candidate")
    return rows


def verdict_text(j: Judgement, depth: int) -> str:
    if not any(m.cand for m in j.metrics.values()):
        return f"`{j.candidate.flag}`: not measured (cut after your settings' first repetitions: their rows only)"
    head = f"`{j.candidate.flag}`: {j.gains_text(depth)}"
    noise = [f"{k} {m.noise:.0%}" for k, m in j.metrics.items() if m.noise is not None]
    if noise:
        head += f" (spread {', '.join(noise)})"
    if j.busy is not None:
        return head + f": not judged, other processes used {j.busy:.0%} of the CPU"
    if j.partial:
        head += " [partial]"
    if j.wins:
        return head + (": faster, but it changes the cache's precision (check the answers)" if j.candidate.precision
                       else ": faster")
    if j.loses:
        return head + ": slower"
    if any(m.verdict == "unknown" for m in j.metrics.values()):
        return head + ": too few repetitions to tell"
    return head + ": no change beyond the spread"


def _strip(argv: list[str], model: str) -> list[str]:
    """The user's argv without the model, tune's own flags and the tuned ones."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        i += 1
        name = tok.split("=", 1)[0]
        n = TUNED_FLAGS.get(name, TUNE_FLAGS.get(name))
        if n is None:
            if tok != model:
                out.append(tok)
            continue
        if "=" in tok or n == 0:
            continue
        if n == -1:  # -fa's value is optional
            if i < len(argv) and argv[i].lower() in ("on", "off", "auto", "1", "0", "-1"):
                i += 1
            continue
        i += n
    return out


def tuned_flags(b: Base, given: Base, changed_threads: bool) -> list[str]:
    """``b`` as flags: those that differ from kvtop's defaults or from what the user gave."""
    out: list[str] = []
    if changed_threads or given.n_threads != b.n_threads:
        out += ["-t", str(b.n_threads), "-tb", str(b.n_threads_batch)]
    if b.n_batch != DEFAULT_BASE.n_batch:
        out += ["-b", str(b.n_batch)]
    if b.n_ubatch != DEFAULT_BASE.n_ubatch:
        out += ["-ub", str(b.n_ubatch)]
    if b.flash_attn != DEFAULT_BASE.flash_attn:
        out += ["-fa", b.flash_attn]
    if (b.cache_type_k, b.cache_type_v) != ("f16", "f16"):
        out += ["-ctk", b.cache_type_k, "-ctv", b.cache_type_v]
    if b.n_gpu_layers:
        out += ["-ngl", str(b.n_gpu_layers)]
    return out


def recommended(out: Outcome) -> tuple[str, list[Judgement]]:
    """The command line with every group's winner applied, and the winners."""
    wins = recommend(out.judged)
    b = out.base
    for j in wins:
        b = j.candidate.applied(b)
    threads_changed = (b.n_threads, b.n_threads_batch) != (out.base.n_threads, out.base.n_threads_batch)
    user_threads = any(t.split("=", 1)[0] in ("-t", "--threads", "-tb", "--threads-batch") for t in out.argv)
    flags = tuned_flags(b, out.base, threads_changed or user_threads)
    line = " ".join(shlex.quote(x) for x in ["kvtop", out.model, *_strip(out.argv, out.model), *flags])
    return line, wins


def summary_lines(out: Outcome) -> list[str]:
    d = out.sizes.depth
    lines = [verdict_text(j, d) for j in out.judged]
    lines += [f"`{c.flag}`: not measured ({why}; --budget {out.budget})" if "budget" in why else
              f"`{c.flag}`: not measured ({why})" for c, why in out.skipped]
    line, wins = recommended(out)
    if wins:
        gains = "; ".join(f"`{j.candidate.flag}`: {j.gains_text(d)}" for j in wins)
        lines.append(f"recommended: {line}")
        lines.append(f"  ({gains}; each measured alone against your settings)")
    elif any(j.busy is None and not j.partial for j in out.judged):
        lines.append("recommended: keep your settings (no candidate was faster beyond its run-to-run spread)")
    else:
        lines.append("recommended: none yet (no candidate was measured whole on a quiet machine: run it again "
                     "when the machine is quiet, or with a larger --budget)")
    if out.partial:
        why = "stopped by Ctrl+C" if out.stopped else out.error or "the budget ran out mid-way"
        lines.append(f"partial: {why}; {len(out.judged)} of {len(out.judged) + len(out.skipped)} candidates measured")
    lines.append(f"kvtop tune: {out.elapsed_s:.0f} s of a {out.budget} s budget; depth {d}, pp{out.sizes.n_prompt}, "
                 f"tg{out.sizes.n_gen}, {out.sizes.reps} repetitions per arm, interleaved")
    return lines


def render(fmt: str, out: Outcome) -> str:
    rows = all_rows(out)
    if fmt == "json":
        line, wins = recommended(out)
        return json.dumps({
            "rows": [json_object(r) for r, _ in rows],
            "candidates": [judgement_json(j) for j in out.judged],
            "not_measured": [{"flag": c.flag, "why": why} for c, why in out.skipped],
            "recommended": {"command": line, "flags": [j.candidate.flag for j in wins]} if wins else None,
            "partial": out.partial, "stopped": out.stopped, "depth": out.sizes.depth,
            "elapsed_s": round(out.elapsed_s, 3), "budget_s": out.budget}, indent=2, allow_nan=False)
    text = "\n".join(summary_lines(out))
    if not rows:
        return text
    v = rows[0][0].values
    shown = {"n_threads": True, "flash_attn": True}
    for ab in out.runs:
        for k, _v in ab.candidate.changes:
            key = {"cache_type_k": "type_k", "cache_type_v": "type_v"}.get(k, k)
            shown[key] = True
    table = format_md([r for r, _ in rows], [lab for _, lab in rows], md_fields(str(v["backends"]), shown),
                      f"{v['build_commit']} ({v['build_number']})")
    return table + "\n\n" + text


def judgement_json(j: Judgement) -> dict[str, object]:
    return {"flag": j.candidate.flag, "group": j.candidate.group, "changes_precision": j.candidate.precision,
            "wins": j.wins, "loses": j.loses, "busy_others_cpu": j.busy, "partial": j.partial,
            "metrics": {k: {"gain": m.gain, "spread": m.noise, "verdict": m.verdict, "base_ts": list(m.base),
                            "candidate_ts": list(m.cand)} for k, m in j.metrics.items()}}
