"""A forecast for one prompt: time to first token, prefill and decode rates, the
reply's time, from this machine's calibration where it has one, else the roofline.

The roofline (``Basis``) gives the shape: seconds for ``n`` prompt tokens computed at
depth ``d``, seconds per decoded token at depth ``d``. The calibration's fits
(runner.calibration.fit) scale it to what this machine measured. Prefill is forecast
micro-batch by micro-batch, as llama.cpp computes it, so the fixed cost of each
micro-batch counts as often as it is paid.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

from kvtop.runner.calibration.fit import Fit, SplitFit, fit_scale, fit_split
from kvtop.runner.calibration.pace import Pace, fit_g, price
from kvtop.runner.calibration.store import Samples


@dataclass(frozen=True)
class Basis:
    """The roofline's shape: ``prefill_s(n, depth)``, ``token_s(depth)`` (None: unknown)."""

    prefill_s: Callable[[int, int], float | None]
    token_s: Callable[[int], float | None]
    n_ubatch: int
    # the share of ``prefill_s(n, depth)`` that is attention (it grows with depth and runs
    # far below peak on a CPU); None: not split, one efficiency for all of it
    attention_share: Callable[[int, int], float] | None = None
    # ``prefill_s`` with every FLOP at the peak, not at the pace of a micro-batch of n
    # (decode's attention is priced on it, as before micro-batches had a pace); None:
    # ``prefill_s`` itself
    peak_prefill_s: Callable[[int, int], float | None] | None = None
    # seconds of one decoded token's attention at depth ``d`` at the pace the CPU probe
    # measured for it (llama.cpp's flash attention over the f16 cache, one query at a
    # time: runner.system.ggml_matmul.probe_attention); None: not measured (an older
    # probe, layers on a GPU, -fa off), and decode's attention is priced at prefill's
    decode_attention_s: Callable[[int], float | None] | None = None


@dataclass(frozen=True)
class Forecast:
    prompt_tokens: int
    cached_tokens: int | None  # None: not known (a server's slot), said so rather than claimed 0
    reply_tokens: int
    ttft_s: float | None
    prefill_s: float | None
    prefill_tok_s: float | None
    decode_tok_s: float | None
    reply_s: float | None  # submit -> last token of a reply of ``reply_tokens``
    basis: str  # "calibrated" or "roofline"
    n_turns: int  # calibrated turns behind it (0 for the roofline)
    # at today's load (runner.calibration.load.at_load): the quiet machine's figures and
    # the share of the CPU other processes took; None: priced for a quiet machine
    quiet_ttft_s: float | None = None
    quiet_reply_s: float | None = None
    others_cpu: float | None = None
    # the engine's threads outnumber the cores the others leave free: the scheduler packs
    # them onto a shared core and the price above is far short (runner.physics.verdicts.packed_threads)
    free_cores: int | None = None
    # (decode, prefill) threads the turn will run on when kvtop runs it on fewer threads
    # than the engine's, on the cores others leave free (runner.calibration.load.turn_threads)
    threads: tuple[int, int] | None = None
    # the 80% interval (runner.calibration.interval): from the calibration's residuals at
    # a comparable load, ``interval_n`` of them (0: the prior alone, or the roofline's span)
    ttft_s_low: float | None = None
    ttft_s_high: float | None = None
    decode_tok_s_low: float | None = None
    decode_tok_s_high: float | None = None
    interval_n: int | None = None
    remote_load: bool = False  # a server elsewhere: its figures are at the server's load, unseen from here

    @property
    def new_tokens(self) -> int:
        return max(self.prompt_tokens - (self.cached_tokens or 0), 0)

    def label(self) -> str:
        where = " at the server's load" if self.remote_load else ""
        if self.basis == "calibrated":
            return f"calibrated on {self.n_turns:,} turn{'s' if self.n_turns != 1 else ''}{where}"
        return "roofline (not calibrated yet)"

    def to_dict(self) -> dict[str, object]:
        return {"ttft_s": self.ttft_s, "prefill_tok_s": self.prefill_tok_s, "decode_tok_s": self.decode_tok_s,
                "reply_s": self.reply_s, "reply_tokens": self.reply_tokens, "basis": self.basis,
                "n_samples": self.n_turns, "quiet_ttft_s": self.quiet_ttft_s if self.others_cpu is not None
                else self.ttft_s, "others_cpu": self.others_cpu, "free_cores": self.free_cores,
                "turn_threads": self.threads[0] if self.threads else None,
                "turn_threads_batch": self.threads[1] if self.threads else None,
                "ttft_s_low": self.ttft_s_low, "ttft_s_high": self.ttft_s_high,
                "decode_tok_s_low": self.decode_tok_s_low, "decode_tok_s_high": self.decode_tok_s_high,
                "interval_turns": self.interval_n, "at_server_load": self.remote_load}

    def interval_text(self) -> str:
        """"80%: 1.1-1.6 s from 5 turns" (``""`` without an interval)."""
        from kvtop.runner.units import fmt_seconds

        if self.ttft_s_low is None or self.ttft_s_high is None:
            return ""
        span = f"{fmt_seconds(self.ttft_s_low)}–{fmt_seconds(self.ttft_s_high)}"
        if self.basis != "calibrated":
            return f"{span} (the roofline and 20x it: no turn measured yet)"
        n = self.interval_n or 0
        rests = f"{n} turn{'s' if n != 1 else ''} at this load" if n else "no turn at this load yet: wide"
        return f"80%: {span} ({rests})"


