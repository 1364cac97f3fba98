"""Compatibility shim: ``load_facts``/``ModelFileError`` moved to ``runner.model.inspect``,
``memory_check`` to ``runner.physics.memory_check``, ``estimate_report``/``format_report``
to ``runner.commands.estimate``. Remove once nothing imports this module."""

from runner.commands.estimate import estimate_report, format_report  # noqa: F401
from runner.model.inspect import ModelFileError, check_consistent, load_facts  # noqa: F401
from runner.physics.memory_check import COMPUTE_BUFFER_GUESS, MemoryCheck, memory_check  # noqa: F401
