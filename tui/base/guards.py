"""``while_running``: the one guard on every handler of a message that a thread posts
(the engine's bridge, the workers, the server poller, the load sweep).

Such a thread keeps posting until it is stopped, and Textual dispatches what is queued
even while the app shuts down, after the dashboard's widgets were removed: a handler
that looks a pane up then raised NoMatches at the end of the run (an engine token, 1 run
in 7 beside a CPU hog; a llama-server poll at the end of a restart test). Textual has no
public hook at dispatch, so each such handler carries the guard.
"""

from __future__ import annotations

import functools


def while_running(handler):
    """Drop the message once the app has begun shutting down (``is_running`` false)."""
    @functools.wraps(handler)
    def guarded(self, m):
        if not self.is_running:
            return None
        return handler(self, m)  # a coroutine for an async handler: Textual awaits it

    return guarded
