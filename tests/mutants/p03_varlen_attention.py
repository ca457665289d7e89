"""Realistic wrong versions of the p03.varlen_attention solutions; every one must be rejected by a check (on the CPU
through Triton's interpreter)."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "varlen_attention",
        "top_left_causal",
        "aligns the causal mask to the top-left corner (j <= i), as SDPA's is_causal does",
        [("offset = seq_len_k - seq_len_q  ", "offset = 0  ")],
        mistake_zh="像 SDPA 的 is_causal 那样把因果掩码对齐到左上角（j <= i）",
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
        mistake_zh="key 循环的终点按偏移移动了，掩码里却只拿行号与 key 比较",
    ),
    Mutant(
        "varlen_attention",
        "loop_end_without_offset",
        "ends the causal key loop at the tile's last row, forgetting the offset of a prefill chunk",
        [("end = tl.minimum(start_m + BLOCK_M + offset, seq_len_k)", "end = tl.minimum(start_m + BLOCK_M, seq_len_k)")],
        mistake_zh="因果 key 循环结束在分块的最后一行，忘了预填充块的偏移",
    ),
    Mutant(
        "varlen_attention",
        "keys_at_query_start",
        "reads the sequence's key start from cu_seqlens_q",
        [("k_start = tl.load(cu_seqlens_k_ptr + seq)", "k_start = tl.load(cu_seqlens_q_ptr + seq)")],
        mistake_zh="从 cu_seqlens_q 读取序列的 key 起点",
    ),
    Mutant(
        "varlen_attention",
        "gqa_modulo",
        "maps query head h to KV head h % H_kv instead of h // (H / H_kv)",
        [("kv_head = head // (num_heads // num_kv_heads)", "kv_head = head % num_kv_heads")],
        mistake_zh="query 头 h 映射到 KV 头 h % H_kv 而不是 h // (H / H_kv)",
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
        mistake_zh="存储整个分块：超出序列末尾的行落进了下一个序列（或缓冲区之外）",
    ),
    Mutant(
        "varlen_attention",
        "no_cu_seqlens_validation",
        "trusts cu_seqlens: a wrong last entry or a decreasing one goes to the kernel",
        [("if cu[0] != 0 or cu[-1] != total or min(lens) < 0:", "if False:")],
        mistake_zh="信任 cu_seqlens：最后一项错误或递减的也交给内核",
    ),
    Mutant(
        "varlen_attention",
        "no_causal_length_check",
        "accepts S_q > S_k under a causal mask, leaving query rows with no visible key",
        [("if causal and sq > sk:", "if False:")],
        mistake_zh="因果掩码下接受 S_q > S_k，有的 query 行看不到任何 key",
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
        mistake_zh="逐个序列运行 SDPA，而不是内核",
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
        mistake_zh="cu_seqlens 用 torch 默认的整数类型（int64）构造",
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
        mistake_zh="返回的累计和没有开头的 0（B 项）",
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
        mistake_zh="解包时终点包含在内",
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
        mistake_zh="给什么就打包什么",
    ),
]
