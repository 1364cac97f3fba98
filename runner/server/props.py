"""What a llama-server says about itself (``/health``, ``/props``, ``/v1/models``), checked.

A URL that is not a llama-server, or one whose answers are malformed, gets a clear
one-line reason instead of a traceback; every number is checked before use.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from kvtop.runner.sanitize import clean_line
from kvtop.runner.server.checks import MAX_CTX, MAX_SLOTS, Refused, count
from kvtop.runner.server.http import ServerClient, ServerError
from kvtop.runner.server.info import ServerInfo, listening_pid
from kvtop.runner.server.urls import is_loopback


def _int(v: object, lo: int = 0, hi: int = 10**15) -> int | None:
    """An optional figure (``/v1/models``' meta): None, unknown, when it is not a count."""
    try:
        return count(v, "", hi, lo)
    except Refused:
        return None


def _required(v: object, what: str, hi: int) -> int:
    """A figure the physics needs: one that is not a count refuses the server in one line."""
    try:
        return count(v, what, hi, 1)
    except Refused as exc:
        raise ServerError(f"/props refused: {exc}", reached=True) from None


def _health(client: ServerClient, wait_s: float) -> object:
    """``/health``; a server still loading its model (503) is waited for up to ``wait_s``."""
    import time

    deadline = time.monotonic() + wait_s
    while True:
        try:
            return client.get_json("/health")
        except ServerError as exc:
            if exc.status != 503 or time.monotonic() > deadline:
                raise
        time.sleep(0.5)


def read_server_info(client: ServerClient, wait_s: float = 120.0) -> ServerInfo:
    """What the server at ``client`` says it is: a llama-server (``/props``) or a vLLM
    (``/version`` and ``vllm:`` metrics, runner/server/vllm_info.py); any other server is
    named and refused in one line (``ServerError``)."""
    try:
        return _read_llama_info(client, wait_s)
    except ServerError as exc:
        # only an answer that is not llama-server's (not one that is hostile, slow, or a key refused)
        if exc.status in (None, 401, 503) or not (exc.status == 404 or "llama-server" in str(exc)):
            raise
        from kvtop.runner.server.vllm_info import read_vllm_info

        found = read_vllm_info(client, exc)
        if found is None:
            raise
        return found


def _read_llama_info(client: ServerClient, wait_s: float) -> ServerInfo:
    try:
        health = _health(client, wait_s)
    except ServerError as exc:
        if exc.status is not None and exc.status >= 300 and exc.status not in (401, 503):
            raise ServerError(f"{client.url} does not look like llama-server (/health answered HTTP {exc.status})",
                              exc.status) from None
        raise
    if not isinstance(health, dict) or "status" not in health:
        raise ServerError(f"{client.url} does not look like llama-server (/health has no status)")
    try:
        props = client.get_json("/props")
    except ServerError as exc:
        path = urlsplit(client.url).path.rstrip("/")
        if exc.status == 404 and path:  # llama-server answers /v1/health too, so /v1 got this far
            raise ServerError(f"{exc} at {clean_line(client.url, 200)}: give llama-server's root URL, "
                              f"without {clean_line(path, 80)}", exc.status) from None
        raise
    if not isinstance(props, dict) or "default_generation_settings" not in props:
        raise ServerError(f"{client.url} does not look like llama-server (/props has no default_generation_settings)")
    gen = props.get("default_generation_settings")
    if not isinstance(gen, dict) or gen.get("n_ctx") is None:
        raise ServerError(f"{client.url}: /props has no n_ctx")
    n_ctx = _required(gen.get("n_ctx"), "n_ctx", MAX_CTX)
    slots = _required(props["total_slots"], "total_slots", MAX_SLOTS) if props.get("total_slots") is not None else 1
    meta: dict[str, object] = {}
    model_id = None
    try:
        models = client.get_json("/v1/models")
        data = models.get("data") if isinstance(models, dict) else None
        if isinstance(data, list) and data and isinstance(data[0], dict):
            model_id = clean_line(str(data[0].get("id", "")), 200) or None
            found = data[0].get("meta")
            meta = found if isinstance(found, dict) else {}
    except ServerError:
        pass
    model_path = props.get("model_path")
    tmpl = props.get("chat_template")
    return ServerInfo(
        model_path=clean_line(model_path, 1000) if isinstance(model_path, str) and model_path else None,
        model_id=model_id,
        n_ctx=n_ctx,
        total_slots=slots,
        build_info=clean_line(str(props.get("build_info", "unknown build")), 80),
        chat_template=tmpl if isinstance(tmpl, str) and tmpl else None,
        n_params=_int(meta.get("n_params"), 1, 10**14),
        model_bytes=_int(meta.get("size"), 1, 2**50),
        n_ctx_train=_int(meta.get("n_ctx_train"), 1, MAX_CTX),
        architecture=None,
        pid=listening_pid(client.url) if is_loopback(client.url) else None,
    )


def threads_from_cmdline(argv: list[str]) -> int | None:
    """The decode threads a llama-server command line asks for (``-t N``, ``--threads N``,
    ``--threads=N``), or None when it leaves llama.cpp's default (the physical cores)."""
    found = None
    for i, arg in enumerate(argv):
        value = None
        if arg in ("-t", "--threads") and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith("--threads="):
            value = arg.split("=", 1)[1]
        if value is not None:
            try:
                n = int(value)
            except ValueError:
                continue
            found = n if n > 0 else None  # -t -1 (or 0): llama.cpp's default
    return found


def local_server_threads(url: str) -> int | None:
    """The decode threads of the llama-server listening on ``url`` on this machine, read
    from its command line (llama-server does not publish them), or None when unknown.
    The compute roof is the probe's FLOPS on its threads; a server run with fewer (a
    trial's ``-t 1`` on 2 cores) has only that share of them: its roof was 132 tok/s
    beside a measured 20."""
    import psutil

    pid = listening_pid(url)
    if not pid:
        return None
    try:
        return threads_from_cmdline(psutil.Process(pid).cmdline())
    except (psutil.Error, OSError):
        return None

__all__ = ["ServerInfo", "listening_pid", "read_server_info", "local_server_threads", "threads_from_cmdline"]
