"""What kvtop knows of a server it attaches to (``ServerInfo``), whichever engine it runs,
and the local process behind a loopback URL."""

from __future__ import annotations

from dataclasses import dataclass

from kvtop.runner.process.contract import SERVER, Capabilities


@dataclass(frozen=True)
class ServerInfo:
    model_path: str | None
    model_id: str | None
    n_ctx: int  # per slot
    total_slots: int
    build_info: str
    chat_template: str | None
    n_params: int | None
    model_bytes: int | None
    n_ctx_train: int | None
    architecture: str | None
    pid: int | None  # the server's process when it runs on this machine
    engine: str = "llama-server"  # what the server said it is: the status bar names it
    capabilities: Capabilities = SERVER  # what it publishes (runner/process/contract.py)
    config_path: str | None = None  # the served folder's config.json, when it is on this machine

    @property
    def local_model(self) -> str | None:
        """What kvtop reads the served model's facts from on this machine: llama-server's
        GGUF when the file is readable here, else the folder a vLLM serves (its
        ``config.json``: ``runner.model.hf_config``); None when neither is."""
        import os

        if self.model_path and os.path.isfile(self.model_path):
            return self.model_path
        return os.path.dirname(self.config_path) if self.config_path else None


def listening_pid(url: str) -> int | None:
    """The local process listening on the URL's port (for its RSS), or None."""
    from urllib.parse import urlsplit

    import psutil

    port = urlsplit(url).port or (443 if url.startswith("https") else 80)
    try:
        for c in psutil.net_connections(kind="tcp"):
            if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid:
                return int(c.pid)
    except (psutil.Error, OSError):
        return None
    return None


__all__ = ["ServerInfo", "listening_pid"]
