"""Where kvtop keeps files: config, sessions, screenshots, exports, the CPU probe.

``KVTOP_HOME`` puts everything under one folder (tests and portable setups);
otherwise the platform's user directories (platformdirs).
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Paths:
    config_dir: str
    data_dir: str
    cache_dir: str

    @property
    def config_file(self) -> str:
        return os.path.join(self.config_dir, "config.json")

    @property
    def sessions_dir(self) -> str:
        return os.path.join(self.data_dir, "sessions")

    @property
    def screenshots_dir(self) -> str:
        return os.path.join(self.data_dir, "screenshots")

    @property
    def exports_dir(self) -> str:
        return os.path.join(self.data_dir, "exports")


def default_paths() -> Paths:
    home = os.environ.get("KVTOP_HOME")
    if home:
        return Paths(os.path.join(home, "config"), os.path.join(home, "data"), os.path.join(home, "cache"))
    from platformdirs import user_cache_dir, user_config_dir, user_data_dir

    return Paths(user_config_dir("kvtop"), user_data_dir("kvtop"), user_cache_dir("kvtop"))


def unique_file(directory: str, stem: str, ext: str) -> tuple[str, object]:
    """Create a new file named by kvtop inside ``directory``; never overwrite one.

    ``stem`` is kvtop's own (a timestamp), never user text; the file is opened with
    O_EXCL, so an existing file (or a planted link) is never followed or replaced.
    """
    os.makedirs(directory, exist_ok=True)
    safe = "".join(c for c in stem if c.isalnum() or c in "-_") or "kvtop"
    for i in range(1000):
        name = f"{safe}{'' if i == 0 else f'-{i}'}.{ext}"
        path = os.path.join(directory, name)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            continue
        return path, os.fdopen(fd, "w", encoding="utf-8")
    raise OSError(f"no free file name for {safe}.{ext} in {directory}")
