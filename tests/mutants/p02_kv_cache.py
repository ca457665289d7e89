"""Realistic wrong versions of the p02.kv_cache solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "StaticKVCache",
        "shared_column",
        "writes every row at the longest row's length, as a cache with one length for the batch would",
        [("slots = self.lengths[rows] + cols", "slots = self.lengths.max() + cols")],
    ),
    Mutant(
        "StaticKVCache",
        "writes_padding",
        "writes all T columns of every row and advances every row by T",
        [
            (
                "rows, cols = (torch.arange(T, device=k.device)[None, :] < num_new[:, None]).nonzero(as_tuple=True)",
                "num_new = torch.full_like(num_new, T); new_lengths = self.lengths + num_new\n"
                "                rows, cols = (torch.arange(T, device=k.device)[None, :] < num_new[:, None]).nonzero(as_tuple=True)",
            )
        ],
    ),
    Mutant(
        "StaticKVCache",
        "concatenates",
        "grows the buffers with torch.cat instead of writing into them",
        [
            (
                "self.keys[rows, :, slots] = k[rows, :, cols].to(self.keys.dtype)                   # (N, H_kv, D)",
                "self.keys = self.keys.clone(); self.keys[rows, :, slots] = k[rows, :, cols].to(self.keys.dtype)",
            )
        ],
    ),
    Mutant(
        "StaticKVCache",
        "no_overflow_check",
        "lets a row run past max_length (the write then fails half-done or wraps)",
        [("if bool((new_lengths > S_max).any()):", "if False:")],
    ),
    Mutant(
        "cached_attention",
        "no_causal",
        "ignores the query's position: a prefill token sees the tokens after it",
        [
            (
                "visible = key_mask[:, None, :] & (columns[None, None, :] <= query_positions[:, :, None])",
                "visible = key_mask[:, None, :].expand(B, T, S_max)",
            )
        ],
    ),
    Mutant(
        "cached_attention",
        "no_length_mask",
        "ignores the lengths: columns up to the query's position count even when never written",
        [
            (
                "visible = key_mask[:, None, :] & (columns[None, None, :] <= query_positions[:, :, None])",
                "visible = columns[None, None, :] <= query_positions[:, :, None]",
            )
        ],
    ),
    Mutant(
        "cached_attention",
        "multiplies_values",
        "masks the values by multiplying with the mask: NaN in an unwritten slot survives (0 * NaN)",
        [
            (
                "out = weights @ torch.where(key_mask[:, None, :, None], v, 0.0)",
                "out = weights @ (v * key_mask[:, None, :, None])",
            )
        ],
    ),
    Mutant(
        "cached_attention",
        "wrong_gqa_repeat",
        "repeats the KV heads with repeat (h % H_kv) instead of repeat_interleave (h // G)",
        [
            (
                "k = keys.to(compute).repeat_interleave(H_q // H_kv, dim=1)",
                "k = keys.to(compute).repeat(1, H_q // H_kv, 1, 1)",
            ),
            (
                "v = values.to(compute).repeat_interleave(H_q // H_kv, dim=1)",
                "v = values.to(compute).repeat(1, H_q // H_kv, 1, 1)",
            ),
        ],
    ),
    Mutant(
        "generate_static",
        "last_column",
        "takes the prefill's next token from the last column, which is padding for shorter prompts",
        [
            (
                "next_token = logits[torch.arange(B), lengths - 1].argmax(dim=-1)",
                "next_token = logits[:, -1].argmax(dim=-1)",
            )
        ],
    ),
    Mutant(
        "generate_static",
        "positions_after_update",
        "takes decode positions one too far (as if read after the update)",
        [("positions = caches[0].lengths[:, None].clone()", "positions = caches[0].lengths[:, None].clone() + 1")],
    ),
    Mutant(
        "generate_static",
        "positions_restart",
        "restarts the decode positions at 0 on every step",
        [("positions = caches[0].lengths[:, None].clone()", "positions = torch.zeros(B, 1, dtype=torch.long)")],
    ),
    Mutant(
        "generate_static",
        "extra_forward",
        "runs a forward pass for the last token too (max_new_tokens decode steps)",
        [("for _ in range(max_new_tokens - 1):", "for _ in range(max_new_tokens):")],
    ),
    Mutant(
        "step_cost",
        "attention_once",
        "counts only q k^T, not p v",
        [("L * 2 * 2 * batch * H_q * new_tokens * S * D", "L * 2 * batch * H_q * new_tokens * S * D")],
    ),
    Mutant(
        "step_cost",
        "kv_heads_for_attention",
        "counts the attention FLOPs with H_kv heads",
        [("L * 2 * 2 * batch * H_q * new_tokens * S * D", "L * 2 * 2 * batch * H_kv * new_tokens * S * D")],
    ),
    Mutant(
        "step_cost",
        "k_only",
        "counts the cache bytes of K only",
        [
            (
                "kv_bytes = bytes_per_element * 2 * L * batch * H_kv * S * D",
                "kv_bytes = bytes_per_element * L * batch * H_kv * S * D",
            )
        ],
    ),
    Mutant(
        "step_cost",
        "counts_embedding",
        "counts the embedding table as a matmul (twice the vocabulary term)",
        [("matmul_weights = L * layer_weights + d * V ", "matmul_weights = L * layer_weights + 2 * d * V ")],
    ),
]
