"""Checks for p02.architecture_tricks. References: Hugging Face modules built locally from tiny random configs
(`Qwen3Attention` and its q_norm/k_norm, `MistralForCausalLM` with a sliding window, `GPTJBlock`, `LlamaForCausalLM`
with tie_word_embeddings, `Gemma2ForCausalLM` with final_logit_softcapping, Gemma-2's `eager_attention_forward` with
softcap), the mask functions of `transformers.masking_utils`, `F.scaled_dot_product_attention` with explicit masks
over a full KV cache, loop specs of windowed attention, and closed forms (RMSNorm by hand, the tied-weight gradient,
d/dx c tanh(x/c))."""

import inspect
import math
from functools import cache
from types import SimpleNamespace

import torch
import torch.nn.functional as F

from llm_algo.check import Checks, describe, expect, expect_close, expect_tensor, expect_value_error, one_thread
from llm_algo.check.restrictions import ATTENTION, reference_only
from llm_algo.references.hf import tiny_llama_config, transformers_module

checks = Checks("p02.architecture_tricks")
checks.restrict(
    "softcap_attention",
    forbid=[*ATTENTION, "transformers"],
    instead="scale, cap, mask and softmax the scores yourself (SDPA and Gemma-2's attention are the references)",
)


# ------------------------------------------------------------------------------------------ qk_norm


@cache
def qwen3_config(hidden: int, heads: int, kv_heads: int, head_dim: int):
    config = transformers_module().Qwen3Config(
        hidden_size=hidden,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=2 * hidden,
        num_hidden_layers=1,
        vocab_size=32,
        rms_norm_eps=1e-6,
        max_position_embeddings=64,
    )
    config._attn_implementation = "eager"
    return config


def qwen3_attention(hidden: int, heads: int, kv_heads: int, head_dim: int, dtype=torch.float32):
    """Qwen3Attention with random projections and random q_norm/k_norm gains (not the all-ones init)."""
    from transformers.models.qwen3.modeling_qwen3 import Qwen3Attention

    attention = Qwen3Attention(qwen3_config(hidden, heads, kv_heads, head_dim), layer_idx=0).eval()
    with torch.no_grad():
        for p in attention.parameters():
            p.copy_(torch.randn(p.shape) / math.sqrt(p.shape[-1]))
        attention.q_norm.weight.copy_(1 + 0.5 * torch.randn(head_dim))
        attention.k_norm.weight.copy_(1 + 0.5 * torch.randn(head_dim))
    return attention.to(dtype)


def hf_qk_norm(attention, q, k):
    """Qwen3Attention's own lines: q_norm(q_proj(x).view(..., -1, D)).transpose(1, 2), for given projections.
    (Qwen3RMSNorm computes in float32 even for float64 input, so it serves as the baseline, not the oracle.)"""
    D = attention.head_dim
    with torch.no_grad():
        return (
            attention.q_norm(q.view(*q.shape[:2], -1, D)).transpose(1, 2),
            attention.k_norm(k.view(*k.shape[:2], -1, D)).transpose(1, 2),
        )


def exact_qk_norm(x, weight, eps=1e-6):
    """The float64 oracle: F.rms_norm over each head's D values of the (B, T, H * D) projection -> (B, H, T, D)."""
    D = weight.shape[0]
    x64 = x.double().view(*x.shape[:2], -1, D)
    return F.rms_norm(x64, (D,), weight.double(), eps).transpose(1, 2)


@checks("qk_norm")
def hand_checkable_heads(ex):
    """D = 2: q = [3, 4] -> [3, 4] / sqrt(12.5); k with heads [3, 4] and [0.6, 0.8] is normalised head by head"""
    q = torch.tensor([[[3.0, 4.0]]])  # (B=1, T=1, 1 head * D=2)
    k = torch.tensor([[[3.0, 4.0, 0.6, 0.8]]])  # (1, 1, 2 heads * 2)
    gains = torch.tensor([1.0, 2.0])
    label = "q = [[[3, 4]]], k = [[[3, 4, 0.6, 0.8]]] (2 heads of D = 2), q/k gains [1, 2], eps = 0"
    q_hat, k_hat = ex.qk_norm(q, k, gains, gains, eps=0.0)
    expect_tensor(q_hat, shape=(1, 1, 1, 2), dtype=torch.float32, input=label, what="q_hat")
    expect_tensor(k_hat, shape=(1, 2, 1, 2), dtype=torch.float32, input=label, what="k_hat")
    expect_close(
        q_hat,
        torch.tensor([[[[3.0, 8.0]]]], dtype=torch.float64) / math.sqrt(12.5),
        input=label,
        what="q_hat",
        hint="x / sqrt(mean(x**2) + eps) * gain over the head dimension",
    )
    expect_close(
        k_hat,
        torch.tensor([[[[3.0, 8.0]], [[0.6 / 0.5**0.5, 1.6 / 0.5**0.5]]]], dtype=torch.float64)
        / torch.tensor([[[[math.sqrt(12.5)]], [[1.0]]]], dtype=torch.float64),
        input=label,
        what="k_hat",
        hint="each head is normalised on its own (Qwen3): view (B, T, H, D) first, then RMSNorm over D; "
        "normalising the whole (H * D) projection is OLMo-2's variant",
    )


