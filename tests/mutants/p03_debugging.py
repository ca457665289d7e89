"""Realistic wrong versions of the p03.debugging solutions; every one must be rejected by a check (on the CPU)."""

from llm_algo.mutation import Mutant

MUTANTS = [
    # row_max
    Mutant(
        "row_max",
        "mask_off_by_one",
        "masks the tail with cols <= N: column N (the next row, or a guard) is read",
        [("mask=cols < N,", "mask=cols <= N,")],
        mistake_zh="用 cols <= N 屏蔽尾部：读到了第 N 列（下一行或保护区）",
    ),
    Mutant(
        "row_max",
        "zero_fill",
        "fills masked lanes with 0 and starts the accumulator at 0: all-negative rows give 0",
        [
            ('other=float("-inf"))', "other=0.0)"),
            ('tl.full((BLOCK_N,), float("-inf"), dtype=tl.float32)', "tl.zeros((BLOCK_N,), dtype=tl.float32)"),
        ],
        mistake_zh="被屏蔽的通道填 0，累加器也从 0 开始：全为负数的行得到 0",
    ),
    Mutant(
        "row_max",
        "accumulator_starts_at_zero",
        "the masked fill is right but the accumulator starts at 0",
        [('tl.full((BLOCK_N,), float("-inf"), dtype=tl.float32)', "tl.zeros((BLOCK_N,), dtype=tl.float32)")],
        mistake_zh="屏蔽的填充值对了，累加器却从 0 开始",
    ),
    Mutant(
        "row_max",
        "ignores_column_stride",
        "assumes contiguous rows (column stride 1)",
        [("row * stride_xm + cols * stride_xn", "row * stride_xm + cols")],
        mistake_zh="假定各行连续（列步长为 1）",
    ),
    Mutant(
        "row_max",
        "full_blocks_only",
        "loops over whole blocks only, so the remainder of a row is never read",
        [("for start in range(0, N, BLOCK_N):", "for start in range(0, N - N % BLOCK_N, BLOCK_N):")],
        mistake_zh="只循环完整的块，一行的剩余部分从未被读取",
    ),
    # histogram
    Mutant(
        "histogram",
        "load_add_store",
        "counts with a plain load + store instead of an atomic: collisions in a block are lost",
        [
            (
                "tl.atomic_add(hist_ptr + bins, 1, mask=counted)",
                "tl.store(hist_ptr + bins, tl.load(hist_ptr + bins, mask=counted) + 1, mask=counted)",
            )
        ],
        mistake_zh="用普通的 load + store 而不是原子操作计数：同一块内的冲突丢失了",
    ),
    Mutant(
        "histogram",
        "tail_lanes_counted",
        "checks the value range but not the tail mask: the other=0 fill is counted in bin 0",
        [
            (
                "counted = in_bounds & (bins >= 0) & (bins < num_bins)",
                "counted = (bins >= 0) & (bins < num_bins)",
            )
        ],
        mistake_zh="检查了取值范围却没检查尾部掩码：other=0 的填充被计入第 0 个桶",
    ),
    Mutant(
        "histogram",
        "no_range_check",
        "trusts the values: out-of-range values write outside the histogram",
        [("counted = in_bounds & (bins >= 0) & (bins < num_bins)", "counted = in_bounds")],
        mistake_zh="信任输入值：越界的值写到直方图之外",
    ),
    # embedding
    Mutant(
        "embedding",
        "row_stride_is_d",
        "assumes the table's row stride is D (wrong for views of a wider or transposed weight)",
        [("table_ptr + row * stride_tv + cols * stride_td", "table_ptr + row * D + cols * stride_td")],
        mistake_zh="假定表的行步长为 D（对更宽的或转置的权重的视图是错的）",
    ),
    Mutant(
        "embedding",
        "unmasked_store",
        "masks the load but not the store of the last column block",
        [
            (
                "tl.store(out_ptr + token * stride_om + cols, values, mask=mask)",
                "tl.store(out_ptr + token * stride_om + cols, values)",
            )
        ],
        mistake_zh="加载有掩码，最后一个列块的存储却没有",
    ),
    Mutant(
        "embedding",
        "no_id_check",
        "trusts the token ids: out-of-range ids read other memory",
        [
            (
                "if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= V):",
                "if ids.numel() and int(ids.min()) < -10**9:",
            )
        ],
        mistake_zh="信任 token id：越界的 id 读到别的内存",
    ),
    Mutant(
        "histogram",
        "values_loaded_unmasked",
        "loads the values without the tail mask, reading past the end of x in the last block",
        [("bins = tl.load(x_ptr + offsets, mask=in_bounds, other=0)", "bins = tl.load(x_ptr + offsets)")],
        mistake_zh="加载值时没有尾部掩码，最后一块读到 x 的末尾之外",
    ),
    Mutant(
        "embedding",
        "table_load_unmasked",
        "loads the table row without the column mask (only the store is masked), reading past the row's D columns",
        [
            (
                "values = tl.load(table_ptr + row * stride_tv + cols * stride_td, mask=mask, other=0.0)",
                "values = tl.load(table_ptr + row * stride_tv + cols * stride_td)",
            )
        ],
        mistake_zh="加载表的一行时没有列掩码（只有存储有掩码），读到这一行 D 列之外",
    ),
    Mutant(
        "row_max",
        "calls_the_builtin",
        "torch.amax computes the maxima and no kernel runs",
        [("row_max_kernel[(M,)](x, out, N, x.stride(0), x.stride(1), BLOCK_N=block_n)", "out = x.amax(dim=1)")],
        mistake_zh="用 torch.amax 计算最大值，根本没有运行内核",
    ),
]
