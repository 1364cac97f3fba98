"""Hardware probes: GPUs through NVML, the CPU by a short measurement, memory by psutil.

Missing hardware is a value, not an exception (as nvitop's ``NA``): every query
returns ``None`` for a figure it cannot read and the reason in ``note``. NVML is
initialised lazily, once, and every call is wrapped.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from kvtop.runner.system.cpu_name import cpu_name
from kvtop.runner.system.cpu_probe import CPUProbe, cpu_profile, probe_cpu_in_subprocess  # noqa: F401 (re-exported)

# Peak dense FLOPS (bf16/fp16 tensor cores, no sparsity) and memory bandwidth of
# known GPUs, from the vendors' datasheets. Matched by substring of the NVML name.
KNOWN_GPUS: list[tuple[str, float, float, str]] = [
    # (name contains, TFLOPS, bandwidth GB/s, source)
    ("H200", 989.0, 4800.0, "NVIDIA H200 datasheet (SXM, dense BF16)"),
    ("H100 PCIe", 756.0, 2000.0, "NVIDIA H100 datasheet (PCIe, dense BF16)"),
    ("H100", 989.0, 3350.0, "NVIDIA H100 datasheet (SXM, dense BF16)"),
    ("A100", 312.0, 2039.0, "NVIDIA A100 datasheet (80GB SXM, dense BF16)"),
    ("L40S", 362.0, 864.0, "NVIDIA L40S datasheet (dense BF16)"),
    ("L4", 121.0, 300.0, "NVIDIA L4 datasheet (dense FP16)"),
    ("RTX 5090", 209.5, 1792.0, "NVIDIA Blackwell GeForce whitepaper (FP16, FP32 accumulate)"),
    ("RTX 4090", 165.2, 1008.0, "NVIDIA Ada whitepaper (FP16, FP32 accumulate)"),
    ("RTX 4080", 97.5, 716.8, "NVIDIA Ada whitepaper (FP16, FP32 accumulate)"),
    ("RTX 3090", 71.0, 936.0, "NVIDIA Ampere GA102 whitepaper (FP16, FP32 accumulate)"),
    ("RTX 3080", 59.5, 760.0, "NVIDIA Ampere GA102 whitepaper (FP16, FP32 accumulate)"),
    ("T4", 65.0, 320.0, "NVIDIA T4 datasheet (FP16 mixed precision)"),
]


@dataclass(frozen=True)
class GPUInfo:
    index: int
    name: str
    memory_total: int | None
    memory_used: int | None
    memory_free: int | None
    utilization: int | None  # percent
    bandwidth_gbs: float | None  # peak, from bus width x max memory clock x 2
    tflops: float | None  # peak, from the table, None when unknown
    tflops_source: str | None
    process_memory: int | None = None  # bytes used by the process asked about


@dataclass(frozen=True)
class GPUReport:
    gpus: tuple[GPUInfo, ...]
    note: str | None  # why there are none, e.g. "no NVIDIA GPU (NVML not found)"


class _NVML:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state: str | None = None  # None: not tried; "ok"; else the reason
        self._nv: Any = None  # the pynvml module once initialised (it has no type information)

    def ensure(self) -> str:
        with self._lock:
            if self._state is None:
                try:
                    import pynvml

                    pynvml.nvmlInit()
                    self._nv = pynvml
                    self._state = "ok"
                except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ImportError
                    self._state = f"no NVIDIA GPU ({_short(exc) or 'NVML unavailable'})"
            return self._state

    @property
    def nv(self) -> Any:
        return self._nv


_NVML_STATE = _NVML()


def _short(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:120]


T = TypeVar("T")


def _try(fn: Callable[..., T], *args: object) -> T | None:
    try:
        return fn(*args)
    except Exception:
        return None


def query_gpus(pid: int | None = None) -> GPUReport:
    state = _NVML_STATE.ensure()
    if state != "ok":
        return GPUReport((), state)
    nv = _NVML_STATE.nv
    count = _try(nv.nvmlDeviceGetCount)
    if not count:
        return GPUReport((), "no NVIDIA GPU (NVML found no devices)")
    gpus = []
    for i in range(count):
        h = _try(nv.nvmlDeviceGetHandleByIndex, i)
        if h is None:
            continue
        name = _try(nv.nvmlDeviceGetName, h) or "unknown GPU"
        if isinstance(name, bytes):
            name = name.decode(errors="replace")
        mem = _try(nv.nvmlDeviceGetMemoryInfo, h)
        util = _try(nv.nvmlDeviceGetUtilizationRates, h)
        bus = _try(nv.nvmlDeviceGetMemoryBusWidth, h)
        clk = _try(nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_MEM)
        bw = bus * clk * 2 / 8 / 1000 if bus and clk else None  # bits x MHz x DDR -> GB/s
        tf, src, table_bw = None, None, None
        for key, tflops, bw_gbs, source in KNOWN_GPUS:
            if key in name:
                tf, src, table_bw = tflops, source, bw_gbs
                break
        if bw is None:
            bw = table_bw
        proc_mem = None
        if pid is not None:
            procs = _try(nv.nvmlDeviceGetComputeRunningProcesses, h) or []
            for p in procs:
                if getattr(p, "pid", None) == pid:
                    proc_mem = getattr(p, "usedGpuMemory", None)
        gpus.append(GPUInfo(
            index=i, name=name,
            memory_total=getattr(mem, "total", None), memory_used=getattr(mem, "used", None),
            memory_free=getattr(mem, "free", None), utilization=getattr(util, "gpu", None),
            bandwidth_gbs=bw, tflops=tf, tflops_source=src, process_memory=proc_mem,
        ))
    return GPUReport(tuple(gpus), None)


@dataclass(frozen=True)
class HardwareProfile:
    """The figures an estimate uses, each with where it came from.

    ``bandwidth_gbs``, ``tflops``, ``source`` and ``memory_*`` are one device's: the
    one the whole model would run on (the first GPU when layers are offloaded to one,
    else the CPU), for callers that take a single figure. A model split across devices
    (``-ngl`` below the layer count) is estimated per device from the ``cpu_*`` figures
    and each GPU's (runner.physics.offload)."""

    bandwidth_gbs: float | None
    tflops: float | None
    source: str  # "cpu probe", "GPU 0 (NVIDIA H200)", "override", ...
    memory_free: int | None
    memory_total: int | None
    cpu: CPUProbe | None = None
    gpus: tuple[GPUInfo, ...] = ()
    gpu_note: str | None = None
    cpu_name: str = field(default_factory=cpu_name)  # /proc/cpuinfo's model name (runner.system.cpu_name)
    # The CPU and system memory, whichever device the single figures describe (None in
    # profiles recorded before these existed: the single figures are the CPU's when no
    # GPU was found).
    cpu_bandwidth_gbs: float | None = None
    cpu_tflops: float | None = None
    cpu_source: str | None = None
    cpu_memory_free: int | None = None
    cpu_memory_total: int | None = None
    # --gpu-bandwidth-gbs / --gpu-tflops: every GPU's figures, or a GPU's where none is
    # found (to estimate a GPU machine from this one)
    gpu_bandwidth_gbs: float | None = None
    gpu_tflops: float | None = None

    @property
    def gpu_given(self) -> bool:
        """GPU figures were given on the command line."""
        return self.gpu_bandwidth_gbs is not None or self.gpu_tflops is not None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _cpu_figures(bandwidth_gbs: float | None, tflops: float | None, refresh: bool,
                 cache_dir: str | None) -> tuple[float | None, float | None, str, CPUProbe | None]:
    """The CPU's (bandwidth, FLOPS, source, probe): the probe (cached per machine) for
    any figure not given."""
    if bandwidth_gbs is not None and tflops is not None:
        return bandwidth_gbs, tflops, "CPU figures given", None
    cpu = cpu_profile(cache_dir, refresh)
    src = cpu.describe() + (" + override" if bandwidth_gbs or tflops else "")
    return (bandwidth_gbs if bandwidth_gbs is not None else cpu.bandwidth_gbs,
            tflops if tflops is not None else cpu.tflops, src, cpu)


