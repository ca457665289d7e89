"""Realistic wrong versions of the p02.architecture_tricks solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    # qk_norm
    Mutant(
        "qk_norm",
        "norm_over_whole_projection",
        "normalises the whole (H * D) projection at once (OLMo-2's variant) where per-head QK-norm is required",
        [
            (
                "rms_norm(q_heads, q_weight, eps)",
                "rms_norm(q, q_weight.repeat(q.shape[-1] // D), eps).view(B, T, -1, D)",
            ),
            (
                "rms_norm(k_heads, k_weight, eps)",
                "rms_norm(k, k_weight.repeat(k.shape[-1] // D), eps).view(B, T, -1, D)",
            ),
        ],
    ),
    Mutant(
        "qk_norm",
        "heads_viewed_before_time",
        "views the projection as (B, H, T, D) directly: right shape, heads scrambled across time steps",
        [
            ("q_heads = q.view(B, T, -1, D)", "q_heads = q.view(B, -1, T, D).transpose(1, 2)"),
            ("k_heads = k.view(B, T, -1, D)", "k_heads = k.view(B, -1, T, D).transpose(1, 2)"),
        ],
    ),
    Mutant(
        "qk_norm",
        "q_gain_for_k",
        "normalises k with q's gain (a copy-paste slip)",
        [("rms_norm(k_heads, k_weight, eps)", "rms_norm(k_heads, q_weight, eps)")],
    ),
    # sliding_window_mask
    Mutant(
        "sliding_window_mask",
        "top_left_alignment",
        "puts query i at position i (top-left), wrong whenever q_len < kv_len",
        [("torch.arange(kv_len - q_len, kv_len)", "torch.arange(q_len)")],
    ),
    Mutant(
        "sliding_window_mask",
        "window_off_by_one",
        "distance <= window: every query sees window + 1 keys",
        [("& (distance < window)", "& (distance <= window)")],
    ),
    Mutant(
        "sliding_window_mask",
        "window_without_causality",
        "a symmetric band |i - j| < window: future keys inside the window leak in",
        [
            ("allowed = distance >= 0", "allowed = distance.abs() >= 0"),
            ("allowed & (distance < window)", "allowed & (distance.abs() < window)"),
        ],
    ),
    # parallel_block
    Mutant(
        "parallel_block",
        "sequential_block",
        "the Llama wiring: the MLP reads norm(x + attention(norm(x)))",
        [("return x + attention(h) + mlp(h)", "r = x + attention(h); return r + mlp(norm(r))")],
    ),
    Mutant(
        "parallel_block",
        "mlp_reads_raw_x",
        "feeds the un-normalised x to the MLP",
        [("return x + attention(h) + mlp(h)", "return x + attention(h) + mlp(x)")],
    ),
    Mutant(
        "parallel_block",
        "no_residual",
        "returns attention(h) + mlp(h) without the residual x",
        [("return x + attention(h) + mlp(h)", "return attention(h) + mlp(h)")],
    ),
    # tied_embeddings
    Mutant(
        "tied_embeddings",
        "copied_not_tied",
        "copies the embedding weight into the head: equal at initialisation, two parameters afterwards",
        [
            (
                "self.lm_head.weight = self.embed_tokens.weight",
                "self.lm_head.weight = nn.Parameter(self.embed_tokens.weight.detach().clone())",
            )
        ],
    ),
    Mutant(
        "tied_embeddings",
        "scale_on_logits_too",
        "multiplies the logits by embed_scale as well",
        [("return self.lm_head(hidden)", "return self.lm_head(hidden) * self.embed_scale")],
    ),
    Mutant(
        "tied_embeddings",
        "scale_ignored",
        "forgets Gemma's embedding scale",
        [("self.embed_tokens(input_ids) * self.embed_scale", "self.embed_tokens(input_ids)")],
    ),
    # soft_cap
    Mutant(
        "soft_cap",
        "tanh_without_division",
        "cap * tanh(x): saturates at |x| of about 2 whatever the cap",
        [("cap * torch.tanh(x.to(compute_dtype) / cap)", "cap * torch.tanh(x.to(compute_dtype))")],
    ),
    Mutant(
        "soft_cap",
        "hard_clamp",
        "clamps to [-cap, cap]: the same range, but identity inside and zero gradient outside",
        [("cap * torch.tanh(x.to(compute_dtype) / cap)", "x.to(compute_dtype).clamp(-cap, cap)")],
    ),
    Mutant(
        "soft_cap",
        "forgets_to_multiply",
        "tanh(x / cap): squashes every logit into (-1, 1)",
        [("cap * torch.tanh(x.to(compute_dtype) / cap)", "torch.tanh(x.to(compute_dtype) / cap)")],
    ),
    # softcap_attention
    Mutant(
        "softcap_attention",
        "mask_before_cap",
        "masks with -inf before the cap: masked keys come out at -cap and get weight",
        [
            (
                'if softcap is not None:\n        scores = soft_cap(scores, softcap)\n    if mask is not None:\n        scores = scores.masked_fill(~mask, float("-inf"))',
                'if mask is not None:\n        scores = scores.masked_fill(~mask, float("-inf"))\n    if softcap is not None:\n        scores = soft_cap(scores, softcap)',
            )
        ],
    ),
    Mutant(
        "softcap_attention",
        "scale_after_cap",
        "caps the unscaled q k^T and scales afterwards",
        [
            ("@ k.to(compute_dtype).transpose(-2, -1)) * scale", "@ k.to(compute_dtype).transpose(-2, -1))"),
            ("scores = soft_cap(scores, softcap)", "scores = soft_cap(scores, softcap) * scale"),
        ],
    ),
    Mutant(
        "softcap_attention",
        "default_scale_one_over_d",
        "defaults the scale to 1 / D instead of 1 / sqrt(D)",
        [("q.shape[-1] ** -0.5", "q.shape[-1] ** -1.0")],
    ),
    Mutant(
        "softcap_attention",
        "calls_the_builtin",
        "plain attention through F.scaled_dot_product_attention when there is no cap",
        [
            (
                "scale = q.shape[-1] ** -0.5 if scale is None else scale",
                "if softcap is None:\n"
                "        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)\n"
                "    scale = q.shape[-1] ** -0.5 if scale is None else scale",
            )
        ],
    ),
]
