"""Realistic wrong versions of the p03.flash_attention_fwd solution; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "flash_attention_fwd",
        "accumulator_not_rescaled",
        "rescales the running sum but not the output accumulator when the running max grows",
        [("        acc = acc * alpha[:, None]\n", "")],
        mistake_zh="累计最大值变大时只重新缩放了累计和，没有缩放输出累加器",
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
        mistake_zh="忘了 softmax 的缩放 1/sqrt(d)（只保留了 exp2 技巧中的 log2(e)）",
    ),
    Mutant(
        "flash_attention_fwd",
        "no_mask_on_last_block",
        "masks only the causal condition: zero-padded keys past S_k keep a score of 0",
        [("keep = cols[None, :] < seq_len_k\n", "keep = cols[None, :] >= 0\n")],
        mistake_zh="只加了因果条件的掩码：超过 S_k 的零填充 key 分数仍为 0",
    ),
    Mutant(
        "flash_attention_fwd",
        "causal_skip_stops_before_diagonal",
        "the causal loop ends at the query block's first row, skipping the diagonal key block",
        [("end = tl.minimum(start_m + BLOCK_M, seq_len_k)", "end = tl.minimum(start_m, seq_len_k)")],
        mistake_zh="因果循环在 query 块的第一行处结束，跳过了对角线上的 key 块",
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
        mistake_zh="带掩码的因果循环从 query 块的第一行开始，而没有向下取整到 BLOCK_N 的倍数：BLOCK_N > BLOCK_M 时，无掩码循环跑过了对角线块（未来的 key 泄漏进来），而且这个块被计算了两次",
    ),
    Mutant(
        "flash_attention_fwd",
        "strict_causal_mask",
        "the causal mask uses key < query, so a token does not attend to itself",
        [("keep = keep & (cols[None, :] <= offs_m[:, None])", "keep = keep & (cols[None, :] < offs_m[:, None])")],
        mistake_zh="因果掩码用的是 key < query，于是 token 不会注意到自己",
    ),
    Mutant(
        "flash_attention_fwd",
        "gqa_interleaved_heads",
        "maps query head h to KV head h % H_kv (interleaved) instead of h // group",
        [("kv_head = head // (num_heads // num_kv_heads)", "kv_head = head % num_kv_heads")],
        mistake_zh="把 query 头 h 映射到 KV 头 h % H_kv（交错），而不是 h // group",
    ),
    Mutant(
        "flash_attention_fwd",
        "lse_left_in_base_2",
        "stores the base-2 log-sum-exp m + log2(l) without converting it to natural log",
        [("lse = (m_i + tl.log2(l_i)) * LN2", "lse = m_i + tl.log2(l_i)")],
        mistake_zh="存的是以 2 为底的 log-sum-exp m + log2(l)，没有换算成自然对数",
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
        mistake_zh="最后一个 query 块存储整个 BLOCK_M x HEAD_DIM 的输出分块，写越过了第 S_q - 1 行",
    ),
    Mutant(
        "flash_attention_fwd",
        "q_rows_unmasked",
        "loads the query block without the row mask, reading past S_q in the last query block",
        [("q = tl.load(q_ptrs, mask=offs_m[:, None] < seq_len_q, other=0.0)", "q = tl.load(q_ptrs)")],
        mistake_zh="加载 query 块时没有行掩码，最后一个 query 块读越过了 S_q",
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
        mistake_zh="带掩码的（最后一个）key 块加载 k 时不加掩码，依赖 -inf 分数兜底：读越过了 S_k",
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
        mistake_zh="用 SDPA 计算输出，用分数的 torch.logsumexp 计算 LSE",
    ),
    Mutant(
        "flash_attention_fwd",
        "v_uses_k_strides",
        "starts V's pointers with K's batch, head and row strides (right whenever k and v share a layout)",
        [
            (
                "v_ptrs = v_ptr + batch * stride_vb + kv_head * stride_vh + offs_n[:, None] * stride_vn",
                "v_ptrs = v_ptr + batch * stride_kb + kv_head * stride_kh + offs_n[:, None] * stride_kn",
            )
        ],
        mistake_zh="用 K 的 batch、head 与行 stride 计算 V 的指针（k、v 布局相同时才碰巧正确）",
    ),
    Mutant(
        "flash_attention_fwd",
        "q_as_contiguous",
        "addresses q as if it were contiguous ((b * H + h) * S_q * d + row * d), not through its own strides",
        [
            (
                "q_ptrs = q_ptr + batch * stride_qb + head * stride_qh + offs_m[:, None] * stride_qm",
                "q_ptrs = q_ptr + (batch * num_heads + head) * seq_len_q * HEAD_DIM + offs_m[:, None] * HEAD_DIM",
            )
        ],
        mistake_zh="把 q 当作连续张量寻址（(b * H + h) * S_q * d + row * d），没有用它自己的 stride",
    ),
    Mutant(
        "flash_attention_fwd",
        "row_offsets_int32",
        "multiplies the query row by stride_qm in int32, which wraps once q passes 2**31 elements",
        [
            (
                "stride_qm, stride_om = tl.cast(stride_qm, tl.int64), tl.cast(stride_om, tl.int64)",
                "stride_qm, stride_om = stride_qm, stride_om",
            )
        ],
        mistake_zh="查询行号乘 stride_qm 用 int32 计算，q 超过 2**31 个元素后溢出回绕",
        requires_compiled=True,
    ),
]
