"""Source of 04_CUDA_Systems/01_CUDA_Intro.ipynb (build with `python -m llm_algo build p04.cuda_intro`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p04.cuda_intro",
        path="04_CUDA_Systems/01_CUDA_Intro.ipynb",
        title_en="First CUDA kernels: threads, blocks and grid-stride loops",
        title_zh="第一个 CUDA kernel：线程、块与 grid-stride 循环",
        difficulty="easy",
        device="cpu",
        minutes=75,
        prerequisites=["p03.vector_add"],
    )
    lesson.title(
        intro=r"""
        Every PyTorch operation on a GPU ends in a **kernel launch** (kernel 启动): a C++ function marked `__global__`
        that thousands of threads run at once, each on its own few elements. `x + y` on two CUDA tensors launches one;
        a Llama decoder layer launches dozens. Triton (Part 03) writes kernels per *block* of elements and lets the
        compiler place the threads; CUDA C++ makes you write what **one thread** does and choose how many threads to
        start. That is more work, and it is what lets you reach everything the hardware has: warp shuffles, shared
        memory, tensor-core instructions, streams — the rest of this part.

        **You will implement** the same two kernels twice. First in Python with numba-cuda, run by its CUDA
        *simulator* on any machine: a vector add with one thread per element, and an in-place SAXPY ($y \leftarrow
        \alpha x + y$) with a **grid-stride loop**. Then the vector add in real CUDA C++, built from a string in this
        notebook with `torch.utils.cpp_extension.load_inline`, with its input checks and launch-error checking.
        **Graded against** float64 PyTorch results, on sizes that are not multiples of the block, with NaN-filled
        outputs and guard elements after them; the simulator exercises grade on every machine, the C++ one on a GPU
        (on a CPU it reads *needs a GPU*).
    """
    )
    lesson.md(r"""
        ## 本节要点

        - **执行模型**：kernel 写的是**一个线程**做什么；线程组成 block（每个 block 最多 1024 个线程，在一个 SM 上运行，每 32 个线程为一个 warp），block 组成 grid。启动语法 `kernel<<<blocks, threads, 0, stream>>>(...)`。
        - **线程索引**：全局下标 $i = \text{blockIdx.x}\cdot\text{blockDim.x} + \text{threadIdx.x}$，block 数 $\lceil n/T\rceil$，最后一个 block 多出来的线程用 `if (i < n)` 挡住。
        - **Grid-stride 循环**：`for (i = start; i < n; i += blockDim.x * gridDim.x)`：grid 大小按机器定（如每个 SM 32 个 block），与 $n$ 无关；任意 $n$ 都正确，线程被复用。
        - **64 位下标**：`blockIdx.x * blockDim.x` 是 32 位运算；超过 $2^{31}$ 个元素（8 GiB fp32）时 `int` 下标溢出，要先转 `int64_t`。
        - **错误检查**：kernel 启动是异步的、不返回错误；启动后调用 `cudaGetLastError()`（PyTorch 里是 `C10_CUDA_KERNEL_LAUNCH_CHECK()`）捕获配置错误；运行时错误（非法地址）在下一次同步时才出现，调试用 `CUDA_LAUNCH_BLOCKING=1` 和 compute-sanitizer。
        - **Host 端**：用 `TORCH_CHECK` 检查 device、dtype、contiguous、shape，在 PyTorch 当前 stream 上启动；`load_inline` 编译，按源码哈希缓存。
        - **CPU 上的孪生练习**：numba-cuda 的 CUDA 模拟器（`cuda.grid(1)`、`cuda.gridsize(1)`、`kernel[blocks, threads](...)`）在任何机器上都能评分，越界访问直接报 IndexError。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. One thread, one element

        An NVIDIA GPU runs threads in groups of 32, a **warp** (线程束), that issue one instruction at a time together.
        You launch a **grid** (网格) of **blocks** (线程块); each block holds up to 1024 threads, runs entirely on one of
        the GPU's streaming multiprocessors (SMs: 132 on an H100 SXM or an H200) and stays there until it finishes.
        Inside a kernel each thread reads where it is from four built-in variables:

        | variable | meaning | range |
        | --- | --- | --- |
        | `threadIdx.x` | my index inside my block | `0 .. blockDim.x - 1` |
        | `blockIdx.x` | my block's index in the grid | `0 .. gridDim.x - 1` |
        | `blockDim.x` | threads per block, $T$ | 1 .. 1024 |
        | `gridDim.x` | blocks in the grid, $G$ | 1 .. $2^{31} - 1$ (y and z: 1 .. 65535) |

        For $n$ elements and $T$ threads per block, the classic launch gives every element its own thread:

        $$
        i = \text{blockIdx.x} \cdot T + \text{threadIdx.x}, \qquad G = \lceil n / T \rceil, \qquad
        \text{work only if } i < n .
        $$

        ```
        n = 10, T = 4, G = ceil(10 / 4) = 3 blocks = 12 threads
        thread i:  0 1 2 3 | 4 5 6 7 | 8 9 10 11
        block:     0 0 0 0 | 1 1 1 1 | 2 2 2  2
        i < n:     1 1 1 1 | 1 1 1 1 | 1 1 0  0   <- two threads of the last block must do nothing
        ```

        The guard `if (i < n)` is the CUDA twin of Triton's mask. Without it threads 10 and 11 read and write past the
        end of the arrays: into another tensor of your model, or an illegal-address fault that kills the CUDA context.
        In CUDA C++ this reads:

        ```cpp
        __global__ void add_kernel(const float* a, const float* b, float* out, int64_t n) {
            int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
            if (i < n) out[i] = a[i] + b[i];
        }
        add_kernel<<<(n + 255) / 256, 256>>>(a, b, out, n);   // launched from the host (the CPU)
        ```

        **Traffic.** $2n$ reads and $n$ writes of 4 bytes: $12n$ bytes for $n$ additions, 1/12 of a FLOP per byte.
        An H200 moves about 4.8 TB/s from its HBM3e (NVIDIA's H200 datasheet) and does about 67 TFLOP/s of fp32: this
        kernel is memory-bound by a factor of several hundred, and its only target is the speed of a plain copy.

        ## 2. The same kernel in the CUDA simulator

        On a machine without a GPU you can still run CUDA kernels, slowly: numba-cuda's **simulator**
        (`NUMBA_ENABLE_CUDASIM=1`, switched on by `llm_algo.cuda.simulator`) runs every thread of a block as a Python
        thread, and the blocks one after another. Shared memory, `cuda.syncthreads()` and atomics compute what they would
        on the GPU, and an index past the end of an array raises `IndexError` instead of silently corrupting memory.
        Where the simulator is laxer than a GPU, `llm_algo.cuda.simulator` makes every launch strict: a
        `cuda.syncthreads()` that only some threads of a block reach (inside a branch, or after an early `return`), or
        two threads touching one shared-memory element between the same two barriers with one of them writing (a
        race), fails the launch with the block and the threads, whatever order the Python threads happened to run in.
        The simulator has no warps, so no warp shuffles (`p04.warp_primitives` models them). Keep grids to a few hundred
        threads. The dictionary from CUDA C++:

        | CUDA C++ | numba-cuda |
        | --- | --- |
        | `__global__ void k(float* x, ...)` | `@cuda.jit` on `def k(x, ...)`; arrays are NumPy arrays |
        | `blockIdx.x * blockDim.x + threadIdx.x` | `cuda.grid(1)` (or spelled out with `cuda.blockIdx.x`, ...) |
        | `blockDim.x * gridDim.x` | `cuda.gridsize(1)` |
        | `k<<<blocks, threads>>>(x, ...)` | `k[blocks, threads](x, ...)` |
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt
        import numpy as np
        import torch

        from llm_algo.cuda.simulator import cuda  # numba.cuda in its simulator: import it before anything imports numba
        from llm_algo.cuda.inline import compile_cuda
    """)
    lesson.md(r"""
        ## 3. Exercise `vector_add_sim`: one thread per element

        Write `add_kernel` (each thread adds the element at its global index, if that index is inside the arrays) and
        the launcher `vector_add_sim`, in three steps: check the inputs (NumPy, float32, 1-D, same shape) and raise a
        `ValueError` or `TypeError` with a message; allocate the output; launch $\lceil n / T \rceil$ blocks of $T$
        threads. Keep the kernel's signature: a check launches it directly on a NaN-filled output with guard elements
        after it.
    """)
    lesson.exercise(
        "vector_add_sim",
        r'''
        @cuda.jit
        def add_kernel(a, b, out, n):
            """out[i] = a[i] + b[i] for this thread's global index i, if i < n (a, b, out: float32 arrays)."""
            # TODO: my global index (cuda.grid(1), or blockIdx, blockDim and threadIdx); do nothing past the end
            ### BEGIN SOLUTION
            i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
            if i < n:
                out[i] = a[i] + b[i]
            ### END SOLUTION


        def vector_add_sim(a: np.ndarray, b: np.ndarray, threads_per_block: int = 64) -> np.ndarray:
            """a + b computed by add_kernel in the simulator: a, b 1-D float32 NumPy arrays of the same length (n,);
            returns a new float32 array (n,)."""
            # TODO 1: check the inputs (NumPy arrays, float32, 1-D, same shape, 1 <= threads_per_block <= 1024);
            #         raise ValueError/TypeError otherwise
            # TODO 2: allocate the output
            # TODO 3: launch enough blocks of threads_per_block threads to give every element a thread
            ### BEGIN SOLUTION
            if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
                raise TypeError(f"vector_add_sim takes NumPy arrays (tensor.numpy()), got {type(a)} and {type(b)}")
            if a.dtype != np.float32 or b.dtype != np.float32:
                raise TypeError(f"vector_add_sim needs float32 arrays, got {a.dtype} and {b.dtype}")
            if a.ndim != 1 or a.shape != b.shape:
                raise ValueError(f"vector_add_sim needs two 1-D arrays of the same length, got {a.shape} and {b.shape}")
            if not 1 <= threads_per_block <= 1024:  # 0 would divide by zero below; a GPU refuses more than 1024
                raise ValueError(f"vector_add_sim: threads_per_block must be in [1, 1024], got {threads_per_block}")
            n = a.shape[0]
            out = np.empty_like(a)
            blocks = (n + threads_per_block - 1) // threads_per_block  # ceil(n / T)
            if blocks > 0:  # a grid of zero blocks is not a valid launch
                add_kernel[blocks, threads_per_block](a, b, out, n)
            return out
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 4. Grid-stride loops, and why the index is 64-bit

        One thread per element ties the grid to $n$. For $n = 2^{30}$ that is four million blocks of 256 threads: it
        works (the x dimension of a grid allows $2^{31} - 1$ blocks), but every thread does one add and exits, and the
        kernel cannot be reused with a grid chosen for the *machine*. The **grid-stride loop** (网格跨步循环) decouples
        the two: launch a grid that fills the GPU — a few blocks per SM — and let each thread walk through the array in
        steps of the whole grid:

        $$
        \text{start} = \text{blockIdx.x} \cdot T + \text{threadIdx.x}, \qquad
        \text{stride} = T \cdot G, \qquad
        i \in \{\text{start},\ \text{start} + \text{stride},\ \text{start} + 2\,\text{stride}, \dots\} \cap [0, n) .
        $$

        ```
        n = 10, T = 2, G = 2: stride = 4 threads in the grid
        element:  0 1 2 3 | 4 5 6 7 | 8 9
        thread:   0 1 2 3 | 0 1 2 3 | 0 1       (block = thread // 2)
        ```

        Consecutive threads still touch consecutive elements on every pass, so each warp's loads stay coalesced (合并访存:
        32 threads reading 32 neighbouring floats are served by a few 32-byte memory transactions). Any grid is correct,
        including one larger than $n$. Stepping by `blockDim.x` alone (one block's width) instead of the whole grid is
        the classic mistake: blocks then overlap, and an in-place update is applied several times.

        **64-bit indices.** `blockIdx.x * blockDim.x` is computed in 32-bit unsigned arithmetic, and an `int i` holds at
        most $2^{31} - 1$: a tensor of more than $2^{31}$ elements (8 GiB of float32; a vLLM KV-cache pool on an 80 GB
        GPU is often a single tensor of tens of billions of elements) makes the index wrap around and the kernel write
        to the wrong place, silently. Cast before multiplying: `static_cast<int64_t>(blockIdx.x) * blockDim.x`.
        PyTorch's own elementwise kernels check `TensorIterator::can_use_32bit_indexing()` and, when it fails, split the
        work into pieces that fit 32-bit offsets. Such sizes are too large for a check to allocate on every GPU, so this
        one is on you: the checks below cannot see it.

        The picture below comes from a small kernel in the simulator that records, for each element, which thread of the
        grid processed it: with one thread per element (left), and with a grid-stride loop over a grid of 2 blocks
        (right).
    """)
    lesson.code(r"""
        @cuda.jit
        def owner_kernel(owner, n):
            # each thread writes its global thread id into the elements it processes (a grid-stride loop)
            i = cuda.grid(1)
            while i < n:
                owner[i] = cuda.grid(1)
                i += cuda.gridsize(1)

        n, threads = 40, 8
        fig, axes = plt.subplots(1, 2, figsize=(11, 2.6))
        for ax, blocks, title in [
            (axes[0], math.ceil(n / threads), f"one thread per element: {math.ceil(n / threads)} blocks x {threads}"),
            (axes[1], 2, f"grid-stride loop: 2 blocks x {threads} (stride {2 * threads})"),
        ]:
            owner = np.full(n, -1, dtype=np.int64)
            owner_kernel[blocks, threads](owner, n)
            block_of = owner // threads
            ax.bar(np.arange(n), 1, color=plt.cm.tab10(block_of % 10), edgecolor="white", width=1.0)
            for x, t in enumerate(owner):
                ax.text(x, 0.5, str(t), ha="center", va="center", fontsize=6)
            ax.set_title(title + " (colour: block)", fontsize=9)
            ax.set_xlabel("element index i (label: the global thread id that processed it)")
            ax.set_yticks([])
        plt.tight_layout()
        plt.show()
    """)
    lesson.md(r"""
        ## 5. Exercise `saxpy_sim`: a grid-stride loop, in place

        SAXPY (BLAS level 1: *single-precision* $a x$ *plus* $y$) updates $y \leftarrow \alpha x + y$ in place. In place
        is what makes the stride matter: an element processed twice ends up with $2\alpha x$ added, and one never
        processed keeps its old value. Write the kernel with a grid-stride loop, and a launcher that launches **exactly**
        `blocks` blocks of `threads_per_block` threads — usually far fewer threads than elements — and returns nothing
        (it modifies `y`). Like `vector_add_sim`, it refuses what the kernel cannot take (anything but NumPy arrays,
        another dtype, different shapes), and it refuses a grid that a GPU would refuse: `blocks < 1`, or
        `threads_per_block` outside $[1, 1024]$ (the most threads a block can have), with a `ValueError` that names the
        argument, the allowed range and the value it got. The simulator would not catch these for you: it runs a block
        of 0 threads as a launch that does nothing (`y` comes back unchanged, silently) and a block of 2048 threads as
        if the hardware allowed it.
    """)
    lesson.exercise(
        "saxpy_sim",
        r'''
        @cuda.jit
        def saxpy_kernel(alpha, x, y, n):
            """y[i] = alpha * x[i] + y[i] for every i < n, whatever the grid (a grid-stride loop); x, y float32."""
            # TODO: start at my global index, step by the number of threads in the whole grid, stop at n
            ### BEGIN SOLUTION
            i = cuda.grid(1)
            stride = cuda.gridsize(1)  # blockDim.x * gridDim.x
            while i < n:
                y[i] = alpha * x[i] + y[i]
                i += stride
            ### END SOLUTION


        def saxpy_sim(alpha: float, x: np.ndarray, y: np.ndarray, blocks: int = 2, threads_per_block: int = 32) -> None:
            """y <- alpha * x + y in place, by saxpy_kernel on a grid of exactly `blocks` x `threads_per_block`
            threads; x, y 1-D float32 NumPy arrays of the same length (n,)."""
            # TODO 1: check the inputs (float32 1-D arrays of the same shape; blocks >= 1; 1 <= threads_per_block <= 1024)
            # TODO 2: launch the given grid; the loop in the kernel covers every element
            ### BEGIN SOLUTION
            if not (isinstance(x, np.ndarray) and isinstance(y, np.ndarray)):
                raise TypeError(f"saxpy_sim takes NumPy arrays, got {type(x)} and {type(y)}")
            if x.dtype != np.float32 or y.dtype != np.float32:
                raise TypeError(f"saxpy_sim needs float32 arrays, got {x.dtype} and {y.dtype}")
            if x.ndim != 1 or x.shape != y.shape:
                raise ValueError(f"saxpy_sim needs two 1-D arrays of the same length, got {x.shape} and {y.shape}")
            if blocks < 1:
                raise ValueError(f"saxpy_sim: blocks must be >= 1 (a grid of zero blocks is an invalid launch), got {blocks}")
            if not 1 <= threads_per_block <= 1024:
                raise ValueError(
                    f"saxpy_sim: threads_per_block must be in [1, 1024] (a CUDA block has at most 1024 threads), "
                    f"got {threads_per_block}"
                )
            saxpy_kernel[blocks, threads_per_block](np.float32(alpha), x, y, x.shape[0])
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 6. The real thing: CUDA C++ from a notebook cell

        `compile_cuda(SOURCE, ["f", "g"], name=...)` (in `llm_algo.cuda.inline`) hands your source to
        `torch.utils.cpp_extension.load_inline`: nvcc compiles it with PyTorch's headers, pybind11 exposes the host
        functions `f` and `g` (functions that run on the CPU and take `torch::Tensor`s), and you call them from Python.
        The first build takes tens of seconds; the build is cached under `.llm_algo/cuda/` by a hash of the source, so
        grading an unchanged kernel again loads it in a second. A compile error names the line of *your* source (and of
        this cell) where nvcc stopped.

        A host function that launches a kernel has four jobs:

        1. **Refuse what the kernel cannot handle**, with `TORCH_CHECK(cond, "message", values...)`, which raises a
           Python `RuntimeError`: the device (a CPU pointer handed to a kernel is an illegal-address fault), the dtype
           (`data_ptr<float>()` on a double tensor reads garbage), contiguity (the kernel assumes element $i$ lives at
           `ptr + i`; a transposed or sliced tensor breaks that silently), the shapes.
        2. **Allocate the output** with torch (`torch::empty_like`), so PyTorch's caching allocator owns it.
        3. **Launch on PyTorch's current stream**, `kernel<<<blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>`,
           so the kernel is ordered with the ops before and after it (the default stream would race with a
           `torch.cuda.Stream` the caller is in). `c10::cuda::CUDAGuard guard(a.device())` makes `a`'s GPU the current
           one.
        4. **Check the launch.** A launch is asynchronous and returns nothing: the CPU queues it and moves on. A bad
           configuration (0 blocks, 2048 threads per block, too much shared memory) is reported by the next
           `cudaGetLastError()`; `C10_CUDA_KERNEL_LAUNCH_CHECK()` calls it and throws if it is not `cudaSuccess`.
           Errors *while* the kernel runs (an illegal address) appear only at the next synchronising call —
           `.item()`, `.cpu()`, `torch.cuda.synchronize()` — far from their cause, and they are *sticky*: the context
           is dead until the process exits. To find them, run with `CUDA_LAUNCH_BLOCKING=1` (every launch waits) or
           under `compute-sanitizer`.

        ## 7. Exercise `vector_add_cuda`: the vector add in CUDA C++

        Fill in `VECTOR_ADD_CUDA` (each `raise NotImplementedError` line inside the string is C++ for you to write):
        the grid-stride `add_kernel` with `int64_t` indices; `add_into`, which validates its arguments and launches
        exactly `blocks` x `threads` on the current stream, then checks the launch; and `vector_add`, which allocates
        the output and picks the grid: $\min(\lceil n/256 \rceil,\ 32 \cdot \text{SMs})$ blocks of 256 threads (an
        empty input launches nothing). Then make `load_vector_add` build it. Without a GPU this cell still runs (the
        build happens on the first call), and the checks read *needs a GPU*.
    """)
    lesson.exercise(
        "vector_add_cuda",
        r'''
        VECTOR_ADD_CUDA = r"""
        #include <c10/cuda/CUDAException.h>
        #include <c10/cuda/CUDAGuard.h>
        #include <c10/cuda/CUDAStream.h>

        // out[i] = a[i] + b[i] for every i < n, whatever the grid: a grid-stride loop with 64-bit indices.
        __global__ void add_kernel(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ out,
                                   int64_t n) {
            // TODO: start = my global index, stride = threads in the grid, both int64_t; loop while i < n
            ### BEGIN SOLUTION
            int64_t start = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
            int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
            for (int64_t i = start; i < n; i += stride) {
                out[i] = a[i] + b[i];
            }
            ### END SOLUTION
        }

        // Launches exactly blocks x threads on torch's current stream, into an `out` the caller allocated.
        void add_into(torch::Tensor a, torch::Tensor b, torch::Tensor out, int64_t blocks, int64_t threads) {
            // TODO 1: TORCH_CHECK device (CUDA), dtype (float32), contiguity, equal shapes, 1 <= blocks < 2^31,
            //         1 <= threads <= 1024
            // TODO 2: launch add_kernel on c10::cuda::getCurrentCUDAStream(), then C10_CUDA_KERNEL_LAUNCH_CHECK()
            ### BEGIN SOLUTION
            TORCH_CHECK(a.is_cuda() && b.is_cuda() && out.is_cuda(), "add_into: a, b and out must be CUDA tensors");
            TORCH_CHECK(a.scalar_type() == torch::kFloat32 && b.scalar_type() == torch::kFloat32 &&
                            out.scalar_type() == torch::kFloat32,
                        "add_into: a, b and out must be float32, got ", a.scalar_type(), ", ", b.scalar_type(), ", ",
                        out.scalar_type());
            TORCH_CHECK(a.is_contiguous() && b.is_contiguous() && out.is_contiguous(),
                        "add_into: a, b and out must be contiguous (call .contiguous() first)");
            TORCH_CHECK(a.sizes() == b.sizes() && a.sizes() == out.sizes(), "add_into: shapes differ: ", a.sizes(),
                        ", ", b.sizes(), ", ", out.sizes());
            TORCH_CHECK(blocks >= 1 && blocks <= 2147483647, "add_into: blocks must be in [1, 2^31 - 1], got ", blocks);
            TORCH_CHECK(threads >= 1 && threads <= 1024, "add_into: threads must be in [1, 1024], got ", threads);
            const c10::cuda::CUDAGuard guard(a.device());
            cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
            add_kernel<<<static_cast<unsigned int>(blocks), static_cast<unsigned int>(threads), 0, stream>>>(
                a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), a.numel());
            C10_CUDA_KERNEL_LAUNCH_CHECK();  // cudaGetLastError(): a bad launch configuration throws here
            ### END SOLUTION
        }

        torch::Tensor vector_add(torch::Tensor a, torch::Tensor b) {
            // TODO: allocate out like a; blocks = min(ceil(n / 256), 32 * number of SMs) of 256 threads (ask
            //       cudaDeviceGetAttribute for cudaDevAttrMultiProcessorCount); an empty input launches nothing
            ### BEGIN SOLUTION
            TORCH_CHECK(a.is_cuda(), "vector_add: a must be a CUDA tensor");
            const c10::cuda::CUDAGuard guard(a.device());
            auto out = torch::empty_like(a);
            const int64_t n = a.numel();
            const int64_t threads = 256;
            if (n == 0) return out;  // nothing to do, and a grid of zero blocks is an invalid launch
            int sms = 0;
            C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, a.get_device()));
            const int64_t blocks = std::min<int64_t>((n + threads - 1) / threads, 32 * static_cast<int64_t>(sms));
            add_into(a, b, out, blocks, threads);
            return out;
            ### END SOLUTION
        }
        """


        def load_vector_add():
            """Your extension, built from VECTOR_ADD_CUDA (or loaded from the cache): a module with vector_add(a, b)
            and add_into(a, b, out, blocks, threads)."""
            # TODO: compile_cuda(VECTOR_ADD_CUDA, [the two host functions], name="p04_vector_add")
            ### BEGIN SOLUTION
            return compile_cuda(VECTOR_ADD_CUDA, ["vector_add", "add_into"], name="p04_vector_add")
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 8. Bandwidth against the roofline (GPU only)

        `python -m llm_algo bench p04.cuda_intro` times the reference `vector_add` (capped grid-stride grid), the same
        kernel launched with one thread per element through `add_into`, `torch.add`, and a device-to-device copy, with
        CUDA events (the median of many runs). The cell below plots your `vector_add` against `torch.add` for sizes from
        4 K to 256 M elements, as achieved bandwidth $12 n / t$; on a CPU it says so and does nothing.
    """)
    lesson.code(r"""
        if not torch.cuda.is_available():
            print("Benchmarks need a CUDA GPU; skipped here.")
        else:
            import triton.testing

            try:
                module = load_vector_add()
                sizes = [2 ** k for k in range(12, 29, 2)]
                rates = {"your vector_add": [], "torch.add": []}
                for n in sizes:
                    a, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
                    for label, fn in [("your vector_add", lambda: module.vector_add(a, b)), ("torch.add", lambda: a + b)]:
                        ms = triton.testing.do_bench(fn, return_mode="median")
                        rates[label].append(12 * n * 1e-9 / (ms * 1e-3))  # GB/s
                for label, values in rates.items():
                    plt.semilogx(sizes, values, marker="o", label=label)
                plt.xlabel("n (float32 elements)")
                plt.ylabel("GB/s (12 n bytes / time)")
                plt.title("vector add bandwidth")
                plt.legend()
                plt.show()
            except NotImplementedError:
                print("Implement vector_add_cuda first: this benchmark times your kernel.")
    """)
    lesson.md(r"""
        **Reading the numbers.** Measured on an H200 (torch 2.11, CUDA 13.0; `python -m llm_algo bench p04.cuda_intro`,
        one run, $n = 2^{28}$ float32, bytes moved per second): the capped grid-stride `vector_add` 3839 GB/s, the same
        kernel launched one thread per element through `add_into` 2881 GB/s, `torch.add` 4366 GB/s, and a
        device-to-device copy of 1 GiB 4207 GB/s (read plus write). So the grid-stride kernel reaches 91% of the copy
        (the target is 90%); `torch.add` does better than the copy because two reads per write suit HBM better than one
        read per write; and one thread per element is 25% slower: a grid of a million 256-thread blocks spends time
        dispatching and retiring blocks, which the capped grid (4224 blocks, each thread looping over about 250
        elements) does not.
        What to expect and why: at small sizes every kernel is *launch-bound* (a few microseconds of launch for nanoseconds of work),
        so both curves sit far below the roofline; from a few million elements on, a correct memory-bound kernel should
        be within a few percent of the device-to-device copy (the target for this lesson is 90% of it at $2^{28}$
        elements). The grid-stride loop buys flexibility (any $n$, a grid sized to the machine, per-thread set-up done
        once) and, as measured above, speed as well: fewer, longer-lived blocks.
    """)
    lesson.stop()
    lesson.md(r"""
        ## 9. Reading the solutions

        **`add_kernel` (simulator).** `cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x` is what `cuda.grid(1)`
        returns; either spelling is fine. The `if i < n` guard is the only thing standing between the last block's spare
        threads and the memory after the arrays: in the simulator they raise `IndexError`, on a GPU they write silently.
        The launcher rounds the block count *up* with integer arithmetic, `(n + T - 1) // T`, and skips the launch for
        an empty input, because a grid of zero blocks is an invalid configuration.

        **`saxpy_kernel`.** `cuda.gridsize(1)` is `blockDim.x * gridDim.x`, the number of threads in the grid. Each
        thread starts at its global index and steps by that amount, so the threads of the grid tile the array exactly
        once. The launcher must launch the grid it was given: the check launches 1 block of 32 threads over 257 elements,
        and 4 blocks of 64 over 50, and a kernel that only works for $\lceil n/T \rceil$ blocks fails both. Its checks
        of `blocks` and `threads_per_block` are the ones a GPU makes at launch time (`cudaErrorInvalidConfiguration`),
        done early with a better message: the check passes 0, -1 and 1025 threads per block and expects a refusal, and
        launches 1 and 1024 threads per block and expects them to run.

        **The C++.** `static_cast<int64_t>(blockIdx.x) * blockDim.x` does the multiplication in 64 bits; writing
        `int64_t i = blockIdx.x * blockDim.x + threadIdx.x` would not help, since the product is computed in 32 bits
        before the conversion. `__restrict__` promises the compiler that the three pointers do not alias, which lets it
        keep loads in registers and reorder them. `add_into` checks everything the kernel assumes before touching a
        pointer, and the blocks and threads it is given (the hardware would refuse 2048 threads per block too, but only
        through the launch check, with a less useful message). `vector_add` caps the grid at 32 blocks per SM: enough
        resident warps to hide memory latency, and no more blocks than the hardware can schedule in a few waves; the
        grid-stride loop covers the rest.

        **The usual mistakes, and why they are wrong**: `i <= n` (a guard
        element gets written), $\lfloor n/T \rfloor$ blocks (the tail stays NaN), ignoring `blockIdx` (every block
        redoes the first block), stepping by `blockDim.x` instead of the grid (in place, elements get $\alpha x$ added
        twice), an `if` where the loop should be (only the first grid-width of elements is computed), a launcher that
        sizes the grid from $n$ instead of the `blocks` it was given, a `saxpy_sim` that takes 0, or more than 1024,
        threads per block (the simulator runs both without a word), computing the result in NumPy or torch instead
        of the kernel, no contiguity check (a sliced input gives wrong numbers silently), no launch check (2048 threads
        per block fails silently and leaves the output untouched), and launching zero blocks for an empty input.

        **Cost and production.** One read of `a` and `b` and one write of `out`, $12n$ bytes: nothing to save inside the
        kernel, only around it (fuse the add into a neighbour, as in `p03.fused_elementwise`). PyTorch's elementwise
        kernels (`aten/src/ATen/native/cuda/CUDALoops.cuh`) go further than this one: each thread handles several
        elements with vectorized 16-byte loads (`float4`), the launcher takes the current stream and checks the launch
        exactly as here, and `TensorIterator` handles strides, broadcasting, dtype promotion and the 32-bit index limit.
        Next: `p04.reduction`, where threads must cooperate through shared memory.
    """)
    lesson.mistakes()
    return lesson