@checks("qk_norm")
def matches_qwen3_q_norm_k_norm(ex):
    """random projections over shapes (GQA, one token, batch of one), fp32/bf16/fp64: F.rms_norm per head, Qwen3Attention"""
    for (B, T, heads, kv_heads, D), dtype in [
        ((2, 5, 4, 2, 16), torch.float32),
        ((1, 1, 8, 1, 8), torch.float32),
        ((3, 7, 4, 4, 32), torch.bfloat16),
        ((2, 3, 6, 2, 8), torch.float64),
    ]:
        attention = qwen3_attention(32, heads, kv_heads, D)
        q = (torch.randn(B, T, heads * D, dtype=torch.float64) * 3).to(dtype)
        k = (torch.randn(B, T, kv_heads * D, dtype=torch.float64) * 3).to(dtype)
        label = describe(q=q, k=k) + f", {heads} query heads, {kv_heads} KV heads, D={D}"
        q_hat, k_hat = ex.qk_norm(
            q.clone(), k.clone(), attention.q_norm.weight.detach().to(dtype), attention.k_norm.weight.detach().to(dtype)
        )
        oracle = (
            exact_qk_norm(q, attention.q_norm.weight.detach()),
            exact_qk_norm(k, attention.k_norm.weight.detach()),
        )
        baseline = hf_qk_norm(attention.to(dtype), q, k) if dtype != torch.float64 else (None, None)
        for what, got, want, base, n in (
            ("q_hat", q_hat, oracle[0], baseline[0], heads),
            ("k_hat", k_hat, oracle[1], baseline[1], kv_heads),
        ):
            expect_tensor(got, shape=(B, n, T, D), dtype=dtype, input=label, what=what)
            expect_close(
                got,
                want,
                baseline=base,
                input=label,
                what=what,
                hint="view (B, T, H, D) -- heads before time -- then RMSNorm over D with q_weight for q and "
                "k_weight for k, then transpose(1, 2)",
            )


@checks("qk_norm")
def whole_qwen3_attention_forward(ex):
    """Qwen3Attention.forward == o_proj(SDPA(RoPE(your qk_norm(q_proj x, k_proj x)), v)) with GQA, causal"""
    from transformers.models.qwen3.modeling_qwen3 import Qwen3RotaryEmbedding, apply_rotary_pos_emb

    B, T, hidden, heads, kv_heads, D = 2, 6, 32, 4, 2, 8
    label = f"x ({B}, {T}, {hidden}), Qwen3Attention with {heads} query heads, {kv_heads} KV heads, D={D}, causal"
    outputs = {}
    for dtype in (torch.float64, torch.float32):
        torch.manual_seed(1234)  # the same random module in both dtypes
        attention = qwen3_attention(hidden, heads, kv_heads, D, dtype)
        x = torch.randn(B, T, hidden, dtype=torch.float64, generator=torch.Generator().manual_seed(7)).to(dtype)
        cos, sin = Qwen3RotaryEmbedding(attention.config)(x, torch.arange(T)[None].expand(B, T))
        causal = torch.full((T, T), float("-inf"), dtype=dtype).triu(1)[None, None]
        with torch.no_grad():
            outputs[dtype, "hf"] = attention(x, (cos, sin), causal)[0]
            q_hat, k_hat = ex.qk_norm(
                attention.q_proj(x), attention.k_proj(x), attention.q_norm.weight, attention.k_norm.weight, eps=1e-6
            )
            q_rot, k_rot = apply_rotary_pos_emb(q_hat, k_hat, cos, sin)
            v = attention.v_proj(x).view(B, T, kv_heads, D).transpose(1, 2)
            attended = F.scaled_dot_product_attention(q_rot, k_rot, v, is_causal=True, enable_gqa=True)
            outputs[dtype, "yours"] = attention.o_proj(attended.transpose(1, 2).reshape(B, T, heads * D))
    expect_close(
        outputs[torch.float32, "yours"],
        outputs[torch.float64, "hf"],
        baseline=outputs[torch.float32, "hf"],
        input=label,
        hint="QK-norm sits after the projection and before RoPE: normalise each head of q and k, return "
        "(B, H, T, D) so RoPE and SDPA can use it",
    )


# ------------------------------------------------------------------------------------------ sliding_window_mask


def hf_mask(q_len: int, kv_len: int, window) -> torch.Tensor:
    """transformers.masking_utils' mask functions evaluated at absolute positions: queries are the last q_len."""
    from transformers.masking_utils import causal_mask_function, sliding_window_causal_mask_function

    transformers_module()
    fn = causal_mask_function if window is None else sliding_window_causal_mask_function(window)
    query_positions = torch.arange(kv_len - q_len, kv_len)[:, None]  # (q_len, 1) absolute positions
    zero = torch.tensor(0)
    return fn(zero, zero, query_positions, torch.arange(kv_len)[None, :]).expand(q_len, kv_len).clone()


def draw(mask: torch.Tensor) -> str:
    return " / ".join("".join("x" if a else "." for a in row) for row in mask.tolist()[:4])


MASK_CASES = [
    (8, 8, None),
    (8, 8, 3),
    (3, 8, 3),
    (1, 8, 3),
    (1, 1, None),
    (5, 9, 1),
    (4, 12, 20),
    (6, 6, 6),
    (2, 7, None),
]


@checks("sliding_window")
def hand_checkable_window(ex):
    """q_len 3, kv_len 5, window 2: queries at positions 2, 3, 4 see keys {1, 2}, {2, 3}, {3, 4}"""
    got = ex.sliding_window_mask(3, 5, 2)
    expected = torch.tensor([[0, 1, 1, 0, 0], [0, 0, 1, 1, 0], [0, 0, 0, 1, 1]], dtype=torch.bool)
    label = "sliding_window_mask(q_len=3, kv_len=5, window=2)"
    expect_tensor(got, shape=(3, 5), dtype=torch.bool, input=label, what="mask")
    expect(
        torch.equal(got, expected),
        "wrong mask",
        input=label,
        expected=draw(expected),
        got=draw(got),
        hint="bottom-right alignment: query i is at position kv_len - q_len + i; it sees the last `window` keys "
        "up to and including itself",
    )


