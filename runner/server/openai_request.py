"""Requests to a server that speaks OpenAI's API and publishes no per-token timings (vLLM).

Only fields such a server reads are sent (llama.cpp's own samplers, ``return_progress``
and ``timings_per_token`` would be ignored at best, refused at worst), and
``stream_options.include_usage`` asks for the token counts in the last chunk, so the turn
counts what the server counted. TTFT and the gaps between tokens are the client's own
clock: the server sends no timings.
"""

from __future__ import annotations

from kvtop.runner.policy.system_prompt import with_system_prompt
from kvtop.runner.process.commands import Chat, Generate
from kvtop.runner.server.http import ServerClient, ServerError
from kvtop.runner.settings import Settings


def openai_request(s: Settings, cmd: Chat | Generate, salt: str | None = None) -> tuple[str, dict[str, object]]:
    common: dict[str, object] = {"stream": True, "stream_options": {"include_usage": True},
                                 "temperature": s.temp, "top_k": s.top_k, "top_p": s.top_p, "min_p": s.min_p,
                                 "repetition_penalty": s.repeat_penalty, "presence_penalty": s.presence_penalty,
                                 "frequency_penalty": s.frequency_penalty}
    if s.seed >= 0:
        common["seed"] = s.seed
    if isinstance(cmd, Chat):
        n = s.n_predict if cmd.n_predict is None else cmd.n_predict
        body = {**common, "messages": with_system_prompt(s.system_prompt, cmd.messages)}
        if n >= 0:
            body["max_tokens"] = n
        if s.ignore_eos:
            body["ignore_eos"] = True
        return "/v1/chat/completions", body
    from kvtop.runner.server.vllm_timing import cache_salt

    # kvtop bench: every repetition computes its whole prompt (no block of another request's cache),
    # or, given the salt of the depth it continues, the prompt after it (runner/server/vllm_depth.py)
    return "/v1/completions", {**common, "prompt": list(cmd.tokens), "max_tokens": cmd.n_predict,
                               "ignore_eos": cmd.ignore_eog, "cache_salt": salt or cache_salt()}


def openai_prompt_tokens(client: ServerClient, messages: list[dict[str, str]]) -> int:
    """The tokens a chat request would prefill: the server's ``/tokenize`` of the messages
    (vLLM applies its own chat template there, as it does for the request)."""
    r = client.post_json("/tokenize", {"messages": messages, "add_generation_prompt": True})
    n = r.get("count") if isinstance(r, dict) else None
    tokens = r.get("tokens") if isinstance(r, dict) else None
    if isinstance(n, int) and not isinstance(n, bool) and n >= 0:
        return n
    if isinstance(tokens, list):
        return len(tokens)
    raise ServerError("/tokenize answered without a token count")
