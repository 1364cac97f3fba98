"""The ``kvtop`` package itself (this folder is installed as ``kvtop``; see pyproject.toml).

The repository keeps its three top-level folders, and the wheel installs them inside one
package named after the tool, so nothing else claims a top-level name:
``runner/`` → ``kvtop.runner`` (engine, physics, forecasts, server clients: never Textual),
``tui/`` → ``kvtop.tui`` (the screens), ``themes/`` → ``kvtop.themes``.
``python -m kvtop`` runs the ``kvtop`` command (``__main__.py``).
"""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

try:
    __version__ = _version("kvtop-llm")
except PackageNotFoundError:  # a copy of the source that was not installed
    __version__ = "0+unknown"