@checks("sliding_window")
def matches_transformers_masking_utils(ex):
    """causal and sliding masks with S_q = S_k, decode steps, windows of 1 and wider than the context: masking_utils"""
    for q_len, kv_len, window in MASK_CASES:
        got = ex.sliding_window_mask(q_len, kv_len, window)
        want = hf_mask(q_len, kv_len, window)
        label = f"sliding_window_mask(q_len={q_len}, kv_len={kv_len}, window={window})"
        expect_tensor(got, shape=(q_len, kv_len), dtype=torch.bool, input=label, what="mask")
        expect(
            torch.equal(got, want),
            "mask differs from transformers.masking_utils",
            input=label,
            expected=draw(want),
            got=draw(got),
            hint="allowed iff 0 <= position(query) - j < window (window None: only the causal condition), "
            "with position(query i) = kv_len - q_len + i",
        )


@checks("sliding_window")
def sdpa_with_your_mask_equals_windowed_loop(ex):
    """F.scaled_dot_product_attention with your mask == a per-query loop over its window (float64, S_q != S_k)"""
    for q_len, kv_len, window in [(4, 10, 3), (1, 9, 4), (6, 6, 2), (3, 7, None)]:
        q = torch.randn(2, 3, q_len, 8, dtype=torch.float64)
        k, v = torch.randn(2, 3, kv_len, 8, dtype=torch.float64), torch.randn(2, 3, kv_len, 8, dtype=torch.float64)
        mask = ex.sliding_window_mask(q_len, kv_len, window)
        label = describe(q=q, k=k) + f", window={window}"
        expect_tensor(mask, shape=(q_len, kv_len), dtype=torch.bool, input=label, what="mask")
        got = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        rows = []
        for i in range(q_len):
            position = kv_len - q_len + i
            first = 0 if window is None else max(0, position - window + 1)
            scores = q[:, :, i : i + 1] @ k[:, :, first : position + 1].transpose(-1, -2) / math.sqrt(8)
            rows.append(scores.softmax(-1) @ v[:, :, first : position + 1])
        expect_close(
            got,
            torch.cat(rows, dim=2),
            input=label,
            what="attention output with your mask",
            hint="query i (at position kv_len - q_len + i) must see exactly keys max(0, pos - window + 1) .. pos",
        )


# ------------------------------------------------------------------------------------------ RollingKVCache

DECODES = [  # (window, chunk lengths: the prompt, then decode steps and chunks); each runs over several windows
    (4, [2] + [1] * 9 + [3] + [1] * 4),  # prompt shorter than the window, a chunk after the ring has wrapped
    (5, [12] + [1] * 8 + [7, 1]),  # prompt longer than the window, a chunk longer than the window
    (3, [3, 2] + [1] * 5 + [3, 1]),  # a prompt of exactly one window, then chunks across the wrap
    (1, [3] + [1] * 4),  # a window of one: every query sees only itself
    (6, [1] * 9 + [4]),  # no prompt: one token at a time from position 0
]


def schedule_text(window, chunks):
    return f"window {window}, prompt {chunks[0]}, then chunks {chunks[1:]}"


def decode_through(ex, q, k, v, window, chunks, label, after_step=None):
    """Feed k, v to a fresh RollingKVCache chunk by chunk; attend each chunk's queries with SDPA to what the cache
    returns, under its mask. Returns the outputs of all positions, (B, H_q, N, D)."""
    ring, outputs, start = ex.RollingKVCache(window), [], 0
    for T in chunks:
        keys, values, mask = ring.update(k[:, :, start : start + T].clone(), v[:, :, start : start + T].clone())
        step = f"{label}; update with positions {start}..{start + T - 1}"
        expect_tensor(mask, dtype=torch.bool, input=step, what="returned mask")
        S = keys.shape[2] if keys.dim() == 4 else -1
        expect(
            keys.shape == values.shape and keys.shape[:2] == k.shape[:2] and T <= S <= window + T,
            "returned keys/values have the wrong shape",
            input=step,
            expected=f"(B, H_kv, S, D) = {tuple(k.shape[:2])} + (S, {k.shape[-1]}) with {T} <= S <= window + T = "
            f"{window + T} (the ring, then the new keys)",
            got=f"keys {tuple(keys.shape)}, values {tuple(values.shape)}",
            hint="return the cached positions (at most window of them) followed by the T new keys; a cache that "
            "returns more has kept positions that left the window",
        )
        expect_tensor(mask, shape=(T, S), dtype=torch.bool, input=step, what="returned mask")
        outputs.append(
            F.scaled_dot_product_attention(q[:, :, start : start + T], keys, values, attn_mask=mask, enable_gqa=True)
        )
        start += T
        if after_step is not None:
            after_step(ring, start, step)
    return torch.cat(outputs, dim=2)


def full_cache_with_window(q, k, v, window):
    """Attention over the full cache of all N positions with transformers.masking_utils' sliding-window mask."""
    N = k.shape[2]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=hf_mask(N, N, window), enable_gqa=True)


