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
        mistake_zh="把相邻坐标配成一对（GPT-J / Meta 布局：2i 与 2i + 1），而不是 rotate-half（i 与 i + D/2）",
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
        mistake_zh="旋转方向反了：x1' = x1 cos + x2 sin，x2' = x2 cos - x1 sin",
    ),
    Mutant(
        "rope",
        "offsets_ignored",
        "uses the index in the sequence as the position: right for a prefill, wrong for every decode step",
        [("position = tl.load(offsets_ptr + batch).to(tl.int64) + seq", "position = seq")],
        mistake_zh="把序列内的下标当作位置：预填充时正确，每个解码步都错",
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
        mistake_zh="用 num_q_heads 给 k 的头加掩码（分块大小也按 q 取），越过 key 头写进了 v",
    ),
    Mutant(
        "rope",
        "no_column_mask",
        "masks only the heads: lanes past D/2 run into the second half and the next head when D/2 is not a power of 2",
        [("q_mask = (q_heads[:, None] < num_q_heads) & col_mask[None, :]", "q_mask = q_heads[:, None] < num_q_heads")],
        mistake_zh="只对头加了掩码：D/2 不是 2 的幂时，超过 D/2 的通道会跑进后半部分和下一个头",
    ),
    Mutant(
        "rope",
        "inverse_ignored",
        "always launches the forward rotation",
        [("INVERSE=inverse", "INVERSE=False")],
        mistake_zh="总是启动正向旋转",
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
        mistake_zh="反向再做一次同样的旋转，而不是它的逆（转置）",
    ),
    Mutant(
        "rotary_embedding",
        "forward_in_place",
        "rotates the caller's q and k in place instead of copies",
        [("return rope_(q.clone(), k.clone(), cos, sin, offsets)", "return rope_(q, k, cos, sin, offsets)")],
        mistake_zh="就地旋转调用方的 q 和 k，而不是旋转它们的副本",
    ),
    Mutant(
        "rotary_embedding",
        "too_few_gradients",
        "returns gradients for q and k only, not one per input of forward",
        [("return d_q, d_k, None, None, None", "return d_q, d_k")],
        mistake_zh="只返回 q 和 k 的梯度，而不是 forward 的每个输入各一个",
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
        mistake_zh="加载 cos 时没有列掩码，读越过了形状为 (positions, D/2) 的表的末尾",
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
        mistake_zh="加载 query 分块时只用了列掩码，读到了 num_q_heads 之外多余的头",
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
