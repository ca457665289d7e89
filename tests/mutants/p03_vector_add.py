"""Realistic wrong versions of the p03.vector_add solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "vector_add",
        "no_store_mask",
        "stores the whole last block, past the end of the output",
        [("tl.store(out_ptr + offsets, x + y, mask=mask)", "tl.store(out_ptr + offsets, x + y)")],
        mistake_zh="最后一个块整块存储，越过了输出的末尾",
    ),
    Mutant(
        "vector_add",
        "floor_grid",
        "launches n // BLOCK_SIZE programs, so the tail is never computed",
        [
            (
                'grid = lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)',
                'grid = lambda meta: (max(1, n // meta["BLOCK_SIZE"]),)',
            )
        ],
        mistake_zh="启动 n // BLOCK_SIZE 个程序，尾部从未被计算",
    ),
    Mutant(
        "vector_add",
        "offsets_without_program_id",
        "every program works on the first block",
        [("offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)", "offsets = tl.arange(0, BLOCK_SIZE)")],
        mistake_zh="每个程序都处理第一个块",
    ),
    Mutant(
        "vector_add",
        "no_shape_check",
        "launches on mismatched inputs",
        [("if x.shape != y.shape or x.dtype != y.dtype or x.device != y.device:", "if x.device != y.device:")],
        mistake_zh="输入形状不匹配也照样启动",
    ),
    Mutant(
        "matrix_add",
        "swapped_strides",
        "passes the strides of x in the wrong order",
        [("x.stride(0), x.stride(1), y.stride(0)", "x.stride(1), x.stride(0), y.stride(0)")],
        mistake_zh="x 的步长按错误的顺序传入",
    ),
    Mutant(
        "matrix_add",
        "assumes_contiguous",
        "addresses y as if it were row-major contiguous",
        [("y.stride(0), y.stride(1), out.stride(0)", "N, 1, out.stride(0)")],
        mistake_zh="按行主序连续的方式寻址 y",
    ),
    Mutant(
        "matrix_add",
        "rows_mask_only",
        "masks the rows but not the columns of a tile",
        [
            (
                "mask = (rows[:, None] < M) & (cols[None, :] < N)",
                "mask = (rows[:, None] < M) & (cols[None, :] < BLOCK_N)",
            )
        ],
        mistake_zh="只屏蔽了分块的行，没有屏蔽列",
    ),
    Mutant(
        "vector_add",
        "no_load_mask",
        "masks the store but loads x unmasked, reading past the end of x in the last block",
        [("x = tl.load(x_ptr + offsets, mask=mask, other=0.0)", "x = tl.load(x_ptr + offsets)")],
        mistake_zh="存储有掩码，加载 x 却没有，最后一块读到 x 的末尾之外",
    ),
    Mutant(
        "matrix_add",
        "no_load_mask",
        "masks the store but loads y unmasked, reading past both edges of y in the edge tiles",
        [
            (
                "y = tl.load(y_ptr + rows[:, None] * stride_ym + cols[None, :] * stride_yn, mask=mask, other=0.0)",
                "y = tl.load(y_ptr + rows[:, None] * stride_ym + cols[None, :] * stride_yn)",
            )
        ],
        mistake_zh="存储有掩码，加载 y 却没有，边缘分块读到 y 两个方向的边界之外",
    ),
    Mutant(
        "matrix_add",
        "load_masks_rows_only",
        "loads x with the row mask only, reading past the last column of x",
        [
            (
                "x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xn, mask=mask, other=0.0)",
                "x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xn, mask=rows[:, None] < M, other=0.0)",
            )
        ],
        mistake_zh="加载 x 时只有行掩码，读到 x 最后一列之外",
    ),
    Mutant(
        "vector_add",
        "adds_in_torch",
        "torch.add computes the result and no kernel runs",
        [("add_kernel[grid](x, y, out, n, BLOCK_SIZE=block_size)", "torch.add(x, y, out=out)")],
        mistake_zh="用 torch.add 计算结果，根本没有运行内核",
    ),
]
