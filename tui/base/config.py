"""User preferences (theme, ...) in a JSON file under the user's config directory.

Whatever is in the file (or in its place: a directory, a 100k-deep ``[[[[…]]]]``, a
gigabyte of anything), kvtop starts: a file that cannot be used gives the defaults and
a one-line ``notice`` saying why, which the app shows. A missing file is the first
run, not a problem: no notice.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field

from kvtop.runner.sanitize import clean_line

MAX_CONFIG_BYTES = 1024 * 1024  # a real config is a few dozen bytes


@dataclass
class Preferences:
    theme: str = "kvtop-dark"
    markdown: bool = False  # render finished model replies as Markdown (F3)
    # why the file was not (fully) used, one line for the user; never saved
    notice: str | None = field(default=None, compare=False)

    def to_dict(self) -> dict:
        """What is saved."""
        return {"theme": self.theme, "markdown": self.markdown}


_MISSING = object()


def _read(path: str) -> tuple[object, str | None]:
    """(the parsed JSON, None) or (None, why it cannot be used); (_MISSING, None) if there is none."""
    try:
        st = os.stat(path)
        if stat.S_ISDIR(st.st_mode):
            return None, "is a directory"
        if not stat.S_ISREG(st.st_mode):  # a FIFO or a device would block or never end
            return None, "is not a regular file"
        with open(path, "rb") as fh:
            raw = fh.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        return _MISSING, None
    except IsADirectoryError:
        return None, "is a directory"
    except OSError as exc:
        return None, f"cannot be read ({exc.strerror or type(exc).__name__})"
    if len(raw) > MAX_CONFIG_BYTES:
        return None, "is larger than 1 MiB"
    try:
        return json.loads(raw.decode("utf-8")), None
    except UnicodeDecodeError:
        return None, "is not UTF-8 text"
    except RecursionError:
        return None, "is nested too deeply"
    except ValueError as exc:  # json.JSONDecodeError
        return None, f"is not valid JSON ({getattr(exc, 'msg', 'invalid')})"


def load_preferences(path: str) -> Preferences:
    """The saved preferences; the defaults, with ``notice`` set, for a file that cannot be used."""
    data, why = _read(path)
    prefs = Preferences()
    if data is _MISSING:
        return prefs
    if why is None and not isinstance(data, dict):
        why = "is not a JSON object"
    if why is not None:
        prefs.notice = clean_line(f"{path} {why}: using the default preferences", 300)
        return prefs
    bad = []
    theme = data.get("theme", prefs.theme)
    if isinstance(theme, str) and theme.strip():
        prefs.theme = theme
    else:
        bad.append("theme")
    markdown = data.get("markdown", prefs.markdown)
    if isinstance(markdown, bool):
        prefs.markdown = markdown
    else:
        bad.append("markdown")
    if bad:
        prefs.notice = clean_line(f"{path}: ignored {' and '.join(bad)} (wrong type): using the default", 300)
    return prefs


def save_preferences(path: str, prefs: Preferences) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(prefs.to_dict(), fh, indent=2)
    os.replace(tmp, path)
