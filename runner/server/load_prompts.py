"""Synthetic prompts for ``kvtop load``: exactly P tokens, different for every request.

Why token ids and not text: text tokenised by the server never has an exact length
(a word splits differently beside its neighbours), so the prompt is built from token
ids the server itself produced from ordinary words (``/tokenize``), and sent as ids to
``/completion``, which computes them as given. Every request draws its own sequence
(seeded by the run, level, user and request), so the server's prefix cache finds nothing
to reuse, which would make prefill look free. The run's seed is new each time: with a
fixed one, a second ``kvtop load`` against the same server sent the first one's prompts
and its TTFT fell from 0.61 s to 0.03 s (found by a new user's trial); ``--shared-prefix T`` gives every request the
same first T tokens on purpose, to measure what a shared system prompt saves.
"""

from __future__ import annotations

import os
import random

from kvtop.runner.server.http import ServerClient, ServerError

# Ordinary words: their tokens are what real prompts are made of (no control tokens).
WORDS = (
    "time people year way day thing world life hand part child eye woman place work week case point "
    "government company number group problem fact water room mother area money story month lot right "
    "study book job word business issue side kind head house service friend father power hour game line "
    "end member law car city community name president team minute idea body information back parent face "
    "level office door health person art war history party result change morning reason research moment "
    "air teacher force education river mountain garden window market engine signal memory paper light "
    "music picture silver winter summer bridge station letter season animal forest harbor island valley"
).split()


class PromptMaker:
    """Token-id prompts of ``length`` tokens; ``shared_prefix`` leading tokens common to all."""

    def __init__(self, client: ServerClient, length: int, shared_prefix: int = 0, seed: str | None = None):
        if not 0 <= shared_prefix <= length:
            raise ValueError("the shared prefix is longer than the prompt")
        self.length = length
        self.shared_prefix = shared_prefix
        self.seed = seed if seed is not None else os.urandom(8).hex()  # this run's own
        self.pool = vocabulary(client)
        self._shared = random.Random(f"{self.seed}/shared").choices(self.pool, k=shared_prefix)

    def ids(self, *key: object) -> list[int]:
        """The prompt for one request; the same ``key`` gives the same prompt in this run."""
        rng = random.Random(f"{self.seed}/{'/'.join(map(str, key))}")
        return self._shared + rng.choices(self.pool, k=self.length - self.shared_prefix)


def vocabulary(client: ServerClient) -> list[int]:
    """The distinct token ids of ordinary words, as the served model tokenises them."""
    text = " ".join(WORDS) + " " + " ".join(w.capitalize() for w in WORDS)
    # llama-server reads content and add_special, an OpenAI-style server (vLLM) prompt and add_special_tokens
    answer = client.post_json("/tokenize", {"content": text, "add_special": False, "prompt": text,
                                            "add_special_tokens": False})
    tokens = answer.get("tokens") if isinstance(answer, dict) else None
    if not isinstance(tokens, list):
        raise ServerError("/tokenize did not answer a token list: is this a llama-server?")
    ids = sorted({t for t in tokens if isinstance(t, int) and not isinstance(t, bool) and t >= 0})
    if len(ids) < 8:
        raise ServerError(f"/tokenize gave {len(ids)} distinct tokens for {len(WORDS) * 2} words")
    return ids


def detokenize(client: ServerClient, ids: list[int]) -> str:
    """The text of ``ids`` (for the chat endpoint, which takes text, not ids)."""
    answer = client.post_json("/detokenize", {"tokens": ids})
    text = answer.get("content", answer.get("prompt")) if isinstance(answer, dict) else None  # vLLM: prompt
    if not isinstance(text, str):
        raise ServerError("/detokenize did not answer text")
    return text


Prompt = str | list[int]  # the chat endpoint's text, /completion's token ids


def payload(endpoint: str, prompt: Prompt, n_predict: int) -> tuple[str, dict[str, object]]:
    """The request: ``n_predict`` tokens whatever the model says (``ignore_eos``), greedy
    (sampling costs nothing to compare), the prompt cache on as llama-server's default."""
    common: dict[str, object] = {"stream": True, "ignore_eos": True, "temperature": 0.0, "cache_prompt": True}
    if endpoint.startswith("openai-"):  # a server without timings (vLLM): its counts in the last event
        common = {"stream": True, "ignore_eos": True, "temperature": 0.0, "stream_options": {"include_usage": True}}
        if endpoint == "openai-completion":
            return "/v1/completions", {**common, "prompt": prompt, "max_tokens": n_predict}
    if endpoint in ("chat", "openai-chat"):
        return "/v1/chat/completions", {**common, "messages": [{"role": "user", "content": prompt}],
                                        "max_tokens": n_predict}
    return "/completion", {**common, "prompt": prompt, "n_predict": n_predict, "return_tokens": True}
