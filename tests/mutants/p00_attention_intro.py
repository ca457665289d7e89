"""Realistic wrong versions of the p00.attention_intro solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "attention_loops",
        "no_scale",
        "forgets the 1/sqrt(d) scale",
        [("scale = 1.0 / math.sqrt(d)", "scale = 1.0")],
    ),
    Mutant(
        "attention_loops",
        "no_max_subtraction",
        "exponentiates the raw scores (overflows for large scores)",
        [("weights = {j: torch.exp(s - row_max) for", "weights = {j: torch.exp(s) for")],
    ),
    Mutant(
        "attention_loops",
        "mask_ignored_in_denominator",
        "skips masked keys in the sum of values but still counts them in the softmax denominator",
        [
            ("allowed = [j for j in range(Tk) if mask is None or bool(mask[i, j])]", "allowed = list(range(Tk))"),
            (
                "rows.append(sum(weights[j] / total * v[j] for j in allowed))",
                "rows.append(sum(weights[j] / total * v[j] for j in allowed if mask is None or bool(mask[i, j])))",
            ),
        ],
    ),
    Mutant(
        "attention_loops",
        "calls_sdpa",
        "calls F.scaled_dot_product_attention",
        [
            (
                "    return torch.stack(rows).to(q.dtype)",
                "    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)",
            )
        ],
    ),
    Mutant(
        "attention",
        "no_scale",
        "forgets the 1/sqrt(d) scale",
        [
            (
                "q.to(compute) @ k.to(compute).transpose(-2, -1) / math.sqrt(d)",
                "q.to(compute) @ k.to(compute).transpose(-2, -1)",
            )
        ],
    ),
    Mutant(
        "attention",
        "scale_by_d",
        "divides the scores by d instead of sqrt(d)",
        [("k.to(compute).transpose(-2, -1) / math.sqrt(d)", "k.to(compute).transpose(-2, -1) / d")],
    ),
    Mutant(
        "attention",
        "softmax_over_queries",
        "normalises over the queries (dim -2) instead of the keys",
        [
            (
                "(scores - scores.amax(dim=-1, keepdim=True)).exp()",
                "(scores - scores.amax(dim=-2, keepdim=True)).exp()",
            ),
            ("weights / weights.sum(dim=-1, keepdim=True)", "weights / weights.sum(dim=-2, keepdim=True)"),
        ],
    ),
    Mutant(
        "attention",
        "mask_inverted",
        "masks the keys the mask allows (masked_fill(mask, -inf))",
        [('scores = scores.masked_fill(~mask, float("-inf"))', 'scores = scores.masked_fill(mask, float("-inf"))')],
    ),
    Mutant(
        "attention",
        "causal_top_left",
        "aligns the causal mask top-left (tril() as SDPA's is_causal), wrong when decoding with a cache",
        [(".tril(diagonal=Tk - Tq)", ".tril()")],
    ),
    Mutant(
        "attention",
        "mask_or_causal",
        "uses the padding mask instead of the causal rule when both are given",
        [("    if mask is not None:\n        scores", "    elif mask is not None:\n        scores")],
    ),
    Mutant(
        "attention",
        "no_upcast",
        "computes scores and softmax in the input's dtype",
        [("compute = torch.promote_types(q.dtype, torch.float32)", "compute = q.dtype")],
    ),
    Mutant(
        "attention",
        "calls_sdpa",
        "calls F.scaled_dot_product_attention",
        [
            (
                "return (weights @ v.to(compute)).to(q.dtype)",
                "return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal)",
            )
        ],
    ),
    Mutant(
        "padded_causal_mask",
        "strict_causal",
        "uses j < i: a token cannot read itself",
        [("causal = positions[None, :] <= positions[:, None]", "causal = positions[None, :] < positions[:, None]")],
    ),
    Mutant(
        "padded_causal_mask",
        "padding_on_queries",
        "masks the padded queries (rows) instead of the padded keys (columns)",
        [
            (
                "return causal[None, None, :, :] & real_key[:, None, None, :]",
                "return causal[None, None, :, :] & real_key[:, None, :, None]",
            )
        ],
    ),
    Mutant(
        "padded_causal_mask",
        "no_head_axis",
        "returns (B, T, T) without the head axis",
        [
            (
                "return causal[None, None, :, :] & real_key[:, None, None, :]",
                "return causal[None, :, :] & real_key[:, None, :]",
            )
        ],
    ),
    Mutant(
        "padded_causal_mask",
        "length_inclusive",
        "lets the key at position length (the first padding token) through",
        [("real_key = positions[None, :] < lengths[:, None]", "real_key = positions[None, :] <= lengths[:, None]")],
    ),
    Mutant(
        "padded_causal_mask",
        "no_validation",
        "accepts lengths of 0 or above T",
        [("if int(lengths.min()) < 1 or int(lengths.max()) > T:", "if False:")],
    ),
]