@checks("sliding_window")
def rolling_cache_matches_full_cache(ex):
    """long decodes (prompts shorter and longer than the window, chunks, batch 2-3, GQA, fp64/fp32) == a full cache with a window mask"""
    for (window, chunks), dtype, B in zip(DECODES, [torch.float64, torch.float32] * 3, [2, 3, 2, 3, 2], strict=False):
        N, H_q, H_kv, D = sum(chunks), 4, 2, 8
        q = torch.randn(B, H_q, N, D, dtype=torch.float64)
        k, v = torch.randn(B, H_kv, N, D, dtype=torch.float64), torch.randn(B, H_kv, N, D, dtype=torch.float64)
        label = describe(q=q.to(dtype), k=k.to(dtype)) + f", {schedule_text(window, chunks)}"
        got = decode_through(ex, q.to(dtype), k.to(dtype), v.to(dtype), window, chunks, label)
        expect_close(
            got,
            full_cache_with_window(q, k, v, window),
            baseline=full_cache_with_window(q.to(dtype), k.to(dtype), v.to(dtype), window)
            if dtype != torch.float64
            else None,
            input=label,
            what="attention outputs of every position",
            hint="return the ring's positions oldest first (slot = position % window), then the new keys, with "
            "sliding_window_mask(T, S, window); read the ring before writing the chunk into it; keep the LAST "
            "window positions of a long chunk",
        )


@checks("sliding_window")
def ring_holds_the_last_window(ex):
    """after every update: keys/values stay (B, H_kv, W, D) in the input dtype, seen counts positions, slot p % W holds position p"""
    for window, chunks, dtype in [
        (4, [6, 1, 1, 3, 1, 1, 1, 2, 5], torch.float32),
        (3, [1, 2, 1, 1, 4, 1], torch.bfloat16),
    ]:
        B, H_kv, D = 2, 2, 4
        N = sum(chunks)
        q = torch.randn(B, 2 * H_kv, N, D).to(dtype)
        k, v = torch.randn(B, H_kv, N, D).to(dtype), torch.randn(B, H_kv, N, D).to(dtype)
        label = describe(k=k) + f", {schedule_text(window, chunks)}"

        def inspect_ring(ring, seen, step, k=k, v=v, window=window, dtype=dtype, B=B, H_kv=H_kv, D=D):
            for name in ("keys", "values"):
                expect_tensor(
                    getattr(ring, name), shape=(B, H_kv, window, D), dtype=dtype, input=step, what=f"cache.{name}"
                )
            expect(
                ring.seen == seen,
                "cache.seen does not count the positions written",
                input=step,
                expected=str(seen),
                got=str(ring.seen),
                hint="advance seen by the chunk length T",
            )
            for position in range(max(0, seen - window), seen):
                slot = position % window
                expect(
                    torch.equal(ring.keys[:, :, slot], k[:, :, position])
                    and torch.equal(ring.values[:, :, slot], v[:, :, position]),
                    f"slot {slot} does not hold position {position}",
                    input=step,
                    expected=f"cache.keys[:, :, {slot}] == k of position {position} (and the same for values)",
                    got="something else",
                    hint="write position p to slot p % window, only the last window positions of a long chunk, "
                    "and never a key that is not the one given",
                )

        decode_through(ex, q, k, v, window, chunks, label, after_step=inspect_ring)


def tiny_mistral(window: int):
    """A random MistralForCausalLM with a sliding window, 2 layers, GQA 4/2, float64, eager attention."""
    from llm_algo.references.llama import randomize_

    transformers = transformers_module()
    config = transformers.MistralConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=64,
        sliding_window=window,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    config._attn_implementation = "eager"
    return randomize_(transformers.MistralForCausalLM(config)).double()


def mistral_through_rolling_caches(ex, model, ids, chunks):
    """The Mistral forward pass written out with Hugging Face's own modules, except that every layer attends through
    one of the learner's RollingKVCaches (SDPA over what it returns, under its mask). Returns the logits."""
    from transformers.models.mistral.modeling_mistral import apply_rotary_pos_emb

    inner, window = model.model, model.config.sliding_window
    rings = [ex.RollingKVCache(window) for _ in inner.layers]
    B, start, logits = ids.shape[0], 0, []
    for T in chunks:
        x = inner.embed_tokens(ids[:, start : start + T])
        cos, sin = inner.rotary_emb(x, torch.arange(start, start + T)[None].expand(B, T))
        for layer, ring in zip(inner.layers, rings, strict=True):
            attention = layer.self_attn
            h = layer.input_layernorm(x)
            q, k, v = (
                proj(h).view(B, T, -1, attention.head_dim).transpose(1, 2)
                for proj in (attention.q_proj, attention.k_proj, attention.v_proj)
            )
            q, k = apply_rotary_pos_emb(q, k, cos, sin)
            keys, values, mask = ring.update(k, v)
            out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=True)
            x = x + attention.o_proj(out.transpose(1, 2).reshape(B, T, -1))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        logits.append(model.lm_head(inner.norm(x)))
        start += T
    return torch.cat(logits, dim=1)


@checks("sliding_window")
@one_thread()
def mistral_decodes_through_your_cache(ex):
    """a tiny MistralForCausalLM (sliding_window 4) decoding through your caches == its own full forward pass"""
    for window, chunks in [(4, [6] + [1] * 7 + [3, 1, 1]), (3, [2] + [1] * 9)]:
        model = tiny_mistral(window)
        ids = torch.randint(3, 64, (2, sum(chunks)))
        with torch.no_grad():
            got = mistral_through_rolling_caches(ex, model, ids, chunks)
            want = model(ids, use_cache=False).logits
        expect_close(
            got,
            want,
            input=f"MistralForCausalLM(hidden 32, 2 layers, 4/2 heads of 8, sliding_window={window}), float64, "
            + describe(input_ids=ids)
            + f", prompt {chunks[0]}, then chunks {chunks[1:]}",
            what="logits at every position",
            dtype=torch.float32,  # Hugging Face's eager softmax runs in float32 even for float64 inputs
            hint="Mistral masks with 0 <= position(query) - position(key) < sliding_window: the ring's positions "
            "oldest first, then the new keys, under sliding_window_mask(T, S, window)",
        )


