"""Source of 03_Triton_Kernels/17_MoE_Grouped_GEMM.ipynb (build with `python -m llm_algo build p03.moe_grouped_gemm`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p03.moe_grouped_gemm",
        path="03_Triton_Kernels/17_MoE_Grouped_GEMM.ipynb",
        title_en="Grouped GEMM for mixture-of-experts",
        title_zh="MoE 分组矩阵乘法（Grouped GEMM）",
        difficulty="hard",
        device="cpu",
        minutes=120,
        prerequisites=["p03.matmul", "p02.moe_router"],
        triton=True,
    )
    lesson.title(
        intro=r"""
        A mixture-of-experts layer sends every token to $k$ of $E$ expert MLPs. After routing, expert $e$ owns a group
        of $m_e$ token rows, and the layer must compute $E$ matrix products $X_e W_e^\top$ whose row counts $m_e$ change
        with every batch and are often zero. Mixtral-8x7B has $E = 8$, $k = 2$ and experts of $4096 \to 14336$;
        Qwen3-30B-A3B has $E = 128$, $k = 8$ and experts of $2048 \to 768$; DeepSeek-V3 has $E = 256$, $k = 8$ and
        experts of $7168 \to 2048$ (the `config.json` of each model on the Hugging Face Hub). A Python loop launches
        $E$ small GEMMs per projection, three projections per layer: with 128 experts that is 384 launches, most of them
        on a few dozen rows, each too small to fill an H200's 132 SMs. A **grouped GEMM** (分组矩阵乘法) does all of
        them in one launch.

        **You will implement** the permutation that sorts the $T \cdot k$ routed (token, choice) rows by expert and
        the group offsets, the tile schedule that maps program ids to (expert, row tile), the grouped GEMM kernel
        for groups of any size (empty ones included), and the whole MoE feed-forward layer on top of it: gather,
        gate and up projections, SwiGLU, down projection, and the weighted combine back into token order.
        **Graded against** loop specifications of the permutation and the schedule, a per-expert loop of float64
        matmuls, the per-token MoE loop of `p02.moe_router`'s checks and guard bytes around the output.
        """,
    )
    lesson.md(r"""
        ## 本节要点

        - **问题**：MoE 层路由后，每个专家 $e$ 得到 $m_e$ 行 token（$\sum_e m_e = Tk$），要计算 $E$ 个行数不同、可能为 0 的矩阵乘 $X_e W_e^\top$；逐个专家循环调用 matmul 会产生大量小 kernel 启动，SM 填不满。
        - **排列（permutation）**：把 $(T, k)$ 的专家编号展平，按专家做稳定排序得到 `order`；`group_offsets` $(E+1,)$ 是每个专家行数的前缀和，第 $e$ 组是排序后第 `offsets[e]` 到 `offsets[e+1]` 行；token 编号是 `order // k`。
        - **tile 调度**：每个专家需要 $\lceil m_e / B_M \rceil$ 个行 tile，空组需要 0 个；tile 表记录每个 tile 的专家和起始行，一次 launch 覆盖所有 (专家, 行 tile, 列 tile)。
        - **kernel**：行掩码是 `row < offsets[e+1]`（本组的结束，而不是总行数），读 $W_e$ 时用 `e * stride_we` 偏移，且用 int64 计算（$E \cdot N \cdot K$ 可超过 $2^{31}$）。
        - **MoE 前向**：gather → gate/up 两次 grouped GEMM → SwiGLU → down grouped GEMM → 乘门控权重 → 用 `index_add` 按 token 累加（一个 token 有 $k$ 份贡献，不能用覆盖写）。
        - **实测（H200，一次运行）**：Mixtral-8x7B 形状 401 TFLOP/s，是同规模稠密 cuBLAS GEMM（710）的 56%；Qwen3-30B-A3B 形状 150 TFLOP/s，只有 21%（稠密 727）。「≥ 80%」的目标在两个形状上都未达成。`torch._grouped_mm` 分别为 604 和 427，是要超越的标杆。主要原因：每个 program 只算一个 tile，非持久化，也不用 TMA；组尾的 tile 只填了一部分（Qwen 有 19% 的行是补齐）；每次调用都在主机端构建调度。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. From routing to groups

        Routing (`p02.moe_router`) gives, for $T$ tokens, `experts (T, k)` and `gates (T, k)`. Each of the $T k$
        (token, choice) pairs is one row that one expert must process. Flatten them in token order, pair
        $p = t k + j$ is choice $j$ of token $t$, and sort the pairs by expert:

        ```
        experts (T=4, k=2)     flat (8,)                  order = argsort(flat, stable)   sorted experts
        t0: [2, 0]             [2, 0, 1, 2, 0, 3, 2, 1]   [1, 4, 2, 7, 0, 3, 6, 5]         [0, 0, 1, 1, 2, 2, 2, 3]
        t1: [1, 2]                                         token = order // k:
        t2: [0, 3]                                         [0, 2, 1, 3, 0, 1, 3, 2]
        t3: [2, 1]             counts per expert [2, 2, 3, 1]  ->  group_offsets = [0, 2, 4, 7, 8]
        ```

        Row $i$ of the sorted input is `x[order[i] // k]`; the rows of expert $e$ are `offsets[e] : offsets[e+1]`.
        A stable sort keeps each group in token order, so the gather reads `x` mostly forwards and the result does
        not depend on the sort's tie-breaking. The shapes of one MoE SwiGLU layer with hidden size $H$ and expert
        width $F$, $M = T k$:

        $$
        X_s = x[\text{order} /\!/ k] \in \mathbb{R}^{M \times H}, \quad
        G = \mathrm{grouped}(X_s, W_{\text{gate}}),\ U = \mathrm{grouped}(X_s, W_{\text{up}}) \in \mathbb{R}^{M \times F}, \quad
        Y_s = \mathrm{grouped}(\mathrm{silu}(G) \odot U,\ W_{\text{down}}) \in \mathbb{R}^{M \times H}
        $$

        where $\mathrm{grouped}(X, W)[i] = X[i]\, W_{e(i)}^\top$ with $e(i)$ the expert whose group holds row $i$,
        $W_{\text{gate}}, W_{\text{up}} \in \mathbb{R}^{E \times F \times H}$ and $W_{\text{down}} \in \mathbb{R}^{E
        \times H \times F}$ (the `nn.Linear` layout, out by in). The output of token $t$ is
        $\sum_j \text{gates}[t, j]\, Y_s[\text{pos}(t, j)]$: unpermute (反排列) and combine (合并) in one `index_add`.
        The FLOPs are those of three dense GEMMs of $M$ rows, $6 M H F$ in all; only their grouping differs.

        ## 2. One launch for every group: the tile schedule

        Cut each group into row tiles of $B_M$ rows: expert $e$ needs $\lceil m_e / B_M \rceil$ tiles (0 for an empty
        group), and its last tile is ragged unless $B_M$ divides $m_e$. List the tiles of all experts one after the
        other, each as (expert, first row):

        ```
        group_offsets = [0, 3, 3, 20, 21], B_M = 16
        expert 0: rows 0..2   -> 1 tile  (starts at row 0, 3 real rows)
        expert 1: no rows     -> 0 tiles
        expert 2: rows 3..19  -> 2 tiles (start at rows 3 and 19; the second has 1 real row)
        expert 3: row 20      -> 1 tile  (starts at row 20)
        tile_expert = [0, 2, 2, 3], tile_row = [0, 3, 19, 20]
        ```

        The kernel launches `num_tiles * cdiv(N, B_N)` programs. Program `pid` finds its (tile, column tile) with the
        grouped order of `p03.matmul` (your `grouped_tile`, rows of tiles = this list), reads its expert and first row
        from the two tables, and computes a $B_M \times B_N$ block of $X_e W_e^\top$. Its rows stop at the **end of its
        group**, `offsets[e + 1]`, not at $M$: the rows after it belong to the next expert, which has other weights.
        Up to $E$ tiles are partly empty; with $B_M = 64$ and 128 experts that is at most 128 extra tiles, small
        next to the $M / B_M$ full ones when $M$ is in the thousands.

        The tables are built on the host side of the launch with a few tensor ops (`repeat_interleave` needs the
        number of tiles, one device-to-host sync). Production kernels avoid the sync in two ways: vLLM's Triton
        `fused_moe` pads every group to a multiple of $B_M$ on the GPU (`moe_align_block_size`, which writes an expert
        id per block of sorted rows) and launches for the worst case; others compute the prefix sum of tile counts
        inside the kernel and let programs past the last tile exit.

        Because the schedule depends on $B_M$, the wrapper picks $B_M$ itself and the autotuner only picks
        $B_N$, $B_K$, warps and stages.
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt
        import torch
        import torch.nn.functional as F
        import triton
        import triton.language as tl

        grouped_tile = lesson.use("p03.matmul", "grouped_tile")
        route_topk, moe_layer = lesson.use("p02.moe_router", "route_topk", "moe_layer")
    """)
    lesson.md(r"""
        ## 3. Exercise `expert_groups`: the permutation, the offsets, the schedule

        Two small PyTorch functions, no kernel yet.

        - `sort_by_expert(experts, num_experts)` returns `order (T*k,)` int64, the flat (token, choice) indices sorted
          by expert, **stable** (token order inside a group), and `group_offsets (E+1,)` int64 with
          `group_offsets[0] = 0` and `group_offsets[E] = T*k`. An expert id outside `[0, E)` is a routing bug: refuse it
          with a `ValueError` (a wrong id would silently land in another expert's group, or past the end).
        - `tile_schedule(group_offsets, block_m)` returns `tile_expert` and `tile_row`, int32, one entry per row tile,
          experts in order. Refuse offsets that do not start at 0 or decrease.

        No Python loop over experts: `torch.bincount(..., minlength=E)` counts the rows (with `minlength`, so trailing
        empty experts still get an entry), `torch.repeat_interleave` repeats each expert id by its tile count.
    """)
    lesson.exercise(
        "expert_groups",
        r'''
        def sort_by_expert(experts: torch.Tensor, num_experts: int):
            """Group the T*k routed (token, choice) pairs by expert.

            experts: (T, k) integer expert ids in [0, num_experts)
            returns (order (T*k,) int64: flat pair indices t*k + j sorted by expert, stable;
                     group_offsets (num_experts + 1,) int64: rows of expert e are order[offsets[e]:offsets[e+1]])
            """
            if experts.dim() != 2:
                raise ValueError(f"experts must be (T, k), got shape {tuple(experts.shape)}")
            # TODO: refuse ids outside [0, num_experts) with a ValueError that names the bad id
            # TODO: flatten in token order, stable argsort by expert id
            # TODO: rows per expert (bincount with minlength), prefix sum with a leading 0
            ### BEGIN SOLUTION
            flat = experts.reshape(-1).long()                                   # (T*k,), pair p = t*k + j
            if flat.numel() and (int(flat.min()) < 0 or int(flat.max()) >= num_experts):
                bad = int(flat.min()) if int(flat.min()) < 0 else int(flat.max())
                raise ValueError(f"expert id {bad} is outside [0, {num_experts})")
            order = torch.argsort(flat, stable=True)                            # (T*k,)
            counts = torch.bincount(flat, minlength=num_experts)                # (E,)
            group_offsets = torch.zeros(num_experts + 1, dtype=torch.int64, device=experts.device)
            group_offsets[1:] = torch.cumsum(counts, dim=0)                     # (E+1,)
            ### END SOLUTION
            return order, group_offsets


        def tile_schedule(group_offsets: torch.Tensor, block_m: int):
            """The row tiles of every group, experts in order.

            group_offsets: (E+1,) non-decreasing, starting at 0
            returns (tile_expert (num_tiles,) int32, tile_row (num_tiles,) int32: the tile's first row)
            """
            if group_offsets.dim() != 1 or group_offsets.numel() < 2:
                raise ValueError(f"group_offsets must be (E+1,) with E >= 1, got shape {tuple(group_offsets.shape)}")
            # TODO: refuse offsets that do not start at 0 or that decrease, and block_m < 1
            # TODO: tiles per expert = cdiv(rows, block_m); repeat each expert id by its tile count
            # TODO: first row of each tile: the group's start + block_m * (index of the tile inside its group)
            ### BEGIN SOLUTION
            if block_m < 1:
                raise ValueError(f"block_m must be positive, got {block_m}")
            offsets = group_offsets.long()
            sizes = offsets[1:] - offsets[:-1]                                  # (E,) rows per expert
            if int(offsets[0]) != 0 or bool((sizes < 0).any()):
                raise ValueError(f"group_offsets must start at 0 and never decrease, got {offsets.tolist()}")
            tiles = (sizes + block_m - 1) // block_m                            # (E,) cdiv
            experts = torch.arange(sizes.numel(), device=offsets.device)
            tile_expert = torch.repeat_interleave(experts, tiles)               # (num_tiles,)
            first_tile = torch.cumsum(tiles, dim=0) - tiles                     # (E,) index of each group's first tile
            local = torch.arange(tile_expert.numel(), device=offsets.device) - first_tile[tile_expert]
            tile_row = offsets[tile_expert] + local * block_m                   # (num_tiles,)
            ### END SOLUTION
            return tile_expert.to(torch.int32), tile_row.to(torch.int32)
        ''',
    )
    lesson.code(r"""
        # How ragged are real groups? 4096 tokens routed by a random router (k = 8 of 128 experts, Qwen3-30B-A3B's
        # shape): rows per expert, and how many of the tiles are partly empty for B_M = 64.
        torch.manual_seed(0)
        try:
            logits = torch.randn(4096, 128) + 0.3 * torch.randn(128)        # a mildly unbalanced router
            _, chosen = route_topk(logits, 8)
            _, offsets = sort_by_expert(chosen, 128)
            sizes = (offsets[1:] - offsets[:-1]).tolist()
            tile_expert, _ = tile_schedule(offsets, 64)
            fig, axes = plt.subplots(1, 2, figsize=(10, 3))
            axes[0].bar(range(128), sizes, width=1.0)
            axes[0].axhline(4096 * 8 / 128, color="red", ls="--", label="mean = T k / E = 256")
            axes[0].set_xlabel("expert"); axes[0].set_ylabel("rows"); axes[0].legend(); axes[0].set_title("group sizes")
            ragged = [s % 64 for s in sizes if s % 64]
            axes[1].hist(ragged, bins=16); axes[1].set_xlabel("real rows in the last tile of a group (B_M = 64)")
            axes[1].set_title(f"{len(tile_expert)} tiles; dense would need {math.ceil(4096 * 8 / 64)}")
            fig.tight_layout(); plt.show()
        except NotImplementedError:
            print("sort_by_expert and tile_schedule are not written yet: no picture")
    """)
    lesson.md(r"""
        With the reference solution and this seed, a small per-expert bias in the router already spreads the groups
        from 23 to 731 rows around the mean of 256. 127 of the 128 groups end in a partial tile, so the schedule has
        572 tiles where $M / B_M = 512$ would do for a dense GEMM: about 12% of the programs compute partly on masked
        rows. Smaller $B_M$ wastes less on ragged tiles but reuses each loaded weight tile over fewer rows; that
        trade-off is why the wrapper picks $B_M$ from the average group size.
    """)
    lesson.md(r"""
        ## 4. Exercise `grouped_gemm`: the kernel

        `grouped_gemm(x, w, group_offsets)` computes `y[i] = x[i] @ w[e(i)].T` for `x (M, K)` sorted by expert,
        `w (E, N, K)` and `group_offsets (E+1,)`. One program:

        1. `tile, pid_n = grouped_tile(pid, num_tiles, cdiv(N, BLOCK_N), GROUP_M)`; then `expert = tile_expert[tile]`,
           `row_start = tile_row[tile]` and `row_end = group_offsets[expert + 1]`.
        2. `offs_m = row_start + arange(BLOCK_M)`, `row_ok = offs_m < row_end`. The X loads are masked with `row_ok`
           (and K), so a ragged tile neither reads the next expert's rows nor writes them. The store uses the same mask.
        3. $W_e^\top$ tile `(BLOCK_K, BLOCK_N)`: `w_ptr + expert * stride_we + k * stride_wk + n * stride_wn`. Compute
           `expert * stride_we` in **int64**: Mixtral's gate weights are $8 \times 14336 \times 4096 = 4.7 \cdot 10^8$
           elements, DeepSeek-V3's $256 \times 2048 \times 7168 = 3.8 \cdot 10^9$, past $2^{31}$; a kernel that
           multiplies in int32 reads the wrong expert for the high ids, silently. Columns past N can be wrapped with
           `% N` as in `p03.matmul` (never stored).
        4. The K loop of `p03.matmul`: masked loads with `other=0.0`, `tl.dot` into a float32 accumulator; cast once
           and store masked with `row_ok` and `offs_n < N`.

        The wrapper validates, picks `BLOCK_M` with `pick_block_m` (16 under the interpreter; on a GPU 64 when the
        average group has fewer than 128 rows, else 128), builds the schedule with your `tile_schedule`, and launches the autotuned
        kernel on `num_tiles * cdiv(N, BLOCK_N)` programs. With no rows at all it returns an empty `(0, N)` tensor
        without launching. Keep the kernel's signature: the checks call it directly on guarded buffers.
    """)
    lesson.exercise(
        "grouped_gemm",
        r'''
        @triton.jit
        def grouped_gemm_kernel(
            x_ptr, w_ptr, y_ptr, group_offsets_ptr, tile_expert_ptr, tile_row_ptr,
            num_tiles, N, K,
            stride_xm, stride_xk, stride_we, stride_wn, stride_wk, stride_ym, stride_yn,
            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
            INPUT_PRECISION: tl.constexpr,
        ):
            """y[rows of one tile, one BLOCK_N slice] = x[rows] @ w[expert].T; rows stop at the end of the group."""
            pid = tl.program_id(axis=0)
            num_pid_n = tl.cdiv(N, BLOCK_N)
            # TODO: (tile, pid_n) from grouped_tile; this tile's expert, first row, and the end of its group (int64)
            # TODO: row offsets and their mask (row < end of group), column offsets (wrapped % N), k offsets
            # TODO: pointer tiles: x (BLOCK_M, BLOCK_K); w[expert].T (BLOCK_K, BLOCK_N) from the expert's offset
            # TODO: the K loop (masked loads, tl.dot into float32), then the masked store
            ### BEGIN SOLUTION
            tile, pid_n = grouped_tile(pid, num_tiles, num_pid_n, GROUP_M)
            expert = tl.load(tile_expert_ptr + tile).to(tl.int64)
            row_start = tl.load(tile_row_ptr + tile).to(tl.int64)
            row_end = tl.load(group_offsets_ptr + expert + 1).to(tl.int64)
            offs_m = row_start + tl.arange(0, BLOCK_M)                          # (BLOCK_M,) int64 rows of x and y
            row_ok = offs_m < row_end                                           # only this expert's rows
            offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)                    # (BLOCK_N,)
            cols_w = offs_n % N                                                 # wrapped: always a real row of w[e]
            offs_k = tl.arange(0, BLOCK_K)
            x_ptrs = x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :] * stride_xk            # (BLOCK_M, BLOCK_K)
            w_ptrs = w_ptr + expert * stride_we + offs_k[:, None] * stride_wk + cols_w[None, :] * stride_wn  # (BK, BN)
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for step in range(0, tl.cdiv(K, BLOCK_K)):
                k_left = K - step * BLOCK_K
                x = tl.load(x_ptrs, mask=row_ok[:, None] & (offs_k[None, :] < k_left), other=0.0)
                w = tl.load(w_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
                acc = tl.dot(x, w, acc, input_precision=INPUT_PRECISION)
                x_ptrs += BLOCK_K * stride_xk
                w_ptrs += BLOCK_K * stride_wk
            y_ptrs = y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn
            tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=row_ok[:, None] & (offs_n[None, :] < N))
            ### END SOLUTION


        def grouped_gemm_configs():
            """BLOCK_N, BLOCK_K, warps and stages: Hopper-sized when compiled, one small tile under the interpreter.
            BLOCK_M is not tuned: the tile schedule is built for it before the launch."""
            if lesson.policy.triton_path != "compiled":
                return [triton.Config({"BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 4}, num_warps=4)]
            tiles = [(256, 64, 8, 3), (128, 64, 4, 4), (128, 32, 4, 4), (64, 32, 4, 3)]  # (BLOCK_N, BLOCK_K, warps, stages)
            return [
                triton.Config({"BLOCK_N": n, "BLOCK_K": k, "GROUP_M": 8}, num_warps=w, num_stages=s)
                for n, k, w, s in tiles
            ]


        grouped_gemm_kernel_tuned = triton.autotune(
            configs=grouped_gemm_configs(), key=["N", "K", "BLOCK_M", "stride_xk", "stride_wk"]
        )(grouped_gemm_kernel)


        def pick_block_m(M: int, E: int, compiled: bool) -> int:
            """Rows per tile: 16 under the interpreter; compiled, 64 when the average group M / E has fewer than
            128 rows, else 128."""
            # TODO: the rule above (the schedule is built for this BLOCK_M, so the autotuner cannot choose it)
            ### BEGIN SOLUTION
            if not compiled:
                return 16
            return 64 if M < 128 * E else 128
            ### END SOLUTION


        def grouped_gemm(x: torch.Tensor, w: torch.Tensor, group_offsets: torch.Tensor,
                         allow_tf32: bool = False) -> torch.Tensor:
            """y[i] = x[i] @ w[e].T for the rows group_offsets[e] <= i < group_offsets[e+1] of every expert e.

            x: (M, K) rows sorted by expert; w: (E, N, K); group_offsets: (E+1,) from 0 to M, non-decreasing
            returns (M, N) contiguous in x's dtype (fp16, bf16 or fp32), accumulated in float32
            """
            # TODO 1: validate shapes, dtypes, devices, and group_offsets (length E+1, ends at M)
            # TODO 2: BLOCK_M from pick_block_m, the tile schedule
            # TODO 3: allocate y; no rows -> return it; launch on num_tiles * cdiv(N, BLOCK_N) programs (the kernel
            #         reads the group offsets with unit stride: pass them int64 and contiguous)
            ### BEGIN SOLUTION
            if x.dim() != 2 or w.dim() != 3 or x.shape[1] != w.shape[2]:
                raise ValueError(f"grouped_gemm needs x (M, K) and w (E, N, K), got {tuple(x.shape)}, {tuple(w.shape)}")
            if x.dtype != w.dtype or x.device != w.device:
                raise ValueError(f"x and w must share dtype and device: {x.dtype} {x.device} vs {w.dtype} {w.device}")
            if x.dtype not in (torch.float16, torch.bfloat16, torch.float32):
                raise ValueError(f"grouped_gemm supports float16, bfloat16 and float32, got {x.dtype}")
            M, K = x.shape
            E, N, _ = w.shape
            if group_offsets.shape != (E + 1,) or int(group_offsets[-1]) != M:
                raise ValueError(f"group_offsets must be ({E + 1},) ending at M = {M}, got "
                                 f"{tuple(group_offsets.shape)} ending at {int(group_offsets[-1])}")
            block_m = pick_block_m(M, E, lesson.policy.triton_path == "compiled")
            tile_expert, tile_row = tile_schedule(group_offsets, block_m)       # validates the offsets too
            y = torch.empty((M, N), dtype=x.dtype, device=x.device)
            num_tiles = tile_expert.numel()
            if num_tiles == 0 or N == 0:
                return y
            offsets = group_offsets.to(device=x.device, dtype=torch.int64).contiguous()  # read at offsets_ptr + e
            grid = lambda META: (num_tiles * triton.cdiv(N, META["BLOCK_N"]),)
            grouped_gemm_kernel_tuned[grid](
                x, w, y, offsets, tile_expert.to(x.device), tile_row.to(x.device), num_tiles, N, K,
                x.stride(0), x.stride(1), w.stride(0), w.stride(1), w.stride(2), y.stride(0), y.stride(1),
                BLOCK_M=block_m, INPUT_PRECISION="tf32" if allow_tf32 else "ieee",
            )
            return y
            ### END SOLUTION
        ''',
    )
    lesson.md(r"""
        ## 5. Exercise `moe_ffn`: the whole layer

        `moe_ffn(x, gates, experts, w_gate, w_up, w_down)` is the expert part of a Mixtral/Qwen MoE layer: routing is
        done (`gates`, `experts` from `route_topk`), and you compute

        $$
        \text{out}[t] = \sum_{j < k} \text{gates}[t, j] \cdot W_{\text{down}, e}\big(\mathrm{silu}(W_{\text{gate}, e}\, x_t)
        \odot W_{\text{up}, e}\, x_t\big), \qquad e = \text{experts}[t, j],
        $$

        with three `grouped_gemm` calls on the sorted rows: `sort_by_expert`, gather `x[order // k]`, gate and up
        projections, `F.silu(g) * u` (elementwise, in x's dtype), down projection, then scale each sorted row by its
        gate `gates.reshape(-1)[order]` and `index_add_` it into row `order // k` of a zero `(T, H)` output. A token's
        $k$ rows land in the same output row, so the combine must add, not assign. This is the signature of vLLM's
        `fused_experts(hidden_states, w1, w2, topk_weights, topk_ids)` with `w1` split into gate and up.

        Do the combine in float32 and cast once (the $k$ weighted rows of a bf16 model are summed; vLLM sums them in
        the kernel's float32 accumulator too). `torch.matmul` and friends are off limits here: every product goes
        through your kernel.
    """)
    lesson.exercise(
        "moe_ffn",
        r'''
        def moe_ffn(x: torch.Tensor, gates: torch.Tensor, experts: torch.Tensor, w_gate: torch.Tensor,
                    w_up: torch.Tensor, w_down: torch.Tensor) -> torch.Tensor:
            """Dropless MoE SwiGLU experts with grouped GEMMs.

            x: (T, H); gates: (T, k) float; experts: (T, k) int ids in [0, E)
            w_gate, w_up: (E, F, H); w_down: (E, H, F), all in x's dtype
            returns (T, H) in x's dtype: sum over j of gates[t, j] * expert_{experts[t, j]}(x[t])
            """
            if x.dim() != 2 or gates.shape != experts.shape or gates.shape[0] != x.shape[0]:
                raise ValueError(f"need x (T, H), gates and experts (T, k), got {tuple(x.shape)}, "
                                 f"{tuple(gates.shape)}, {tuple(experts.shape)}")
            T, H = x.shape
            k = experts.shape[1]
            E = w_gate.shape[0]
            # TODO: order and group offsets; the sorted rows x[order // k]
            # TODO: gate and up projections (grouped_gemm), silu(gate) * up, down projection
            # TODO: scale each sorted row by its gate, index_add into token order in float32, cast to x's dtype
            ### BEGIN SOLUTION
            order, group_offsets = sort_by_expert(experts, E)                  # (T*k,), (E+1,)
            token = order // k                                                  # (T*k,) token of each sorted row
            x_sorted = x[token]                                                 # (T*k, H)
            hidden = F.silu(grouped_gemm(x_sorted, w_gate, group_offsets)) * grouped_gemm(x_sorted, w_up, group_offsets)
            y_sorted = grouped_gemm(hidden, w_down, group_offsets)              # (T*k, H)
            weight = gates.reshape(-1)[order].float()                           # (T*k,)
            out = torch.zeros(T, H, dtype=torch.float32, device=x.device)
            out.index_add_(0, token, y_sorted.float() * weight[:, None])        # unpermute and combine
            return out.to(x.dtype)
            ### END SOLUTION
        ''',
    )
    lesson.md(r"""
        ### Your layer against your `p02.moe_router` layer

        The cell routes a small batch with `route_topk` and runs both your grouped-GEMM `moe_ffn` and the batched
        `moe_layer` you wrote in PyTorch (dropless, `capacity_factor=None`). They compute the same function in a
        different order, so they agree to float32 rounding.
    """)
    lesson.code(r"""
        torch.manual_seed(1)
        T_demo, H_demo, F_demo, E_demo, k_demo = 24, 32, 48, 6, 2
        x_demo = torch.randn(T_demo, H_demo)
        router_w = torch.randn(E_demo, H_demo)
        wg, wu = torch.randn(2, E_demo, F_demo, H_demo) / H_demo**0.5
        wd = torch.randn(E_demo, H_demo, F_demo) / F_demo**0.5
        try:
            demo_gates, demo_experts = route_topk(x_demo @ router_w.T, k_demo)
            mine = moe_ffn(x_demo, demo_gates, demo_experts, wg, wu, wd)
            batched = moe_layer(x_demo[None], router_w, wg, wu, wd, k_demo)[0]
            print(f"largest difference from moe_layer: {(mine - batched).abs().max():.2e}")
        except NotImplementedError:
            print("moe_ffn is not written yet")
    """)
    lesson.md(r"""
        ## 6. Throughput (GPU only)

        `python -m llm_algo bench p03.moe_grouped_gemm` times the gate projection of two MoE layers in bf16, with
        4096 tokens routed by a random router: Mixtral-8x7B ($E = 8$, $k = 2$, $M = 8192$, $N = 14336$, $K = 4096$) and
        Qwen3-30B-A3B ($E = 128$, $k = 8$, $M = 32768$, $N = 768$, $K = 2048$). Next to your `grouped_gemm` it times a
        **dense GEMM of the same total size** ($M \times K$ by $K \times N$ with `torch.matmul`, cuBLAS: the roofline the
        grouped kernel is held to, goal ≥ 80% of it), `torch._grouped_mm` (PyTorch's own grouped GEMM, CUTLASS-based,
        used by torchtitan; timed only where the installed torch has it and accepts the inputs), and a Python loop of
        one `torch.matmul` per expert. All rows report TFLOP/s of $2MNK$.

        **Reading the numbers** (one run of `python -m llm_algo bench p03.moe_grouped_gemm` with the reference
        solutions on an NVIDIA H200, Triton 3.6, torch 2.11, CUDA 13.0; your GPU will differ). TFLOP/s of $2MNK$,
        milliseconds in brackets:

        | row | Mixtral-8x7B, 8 groups of 971..1057 rows | Qwen3-30B-A3B, 128 groups of 217..298 rows |
        |---|---|---|
        | `grouped_gemm` (Triton, yours) | 401 (2.40 ms) | 150 (0.686 ms) |
        | dense GEMM of the same size (cuBLAS) | 710 (1.36 ms) | 727 (0.142 ms) |
        | `torch._grouped_mm` (CUTLASS) | 604 (1.59 ms) | 427 (0.241 ms) |
        | loop of `torch.matmul`, one per expert | 671 (1.43 ms) | 42 (2.45 ms) |
        | yours / dense (goal ≥ 0.80) | 0.56 | 0.21 |
        | yours / `torch._grouped_mm` | 0.66 | 0.35 |

        **The goal is missed at both shapes.** Mixtral reaches 56% of the dense GEMM; meeting the goal needs 568
        TFLOP/s, 1.42 times faster. Qwen reaches 21%; it would need 582 TFLOP/s, 3.9 times faster. The kernel wins
        only where launches dominate: at Qwen's 128 small groups it is 3.6 times faster than the per-expert loop,
        whose 128 cuBLAS calls of about 256 × 768 × 2048 together reach 42 TFLOP/s. With Mixtral's 8 large groups the
        loop loses little (671 TFLOP/s, 0.95x of dense) and is 1.67 times faster than this kernel. The bar to beat is
        `torch._grouped_mm`: it meets the goal on Mixtral (85% of dense), and on Qwen it is 2.8 times faster than this
        kernel.

        **Qwen's dense row is a stricter yardstick than it looks.** It multiplies all 32768 rows by *one* expert's
        weights (3 MiB). A grouped GEMM must read all 128 experts' weights, 384 MiB, plus 128 MiB of `x` and 48 MiB of
        `y`. At the ~4.1 TB/s of a copy (the decode lessons' copy rows in the same run), those 560 MiB alone take
        about 0.14 ms, the dense row's whole time. Reaching 80% of dense at this shape therefore means keeping both
        HBM and the tensor cores about 80% busy at once.

        **Where this kernel loses**, from what it does:

        - *Ragged tiles.* `pick_block_m` gives `BLOCK_M = 128` at both shapes, since the average group has 1024 or 256
          rows. Each group's last tile is partly masked. Mixtral's 8 groups take 69 row tiles where 64 would hold the
          rows (7% wasted); Qwen's 128 groups take 316 where 256 would (19% of the rows multiplied are padding). This
          explains at most 1.23x of Qwen's gap.
        - *One tile per program, no persistence.* The grid is `num_tiles × cdiv(N, BLOCK_N)` programs. Each one fills
          its load pipeline, runs the K loop, then casts and stores its tile while its SM waits. At Qwen's $K = 2048$
          the K loop is only 32 steps with `BLOCK_K = 64`, so this fixed cost per tile weighs twice as much as at $K =
          4096$. $N = 768$ gives only 3 column tiles per row tile (6 with `BLOCK_N = 128`; the log does not say which
          configuration the autotuner picked). CUTLASS's grouped GEMM behind `torch._grouped_mm` is persistent: each
          CTA walks a list of tiles, so the epilogue of one tile overlaps the loads of the next. Its loads are issued
          by TMA from dedicated producer warps (warp specialisation). Here every load is a pointer tile, and the warps
          that compute also issue the loads.
        - *Work on the host for every call.* The wrapper builds the tile schedule each time: `int(group_offsets[-1])`,
          the checks in `tile_schedule` and `repeat_interleave` each wait for the GPU, and about ten small tensor ops
          run before the launch. The benchmark times the whole call. This run did not measure the cost, which could be
          tens of microseconds: noise at Mixtral's 2.4 ms, but not at Qwen's 0.69 ms.
        - *A gap that the above does not explain.* In the same run, `p03.matmul`'s kernel (the same K loop; its
          autotuner can pick the same `128 × 256 × 64` tile) reached 596 TFLOP/s at $8192^3$ bf16. On Mixtral, whose
          groups are GEMMs of about $1024 \times 14336 \times 4096$, this kernel gets 401, 1.5 times less, and tails
          (7%) and host work cannot account for that. There are three candidates, none measured. First, the weight
          layout: `w[e]` is read K-contiguous (the `nn.Linear` layout), while `p03.matmul`'s benchmark reads B
          N-contiguous. Second, the data-dependent row masks on every `x` load. Third, the int64 row offsets. To find
          out, time `grouped_gemm_kernel` on a prebuilt schedule, time `p03.matmul` on `x_e @ w[e].T` for one expert,
          and compare the two in Nsight Compute (tensor-pipe utilisation, stall reasons).

        The fixes production uses: a persistent grid over the tile list, TMA loads (`tl.make_tensor_descriptor`;
        `p03.matmul` found TMA alone no faster for the plain GEMM), a schedule built on the GPU with no host
        synchronisation (vLLM's `moe_align_block_size`), and per-shape tuned tiles, including `BLOCK_M = 64` when
        groups are just over a multiple of 128.
    """)
    lesson.stop()
    lesson.md(r"""
        ## 7. Reading the solutions

        **`sort_by_expert`.** `argsort(flat, stable=True)` is the permutation; the offsets are the exclusive prefix sum
        of `bincount(flat, minlength=E)`. Without `minlength` the count vector stops at the largest id that occurs, and
        the offsets come out shorter than $E + 1$ when the last experts received nothing, which happens all the time
        at decode batch sizes. The range check runs before anything else: `bincount` would grow its output for an
        id past $E$ and `argsort` happily sorts a negative id to the front.

        **`tile_schedule`.** `cdiv(sizes, block_m)` tiles per expert, `repeat_interleave` lays out the expert ids,
        and the tile's index inside its group (its global index minus the group's first tile index) times `block_m`
        is its offset from the group's start. An empty group has zero tiles and vanishes from the tables, which is
        exactly what a loop `for e in range(E): for r in range(start, end, block_m)` produces.

        **The kernel.** Three things differ from `p03.matmul`. (1) The row mask is `offs_m < row_end`, the end of
        *this* group: masking with $M$ would let a ragged tile read the next expert's rows and write garbage over
        them (with that expert's rows computed by the wrong weights). Rows cannot be wrapped with `% M` as in
        `p03.matmul` for the same reason. (2) `expert * stride_we` is computed in int64, because the weight tensor of
        a large MoE passes $2^{31}$ elements. (3) Every program loads its expert id, so one launch serves experts of
        any size; programs of one `GROUP_M` group share weights columns when their tiles belong to one expert.

        **`moe_ffn`.** `order // k` turns a flat pair index into its token; `order % k` would be the choice rank, a
        common slip. The gates follow the same permutation: `gates.reshape(-1)[order]`. `index_add_` sums the $k$ rows
        of a token; `index_copy_` or `out[token] = ...` keeps only one of them (which one is undefined).

        **The usual mistakes, and why they are wrong**: a row mask against $M$
        instead of the group's end, a floor instead of a ceiling for tiles per expert, a schedule whose rows ignore
        the group's start, offsets without `minlength`, an expert offset that uses the wrong stride, a missing K mask,
        an unmasked store, the combine with `order % k`, assigning instead of adding, gates not applied; strided
        group offsets (every other element of a buffer) handed to the kernel, which reads them with unit stride.

        **What production does.** vLLM's `fused_moe` Triton kernel (`vllm/model_executor/layers/fused_moe/`) fuses
        more: it reads the rows of `x` through `sorted_token_ids` inside the kernel (no gathered copy of `x`), computes
        gate and up as one GEMM with `w1 (E, 2F, H)`, multiplies by the routing weight in the down projection's
        epilogue, and uses per-shape tuned configs from JSON files keyed by $M$. SGLang and TensorRT-LLM do the same
        with CUTLASS. DeepGEMM (DeepSeek) provides FP8 "m-grouped contiguous" GEMMs, where each group is padded to the
        tile height, for training and prefill, and "masked" grouped GEMMs for decoding under CUDA graphs. MegaBlocks
        casts the same problem as a block-sparse matmul. In training, `torch._grouped_mm` (torchtitan) and
        Megatron-Core's `GroupedMLP` (`grouped_gemm` library, CUTLASS) compute forward and backward. `p02.expert_parallel`
        shows where the groups come from when experts live on other GPUs: the all-to-all delivers rows already
        grouped by local expert, and this kernel runs on them.
    """)
    lesson.mistakes()
    return lesson
