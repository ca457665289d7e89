"""Realistic wrong versions of the p03.decode_attention solutions; every one must be rejected by a check (on the CPU
through Triton's interpreter)."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "decode_partials",
        "accumulator_not_rescaled",
        "rescales the running sum but not the accumulator when the running max grows",
        [("        acc = acc * alpha[:, None]\n", "")],
        mistake_zh="运行最大值变大时只重新缩放了运行和，没有缩放累加器",
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
        mistake_zh="每个切分都结束在缓存长度而不是 seq_lens[b]：读到了过期的槽位（NaN）",
    ),
    Mutant(
        "decode_partials",
        "split_overlaps_next",
        "a split runs one block past its end (keys counted by two splits)",
        [("end = tl.minimum(start + split_size, seq_len)", "end = tl.minimum(start + split_size + BLOCK_N, seq_len)")],
        mistake_zh="切分越过自己的终点多跑一个块（有些 key 被两个切分计入）",
    ),
    Mutant(
        "decode_partials",
        "gqa_interleaved_heads",
        "serves query heads kv_head, kv_head + H_kv, ... (h % H_kv) instead of the consecutive group",
        [("heads = kv_head * group + offs_g", "heads = kv_head + offs_g * num_kv_heads")],
        mistake_zh="服务的 query 头是 kv_head、kv_head + H_kv、……（h % H_kv），而不是连续的一组",
    ),
    Mutant(
        "decode_partials",
        "m_left_in_base_2",
        "stores the base-2 running max, so stage 2 weighs the splits with exp of the wrong scale",
        [("tl.store(m_ptr + rows, m_i * LN2, mask=head_ok)", "tl.store(m_ptr + rows, m_i, mask=head_ok)")],
        mistake_zh="存下的是以 2 为底的运行最大值，第二阶段用错误尺度的 exp 给各切分加权",
    ),
    Mutant(
        "decode_partials",
        "padded_keys_not_masked",
        "loads the last block masked but leaves the scores of the padded keys at 0 instead of -inf",
        [('        x = tl.where(key_ok[None, :], x, float("-inf"))\n', "")],
        mistake_zh="最后一个块带掩码加载，填充 key 的分数却留作 0 而不是 -inf",
    ),
    Mutant(
        "decode_partials",
        "no_length_refusal",
        "does not refuse seq_lens past the cache length (the kernel would read another sequence's slots)",
        [("if low < 1 or high > cache_len:", "if low < 1:")],
        mistake_zh="不拒绝超过缓存长度的 seq_lens（内核会读到别的序列的槽位）",
    ),
    Mutant(
        "combine_splits",
        "no_max_subtraction",
        "weighs splits by exp(m_s) without subtracting the max: overflows for large scores",
        [("m_max = tl.max(m, axis=0)", "m_max = tl.max(m, axis=0) * 0.0")],
        mistake_zh="按 exp(m_s) 给切分加权却不减最大值：分数大时溢出",
    ),
    Mutant(
        "combine_splits",
        "acc_not_weighted",
        "sums the accumulators without the weights w_s (only l is rescaled)",
        [("out = tl.sum(w[:, None] * acc, axis=0) / total", "out = tl.sum(acc, axis=0) / total")],
        mistake_zh="累加器求和时没有乘权重 w_s（只重新缩放了 l）",
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
        mistake_zh="对各切分归一化后的输出 acc/l 等权平均，而不是按它们的 softmax 质量加权",
    ),
    Mutant(
        "combine_splits",
        "lse_without_max",
        "returns log(sum w l) without adding the max back",
        [("tl.store(lse_ptr + row, m_max + tl.log(total))", "tl.store(lse_ptr + row, tl.log(total))")],
        mistake_zh="返回 log(sum w l)，没把最大值加回来",
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
        mistake_zh="只按占用率选择切分数，忽略最小切片长度",
    ),
    Mutant(
        "decode_partials",
        "num_splits_floor",
        "counts the splits with floor division: the keys of a last, partial slice belong to no program",
        [("num_splits = triton.cdiv(cache_len, split_size)", "num_splits = max(1, cache_len // split_size)")],
        mistake_zh="切分数用向下取整：最后那个不满的切片里的 key 不属于任何程序",
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
        mistake_zh="网格按 B 个程序计算（忘了 KV 头），于是切分得太多",
    ),
    Mutant(
        "decode_attention",
        "no_num_splits_refusal",
        "accepts num_splits = 0 (division by zero or an empty grid further down)",
        [("if num_splits is not None and num_splits < 1:", "if num_splits is not None and num_splits < 0:")],
        mistake_zh="接受 num_splits = 0（后面会除以零或得到空网格）",
    ),
]
