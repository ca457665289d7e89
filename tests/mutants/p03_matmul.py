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
    ),
    Mutant(
        "grouped_tile",
        "modulo_by_group_m",
        "clamps the height but still wraps the row at GROUP_M",
        [("pid_m = first_pid_m + pid_in_group % group_size_m", "pid_m = first_pid_m + pid_in_group % GROUP_M")],
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
    ),
    Mutant(
        "matmul",
        "advance_without_stride",
        "advances B's pointers by BLOCK_K elements instead of BLOCK_K rows",
        [("b_ptrs += BLOCK_K * stride_bk", "b_ptrs += BLOCK_K")],
    ),
    Mutant(
        "matmul",
        "b_advanced_with_a_stride",
        "advances B's pointers along K with A's K stride (a copy of the line above)",
        [("b_ptrs += BLOCK_K * stride_bk", "b_ptrs += BLOCK_K * stride_ak")],
        mistake_zh="沿 K 方向推进 B 的指针时用了 A 的 K 步长（照抄了上一行）",
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
    ),
    Mutant(
        "matmul",
        "rows_not_wrapped",
        "indexes A's rows with offs_m unwrapped (no % M, no mask): the last row tile reads past the end of A",
        [("rows_a = offs_m % M", "rows_a = offs_m")],
    ),
    Mutant(
        "matmul",
        "cols_not_wrapped",
        "indexes B's columns with offs_n unwrapped (no % N, no mask): the last column tile reads past B's columns",
        [("cols_b = offs_n % N", "cols_b = offs_n")],
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
    ),
    Mutant(
        "matmul",
        "tuning_key_blind_to_layout",
        "tunes on M, N, K only: x @ w and x @ w.T of one shape share the first layout's winner",
        [('key=["M", "N", "K", "stride_ak", "stride_bk"]', 'key=["M", "N", "K"]')],
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
    ),
]
