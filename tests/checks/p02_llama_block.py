"""Checks for p02.llama_block. References: Hugging Face `LlamaAttention` and `LlamaDecoderLayer` built locally from
a tiny random `LlamaConfig` (eager attention), run in float64 (the oracle) and in the dtype under test (the
baseline) with the additive causal + padding mask they expect; float64 autograd through the same layer; and RoPE
tables from the closed form. Outputs are compared at real tokens only (padding rows are unspecified)."""

import copy

import torch

from llm_algo.check import Checks, describe, expect, expect_close, expect_tensor
from llm_algo.references.hf import tiny_llama_config
from llm_algo.references.llama import additive_mask, hf_forward, llama_layer, padded_batch, rotary_tables

checks = Checks("p02.llama_block")

CONFIGS = {  # name -> overrides of the tiny config (hidden 64, 4 query heads of 16, 2 KV heads)
    "GQA 4/2": {},
    "MHA 4/4, rope_theta=5e5, rms_norm_eps=1e-5": {
        "num_key_value_heads": 4,
        "rope_theta": 500000.0,
        "rms_norm_eps": 1e-5,
    },
    "MQA 4/1, hidden 48 != 4*16": {"num_key_value_heads": 1, "hidden_size": 48},
}
PADDING = {"left": ([7, 4, 1], 7), "right": ([6, 6, 3], 6)}  # (real tokens per row, padded length)


def rope_tables(config, num_positions=64):
    """Rotate-half cos/sin tables (num_positions, head_dim) from the closed form, computed in float64."""
    base, head_dim = config.rope_parameters["rope_theta"], config.head_dim
    theta = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.arange(num_positions, dtype=torch.float64)[:, None] * theta
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos().float(), angles.sin().float()


def build_mine(ex, kind, config):
    dims = (config.hidden_size, config.num_attention_heads, config.num_key_value_heads, config.head_dim)
    if kind == "attention":
        return ex.LlamaAttention(*dims)
    return ex.LlamaBlock(*dims, config.intermediate_size, eps=config.rms_norm_eps)


def loaded_pair(ex, kind, config, dtype):
    """(mine, Hugging Face's) with the same random weights, both in dtype."""
    reference = llama_layer(kind, config).to(dtype)
    mine = build_mine(ex, kind, config)
    mine.load_state_dict(reference.state_dict())
    return mine.to(dtype), reference


def label_for(kind, name, dtype, side, lengths):
    layer = "LlamaAttention" if kind == "attention" else "LlamaDecoderLayer"
    return f"{layer} weights, {name}, {str(dtype).removeprefix('torch.')}, {side}-padded batch, real lengths {lengths}"


def expect_state_dict_like_hf(ex, kind, hint):
    config = tiny_llama_config(hidden_size=48)
    mine = {k: tuple(v.shape) for k, v in build_mine(ex, kind, config).state_dict().items()}
    want = {k: tuple(v.shape) for k, v in llama_layer(kind, config).state_dict().items()}
    expect(
        mine == want,
        "state_dict keys or shapes differ from Hugging Face's",
        input="tiny config: hidden 48, 4 query heads and 2 KV heads of 16",
        expected=str(want),
        got=str(mine),
        hint=hint,
    )


def expect_matches_hf(ex, kind, hint):
    for name, overrides in CONFIGS.items():
        config = tiny_llama_config(**overrides)
        cos, sin = rope_tables(config)
        for dtype in (torch.float32, torch.bfloat16):
            for side, (lengths, seq_len) in PADDING.items():
                mine, reference = loaded_pair(ex, kind, config, dtype)
                mask, positions = padded_batch(lengths, seq_len, side)
                x = torch.randn(len(lengths), seq_len, config.hidden_size).to(dtype)
                label = label_for(kind, name, dtype, side, lengths)
                with torch.no_grad():
                    got = mine(x, cos, sin, positions, mask)
                expect_tensor(got, shape=x.shape, dtype=dtype, input=label)
                oracle = hf_forward(copy.deepcopy(reference).double(), config, x.double(), positions, mask)
                baseline = hf_forward(reference, config, x, positions, mask)
                expect_close(got[mask], oracle[mask], baseline=baseline[mask], input=label, hint=hint)


def expect_cache_decoding(ex, kind, hint):
    """Prefill 4 tokens, then one token at a time and a chunk of 2, through one KVCache; compare with one full pass
    of Hugging Face's layer at every real token."""
    config = tiny_llama_config()
    cos, sin = rope_tables(config)
    lengths, seq_len = [9, 6, 2], 9
    mine, reference = loaded_pair(ex, kind, config, torch.float64)
    mask, positions = padded_batch(lengths, seq_len, "left")
    x = torch.randn(len(lengths), seq_len, config.hidden_size, dtype=torch.float64)
    cache, outputs = ex.KVCache(), []
    with torch.no_grad():
        for start, stop in ((0, 4), (4, 5), (5, 6), (6, 8), (8, 9)):
            step = mine(x[:, start:stop], cos, sin, positions[:, start:stop], mask[:, :stop], cache)
            outputs.append(step)
    got = torch.cat(outputs, dim=1)
    expect_close(
        got[mask],
        hf_forward(reference, config, x, positions, mask)[mask],
        input=f"float64, left-padded lengths {lengths}: prefill 4, decode 1, 1, a chunk of 2, then 1",
        dtype=torch.float32,  # Hugging Face's eager softmax runs in float32 even for float64 inputs
        hint=hint,
    )


