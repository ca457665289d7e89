"""Realistic wrong versions of the p03.flash_attention_bwd solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "attention_delta",
        "no_store_mask",
        "stores a whole block of delta, past the last row",
        [
            (
                "tl.store(delta_ptr + batch_head.to(tl.int64) * seq_len_q + offs_m, delta, mask=rows)",
                "tl.store(delta_ptr + batch_head.to(tl.int64) * seq_len_q + offs_m, delta)",
            )
        ],
        mistake_zh="按整个块存储 delta，写越过了最后一行",
    ),
    Mutant(
        "attention_delta",
        "rows_by_head_dim",
        "addresses the rows of out as if they were contiguous (row * HEAD_DIM) instead of by stride",
        [("head * stride_oh + offs_m[:, None] * stride_om", "head * stride_oh + offs_m[:, None] * HEAD_DIM")],
        mistake_zh="把 out 的各行当作连续的来寻址（row * HEAD_DIM），而不是按步长",
    ),
    Mutant(
        "attention_delta",
        "sum_over_rows",
        "reduces over the sequence axis instead of the head dimension (axis=0 and a broadcast)",
        [
            (
                "delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), axis=1)",
                "delta = tl.sum(tl.sum(o.to(tl.float32) * do.to(tl.float32), axis=0), axis=0) + tl.zeros([BLOCK_M], tl.float32)",
            )
        ],
        mistake_zh="沿序列轴而不是头维度归约（axis=0 再广播）",
    ),
    Mutant(
        "flash_attention_bwd",
        "ds_without_delta",
        "takes dS = P * dP, forgetting the -D term of the softmax Jacobian (dK/dV kernel)",
        [("ds_t = p_t * (dp_t - delta[None, :])", "ds_t = p_t * dp_t")],
        mistake_zh="取 dS = P * dP，忘了 softmax 雅可比矩阵中的 -D 项（dK/dV 内核）",
    ),
    Mutant(
        "flash_attention_bwd",
        "dq_ds_without_delta",
        "takes dS = P * dP in the dQ kernel",
        [("ds = p * (dp - delta[:, None])", "ds = p * dp")],
        mistake_zh="在 dQ 内核中取 dS = P * dP",
    ),
    Mutant(
        "flash_attention_bwd",
        "gqa_only_first_head",
        "dK/dV of a KV head take only the first query head of its group instead of the sum over the group",
        [
            (
                "for head in range(kv_head * group_size, (kv_head + 1) * group_size):",
                "for head in range(kv_head * group_size, kv_head * group_size + 1):",
            )
        ],
        mistake_zh="一个 KV 头的 dK/dV 只取了组内第一个 query 头，而不是对整组求和",
    ),
    Mutant(
        "flash_attention_bwd",
        "dk_missing_scale",
        "forgets the 1/sqrt(d) of S = Q K^T / sqrt(d) in dK",
        [("    dk = dk * sm_scale\n", "")],
        mistake_zh="dK 中忘了 S = Q K^T / sqrt(d) 的 1/sqrt(d)",
    ),
    Mutant(
        "flash_attention_bwd",
        "dkdv_no_causal_mask",
        "rebuilds P without the causal mask in the dK/dV kernel (future queries leak into dK, dV)",
        [("p_t = tl.where(offs_n[:, None] <= offs_m[None, :], p_t, 0.0)", "p_t = p_t")],
        mistake_zh="在 dK/dV 内核中重建 P 时没有因果掩码（未来的 query 泄漏进 dK、dV）",
    ),
    Mutant(
        "flash_attention_bwd",
        "lse_natural_log_in_exp2",
        "subtracts the natural-log LSE inside exp2 without converting it to base 2 (dQ kernel)",
        [
            (
                'mask=rows, other=float("inf")) * LOG2E\n    delta = tl.load(delta_ptr + batch_head',
                'mask=rows, other=float("inf"))\n    delta = tl.load(delta_ptr + batch_head',
            )
        ],
        mistake_zh="在 exp2 中直接减去自然对数的 LSE，没有换算成以 2 为底（dQ 内核）",
    ),
    Mutant(
        "flash_attention_bwd",
        "dq_stops_before_diagonal",
        "the causal dQ loop ends at the query block's first row, missing the diagonal key block",
        [
            (
                "end_n = tl.minimum(start_m + BLOCK_M, seq_len_k) if IS_CAUSAL else seq_len_k",
                "end_n = tl.minimum(start_m, seq_len_k) if IS_CAUSAL else seq_len_k",
            )
        ],
        mistake_zh="因果 dQ 循环在 query 块的第一行处结束，漏掉了对角线上的 key 块",
    ),
    Mutant(
        "flash_attention_bwd",
        "dq_causal_end_by_block_n",
        "ends the causal dQ loop at start_m + BLOCK_N (the key block size) instead of the query block's last row + 1: "
        "right only while the two blocks are equal, so the GPU's 128 x 64 dQ tiles miss keys",
        [
            (
                "end_n = tl.minimum(start_m + BLOCK_M, seq_len_k) if IS_CAUSAL else seq_len_k",
                "end_n = tl.minimum(start_m + BLOCK_N, seq_len_k) if IS_CAUSAL else seq_len_k",
            )
        ],
        mistake_zh="因果 dQ 循环在 start_m + BLOCK_N（key 块大小）处结束，而不是 query 块最后一行 + 1：只有两种块大小相等时才对，于是 GPU 上 128 x 64 的 dQ 分块会漏掉一些 key",
    ),
    Mutant(
        "attention_delta",
        "out_rows_unmasked",
        "loads the rows of out without the row mask, reading past S_q in the last block",
        [
            (
                "offs_d[None, :],\n                mask=rows[:, None], other=0.0)\n    do = tl.load(",
                "offs_d[None, :])\n    do = tl.load(",
            )
        ],
        mistake_zh="加载 out 的各行时没有行掩码，最后一个块读越过了 S_q",
    ),
    Mutant(
        "flash_attention_bwd",
        "q_rows_unmasked_in_dkdv",
        "the dK/dV kernel loads each query block without the row mask, reading past S_q",
        [
            (
                "q = tl.load(q_head + offs_m[:, None] * stride_qm + offs_d[None, :], mask=rows[:, None], other=0.0)",
                "q = tl.load(q_head + offs_m[:, None] * stride_qm + offs_d[None, :])",
            )
        ],
        mistake_zh="dK/dV 内核加载每个 query 块时没有行掩码，读越过了 S_q",
    ),
    Mutant(
        "flash_attention_bwd",
        "keys_unmasked_in_dq",
        "the dQ kernel loads each key block without the key mask, reading past S_k in the last block",
        [
            (
                "k = tl.load(k_head + offs_n[:, None] * stride_kn + offs_d[None, :], mask=keys[:, None], other=0.0)",
                "k = tl.load(k_head + offs_n[:, None] * stride_kn + offs_d[None, :])",
            )
        ],
        mistake_zh="dQ 内核加载每个 key 块时没有 key 掩码，最后一个块读越过了 S_k",
    ),
    Mutant(
        "attention_delta",
        "do_uses_o_strides",
        "reads dout through out's strides (right whenever the two share a layout)",
        [
            (
                "do = tl.load(dout_ptr + batch * stride_dob + head * stride_doh + offs_m[:, None] * stride_dom",
                "do = tl.load(dout_ptr + batch * stride_ob + head * stride_oh + offs_m[:, None] * stride_om",
            )
        ],
        mistake_zh="用 out 的 stride 读取 dout（两者布局相同时才碰巧正确）",
    ),
    Mutant(
        "attention_delta",
        "row_offsets_int32",
        "multiplies the row by stride_om in int32, which wraps once out passes 2**31 elements",
        [
            (
                "stride_om, stride_dom = tl.cast(stride_om, tl.int64), tl.cast(stride_dom, tl.int64)",
                "stride_om, stride_dom = stride_om, stride_dom",
            )
        ],
        mistake_zh="行号乘 stride_om 用 int32 计算，out 超过 2**31 个元素后溢出回绕",
        requires_compiled=True,
    ),
    Mutant(
        "flash_attention_bwd",
        "v_uses_k_strides",
        "loads V's block in the dK/dV kernel with K's strides (right whenever k and v share a layout)",
        [
            (
                "v = tl.load(v_ptr + batch * stride_vb + kv_head * stride_vh + offs_n[:, None] * stride_vn",
                "v = tl.load(v_ptr + batch * stride_kb + kv_head * stride_kh + offs_n[:, None] * stride_kn",
            )
        ],
        mistake_zh="dK/dV 内核用 K 的 stride 读取 V（k、v 布局相同时才碰巧正确）",
    ),
    Mutant(
        "flash_attention_bwd",
        "do_uses_q_strides",
        "reads the incoming gradient dout in the dQ kernel through q's strides (right whenever dout is laid out like q)",
        [
            (
                "do = tl.load(dout_ptr + batch * stride_dob + head * stride_doh + offs_m[:, None] * stride_dom",
                "do = tl.load(dout_ptr + batch * stride_qb + head * stride_qh + offs_m[:, None] * stride_qm",
            )
        ],
        mistake_zh="dQ 内核用 q 的 stride 读取上游梯度 dout（dout 与 q 布局相同时才碰巧正确）",
    ),
    Mutant(
        "flash_attention_bwd",
        "dq_row_offsets_int32",
        "multiplies the query row by stride_qm in int32 in the dQ kernel, which wraps once q passes 2**31 elements",
        [
            (
                "kv_head = head // (num_heads // num_kv_heads)\n"
                "    stride_qm, stride_dom = tl.cast(stride_qm, tl.int64), tl.cast(stride_dom, tl.int64)",
                "kv_head = head // (num_heads // num_kv_heads)\n    stride_qm, stride_dom = stride_qm, stride_dom",
            )
        ],
        mistake_zh="dQ 内核中查询行号乘 stride_qm 用 int32 计算，q 超过 2**31 个元素后溢出回绕",
        requires_compiled=True,
    ),
]
