"""Source of 03_Triton_Kernels/07_MatMul.ipynb (build with `python -m llm_algo build p03.matmul`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p03.matmul",
        path="03_Triton_Kernels/07_MatMul.ipynb",
        title_en="Tiled matrix multiplication in Triton",
        title_zh="Triton 分块矩阵乘法",
        difficulty="hard",
        device="cpu",
        minutes=120,
        prerequisites=["p03.vector_add", "p03.softmax"],
        triton=True,
    )
    lesson.title(
        intro=r"""
        Almost every FLOP an LLM spends is in a matrix multiplication (GEMM, 通用矩阵乘法): the Q/K/V and output
        projections, the MLP's up, gate and down projections, the LM head. A Llama-3-8B forward pass over 4096 tokens
        is about $2 \cdot 8 \cdot 10^9 \cdot 4096 \approx 65$ TFLOP, nearly all of it in `x @ W`. On an H200 the tensor
        cores deliver roughly 990 dense bf16 TFLOP/s while HBM delivers about 4.8 TB/s, so a GEMM is only fast if it
        does about 200 FLOPs for every byte it reads from HBM. This lesson is about how a kernel gets there: tiles that
        reuse every loaded element many times, a program order that lets the L2 cache serve the rest, and an autotuner
        that picks the tile sizes.

        **You will implement** the grouped program ordering (program id → output tile) as a small `@triton.jit`
        function, and a tiled GEMM kernel with a K loop, masks for any M, N, K, float32 accumulation, strides (so
        transposed operands need no copy), fp16/bf16/fp32 inputs, and autotuned tile sizes. **Graded against**
        `torch.matmul` in float64, a loop specification of the tile order, and guard bytes around the output.
        """,
    )
    lesson.md(r"""
        ## 本节要点

        - **问题**：LLM 几乎所有 FLOP 都在 GEMM（QKV/输出投影、MLP、LM head）；H200 上 bf16 tensor core 约 990 TFLOP/s、HBM 约 4.8 TB/s，GEMM 每读 1 字节需做约 200 FLOP 才能跑满算力。
        - **形状**：$C = AB$，$A \in \mathbb{R}^{M\times K}$，$B \in \mathbb{R}^{K\times N}$，$C \in \mathbb{R}^{M\times N}$，共 $2MNK$ FLOP；每个 program 计算一个 `BLOCK_M x BLOCK_N` 的输出 tile，沿 K 每次前进 `BLOCK_K`。
        - **分组顺序（grouped ordering）**：program id 按 `GROUP_M` 行一组、组内列优先（pid_m 变化最快）映射到 tile，使同时运行的 program 共享 A、B 的块，由 L2 cache 提供复用；最后一组高度要截断为剩余行数。
        - **实现**：float32 累加器、按 stride 构造指针（转置的输入无需拷贝）、K 方向的 mask、越界行列用 `% M`/`% N` 回绕、store 用 mask；grid 用向上取整（cdiv），tile 大小由 autotune 选择，key 含 `stride_ak`、`stride_bk`（A、B 是否沿 K 连续）；int32 偏移的保护按最大偏移 $\sum_i \text{stride}_i(\text{size}_i-1)$ 判断，而不是元素个数。
        - **实测（H200，同一次运行）**：`128 x 256 x 64`、`GROUP_M = 16`、8 warps、3 stages 达到 cuBLAS 的 0.92x / 0.98x（fp16 4096³ / 8192³）和 1.01x / 0.94x（bf16）；目标 0.97x 在两个形状上达到、另两个差 3–5%。持久化（persistent）+ TMA 版本两胜两负；Hopper 上的 warp specialization 在 Triton 3.6 中尚不可用。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. What a GEMM costs, and why tiles

        $C = A B$ with $A \in \mathbb{R}^{M \times K}$, $B \in \mathbb{R}^{K \times N}$, $C \in \mathbb{R}^{M \times N}$:

        $$
        C_{ij} = \sum_{k=0}^{K-1} A_{ik} B_{kj}, \qquad \text{FLOPs} = 2MNK \ \ (\text{one multiply and one add per term}).
        $$

        The data is only $(MK + KN + MN)\,b$ bytes for $b$-byte elements: at $M = N = K = 8192$ in bf16 that is 384 MiB
        for 1.1 TFLOP, about 2700 FLOPs per byte. The arithmetic is there; the question is how many times each element
        is *re-read*. Computing one $C_{ij}$ at a time reads a row of $A$ and a column of $B$ per output — $2K$ loads for
        $2K$ FLOPs, one FLOP per element loaded, hopelessly memory-bound.

        **Tiling.** Let each program own a $B_M \times B_N$ tile of $C$ and walk along $K$ in steps of $B_K$: at every step
        it loads a $B_M \times B_K$ tile of $A$ and a $B_K \times B_N$ tile of $B$ into on-chip memory and multiplies them
        on the tensor cores (`tl.dot`), accumulating into a $B_M \times B_N$ float32 tile that never leaves registers:

        $$
        C_{[I, J]} = \sum_{s=0}^{\lceil K / B_K \rceil - 1} A_{[I,\ sB_K : (s+1)B_K]}\ B_{[sB_K : (s+1)B_K,\ J]},
        \qquad I = \text{rows of tile } i \ (B_M), \ J = \text{columns of tile } j \ (B_N).
        $$

        Per step a program loads $(B_M + B_N) B_K$ elements and does $2 B_M B_N B_K$ FLOPs, so its arithmetic
        intensity is $\frac{2 B_M B_N}{(B_M + B_N)\, b}$ FLOPs per byte: for a $128 \times 256$ tile in bf16, 85. That is
        below the ~200 the H200 needs from HBM, and the gap is closed by the L2 cache (50 MB on an H200): the same
        tile of $A$ is read by every program in its row of tiles, and if those programs run at about the same time,
        only the first read comes from HBM. Which programs run together is decided by the **program order**.

        ```
        C tiles (num_pid_m = 4 rows of tiles, num_pid_n = 3 columns)          K loop of program (i, j):
           j=0  j=1  j=2                                                       for s in range(cdiv(K, BLOCK_K)):
        i=0  .    .    .     each program: one BLOCK_M x BLOCK_N tile of C         a = A[i-tile rows, s-th K slice]  (BLOCK_M, BLOCK_K)
        i=1  .    .    .     reads a row of A-tiles and a column of B-tiles       b = B[s-th K slice, j-tile cols]  (BLOCK_K, BLOCK_N)
        i=2  .    .    .                                                           acc += a @ b   (float32, on chip)
        i=3  .    .    .                                                       store acc as C's dtype (masked)
        ```

        ## 2. Program order and the L2 cache

        A 1-D grid launches programs `pid = 0, 1, 2, ...`, and the GPU runs them roughly in that order, a *wave* of about
        as many programs as fit on its 132 SMs at a time. The obvious mapping is row-major, `pid_m = pid // num_pid_n`,
        `pid_n = pid % num_pid_n`: a wave then covers one or two rows of tiles, so it needs one or two tiles of $A$ — but
        *every* column of $B$, and $B$ tiles are re-fetched wave after wave.

        **Grouped ordering** (分组排序) walks the tiles in groups of `GROUP_M` rows, column by column inside a group:

        ```
        row-major (GROUP_M = 1)          grouped, GROUP_M = 2 (num_pid_m = 5: the last group has 1 row)
             j=0  j=1  j=2                    j=0  j=1  j=2
        i=0    0    1    2               i=0    0    2    4      group 0: pids 0-5
        i=1    3    4    5               i=1    1    3    5
        i=2    6    7    8               i=2    6    8   10      group 1: pids 6-11
        i=3    9   10   11               i=3    7    9   11
        i=4   12   13   14               i=4   12   13   14      group 2: only num_pid_m - 4 = 1 row
        ```

        Take $W$ consecutive programs. Row-major, they touch $\lceil W / n_N \rceil$ rows of $A$-tiles and up to $n_N$
        columns of $B$-tiles; grouped, about `GROUP_M` rows of $A$ and $W / \text{GROUP\_M}$ columns of $B$: for a wave of
        64 programs in a $64 \times 64$ grid of tiles, $8 + 8 = 16$ distinct tiles with `GROUP_M = 8` instead of
        $1 + 64 = 65$ row-major (a square block of tiles is the best shape).
        The formula, with $n_M$ = `num_pid_m`, $n_N$ = `num_pid_n`, $G$ = `GROUP_M`:

        $$
        g = \left\lfloor \frac{\text{pid}}{G\, n_N} \right\rfloor, \quad
        m_0 = g\,G, \quad
        G' = \min(n_M - m_0,\ G), \quad
        r = \text{pid} \bmod G\, n_N, \quad
        \text{pid\_m} = m_0 + (r \bmod G'), \quad
        \text{pid\_n} = \lfloor r / G' \rfloor .
        $$

        $G'$ is the height of *this* group: the last one is shorter when $G$ does not divide $n_M$, and using $G$ there
        sends programs to rows that do not exist while leaving real tiles uncomputed.
    """)
    lesson.setup(r"""
        import matplotlib.pyplot as plt
        import torch
        import triton
        import triton.language as tl
    """)
    lesson.md(r"""
        ## 3. Exercise `grouped_tile`: program id → tile

        Write the mapping as a `@triton.jit` function that the GEMM kernel will call. It must work elementwise on a
        *block* of program ids too (the check calls it on `tl.arange` of all of them at once), so use `tl.minimum`, not
        Python's `min`, and only integer arithmetic (`//`, `%`).
    """)
    lesson.exercise(
        "grouped_tile",
        r'''
        @triton.jit
        def grouped_tile(pid, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
            """(pid_m, pid_n) of the output tile that program `pid` computes, in grouped order.

            pid: int32 scalar or block of program ids in [0, num_pid_m * num_pid_n)
            num_pid_m, num_pid_n: the number of tiles along M and along N
            GROUP_M: rows of tiles per group; the last group may be shorter
            returns (pid_m, pid_n), same shape as pid
            """
            # TODO: which group this pid is in, and the first tile row of that group
            # TODO: the height of this group (the last one can be shorter than GROUP_M)
            # TODO: column-major inside the group: the row moves fastest
            ### BEGIN SOLUTION
            num_pid_in_group = GROUP_M * num_pid_n
            group_id = pid // num_pid_in_group
            first_pid_m = group_id * GROUP_M
            group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)
            pid_in_group = pid % num_pid_in_group
            pid_m = first_pid_m + pid_in_group % group_size_m
            pid_n = pid_in_group // group_size_m
            ### END SOLUTION
            return pid_m, pid_n
        ''',
    )
    lesson.md(r"""
        ### What the order buys, counted

        The cell below simulates the schedule in plain Python: it takes the programs in launch order, a wave of 132
        (one per SM) at a time, and counts the distinct $A$- and $B$-tiles each wave needs — an upper bound on what it
        must fetch from HBM if nothing survives in L2 between waves. The left panel colours each tile of a
        $16 \times 16$ grid by its wave, row-major and grouped.
    """)
    lesson.code(r"""
        def tile_order(num_pid_m, num_pid_n, group_m):
            # The same formula in Python, for the picture (your kernel uses grouped_tile).
            order = []
            for pid in range(num_pid_m * num_pid_n):
                group, r = divmod(pid, group_m * num_pid_n)
                height = min(num_pid_m - group * group_m, group_m)
                order.append((group * group_m + r % height, r // height))
            return order


        def tiles_per_wave(order, wave):
            loads = []
            for start in range(0, len(order), wave):
                block = order[start : start + wave]
                loads.append(len({m for m, _ in block}) + len({n for _, n in block}))
            return sum(loads) / len(loads)


        fig, axes = plt.subplots(1, 3, figsize=(11, 3.2))
        for axis, group_m, name in ((axes[0], 1, "row-major"), (axes[1], 8, "grouped, GROUP_M=8")):
            waves = torch.zeros(16, 16)
            for pid, (m, n) in enumerate(tile_order(16, 16, group_m)):
                waves[m, n] = pid // 32
            axis.imshow(waves, cmap="tab10"); axis.set_title(f"{name}: wave of 32 programs")
            axis.set_xlabel("pid_n"); axis.set_ylabel("pid_m")
        grid = 64  # a 8192 x 8192 output in 128 x 128 tiles
        group_sizes = [1, 2, 4, 8, 16, 32, 64]
        axes[2].plot(group_sizes, [tiles_per_wave(tile_order(grid, grid, g), 132) for g in group_sizes], "o-")
        axes[2].set_xscale("log", base=2); axes[2].set_xlabel("GROUP_M"); axes[2].set_ylabel("distinct tiles per wave")
        axes[2].set_title("64 x 64 tiles, waves of 132")
        fig.tight_layout(); plt.show()
    """)
    lesson.md(r"""
        Row-major, a wave of 132 programs spans two rows of tiles and all 64 columns: about 65 distinct tiles. With
        `GROUP_M` = 8 or 16 it is a near-square block, about 26. `GROUP_M = 2` is no better than row-major (two rows,
        still every column), and `GROUP_M = 64` is plain column-major order, which only swaps the roles of $A$ and $B$.
        Which tiles actually stay in L2 also depends on tile sizes and the cache, but the count is the first-order effect.

        ## 4. Exercise `matmul`: the tiled kernel

        The kernel, for one program:

        1. `pid_m, pid_n = grouped_tile(...)`; the row offsets `offs_m` ($B_M$), column offsets `offs_n` ($B_N$) and
           `offs_k = tl.arange(0, BLOCK_K)`.
        2. Pointer tiles from the **strides**: `a_ptrs[i, k] = a_ptr + rows_a[i] * stride_am + offs_k[k] * stride_ak`,
           `(BLOCK_M, BLOCK_K)`, and likewise `b_ptrs` `(BLOCK_K, BLOCK_N)`. For `a = x.T`, `stride_am = 1` and
           `stride_ak = M`: the same kernel reads a transposed operand with no copy (this is how `F.linear`'s
           `x @ W.T` works: `W` is stored `(N, K)`).
        3. The K loop: load both tiles masked along $k$ (`offs_k < K - step * BLOCK_K`) with `other=0.0` — zeros are the
           identity of the sum, so a ragged last K step adds nothing. `acc = tl.dot(a, b, acc,
           input_precision=INPUT_PRECISION)`, then advance both pointer tiles by `BLOCK_K` *times the K stride*.
        4. Cast `acc` to the output dtype once, and store masked on both edges.

        **Ragged M and N: wrap instead of mask.** The last tile row hangs over the edge of $A$. Rather than masking the
        loads, take the row index modulo $M$ (`rows_a = offs_m % M`, `cols_b = offs_n % N`): the overhanging rows
        re-read real rows of $A$, produce values in rows of the accumulator that the masked store then drops. Loads
        without an M/N mask stay simple vector loads, and the kernel never reads outside $A$. (Triton's own tutorial
        does the same.)

        The accumulator is float32 whatever the inputs: the tensor cores multiply fp16/bf16 pairs exactly and add in
        fp32. fp16 carries about 3 significant decimal digits; a running sum of 8192 products in fp16 rounds 8192 times,
        and once the sum is large each small product loses most of its bits in the addition.

        **fp32 inputs and TF32.** On NVIDIA GPUs since Ampere, `tl.dot` on float32 inputs uses **TF32** by default:
        the inputs are rounded to a 10-bit mantissa, several times faster, with errors around $10^{-3}$ relative — like
        `torch.backends.cuda.matmul.allow_tf32 = True`. When the caller asked for float32, pass
        `input_precision="ieee"`; the wrapper exposes the choice as `allow_tf32` (default off). (The interpreter
        computes in numpy and ignores the setting, so only a GPU shows the difference.)

        **Ragged K.** Extra rows and columns are harmless to *compute* (they are not stored), but $k$ past $K$ is not:
        without the K mask, the last step multiplies whatever lies after each row of $A$ — the next row, or another
        tensor — into the sum, and reads past the end of the last row.

        **Offsets.** They are int32 here, as in Triton's tutorial: every `rows * stride + cols * stride` must stay
        below $2^{31}$. What matters is the largest *address* an operand reaches, not how many elements it has: a view
        reaches element $\sum_i \text{stride}_i \cdot (\text{size}_i - 1)$ of its storage. The column slice
        `x[:, :64]` of a `(65536, 65536)` fp16 activation has only $2^{22}$ elements, but its last one sits at offset
        $65535 \cdot 65536 + 63 \approx 2^{32}$: a guard on `numel()` lets it through and the kernel reads someone
        else's memory. So write `largest_offset(t)`, and `check_int32_offsets(a, b)` that refuses an operand (or an output)
        whose largest offset is $2^{31}$ or more; the wrapper calls it before launching (casting the offsets to int64 lifts the limit at some cost in address arithmetic, as
        `p03.softmax` and the attention kernels do with their row and head indices).

        **Autotuning.** The best tile sizes depend on the GPU, the shape and the dtype. `triton.autotune` takes a list
        of `triton.Config`s, times each the first time it sees a new `key` (here `M, N, K`; the argument dtypes are
        added automatically), and caches the winner. The grid must then be a function of the chosen meta-parameters:
        `grid = lambda META: (triton.cdiv(M, META["BLOCK_M"]) * triton.cdiv(N, META["BLOCK_N"]),)`. The key must
        also see the **layout**: `matmul(x, w.T)` (B read along K, as `F.linear` does) and `matmul(x, w)` at the same
        `M, N, K` load their tiles differently and need not share a winner, yet a key of `M, N, K` alone would reuse the
        first one's choice for the second. Adding `stride_ak` and `stride_bk` to the key records whether A and B are
        K-contiguous (stride 1) or not; for the usual contiguous layouts the other value is `M`, `N` or `K`, already in
        the key, so it costs no extra tuning runs. Under the
        interpreter timing means nothing and costs minutes, so `matmul_configs()` returns one small config there
        (`p03.autotune` covers pruning and reading the timings). Configs whose tiles do not fit in shared memory (fp32
        with large tiles) fail to compile and are skipped by the autotuner. Keep the list short: every config is a
        compile per dtype and a benchmark per new shape. The four below come from a sweep on an H200 (section 5): the
        three large tiles win on big GEMMs, and `GROUP_M = 16` beat 8 for the `128 x 256` tile at every size and dtype
        tried; the small tile covers fp32 and small shapes.

        Keep the kernel's signature: the checks call `matmul_kernel` directly on guarded buffers.
    """)
    lesson.exercise(
        "matmul",
        r'''
        @triton.jit
        def matmul_kernel(
            # Pointers
            a_ptr, b_ptr, c_ptr,
            # Shapes
            M, N, K,
            # Strides
            stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
            # Meta-parameters
            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
            INPUT_PRECISION: tl.constexpr,
        ):
            """c[tile] = a[tile rows, :] @ b[:, tile cols] for one BLOCK_M x BLOCK_N tile, any M, N, K and strides."""
            pid = tl.program_id(axis=0)
            num_pid_m = tl.cdiv(M, BLOCK_M)
            num_pid_n = tl.cdiv(N, BLOCK_N)
            # TODO: my tile from grouped_tile; row, column and k offsets; rows of A and columns of B wrapped with % M, % N
            # TODO: (BLOCK_M, BLOCK_K) and (BLOCK_K, BLOCK_N) pointer tiles from the strides; a float32 accumulator
            # TODO: the K loop: loads masked along K (other=0.0), tl.dot into the accumulator, advance the pointers
            # TODO: cast to c's dtype and store, masked on both edges
            ### BEGIN SOLUTION
            pid_m, pid_n = grouped_tile(pid, num_pid_m, num_pid_n, GROUP_M)
            offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)                   # (BLOCK_M,) rows of C
            offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)                   # (BLOCK_N,) columns of C
            offs_k = tl.arange(0, BLOCK_K)                                     # (BLOCK_K,)
            rows_a = offs_m % M                                                # wrapped: always a real row
            cols_b = offs_n % N
            a_ptrs = a_ptr + rows_a[:, None] * stride_am + offs_k[None, :] * stride_ak  # (BLOCK_M, BLOCK_K)
            b_ptrs = b_ptr + offs_k[:, None] * stride_bk + cols_b[None, :] * stride_bn  # (BLOCK_K, BLOCK_N)
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for step in range(0, tl.cdiv(K, BLOCK_K)):
                k_left = K - step * BLOCK_K
                a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
                b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
                acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)         # (BLOCK_M, BLOCK_N) float32
                a_ptrs += BLOCK_K * stride_ak
                b_ptrs += BLOCK_K * stride_bk
            c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
            tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))
            ### END SOLUTION


        def matmul_configs():
            """The autotuner's search space: Hopper-sized tiles when compiled, one small tile under the interpreter."""
            if lesson.policy.triton_path != "compiled":
                return [triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 4}, num_warps=4)]
            tiles = [  # (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_warps, num_stages); a compile and a benchmark per key
                (128, 256, 64, 16, 8, 3), (128, 256, 64, 8, 8, 4), (256, 128, 64, 8, 8, 3), (64, 64, 32, 8, 4, 3),
            ]
            return [
                triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k, "GROUP_M": g}, num_warps=w, num_stages=s)
                for m, n, k, g, w, s in tiles
            ]


        # stride_ak, stride_bk: 1 when A (B) is K-contiguous, so the two layouts of one shape tune separately
        matmul_kernel_tuned = triton.autotune(
            configs=matmul_configs(), key=["M", "N", "K", "stride_ak", "stride_bk"]
        )(matmul_kernel)


        def largest_offset(t: torch.Tensor) -> int:
            """The largest element offset, from t's first element, that t's view reaches: sum of stride * (size - 1)
            over the dimensions; 0 for a tensor with no elements."""
            # TODO: an empty tensor reaches nothing; otherwise sum stride * (size - 1) over the dimensions
            ### BEGIN SOLUTION
            if t.numel() == 0:
                return 0
            return sum(stride * (size - 1) for size, stride in zip(t.shape, t.stride()))
            ### END SOLUTION


        def check_int32_offsets(a: torch.Tensor, b: torch.Tensor) -> int:
            """The largest element offset that a (M, K), b (K, N) or the contiguous (M, N) output reaches; raise
            ValueError if it is 2**31 or more: the kernel's offsets are int32."""
            # TODO: the largest offset of a, of b and of the output (M * N - 1); refuse 2**31 or more with a message
            ### BEGIN SOLUTION
            reach = max(largest_offset(a), largest_offset(b), a.shape[0] * b.shape[1] - 1)
            if reach >= 2**31:
                raise ValueError(f"offsets are int32 in this kernel: an operand reaches offset {reach} >= 2**31; "
                                 "split it or make it contiguous")
            return reach
            ### END SOLUTION


        def matmul(a: torch.Tensor, b: torch.Tensor, allow_tf32: bool = False) -> torch.Tensor:
            """a @ b for 2-D a (M, K) and b (K, N) of one dtype (fp16, bf16 or fp32), any strides; returns (M, N)
            contiguous in that dtype, accumulated in float32. fp32 inputs use TF32 tensor cores only if allow_tf32."""
            # TODO 1: check constraints (2-D, inner dimensions, same dtype and device, a supported dtype, largest
            #         offsets below 2**31: check_int32_offsets) with messages
            # TODO 2: allocate the output
            # TODO 3: launch matmul_kernel_tuned on a 1-D grid of cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N) programs;
            #         every stride from .stride(i); INPUT_PRECISION "tf32" or "ieee"
            ### BEGIN SOLUTION
            if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
                raise ValueError(f"matmul needs (M, K) @ (K, N), got {tuple(a.shape)} @ {tuple(b.shape)}")
            if a.dtype != b.dtype or a.device != b.device:
                raise ValueError(f"a and b must share dtype and device: {a.dtype} {a.device} vs {b.dtype} {b.device}")
            if a.dtype not in (torch.float16, torch.bfloat16, torch.float32):
                raise ValueError(f"matmul supports float16, bfloat16 and float32, got {a.dtype}")
            M, K = a.shape
            N = b.shape[1]
            check_int32_offsets(a, b)
            c = torch.empty((M, N), dtype=a.dtype, device=a.device)
            grid = lambda META: (triton.cdiv(M, META["BLOCK_M"]) * triton.cdiv(N, META["BLOCK_N"]),)
            matmul_kernel_tuned[grid](
                a, b, c, M, N, K,
                a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                INPUT_PRECISION="tf32" if allow_tf32 else "ieee",
            )
            return c
            ### END SOLUTION
        ''',
    )
    lesson.md(r"""
        ## 5. Throughput against cuBLAS (GPU only)

        On a GPU, the cell below plots your `matmul` and `torch.matmul` (cuBLAS) in TFLOP/s ($2MNK / t$) for square fp16
        matrices. The first call at each size runs the autotuner (a few seconds); `do_bench` then reports the median
        of the tuned kernel. `python -m llm_algo bench p03.matmul` prints the issue's table: fp16 and bf16 at $4096^3$
        and $8192^3$, next to `torch.matmul` eager and under `torch.compile`.
    """)
    lesson.code(r"""
        if lesson.policy.triton_path != "compiled":
            print("Benchmarks need a CUDA GPU with compute capability >= 8.0; skipped here.")
        else:
            @triton.testing.perf_report(triton.testing.Benchmark(
                x_names=["size"], x_vals=[512, 1024, 2048, 4096, 8192], x_log=True,
                line_arg="provider", line_vals=["triton", "cublas"], line_names=["your matmul", "torch.matmul"],
                ylabel="TFLOP/s", plot_name="square GEMM, fp16", args={},
            ))
            def throughput(size, provider):
                a = torch.randn(size, size, device=DEVICE, dtype=torch.float16)
                b = torch.randn(size, size, device=DEVICE, dtype=torch.float16)
                fn = (lambda: matmul(a, b)) if provider == "triton" else (lambda: torch.matmul(a, b))
                ms = triton.testing.do_bench(fn, return_mode="median")
                return 2 * size**3 * 1e-12 / (ms * 1e-3)

            try:
                throughput.run(print_data=True, show_plots=True)
            except NotImplementedError:
                print("Implement matmul first: this benchmark times your kernel.")
    """)
    lesson.md(r"""
        **Reading the numbers.** The tile list above came out of one sweep on an NVIDIA H200 (Triton 3.6, torch 2.11,
        2026-12-02; `scripts/gpu_tune_p03.py matmul`, which times this lesson's kernel with each config fixed, next to
        cuBLAS in the same process). In that run cuBLAS did 749 and 664 TFLOP/s in fp16 at $4096^3$ and $8192^3$, and 731
        and 715 in bf16. The lesson's kernel reached these fractions of it:

        | config (BLOCK_M x BLOCK_N x BLOCK_K, GROUP_M, warps, stages) | fp16 4096³ | fp16 8192³ | bf16 4096³ | bf16 8192³ |
        | --- | --- | --- | --- | --- |
        | the old autotuned list (its pick) | 0.86x | 0.81x | 0.91x | 0.78x |
        | 128 x 256 x 64, 8, 8 warps, 3 stages | 0.86x | 0.94x | 0.93x | 0.91x |
        | 128 x 256 x 64, 8, 8 warps, 4 stages | 0.90x | 0.97x | 0.94x | 0.93x |
        | **128 x 256 x 64, 16, 8 warps, 3 stages** | **0.92x** | **0.98x** | **1.01x** | **0.94x** |
        | 256 x 128 x 64, 8, 8 warps, 3 stages | 0.81x | 0.90x | 0.88x | 0.86x |
        | 128 x 128 x 64, 8, 4 or 8 warps, 4 stages | 0.79-0.80x | 0.89x | 0.85-0.87x | 0.87-0.88x |
        | persistent + TMA (below), 128 x 256 x 64, 3 stages | 0.97x | 0.92x | 1.03x | 0.89x |
        | persistent + TMA, 256 x 128 x 64, 3 stages | 0.86x | 0.98x | 0.93x | 0.91x |

        Three lessons in that table. First, the old list's autotuned pick was slower than *every* fixed large-tile
        config at $8192^3$, so the list was changed; with the new list the autotuner picks `128 x 256 x 64`,
        `GROUP_M = 16` for all four shapes (checked in a later run). Second, `GROUP_M` matters by up to 8% at a fixed
        tile: with a group 16 tiles tall, each column tile of B that reaches L2 is reused by 16 row tiles of A before
        it is evicted, instead of 8. Third, the spread between runs is as large as the
        differences: in a check run ten minutes later cuBLAS itself measured 542 and 588 TFLOP/s at $8192^3$ instead of
        664 and 715 (the H200 changes clocks with power and temperature), so compare numbers only within one run, as
        `bench` does. Against the course's goal of 0.97x of cuBLAS, the best config meets it at $8192^3$ fp16 and
        $4096^3$ bf16 and misses it by 3-5% at the other two shapes.

        **The persistent TMA kernel** in the table is a variant written for the sweep (it is in
        `scripts/gpu_tune_p03.py`): the grid is one program per SM (132 on an H200), and each program walks the output
        tiles `pid, pid + 132, ...` in the grouped order, so no program launches or ends between tiles; the operands
        arrive through `tl.make_tensor_descriptor` (a TMA descriptor: Hopper's copy engine moves a whole
        `(BLOCK_M, BLOCK_K)` tile into shared memory and the threads only wait on it, instead of computing 8192
        addresses). It is shown, not graded: TMA is a Hopper feature (compute capability
        9.0+) whose benefit only such a GPU can show. It won at two shapes and lost at two. What it lacks is the last step of the
        production kernels: with warp specialisation, one warp group issues the TMA loads while two others run the
        tensor-core math, and the epilogue of one tile (convert and store a `128 x 256` tile) overlaps the main loop of
        the next. In Triton 3.6 `tl.range(..., warp_specialize=True)` is supported only on Blackwell (compute
        capability 10.x), so on an H200 that step belongs to CUTLASS or cuBLAS. cuBLAS itself runs at 67-76% of the
        H200's ~990 dense TFLOP/s here, limited by power and clocks, not memory.
    """)
    lesson.stop()
    lesson.md(r"""
        ## 6. Reading the solutions

        **`grouped_tile`.** `num_pid_in_group = GROUP_M * num_pid_n` programs make a group (GROUP_M rows of tiles, all
        columns). `group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)` is the height of *this* group, and both
        the modulo and the division use it: in a full group `pid_in_group % GROUP_M` walks down a column, in the short
        last group it must wrap at its real height. Everything is integer arithmetic on whatever shape `pid` has, which
        is why the same function serves a scalar program id in the kernel and a block of ids in the check.

        **`matmul_kernel`.** Two edges, two treatments: rows of $A$ and columns of $B$ past the edge are wrapped with
        `% M` and `% N`, so they only produce accumulator rows that the masked store drops; columns of $A$ (rows of
        $B$) past $K$ would be *summed*, so the K loads are masked with `other=0.0`. The store masks both edges. The pointer tiles advance by `BLOCK_K * stride_ak` and `BLOCK_K * stride_bk`, the
        distance of `BLOCK_K` steps along K in each operand's own layout; `+= BLOCK_K` is only right when that stride is 1.
        `tl.dot(a, b, acc)` accumulates in float32 on the tensor cores (wgmma on Hopper, mma on Ampere). The cast to
        `c_ptr.dtype.element_ty` happens once, after the loop.

        **The wrapper.** `grid` is a lambda of `META` because the autotuner, not the wrapper, picks `BLOCK_M` and
        `BLOCK_N`. It passes every stride, so `matmul(x, w.T)` reads `w` in place. `largest_offset` is the guard's
        measure: for a contiguous `(M, K)` tensor it is $MK - 1$, one less than the element count, but for a slice, a
        transposed view or an `expand`ed one (stride 0: $K$ elements seen, offset $K - 1$) count and reach differ in
        both directions. PyTorch's own kernels make the same decision per tensor (`canUse32BitIndexMath` in ATen walks
        the sizes and strides, and splits the launch when the answer is no).

        **The usual mistakes, and why they are wrong**: a group height that is not clamped
        (tiles of the last group skipped, others computed twice), row-major order inside a group, a K loop without the K
        mask (the rows after each row of `A` summed in), an unmasked store, pointers built as if the operands were
        contiguous, `+= BLOCK_K` instead of `BLOCK_K * stride_ak`, an fp16 accumulator, `M // BLOCK_M` programs, a size
        guard that counts elements (or multiplies strides by sizes, not sizes − 1), and a tuning key blind to layout.
        One mistake only a GPU shows: `INPUT_PRECISION="tf32"` for fp32 inputs (off by ~1e-3 relative).

        **Cost and production.** $2MNK$ FLOPs; HBM traffic between $(MK + KN + MN)\,b$ (perfect reuse) and
        $MNK\,b\,(1/B_N + 1/B_M)$ (no L2 reuse at all); grouping moves it toward the first. Production GEMMs go further:
        on Hopper they load tiles with the **TMA** unit (`tl.make_tensor_descriptor` in Triton) instead of computing
        pointers, run **persistent** kernels (one program per SM looping over tiles, so the epilogue of one tile overlaps
        the loads of the next), and **warp-specialise** (producer warps load, consumer warps compute). cuBLAS and
        CUTLASS pick among hand-tuned kernels by shape; `torch.compile` (Inductor) generates Triton GEMMs like this one
        and autotunes them against cuBLAS with `mode="max-autotune"`. For small M (decoding, M = batch size) the tiles
        are mostly empty and split-K or stream-K schedules win (`p03.autotune` builds a split-K GEMM). The next lesson,
        `p03.matmul_epilogue`, fuses the bias and activation that follow a linear layer into this kernel's store.
    """)
    lesson.mistakes()
    return lesson
