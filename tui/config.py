"""User preferences (theme, ...) in a JSON file under the user's config directory."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass


@dataclass
class Preferences:
    theme: str = "kvtop-dark"
    markdown: bool = False  # render finished model replies as Markdown (F3)


def load_preferences(path: str) -> Preferences:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        return Preferences(theme=str(data.get("theme", Preferences.theme)),
                           markdown=data.get("markdown") is True)
    except (OSError, ValueError, AttributeError):
        return Preferences()


def save_preferences(path: str, prefs: Preferences) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(asdict(prefs), fh, indent=2)
    os.replace(tmp, path)
