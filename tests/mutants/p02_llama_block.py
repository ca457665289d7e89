"""Realistic wrong versions of the p02.llama_block solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "LlamaAttention",
        "heads_split_without_transpose",
        "view(B, H, T, D) straight from (B, T, H*D): right shape, heads made of the wrong numbers",
        [
            (
                "self.q_proj(x).view(B, T, self.num_heads, self.head_dim).transpose(1, 2)",
                "self.q_proj(x).view(B, self.num_heads, T, self.head_dim)",
            )
        ],
        mistake_zh="从 (B, T, H*D) 直接 view(B, H, T, D)：形状对，头里装的却是错的数",
    ),
    Mutant(
        "LlamaAttention",
        "heads_merged_without_transpose",
        "reshapes (B, H, T, D) to (B, T, H*D) without moving the head axis back",
        [("out.transpose(1, 2).reshape(B, T,", "out.reshape(B, T,")],
        mistake_zh="把 (B, H, T, D) reshape 成 (B, T, H*D) 之前没把头轴移回去",
    ),
    Mutant(
        "LlamaAttention",
        "keys_not_rotated",
        "applies RoPE to the queries only",
        [("k = apply_rope_rotate_half(k, cos, sin, position_ids)", "k = k")],
        mistake_zh="只对 query 施加 RoPE",
    ),
    Mutant(
        "LlamaAttention",
        "positions_from_arange",
        "assumes positions 0 .. T-1 instead of using position_ids",
        [
            (
                "q = apply_rope_rotate_half(q, cos, sin, position_ids)",
                "position_ids = torch.arange(T).expand(B, T)\n        q = apply_rope_rotate_half(q, cos, sin, position_ids)",
            )
        ],
        mistake_zh="假定位置是 0 .. T-1，而不是使用 position_ids",
    ),
    Mutant(
        "LlamaAttention",
        "not_causal",
        "forgets the causal mask",
        [("causal=True, key_padding_mask=key_padding_mask", "causal=False, key_padding_mask=key_padding_mask")],
        mistake_zh="忘了因果掩码",
    ),
    Mutant(
        "LlamaAttention",
        "padding_mask_dropped",
        "ignores the key padding mask",
        [("causal=True, key_padding_mask=key_padding_mask", "causal=True")],
        mistake_zh="忽略 key 的 padding 掩码",
    ),
    Mutant(
        "LlamaBlock",
        "post_norm",
        "normalises after each residual addition (the original Transformer) instead of before each branch",
        [
            (
                "h = x + self.self_attn(self.input_layernorm(x), cos, sin, position_ids, key_padding_mask, cache)",
                "h = self.input_layernorm(x + self.self_attn(x, cos, sin, position_ids, key_padding_mask, cache))",
            ),
            (
                "return h + self.mlp(self.post_attention_layernorm(h))",
                "return self.post_attention_layernorm(h + self.mlp(h))",
            ),
        ],
        mistake_zh="在每次残差相加之后归一化（原始 Transformer），而不是在每个分支之前",
    ),
    Mutant(
        "LlamaBlock",
        "residual_after_norm",
        "adds the attention output to the normalised input instead of the raw residual stream",
        [
            (
                "h = x + self.self_attn(self.input_layernorm(x),",
                "x = self.input_layernorm(x)\n        h = x + self.self_attn(x,",
            )
        ],
        mistake_zh="把注意力输出加到归一化后的输入上，而不是原始的残差流上",
    ),
    Mutant(
        "LlamaBlock",
        "one_norm_twice",
        "uses input_layernorm before the MLP as well",
        [("self.mlp(self.post_attention_layernorm(h))", "self.mlp(self.input_layernorm(h))")],
        mistake_zh="MLP 之前也用了 input_layernorm",
    ),
    Mutant(
        "LlamaBlock",
        "mlp_reads_block_input",
        "feeds the MLP branch the block input x instead of h",
        [("self.mlp(self.post_attention_layernorm(h))", "self.mlp(self.post_attention_layernorm(x))")],
        mistake_zh="MLP 分支读的是块的输入 x，而不是 h",
    ),
    Mutant(
        "LlamaBlock",
        "cache_not_passed",
        "does not hand the KV cache to the attention layer",
        [("position_ids, key_padding_mask, cache)", "position_ids, key_padding_mask)")],
        mistake_zh="没有把 KV 缓存传给注意力层",
    ),
]
