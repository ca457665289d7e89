"""Realistic wrong versions of the p03.softmax solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "softmax",
        "no_max_subtraction",
        "exponentiates the raw logits: inf / inf = nan for large logits",
        [("x = x - tl.max(x, axis=0)                                         # every entry <= 0", "")],
        mistake_zh="直接对原始 logits 求指数：logits 较大时 inf / inf = nan",
    ),
    Mutant(
        "softmax",
        "pads_with_zero",
        "pads masked lanes with 0, which then adds exp(0 - max) per lane to the sum",
        [('mask=mask, other=float("-inf")).to(tl.float32)', "mask=mask, other=0.0).to(tl.float32)")],
        mistake_zh="被掩盖的通道填 0，于是每个通道都给和加上了 exp(0 - max)",
    ),
    Mutant(
        "softmax",
        "no_store_mask",
        "stores the whole block, past the end of the row",
        [("probabilities.to(out_ptr.dtype.element_ty), mask=mask)", "probabilities.to(out_ptr.dtype.element_ty))")],
        mistake_zh="存储整个块，写越过了行尾",
    ),
    Mutant(
        "softmax",
        "rows_by_n_cols",
        "addresses rows as row * n_cols, assuming contiguous rows",
        [("in_ptr + row * in_row_stride + cols", "in_ptr + row * n_cols + cols")],
        mistake_zh="用 row * n_cols 寻址各行，假定各行连续",
    ),
    Mutant(
        "online_softmax_stats",
        "no_rescale",
        "adds the new block without rescaling the old sum to the new max",
        [
            (
                "d = d * torch.exp(m - m_safe) + torch.exp(block - m_safe[:, None]).sum(dim=1)",
                "d = d + torch.exp(block - m_safe[:, None]).sum(dim=1)",
            )
        ],
        mistake_zh="加入新块时没有把旧的和重新缩放到新的最大值",
    ),
    Mutant(
        "online_softmax_stats",
        "no_inf_guard",
        "subtracts the raw max, so an all -inf prefix gives nan",
        [('m_safe = torch.where(m_new == float("-inf"), torch.zeros_like(m_new), m_new)', "m_safe = m_new")],
        mistake_zh="直接减去原始最大值，于是全为 -inf 的前缀得到 nan",
    ),
    Mutant(
        "online_softmax_stats",
        "rescale_wrong_way",
        "multiplies by exp(m_new - m_old) instead of exp(m_old - m_new)",
        [("d = d * torch.exp(m - m_safe)", "d = d * torch.exp(torch.nan_to_num(m_safe - m, posinf=0.0))")],
        mistake_zh="乘以 exp(m_new - m_old) 而不是 exp(m_old - m_new)",
    ),
    Mutant(
        "softmax_long_rows",
        "no_rescale",
        "the per-lane sum is not rescaled when the lane's max grows",
        [("d = d * tl.exp(m - m_safe) + tl.exp(x - m_safe)", "d = d + tl.exp(x - m_safe)")],
        mistake_zh="某个 lane 的最大值变大时，没有重新缩放该 lane 的和",
    ),
    Mutant(
        "softmax_long_rows",
        "pads_with_zero_pass_one",
        "pads the tail with 0 in the first pass",
        [
            (
                'x = tl.load(in_row + start + cols, mask=mask, other=float("-inf")).to(tl.float32)\n        m_new',
                "x = tl.load(in_row + start + cols, mask=mask, other=0.0).to(tl.float32)\n        m_new",
            )
        ],
        mistake_zh="第一遍中尾部用 0 填充",
    ),
    Mutant(
        "softmax_long_rows",
        "lanes_merged_without_rescale",
        "sums the per-lane sums without bringing them to the row max",
        [("row_sum = tl.sum(d * tl.exp(m - row_max_safe), axis=0)", "row_sum = tl.sum(d, axis=0)")],
        mistake_zh="直接把各 lane 的和相加，没有先对齐到整行的最大值",
    ),
    Mutant(
        "softmax_long_rows",
        "no_store_mask",
        "stores whole blocks in the second pass",
        [
            (
                "(tl.exp(x - row_max) / row_sum).to(out_ptr.dtype.element_ty), mask=mask)",
                "(tl.exp(x - row_max) / row_sum).to(out_ptr.dtype.element_ty))",
            )
        ],
        mistake_zh="第二遍按整个块存储，没有掩码",
    ),
    Mutant(
        "softmax",
        "no_load_mask",
        "loads the whole block unmasked (only the store is masked), reading past the end of the row",
        [
            (
                'x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=float("-inf"))',
                "x = tl.load(in_ptr + row * in_row_stride + cols)",
            )
        ],
        mistake_zh="加载整个块时没有掩码（只有 store 有掩码），读越过了行尾",
    ),
    Mutant(
        "softmax_long_rows",
        "second_pass_load_unmasked",
        "reloads the last block unmasked in the second pass, since its store is masked anyway",
        [
            (
                'x = tl.load(in_row + start + cols, mask=mask, other=float("-inf")).to(tl.float32)\n        tl.store(',
                "x = tl.load(in_row + start + cols).to(tl.float32)\n        tl.store(",
            )
        ],
        mistake_zh="第二遍重新加载最后一个块时没有掩码，理由是反正它的 store 有掩码",
    ),
    Mutant(
        "softmax",
        "calls_the_builtin",
        "torch.softmax computes the rows and no kernel runs",
        [
            (
                "softmax_kernel[(n_rows,)](out, x, x.stride(0), out.stride(0), n_cols, BLOCK_SIZE=block_size, num_warps=num_warps)",
                "out.copy_(torch.softmax(x.float(), dim=-1))",
            )
        ],
        mistake_zh="用 torch.softmax 计算各行，根本没有运行内核",
    ),
    Mutant(
        "softmax",
        "row_index_int32",
        "keeps the row index in int32, so row * stride wraps once x passes 2**31 elements",
        [("row = tl.program_id(axis=0).to(tl.int64)", "row = tl.program_id(axis=0)")],
        mistake_zh="行号保持 int32，x 超过 2**31 个元素后 row * stride 溢出回绕",
        requires_compiled=True,
    ),
]
