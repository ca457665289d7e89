"""Source of 01_Hardware_Math_Systems/15_Execution_Model.ipynb (build with `python -m llm_algo build
p01.execution_model`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p01.execution_model",
        path="01_Hardware_Math_Systems/15_Execution_Model.ipynb",
        title_en="CUDA and Triton execution models: grids, tiles, occupancy",
        title_zh="CUDA/Triton 执行模型：网格、分块与占用率",
        difficulty="medium",
        device="cpu",
        minutes=50,
        prerequisites=["p01.roofline"],
    )
    lesson.title(
        intro=r"""
        **本节要点**
        - GPU 把一次启动 (launch) 切成网格 (grid) 中的线程块 (block)/程序 (program)；每个块被调度到一个 SM 上，
          块内按 32 线程一组的线程束 (warp) 执行。
        - 矩阵乘法的每个程序负责输出的一个 tile；程序编号 → (行块, 列块) 的顺序决定 L2 缓存复用：
          分组顺序 (grouped ordering, Triton 教程中的 `GROUP_SIZE_M`) 让相邻程序共享 A 的行块和 B 的列块。
        - 占用率 (occupancy) = SM 上驻留的 warp 数 / 最大 warp 数，受四个上限约束：每 SM 最大块数、最大 warp 数、
          寄存器（每 warp 按 256 个分配）、共享内存（sm_80 起每块额外保留 1 KB）。
        - 各架构上限（CUDA 编程指南 "Technical Specifications per Compute Capability"）：H100 (sm_90) 每 SM 64 warp、
          32 块、228 KB 共享内存；RTX 4090 (sm_89) 48 warp、24 块、100 KB；T4 (sm_75) 32 warp、16 块、64 KB。
        - 与暴力装箱 (brute-force packing) 模拟和公开上限表比对。
        {易错点}

        A kernel launch is not "run this function N times". It is a grid of blocks (CUDA) or programs (Triton), each
        placed on one of the GPU's streaming multiprocessors (SMs: 132 on an H100 SXM), each SM holding as many blocks
        at once as its registers, shared memory and scheduler slots allow. Two numbers follow from this model and
        decide much of a kernel's speed: *which* tile of the output each program computes (so that neighbours reuse
        data in the L2 cache) and *how many* warps each SM keeps resident (so that memory latency can be hidden).

        **You will implement** the grouped program-to-tile mapping of Triton's matmul tutorial and an occupancy
        calculator for five architectures. **Graded against** a loop that lays the groups out explicitly, the
        properties the mapping must keep (a bijection; row-major when the group is 1), and a brute-force packer that
        adds blocks to an SM until a resource runs out, with the per-architecture limits of the CUDA C++ Programming
        Guide (as encoded in NVIDIA's CCCL `cuda/__device/arch_traits.h`).
    """
    )
    lesson.md(r"""
        ## 1. From a launch to tiles

        A matmul $C = AB$ with $A \in \mathbb{R}^{M \times K}$, $B \in \mathbb{R}^{K \times N}$ is cut into tiles of
        $B_M \times B_N$; the launch has $\lceil M / B_M \rceil \cdot \lceil N / B_N \rceil$ programs, numbered
        `pid = 0, 1, ...`. Program `pid` must decide which tile $(p_m, p_n)$ it computes. Row-major order,
        $p_m = \lfloor \text{pid} / n_N \rfloor$, $p_n = \text{pid} \bmod n_N$ (with $n_M, n_N$ the tiles per
        column and per row), makes the programs that run at the same time share one row block of $A$ but read *all*
        of $B$: when $B$ does not fit in L2, it is re-read from HBM for every row block.

        **Grouped ordering** (Triton's matmul tutorial, `GROUP_SIZE_M`): walk the tiles in groups of $G$ row blocks,
        column by column inside a group:

        $$
        \text{group} = \left\lfloor \frac{\text{pid}}{G\, n_N} \right\rfloor, \quad
        m_0 = G \cdot \text{group}, \quad g = \min(n_M - m_0,\, G), \quad
        p_m = m_0 + (\text{pid} \bmod G n_N) \bmod g, \quad
        p_n = \left\lfloor \frac{\text{pid} \bmod G n_N}{g} \right\rfloor .
        $$

        The last group may have fewer than $G$ row blocks ($g < G$). Consecutive programs now cover a $G \times$
        something block of tiles: they share $G$ row blocks of $A$ and a few column blocks of $B$; the tutorial reports
        more than 10% more throughput on an A100 from this alone (220 to 245 TFLOPS).

        ## 2. Exercise `program_to_tile`

        Return `(pid_m, pid_n)` for program `pid`. Refuse `pid` outside $[0, n_M n_N)$, non-positive tile counts and
        `group_m < 1` (`ValueError`).
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt

        # Per-SM limits, CUDA C++ Programming Guide, "Technical Specifications per Compute Capability" (the same
        # numbers as NVIDIA's CCCL cuda/__device/arch_traits.h). Registers: 64K 32-bit registers per SM, at most 255
        # per thread on all five. reserved_shared: what the runtime keeps per block on sm_80 and later.
        SM_LIMITS = {
            "sm_75 (T4)": dict(max_threads=1024, max_blocks=16, shared=64 * 1024, reserved_shared=0),
            "sm_80 (A100)": dict(max_threads=2048, max_blocks=32, shared=164 * 1024, reserved_shared=1024),
            "sm_86 (RTX 3090, A10)": dict(max_threads=1536, max_blocks=16, shared=100 * 1024, reserved_shared=1024),
            "sm_89 (RTX 4090, L40S)": dict(max_threads=1536, max_blocks=24, shared=100 * 1024, reserved_shared=1024),
            "sm_90 (H100, H200)": dict(max_threads=2048, max_blocks=32, shared=228 * 1024, reserved_shared=1024),
        }
        REGISTERS_PER_SM, MAX_REGISTERS_PER_THREAD, WARP = 65536, 255, 32
        REGISTER_UNIT = 256  # registers are allocated per warp, in units of 256
        SHARED_UNIT = 128  # shared memory is allocated per block, in units of 128 bytes
    """)
    lesson.exercise(
        "program_to_tile",
        r'''
        def program_to_tile(pid: int, num_pid_m: int, num_pid_n: int, group_m: int) -> tuple[int, int]:
            """The output tile (pid_m, pid_n) that program pid computes, in grouped order of group_m row blocks."""
            # TODO: refuse bad counts, group_m < 1 and a pid outside the grid (ValueError)
            # TODO: which group, its first row block and its height (the last group may be shorter)
            # TODO: inside the group: row = position mod height, column = position // height
            ### BEGIN SOLUTION
            if num_pid_m < 1 or num_pid_n < 1 or group_m < 1:
                raise ValueError("tile counts and group_m must be positive")
            if not 0 <= pid < num_pid_m * num_pid_n:
                raise ValueError(f"pid {pid} outside the grid of {num_pid_m * num_pid_n} programs")
            per_group = group_m * num_pid_n  # programs in one full group
            first_m = (pid // per_group) * group_m
            height = min(num_pid_m - first_m, group_m)  # the last group may be shorter
            position = pid % per_group
            return first_m + position % height, position // height
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### The order, drawn

        Each cell is an output tile, labelled with the program that computes it: row-major (left) and grouped with
        $G = 3$ (right), 7 × 9 tiles. The first 12 programs (one wave on a small GPU) are shaded: row-major touches
        2 row blocks of $A$ and all 9 column blocks of $B$; grouped, 3 row blocks and 4 column blocks.
    """)
    lesson.code(r"""
        def order(group):
            grid = [[0] * 9 for _ in range(7)]
            for pid in range(63):
                try:
                    m, n = program_to_tile(pid, 7, 9, group)
                except NotImplementedError:
                    per_group = group * 9
                    first = (pid // per_group) * group
                    height = min(7 - first, group)
                    m, n = first + (pid % per_group) % height, (pid % per_group) // height
                grid[m][n] = pid
            return grid


        fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
        for ax, group, title in ((axes[0], 1, "row-major (G = 1)"), (axes[1], 3, "grouped, G = 3")):
            grid = order(group)
            ax.imshow([[1 if p < 12 else 0 for p in row] for row in grid], cmap="Blues", vmin=0, vmax=1.6)
            for m in range(7):
                for n in range(9):
                    ax.text(n, m, grid[m][n], ha="center", va="center", fontsize=8)
            ax.set_xlabel("pid_n (column block of B)"); ax.set_ylabel("pid_m (row block of A)"); ax.set_title(title)
        plt.tight_layout(); plt.show()
    """)
    lesson.md(r"""
        ## 3. Occupancy

        An SM keeps a block resident until it finishes; while one warp waits hundreds of cycles for HBM, the scheduler issues
        instructions of another. *Occupancy* is the fraction of the SM's warp slots in use:

        $$
        \text{occupancy} = \frac{b \cdot w}{W_{\max}}, \qquad w = \left\lceil \frac{\text{threads per block}}{32}
        \right\rceil, \qquad b = \min(b_{\text{blocks}},\, b_{\text{warps}},\, b_{\text{regs}},\, b_{\text{smem}}),
        $$

        with, for a block of $w$ warps, $r$ registers per thread and $s$ bytes of shared memory:

        | limit | resident blocks |
        | --- | --- |
        | blocks per SM | $b_{\text{blocks}} = B_{\max}$ |
        | warps per SM | $b_{\text{warps}} = \lfloor W_{\max} / w \rfloor$, $W_{\max}$ = max threads / 32 |
        | registers | $b_{\text{regs}} = \lfloor 65536 / (w \cdot \lceil 32 r / 256 \rceil \cdot 256) \rfloor$ |
        | shared memory | $b_{\text{smem}} = \lfloor S_{\text{SM}} / (\lceil s / 128 \rceil \cdot 128 + S_{\text{reserved}}) \rfloor$ (no limit when $s = 0$) |

        This is the model of NVIDIA's occupancy calculator at the granularity that matters here; on a real GPU,
        `cudaOccupancyMaxActiveBlocksPerMultiprocessor` is the authority (it also knows the shared-memory carve-out
        the driver picks). Example: a FlashAttention-style kernel with 128 threads, 168 registers per thread and
        64 KB of shared memory on an H100: $w = 4$, registers $4 \cdot 5376 = 21504$ per block ($b_{\text{regs}} = 3$),
        shared memory $b_{\text{smem}} = \lfloor 233472 / 66560 \rfloor = 3$: 3 blocks, 12 of 64 warps, 19%
        occupancy. Low, and fine for a kernel that keeps its tensor cores busy from registers; the number tells you
        which resource to trade.

        ## 4. Exercise `occupancy`

        Return `(blocks_per_sm, occupancy)` for an architecture of `SM_LIMITS`. Refuse (`ValueError`): an unknown
        architecture, `threads_per_block` outside $1..1024$, `registers_per_thread` outside $1..255$, shared memory
        that is negative or more than one block may have ($S_{\text{SM}} - S_{\text{reserved}}$).
    """)
    lesson.exercise(
        "occupancy",
        r'''
        def occupancy(arch: str, threads_per_block: int, registers_per_thread: int,
                      shared_bytes_per_block: int = 0) -> tuple[int, float]:
            """(resident blocks per SM, fraction of the SM's warp slots in use) under the four per-SM limits."""
            # TODO: look the architecture up in SM_LIMITS; validate the block (ValueError)
            # TODO: warps per block (round up); the four limits; the smallest wins
            ### BEGIN SOLUTION
            if arch not in SM_LIMITS:
                raise ValueError(f"unknown architecture {arch!r}; known: {sorted(SM_LIMITS)}")
            limits = SM_LIMITS[arch]
            if not 1 <= threads_per_block <= 1024:
                raise ValueError(f"threads_per_block must be 1..1024, got {threads_per_block}")
            if not 1 <= registers_per_thread <= MAX_REGISTERS_PER_THREAD:
                raise ValueError(f"registers_per_thread must be 1..255, got {registers_per_thread}")
            if not 0 <= shared_bytes_per_block <= limits["shared"] - limits["reserved_shared"]:
                raise ValueError(f"shared memory per block must be 0..{limits['shared'] - limits['reserved_shared']}")
            max_warps = limits["max_threads"] // WARP
            warps = -(-threads_per_block // WARP)  # a partial warp occupies a whole warp slot
            registers_per_warp = -(-registers_per_thread * WARP // REGISTER_UNIT) * REGISTER_UNIT
            by_registers = REGISTERS_PER_SM // (warps * registers_per_warp)
            by_shared = limits["max_blocks"]
            if shared_bytes_per_block > 0:
                shared = -(-shared_bytes_per_block // SHARED_UNIT) * SHARED_UNIT + limits["reserved_shared"]
                by_shared = limits["shared"] // shared
            blocks = min(limits["max_blocks"], max_warps // warps, by_registers, by_shared)
            return blocks, blocks * warps / max_warps
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### Occupancy against registers per thread

        256 threads per block, no shared memory, on each architecture: the staircase is the 64K-register file being
        cut into whole blocks of 8 warps. A100 and H100 draw the same curve (64 warp slots, 64K registers), as do
        sm_86 and sm_89 (48 slots); the T4 keeps full occupancy longest only because it has just 32 warp slots to
        fill.
    """)
    lesson.code(r"""
        registers = list(range(16, 256, 4))
        fig, ax = plt.subplots(figsize=(6.5, 3.6))
        for arch, limits in SM_LIMITS.items():
            values = []
            for r in registers:
                try:
                    values.append(occupancy(arch, 256, r)[1])
                    who = "yours"
                except NotImplementedError:
                    per_warp = -(-r * 32 // 256) * 256
                    blocks = min(limits["max_blocks"], limits["max_threads"] // 256, 65536 // (8 * per_warp))
                    values.append(blocks * 8 / (limits["max_threads"] // 32))
                    who = "formula"
            ax.step(registers, [100 * v for v in values], where="post", label=arch)
        ax.set_xlabel("registers per thread"); ax.set_ylabel("occupancy (%)")
        ax.set_title(f"256 threads per block, no shared memory ({who})"); ax.legend(fontsize=7); ax.grid(alpha=0.3)
        plt.tight_layout(); plt.show()
    """)
    lesson.stop()
    lesson.md(r"""
        ## 5. Reading the solutions

        **`program_to_tile`.** Everything is integer arithmetic on `pid`, the only thing a program knows about itself.
        The usual mistakes: *a full-height last group* (`height = group_m` always: when $n_M$ is not a
        multiple of $G$, the last programs compute tiles outside the matrix and some tiles are never computed),
        *row and column swapped inside the group* (still a bijection on full groups, but not the tutorial's order,
        and a wrong one on the last group), and *the group index `pid // group_m`* (a group holds
        `group_m * num_pid_n` programs, not `group_m`).

        **`occupancy`.** The mistakes: *threads / 32 rounded down* (a block of 48 threads holds 2 warp slots, not 1),
        *registers not rounded to the allocation unit* (a kernel at 33 registers per thread really costs 40), *the
        reserved 1 KB per block forgotten* on sm_80 and later (a block asking for exactly half the shared memory then
        fits twice on paper and once on the GPU), and *the warp limit ignored*.

        **In practice.** `nvcc --resource-usage` (or `ptxas -v`) prints registers and shared memory per kernel; Triton
        exposes them as `kernel.n_regs` and `kernel.metadata.shared` after compilation. Nsight Compute reports
        achieved against theoretical occupancy and names the limiter. Higher occupancy is not always faster: the
        matmul and attention kernels of cuBLAS, CUTLASS and FlashAttention run at 1–2 blocks per SM on purpose,
        spending registers and shared memory on larger tiles and hiding latency with asynchronous copies (`cp.async`,
        TMA on Hopper) instead of with more warps.
    """)
    lesson.mistakes()
    return lesson
