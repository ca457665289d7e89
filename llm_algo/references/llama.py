"""Hugging Face Llama references shared by the checks of p02.llama_block and p02.tiny_llama.

Everything is built locally from `hf_reference.tiny_llama_config()` with random weights (norm gains too, so that a
block which mixes up its two norms is caught), and nothing is downloaded. The helpers also build the inputs a
padded batch needs (a key padding mask and the position ids `generate` would use), the additive mask that
Hugging Face's eager attention takes, and a Meta-format checkpoint written from a Hugging Face model: the
inverse of `convert_llama_weights_to_hf.py`, derived here from the pairing of the two RoPE layouts.
"""

from __future__ import annotations

import torch

from .hf import tiny_llama_config, transformers_module


def randomize_(module: torch.nn.Module) -> torch.nn.Module:
    """Random weights: matrices ~ N(0, 1/fan_in), 1-D gains 1 + 0.3 N(0, 1). Returns the module, in eval mode."""
    with torch.no_grad():
        for param in module.parameters():  # tied parameters appear once
            if param.dim() == 1:
                param.copy_(1 + 0.3 * torch.randn_like(param))
            else:
                param.normal_(0.0, param.shape[1] ** -0.5)
    return module.eval()


def padded_batch(lengths: list[int], seq_len: int, side: str = "left") -> tuple[torch.Tensor, torch.Tensor]:
    """(key_padding_mask (B, T) bool with True = real token, position_ids (B, T) int64) for rows of `lengths`
    real tokens padded to `seq_len`. Positions count real tokens from 0, as `generate` sets them
    (attention_mask.cumsum(-1) - 1); padding positions get 0."""
    mask = torch.zeros(len(lengths), seq_len, dtype=torch.bool)
    for row, length in enumerate(lengths):
        if side == "left":
            mask[row, seq_len - length :] = True
        else:
            mask[row, :length] = True
    position_ids = (mask.long().cumsum(-1) - 1).clamp_min(0)
    return mask, position_ids


def additive_mask(key_padding_mask: torch.Tensor, query_len: int, dtype: torch.dtype) -> torch.Tensor:
    """The (B, 1, S_q, S_k) float mask of Hugging Face's eager attention: 0 where a query may see a key, the
    dtype's most negative value elsewhere; causal and bottom-right aligned (query i sits at S_k - S_q + i)."""
    key_len = key_padding_mask.shape[-1]
    query_pos = torch.arange(key_len - query_len, key_len)[:, None]  # (S_q, 1)
    allowed = (torch.arange(key_len)[None, :] <= query_pos)[None, None] & key_padding_mask[:, None, None, :]
    # Hugging Face's eager softmax runs in float32 even for float64 inputs: float64's most negative value would
    # become -inf there, and a row of padding would turn into NaN (and poison the backward pass)
    blocked = torch.finfo(torch.float32 if dtype == torch.float64 else dtype).min
    return torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, blocked)


def rotary_tables(config, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Hugging Face's (cos, sin) for `position_ids`, each (B, T, head_dim) in x's dtype."""
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    with torch.no_grad():
        return LlamaRotaryEmbedding(config)(x, position_ids)


def llama_layer(kind: str, config):
    """A random-weight `LlamaAttention` or `LlamaDecoderLayer` (kind "attention" or "block") as layer 0."""
    transformers_module()
    from transformers.models.llama.modeling_llama import LlamaAttention, LlamaDecoderLayer

    return randomize_({"attention": LlamaAttention, "block": LlamaDecoderLayer}[kind](config, layer_idx=0))


def hf_forward(module, config, x, position_ids, key_padding_mask) -> torch.Tensor:
    """A LlamaAttention's or LlamaDecoderLayer's output for hidden states x (B, T, d), causal with padding, in the
    module's dtype (cast the module and x alike)."""
    with torch.no_grad():
        out = module(
            x,
            attention_mask=additive_mask(key_padding_mask, x.shape[1], x.dtype),
            position_ids=position_ids,
            position_embeddings=rotary_tables(config, x, position_ids),
        )
    return out[0] if isinstance(out, tuple) else out


def causal_lm(config=None):
    """A LlamaForCausalLM of the tiny config with random weights, in float32 and eval mode."""
    transformers = transformers_module()
    return randomize_(transformers.LlamaForCausalLM(config or tiny_llama_config()))


def real_token_rows(tensor: torch.Tensor, key_padding_mask: torch.Tensor) -> torch.Tensor:
    """The rows of a (B, T, ...) tensor at real tokens, flattened to (N, ...): padding rows are unspecified."""
    return tensor[key_padding_mask]


def interleaved_rows(head_dim: int) -> torch.Tensor:
    """Row order that turns one head of a rotate-half projection into Meta's interleaved one: Meta's row 2i is
    the rotate-half row i and Meta's row 2i + 1 is row i + D/2 (both rotate with frequency theta_i)."""
    half = torch.arange(head_dim // 2)
    return torch.stack((half, half + head_dim // 2), dim=-1).flatten()  # [0, D/2, 1, D/2 + 1, ...]


def meta_checkpoint(model, config) -> dict[str, torch.Tensor]:
    """The state dict Meta's `llama/model.py` would hold for this Hugging Face model: Meta's names, and q/k rows
    in the interleaved RoPE layout. No `output.weight` when the config ties the embeddings."""
    hf = {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}
    head_dim = config.head_dim
    order = interleaved_rows(head_dim)

    def to_interleaved(weight: torch.Tensor, num_heads: int) -> torch.Tensor:
        rows = torch.cat([head * head_dim + order for head in range(num_heads)])
        return weight[rows]

    meta = {"tok_embeddings.weight": hf["model.embed_tokens.weight"], "norm.weight": hf["model.norm.weight"]}
    if not config.tie_word_embeddings:
        meta["output.weight"] = hf["lm_head.weight"]
    for i in range(config.num_hidden_layers):
        src, dst = f"model.layers.{i}.", f"layers.{i}."
        meta[dst + "attention.wq.weight"] = to_interleaved(
            hf[src + "self_attn.q_proj.weight"], config.num_attention_heads
        )
        meta[dst + "attention.wk.weight"] = to_interleaved(
            hf[src + "self_attn.k_proj.weight"], config.num_key_value_heads
        )
        meta[dst + "attention.wv.weight"] = hf[src + "self_attn.v_proj.weight"]
        meta[dst + "attention.wo.weight"] = hf[src + "self_attn.o_proj.weight"]
        meta[dst + "feed_forward.w1.weight"] = hf[src + "mlp.gate_proj.weight"]
        meta[dst + "feed_forward.w2.weight"] = hf[src + "mlp.down_proj.weight"]
        meta[dst + "feed_forward.w3.weight"] = hf[src + "mlp.up_proj.weight"]
        meta[dst + "attention_norm.weight"] = hf[src + "input_layernorm.weight"]
        meta[dst + "ffn_norm.weight"] = hf[src + "post_attention_layernorm.weight"]
    return meta