def hardware_profile(
    n_gpu_layers: int = 0,
    bandwidth_gbs: float | None = None,
    tflops: float | None = None,
    refresh: bool = False,
    cache_dir: str | None = None,
    *,
    gpu_bandwidth_gbs: float | None = None,
    gpu_tflops: float | None = None,
) -> HardwareProfile:
    """Every device's figures: the CPU's (measured, or ``bandwidth_gbs``/``tflops``)
    and each GPU's (NVML and the datasheet table, or ``gpu_bandwidth_gbs``/``gpu_tflops``).

    The single figures are the first GPU's when layers are offloaded to a GPU (found,
    or given by its figures), else the CPU's."""
    import psutil

    gpu = query_gpus()
    vm = psutil.virtual_memory()
    cpu_bw, cpu_tf, cpu_src, cpu = _cpu_figures(bandwidth_gbs, tflops, refresh, cache_dir)
    bw, tf, src, free, total = cpu_bw, cpu_tf, cpu_src, vm.available, vm.total
    if n_gpu_layers != 0 and gpu.gpus:
        g = gpu.gpus[0]
        bw = gpu_bandwidth_gbs if gpu_bandwidth_gbs is not None else g.bandwidth_gbs
        tf = gpu_tflops if gpu_tflops is not None else g.tflops
        src = f"GPU {g.index} ({g.name})" + (" + override" if gpu_bandwidth_gbs or gpu_tflops else "")
        free, total = g.memory_free, g.memory_total
    elif n_gpu_layers != 0 and (gpu_bandwidth_gbs is not None or gpu_tflops is not None):
        bw, tf, src, free, total = gpu_bandwidth_gbs, gpu_tflops, "GPU figures given", None, None
    return HardwareProfile(
        bandwidth_gbs=bw, tflops=tf, source=src, memory_free=free, memory_total=total,
        cpu=cpu, gpus=gpu.gpus, gpu_note=gpu.note,
        cpu_bandwidth_gbs=cpu_bw, cpu_tflops=cpu_tf, cpu_source=cpu_src,
        cpu_memory_free=vm.available, cpu_memory_total=vm.total,
        gpu_bandwidth_gbs=gpu_bandwidth_gbs, gpu_tflops=gpu_tflops,
    )


@dataclass(frozen=True)
class ProcessMemory:
    rss: int | None
    note: str | None = None


def process_memory(pid: int | None) -> ProcessMemory:
    """RSS of a process; psutil's AccessDenied/NoSuchProcess become N/A."""
    import psutil

    if pid is None:
        return ProcessMemory(None, "no process")
    try:
        return ProcessMemory(psutil.Process(pid).memory_info().rss)
    except psutil.NoSuchProcess:
        return ProcessMemory(None, "process gone")
    except psutil.AccessDenied:
        return ProcessMemory(None, "access denied")
    except Exception as exc:
        return ProcessMemory(None, _short(exc))


@dataclass(frozen=True)
class SystemMemory:
    total: int | None
    available: int | None
    used: int | None
    swap_used: int | None
    swap_total: int | None


def system_memory() -> SystemMemory:
    import psutil

    try:
        vm = psutil.virtual_memory()
        total, avail, used = vm.total, vm.available, vm.total - vm.available
    except Exception:
        total = avail = used = None
    try:
        sw = psutil.swap_memory()
        swu, swt = sw.used, sw.total
    except Exception:
        swu = swt = None
    return SystemMemory(total, avail, used, swu, swt)
