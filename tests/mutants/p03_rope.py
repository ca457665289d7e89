"""Realistic wrong versions of the p03.rope solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "rope",
        "interleaved_pairing",
        "pairs adjacent coordinates (GPT-J / Meta layout: 2i with 2i + 1) instead of rotate-half (i with i + D/2)",
        [
            (
                "q_heads[:, None] * q_head_stride + cols[None, :]",
                "q_heads[:, None] * q_head_stride + 2 * cols[None, :]",
            ),
            ("q2 = tl.load(q_first + half_dim,", "q2 = tl.load(q_first + 1,"),
            (
                "tl.store(q_first + half_dim, (q2 * cos + q1 * sin)",
                "tl.store(q_first + 1, (q2 * cos + q1 * sin)",
            ),
        ],
    ),
    Mutant(
        "rope",
        "sin_sign_swapped",
        "rotates the wrong way: x1' = x1 cos + x2 sin, x2' = x2 cos - x1 sin",
        [
            (
                "tl.store(q_first, (q1 * cos - q2 * sin).to(q_ptr.dtype.element_ty), mask=q_mask)",
                "tl.store(q_first, (q1 * cos + q2 * sin).to(q_ptr.dtype.element_ty), mask=q_mask)",
            ),
            (
                "tl.store(q_first + half_dim, (q2 * cos + q1 * sin)",
                "tl.store(q_first + half_dim, (q2 * cos - q1 * sin)",
            ),
        ],
    ),
    Mutant(
        "rope",
        "offsets_ignored",
        "uses the index in the sequence as the position: right for a prefill, wrong for every decode step",
        [("position = tl.load(offsets_ptr + batch).to(tl.int64) + seq", "position = seq")],
    ),
    Mutant(
        "rope",
        "k_masked_with_query_heads",
        "masks k's heads with num_q_heads (and sizes its tile like q's), writing past the key heads into v",
        [
            (
                "k_mask = (k_heads[:, None] < num_kv_heads) & col_mask[None, :]",
                "k_mask = (k_heads[:, None] < num_q_heads) & col_mask[None, :]",
            )
        ],
    ),
    Mutant(
        "rope",
        "no_column_mask",
        "masks only the heads: lanes past D/2 run into the second half and the next head when D/2 is not a power of 2",
        [("q_mask = (q_heads[:, None] < num_q_heads) & col_mask[None, :]", "q_mask = q_heads[:, None] < num_q_heads")],
    ),
    Mutant(
        "rope",
        "inverse_ignored",
        "always launches the forward rotation",
        [("INVERSE=inverse", "INVERSE=False")],
    ),
    Mutant(
        "rotary_embedding",
        "backward_rotates_forward",
        "the backward applies the same rotation again instead of its inverse (transpose)",
        [
            (
                "cos, sin, offsets, inverse=True)",
                "cos, sin, offsets)",
            )
        ],
    ),
    Mutant(
        "rotary_embedding",
        "forward_in_place",
        "rotates the caller's q and k in place instead of copies",
        [("return rope_(q.clone(), k.clone(), cos, sin, offsets)", "return rope_(q, k, cos, sin, offsets)")],
    ),
    Mutant(
        "rotary_embedding",
        "too_few_gradients",
        "returns gradients for q and k only, not one per input of forward",
        [("return d_q, d_k, None, None, None", "return d_q, d_k")],
    ),
    Mutant(
        "rope",
        "no_table_mask",
        "loads cos without the column mask, reading past the end of the (positions, D/2) table",
        [
            (
                "cos = tl.load(cos_ptr + position * table_row_stride + cols, mask=col_mask, other=0.0)",
                "cos = tl.load(cos_ptr + position * table_row_stride + cols)",
            )
        ],
    ),
    Mutant(
        "rope",
        "q_loads_masked_by_columns_only",
        "loads the query tile with the column mask only, reading the spare heads past num_q_heads",
        [
            (
                "q1 = tl.load(q_first, mask=q_mask, other=0.0)",
                "q1 = tl.load(q_first, mask=col_mask[None, :], other=0.0)",
            )
        ],
    ),
    Mutant(
        "rope",
        "k_uses_q_strides",
        "addresses k with q's batch, sequence and head strides (right whenever both are views of one fused QKV)",
        [
            (
                "k_first = k_ptr + batch * k_batch_stride + seq * k_seq_stride + k_heads[:, None] * k_head_stride",
                "k_first = k_ptr + batch * q_batch_stride + seq * q_seq_stride + k_heads[:, None] * q_head_stride",
            )
        ],
        mistake_zh="用 q 的 batch、序列与 head stride 寻址 k（两者同为一个融合 QKV 的视图时才碰巧正确）",
    ),
    Mutant(
        "rope",
        "strided_offsets_read_as_contiguous",
        "hands a strided offsets tensor to a kernel that reads offsets_ptr + b",
        [("q, k, cos, sin, offsets.contiguous(),", "q, k, cos, sin, offsets,")],
        mistake_zh="把带 stride 的 offsets 直接交给按 offsets_ptr + b 读取的内核",
    ),
]
