"""``kvtop estimate --spec-type TYPE [--acceptance A]``: what speculative decoding would
give here, from the roof (runner.physics.spec_roof): tokens a verify pass yields at the
acceptance, over what a verify pass of that many tokens costs on this machine, against
plain decode at the same depth; and the acceptance below which it stops paying, per
draft size. The acceptance is the one given, else the one kvtop measured for this model
and type (runner.calibration.spec_store), else an assumed 50%, said as such. A model
with MTP heads (``blk.N.nextn.*``) gets the ``draft-mtp`` figures without asking.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from kvtop.runner.commands.common import Report
from kvtop.runner.units import fmt_bytes, fmt_rate

if TYPE_CHECKING:
    from kvtop.runner.model.facts import ModelFacts
    from kvtop.runner.physics.here import Here

ASSUMED = 0.5
ESTIMATE_TYPES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "draft-simple", "draft-mtp")
# the most a pass drafts by default (llama.cpp's defaults: the n-gram drafts' size-m or
# n-max, the draft models' --spec-draft-n-max)
DEFAULT_DRAFT = {"ngram-simple": 48, "ngram-map-k": 48, "ngram-map-k4v": 48, "ngram-mod": 64,
                 "draft-simple": 3, "draft-mtp": 3}


def _fraction(text: str) -> float:
    try:
        v = float(text.rstrip("%")) / (100 if text.endswith("%") else 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= v <= 1:
        raise argparse.ArgumentTypeError(f"{text} is not an acceptance between 0 and 1 (or 0% and 100%)")
    return v


def _spec_type(text: str) -> str:
    if text not in ESTIMATE_TYPES:
        raise argparse.ArgumentTypeError(f"unknown speculative type: {text} (estimate takes "
                                         f"{', '.join(ESTIMATE_TYPES)})")
    return text


def add_spec_estimate_flags(p: argparse.ArgumentParser) -> None:
    from kvtop.runner.cli_types import positive_int

    g = p.add_argument_group("speculative decoding")
    g.add_argument("--spec-type", dest="spec_type", type=_spec_type, metavar="TYPE",
                   help="what speculation would give: " + ", ".join(ESTIMATE_TYPES))
    g.add_argument("--acceptance", type=_fraction, metavar="A",
                   help="the share of drafted tokens kept, 0..1 or N%% (default: the one kvtop measured for "
                        "this model and type, else 50%%)")
    g.add_argument("--spec-draft-n-max", dest="spec_draft_n_max", type=positive_int, metavar="N",
                   help="tokens drafted a pass (default: the type's llama.cpp default)")
    g.add_argument("-md", "--spec-draft-model", dest="spec_draft_model", metavar="FILE",
                   help="draft-simple: the draft GGUF (its weights are read once a drafted token)")


def _extra_bytes(spec_type: str, facts: ModelFacts, draft_model: str | None) -> tuple[float, str | None]:
    """Bytes the drafter reads a drafted token, and why not known (a refusal)."""
    if spec_type == "draft-mtp":
        if not facts.mtp_layers:
            return 0.0, "the model carries no MTP heads (no blk.N.nextn.* tensors): --spec-type draft-mtp needs them"
        return float(facts.mtp_bytes or 0), None
    if spec_type == "draft-simple":
        if not draft_model:
            return 0.0, "--spec-type draft-simple needs -md FILE (the draft model) to price its passes"
        from kvtop.runner.model.inspect import ModelFileError, load_facts
        from kvtop.runner.physics.phase_costs import decode_weight_bytes

        try:
            return float(decode_weight_bytes(load_facts(draft_model)) or 0), None
        except ModelFileError as exc:
            return 0.0, f"-md {draft_model}: {exc}"
    return 0.0, None  # an n-gram lookup reads no weights


def spec_block(here: Here, a: argparse.Namespace, cache_dir: str) -> tuple[Report | None, str | None]:
    """The ``speculation`` JSON key (None: not asked and no MTP heads), or why not."""
    from kvtop.runner.calibration.spec_store import load_measured
    from kvtop.runner.physics.spec_roof import roof_table, spec_roof

    facts = here.facts
    spec_type = a.spec_type or ("draft-mtp" if facts.mtp_layers else None)
    if spec_type is None:
        return None, None
    extra, refusal = _extra_bytes(spec_type, facts, a.spec_draft_model)
    if refusal:
        return None, refusal
    measured = load_measured(cache_dir, a.model, spec_type) if a.model and a.acceptance is None else None
    if a.acceptance is not None:
        acc, source = a.acceptance, "given"
    elif measured is not None:
        acc = measured.acceptance
        source = f"measured: {measured.accepted:,} of {measured.drafted:,} drafted in {measured.turns} turns"
    else:
        acc, source = ASSUMED, "assumed: give --acceptance, or run a turn with --spec-type to measure it"
    n_max = max(1, min(a.spec_draft_n_max or DEFAULT_DRAFT[spec_type], a.ubatch_size - 1))
    draft = n_max
    if measured is not None and a.spec_draft_n_max is None and measured.draft_per_pass >= 1:
        draft = min(n_max, round(measured.draft_per_pass))  # the drafts' size as measured
    depth = a.prompt_tokens + a.output_tokens // 2
    r = spec_roof(here, draft, acc, depth, extra)
    if r is None:
        return None, None
    rows = roof_table(here, acc, depth, n_max, extra)
    return {"spec_type": spec_type, "acceptance": acc, "acceptance_source": source, "draft": draft,
            "depth": depth, "tokens_per_pass": r.tokens_per_pass, "pass_s": r.pass_s, "plain_s": r.plain_s,
            "pass_cost": r.pass_cost, "bound": r.bound, "roof_tok_s": r.roof_tok_s, "plain_tok_s": 1 / r.plain_s,
            "speedup": r.speedup, "break_even_acceptance": r.break_even, "extra_bytes_per_draft_token": extra,
            "mtp_layers": list(facts.mtp_layers), "mtp_bytes": facts.mtp_bytes,
            "by_draft": [{"draft": x.draft, "tokens_per_pass": x.tokens_per_pass, "pass_cost": x.pass_cost,
                          "speedup": x.speedup, "break_even_acceptance": x.break_even} for x in rows]}, None


def _pays_from(be: float | None) -> str:
    return "never pays" if be is None else f"pays above {be:.0%}"


def spec_lines(r: Report) -> list[tuple[str, str]]:
    s = r.get("speculation")
    if not s:
        return []
    rows: list[tuple[str, str]] = []
    if s["mtp_layers"]:
        rows.append(("MTP heads", f"{len(s['mtp_layers'])} (blk.{s['mtp_layers'][0]}.nextn.*), "
                                  f"{fmt_bytes(s['mtp_bytes'])}: --spec-type draft-mtp"))
    extra = (f", +{fmt_bytes(s['extra_bytes_per_draft_token'] * s['draft'])} drafting a pass"
             if s["extra_bytes_per_draft_token"] else "")
    rows += [
        (f"speculation ({s['spec_type']})", f"{s['acceptance']:.0%} accepted ({s['acceptance_source']})"),
        ("  roof", f"{fmt_rate(s['roof_tok_s'])} = {s['speedup']:.2f}x plain decode ({fmt_rate(s['plain_tok_s'])}) "
                   f"at depth {s['depth']:,}: {s['tokens_per_pass']:.1f} tok/pass, a verify pass of "
                   f"{s['draft'] + 1} costs {s['pass_cost']:.1f}x a plain step (modelled, {s['bound']}-bound{extra})"),
        ("  stops paying", f"below {s['break_even_acceptance']:.0%} accepted at drafts of {s['draft']}"
                           if s["break_even_acceptance"] is not None else
                           f"drafts of {s['draft']} never pay here: a pass costs more than {s['draft'] + 1} steps"),
        ("  by draft size", "; ".join(f"{x['draft']}: {x['speedup']:.2f}x, {_pays_from(x['break_even_acceptance'])}"
                                      for x in s["by_draft"])),
    ]
    return rows
