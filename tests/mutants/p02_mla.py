"""Realistic wrong versions of the p02.mla solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    # kv_cache_elements_per_token
    Mutant(
        "kv_cache_elements_per_token",
        "latent_counted_twice",
        "counts the MLA latent and RoPE key twice, as if keys and values were cached separately",
        [
            (
                "return num_layers * (kv_lora_rank + qk_rope_head_dim)",
                "return num_layers * 2 * (kv_lora_rank + qk_rope_head_dim)",
            )
        ],
        mistake_zh="把 MLA 的潜在向量和 RoPE key 算了两次，好像 key 和 value 分开缓存",
    ),
    Mutant(
        "kv_cache_elements_per_token",
        "forgets_rope_key",
        "counts only the latent: the decoupled RoPE key is cached too",
        [("return num_layers * (kv_lora_rank + qk_rope_head_dim)", "return num_layers * kv_lora_rank")],
        mistake_zh="只算了潜在向量：解耦的 RoPE key 也要缓存",
    ),
    Mutant(
        "kv_cache_elements_per_token",
        "keys_only",
        "counts keys but not values for MHA/GQA",
        [("return num_layers * 2 * num_kv_heads * head_dim", "return num_layers * num_kv_heads * head_dim")],
        mistake_zh="MHA/GQA 只算了 key，没算 value",
    ),
    # MultiHeadLatentAttention
    Mutant(
        "MultiHeadLatentAttention",
        "no_latent_norm",
        "forgets kv_a_layernorm on the latent",
        [("c_kv = self.kv_a_layernorm(c_kv)[:, None]", "c_kv = c_kv[:, None]")],
        mistake_zh="潜在向量上忘了 kv_a_layernorm",
    ),
    Mutant(
        "MultiHeadLatentAttention",
        "rope_part_first",
        "takes the RoPE part from the front of each query head instead of the end",
        [
            (
                "q_nope, q_pe = q.split([d_nope, d_rope], dim=-1)",
                "q_pe, q_nope = q.split([d_rope, d_nope], dim=-1)",
            )
        ],
        mistake_zh="RoPE 部分取自每个 query 头的前端而不是末端",
    ),
    Mutant(
        "MultiHeadLatentAttention",
        "rope_positions_from_zero",
        "rotates the key at positions 0..S-1 instead of position_ids (prefill looks right, decoding does not)",
        [
            (
                "apply_rope_rotate_half(k_pe[:, None], self.cos, self.sin, position_ids)",
                "apply_rope_rotate_half(k_pe[:, None], self.cos, self.sin, torch.arange(S).expand(B, S))",
            )
        ],
        mistake_zh="在位置 0..S-1 而不是 position_ids 处旋转 key（预填充看着对，解码就错）",
    ),
    Mutant(
        "MultiHeadLatentAttention",
        "k_and_v_swapped",
        "splits kv_b_proj's output per head as [v | k_nope]",
        [("k_nope, v = kv.split([d_nope, d_v], dim=-1)", "v, k_nope = kv.split([d_v, d_nope], dim=-1)")],
        mistake_zh="把 kv_b_proj 的输出按头切成 [v | k_nope]",
    ),
    Mutant(
        "MultiHeadLatentAttention",
        "rope_key_not_rotated",
        "caches the RoPE key before rotating it",
        [
            (
                "k_rope = apply_rope_rotate_half(k_pe[:, None], self.cos, self.sin, position_ids)",
                "k_rope = k_pe[:, None]",
            )
        ],
        mistake_zh="RoPE key 旋转之前就缓存了",
    ),
    # mla_absorbed
    Mutant(
        "mla_absorbed",
        "latent_size_scale",
        "leaves the softmax scale at 1/sqrt(d_c + d_rope), the absorbed query's size",
        [("query = query * math.sqrt(query.shape[-1] / (d_nope + d_rope))", "query = query")],
        mistake_zh="softmax 缩放仍取 1/sqrt(d_c + d_rope)，即吸收后 query 的维度",
    ),
    Mutant(
        "mla_absorbed",
        "uk_uv_swapped",
        "takes W_uk from the value rows and W_uv from the key rows of kv_b_proj",
        [("w_uk, w_uv = weight[:, :d_nope], weight[:, d_nope:]", "w_uv, w_uk = weight[:, :d_v], weight[:, d_v:]")],
        mistake_zh="W_uk 取自 kv_b_proj 的 value 行，W_uv 取自 key 行",
    ),
    Mutant(
        "mla_absorbed",
        "heads_flattened_wrong",
        "keeps the head axis before the sequence axis when flattening the heads for o_proj",
        [('torch.einsum("bhsc,hvc->bshv", latent_out, w_uv)', 'torch.einsum("bhsc,hvc->bhsv", latent_out, w_uv)')],
        mistake_zh="为 o_proj 展平各头时把头轴留在序列轴之前",
    ),
    Mutant(
        "mla_absorbed",
        "values_with_rope",
        "uses the keys [c_kv | k_rope] as values and drops the extra columns afterwards",
        [
            (
                "latent_out = attention(query, key, c_kv, causal=True)",
                "latent_out = attention(query, key, key, causal=True)[..., d_rope:]",
            )
        ],
        mistake_zh="用 key [c_kv | k_rope] 当 value，事后再丢掉多出的列",
    ),
    Mutant(
        "mla_absorbed",
        "calls_the_plain_layer",
        "returns the non-absorbed layer's output: right numbers, but every cached latent is up-projected per step",
        [
            (
                "q_nope, q_rope, c_kv, k_rope = mla.project(x, position_ids)",
                "return mla(x, position_ids, cache)",
            )
        ],
        mistake_zh="返回未吸收的层的输出：数值对，但每一步都要把每个缓存的潜在向量上投影一遍",
    ),
]
