"""FLOPs and bytes per phase, from the weights by role (runner.model.weights).

The reading's rule "2 x parameters FLOP per token" counts every weight as a matrix each
token is multiplied by. Two of them are not:

* the input embedding is a row lookup: no FLOPs in either phase, one row read per
  token (nothing, next to the layers);
* the output projection makes logits only for the tokens whose logits are computed:
  the last prompt token of a prefill (llama.cpp skips the rest: ``inp_out_ids``), and
  every decode token.

On Gemma-3 270M the tied embedding (262,144 x 640) is 168 M of the 268 M parameters:
2 x 268 M FLOP per prompt token overstated prefill ~2.7x, and a measured prefill beat
that "ceiling". On a Qwen3-30B-A3B-shaped MoE the untied input embedding is ~0.6 GB
that decode never reads.

Attention (QK^T and AV) grows with the context each token attends to. Facts recorded
before the split existed (an older trace) fall back to the whole-model rule.
"""

from __future__ import annotations

from kvtop.runner.model.facts import LayerShape, ModelFacts


def attention_flops(n_layers: int, n_head: int, head_dim: int, prompt_tokens: int,
                    start: int = 0) -> float:
    """QK^T + AV FLOP for prompt tokens ``start..start+prompt_tokens`` (causal).

    Token t attends to t+1 earlier positions: 2 matmuls x 2 FLOP x heads x head_dim each.
    """
    attended = sum_range(start + 1, start + prompt_tokens)
    return 4.0 * n_layers * n_head * head_dim * attended


def sum_range(a: int, b: int) -> int:
    """a + (a+1) + ... + b."""
    if b < a:
        return 0
    return (a + b) * (b - a + 1) // 2


def _layer_attention(layer: LayerShape, sliding_window: int | None, tokens: int, start: int) -> float:
    if layer.kind == "recurrent" or not layer.n_head or not layer.head_dim_k:
        return 0.0
    full = attention_flops(1, layer.n_head, layer.head_dim_k, tokens, start)
    if layer.kind == "sliding" and sliding_window:
        # each token attends to at most the window
        return min(full, 4.0 * layer.n_head * layer.head_dim_k * sliding_window * tokens)
    return full


def layer_attention_flops(facts: ModelFacts, tokens: int, start: int = 0) -> list[float]:
    """Attention FLOP of ``tokens`` prompt tokens after ``start`` cached ones, per layer."""
    return [_layer_attention(layer, facts.sliding_window, tokens, start) for layer in facts.layers]


def has_split(facts: ModelFacts) -> bool:
    """The facts carry the weights by role (a model read by this version of kvtop)."""
    return (facts.output_params is not None and facts.n_layers is not None
            and len(facts.layer_params_active) == facts.n_layers == len(facts.layer_bytes_active))


def logit_tokens(prompt_tokens: int) -> int:
    """Tokens of a prompt whose logits are computed: the last one (none for no prompt)."""
    return min(prompt_tokens, 1)


def output_flops(facts: ModelFacts, tokens: int) -> float:
    """The output projection for ``tokens`` tokens: n_vocab x n_embd multiply-adds each."""
    return 2.0 * (facts.output_params or 0) * tokens


def prefill_flops(facts: ModelFacts, prompt_tokens: int, start: int = 0) -> float | None:
    """FLOP to prefill ``prompt_tokens`` after ``start`` cached tokens: every layer's
    matrices for every token, the output projection for the last one, attention."""
    attn = sum(layer_attention_flops(facts, prompt_tokens, start))
    if has_split(facts):
        layers = 2.0 * sum(facts.layer_params_active) * prompt_tokens
        return layers + output_flops(facts, logit_tokens(prompt_tokens)) + attn
    if not facts.n_params_active:
        return None
    return 2.0 * facts.n_params_active * prompt_tokens + attn


def decode_flops(facts: ModelFacts) -> float | None:
    """FLOP per decode token, attention left out: every layer's matrices and the output
    projection (each decode token's logits are computed)."""
    if has_split(facts):
        return 2.0 * sum(facts.layer_params_active) + output_flops(facts, 1)
    return 2.0 * facts.n_params_active if facts.n_params_active else None


def decode_weight_bytes(facts: ModelFacts) -> int | None:
    """Weight bytes one decode token reads: each layer's (an MoE's used experts only),
    the output matrix once, the small non-repeating tensors; not an untied input
    embedding table (one row of it is looked up)."""
    if has_split(facts):
        return sum(facts.layer_bytes_active) + (facts.output_bytes or 0) + (facts.other_bytes or 0)
    return facts.weights_bytes_active
