"""Realistic wrong versions of the p03.softmax solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "softmax",
        "no_max_subtraction",
        "exponentiates the raw logits: inf / inf = nan for large logits",
        [("x = x - tl.max(x, axis=0)                                         # every entry <= 0", "")],
    ),
    Mutant(
        "softmax",
        "pads_with_zero",
        "pads masked lanes with 0, which then adds exp(0 - max) per lane to the sum",
        [('mask=mask, other=float("-inf")).to(tl.float32)', "mask=mask, other=0.0).to(tl.float32)")],
    ),
    Mutant(
        "softmax",
        "no_store_mask",
        "stores the whole block, past the end of the row",
        [("probabilities.to(out_ptr.dtype.element_ty), mask=mask)", "probabilities.to(out_ptr.dtype.element_ty))")],
    ),
    Mutant(
        "softmax",
        "rows_by_n_cols",
        "addresses rows as row * n_cols, assuming contiguous rows",
        [("in_ptr + row * in_row_stride + cols", "in_ptr + row * n_cols + cols")],
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
    ),
    Mutant(
        "online_softmax_stats",
        "no_inf_guard",
        "subtracts the raw max, so an all -inf prefix gives nan",
        [('m_safe = torch.where(m_new == float("-inf"), torch.zeros_like(m_new), m_new)', "m_safe = m_new")],
    ),
    Mutant(
        "online_softmax_stats",
        "rescale_wrong_way",
        "multiplies by exp(m_new - m_old) instead of exp(m_old - m_new)",
        [("d = d * torch.exp(m - m_safe)", "d = d * torch.exp(torch.nan_to_num(m_safe - m, posinf=0.0))")],
    ),
    Mutant(
        "softmax_long_rows",
        "no_rescale",
        "the per-lane sum is not rescaled when the lane's max grows",
        [("d = d * tl.exp(m - m_safe) + tl.exp(x - m_safe)", "d = d + tl.exp(x - m_safe)")],
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
    ),
    Mutant(
        "softmax_long_rows",
        "lanes_merged_without_rescale",
        "sums the per-lane sums without bringing them to the row max",
        [("row_sum = tl.sum(d * tl.exp(m - row_max_safe), axis=0)", "row_sum = tl.sum(d, axis=0)")],
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
