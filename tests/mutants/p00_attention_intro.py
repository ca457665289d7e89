"""Realistic wrong versions of the p00.attention_intro solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "attention_loops",
        "no_scale",
        "forgets the 1/sqrt(d) scale",
        [("scale = 1.0 / math.sqrt(d)", "scale = 1.0")],
        mistake_zh="忘记 1/√d 缩放",
    ),
    Mutant(
        "attention_loops",
        "no_max_subtraction",
        "exponentiates the raw scores (overflows for large scores)",
        [("weights = {j: torch.exp(s - row_max) for", "weights = {j: torch.exp(s) for")],
        mistake_zh="直接对原始分数取 exp（分数大时溢出）",
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
        mistake_zh="对 value 求和时跳过了被屏蔽的 key，softmax 分母却仍把它们算进去",
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
        mistake_zh="调用 F.scaled_dot_product_attention",
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
        mistake_zh="忘记 1/√d 缩放",
    ),
    Mutant(
        "attention",
        "scale_by_d",
        "divides the scores by d instead of sqrt(d)",
        [("k.to(compute).transpose(-2, -1) / math.sqrt(d)", "k.to(compute).transpose(-2, -1) / d")],
        mistake_zh="分数除以 d 而不是 √d",
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
        mistake_zh="沿 query 维（dim -2）而不是 key 维归一化",
    ),
    Mutant(
        "attention",
        "mask_inverted",
        "masks the keys the mask allows (masked_fill(mask, -inf))",
        [('scores = scores.masked_fill(~mask, float("-inf"))', 'scores = scores.masked_fill(mask, float("-inf"))')],
        mistake_zh="屏蔽了 mask 允许的 key（masked_fill(mask, -inf)）",
    ),
    Mutant(
        "attention",
        "causal_top_left",
        "aligns the causal mask top-left (tril() as SDPA's is_causal), wrong when decoding with a cache",
        [(".tril(diagonal=Tk - Tq)", ".tril()")],
        mistake_zh="因果掩码左上对齐（像 SDPA 的 is_causal 那样用 tril()），带缓存解码时出错",
    ),
    Mutant(
        "attention",
        "mask_or_causal",
        "uses the padding mask instead of the causal rule when both are given",
        [("    if mask is not None:\n        scores", "    elif mask is not None:\n        scores")],
        mistake_zh="同时给出 padding mask 和因果规则时，只用了 padding mask",
    ),
    Mutant(
        "attention",
        "no_upcast",
        "computes scores and softmax in the input's dtype",
        [("compute = torch.promote_types(q.dtype, torch.float32)", "compute = q.dtype")],
        mistake_zh="分数和 softmax 都在输入的数据类型下计算",
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
        mistake_zh="调用 F.scaled_dot_product_attention",
    ),
    Mutant(
        "padded_causal_mask",
        "strict_causal",
        "uses j < i: a token cannot read itself",
        [("causal = positions[None, :] <= positions[:, None]", "causal = positions[None, :] < positions[:, None]")],
        mistake_zh="用 j < i：token 看不到自己",
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
        mistake_zh="屏蔽了 padding 的 query（行）而不是 padding 的 key（列）",
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
        mistake_zh="返回 (B, T, T)，缺少头维",
    ),
    Mutant(
        "padded_causal_mask",
        "length_inclusive",
        "lets the key at position length (the first padding token) through",
        [("real_key = positions[None, :] < lengths[:, None]", "real_key = positions[None, :] <= lengths[:, None]")],
        mistake_zh="放行了位置为 length 的 key（第一个 padding token）",
    ),
    Mutant(
        "padded_causal_mask",
        "no_validation",
        "accepts lengths of 0 or above T",
        [("if int(lengths.min()) < 1 or int(lengths.max()) > T:", "if False:")],
        mistake_zh="接受为 0 或大于 T 的 length",
    ),
]
