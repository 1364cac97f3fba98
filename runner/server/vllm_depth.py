"""``kvtop bench --server URL -d D`` on vLLM: pp at depth as llama-bench means it, the P
prompt tokens computed with D tokens already in the KV cache.

llama-bench fills the depth, then times the P tokens after it. vLLM keeps no client's KV
between requests, but its prefix cache serves the blocks that a request with the same
``cache_salt`` computed: each repetition's depth fill gets a salt of its own, and the
prompt that continues it (the depth's tokens, then P more) the same salt (``Salts``), so vLLM
computes the P tokens only; its prefill histogram times them (runner/server/vllm_timing.py)
and ``prefix_cache_hits_total`` counts the D it served from the cache (``prefix_hits``).
vLLM caches whole blocks (``block_size`` tokens, 128 on the CPU build): a depth that is not a
multiple of it would leave its last ``D mod block_size`` tokens to compute again with the
prompt, so such a ``-d`` is refused, saying so (``depth_refusal``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvtop.runner.sanitize import clean_line
from kvtop.runner.server.http import ServerClient, ServerError
from kvtop.runner.server.prom import Metrics
from kvtop.runner.server.vllm import VllmReading, is_vllm_metrics
from kvtop.runner.server.vllm_timing import cache_salt

if TYPE_CHECKING:
    from kvtop.runner.server.credentials import Credentials

HITS = "vllm:prefix_cache_hits_total"
LLAMA_SERVER = ("-d needs the KV cache kept between requests, and kvtop asks llama-server to compute every "
                "prompt whole (cache_prompt false): bench a MODEL file for depth tests")


class Salts:
    """The ``cache_salt`` of each bench request: the last one's when this prompt continues
    the last prompt (a depth, then its P tokens), else a new one (no block of any other
    request's cache: each repetition computes what it times)."""

    def __init__(self) -> None:
        self._last: tuple[tuple[int, ...], str] | None = None

    def for_tokens(self, tokens: tuple[int, ...] | list[int]) -> str:
        tokens = tuple(tokens)
        last = self._last
        if last is not None and len(tokens) > len(last[0]) and tokens[:len(last[0])] == last[0]:
            salt = last[1]
        else:
            salt = cache_salt()
        self._last = (tokens, salt)
        return salt


def prefix_hits(client: ServerClient) -> float | None:
    """The prompt tokens vLLM has served from its prefix cache since it started; None when
    not published."""
    try:
        return Metrics(client.get_text("/metrics")).value(HITS)
    except ServerError:
        return None


def depth_refusal(url: str, api_key: str | Credentials | None, depths: list[int]) -> str | None:
    """The usage error for ``-d`` on this server, or None when every depth can be measured
    (a vLLM, depths in whole blocks)."""
    client = ServerClient(url, api_key, 10.0)
    try:
        text = client.get_text("/metrics")
    except ServerError as exc:
        if exc.reached:
            return LLAMA_SERVER
        return f"{LLAMA_SERVER} ({clean_line(client.url, 200)} did not answer to say it is a vLLM, whose prefix cache keeps it)"
    finally:
        client.close()
    if not is_vllm_metrics(text):
        return LLAMA_SERVER
    block = VllmReading.parse(text).cache.block_size
    if not block:
        return "-d on vLLM needs its cache block size (vllm:cache_config_info), and this vLLM publishes none"
    odd = [d for d in depths if d % block]
    if odd:
        d = odd[0]
        return (f"-d {d}: vLLM caches whole blocks of {block} tokens, so the last {d % block} tokens of a {d}-token "
                f"depth would be computed again with the prompt: give -d in multiples of {block} "
                f"(e.g. -d {max(d // block, 1) * block})")
    return None
