"""Realistic wrong versions of the p04.tensor_cores solutions; every one must be rejected by a check.

The mutants of `wmma_gemm_cuda` are C++ that still compiles (only its meaning is broken), so that on a GPU they are
rejected by a check and not by nvcc; on a CPU their checks read *needs a GPU*."""

from llm_algo.mutation import Mutant

MUTANTS = [
    # mma_tiled
    Mutant(
        "mma_tiled",
        "rounds_once_at_the_end",
        "keeps the running sum in float64 and rounds to acc_dtype only at the end: an exact accumulator, no swamping",
        [
            ("acc = torch.zeros(M, N, dtype=acc_dtype)  # (M, N)", "acc = torch.zeros(M, N, dtype=torch.float64)"),
            ("acc = (acc.double() + tile).to(acc_dtype)  # one rounding per K step", "acc = acc + tile"),
            ("return acc", "return acc.to(acc_dtype)"),
        ],
        mistake_zh="运行和保存在 float64 里，最后才舍入到 acc_dtype：累加器是精确的，没有大数吃小数",
    ),
    Mutant(
        "mma_tiled",
        "products_rounded_to_accumulator",
        "rounds every product to acc_dtype before summing the tile: a tensor core keeps the products exact",
        [
            (
                "tile = (a[:, :, None] * b[None, :, :]).sum(dim=1)  # (M, N): exact tile products",
                "tile = (a[:, :, None] * b[None, :, :]).to(acc_dtype).sum(dim=1).double()",
            )
        ],
        mistake_zh="先把每个乘积舍入到 acc_dtype 再对分块求和：张量核心会保留精确的乘积",
    ),
    Mutant(
        "mma_tiled",
        "always_fp32_accumulator",
        "accumulates in float32 whatever acc_dtype says and casts the result at the end",
        [
            (
                "acc = (acc.double() + tile).to(acc_dtype)  # one rounding per K step",
                "acc = (acc.double() + tile).float()",
            ),
            ("return acc", "return acc.to(acc_dtype)"),
        ],
        mistake_zh="不管 acc_dtype 是什么都在 float32 下累加，最后再转换结果",
    ),
    Mutant(
        "mma_tiled",
        "calls_the_builtin",
        "forms the tile product with @ (the matmul the exercise refuses)",
        [("tile = (a[:, :, None] * b[None, :, :]).sum(dim=1)  # (M, N): exact tile products", "tile = a @ b")],
        mistake_zh="用 @ 计算分块乘积（练习拒绝使用的矩阵乘）",
    ),
    # mma_fragments
    Mutant(
        "mma_fragments",
        "right_before_down",
        "orders A's registers right half first: a2 a3 move right 8 columns and a4 a5 down 8 rows",
        [
            ("row = group + 8 * ((i // 2) % 2)", "row = group + 8 * (i // 4)"),
            ("col = 2 * thread + (i & 1) + 8 * (i // 4)", "col = 2 * thread + (i & 1) + 8 * ((i // 2) % 2)"),
        ],
        mistake_zh="A 的寄存器先排右半部分：a2 a3 右移 8 列，a4 a5 下移 8 行",
    ),
    Mutant(
        "mma_fragments",
        "group_and_thread_swapped",
        "takes groupID = lane % 4 and threadID_in_group = lane >> 2",
        [("group, thread = lane >> 2, lane % 4", "group, thread = lane % 4, lane >> 2")],
        mistake_zh="取 groupID = lane % 4，threadID_in_group = lane >> 2",
    ),
    Mutant(
        "mma_fragments",
        "b_row_major_like_a",
        "lays B out like C (row from groupID, column pairs from threadID_in_group) instead of pairs along k",
        [
            ("row = 2 * thread + (i & 1) + 8 * (i // 2)  # b2 b3: k + 8", "row = group + 8 * (i // 2)"),
            ("col = group\n", "col = 2 * thread + (i & 1)\n"),
        ],
        mistake_zh="B 的布局照搬 C（行来自 groupID，列对来自 threadID_in_group），而不是沿 k 成对",
    ),
    Mutant(
        "mma_fragments",
        "accumulator_columns_not_paired",
        "gives the accumulator's lanes single columns (t + (i & 1)) instead of the pair 2t, 2t + 1",
        [("col = 2 * thread + (i & 1)\n", "col = thread + (i & 1)\n")],
        mistake_zh="给累加器的 lane 单独的列（t + (i & 1)），而不是列对 2t, 2t + 1",
    ),
    Mutant(
        "mma_fragments",
        "forgets_c",
        "computes D = A B and drops the accumulator input C",
        [
            (
                "D = ((A[:, :, None] * B[None, :, :]).sum(dim=1) + C).float()",
                "D = (A[:, :, None] * B[None, :, :]).sum(dim=1).float()",
            )
        ],
        mistake_zh="计算 D = A B，丢了累加器输入 C",
    ),
    Mutant(
        "mma_fragments",
        "d_in_input_dtype",
        "rounds D to the inputs' dtype (fp16/bf16) instead of the fp32 accumulator",
        [
            (
                "D = ((A[:, :, None] * B[None, :, :]).sum(dim=1) + C).float()",
                "D = ((A[:, :, None] * B[None, :, :]).sum(dim=1) + C).to(a_regs.dtype).float()",
            )
        ],
        mistake_zh="把 D 舍入到输入的数据类型（fp16/bf16），而不是 fp32 累加器",
    ),
    # wmma_gemm_cuda (C++; each still compiles)
    Mutant(
        "wmma_gemm_cuda",
        "half_accumulator",
        "accumulates fp16 inputs in an fp16 accumulator fragment (the fp16-accumulate pitfall)",
        [("wmma_gemm_launch<__half, float>(A, B, out);", "wmma_gemm_launch<__half, __half>(A, B, out);")],
        mistake_zh="fp16 输入用 fp16 的累加器片段累加（fp16 累加的陷阱）",
    ),
    Mutant(
        "wmma_gemm_cuda",
        "a_copy_without_k_bound",
        "copies A's tile without the K bound: past K a row runs into the next row (and the last one past the end)",
        [("if (gr < M && gc < K) value =", "if (gr < M) value =")],
        mistake_zh="拷贝 A 的分块时没有 K 边界：超过 K 的部分跑进下一行（最后一行越过末尾）",
    ),
    Mutant(
        "wmma_gemm_cuda",
        "b_copy_without_k_bound",
        "copies B's tile without the K bound: rows past K are read from beyond B",
        [("if (gr < K && gc < N) value =", "if (gc < N) value =")],
        mistake_zh="拷贝 B 的分块时没有 K 边界：从 B 之外读取超过 K 的行",
    ),
    Mutant(
        "wmma_gemm_cuda",
        "b_fragment_col_major",
        "loads the B fragments as col_major: each 16 x 16 tile of B is used transposed",
        [
            (
                "wmma::fragment<wmma::matrix_b, FRAG, FRAG, FRAG, In, wmma::row_major> b_frag[FN];",
                "wmma::fragment<wmma::matrix_b, FRAG, FRAG, FRAG, In, wmma::col_major> b_frag[FN];",
            )
        ],
        mistake_zh="按 col_major 加载 B 的片段：B 的每个 16 x 16 分块被转置使用",
    ),
    Mutant(
        "wmma_gemm_cuda",
        "stores_every_fragment",
        "stores every fragment of the block tile, also those past M or N: writes outside C",
        [("if (row0 < M && col0 < N) {  // M, N multiples of 16: the fragment is wholly inside", "{")],
        mistake_zh="存储线程块分块的每个片段，包括超过 M 或 N 的：写到 C 之外",
    ),
    Mutant(
        "wmma_gemm_cuda",
        "no_multiple_of_16_check",
        "accepts M, N, K that are not multiples of 16: the fragments then run past the matrices",
        [
            (
                "TORCH_CHECK(M % 16 == 0 && N % 16 == 0 && K % 16 == 0,",
                "TORCH_CHECK(M >= 0,",
            )
        ],
        mistake_zh="接受不是 16 倍数的 M、N、K：片段随后越过矩阵",
    ),
]
