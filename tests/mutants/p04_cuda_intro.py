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
    ),
    Mutant(
        "vector_add_sim",
        "ignores_block_index",
        "uses threadIdx.x as the global index: every block redoes the first block's elements",
        [("i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x", "i = cuda.threadIdx.x")],
    ),
    Mutant(
        "vector_add_sim",
        "adds_in_numpy",
        "the launcher computes a + b in NumPy and never launches the kernel",
        [("add_kernel[blocks, threads_per_block](a, b, out, n)", "np.add(a, b, out=out)")],
    ),
    Mutant(
        "vector_add_sim",
        "no_block_size_check",
        "launches whatever threads_per_block it is given: 0 fails with ZeroDivisionError, 1025 runs in the simulator",
        [("if not 1 <= threads_per_block <= 1024:  # 0 would divide", "if False:  # 0 would divide")],
    ),
    # saxpy_sim
    Mutant(
        "saxpy_sim",
        "stride_is_one_block",
        "steps by blockDim.x (one block) instead of the whole grid: blocks overlap and elements get alpha x twice",
        [("stride = cuda.gridsize(1)  # blockDim.x * gridDim.x", "stride = cuda.blockDim.x")],
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
    ),
    Mutant(
        "saxpy_sim",
        "starts_at_thread_index",
        "starts every block at threadIdx.x: all blocks walk the same elements",
        [("i = cuda.grid(1)\n    stride", "i = cuda.threadIdx.x\n    stride")],
    ),
    Mutant(
        "saxpy_sim",
        "no_thread_limit",
        "checks only threads_per_block >= 1, so a block of more than 1024 threads (which a GPU refuses) is launched",
        [("if not 1 <= threads_per_block <= 1024:", "if threads_per_block < 1:")],
    ),
    # vector_add_cuda (C++; each still compiles)
    Mutant(
        "vector_add_cuda",
        "bound_off_by_one",
        "loops while i <= n: the thread that reaches n writes one element past the end",
        [("for (int64_t i = start; i < n; i += stride)", "for (int64_t i = start; i <= n; i += stride)")],
    ),
    Mutant(
        "vector_add_cuda",
        "no_grid_stride_loop",
        "an if instead of the loop: a grid smaller than n leaves the tail unwritten",
        [("for (int64_t i = start; i < n; i += stride)", "if (int64_t i = start; i < n)")],
    ),
    Mutant(
        "vector_add_cuda",
        "floor_grid",
        "n / 256 blocks: an input shorter than a block gets a grid of zero blocks",
        [("(n + threads - 1) / threads", "n / threads")],
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
    ),
    Mutant(
        "vector_add_cuda",
        "no_empty_guard",
        "launches for an empty input too: a grid of zero blocks",
        [("if (n == 0) return out;  // nothing to do, and a grid of zero blocks is an invalid launch", "")],
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
