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
    ),
    Mutant(
        "kv_cache_elements_per_token",
        "forgets_rope_key",
        "counts only the latent: the decoupled RoPE key is cached too",
        [("return num_layers * (kv_lora_rank + qk_rope_head_dim)", "return num_layers * kv_lora_rank")],
    ),
    Mutant(
        "kv_cache_elements_per_token",
        "keys_only",
        "counts keys but not values for MHA/GQA",
        [("return num_layers * 2 * num_kv_heads * head_dim", "return num_layers * num_kv_heads * head_dim")],
    ),
    # MultiHeadLatentAttention
    Mutant(
        "MultiHeadLatentAttention",
        "no_latent_norm",
        "forgets kv_a_layernorm on the latent",
        [("c_kv = self.kv_a_layernorm(c_kv)[:, None]", "c_kv = c_kv[:, None]")],
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
    ),
    Mutant(
        "MultiHeadLatentAttention",
        "k_and_v_swapped",
        "splits kv_b_proj's output per head as [v | k_nope]",
        [("k_nope, v = kv.split([d_nope, d_v], dim=-1)", "v, k_nope = kv.split([d_v, d_nope], dim=-1)")],
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
    ),
    # mla_absorbed
    Mutant(
        "mla_absorbed",
        "latent_size_scale",
        "leaves the softmax scale at 1/sqrt(d_c + d_rope), the absorbed query's size",
        [("query = query * math.sqrt(query.shape[-1] / (d_nope + d_rope))", "query = query")],
    ),
    Mutant(
        "mla_absorbed",
        "uk_uv_swapped",
        "takes W_uk from the value rows and W_uv from the key rows of kv_b_proj",
        [("w_uk, w_uv = weight[:, :d_nope], weight[:, d_nope:]", "w_uv, w_uk = weight[:, :d_v], weight[:, d_v:]")],
    ),
    Mutant(
        "mla_absorbed",
        "heads_flattened_wrong",
        "keeps the head axis before the sequence axis when flattening the heads for o_proj",
        [('torch.einsum("bhsc,hvc->bshv", latent_out, w_uv)', 'torch.einsum("bhsc,hvc->bhsv", latent_out, w_uv)')],
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
    ),
]
