"""``kvtop bench``'s tests, as llama-bench plans them.

Every test parameter takes a comma list (``-p 128,512``) or a range
(``first-last``, ``first-last+step``, ``first-last*factor``), as llama-bench's
``parse_int_range``; repeating a flag adds to its list. The tests are the cartesian
product of the lists, in llama-bench's order (``get_cmd_params_instances``): for each
load-time combination (``-ngl``, ``-b``, ``-ub``, ``-ctk``, ``-ctv``, ``-fa``, ``-t``) and
each depth ``-d``, a ``ppP`` test per ``-p``, a ``tgN`` test per ``-n``, and a
``ppP+tgN`` test per ``-pg``. A load-time combination is one engine load; the
prompt, generation and depth lists run on the same one.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from dataclasses import dataclass

from kvtop.runner.cli_types import INT32_MAX, int_in
from kvtop.runner.model.quant_types import KV_CACHE_TYPES

MAX_VALUES = 1000  # one flag's list, ranges expanded: more is a typo, not a benchmark
_RANGE = re.compile(r"^(-?\d+)(?:-(\d+)(?:([+*])(\d+))?)?$")


def int_list(lo: int | None, hi: int | None = INT32_MAX, *, ranges: bool = True) -> Callable[[str], list[int]]:
    """An argparse type: ``"128,512"``, ``"128-512*2"``, ``"1-4"`` or ``"-1"`` (when
    ``lo`` allows it) as a list of integers, each in ``[lo, hi]``."""
    one = int_in(lo, hi)

    def parse(text: str) -> list[int]:
        out: list[int] = []
        for item in text.split(","):
            item = item.strip()
            m = _RANGE.match(item) if ranges else None
            if m is None or not m.group(2):
                out.append(one(item))  # a single value, or its "must be ..." message
                continue
            first, last = one(m.group(1)), one(m.group(2))
            op, step = m.group(3) or "+", int(m.group(4) or 1)
            if (op == "+" and step < 1) or (op == "*" and (step < 2 or first < 1)) or last < first:
                raise argparse.ArgumentTypeError(
                    f"must be a range first-last, first-last+step or first-last*factor that grows (got {item!r})")
            i = first
            while i <= last:
                out.append(i)
                i = i + step if op == "+" else i * step
                if len(out) > MAX_VALUES:
                    break
            if len(out) > MAX_VALUES:
                raise argparse.ArgumentTypeError(f"must be at most {MAX_VALUES:,} values (got {text!r})")
        return out

    parse.__name__ = "integer list"
    return parse


def kv_type_list(text: str) -> list[str]:
    out = []
    for item in text.split(","):
        name = item.strip().lower()
        if name not in KV_CACHE_TYPES:
            raise argparse.ArgumentTypeError(f"must be one of {', '.join(KV_CACHE_TYPES)} (got {item!r})")
        out.append(name)
    return out


kv_type_list.__name__ = "KV cache type list"

_FA = {"on": "on", "enabled": "on", "true": "on", "1": "on",
       "off": "off", "disabled": "off", "false": "off", "0": "off",
       "auto": "auto", "-1": "auto"}


def fa_list(text: str) -> list[str]:
    """llama-bench's -fa values: on|off|auto, or its synonyms (1, 0, -1, enabled, ...)."""
    out = []
    for item in text.split(","):
        key = item.strip().lower()
        if key not in _FA:
            raise argparse.ArgumentTypeError(f"must be on, off or auto (or 1, 0, -1) (got {item!r})")
        out.append(_FA[key])
    return out


fa_list.__name__ = "flash attention list"


def pg_pair(text: str) -> tuple[int, int]:
    """``-pg PP,TG``: one prompt-then-generate test."""
    parts = text.split(",")
    if len(parts) != 2:
        raise argparse.ArgumentTypeError(f"must be two integers PP,TG, e.g. 512,128 (got {text!r})")
    one = int_in(0, INT32_MAX)
    return one(parts[0]), one(parts[1])


pg_pair.__name__ = "PP,TG pair"


@dataclass(frozen=True)
class Load:
    """The settings that need an engine load of their own."""

    n_gpu_layers: int
    n_batch: int
    n_ubatch: int
    type_k: str
    type_v: str
    flash_attn: str  # on, off, auto
    n_threads: int  # 0: kvtop's default


@dataclass(frozen=True)
class BenchTest:
    n_prompt: int
    n_gen: int
    n_depth: int = 0

    @property
    def label(self) -> str:
        return bench_label(self.n_prompt, self.n_gen, self.n_depth)

    @property
    def kind(self) -> str:
        """"pp", "tg" or "pg" (both)."""
        return "pg" if self.n_prompt and self.n_gen else "pp" if self.n_prompt else "tg"

    def ctx_needed(self) -> int:
        """Context cells the test fills, with room for the sampled token after the last
        (a generation test from an empty context starts after one BOS token)."""
        return max(self.n_depth, 1) + self.n_prompt + self.n_gen + 2


def bench_label(n_prompt: int, n_gen: int, n_depth: int = 0) -> str:
    """llama-bench's test name: ``pp512``, ``tg128``, ``pp512+tg128``, then `` @ d1024``
    for a test that runs after a context of that depth is filled."""
    if n_prompt > 0 and n_gen == 0:
        name = f"pp{n_prompt}"
    elif n_gen > 0 and n_prompt == 0:
        name = f"tg{n_gen}"
    else:
        name = f"pp{n_prompt}+tg{n_gen}"
    return f"{name} @ d{n_depth}" if n_depth > 0 else name


@dataclass(frozen=True)
class Lists:
    """Every test parameter's list (defaults filled in)."""

    n_prompt: list[int]
    n_gen: list[int]
    n_pg: list[tuple[int, int]]
    n_depth: list[int]
    n_gpu_layers: list[int]
    n_batch: list[int]
    n_ubatch: list[int]
    type_k: list[str]
    type_v: list[str]
    flash_attn: list[str]
    n_threads: list[int]


def plan(lists: Lists) -> list[tuple[Load, list[BenchTest]]]:
    """The tests, grouped by engine load, in llama-bench's order."""
    out: list[tuple[Load, list[BenchTest]]] = []
    for ngl in lists.n_gpu_layers:
        for nb in lists.n_batch:
            for nub in lists.n_ubatch:
                for tk in lists.type_k:
                    for tv in lists.type_v:
                        for fa in lists.flash_attn:
                            for nt in lists.n_threads:
                                tests = []
                                for nd in lists.n_depth:
                                    tests += [BenchTest(p, 0, nd) for p in lists.n_prompt if p]
                                    tests += [BenchTest(0, n, nd) for n in lists.n_gen if n]
                                    tests += [BenchTest(p, n, nd) for p, n in lists.n_pg if p or n]
                                if tests:
                                    out.append((Load(ngl, nb, nub, tk, tv, fa, nt), tests))
    return out
