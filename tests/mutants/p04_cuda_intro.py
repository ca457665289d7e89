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
        mistake_zh="边界判断写成 i <= n，多出的一个线程写到了末尾之后的元素",
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
        mistake_zh="只启动 n // T 个 block，最后一个不满的 block 从未启动",
    ),
    Mutant(
        "vector_add_sim",
        "ignores_block_index",
        "uses threadIdx.x as the global index: every block redoes the first block's elements",
        [("i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x", "i = cuda.threadIdx.x")],
        mistake_zh="用 threadIdx.x 作为全局下标：每个 block 都重复处理第一个 block 的元素",
    ),
    Mutant(
        "vector_add_sim",
        "adds_in_numpy",
        "the launcher computes a + b in NumPy and never launches the kernel",
        [("add_kernel[blocks, threads_per_block](a, b, out, n)", "np.add(a, b, out=out)")],
        mistake_zh="启动函数直接用 NumPy 计算 a + b，从不启动内核",
    ),
    Mutant(
        "vector_add_sim",
        "no_block_size_check",
        "launches whatever threads_per_block it is given: 0 fails with ZeroDivisionError, 1025 runs in the simulator",
        [("if not 1 <= threads_per_block <= 1024:  # 0 would divide", "if False:  # 0 would divide")],
        mistake_zh="给多少 threads_per_block 就启动多少：0 会引发 ZeroDivisionError，1025 也能在模拟器里运行",
    ),
    # saxpy_sim
    Mutant(
        "saxpy_sim",
        "stride_is_one_block",
        "steps by blockDim.x (one block) instead of the whole grid: blocks overlap and elements get alpha x twice",
        [("stride = cuda.gridsize(1)  # blockDim.x * gridDim.x", "stride = cuda.blockDim.x")],
        mistake_zh="按 blockDim.x（一个 block）而不是整个 grid 前进：block 之间重叠，有的元素被加了两次 alpha x",
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
        mistake_zh="用 if 代替 grid-stride 循环：只更新了第一个 grid 宽度内的元素",
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
        mistake_zh="启动函数按 n 计算 grid 大小，而不是启动传入的 block 数",
    ),
    Mutant(
        "saxpy_sim",
        "starts_at_thread_index",
        "starts every block at threadIdx.x: all blocks walk the same elements",
        [("i = cuda.grid(1)\n    stride", "i = cuda.threadIdx.x\n    stride")],
        mistake_zh="每个 block 都从 threadIdx.x 开始：所有 block 遍历相同的元素",
    ),
    Mutant(
        "saxpy_sim",
        "no_thread_limit",
        "checks only threads_per_block >= 1, so a block of more than 1024 threads (which a GPU refuses) is launched",
        [("if not 1 <= threads_per_block <= 1024:", "if threads_per_block < 1:")],
        mistake_zh="只检查 threads_per_block >= 1，于是会启动超过 1024 个线程的 block（GPU 会拒绝）",
    ),
    # vector_add_cuda (C++; each still compiles)
    Mutant(
        "vector_add_cuda",
        "bound_off_by_one",
        "loops while i <= n: the thread that reaches n writes one element past the end",
        [("for (int64_t i = start; i < n; i += stride)", "for (int64_t i = start; i <= n; i += stride)")],
        mistake_zh="循环条件写成 i <= n：到达 n 的线程多写了末尾之后的一个元素",
    ),
    Mutant(
        "vector_add_cuda",
        "no_grid_stride_loop",
        "an if instead of the loop: a grid smaller than n leaves the tail unwritten",
        [("for (int64_t i = start; i < n; i += stride)", "if (int64_t i = start; i < n)")],
        mistake_zh="用 if 代替循环：grid 小于 n 时尾部没有被写入",
    ),
    Mutant(
        "vector_add_cuda",
        "floor_grid",
        "n / 256 blocks: an input shorter than a block gets a grid of zero blocks",
        [("(n + threads - 1) / threads", "n / threads")],
        mistake_zh="用 n / 256 个 block：比一个 block 还短的输入得到零个 block 的 grid",
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
        mistake_zh="不检查是否连续：切片后的输入被当作稠密张量读取",
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
        mistake_zh="既不检查线程数也不检查启动结果：每个 block 2048 个线程时静默失败",
    ),
    Mutant(
        "vector_add_cuda",
        "no_empty_guard",
        "launches for an empty input too: a grid of zero blocks",
        [("if (n == 0) return out;  // nothing to do, and a grid of zero blocks is an invalid launch", "")],
        mistake_zh="对空输入也启动内核：grid 中有零个 block",
    ),
    Mutant(
        "vector_add_cuda",
        "int32_start_index",
        "computes the start index as an int (int start = blockIdx.x * blockDim.x + threadIdx.x): past 2^31 threads "
        "it wraps to a negative index",
        [
            (
                "int64_t start = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;",
                "int start = blockIdx.x * blockDim.x + threadIdx.x;",
            )
        ],
        mistake_zh="用 int 计算起始下标（int start = blockIdx.x * blockDim.x + threadIdx.x）：线程数超过 2^31 时回绕成负下标",
    ),
]
