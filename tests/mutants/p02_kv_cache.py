"""Realistic wrong versions of the p02.kv_cache solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "StaticKVCache",
        "shared_column",
        "writes every row at the longest row's length, as a cache with one length for the batch would",
        [("slots = self.lengths[rows] + cols", "slots = self.lengths.max() + cols")],
        mistake_zh="每一行都写在最长那一行的长度处，就像整个批只有一个长度的缓存",
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
        mistake_zh="每一行都写入全部 T 列，并且都前进 T",
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
        mistake_zh="用 torch.cat 扩展缓冲区，而不是写进去",
    ),
    Mutant(
        "StaticKVCache",
        "no_overflow_check",
        "lets a row run past max_length (the write then fails half-done or wraps)",
        [("if bool((new_lengths > S_max).any()):", "if False:")],
        mistake_zh="让某一行超出 max_length（写入随后只完成一半或回绕）",
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
        mistake_zh="忽略 query 的位置：预填充的 token 看到了它之后的 token",
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
        mistake_zh="忽略 lengths：直到 query 位置的列都被计入，即使从未写入",
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
        mistake_zh="用乘以掩码的方式屏蔽 value：未写入槽位里的 NaN 留了下来（0 * NaN）",
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
        mistake_zh="用 repeat（h % H_kv）而不是 repeat_interleave（h // G）重复 KV 头",
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
        mistake_zh="预填充的下一个 token 取自最后一列，对较短的提示来说那是 padding",
    ),
    Mutant(
        "generate_static",
        "positions_after_update",
        "takes decode positions one too far (as if read after the update)",
        [("positions = caches[0].lengths[:, None].clone()", "positions = caches[0].lengths[:, None].clone() + 1")],
        mistake_zh="解码位置多取了一位（好像是在更新之后读的）",
    ),
    Mutant(
        "generate_static",
        "positions_restart",
        "restarts the decode positions at 0 on every step",
        [("positions = caches[0].lengths[:, None].clone()", "positions = torch.zeros(B, 1, dtype=torch.long)")],
        mistake_zh="每一步解码位置都从 0 重新开始",
    ),
    Mutant(
        "generate_static",
        "extra_forward",
        "runs a forward pass for the last token too (max_new_tokens decode steps)",
        [("for _ in range(max_new_tokens - 1):", "for _ in range(max_new_tokens):")],
        mistake_zh="最后一个 token 也做了一次前向（max_new_tokens 次解码步）",
    ),
    Mutant(
        "step_cost",
        "attention_once",
        "counts only q k^T, not p v",
        [("L * 2 * 2 * batch * H_q * new_tokens * S * D", "L * 2 * batch * H_q * new_tokens * S * D")],
        mistake_zh="只算了 q k^T，没算 p v",
    ),
    Mutant(
        "step_cost",
        "kv_heads_for_attention",
        "counts the attention FLOPs with H_kv heads",
        [("L * 2 * 2 * batch * H_q * new_tokens * S * D", "L * 2 * 2 * batch * H_kv * new_tokens * S * D")],
        mistake_zh="注意力 FLOPs 按 H_kv 个头计算",
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
        mistake_zh="缓存字节只算了 K",
    ),
    Mutant(
        "step_cost",
        "counts_embedding",
        "counts the embedding table as a matmul (twice the vocabulary term)",
        [("matmul_weights = L * layer_weights + d * V ", "matmul_weights = L * layer_weights + 2 * d * V ")],
        mistake_zh="把嵌入表当作一次矩阵乘来算（词表那一项成了两倍）",
    ),
]
