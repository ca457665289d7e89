"""Realistic wrong versions of the p03.flash_attention_fwd solution; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "flash_attention_fwd",
        "accumulator_not_rescaled",
        "rescales the running sum but not the output accumulator when the running max grows",
        [("        acc = acc * alpha[:, None]\n", "")],
        mistake_zh="运行最大值变大时只重新缩放了运行和，没有缩放输出累加器",
    ),
    Mutant(
        "flash_attention_fwd",
        "no_inverse_sqrt_d",
        "forgets the 1/sqrt(d) softmax scale (keeps only the log2(e) of the exp2 trick)",
        [
            (
                "sm_scale = 1.0 / math.sqrt(head_dim) if sm_scale is None else sm_scale",
                "sm_scale = 1.0 if sm_scale is None else sm_scale",
            )
        ],
        mistake_zh="忘了 softmax 的 1/sqrt(d) 缩放（只保留了 exp2 技巧里的 log2(e)）",
    ),
    Mutant(
        "flash_attention_fwd",
        "no_mask_on_last_block",
        "masks only the causal condition: zero-padded keys past S_k keep a score of 0",
        [("keep = cols[None, :] < seq_len_k\n", "keep = cols[None, :] >= 0\n")],
        mistake_zh="只屏蔽因果条件：S_k 之外补零的 key 分数仍为 0",
    ),
    Mutant(
        "flash_attention_fwd",
        "causal_skip_stops_before_diagonal",
        "the causal loop ends at the query block's first row, skipping the diagonal key block",
        [("end = tl.minimum(start_m + BLOCK_M, seq_len_k)", "end = tl.minimum(start_m, seq_len_k)")],
        mistake_zh="因果循环停在 query 块的第一行，跳过了对角线上的 key 块",
    ),
    Mutant(
        "flash_attention_fwd",
        "masked_start_not_rounded_down",
        "starts the masked causal loop at the query block's first row instead of rounding it down to BLOCK_N: with "
        "BLOCK_N > BLOCK_M the unmasked loop runs over the diagonal block (future keys leak in) and it is counted twice",
        [
            (
                "masked_start = tl.minimum(start_m // BLOCK_N * BLOCK_N, full_blocks_end)",
                "masked_start = tl.minimum(start_m, full_blocks_end)",
            )
        ],
        mistake_zh="带掩码的因果循环从 query 块的第一行开始，而不是向下取整到 BLOCK_N：BLOCK_N > BLOCK_M 时无掩码的循环跑过了对角线块（未来的 key 漏了进来），而且它被算了两次",
    ),
    Mutant(
        "flash_attention_fwd",
        "strict_causal_mask",
        "the causal mask uses key < query, so a token does not attend to itself",
        [("keep = keep & (cols[None, :] <= offs_m[:, None])", "keep = keep & (cols[None, :] < offs_m[:, None])")],
        mistake_zh="因果掩码用 key < query，token 不关注自己",
    ),
    Mutant(
        "flash_attention_fwd",
        "gqa_interleaved_heads",
        "maps query head h to KV head h % H_kv (interleaved) instead of h // group",
        [("kv_head = head // (num_heads // num_kv_heads)", "kv_head = head % num_kv_heads")],
        mistake_zh="query 头 h 映射到 KV 头 h % H_kv（交错），而不是 h // group",
    ),
    Mutant(
        "flash_attention_fwd",
        "lse_left_in_base_2",
        "stores the base-2 log-sum-exp m + log2(l) without converting it to natural log",
        [("lse = (m_i + tl.log2(l_i)) * LN2", "lse = m_i + tl.log2(l_i)")],
        mistake_zh="存下以 2 为底的 log-sum-exp m + log2(l)，没有换成自然对数",
    ),
    Mutant(
        "flash_attention_fwd",
        "no_output_store_mask",
        "stores the whole BLOCK_M x HEAD_DIM output tile of the last query block, past row S_q - 1",
        [
            (
                "tl.store(o_ptrs, out.to(out_ptr.dtype.element_ty), mask=offs_m[:, None] < seq_len_q)",
                "tl.store(o_ptrs, out.to(out_ptr.dtype.element_ty))",
            )
        ],
        mistake_zh="最后一个 query 块存储整个 BLOCK_M x HEAD_DIM 的输出分块，越过了第 S_q - 1 行",
    ),
    Mutant(
        "flash_attention_fwd",
        "q_rows_unmasked",
        "loads the query block without the row mask, reading past S_q in the last query block",
        [("q = tl.load(q_ptrs, mask=offs_m[:, None] < seq_len_q, other=0.0)", "q = tl.load(q_ptrs)")],
        mistake_zh="加载 query 块时没有行掩码，最后一个 query 块读到 S_q 之外",
    ),
    Mutant(
        "flash_attention_fwd",
        "keys_unmasked_in_last_block",
        "loads k of the masked (last) key block unmasked, relying on the -inf scores: reads past S_k",
        [
            (
                "k = tl.load(k_ptrs + start * stride_kn, mask=cols[:, None] < seq_len_k, other=0.0)",
                "k = tl.load(k_ptrs + start * stride_kn, mask=cols[:, None] < seq_len_k + BLOCK_N, other=0.0)",
            )
        ],
        mistake_zh="带掩码的（最后一个）key 块不带掩码加载 k，依赖 -inf 分数：读到 S_k 之外",
    ),
    Mutant(
        "flash_attention_fwd",
        "calls_the_builtin",
        "SDPA for the output and torch.logsumexp of the scores for the LSE",
        [
            (
                "    return out, lse",
                "    scores = q.float() @ k.float().repeat_interleave(num_heads // num_kv_heads, 1).transpose(-1, -2) * sm_scale\n"
                "    if causal:\n"
                '        scores = scores.masked_fill(torch.ones_like(scores, dtype=torch.bool).triu(1), float("-inf"))\n'
                "    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=sm_scale, enable_gqa=True)\n"
                "    return out, torch.logsumexp(scores, dim=-1)",
            )
        ],
        mistake_zh="输出用 SDPA，LSE 用分数的 torch.logsumexp",
    ),
]
