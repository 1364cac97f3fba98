"""The CPU probe: read bandwidth with every core and matmul FLOPS, measured here.

Cached per machine in the cache folder. A probe taken while other work held the CPU
reads low (measured here: 19.6 GB/s busy, ~34 GB/s quiet), and a ceiling that a
measured rate beats is not a ceiling: so the probe records how busy the machine was
just before it and says so in the hardware line. A probe taken under load is never the
machine's ceiling (``cpu_profile`` says the rule): it is taken again once the machine
is quiet (and whenever a turn beats it: tui/turn/cpu_watch.py), and until then its figures
are handed out as what they are, lower bounds of the ceilings (``as_lower_bound``: "probed
at 92% busy: at least ..."). No correction factor: one taken at 100% busy was "corrected"
by x2 bandwidth and x4 FLOPS to 9.0 GB/s and 0.482 TFLOPS, where the quiet probe then
measured 15.3 GB/s and 0.336 TFLOPS (the compute ceiling read 1,791 for 1,249 tok/s).
"""

from __future__ import annotations

import json
import math
import os
import platform
import time
from dataclasses import asdict, dataclass

from kvtop.runner.units import MIB


@dataclass(frozen=True)
class CPUProbe:
    """Measured CPU figures: read bandwidth with all cores, and matmul FLOPS."""

    bandwidth_gbs: float
    tflops: float
    threads: int
    seconds: float
    measured_at: float
    machine: str
    busy: float | None = None  # the machine's CPU use just before the probe (0..1); None: not measured
    loadavg: float | None = None  # the 1-minute load average then
    # The compute peak's parts: numpy's f32 matmul, and llama.cpp's own CPU mul_mat per
    # weight type (runner.system.ggml_matmul); ``tflops`` is the fastest of them, since
    # a quantised model's prefill runs the integer kernels, faster per FLOP than f32.
    # None in probes cached before these existed.
    f32_tflops: float | None = None
    kernel_tflops: dict[str, float] | None = None
    # The fastest kernel's TFLOPS at a batch of n tokens, keyed by n as a string ("1",
    # "4", ... "512"): a small micro-batch reaches less of the peak (tflops_at). None in
    # probes cached before it existed (every batch is then priced at the peak).
    batch_tflops: dict[str, float] | None = None
    version: int = 0  # PROBE_VERSION of the kvtop that took it (0: before versions)
    # No longer set (an older kvtop multiplied a disturbed probe's figures by these); kept
    # so that its cached probes still read. The cache always holds what was measured.
    bandwidth_factor: float | None = None
    flops_factor: float | None = None
    # One decode token's attention per head size ("64", "128", "256"): f16 matrix-vector
    # products a head long (runner.system.ggml_matmul.probe_attention). None in probes
    # cached before it existed (decode's attention is then priced at prefill's efficiency).
    attention_tflops: dict[str, float] | None = None
    # handed out by cpu_profile while disturbed: its figures are lower bounds of the
    # ceilings (as_lower_bound), until a quiet probe replaces it
    lower_bound: bool = False

    def attention_tflops_at(self, head_dim: int) -> float | None:
        """Decode attention's TFLOPS for heads of ``head_dim`` (linear in log2 between the
        sizes probed, the nearest outside them); None without figures."""
        pts = sorted((int(k), v) for k, v in (self.attention_tflops or {}).items() if v and v > 0)
        if not pts or head_dim <= 0:
            return None
        if head_dim <= pts[0][0]:
            return pts[0][1]
        for (h0, t0), (h1, t1) in zip(pts, pts[1:]):
            if head_dim <= h1:
                w = (math.log2(head_dim) - math.log2(h0)) / (math.log2(h1) - math.log2(h0))
                return t0 + w * (t1 - t0)
        return pts[-1][1]

    def tflops_at(self, n: int) -> float:
        """The compute peak for a micro-batch of ``n`` tokens: ``tflops`` scaled by how
        the fastest kernel's FLOPS at ``n`` compare with its FLOPS at the largest batch
        probed (interpolated on log n; at and above that batch, ``tflops`` itself)."""
        return self.tflops * batch_factor(self.batch_tflops, n)

    @property
    def compute_peak(self) -> str:
        """What the compute ceiling assumes: the matmul its FLOPS were measured with."""
        if self.kernel_tflops:
            name, tf = max(self.kernel_tflops.items(), key=lambda kv: kv[1])
            if tf >= (self.f32_tflops or 0.0) and tf >= self.tflops * 0.999:
                return f"llama.cpp {name} matmul"
        return "numpy f32 matmul"

    def describe(self) -> str:
        """When and under what load the figures were measured, and the matmul the compute
        ceiling assumes (the hardware line)."""
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(self.measured_at))
        if self.lower_bound and self.busy is not None:
            return (f"CPU probe ({self.threads} threads, {when}, FLOPS of {self.compute_peak}, probed at "
                    f"{self.busy:.0%} busy: at least {self.bandwidth_gbs:.1f} GB/s, {self.tflops:.3g} TFLOPS; "
                    f"taken again once quiet)")
        load = f", CPU {self.busy:.0%} busy before it" if self.busy is not None else ""
        return f"CPU probe ({self.threads} threads, {when}, FLOPS of {self.compute_peak}{load})"

    @property
    def disturbed(self) -> bool:
        """Taken while other work held a quarter of the CPU or more (the app's busy test,
        runner.calibration.busy): it measured the load, not the machine."""
        return self.busy is not None and self.busy >= BUSY_PROBE

    @property
    def quiet(self) -> bool:
        """Taken on a quiet machine (and it recorded how busy): the machine's own figures."""
        return self.busy is not None and not self.disturbed


