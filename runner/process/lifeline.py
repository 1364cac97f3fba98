"""A process kvtop starts dies with kvtop (issue 21: orphans that burn CPU).

The engine child and the CPU probe are Python processes that kvtop starts; when kvtop
ends in a way that runs no cleanup (SIGKILL, a crash, the hard deadline of a quit),
nothing would stop them. On Linux the kernel does: ``PR_SET_PDEATHSIG`` sends SIGKILL
when the thread that started the process ends (SIGKILL, not SIGTERM: a stopped
child must die too). A parent that died before the ``prctl`` ran is caught by
comparing ``getppid()`` with the pid kvtop wrote into the environment.
Elsewhere, the engine child also ends when its command pipe reaches its end
(runner/process/child.py).
"""

from __future__ import annotations

import os
import signal

PARENT_ENV = "KVTOP_PARENT_PID"
PR_SET_PDEATHSIG = 1


def child_env(**extra: str) -> dict[str, str]:
    """The environment for a Python child kvtop starts (the engine, the CPU probe): this
    process's, plus ``extra`` and kvtop's pid for ``die_with_parent``. The child imports
    the installed kvtop package as this process did (an editable install finds this
    checkout), so nothing is added to PYTHONPATH (the checkout's root would offer its
    folders as top-level ``runner`` and ``tui``)."""
    env = dict(os.environ, **extra)
    env[PARENT_ENV] = str(os.getpid())  # the child checks it is still ours
    return env


def die_with_parent() -> None:
    """Call first thing in a child kvtop started (with ``child_env``'s environment)."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError, ValueError):  # not Linux
        pass
    expected = os.environ.get(PARENT_ENV, "")
    if expected.isdigit() and os.getppid() != int(expected):
        os._exit(0)  # the parent is already gone: there is no one to work for
