"""Realistic wrong versions of the p04.shared_memory solutions; every one must be rejected by a check.

The mutants of `sgemm_cuda` are C++ that still compiles (only its meaning is broken), so that on a GPU they are
rejected by a check and not by nvcc; on a CPU their checks read *needs a GPU*."""

from llm_algo.mutation import Mutant

MUTANTS = [
    # tiled_matmul_sim
    Mutant(
        "tiled_matmul_sim",
        "no_barrier_after_load",
        "reads the shared tiles before every thread has written its element (no syncthreads after the loads)",
        [("        cuda.syncthreads()  # the tiles are complete\n", "")],
        mistake_zh="在每个线程写完自己的元素之前就读共享分块（加载之后没有 syncthreads）",
    ),
    Mutant(
        "tiled_matmul_sim",
        "no_barrier_after_compute",
        "loads the next tile while slower threads still read the current one (no syncthreads after the FMAs)",
        [("        cuda.syncthreads()  # everyone has read them before the next tile overwrites them\n", "")],
        mistake_zh="较慢的线程还在读当前分块时就加载下一个（FMA 之后没有 syncthreads）",
    ),
    Mutant(
        "tiled_matmul_sim",
        "no_k_bound_on_loads",
        "loads A and B without the K bound: the last partial tile reads past the end of a row of A",
        [
            (
                "As[ty, tx] = A[row, ka] if (row < M and ka < K) else np.float32(0.0)",
                "As[ty, tx] = A[row, ka] if row < M else np.float32(0.0)",
            ),
            (
                "Bs[ty, tx] = B[kb, col] if (kb < K and col < N) else np.float32(0.0)",
                "Bs[ty, tx] = B[kb, col] if col < N else np.float32(0.0)",
            ),
        ],
        mistake_zh="加载 A 和 B 时没有 K 边界：最后那个不满的分块读到 A 一行的末尾之外",
    ),
    Mutant(
        "tiled_matmul_sim",
        "naive_global_reads",
        "multiplies straight from global memory (the tiles are loaded but never used): correct, TILE times the reads",
        [
            (
                "acc += As[ty, j] * Bs[j, tx]",
                "acc += (A[row, k0 + j] * B[k0 + j, col]) if (row < M and col < N and k0 + j < K) else 0.0",
            )
        ],
        mistake_zh="直接从全局内存相乘（分块加载了却从不用）：结果正确，读取量是 TILE 倍",
    ),
    Mutant(
        "tiled_matmul_sim",
        "grid_xy_swapped",
        "launches (row tiles, column tiles): x and y swapped, the tiles of a non-square C are missed",
        [
            (
                "grid = ((N + TILE - 1) // TILE, (M + TILE - 1) // TILE)",
                "grid = ((M + TILE - 1) // TILE, (N + TILE - 1) // TILE)",
            )
        ],
        mistake_zh="按（行分块数, 列分块数）启动：x 和 y 对调了，非方阵 C 的分块被漏掉",
    ),
    Mutant(
        "tiled_matmul_sim",
        "b_tile_transposed",
        "reads Bs[tx, j] instead of Bs[j, tx]: multiplies by the transposed tile",
        [("acc += As[ty, j] * Bs[j, tx]", "acc += As[ty, j] * Bs[tx, j]")],
        mistake_zh="读 Bs[tx, j] 而不是 Bs[j, tx]：乘的是转置后的分块",
    ),
    Mutant(
        "tiled_matmul_sim",
        "floor_grid",
        "launches floor(N / TILE) x floor(M / TILE) blocks: the edge tiles are never computed",
        [
            (
                "grid = ((N + TILE - 1) // TILE, (M + TILE - 1) // TILE)",
                "grid = (max(1, N // TILE), max(1, M // TILE))",
            )
        ],
        mistake_zh="启动 floor(N / TILE) x floor(M / TILE) 个线程块：边缘分块从未被计算",
    ),
    # bank_conflicts
    Mutant(
        "bank_conflicts",
        "counts_lanes_not_words",
        "counts lanes per bank instead of distinct words: no broadcast, 32 lanes reading one float are 32 wavefronts",
        [
            (
                "words_in_bank.setdefault(word % NUM_BANKS, set()).add(word)",
                "words_in_bank.setdefault(word % NUM_BANKS, set()).add((lane, word))",
            )
        ],
        mistake_zh="按每个 bank 上的 lane 数而不是不同字数计数：没有广播，32 个 lane 读同一个 float 算成 32 个 wavefront",
    ),
    Mutant(
        "bank_conflicts",
        "byte_address_as_bank",
        "takes the bank from the byte address (address % 32) instead of the word address",
        [("words_in_bank.setdefault(word % NUM_BANKS", "words_in_bank.setdefault(int(address) % NUM_BANKS")],
        mistake_zh="用字节地址（address % 32）而不是字地址取 bank",
    ),
    Mutant(
        "bank_conflicts",
        "inactive_lane_is_address_zero",
        "treats an inactive lane as a read of address 0",
        [("            continue  # an inactive lane asks for nothing", "            address = 0")],
        mistake_zh="把不活跃的 lane 当作读地址 0",
    ),
    Mutant(
        "bank_conflicts",
        "bandwidth_estimate",
        "estimates wavefronts as ceil(distinct words / 32) (bandwidth) instead of the busiest bank",
        [
            (
                "return max((len(words) for words in words_in_bank.values()), default=0)",
                "return -(-sum(len(words) for words in words_in_bank.values()) // NUM_BANKS)",
            )
        ],
        mistake_zh="wavefront 数估计为 ceil(不同字数 / 32)（带宽），而不是最忙的 bank",
    ),
    # sgemm_cuda (C++; each still compiles)
    Mutant(
        "sgemm_cuda",
        "tiled_no_second_barrier",
        "no __syncthreads() after the multiply-adds: a fast warp overwrites the tiles a slow warp is still reading",
        [("        __syncthreads();  // everyone has read them before the next tile overwrites them\n", "")],
        mistake_zh="乘加之后没有 __syncthreads()：快的 warp 覆盖了慢的 warp 还在读的分块",
    ),
    Mutant(
        "sgemm_cuda",
        "tiled_no_k_bound",
        "loads A without the K bound: reads past the end of a row (the next row's values, or past the buffer)",
        [
            (
                "As[ty][tx] = (row < M && k0 + tx < K) ? A[static_cast<int64_t>(row) * K + k0 + tx] : 0.0f;",
                "As[ty][tx] = (row < M) ? A[static_cast<int64_t>(row) * K + k0 + tx] : 0.0f;",
            )
        ],
        mistake_zh="加载 A 时没有 K 边界：读到一行的末尾之外（下一行的值，或缓冲区之外）",
    ),
    Mutant(
        "sgemm_cuda",
        "fragment_rows_contiguous",
        "reads the A fragment from contiguous rows trow * 8 + i while storing to the strided rows trow + 16 i",
        [
            (
                "for (int i = 0; i < TM; ++i) a_frag[i] = As[k][trow + TROWS * i];",
                "for (int i = 0; i < TM; ++i) a_frag[i] = As[k][trow * TM + i];",
            )
        ],
        mistake_zh="从连续的行 trow * 8 + i 读 A 片段，存储时却写到带步长的行 trow + 16 i",
    ),
    Mutant(
        "sgemm_cuda",
        "sgemm_no_column_guard",
        "stores without the column bound: the last block column writes past N into the next row",
        [
            (
                "if (gm < M && gn < N) C[static_cast<int64_t>(gm) * N + gn] = acc[i][j];",
                "if (gm < M) C[static_cast<int64_t>(gm) * N + gn] = acc[i][j];",
            )
        ],
        mistake_zh="存储时没有列边界：最后一个列线程块写过 N，进入下一行",
    ),
    Mutant(
        "sgemm_cuda",
        "sgemm_b_tile_no_k_bound",
        "loads the B tile without the K bound: the last tile reads rows past the end of B",
        [
            (
                "Bs[k][n] = (gk < K && gn < N) ? B[static_cast<int64_t>(gk) * N + gn] : 0.0f;",
                "Bs[k][n] = (gn < N) ? B[static_cast<int64_t>(gk) * N + gn] : 0.0f;",
            )
        ],
        mistake_zh="加载 B 分块时没有 K 边界：最后一个分块读到 B 末尾之外的行",
    ),
    Mutant(
        "sgemm_cuda",
        "no_contiguity_check",
        "no contiguity check: a transposed A is read as if it were row-major",
        [
            (
                "TORCH_CHECK(A.is_contiguous() && B.is_contiguous() && out.is_contiguous(), who,\n"
                '                ": A, B and out must be contiguous (row-major; call .contiguous() first)");',
                "",
            )
        ],
        mistake_zh="不检查连续性：转置的 A 被当作行主序的来读",
    ),
]
