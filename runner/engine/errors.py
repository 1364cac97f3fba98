"""The engine's load error: a reason in one line for a user (here, so that the modules
the engine loads with can raise it too)."""


class EngineLoadError(Exception):
    pass