@checks("sliding_window")
def cache_refuses_bad_input(ex):
    """window < 1, k and v of different shapes, a later update with another batch or head count, q_len > kv_len: ValueError"""
    ring = ex.RollingKVCache(3)
    k = torch.randn(2, 2, 4, 8)
    ring.update(k, torch.randn(2, 2, 4, 8))  # a valid first update allocates the ring
    hint = "validate the arguments and raise ValueError with a message that names the shapes"
    expect_value_error(lambda: ex.RollingKVCache(0), "RollingKVCache(window=0)", hint)
    expect_value_error(
        lambda: ex.RollingKVCache(3).update(k, torch.randn(2, 2, 5, 8)), "update(k (2, 2, 4, 8), v (2, 2, 5, 8))", hint
    )
    expect_value_error(
        lambda: ring.update(torch.randn(3, 2, 1, 8), torch.randn(3, 2, 1, 8)),
        "a ring allocated for batch 2, then an update with batch 3",
        hint,
    )
    expect_value_error(
        lambda: ring.update(torch.randn(2, 4, 1, 8), torch.randn(2, 4, 1, 8)),
        "a ring allocated for 2 KV heads, then an update with 4",
        hint,
    )
    expect_value_error(
        lambda: ex.sliding_window_mask(5, 3, 2), "sliding_window_mask(q_len=5, kv_len=3, window=2)", hint
    )


# ------------------------------------------------------------------------------------------ parallel_block


def gptj_block(hidden: int = 32, heads: int = 4):
    """A random GPTJBlock and a function of (x, T) giving the position keyword its attention takes. transformers
    5.22 moved GPT-J's rotary tables out of the attention (`position_embeddings` from GPTJRotaryEmbedding; before,
    the attention took `position_ids` and held the tables itself): both are public APIs of a supported version."""
    transformers = transformers_module()
    from transformers.models.gptj import modeling_gptj

    config = transformers.GPTJConfig(
        n_embd=hidden,
        n_head=heads,
        rotary_dim=4,
        n_positions=64,
        vocab_size=32,
        n_layer=1,
        bos_token_id=0,
        eos_token_id=0,
    )
    config._attn_implementation = "eager"
    block = modeling_gptj.GPTJBlock(config, layer_idx=0).eval()
    with torch.no_grad():
        for p in block.parameters():
            p.copy_(torch.randn(p.shape) / math.sqrt(p.shape[-1]) if p.dim() > 1 else 1 + 0.3 * torch.randn(p.shape))

    def positions(x: torch.Tensor, T: int) -> dict:
        position_ids = torch.arange(T)[None].expand(x.shape[0], T)
        if "position_embeddings" in inspect.signature(modeling_gptj.GPTJBlock.forward).parameters:
            return {"position_embeddings": modeling_gptj.GPTJRotaryEmbedding(config)(x, position_ids=position_ids)}
        return {"position_ids": position_ids}

    return block, positions


def first(output):
    """A module's output tensor, whether it returns the tensor or a tuple that starts with it (older transformers)."""
    return output[0] if isinstance(output, tuple) else output


@checks("parallel_and_tied")
def matches_hugging_face_gptj_block(ex):
    """GPTJBlock (one LayerNorm, attention and MLP in parallel) with its own sub-layers passed in"""
    block, positions = gptj_block()
    for B, T in [(2, 5), (1, 1), (3, 7)]:
        x = torch.randn(B, T, 32)
        position = positions(x, T)
        causal = torch.full((T, T), float("-inf")).triu(1)[None, None]
        label = describe(x=x) + ", GPTJBlock (n_embd 32, 4 heads), causal"

        def attention(h, position=position, causal=causal):
            return block.attn(h, attention_mask=causal, **position)[0]

        with torch.no_grad():
            got = ex.parallel_block(x.clone(), block.ln_1, attention, block.mlp)
            want = first(block(x, attention_mask=causal, **position))
        expect_tensor(got, shape=x.shape, dtype=x.dtype, input=label)
        expect_close(
            got,
            want.double(),
            baseline=want,
            input=label,
            hint="y = x + attention(norm(x)) + mlp(norm(x)): both branches read the same normalised x",
        )


@checks("parallel_and_tied")
def one_norm_both_branches_read_it(ex):
    """with recording stand-ins: norm called once on x; attention and MLP each called once on norm(x)"""
    x = torch.randn(2, 4, 6, dtype=torch.float64)
    calls = []
    A, M = torch.randn(6, 6, dtype=torch.float64), torch.randn(6, 6, dtype=torch.float64)

    def norm(t):
        calls.append(("norm", t))
        return F.layer_norm(t, (6,))

    def attention(t):
        calls.append(("attention", t))
        return t @ A

    def mlp(t):
        calls.append(("mlp", t))
        return torch.tanh(t @ M)

    label = describe(x=x) + ", norm = layer_norm, attention = h @ A, mlp = tanh(h @ M)"
    got = ex.parallel_block(x.clone(), norm, attention, mlp)
    names = sorted(name for name, _ in calls)
    expect(
        names == ["attention", "mlp", "norm"],
        "the sub-layers were not called once each",
        input=label,
        expected="norm once, attention once, mlp once",
        got=", ".join(name for name, _ in calls),
        hint="normalise once and pass the same tensor to both branches",
    )
    normed = F.layer_norm(x, (6,))
    for name, arg in calls:
        want = x if name == "norm" else normed
        expect(
            torch.allclose(arg, want),
            f"{name} received the wrong input",
            input=label,
            expected="x" if name == "norm" else "norm(x)",
            got="something else (x + attention(...)? the un-normalised x?)",
            hint="parallel block: attention and MLP both read norm(x), not each other's output",
        )
    expect_close(got, x + normed @ A + torch.tanh(normed @ M), input=label, hint="add both branches to the residual x")


