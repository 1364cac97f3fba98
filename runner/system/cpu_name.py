"""The CPU's model name, for screenshots and bug reports.

``platform.processor()`` is empty on Linux (it reads ``uname -p``, "unknown" or ""),
so the name comes from ``/proc/cpuinfo`` ("model name", or "Hardware"/"Model" on some
ARM boards), from ``sysctl machdep.cpu.brand_string`` on macOS, and only then from
``platform``; "" when none says.
"""

from __future__ import annotations

import functools
import platform
import subprocess

from kvtop.runner.sanitize import clean_line


def name_from_cpuinfo(text: str) -> str:
    """The first "model name" (x86, most ARM) or else "Hardware"/"Model" (Raspberry Pi
    and other boards) in a /proc/cpuinfo text; "" when none."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        key = key.strip().lower()
        if sep and value.strip() and key in ("model name", "hardware", "model", "cpu model") and key not in found:
            found[key] = value.strip()
    for key in ("model name", "cpu model", "hardware", "model"):
        if key in found:
            return " ".join(found[key].split())
    return ""


@functools.lru_cache(maxsize=1)
def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            name = name_from_cpuinfo(fh.read(1 << 20))
        if name:
            return clean_line(name, 80)
    except OSError:
        pass
    if platform.system() == "Darwin":
        try:
            out = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True,
                                 timeout=2, check=False).stdout.strip()
            if out:
                return clean_line(out, 80)
        except (OSError, subprocess.SubprocessError):
            pass
    return clean_line(platform.processor() or "", 80)
