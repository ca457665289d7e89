"""Realistic wrong versions of the p03.debugging solutions; every one must be rejected by a check (on the CPU)."""

from llm_algo.mutation import Mutant

MUTANTS = [
    # row_max
    Mutant(
        "row_max",
        "mask_off_by_one",
        "masks the tail with cols <= N: column N (the next row, or a guard) is read",
        [("mask=cols < N,", "mask=cols <= N,")],
        mistake_zh="尾部掩码写成 cols <= N：读到了第 N 列（下一行或保护区）",
    ),
    Mutant(
        "row_max",
        "zero_fill",
        "fills masked lanes with 0 and starts the accumulator at 0: all-negative rows give 0",
        [
            ('other=float("-inf"))', "other=0.0)"),
            ('tl.full((BLOCK_N,), float("-inf"), dtype=tl.float32)', "tl.zeros((BLOCK_N,), dtype=tl.float32)"),
        ],
        mistake_zh="被掩盖的通道填 0，累加器也从 0 开始：全为负数的行得到 0",
    ),
    Mutant(
        "row_max",
        "accumulator_starts_at_zero",
        "the masked fill is right but the accumulator starts at 0",
        [('tl.full((BLOCK_N,), float("-inf"), dtype=tl.float32)', "tl.zeros((BLOCK_N,), dtype=tl.float32)")],
        mistake_zh="掩码的填充值是对的，但累加器从 0 开始",
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
        mistake_zh="只循环完整的块，于是一行剩余的部分从未被读取",
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
        mistake_zh="用普通的 load + store 而不是原子操作计数：同一个块内落进同一个桶的多个值相互覆盖，计数丢失",
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
        mistake_zh="检查了数值范围却没有尾部掩码：other=0 的填充值被计入第 0 个桶",
    ),
    Mutant(
        "histogram",
        "no_range_check",
        "trusts the values: out-of-range values write outside the histogram",
        [("counted = in_bounds & (bins >= 0) & (bins < num_bins)", "counted = in_bounds")],
        mistake_zh="不校验数值：超出范围的值写到了直方图之外",
    ),
    # embedding
    Mutant(
        "embedding",
        "row_stride_is_d",
        "assumes the table's row stride is D (wrong for views of a wider or transposed weight)",
        [("table_ptr + row * stride_tv + cols * stride_td", "table_ptr + row * D + cols * stride_td")],
        mistake_zh="假定嵌入表的行步长是 D（对更宽或转置的权重的视图是错的）",
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
        mistake_zh="对最后一个列块的 load 加了掩码，store 却没有",
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
        mistake_zh="不校验 token id：越界的 id 读到了其他内存",
    ),
    Mutant(
        "histogram",
        "values_loaded_unmasked",
        "loads the values without the tail mask, reading past the end of x in the last block",
        [("bins = tl.load(x_ptr + offsets, mask=in_bounds, other=0)", "bins = tl.load(x_ptr + offsets)")],
        mistake_zh="加载数值时没有尾部掩码，最后一个块读越过了 x 的末尾",
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
        mistake_zh="加载嵌入表的行时没有列掩码（只有 store 有掩码），读越过了该行的 D 列",
    ),
    Mutant(
        "row_max",
        "calls_the_builtin",
        "torch.amax computes the maxima and no kernel runs",
        [("row_max_kernel[(M,)](x, out, N, x.stride(0), x.stride(1), BLOCK_N=block_n)", "out = x.amax(dim=1)")],
        mistake_zh="用 torch.amax 计算最大值，根本没有运行内核",
    ),
    Mutant(
        "embedding",
        "ids_assumed_contiguous",
        "hands strided ids to the kernel, which reads ids_ptr + token (unit stride)",
        [("ids = ids.contiguous()", "pass")],
        mistake_zh="把带步长的 ids 直接交给按单位步长读取 ids_ptr + token 的 kernel",
    ),
]