@checks("parallel_and_tied")
def gradient_matches_closed_form_spec(ex):
    """float64 autograd through the block equals autograd of x + attn(LN(x)) + mlp(LN(x)) with nonlinear stand-ins"""
    A, M = torch.randn(8, 8, dtype=torch.float64), torch.randn(8, 8, dtype=torch.float64)
    weight = 1 + 0.3 * torch.randn(8, dtype=torch.float64)

    def norm(t):
        return F.layer_norm(t, (8,), weight)

    def attention(t):
        return torch.softmax(t @ A, dim=-1) @ A.T

    def mlp(t):
        return F.silu(t @ M)

    x = torch.randn(3, 5, 8, dtype=torch.float64, requires_grad=True)
    x_spec = x.detach().clone().requires_grad_()
    upstream = torch.randn(3, 5, 8, dtype=torch.float64)
    (ex.parallel_block(x, norm, attention, mlp) * upstream).sum().backward()
    ((x_spec + attention(norm(x_spec)) + mlp(norm(x_spec))) * upstream).sum().backward()
    expect_close(
        x.grad,
        x_spec.grad,
        input=describe(x=x) + ", LayerNorm, softmax attention stand-in, SiLU MLP stand-in",
        what="d loss / d x",
        hint="the residual contributes the identity; both branches differentiate through the one norm",
    )


# ------------------------------------------------------------------------------------------ tied_embeddings


def the_one_parameter(ex, module, label):
    params = list(module.parameters())
    expect(
        len(params) == 1,
        f"{len(params)} parameters instead of one shared weight",
        input=label,
        expected="exactly one parameter, (vocab_size, hidden_size)",
        got=", ".join(str(tuple(p.shape)) for p in params),
        hint="assign the embedding's Parameter object to the head: self.lm_head.weight = self.embed_tokens.weight "
        "(a clone is a second parameter)",
    )
    return params[0]


@checks("parallel_and_tied")
def one_shared_weight_stays_shared(ex):
    """one (V, H) parameter; embed = W[ids] * scale, logits = h W^T; still true after an optimizer step"""
    V, H, scale = 11, 6, 6**0.5
    module = ex.TiedEmbeddings(V, H, embed_scale=scale).double()
    label = f"TiedEmbeddings(vocab_size={V}, hidden_size={H}, embed_scale=sqrt(6))"
    weight = the_one_parameter(ex, module, label)
    expect_tensor(weight, shape=(V, H), input=label, what="the parameter")
    ids = torch.randint(0, V, (2, 5))
    hidden = torch.randn(2, 5, H, dtype=torch.float64)
    optimizer = torch.optim.SGD(module.parameters(), lr=0.5)
    for step in ("at initialisation", "after one SGD step on a loss using both"):
        W = weight.detach().clone()
        expect_close(
            module.embed(ids),
            W[ids] * scale,
            input=f"{label}, {step}",
            what="embed(ids)",
            hint="rows of W times embed_scale",
        )
        expect_close(
            module.logits(hidden),
            hidden @ W.T,
            input=f"{label}, {step}",
            what="logits(h)",
            hint="h @ W.T with the SAME weight as the embedding (no scale on the logits)",
        )
        loss = module.logits(module.embed(ids)).logsumexp(-1).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


@checks("parallel_and_tied")
def matches_tied_llama_for_causal_lm(ex):
    """a tiny LlamaForCausalLM with tie_word_embeddings: your embed and logits equal its embed_tokens and lm_head"""
    transformers = transformers_module()
    config = tiny_llama_config(tie_word_embeddings=True)
    model = transformers.LlamaForCausalLM(config).eval()
    shared = model.lm_head.weight is model.model.embed_tokens.weight
    expect(shared, "reference setup: Hugging Face did not tie the weights", input="tiny LlamaForCausalLM")
    module = ex.TiedEmbeddings(config.vocab_size, config.hidden_size)
    weight = the_one_parameter(ex, module, "TiedEmbeddings(128, 64)")
    with torch.no_grad():
        weight.copy_(model.model.embed_tokens.weight)
        ids = torch.randint(0, config.vocab_size, (2, 7))
        final_hidden = model.model(ids).last_hidden_state  # after the final norm: what lm_head reads
        hf_logits = model(ids).logits
        label = describe(input_ids=ids) + ", tiny LlamaForCausalLM (V=128, H=64), tie_word_embeddings=True"
        expect_close(
            module.embed(ids),
            model.model.embed_tokens(ids).double(),
            input=label,
            what="embed(ids)",
            hint="embed_scale defaults to 1 (Llama); gather the rows of the shared weight",
        )
        expect_close(
            module.logits(final_hidden),
            hf_logits.double(),
            baseline=hf_logits,
            input=label,
            what="logits(final hidden state)",
            hint="logits = h @ W.T with the embedding's weight",
        )