def as_lower_bound(probe: CPUProbe) -> CPUProbe:
    """A disturbed probe as what it measured: lower bounds of the ceilings (the load took
    its share of every figure, by how much no model says well enough: the pace model's
    inverse gave x8.5 bandwidth and x72 FLOPS at a load average of 15 on 2 cores); a
    probe that is not disturbed, as it is."""
    from dataclasses import replace

    if not probe.disturbed or probe.lower_bound:
        return probe
    return replace(probe, lower_bound=True)


def _probe_bandwidth(threads: int, nbytes: int = 256 * MIB, repeats: int = 3) -> float:
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    arr = np.ones(nbytes // 8, dtype=np.float64)
    parts = np.array_split(arr, threads)
    best = 0.0
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(np.sum, parts))  # warm up: fault pages in
        for _ in range(repeats):
            t = time.perf_counter()
            list(pool.map(np.sum, parts))
            dt = time.perf_counter() - t
            best = max(best, arr.nbytes / dt / 1e9)
    return best


def _probe_flops(n: int = 1024, repeats: int = 4) -> float:
    import numpy as np

    a = np.random.default_rng(0).random((n, n), dtype=np.float32)
    b = a.T.copy()
    a @ b
    best = 0.0
    for _ in range(repeats):
        t = time.perf_counter()
        a @ b
        dt = time.perf_counter() - t
        best = max(best, 2 * n**3 / dt / 1e12)
    return best


def batch_factor(batch_tflops: dict[str, float] | None, n: int) -> float:
    """The fastest kernel's FLOPS at ``n`` tokens over those at the largest batch probed:
    linear in log n between the batches probed, flat outside them; 1.0 without figures.

    Each batch's figure is the best of those at it and below: a batch is never slower
    than a smaller one, and a moment of other work only lowers a figure (measured here
    with the CPU 100% busy: 128 tokens read a third of 64's), so a dip is that."""
    pts = sorted((int(b), tf) for b, tf in (batch_tflops or {}).items() if tf and tf > 0)
    if not pts:
        return 1.0
    for i in range(1, len(pts)):
        pts[i] = (pts[i][0], max(pts[i][1], pts[i - 1][1]))
    top = pts[-1][1]
    n = max(n, 1)
    if n <= pts[0][0]:
        return pts[0][1] / top
    for (b0, t0), (b1, t1) in zip(pts, pts[1:]):
        if n <= b1:
            w = (math.log(n) - math.log(b0)) / (math.log(b1) - math.log(b0))
            return (t0 + w * (t1 - t0)) / top
    return 1.0


# What a cached probe holds: 1 added the fastest kernel per batch size (batch_tflops),
# 2 decode attention's pace per head size (attention_tflops). A probe cached by an older
# kvtop is taken again once the machine is quiet.
PROBE_VERSION = 2
BUSY_PROBE = 0.25  # other work held this share of the CPU: the probe reads low
QUIET_PROBE = 0.15  # below this the machine is quiet enough to probe again


def machine_key() -> str:
    return f"{platform.node()}-{platform.machine()}-{os.cpu_count()}"


