"""Realistic wrong versions of the p04.cuda_intro solutions; every one must be rejected by a check.

The mutants of `vector_add_cuda` are C++ that still compiles (only its meaning is broken), so that on a GPU they are
rejected by a check and not by nvcc; on a CPU their checks read *needs a GPU*."""

from llm_algo.mutation import Mutant

MUTANTS = [
    # vector_add_sim
    Mutant(
        "vector_add_sim",
        "guard_off_by_one",
        "guards with i <= n, so one spare thread writes the element after the end",
        [("    if i < n:\n        out[i] = a[i] + b[i]", "    if i <= n:\n        out[i] = a[i] + b[i]")],
        mistake_zh="用 i <= n 做保护，多出的一个线程写到了末尾之后的元素",
    ),
    Mutant(
        "vector_add_sim",
        "floor_grid",
        "launches n // T blocks, so the last partial block is never launched",
        [
            (
                "blocks = (n + threads_per_block - 1) // threads_per_block",
                "blocks = max(1, n // threads_per_block)",
            )
        ],
        mistake_zh="启动 n // T 个线程块，最后那个不满的块从未启动",
    ),
    Mutant(
        "vector_add_sim",
        "ignores_block_index",
        "uses threadIdx.x as the global index: every block redoes the first block's elements",
        [("i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x", "i = cuda.threadIdx.x")],
        mistake_zh="把 threadIdx.x 当作全局下标：每个线程块都重做第一个块的元素",
    ),
    Mutant(
        "vector_add_sim",
        "adds_in_numpy",
        "the launcher computes a + b in NumPy and never launches the kernel",
        [("add_kernel[blocks, threads_per_block](a, b, out, n)", "np.add(a, b, out=out)")],
        mistake_zh="启动函数用 NumPy 计算 a + b，从未启动内核",
    ),
    Mutant(
        "vector_add_sim",
        "no_block_size_check",
        "launches whatever threads_per_block it is given: 0 fails with ZeroDivisionError, 1025 runs in the simulator",
        [("if not 1 <= threads_per_block <= 1024:  # 0 would divide", "if False:  # 0 would divide")],
        mistake_zh="给多少 threads_per_block 就启动多少：0 抛出 ZeroDivisionError，1025 在模拟器里照样运行",
    ),
    # saxpy_sim
    Mutant(
        "saxpy_sim",
        "stride_is_one_block",
        "steps by blockDim.x (one block) instead of the whole grid: blocks overlap and elements get alpha x twice",
        [("stride = cuda.gridsize(1)  # blockDim.x * gridDim.x", "stride = cuda.blockDim.x")],
        mistake_zh="按 blockDim.x（一个块）而不是整个网格步进：线程块互相重叠，有的元素加了两次 alpha x",
    ),
    Mutant(
        "saxpy_sim",
        "no_loop",
        "an if instead of the grid-stride loop: only the first grid-width of elements is updated",
        [
            (
                "    while i < n:\n        y[i] = alpha * x[i] + y[i]\n        i += stride",
                "    if i < n:\n        y[i] = alpha * x[i] + y[i]",
            )
        ],
        mistake_zh="用 if 代替网格步长循环：只更新了第一个网格宽度的元素",
    ),
    Mutant(
        "saxpy_sim",
        "grid_from_n",
        "the launcher sizes the grid from n instead of launching the blocks it was given",
        [
            (
                "saxpy_kernel[blocks, threads_per_block](np.float32(alpha), x, y, x.shape[0])",
                "saxpy_kernel[(x.shape[0] + threads_per_block - 1) // threads_per_block, threads_per_block]"
                "(np.float32(alpha), x, y, x.shape[0])",
            )
        ],
        mistake_zh="启动函数按 n 决定网格大小，而不是启动给定的线程块数",
    ),
    Mutant(
        "saxpy_sim",
        "starts_at_thread_index",
        "starts every block at threadIdx.x: all blocks walk the same elements",
        [("i = cuda.grid(1)\n    stride", "i = cuda.threadIdx.x\n    stride")],
        mistake_zh="每个线程块都从 threadIdx.x 开始：所有块走过同样的元素",
    ),
    Mutant(
        "saxpy_sim",
        "no_thread_limit",
        "checks only threads_per_block >= 1, so a block of more than 1024 threads (which a GPU refuses) is launched",
        [("if not 1 <= threads_per_block <= 1024:", "if threads_per_block < 1:")],
        mistake_zh="只检查 threads_per_block >= 1，超过 1024 个线程的块（GPU 会拒绝）也被启动",
    ),
    # vector_add_cuda (C++; each still compiles)
    Mutant(
        "vector_add_cuda",
        "bound_off_by_one",
        "loops while i <= n: the thread that reaches n writes one element past the end",
        [("for (int64_t i = start; i < n; i += stride)", "for (int64_t i = start; i <= n; i += stride)")],
        mistake_zh="循环条件是 i <= n：到达 n 的线程写到末尾之后一个元素",
    ),
    Mutant(
        "vector_add_cuda",
        "no_grid_stride_loop",
        "an if instead of the loop: a grid smaller than n leaves the tail unwritten",
        [("for (int64_t i = start; i < n; i += stride)", "if (int64_t i = start; i < n)")],
        mistake_zh="用 if 代替循环：网格小于 n 时尾部没有被写",
    ),
    Mutant(
        "vector_add_cuda",
        "floor_grid",
        "n / 256 blocks: an input shorter than a block gets a grid of zero blocks",
        [("(n + threads - 1) / threads", "n / threads")],
        mistake_zh="n / 256 个线程块：比一个块还短的输入得到零个块的网格",
    ),
    Mutant(
        "vector_add_cuda",
        "no_contiguity_check",
        "no contiguity check: a sliced input is read as if it were dense",
        [
            (
                "TORCH_CHECK(a.is_contiguous() && b.is_contiguous() && out.is_contiguous(),\n"
                '                "add_into: a, b and out must be contiguous (call .contiguous() first)");',
                "",
            )
        ],
        mistake_zh="不检查连续性：切片后的输入被当作稠密的来读",
    ),
    Mutant(
        "vector_add_cuda",
        "no_launch_check",
        "neither checks the thread count nor the launch: 2048 threads per block fails silently",
        [
            (
                'TORCH_CHECK(threads >= 1 && threads <= 1024, "add_into: threads must be in [1, 1024], got ", threads);',
                "",
            ),
            ("C10_CUDA_KERNEL_LAUNCH_CHECK();  // cudaGetLastError(): a bad launch configuration throws here", ""),
        ],
        mistake_zh="既不检查线程数也不检查启动：每块 2048 个线程会静默失败",
    ),
    Mutant(
        "vector_add_cuda",
        "no_empty_guard",
        "launches for an empty input too: a grid of zero blocks",
        [("if (n == 0) return out;  // nothing to do, and a grid of zero blocks is an invalid launch", "")],
        mistake_zh="空输入也启动：网格有零个线程块",
    ),
]