class Forecaster:
    """Fits made once from ``samples`` against ``basis``; forecasts are then cheap.

    A sample taken at a load is brought to quiet by the price ``runner.calibration.pace``
    gives its load and threads (the engine's ``threads`` (decode, prefill) and the CPU's
    share of the work, ``cpu_fraction``), the price's strength fitted with the
    efficiencies: the efficiencies from the quiet samples where there are some, the
    strength from how far the busy ones sit from them, then the efficiencies again from
    every sample brought to quiet; without quiet samples, each in turn (``PACE_ROUNDS``)."""

    PACE_ROUNDS = 4

    def __init__(self, basis: Basis, samples: Samples, threads: tuple[int, int] = (0, 0), cpu_fraction: float = 1.0):
        import os

        self.basis = basis
        self.n_turns = samples.turns
        self._threads, self._fraction = threads, cpu_fraction
        self._cores = samples.n_cores or os.cpu_count() or 1
        self.pace = Pace()
        busy = any(self._price(o, t, True) > 1.0 for *_, o, t in samples.prefill + samples.decode)
        quiet = Samples([x for x in samples.prefill if self._price(x[3], x[4], True) <= 1.0],
                        [x for x in samples.decode if self._price(x[3], x[4], False) <= 1.0],
                        samples.overhead, samples.turns, samples.overhead_load)
        if busy and len(quiet.prefill) >= 2 and quiet.decode:  # quiet turns pin the efficiencies: g from the rest
            self._fit(self._quiet(quiet))
            self._fit_pace(samples)
        else:  # else each fit on the other's last figures (at one load g keeps its prior)
            for _ in range(self.PACE_ROUNDS if busy else 0):
                self._fit(self._quiet(samples))
                self._fit_pace(samples)
        self._fit(self._quiet(samples))

    # ------------------------------------------------------------ the load's price
    def _price(self, others: float | None, threads: int, long_ops: bool, g: float = 1.0) -> float:
        engine = self._threads[1] if long_ops else self._threads[0]
        return price(others, self._cores, threads, engine, long_ops, g, self._fraction)

    def _quiet(self, samples: Samples) -> Samples:
        """``samples`` as a quiet machine on the engine's threads would have measured them."""
        gp, gd = self.pace.g_prefill, self.pace.g_decode
        return Samples([(n, d, s / self._price(o, t, True, gp), 0.0, 0) for n, d, s, o, t in samples.prefill],
                       [(n, d, s / self._price(o, t, False, gd), 0.0, 0) for n, d, s, o, t in samples.decode],
                       [x / price(o, self._cores, 1, 0, False, gp) for x, o in zip(samples.overhead, samples.overhead_load)],
                       samples.turns)

    def _fit_pace(self, samples: Samples) -> None:
        """The price's strength per phase from how far each busy sample sits from the quiet fit."""
        import math

        def point(predicted: float | None, measured: float, others: float | None, t: int,
                  long_ops: bool) -> tuple[float, float]:
            shape = self._price(others, t, long_ops)
            scaling = self._price(None, t, long_ops)  # the cost of fewer threads alone
            f = min(max(self._fraction, 0.0), 1.0)
            if not predicted or shape <= scaling * (1 + 1e-9) or f <= 0:
                return 0.0, 0.0
            lift = (measured / predicted - (1 - f)) / f / ((scaling - (1 - f)) / f)  # the load's part of the price
            load_shape = (shape - (1 - f)) / (scaling - (1 - f))
            return (math.log(load_shape), math.log(lift)) if lift > 0 and load_shape > 0 else (0.0, 0.0)

        pre = [point(self.microbatch_seconds(n, d), s, o, t, True) for n, d, s, o, t in samples.prefill]
        dec = [point((self.token_seconds(d) or 0.0) * n, s, o, t, False) for n, d, s, o, t in samples.decode]
        (gp, n_p), (gd, n_d) = fit_g(pre), fit_g(dec)
        self.pace = Pace(gp, gd, n_p, n_d)

    # ------------------------------------------------------------ the efficiencies
    def _fit(self, samples: Samples) -> None:
        basis = self.basis
        self.prefill_fit = fit_scale([(basis.prefill_s(n, d) or 0.0, s) for n, d, s, *_ in samples.prefill])
        self.prefill_split: SplitFit | None = None
        if basis.attention_share is not None and self.prefill_fit is not None:
            self.prefill_split = fit_split([(*self._parts(n, d), s) for n, d, s, *_ in samples.prefill],
                                           self.prefill_fit)
        # Decode's attention (QK^T and AV over the context, without flash attention on a
        # CPU) runs far below the bandwidth roofline's shape: a token at depth 3,000 on
        # Gemma-3 270M took 25% longer than one at depth 1,000 while its bytes grew 3%.
        # Where prefill's two-efficiency fit measured attention's share of the peak, that
        # efficiency prices decode's attention FLOPs too, and the bandwidth fit is made
        # on what is left of each decode sample.
        # Where the CPU probe timed decode's attention itself (one query over the cache, a
        # head long: several times further below the peak than prefill's 512 queries), it
        # is priced at that pace instead (SmolLM2: forecast/measured decode at depths 50 to
        # 3,000 went from 0.57-1.12 to within 10%).
        self.decode_attention_k: float | None = None
        self._measured_attention = False
        pairs = [(basis.token_s(d) or 0.0, s / n) for n, d, s, *_ in samples.decode]
        candidates = []
        if basis.decode_attention_s is not None:
            candidates.append((1.0, True))
        if self.prefill_split is not None:
            candidates.append((self.prefill_split.k_attention, False))
        for k_a, measured in candidates if samples.decode else ():
            rest = [(x, y - k_a * self._decode_attention(d, measured)) for (x, y), (_, d, *_) in zip(pairs, samples.decode)]
            if all(r >= 0.25 * y for (_, r), (_, y) in zip(rest, pairs)):  # attention cannot be nearly all of it
                pairs, self.decode_attention_k, self._measured_attention = rest, k_a, measured
                break
        self.decode_fit = fit_scale(pairs)
        self.overhead_s = statistics.median(samples.overhead) if samples.overhead else 0.0

    @property
    def calibrated(self) -> bool:
        """Prefill was measured (the time to first token is its point); decode falls
        back to the roofline until a reply of a few tokens was measured too."""
        return self.prefill_fit is not None

    def _parts(self, n: int, depth: int) -> tuple[float, float]:
        """(matrix seconds, attention seconds) of a micro-batch at the roofline."""
        roof = self.basis.prefill_s(n, depth) or 0.0
        share = self.basis.attention_share(n, depth) if self.basis.attention_share else 0.0
        return roof * (1 - share), roof * share

    def microbatch_seconds(self, n: int, depth: int) -> float | None:
        """A quiet machine's seconds for one micro-batch of ``n`` tokens at ``depth``."""
        roof = self.basis.prefill_s(n, depth)
        if roof is None:
            return None
        if self.prefill_split:
            return self.prefill_split.seconds(*self._parts(n, depth))
        return (self.prefill_fit or Fit(1.0, 0.0, 0)).seconds(roof)

    def prefill_seconds(self, prompt_tokens: int, cached: int) -> float | None:
        total, depth, ub = 0.0, cached, max(self.basis.n_ubatch, 1)
        while depth < prompt_tokens:
            n = min(ub, prompt_tokens - depth)
            secs = self.microbatch_seconds(n, depth)
            if secs is None:
                return None
            total += secs
            depth += n
        return total

    def _decode_attention(self, depth: int, measured: bool = False) -> float:
        """Seconds of one decode token's attention at ``depth``: at the pace the probe
        measured for it (``measured``), else at the roofline."""
        b = self.basis
        if measured and b.decode_attention_s is not None:  # measured: the probe timed it
            return b.decode_attention_s(depth) or 0.0
        if b.attention_share is None:
            return 0.0
        roof = (b.peak_prefill_s if b.peak_prefill_s is not None else b.prefill_s)(1, depth)
        return (roof or 0.0) * b.attention_share(1, depth)

    def token_seconds(self, depth: int) -> float | None:
        roof = self.basis.token_s(depth)
        if roof is None:
            return None
        attention = (self.decode_attention_k * self._decode_attention(depth, self._measured_attention)
                     if self.decode_attention_k else 0.0)
        return (self.decode_fit or Fit(1.0, 0.0, 0)).seconds(roof) + attention

    def forecast(self, prompt_tokens: int, cached: int, reply_tokens: int = 256) -> Forecast:
        cached = min(max(cached, 0), max(prompt_tokens - 1, 0))  # the last token is always computed
        pre = self.prefill_seconds(prompt_tokens, cached)
        tok = self.token_seconds(prompt_tokens + reply_tokens // 2)
        ttft = pre + (self.overhead_s if self.calibrated else 0.0) if pre is not None else None
        new = prompt_tokens - cached
        reply = ttft + max(reply_tokens - 1, 0) * tok if ttft is not None and tok is not None else None
        return Forecast(prompt_tokens, cached, reply_tokens, ttft, pre, new / pre if pre else None,
                        1 / tok if tok else None, reply, "calibrated" if self.calibrated else "roofline",
                        self.n_turns if self.calibrated else 0)
