"""Telling a vLLM server from other servers by what it says, and what it says about itself.

A llama-server answers ``/props``; a vLLM does not, but answers ``/version``
(``{"version": "0.32.0"}``) and a ``/metrics`` whose names start ``vllm:``. Both are
asked: a proxy that forwards ``/version`` alone is not taken for vLLM. Any other server
that answers ``/v1/models`` is an OpenAI-compatible server kvtop cannot watch: it is
named (its ``owned_by``) and refused in one line.

``/v1/models`` gives ``max_model_len`` (one context limit for every request: vLLM has
no slots) and ``root``, the folder it serves; when the server runs on this machine that
folder (relative to the server's working directory) is read for the model's facts.
"""

from __future__ import annotations

import os

from kvtop.runner.process.contract import BATCHING_SERVER
from kvtop.runner.sanitize import clean_line
from kvtop.runner.server.checks import MAX_CTX, Refused, count
from kvtop.runner.server.http import ServerClient, ServerError
from kvtop.runner.server.info import ServerInfo, listening_pid
from kvtop.runner.server.urls import is_loopback
from kvtop.runner.server.vllm import is_vllm_metrics


def _version(client: ServerClient) -> str | None:
    try:
        v = client.get_json("/version")
    except ServerError:
        return None
    found = v.get("version") if isinstance(v, dict) else None
    return clean_line(found, 40) if isinstance(found, str) and found else None


def _first_model(client: ServerClient) -> dict[str, object] | None:
    try:
        models = client.get_json("/v1/models")
    except ServerError:
        return None
    data = models.get("data") if isinstance(models, dict) else None
    return data[0] if isinstance(data, list) and data and isinstance(data[0], dict) else None


def _is_vllm(client: ServerClient) -> bool:
    try:
        return is_vllm_metrics(client.get_text("/metrics"))
    except ServerError:
        return False


def _unknown(client: ServerClient, model: dict[str, object] | None, why: ServerError) -> ServerError:
    if model is None:
        return why
    owner = model.get("owned_by")
    named = clean_line(owner, 60) if isinstance(owner, str) and owner else "unnamed"
    return ServerError(f"{clean_line(client.url, 200)} is an OpenAI-compatible server ({named}) that is neither "
                       f"llama-server nor vLLM: kvtop attaches to those two", why.status, reached=True)


def _cmdline_int(argv: list[str], flag: str) -> int | None:
    value = _flag(argv, flag)
    return int(value) if value is not None and value.isdigit() and 0 < int(value) < 1 << 20 else None


def _local(pid: int | None, root: str | None) -> tuple[str | None, int | None]:
    """(the served folder's config.json, ``--max-num-seqs``) of a server on this machine."""
    if pid is None:
        return None, None
    import psutil

    try:
        proc = psutil.Process(pid)
        cwd, argv = proc.cwd(), proc.cmdline()
    except (psutil.Error, OSError):
        return None, None
    config = None
    if root:
        path = os.path.join(cwd, root, "config.json")
        config = path if os.path.isfile(path) else None
    return config, _cmdline_int(argv, "--max-num-seqs")


def read_vllm_info(client: ServerClient, why: ServerError) -> ServerInfo | None:
    """The server's facts when it is vLLM; None when it is not, and a one-line refusal
    (``ServerError``) when it is another OpenAI-compatible server. ``why``: what the
    llama-server check said (kept when nothing here answers either)."""
    version = _version(client)
    model = _first_model(client)
    if version is None or not _is_vllm(client):
        raise _unknown(client, model, why)
    if model is None:
        raise ServerError(f"{clean_line(client.url, 200)}: vLLM {version} answered no model in /v1/models",
                          reached=True)
    try:
        n_ctx = count(model.get("max_model_len"), "max_model_len", MAX_CTX, 1)
    except Refused as exc:
        raise ServerError(f"/v1/models refused: {exc}", reached=True) from None
    root = model.get("root")
    root = clean_line(root, 1000) if isinstance(root, str) and root else None
    model_id = clean_line(str(model.get("id", "")), 200) or None
    pid = listening_pid(client.url) if is_loopback(client.url) else None
    config, seqs = _local(pid, root)
    return ServerInfo(
        model_path=root, model_id=model_id, n_ctx=n_ctx, total_slots=seqs or 1, build_info=f"vLLM {version}",
        chat_template=None, n_params=None, model_bytes=None, n_ctx_train=None, architecture=None, pid=pid,
        engine="vLLM", capabilities=BATCHING_SERVER, config_path=config,
    )


DTYPE_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2, "fp8": 1, "fp8_e4m3": 1,
               "fp8_e5m2": 1, "float8_e4m3fn": 1}


def _flag(argv: list[str], flag: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def kv_bytes_per_token(config_path: str, argv: list[str] | None = None) -> int | None:
    """The KV cache's bytes per token of the served folder (``runner.model.hf_config``'s
    facts, the one model-facts path): K and V of every layer, ``num_key_value_heads ×
    head_dim`` each, in the cache's dtype (the server's ``--kv-cache-dtype``, else its
    ``--dtype``, else the config's). None when a figure is missing."""
    from kvtop.runner.model.hf_config import ConfigError, facts_from_config, read_config

    try:
        facts, cfg = facts_from_config(config_path), read_config(config_path)
    except ConfigError:
        return None
    argv = argv or []
    dtype = next((d for d in (_flag(argv, "--kv-cache-dtype"), _flag(argv, "--dtype"),
                              cfg.get("dtype"), cfg.get("torch_dtype")) if d and d != "auto"), None)
    size = DTYPE_BYTES.get(str(dtype)) if dtype else None
    from kvtop.runner.model.hf_config import kv_bytes_per_token as per_token

    return per_token(facts, size) if size else None


def served_kv_bytes_per_token(client: ServerClient) -> int | None:
    """``kv_bytes_per_token`` of the folder a vLLM on this machine serves, or None (a remote
    server, a folder kvtop cannot read)."""
    model = _first_model(client)
    root = model.get("root") if model else None
    pid = listening_pid(client.url) if is_loopback(client.url) else None
    config, _ = _local(pid, root if isinstance(root, str) else None)
    if config is None or pid is None:
        return None
    import psutil

    try:
        argv = psutil.Process(pid).cmdline()
    except (psutil.Error, OSError):
        argv = []
    return kv_bytes_per_token(config, argv)


def kv_pool_tokens(client: ServerClient) -> int | None:
    """The tokens of a vLLM's KV block pool (``cache_config_info``: blocks × block size)."""
    from kvtop.runner.server.vllm import VllmReading

    try:
        return VllmReading.parse(client.get_text("/metrics")).cache.tokens
    except ServerError:
        return None


def restart_props(client: ServerClient, batching: bool) -> object:
    """What ``RestartWatch`` compares between two processes on one URL: llama-server's
    ``/props``; for a vLLM (``batching``) its ``/version`` and ``/v1/models`` in that shape."""
    if not batching:
        return client.get_json("/props")
    model = _first_model(client) or {}
    return {"engine": "vLLM", "build_info": f"vLLM {_version(client) or '?'}", "model_path": model.get("root"),
            "default_generation_settings": {"n_ctx": model.get("max_model_len")}}