# ------------------------------------------------------------------------------------------ LlamaAttention


@checks("LlamaAttention")
def attention_state_dict_like_hf(ex):
    """state_dict keys and shapes equal LlamaAttention's: q/k/v/o_proj weights, no biases"""
    expect_state_dict_like_hf(
        ex,
        "attention",
        "q_proj (H_q*D, d), k_proj and v_proj (H_kv*D, d), o_proj (d, H_q*D), all nn.Linear(..., bias=False)",
    )


@checks("LlamaAttention")
def attention_matches_hf(ex):
    """matches LlamaAttention (GQA, MHA, MQA; fp32, bf16; left and right padding) at real tokens"""
    expect_matches_hf(
        ex,
        "attention",
        "view(B, T, H, D).transpose(1, 2) to split heads; RoPE on q and k at position_ids; causal attention "
        "with the key padding mask; transpose(1, 2) before merging heads",
    )


@checks("LlamaAttention")
def attention_kv_cache_decoding(ex):
    """decoding through a KVCache (prefill, single tokens, a chunk) equals one full causal pass"""
    expect_cache_decoding(
        ex,
        "attention",
        "rotate k at its own position_ids before cache.update; attend to everything the cache returns "
        "with causal=True (bottom-right aligned) and the mask over all keys",
    )


@checks("LlamaAttention")
def attention_input_left_untouched(ex):
    """does not modify its input or the RoPE tables in place"""
    config = tiny_llama_config()
    cos, sin = rope_tables(config)
    mine, _ = loaded_pair(ex, "attention", config, torch.float32)
    mask, positions = padded_batch([5, 3], 5)
    x = torch.randn(2, 5, config.hidden_size)
    before = (x.clone(), cos.clone(), sin.clone())
    with torch.no_grad():
        mine(x, cos, sin, positions, mask)
    expect(
        all(torch.equal(a, b) for a, b in zip((x, cos, sin), before, strict=True)),
        "an input was modified in place",
        input=describe(x=x, cos=cos),
        expected="x, cos and sin unchanged",
        got="changed",
        hint="use out-of-place ops",
    )


# ------------------------------------------------------------------------------------------ LlamaBlock


@checks("LlamaBlock")
def block_state_dict_like_hf(ex):
    """state_dict keys and shapes equal LlamaDecoderLayer's (input_layernorm, self_attn, post_attention_layernorm, mlp)"""
    expect_state_dict_like_hf(
        ex,
        "block",
        "members input_layernorm = RMSNorm, self_attn = LlamaAttention, post_attention_layernorm = RMSNorm, "
        "mlp = SwiGLU",
    )


@checks("LlamaBlock")
def block_matches_hf_decoder_layer(ex):
    """matches LlamaDecoderLayer (GQA, MHA, MQA; fp32, bf16; left and right padding) at real tokens"""
    expect_matches_hf(
        ex,
        "block",
        "pre-norm: h = x + attn(norm1(x)); y = h + mlp(norm2(h)); the residual is the un-normalised input, and "
        "each norm has its own weight",
    )


@checks("LlamaBlock")
def block_kv_cache_decoding(ex):
    """a block decoding through a KVCache equals one full causal pass"""
    expect_cache_decoding(ex, "block", "pass the cache on to self_attn; the mask covers cached and new keys")


@checks("LlamaBlock")
def block_gradients_match_hf(ex):
    """float64 gradients of every weight and of the input match LlamaDecoderLayer's"""
    config = tiny_llama_config(num_key_value_heads=1)
    cos, sin = rope_tables(config)
    mine, reference = loaded_pair(ex, "block", config, torch.float64)
    mask, positions = padded_batch([5, 3], 5)
    x = torch.randn(2, 5, config.hidden_size, dtype=torch.float64)
    grad_out = torch.randn(2, 5, config.hidden_size, dtype=torch.float64)
    x_mine, x_ref = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    (mine(x_mine, cos, sin, positions, mask)[mask] * grad_out[mask]).sum().backward()
    with torch.enable_grad():
        out = reference(
            x_ref,
            attention_mask=additive_mask(mask, 5, torch.float64),
            position_ids=positions,
            position_embeddings=rotary_tables(config, x, positions),
        )
        (out[mask] * grad_out[mask]).sum().backward()
    label = describe(x=x) + ", left-padded lengths [5, 3], MQA"
    fp32 = torch.float32  # the tolerance: Hugging Face's eager softmax runs in float32 even for float64 inputs
    expect_close(x_mine.grad[mask], x_ref.grad[mask], input=label, what="x.grad", dtype=fp32)
    mine_params = dict(mine.named_parameters())
    for name, param in reference.named_parameters():
        got = mine_params[name].grad
        expect(
            got is not None,
            f"{name} got no gradient",
            input=label,
            expected=f"{name}.grad set",
            got="None",
            hint="every weight must be used in forward, outside torch.no_grad",
        )
        expect_close(got, param.grad, input=label, what=f"{name}.grad", dtype=fp32, hint="no detached weights")
