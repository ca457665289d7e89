"""Realistic wrong versions of the p03.decode_attention solutions; every one must be rejected by a check (on the CPU
through Triton's interpreter)."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "decode_partials",
        "accumulator_not_rescaled",
        "rescales the running sum but not the accumulator when the running max grows",
        [("        acc = acc * alpha[:, None]\n", "")],
        mistake_zh="累计最大值变大时只重新缩放了累计和，没有缩放累加器",
    ),
    Mutant(
        "decode_partials",
        "reads_to_cache_end",
        "ends every split at the cache length instead of seq_lens[b]: stale slots (NaN) are read",
        [
            (
                "end = tl.minimum(start + split_size, seq_len)",
                "end = tl.minimum(start + split_size, stride_kh // stride_kn)",
            )
        ],
        mistake_zh="每个切分都在缓存长度而不是 seq_lens[b] 处结束：读到了过期的槽位（NaN）",
    ),
    Mutant(
        "decode_partials",
        "split_overlaps_next",
        "a split runs one block past its end (keys counted by two splits)",
        [("end = tl.minimum(start + split_size, seq_len)", "end = tl.minimum(start + split_size + BLOCK_N, seq_len)")],
        mistake_zh="一个切分多跑了一个块（这些 key 被两个切分重复计算）",
    ),
    Mutant(
        "decode_partials",
        "gqa_interleaved_heads",
        "serves query heads kv_head, kv_head + H_kv, ... (h % H_kv) instead of the consecutive group",
        [("heads = kv_head * group + offs_g", "heads = kv_head + offs_g * num_kv_heads")],
        mistake_zh="负责的 query 头是 kv_head、kv_head + H_kv、……（h % H_kv），而不是连续的一组",
    ),
    Mutant(
        "decode_partials",
        "m_left_in_base_2",
        "stores the base-2 running max, so stage 2 weighs the splits with exp of the wrong scale",
        [("tl.store(m_ptr + rows, m_i * LN2, mask=head_ok)", "tl.store(m_ptr + rows, m_i, mask=head_ok)")],
        mistake_zh="存的是以 2 为底的累计最大值，于是第二阶段用错误尺度的 exp 给各切分加权",
    ),
    Mutant(
        "decode_partials",
        "padded_keys_not_masked",
        "loads the last block masked but leaves the scores of the padded keys at 0 instead of -inf",
        [('        x = tl.where(key_ok[None, :], x, float("-inf"))\n', "")],
        mistake_zh="最后一个块的 load 有掩码，但填充 key 的分数留作 0 而不是 -inf",
    ),
    Mutant(
        "decode_partials",
        "no_length_refusal",
        "does not refuse seq_lens past the cache length (the kernel would read another sequence's slots)",
        [("if low < 1 or high > cache_len:", "if low < 1:")],
        mistake_zh="不拒绝超过缓存长度的 seq_lens（内核会读到另一个序列的槽位）",
    ),
    Mutant(
        "decode_partials",
        "v_uses_k_strides",
        "addresses V with K's strides (right whenever the two caches share a layout)",
        [
            (
                "v_ptrs = v_ptr + batch * stride_vb + kv_head * stride_vh + offs_n[:, None] * stride_vn",
                "v_ptrs = v_ptr + batch * stride_kb + kv_head * stride_kh + offs_n[:, None] * stride_kn",
            ),
            ("v = tl.load(v_ptrs + n * stride_vn,", "v = tl.load(v_ptrs + n * stride_kn,"),
        ],
        mistake_zh="用 K 的 stride 寻址 V（两个缓存布局相同时才碰巧正确）",
    ),
    Mutant(
        "decode_partials",
        "q_as_contiguous",
        "addresses q as if it were contiguous (b * H_q * d + h * d), not through its own strides",
        [
            (
                "q_ptrs = q_ptr + batch * stride_qb + heads[:, None] * stride_qh + offs_d[None, :]",
                "q_ptrs = q_ptr + batch * num_heads * HEAD_DIM + heads[:, None] * HEAD_DIM + offs_d[None, :]",
            )
        ],
        mistake_zh="把 q 当作连续张量寻址（b * H_q * d + h * d），没有用它自己的 stride",
    ),
    Mutant(
        "decode_partials",
        "strided_seq_lens_read_as_contiguous",
        "hands a strided seq_lens to a kernel that reads seq_lens_ptr + b (another element's length, or a stray read)",
        [("seq_lens = seq_lens.contiguous()", "seq_lens = seq_lens")],
        mistake_zh="把带 stride 的 seq_lens 直接交给按 seq_lens_ptr + b 读取的内核（读到别的元素或越界）",
    ),
    Mutant(
        "decode_partials",
        "batch_offset_int32",
        "keeps the batch index in int32, so batch * stride_kb wraps once a cache passes 2**31 elements",
        [("batch = tl.program_id(1).to(tl.int64)", "batch = tl.program_id(1)")],
        mistake_zh="batch 下标保持 int32，缓存超过 2**31 个元素后 batch * stride_kb 溢出回绕",
        requires_compiled=True,
    ),
    Mutant(
        "combine_splits",
        "accepts_strided_states",
        "accepts non-contiguous m, l and acc, which the kernel addresses as contiguous (r * n_splits + s)",
        [("t.dtype != torch.float32 or not t.is_contiguous()", "t.dtype != torch.float32")],
        mistake_zh="接受非连续的 m、l、acc，而内核按连续布局（r * n_splits + s）寻址",
    ),
    Mutant(
        "combine_splits",
        "no_max_subtraction",
        "weighs splits by exp(m_s) without subtracting the max: overflows for large scores",
        [("m_max = tl.max(m, axis=0)", "m_max = tl.max(m, axis=0) * 0.0")],
        mistake_zh="用 exp(m_s) 给切分加权而没有减去最大值：分数较大时溢出",
    ),
    Mutant(
        "combine_splits",
        "acc_not_weighted",
        "sums the accumulators without the weights w_s (only l is rescaled)",
        [("out = tl.sum(w[:, None] * acc, axis=0) / total", "out = tl.sum(acc, axis=0) / total")],
        mistake_zh="累加器求和时没有乘权重 w_s（只有 l 被重新缩放）",
    ),
    Mutant(
        "combine_splits",
        "mean_of_normalised_outputs",
        "averages the splits' normalised outputs acc/l equally instead of weighting them by their softmax mass",
        [
            (
                "out = tl.sum(w[:, None] * acc, axis=0) / total",
                "out = tl.sum(tl.where(l[:, None] > 0, acc / l[:, None], 0.0), axis=0) / tl.sum((l > 0).to(tl.float32))",
            )
        ],
        mistake_zh="对各切分归一化后的输出 acc/l 等权平均，而不是按各自的 softmax 质量加权",
    ),
    Mutant(
        "combine_splits",
        "lse_without_max",
        "returns log(sum w l) without adding the max back",
        [("tl.store(lse_ptr + row, m_max + tl.log(total))", "tl.store(lse_ptr + row, tl.log(total))")],
        mistake_zh="返回 log(sum w l)，没有把最大值加回去",
    ),
    Mutant(
        "combine_splits",
        "out_written_contiguous",
        "ignores out's strides and writes row r at r * d",
        [
            (
                "tl.store(out_ptr + batch * stride_ob + head * stride_oh + offs_d",
                "tl.store(out_ptr + row * HEAD_DIM + offs_d",
            )
        ],
        mistake_zh="忽略 out 的步长，把第 r 行写在 r * d 处",
    ),
    Mutant(
        "decode_attention",
        "no_min_slice",
        "picks splits for occupancy only, ignoring the minimum slice length",
        [
            (
                "while batch * num_kv_heads * num_splits < waves * num_sms and -(-cache_len // (2 * num_splits)) >= min_keys:",
                "while batch * num_kv_heads * num_splits < waves * num_sms:",
            )
        ],
        mistake_zh="只按占用率选择切分数，忽略了最小切片长度",
    ),
    Mutant(
        "decode_partials",
        "num_splits_floor",
        "counts the splits with floor division: the keys of a last, partial slice belong to no program",
        [("num_splits = triton.cdiv(cache_len, split_size)", "num_splits = max(1, cache_len // split_size)")],
        mistake_zh="用向下取整的除法计算切分数：最后一个不完整切片的 key 不属于任何程序实例",
    ),
    Mutant(
        "decode_attention",
        "scale_dropped",
        "the wrapper does not pass sm_scale on, so an explicit scale is ignored",
        [
            (
                "decode_partials(q, k_cache, v_cache, seq_lens, split_size, sm_scale, block_n, validate=False)",
                "decode_partials(q, k_cache, v_cache, seq_lens, split_size, None, block_n, validate=False)",
            )
        ],
        mistake_zh="包装函数没有把 sm_scale 传下去，显式给出的缩放被忽略",
    ),
    Mutant(
        "decode_attention",
        "occupancy_counts_query_heads_wrong",
        "counts the grid as B programs (forgets the KV heads), so it splits far too much",
        [("while batch * num_kv_heads * num_splits <", "while batch * num_splits <")],
        mistake_zh="把 grid 算成 B 个程序实例（忘了 KV 头），于是切分得太多",
    ),
    Mutant(
        "decode_attention",
        "no_num_splits_refusal",
        "accepts num_splits = 0 (division by zero or an empty grid further down)",
        [("if num_splits is not None and num_splits < 1:", "if num_splits is not None and num_splits < 0:")],
        mistake_zh="接受 num_splits = 0（后面会除以零或得到空 grid）",
    ),
]
