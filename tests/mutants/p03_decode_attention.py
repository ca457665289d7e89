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