@checks("parallel_and_tied")
def gradient_is_the_sum_of_both_uses(ex):
    """float64, embed_scale sqrt(H): grad W = (dL/dz)^T h + scale * scatter-add of dL/dx at the token ids"""
    V, H = 13, 8
    scale = H**0.5
    module = ex.TiedEmbeddings(V, H, embed_scale=scale).double()
    weight = the_one_parameter(ex, module, f"TiedEmbeddings({V}, {H}, embed_scale=sqrt({H}))")
    with torch.no_grad():
        weight.copy_(torch.randn(V, H, dtype=torch.float64))
    ids = torch.tensor([[1, 4, 4, 0, 7], [2, 4, 12, 1, 1]])  # repeats, and rows that never occur
    mix = torch.randn(H, H, dtype=torch.float64) / H**0.5
    x = module.embed(ids)
    x.retain_grad()
    h = torch.tanh(x @ mix)
    h.retain_grad()
    z = module.logits(h)
    z.retain_grad()
    F.cross_entropy(z.reshape(-1, V), ids.roll(-1, dims=1).reshape(-1)).backward()
    expected = z.grad.reshape(-1, V).T @ h.detach().reshape(-1, H)  # output head: (V, H), every row
    expected = expected.index_add(0, ids.reshape(-1), scale * x.grad.reshape(-1, H))  # embedding rows
    expect_close(
        weight.grad,
        expected,
        input=describe(input_ids=ids) + f", V={V}, H={H}, loss = cross-entropy of logits(tanh(embed(ids) @ mix))",
        what="d loss / d W",
        hint="with one shared weight autograd adds both uses: (dL/dz)^T h from the head plus the embedding rows; "
        "the embed_scale multiplies the embedding output only",
    )


# ------------------------------------------------------------------------------------------ soft_cap


@checks("softcap_attention")
def closed_form_and_bounds(ex):
    """float64 closed form c tanh(x / c) for caps 1.5, 30, 50, inputs up to 1e4; bounded by c; about x near 0"""
    x = torch.cat((torch.linspace(-3, 3, 13), torch.tensor([1e-3, -1e-4, 29.0, 49.0, 1e3, -1e4, 0.0]))).double()
    for cap in (1.5, 30.0, 50.0):
        got = ex.soft_cap(x.clone(), cap)
        label = describe(x=x) + f", cap={cap} (values -1e4 .. 1e3)"
        expect_tensor(got, shape=x.shape, dtype=torch.float64, input=label)
        expect_close(
            got,
            cap * torch.tanh(x / cap),
            input=label,
            hint="cap * tanh(x / cap): divide inside the tanh, multiply outside (clamp is a hard cap, not this)",
        )
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        x = (torch.randn(4, 33, dtype=torch.float64) * 40).to(dtype)
        got = ex.soft_cap(x.clone(), 30.0)
        label = describe(x=x) + ", cap=30"
        expect_tensor(got, shape=x.shape, dtype=dtype, input=label, hint="return x's dtype")
        expect_close(
            got,
            30.0 * torch.tanh(x.double() / 30.0),
            baseline=(30.0 * torch.tanh(x / 30.0)),
            input=label,
            hint="compute in at least float32, cast back once",
        )


@checks("softcap_attention")
def matches_gemma2_final_logit_softcapping(ex):
    """a tiny Gemma2ForCausalLM with final_logit_softcapping = 3: capping its raw logits gives its capped logits"""
    transformers = transformers_module()
    with reference_only():
        config = transformers.Gemma2Config(
            vocab_size=64,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=16,
            max_position_embeddings=64,
            final_logit_softcapping=3.0,
            attn_logit_softcapping=50.0,
            sliding_window=4,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
        )
    config._attn_implementation = "eager"
    with reference_only(), torch.no_grad():
        model = transformers.Gemma2ForCausalLM(config).eval()
        model.lm_head.weight.copy_(torch.randn(model.lm_head.weight.shape))  # large logits, so the cap matters
        ids = torch.randint(0, 64, (2, 6))
        capped = model(ids).logits
        model.config.final_logit_softcapping = None
        raw = model(ids).logits
    label = describe(logits=raw) + ", Gemma2ForCausalLM final_logit_softcapping=3.0"
    expect_close(
        ex.soft_cap(raw.clone(), 3.0),
        3.0 * torch.tanh(raw.double() / 3.0),
        baseline=capped,
        input=label,
        hint="Gemma 2: logits = cap * tanh(logits / cap)",
    )


@checks("softcap_attention")
def gradient_closed_form(ex):
    """float64: d/dx c tanh(x / c) = 1 - tanh(x / c)^2, nonzero past the cap (unlike clamp)"""
    x = torch.cat((torch.randn(20, dtype=torch.float64) * 20, torch.tensor([45.0, -60.0], dtype=torch.float64)))
    x.requires_grad_()
    ex.soft_cap(x, 30.0).sum().backward()
    expect_close(
        x.grad,
        1 - torch.tanh(x.detach() / 30.0) ** 2,
        input=describe(x=x) + ", cap=30 (includes 45 and -60)",
        what="d soft_cap / d x",
        hint="a smooth cap: its gradient 1 - tanh^2(x / c) is small but not zero past the cap",
    )


# ------------------------------------------------------------------------------------------ softcap_attention


