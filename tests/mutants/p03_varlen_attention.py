"""Realistic wrong versions of the p03.varlen_attention solutions; every one must be rejected by a check (on the CPU
through Triton's interpreter)."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "varlen_attention",
        "top_left_causal",
        "aligns the causal mask to the top-left corner (j <= i), as SDPA's is_causal does",
        [("offset = seq_len_k - seq_len_q  ", "offset = 0  ")],
        mistake_zh="因果掩码按左上角对齐（j <= i），就像 SDPA 的 is_causal 那样",
    ),
    Mutant(
        "varlen_attention",
        "mask_without_offset",
        "shifts the key loop's end by the offset but compares keys with the row alone in the mask",
        [
            (
                "keep = keep & (cols[None, :] <= offs_m[:, None] + offset)",
                "keep = keep & (cols[None, :] <= offs_m[:, None])",
            )
        ],
        mistake_zh="key 循环的终点按偏移量移动了，掩码中却只拿 key 与行号本身比较",
    ),
    Mutant(
        "varlen_attention",
        "loop_end_without_offset",
        "ends the causal key loop at the tile's last row, forgetting the offset of a prefill chunk",
        [("end = tl.minimum(start_m + BLOCK_M + offset, seq_len_k)", "end = tl.minimum(start_m + BLOCK_M, seq_len_k)")],
        mistake_zh="因果 key 循环在分块的最后一行处结束，忘了预填充分段的偏移量",
    ),
    Mutant(
        "varlen_attention",
        "keys_at_query_start",
        "reads the sequence's key start from cu_seqlens_q",
        [("k_start = tl.load(cu_seqlens_k_ptr + seq)", "k_start = tl.load(cu_seqlens_q_ptr + seq)")],
        mistake_zh="从 cu_seqlens_q 读取序列中 key 的起点",
    ),
    Mutant(
        "varlen_attention",
        "gqa_modulo",
        "maps query head h to KV head h % H_kv instead of h // (H / H_kv)",
        [("kv_head = head // (num_heads // num_kv_heads)", "kv_head = head % num_kv_heads")],
        mistake_zh="把 query 头 h 映射到 KV 头 h % H_kv，而不是 h // (H / H_kv)",
    ),
    Mutant(
        "varlen_attention",
        "unmasked_store",
        "stores the whole tile: rows past the sequence's end land in the next sequence (or past the buffer)",
        [
            (
                "tl.store(o_ptrs, out.to(out_ptr.dtype.element_ty), mask=offs_m[:, None] < seq_len_q)",
                "tl.store(o_ptrs, out.to(out_ptr.dtype.element_ty))",
            )
        ],
        mistake_zh="存储整个分块：超过序列末尾的行写进了下一个序列（或越过缓冲区）",
    ),
    Mutant(
        "varlen_attention",
        "no_cu_seqlens_validation",
        "trusts cu_seqlens: a wrong last entry or a decreasing one goes to the kernel",
        [("if cu[0] != 0 or cu[-1] != total or min(lens) < 0:", "if False:")],
        mistake_zh="不校验 cu_seqlens：最后一项错误或递减的 cu_seqlens 被直接交给内核",
    ),
    Mutant(
        "varlen_attention",
        "no_causal_length_check",
        "accepts S_q > S_k under a causal mask, leaving query rows with no visible key",
        [("if causal and sq > sk:", "if False:")],
        mistake_zh="在因果掩码下接受 S_q > S_k，留下看不到任何 key 的 query 行",
    ),
    Mutant(
        "varlen_attention",
        "calls_sdpa",
        "runs SDPA per sequence instead of the kernel",
        [
            (
                "    out = torch.empty_like(q)\n    if total_q == 0:",
                "    out = torch.empty_like(q)\n"
                "    for a, b, c, e in zip(bounds[0], bounds[0][1:], bounds[1], bounds[1][1:]):\n"
                "        if b > a:\n"
                "            g = num_heads // num_kv_heads\n"
                "            out[a:b] = F.scaled_dot_product_attention(q[a:b].transpose(0, 1),\n"
                "                k[c:e].repeat_interleave(g, 1).transpose(0, 1),\n"
                "                v[c:e].repeat_interleave(g, 1).transpose(0, 1), is_causal=causal).transpose(0, 1)\n"
                "    return out\n"
                "    if total_q == 0:",
            )
        ],
        mistake_zh="对每个序列调用 SDPA，而不是运行内核",
    ),
    Mutant(
        "varlen_attention",
        "q_as_contiguous",
        "addresses q as if it were contiguous (token * H * d + head * d), not through its own strides",
        [
            (
                "q_ptrs = q_ptr + (q_start + offs_m[:, None]) * stride_qt + head * stride_qh + offs_d[None, :]",
                "q_ptrs = q_ptr + (q_start + offs_m[:, None]) * (num_heads * HEAD_DIM) + head * HEAD_DIM + offs_d[None, :]",
            )
        ],
        mistake_zh="把 q 当作连续张量寻址（token * H * d + head * d），没有用它自己的 stride（q 常是融合 QKV 的切片）",
    ),
    Mutant(
        "varlen_attention",
        "v_uses_k_strides",
        "starts V's pointers with K's token and head strides (right whenever k and v share a layout)",
        [
            (
                "v_ptrs = v_ptr + (k_start + offs_n[:, None]) * stride_vt + kv_head * stride_vh",
                "v_ptrs = v_ptr + (k_start + offs_n[:, None]) * stride_kt + kv_head * stride_kh",
            )
        ],
        mistake_zh="用 K 的 token 与 head stride 计算 V 的指针（k、v 布局相同时才碰巧正确）",
    ),
    Mutant(
        "varlen_attention",
        "strided_cu_seqlens_read_as_contiguous",
        "hands strided cu_seqlens views to a kernel that reads ptr + b",
        [
            (
                "q, k, v, out, cu_seqlens_q.contiguous(), cu_seqlens_k.contiguous(),",
                "q, k, v, out, cu_seqlens_q, cu_seqlens_k,",
            )
        ],
        mistake_zh="把带 stride 的 cu_seqlens 直接交给按 ptr + b 读取的内核",
    ),
    Mutant(
        "varlen_attention",
        "token_offsets_int32",
        "computes (q_start + row) * stride_qt in int32, which wraps once q passes 2**31 elements",
        [
            ("q_start = tl.load(cu_seqlens_q_ptr + seq).to(tl.int64)", "q_start = tl.load(cu_seqlens_q_ptr + seq)"),
            (
                "stride_qt, stride_ot = tl.cast(stride_qt, tl.int64), tl.cast(stride_ot, tl.int64)",
                "stride_qt, stride_ot = stride_qt, stride_ot",
            ),
        ],
        mistake_zh="用 int32 计算 (q_start + row) * stride_qt，q 超过 2**31 个元素后溢出回绕",
        requires_compiled=True,
    ),
    Mutant(
        "pack_sequences",
        "int64_cu_seqlens",
        "builds cu_seqlens with torch's default integer type (int64)",
        [
            (
                "cu_seqlens = torch.zeros(len(seqs) + 1, dtype=torch.int32, device=first.device)",
                "cu_seqlens = torch.zeros(len(seqs) + 1, dtype=torch.int64, device=first.device)",
            )
        ],
        mistake_zh="用 torch 默认的整数类型（int64）构造 cu_seqlens",
    ),
    Mutant(
        "pack_sequences",
        "no_leading_zero",
        "returns the cumulative sums without the leading 0 (B entries)",
        [
            (
                "return torch.cat(seqs, dim=0), cu_seqlens, max(lengths)",
                "return torch.cat(seqs, dim=0), cu_seqlens[1:], max(lengths)",
            )
        ],
        mistake_zh="返回的累加和没有开头的 0（只有 B 项）",
    ),
    Mutant(
        "pack_sequences",
        "unpack_off_by_one",
        "unpacks with inclusive ends",
        [
            (
                "return [packed[a:b] for a, b in zip(bounds, bounds[1:])]",
                "return [packed[a:b + 1] for a, b in zip(bounds, bounds[1:])]",
            )
        ],
        mistake_zh="解包时把终点当作闭区间",
    ),
    Mutant(
        "pack_sequences",
        "no_shape_check",
        "packs whatever it is given",
        [
            (
                "if s.dim() != 3 or s.shape[1:] != first.shape[1:] or s.dtype != first.dtype or s.device != first.device:",
                "if s.dim() != 3:",
            )
        ],
        mistake_zh="给什么就打包什么，不检查形状",
    ),
]