def probe_cpu_in_subprocess() -> CPUProbe:
    """Run the probe in a short-lived process: its 256 MiB buffer and the BLAS threads
    numpy starts (which keep spinning for a while after a matmul) stay out of the
    process that goes on to watch the model."""
    import subprocess
    import sys

    from kvtop.runner.process.lifeline import child_env

    # No huge pages for the probe's buffer (numpy asks for them): once it is freed the
    # kernel compacts memory for seconds, and the model's first decode ran 2% slower
    # (measured here: 0.981 of a decode without the probe before it, 0.997 with this).
    # llama.cpp's mmap-ed weights do not ask for huge pages either.
    env = child_env(NUMPY_MADVISE_HUGEPAGE="0")
    code = ("from kvtop.runner.process.lifeline import die_with_parent; die_with_parent(); "  # no orphan probe
            "import json, dataclasses; from kvtop.runner.system.hardware import probe_cpu; "
            "print(json.dumps(dataclasses.asdict(probe_cpu())))")
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                             timeout=60, check=True)
        return CPUProbe(**json.loads(out.stdout.strip().splitlines()[-1]))
    except (subprocess.SubprocessError, OSError, ValueError, TypeError, IndexError):
        return probe_cpu()


def machine_busy(seconds: float = 0.5) -> float | None:
    """The whole machine's CPU use over ``seconds`` (0..1), None when unreadable."""
    import psutil

    try:
        return float(psutil.cpu_percent(interval=seconds)) / 100.0
    except Exception:
        return None


def compute_peak_tflops(f32_tflops: float, kernel_tflops: dict[str, float] | None) -> float:
    """The compute ceiling: the fastest matmul measured, numpy's f32 or one of llama.cpp's
    quantised kernels (a ceiling that a measured rate beats is not a ceiling)."""
    return max([f32_tflops, *(kernel_tflops or {}).values()])


def probe_cpu(threads: int | None = None) -> CPUProbe:
    from kvtop.runner.system.ggml_matmul import probe_attention, probe_batch_curve, probe_kernels

    threads = threads or os.cpu_count() or 1
    busy = machine_busy()
    t = time.perf_counter()
    bw = _probe_bandwidth(threads)
    fl = _probe_flops()
    kernels = probe_kernels(threads)
    curve = probe_batch_curve(threads) if kernels else {}
    if kernels:
        curve["512"] = max(kernels.values())  # probe_kernels' batch
    attention = probe_attention(threads) if kernels else {}
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return CPUProbe(bw, compute_peak_tflops(fl, kernels), threads, time.perf_counter() - t, time.time(),
                    machine_key(), busy, load, fl, kernels, curve or None, PROBE_VERSION,
                    attention_tflops=attention or None)


def cpu_profile(cache_dir: str | None = None, refresh: bool = False) -> CPUProbe:
    """The machine's CPU figures, cached on disk per machine; ``refresh`` probes again.

    The rule: a probe is the machine's ceiling only when taken on a quiet machine. One
    taken while others held a quarter of the CPU or more (``disturbed``) measured the
    load: here ~60x low FLOPS, kept as the ceiling for as long as the machine stayed busy.

    - A quiet probe is kept whatever the load now, and a disturbed one never replaces it:
      the load is priced where it acts, on the forecast (runner.calibration.load) and on
      each calibration sample (runner.calibration.pace).
    - A disturbed probe, one that did not record how busy, or one of an older kvtop is
      taken again as soon as kvtop starts on a quiet machine (and the app takes it again
      when the machine turns quiet: tui/turn/cpu_watch.py).
    - Until then the disturbed probe (as measured, in the cache) is handed out as lower
      bounds (``as_lower_bound``), and the hardware line says so."""
    if cache_dir is None:
        from platformdirs import user_cache_dir

        cache_dir = user_cache_dir("kvtop")
    path = os.path.join(cache_dir, f"cpu-probe-{machine_key()}.json")
    cached = None
    try:
        with open(path) as fh:
            cached = CPUProbe(**json.load(fh))
    except (OSError, ValueError, TypeError):
        pass
    if cached is not None and not refresh:
        if cached.quiet and cached.version >= PROBE_VERSION:
            return cached
        if (machine_busy(0.3) or 0.0) >= QUIET_PROBE:  # busy now: a new probe would read the load
            return as_lower_bound(cached)
    probe = probe_cpu_in_subprocess()
    if probe.disturbed and cached is not None and cached.quiet:
        return cached  # a quiet probe is never replaced by one taken under load
    try:
        os.makedirs(cache_dir, exist_ok=True)
        tmp = path + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(asdict(probe), fh)
        os.replace(tmp, path)
    except OSError:
        pass
    return as_lower_bound(probe)
