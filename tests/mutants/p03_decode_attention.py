"""Realistic wrong versions of the p03.decode_attention solutions; every one must be rejected by a check (on the CPU
through Triton's interpreter)."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "decode_partials",
        "accumulator_not_rescaled",
        "rescales the running sum but not the accumulator when the running max grows",
        [("        acc = acc * alpha[:, None]\n", "")],
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
    ),
    Mutant(
        "decode_partials",
        "split_overlaps_next",
        "a split runs one block past its end (keys counted by two splits)",
        [("end = tl.minimum(start + split_size, seq_len)", "end = tl.minimum(start + split_size + BLOCK_N, seq_len)")],
    ),
    Mutant(
        "decode_partials",
        "gqa_interleaved_heads",
        "serves query heads kv_head, kv_head + H_kv, ... (h % H_kv) instead of the consecutive group",
        [("heads = kv_head * group + offs_g", "heads = kv_head + offs_g * num_kv_heads")],
    ),
    Mutant(
        "decode_partials",
        "m_left_in_base_2",
        "stores the base-2 running max, so stage 2 weighs the splits with exp of the wrong scale",
        [("tl.store(m_ptr + rows, m_i * LN2, mask=head_ok)", "tl.store(m_ptr + rows, m_i, mask=head_ok)")],
    ),
    Mutant(
        "decode_partials",
        "padded_keys_not_masked",
        "loads the last block masked but leaves the scores of the padded keys at 0 instead of -inf",
        [('        x = tl.where(key_ok[None, :], x, float("-inf"))\n', "")],
    ),
    Mutant(
        "decode_partials",
        "no_length_refusal",
        "does not refuse seq_lens past the cache length (the kernel would read another sequence's slots)",
        [("if low < 1 or high > cache_len:", "if low < 1:")],
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
    ),
    Mutant(
        "combine_splits",
        "acc_not_weighted",
        "sums the accumulators without the weights w_s (only l is rescaled)",
        [("out = tl.sum(w[:, None] * acc, axis=0) / total", "out = tl.sum(acc, axis=0) / total")],
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
    ),
    Mutant(
        "combine_splits",
        "lse_without_max",
        "returns log(sum w l) without adding the max back",
        [("tl.store(lse_ptr + row, m_max + tl.log(total))", "tl.store(lse_ptr + row, tl.log(total))")],
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
    ),
    Mutant(
        "decode_partials",
        "num_splits_floor",
        "counts the splits with floor division: the keys of a last, partial slice belong to no program",
        [("num_splits = triton.cdiv(cache_len, split_size)", "num_splits = max(1, cache_len // split_size)")],
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
    ),
    Mutant(
        "decode_attention",
        "occupancy_counts_query_heads_wrong",
        "counts the grid as B programs (forgets the KV heads), so it splits far too much",
        [("while batch * num_kv_heads * num_splits <", "while batch * num_splits <")],
    ),
    Mutant(
        "decode_attention",
        "no_num_splits_refusal",
        "accepts num_splits = 0 (division by zero or an empty grid further down)",
        [("if num_splits is not None and num_splits < 1:", "if num_splits is not None and num_splits < 0:")],
    ),
]