def gemma2_attention(q, k, v, softcap, mask, scale):
    """Gemma-2's eager_attention_forward (scale, cap, add mask, float32 softmax) with an additive mask; (B,H,S,D)."""
    transformers_module()
    from transformers.models.gemma2.modeling_gemma2 import eager_attention_forward

    additive = None if mask is None else torch.zeros(mask.shape, dtype=q.dtype).masked_fill(~mask, float("-inf"))
    module = SimpleNamespace(num_key_value_groups=1, training=False, head_dim=q.shape[-1])
    with reference_only(), torch.no_grad():
        out, _ = eager_attention_forward(module, q, k, v, additive, scaling=scale, softcap=softcap)
    return out.transpose(1, 2)


def causal_window(q_len, kv_len, window=None):
    distance = torch.arange(kv_len - q_len, kv_len)[:, None] - torch.arange(kv_len)[None]
    return (distance >= 0) & (distance < (window or kv_len + 1))


@checks("softcap_attention")
def matches_gemma2_eager_attention(ex):
    """caps 50 and 5, causal and sliding masks, S_q != S_k, fp32/bf16/fp64: Gemma-2's eager_attention_forward"""
    for (B, H, S_q, S_k, D), softcap, window, dtype in [
        ((2, 3, 6, 6, 16), 50.0, None, torch.float32),
        ((1, 2, 3, 9, 8), 5.0, 4, torch.float32),
        ((2, 2, 7, 7, 32), 50.0, 3, torch.bfloat16),
        ((1, 4, 1, 5, 16), 2.0, None, torch.float64),
    ]:
        q = (torch.randn(B, H, S_q, D, dtype=torch.float64) * 3).to(dtype)
        k = (torch.randn(B, H, S_k, D, dtype=torch.float64) * 3).to(dtype)
        v = torch.randn(B, H, S_k, D, dtype=torch.float64).to(dtype)
        mask = causal_window(S_q, S_k, window)
        scale = D**-0.5
        label = describe(q=q, k=k) + f", softcap={softcap}, window={window}, bottom-right causal"
        got = ex.softcap_attention(q.clone(), k.clone(), v.clone(), softcap, mask)
        expect_tensor(got, shape=q.shape, dtype=dtype, input=label)
        expect_close(
            got,
            gemma2_attention(q.double(), k.double(), v.double(), softcap, mask, scale),
            baseline=gemma2_attention(q, k, v, softcap, mask, scale) if dtype != torch.float64 else None,
            input=label,
            hint="scores = q k^T * scale; scores = cap * tanh(scores / cap); then the mask; then softmax over keys",
        )


@checks("softcap_attention")
def half_precision_rounded_once(ex):
    """fp16 and bf16: scores, cap, softmax and weights @ v in float32, rounded to q's dtype once (no baseline)"""
    B, H, S_q, S_k, D = 2, 2, 7, 7, 32
    mask = causal_window(S_q, S_k, 3)
    for dtype in (torch.float16, torch.bfloat16):
        q = (torch.randn(B, H, S_q, D, dtype=torch.float64) * 3).to(dtype)
        k = (torch.randn(B, H, S_k, D, dtype=torch.float64) * 3).to(dtype)
        v = torch.randn(B, H, S_k, D, dtype=torch.float64).to(dtype)
        expect_close(
            ex.softcap_attention(q.clone(), k.clone(), v.clone(), 50.0, mask),
            gemma2_attention(q.double(), k.double(), v.double(), 50.0, mask, D**-0.5),
            input=describe(q=q, k=k) + ", softcap=50, window=3, compared without a low-precision baseline",
            hint="compute_dtype = torch.promote_types(q.dtype, torch.float32): upcast q, k and v, cast back once",
        )


@checks("softcap_attention")
def without_cap_equals_sdpa(ex):
    """softcap=None is plain attention: F.scaled_dot_product_attention with the same boolean mask and scale"""
    for (B, H, S_q, S_k, D), scale, with_mask in [
        ((2, 2, 5, 5, 8), None, True),
        ((1, 3, 2, 7, 16), 0.3, True),
        ((1, 1, 4, 4, 8), None, False),
    ]:
        q, k, v = (torch.randn(B, H, s, D) for s in (S_q, S_k, S_k))
        mask = causal_window(S_q, S_k, 3) if with_mask else None
        label = describe(q=q, k=k) + f", softcap=None, scale={scale}, mask={'window 3' if with_mask else None}"
        got = ex.softcap_attention(q.clone(), k.clone(), v.clone(), None, mask, scale)
        expect_close(
            got,
            F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask, scale=scale),
            baseline=F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale),
            input=label,
            hint="scale defaults to 1 / sqrt(D); True in the mask means attend",
        )


@checks("softcap_attention")
def masked_keys_get_no_weight_with_a_small_cap(ex):
    """cap 1, causal: the output equals a per-query loop over the allowed keys only (masked keys weigh exactly 0)"""
    B, H, S, D, cap = 1, 2, 6, 8, 1.0
    q, k = torch.randn(B, H, S, D, dtype=torch.float64), torch.randn(B, H, S, D, dtype=torch.float64)
    v = torch.randn(B, H, S, D, dtype=torch.float64) * 10
    rows = []
    for i in range(S):
        scores = cap * torch.tanh(q[:, :, i : i + 1] @ k[:, :, : i + 1].transpose(-1, -2) / math.sqrt(D) / cap)
        rows.append(scores.softmax(-1) @ v[:, :, : i + 1])
    expect_close(
        ex.softcap_attention(q, k, v, cap, causal_window(S, S)),
        torch.cat(rows, dim=2),
        input=describe(q=q, k=k) + ", softcap=1, causal",
        hint="cap first, mask second: masking before the tanh turns -inf into -cap, and masked keys get weight",
    )
