"""Realistic wrong versions of the p03.matmul solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "grouped_tile",
        "group_height_not_clamped",
        "uses GROUP_M as the height of every group, so the short last group points past the grid",
        [
            (
                "group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)",
                "group_size_m = GROUP_M",
            )
        ],
        mistake_zh="每个组的高度都用 GROUP_M，较短的最后一组指到了网格之外",
    ),
    Mutant(
        "grouped_tile",
        "row_major_inside_group",
        "walks a group row by row (pid_n fastest), which is plain row-major order overall",
        [
            (
                "pid_m = first_pid_m + pid_in_group % group_size_m\n    pid_n = pid_in_group // group_size_m",
                "pid_m = first_pid_m + pid_in_group // num_pid_n\n    pid_n = pid_in_group % num_pid_n",
            )
        ],
        mistake_zh="组内按行遍历（pid_n 变化最快），整体上就是普通的行主序",
    ),
    Mutant(
        "grouped_tile",
        "modulo_by_group_m",
        "clamps the height but still wraps the row at GROUP_M",
        [("pid_m = first_pid_m + pid_in_group % group_size_m", "pid_m = first_pid_m + pid_in_group % GROUP_M")],
        mistake_zh="截断了高度，行号却仍按 GROUP_M 回绕",
    ),
    Mutant(
        "matmul",
        "no_k_mask",
        "loads without the K mask, so the last K step sums what lies past K",
        [
            (
                "a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)",
                "a = tl.load(a_ptrs)",
            ),
            (
                "b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)",
                "b = tl.load(b_ptrs)",
            ),
        ],
        mistake_zh="加载时没有 K 掩码，最后一个 K 步把 K 之外的内容也加了进去",
    ),
    Mutant(
        "matmul",
        "no_store_mask",
        "stores the whole tile, past the edges of C",
        [
            (
                "tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))",
                "tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty))",
            )
        ],
        mistake_zh="存储整个分块，越过了 C 的边界",
    ),
    Mutant(
        "matmul",
        "assumes_contiguous",
        "builds A's pointers as if A were contiguous (row stride K, column stride 1)",
        [
            (
                "a_ptrs = a_ptr + rows_a[:, None] * stride_am + offs_k[None, :] * stride_ak",
                "a_ptrs = a_ptr + rows_a[:, None] * K + offs_k[None, :]",
            ),
            ("a_ptrs += BLOCK_K * stride_ak", "a_ptrs += BLOCK_K"),
        ],
        mistake_zh="按连续的 A 构造指针（行步长 K，列步长 1）",
    ),
    Mutant(
        "matmul",
        "advance_without_stride",
        "advances B's pointers by BLOCK_K elements instead of BLOCK_K rows",
        [("b_ptrs += BLOCK_K * stride_bk", "b_ptrs += BLOCK_K")],
        mistake_zh="B 的指针前进 BLOCK_K 个元素，而不是 BLOCK_K 行",
    ),
    Mutant(
        "matmul",
        "fp16_accumulator",
        "accumulates in the input dtype instead of float32",
        [
            (
                "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
                "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=a_ptr.dtype.element_ty)",
            )
        ],
        mistake_zh="在输入的数据类型而不是 float32 下累加",
    ),
    Mutant(
        "matmul",
        "floor_grid",
        "launches M // BLOCK_M * N // BLOCK_N programs, dropping the ragged edge tiles",
        [
            (
                'grid = lambda META: (triton.cdiv(M, META["BLOCK_M"]) * triton.cdiv(N, META["BLOCK_N"]),)',
                'grid = lambda META: (max(1, M // META["BLOCK_M"]) * max(1, N // META["BLOCK_N"]),)',
            )
        ],
        mistake_zh="启动 M // BLOCK_M * N // BLOCK_N 个程序，丢了边缘不整齐的分块",
    ),
    Mutant(
        "matmul",
        "rows_not_wrapped",
        "indexes A's rows with offs_m unwrapped (no % M, no mask): the last row tile reads past the end of A",
        [("rows_a = offs_m % M", "rows_a = offs_m")],
        mistake_zh="A 的行用未取模的 offs_m 索引（没有 % M，也没有掩码）：最后一个行分块读到 A 的末尾之外",
    ),
    Mutant(
        "matmul",
        "cols_not_wrapped",
        "indexes B's columns with offs_n unwrapped (no % N, no mask): the last column tile reads past B's columns",
        [("cols_b = offs_n % N", "cols_b = offs_n")],
        mistake_zh="B 的列用未取模的 offs_n 索引（没有 % N，也没有掩码）：最后一个列分块读到 B 的列之外",
    ),
    Mutant(
        "matmul",
        "guard_counts_elements",
        "guards the element count of each operand instead of the largest offset its strides reach",
        [
            (
                "reach = max(largest_offset(a), largest_offset(b), a.shape[0] * b.shape[1] - 1)",
                "reach = max(a.numel(), b.numel(), a.shape[0] * b.shape[1])",
            )
        ],
        mistake_zh="检查的是每个操作数的元素个数，而不是它的步长能达到的最大偏移",
    ),
    Mutant(
        "matmul",
        "offset_from_sizes",
        "multiplies each stride by the size, not size - 1 (one row too far: refuses what fits, and is wrong)",
        [
            (
                "return sum(stride * (size - 1) for size, stride in zip(t.shape, t.stride()))",
                "return sum(stride * size for size, stride in zip(t.shape, t.stride()))",
            )
        ],
        mistake_zh="每个步长乘以尺寸而不是尺寸 - 1（多了一行：拒绝放得下的，而且算错了）",
    ),
    Mutant(
        "matmul",
        "offset_is_numel",
        "takes numel - 1 as the largest offset, as if every view were contiguous",
        [
            (
                "return sum(stride * (size - 1) for size, stride in zip(t.shape, t.stride()))",
                "return t.numel() - 1",
            )
        ],
        mistake_zh="取 numel - 1 作为最大偏移，好像每个视图都是连续的",
    ),
    Mutant(
        "matmul",
        "tuning_key_blind_to_layout",
        "tunes on M, N, K only: x @ w and x @ w.T of one shape share the first layout's winner",
        [('key=["M", "N", "K", "stride_ak", "stride_bk"]', 'key=["M", "N", "K"]')],
        mistake_zh="只按 M、N、K 调优：同一形状的 x @ w 和 x @ w.T 共用第一种布局的最优配置",
    ),
    Mutant(
        "matmul",
        "calls_the_builtin",
        "returns torch.matmul's product instead of the kernel's",
        [
            (
                'INPUT_PRECISION="tf32" if allow_tf32 else "ieee",\n    )\n    return c',
                'INPUT_PRECISION="tf32" if allow_tf32 else "ieee",\n    )\n    return torch.matmul(a, b)',
            )
        ],
        mistake_zh="返回 torch.matmul 的乘积而不是内核的",
    ),
]
