"""Source of 04_CUDA_Systems/04_Reduction.ipynb (build with `python -m llm_algo build p04.reduction`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p04.reduction",
        path="04_CUDA_Systems/04_Reduction.ipynb",
        title_en="Parallel reduction: shared-memory trees, two passes, atomics and warp shuffles",
        title_zh="并行归约：共享内存树、两遍归约、原子操作与 warp shuffle",
        difficulty="medium",
        device="cpu",
        minutes=100,
        prerequisites=["p04.cuda_intro"],
    )
    lesson.title(
        intro=r"""
        A vector add needs no cooperation: each thread owns its element. A **reduction** (归约) — a sum, a max, a norm —
        turns $n$ numbers into one, so threads must combine each other's results. Reductions are everywhere in an LLM:
        the mean of squares in every RMSNorm, the max and the sum of every softmax row, the loss, the gradient norm that
        clipping computes over billions of parameters. They are memory-bound (one add per 4-byte load), so a good
        reduction runs at the speed of *reading* its input once; a naive one runs many times slower.

        **You will implement**, in numba-cuda's simulator (graded on every machine): a block-level tree reduction in
        shared memory with sequential addressing and the first add during the load, driven pass after pass by a
        two-pass launcher; and a single-pass sum with atomics. Then, in CUDA C++ (graded on a GPU), the modern kernel:
        grid-stride accumulation in registers, a shared-memory tree down to one warp, `__shfl_down_sync` for the last 32
        values, and both endings — a second pass over the per-block partials, and one `atomicAdd` per block.
        **Graded against** float64 sums on sizes that are not multiples of the block, with NaN-filled partial buffers
        and guard elements after them, inputs that are windows of larger random buffers (a read past the end changes
        the sum), and a count of the atomic operations.
    """
    )
    lesson.md(r"""
        ## 本节要点

        - **问题**：归约把 $n$ 个数变成一个（RMSNorm 的平方均值、softmax 的 max 和 sum、loss、梯度范数），每读 4 字节只做一次加法，是 memory-bound 的；目标是以"读一遍输入"的速度完成。
        - **Block 内的树形归约**：每个线程把值写进 shared memory，`__syncthreads()` 之后每一步一半的线程把 `shared[t + s]` 加到 `shared[t]`，$\log_2 T$ 步得到 block 的和；每一步之间都要 `__syncthreads()`，否则读到还没写好的值（数据竞争）。
        - **优化阶梯**（Harris 2007）：交错寻址（`t % (2s) == 0`，warp 分化）→ 顺序寻址（`t < s`，无 bank conflict）→ 加载时先做一次加法（线程数减半）→ 展开最后一个 warp → 每个线程先用 grid-stride 循环在寄存器里累加多个元素；现代 GPU 上最后 32 个值用 `__shfl_down_sync(0xffffffff, v, offset)`，不再依赖 warp 同步的隐式假设。
        - **跨 block**：block 之间不能同步。两遍归约：第一遍每个 block 写一个 partial，第二遍再归约 partial（结果确定）；或者每个 block 用一次 `atomicAdd`（单遍，但浮点加法顺序不确定）。
        - **原子操作**：同一地址上的 atomic 是串行的：每个线程一次 atomic 就是 $T \cdot G$ 次串行加法；先在 block 内归约，只做 $G$ 次。
        - **精度**：float32 累加误差随加法链长度增长；树形/分块求和的误差约为 $O(\log n)\,\varepsilon$，顺序累加约为 $O(n)\,\varepsilon$。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. Why a reduction is not an elementwise kernel

        $$
        s = \sum_{i=0}^{n-1} x_i, \qquad x \in \mathbb{R}^{n}\ (\text{float32}), \qquad s \in \mathbb{R} .
        $$

        Additions are associative in exact arithmetic, so any bracketing gives the same $s$; a parallel reduction picks
        the bracketing that lets threads work at once. With $T$ threads in a block, a **tree** (归约树) takes
        $\log_2 T$ steps: at each step half of the remaining threads add a partner's value to their own.

        ```
        T = 8, shared = [x0 x1 x2 x3 x4 x5 x6 x7]
        stride 4: threads 0-3:  s[t] += s[t + 4]   ->  [x0+x4  x1+x5  x2+x6  x3+x7  . . . .]
        stride 2: threads 0-1:  s[t] += s[t + 2]   ->  [x0+x4+x2+x6  x1+x5+x3+x7  . . .]
        stride 1: thread  0:    s[0] += s[1]       ->  [sum ...]
        ```

        The threads share their values through **shared memory** (共享内存): a scratchpad of up to 228 KB per SM on an
        H100/H200, about 100 times faster than HBM, visible to every thread of a block and to no other block. Between
        two steps every thread must have finished writing before any thread reads: `__syncthreads()` is that barrier
        (屏障). A missing barrier is a **data race** (数据竞争): a thread reads its partner's old value, and the sum is
        wrong, sometimes.

        **Across blocks** there is no barrier inside a kernel (blocks may not even be resident at the same time). Two
        ways to finish:

        - **two passes** (两遍归约): pass 1 writes one partial sum per block, $G$ values; pass 2 reduces them with one
          block. Deterministic: the same input gives bit-identical results.
        - **atomics** (原子操作): each block adds its partial into the result with `atomicAdd`, a read-modify-write the
          memory system performs indivisibly. One kernel, but the order of the additions varies from run to run, so
          the float32 result varies in its last bits — why PyTorch's deterministic mode (`torch.use_deterministic_algorithms`)
          refuses or replaces kernels that use float atomics. Atomics on one address are serialised: one per thread
          ($T \cdot G$ of them) is much slower than one per block ($G$).

        **Traffic.** The kernel must read $4n$ bytes and writes almost nothing; its roofline is the read bandwidth, about
        half the time of a copy of the same tensor (a copy reads *and* writes). At 4.8 TB/s (H200), summing
        $2^{28}$ floats (1 GiB) cannot take less than about 0.22 ms.

        ## 2. The optimisation ladder

        Mark Harris's *Optimizing Parallel Reduction in CUDA* (NVIDIA, 2007) took a sum of $2^{22}$ integers (16 MiB) on
        a GeForce 8800 GTX (86.4 GB/s peak) through seven kernels; his measured bandwidths show what each step buys:

        | step | what changes | why it helps | GB/s (G80) |
        | --- | --- | --- | --- |
        | 1. interleaved addressing | active threads: `t % (2s) == 0`, add `s[t + s]` | — | 2.1 |
        | 2. interleaved, strided index | thread `t` works on `2 s t`: no divergent branch | whole warps idle instead of half-idle warps | 4.9 |
        | 3. sequential addressing | active threads `t < s`, add `s[t + s]` | no shared-memory bank conflicts (consecutive threads, consecutive banks) | 9.7 |
        | 4. first add during load | each thread loads two elements and adds them | half the threads were idle from the first step | 17.4 |
        | 5. unroll the last warp | no `__syncthreads()` once $s \le 32$ | the last 6 steps ran in one warp anyway | 31.3 |
        | 6. complete unrolling | block size a template parameter | no loop overhead | 44.0 |
        | 7. multiple elements per thread | each thread sums many elements first (a grid-stride loop) | fewer blocks, fewer trees, loads in flight | 62.7 |

        Step 7 matters most on today's GPUs: almost all of the work happens in registers, one add per load, and the tree
        runs once per block of a grid sized to the machine. Step 5, as Harris wrote it, relied on the 32 threads of a warp
        running in lockstep (a `volatile` shared array and no barrier); since Volta (2017) the threads of a warp may be
        scheduled independently and that code is a race. The modern last warp uses **warp shuffles** (线程束洗牌):
        `__shfl_down_sync(0xffffffff, v, offset)` returns `v` from the lane `offset` above, through registers, with no
        shared memory and no barrier; five of them ($16, 8, 4, 2, 1$) sum 32 values. The mask `0xffffffff` names the
        lanes that take part: all 32.

        The picture below shows which threads work at each step of a 64-thread (two-warp) tree, for interleaved and for
        sequential addressing: the same number of additions, but with interleaved addressing the active threads are
        scattered over every warp, and with sequential addressing they are packed into the first warps, which leaves
        whole warps free.
    """)
    lesson.setup(r"""
        import matplotlib.pyplot as plt
        import numpy as np
        import torch

        from llm_algo.cuda.simulator import cuda  # numba.cuda in its simulator: import it before anything imports numba
        from llm_algo.cuda.inline import compile_cuda

        THREADS = 64  # threads per block in the simulator exercises: a power of two
    """)
    lesson.code(r"""
        T = 64  # two warps
        steps = 6  # log2(64)
        fig, axes = plt.subplots(1, 2, figsize=(11, 3))
        panels = [
            ("interleaved addressing: threads t % (2s) == 0 add s[t + s]", [2 ** k for k in range(steps)],
             lambda t, s: t % (2 * s) == 0),
            ("sequential addressing: threads t < s add s[t + s]", [T // 2 ** k for k in range(1, steps + 1)],
             lambda t, s: t < s),
        ]
        for ax, (title, strides, active) in zip(axes, panels):
            grid = np.array([[1.0 if active(t, s) else 0.0 for t in range(T)] for s in strides])
            ax.imshow(grid, cmap="Blues", aspect="auto", vmin=0, vmax=1.4)
            ax.axvline(31.5, color="black", linewidth=1)  # the boundary between warp 0 and warp 1
            ax.set_yticks(range(steps), [f"step {k + 1} (s={s})" for k, s in enumerate(strides)])
            ax.set_xticks([0, 16, 32, 48, 63])
            ax.set_xlabel("thread t (black line: warp 0 | warp 1; blue: adds at this step)")
            ax.set_title(title, fontsize=9)
        plt.tight_layout()
        plt.show()
    """)
    lesson.md(r"""
        ## 3. Exercise `block_sum_sim`: a block's tree, and two passes

        In the simulator, with `THREADS = 64` threads per block (set in the setup cell). Block $b$ reduces the
        $2 \cdot \text{THREADS}$ elements $x[2Tb : 2T(b+1)]$ (those below $n$): thread $t$ loads elements
        $i = 2Tb + t$ and $i + T$ and adds them (step 4 of the ladder; 0 for an element past $n$), stores the sum in
        `shared[t]`, then the tree with sequential addressing, then thread 0 writes `partial[b]`. The launcher
        `sum_two_pass_sim` reduces $x$ to $\lceil n / 2T \rceil$ partials, then reduces the partials the same way, and so
        on until one value is left (for the sizes here, two passes), and returns it as a float32 array of shape `(1,)`.
        In the simulator a missing `cuda.syncthreads()` fails the launch as a race (every launch traces its shared memory:
        a thread reading a value its partner writes between the same two barriers is found whatever order the threads
        ran in), and so does a barrier that only some threads reach, such as one inside `if t < stride:` (on a GPU it
        hangs or pairs up the wrong barriers; the simulator alone would wait only for the threads still running). A check
        also replays each warp's shared loads and stores as bank wavefronts: sequential addressing is conflict-free.
    """)
    lesson.exercise(
        "block_sum_sim",
        r'''
        @cuda.jit
        def block_sum_kernel(x, partial, n):
            """partial[b] = sum of x[2*THREADS*b : 2*THREADS*(b+1)] (the elements below n), b = blockIdx.x; launched
            with THREADS threads per block. x, partial: float32 arrays."""
            shared = cuda.shared.array(THREADS, np.float32)
            t = cuda.threadIdx.x
            # TODO 1: first add during the load: elements i = 2*THREADS*b + t and i + THREADS (0 if >= n) -> shared[t]
            # TODO 2: the tree with sequential addressing, stride = THREADS // 2, ..., 1; a barrier after every step
            # TODO 3: thread 0 writes the block's sum
            ### BEGIN SOLUTION
            i = cuda.blockIdx.x * 2 * THREADS + t
            value = np.float32(0.0)
            if i < n:
                value = x[i]
            if i + THREADS < n:
                value += x[i + THREADS]
            shared[t] = value
            cuda.syncthreads()
            stride = THREADS // 2
            while stride > 0:
                if t < stride:
                    shared[t] += shared[t + stride]
                cuda.syncthreads()
                stride //= 2
            if t == 0:
                partial[cuda.blockIdx.x] = shared[0]
            ### END SOLUTION


        def sum_two_pass_sim(x: np.ndarray) -> np.ndarray:
            """The sum of a 1-D float32 NumPy array x (n,), by block_sum_kernel, pass after pass until one value is
            left; returns a float32 array of shape (1,)."""
            # TODO 1: check x (a 1-D float32 NumPy array); raise TypeError/ValueError otherwise
            # TODO 2: launch ceil(n / (2 * THREADS)) blocks (at least one) into a partials array; repeat on the
            #         partials until a single block did the work
            ### BEGIN SOLUTION
            if not isinstance(x, np.ndarray) or x.dtype != np.float32:
                raise TypeError(f"sum_two_pass_sim needs a float32 NumPy array, got {type(x).__name__} {getattr(x, 'dtype', '')}")
            if x.ndim != 1:
                raise ValueError(f"sum_two_pass_sim needs a 1-D array, got shape {x.shape}")
            values = x
            while True:
                n = values.shape[0]
                blocks = max(1, (n + 2 * THREADS - 1) // (2 * THREADS))
                partial = np.empty(blocks, dtype=np.float32)
                block_sum_kernel[blocks, THREADS](values, partial, n)
                if blocks == 1:
                    return partial
                values = partial
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 4. Exercise `atomic_sum_sim`: one pass with atomics

        The simplest single-pass sum: every thread accumulates its grid-stride slice of $x$ in a register, then adds it
        into `out[0]` with `cuda.atomic.add(out, 0, value)` (CUDA C++: `atomicAdd(&out[0], value)`). The launcher
        launches exactly `blocks` blocks of `THREADS` threads into a zeroed `out`. A plain `out[0] += value` is a
        read-modify-write that another thread can interleave with: on a GPU most updates get lost. The simulator runs
        the blocks one after another and rarely switches threads in the middle of `+=`, so it would hardly ever show the
        race; the check therefore also counts the atomic additions your kernel makes.
    """)
    lesson.exercise(
        "atomic_sum_sim",
        r'''
        @cuda.jit
        def atomic_sum_kernel(x, out, n):
            """out[0] += the sum of this thread's grid-stride slice of x (float32), with an atomic add."""
            # TODO: sum x[i] for i = my global index, stepping by the threads of the grid, below n; then atomically
            #       add that sum to out[0]
            ### BEGIN SOLUTION
            i = cuda.grid(1)
            value = np.float32(0.0)
            while i < n:
                value += x[i]
                i += cuda.gridsize(1)
            cuda.atomic.add(out, 0, value)
            ### END SOLUTION


        def sum_atomic_sim(x: np.ndarray, blocks: int = 2) -> np.ndarray:
            """The sum of a 1-D float32 NumPy array x (n,) by atomic_sum_kernel on exactly `blocks` blocks of THREADS
            threads; returns a float32 array of shape (1,)."""
            # TODO 1: check x (a 1-D float32 NumPy array) and blocks >= 1
            # TODO 2: a zeroed (1,) float32 output; launch the given grid; return the output
            ### BEGIN SOLUTION
            if not isinstance(x, np.ndarray) or x.dtype != np.float32:
                raise TypeError(f"sum_atomic_sim needs a float32 NumPy array, got {type(x).__name__} {getattr(x, 'dtype', '')}")
            if x.ndim != 1:
                raise ValueError(f"sum_atomic_sim needs a 1-D array, got shape {x.shape}")
            if blocks < 1:
                raise ValueError(f"a grid needs at least one block, got {blocks}")
            out = np.zeros(1, dtype=np.float32)
            atomic_sum_kernel[blocks, THREADS](x, out, x.shape[0])
            return out
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 5. Exercise `reduction_cuda`: the modern reduction in CUDA C++

        Fill in `REDUCTION_CUDA` (each `raise NotImplementedError` line inside the string is C++ for you to write):

        - `thread_sum(x, n)`: this thread's grid-stride sum in a register (step 7 of the ladder; `int64_t` indices);
        - `block_reduce(v)`: every thread of a block calls it; the block's total comes back in thread 0. Store `v` in a
          `__shared__ float shared[THREADS]`, barrier, tree with sequential addressing while the stride is at least 32
          (a barrier after each step), then warp 0 takes `shared[lane]` and finishes with five `__shfl_down_sync`;
        - `block_sums(x, partial)`: launches `partial.numel()` blocks of `THREADS`; block $b$ writes its total to
          `partial[b]` (the totals add up to the sum of $x$; which elements each block sums is yours to choose);
        - `sum_two_pass(x)`: $\min(\max(\lceil n/2T \rceil, 1), 1024)$ partials, then one block over them; returns a 0-d
          float32 tensor;
        - `sum_atomic(x)`: a zeroed 0-d output, the same grid, one `atomicAdd` per block.

        Validate with `TORCH_CHECK` (CUDA, float32, contiguous; `partial` non-empty), launch on the current stream,
        check each launch. Then make `load_reduction` build it.
    """)
    lesson.exercise(
        "reduction_cuda",
        r'''
        REDUCTION_CUDA = r"""
        #include <c10/cuda/CUDAException.h>
        #include <c10/cuda/CUDAGuard.h>
        #include <c10/cuda/CUDAStream.h>

        constexpr int THREADS = 256;  // threads per block: a power of two, at least 64

        // This thread's sum of x[i] over its grid-stride slice of [0, n).
        __device__ float thread_sum(const float* __restrict__ x, int64_t n) {
            // TODO: start at the global index, step by the threads of the grid (int64_t), accumulate in a register
            ### BEGIN SOLUTION
            float value = 0.0f;
            const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
            for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
                value += x[i];
            }
            return value;
            ### END SOLUTION
        }

        // The sum of v over the block (THREADS threads, all of which call this), valid in thread 0.
        __device__ float block_reduce(float v) {
            __shared__ float shared[THREADS];
            // TODO 1: shared[t] = v; barrier; sequential-addressing tree while stride >= 32, a barrier after each step
            // TODO 2: warp 0: v = shared[lane]; five __shfl_down_sync(0xffffffff, v, offset), offset = 16 ... 1
            ### BEGIN SOLUTION
            shared[threadIdx.x] = v;
            __syncthreads();
            for (int stride = THREADS / 2; stride >= 32; stride /= 2) {
                if (threadIdx.x < stride) shared[threadIdx.x] += shared[threadIdx.x + stride];
                __syncthreads();
            }
            if (threadIdx.x < 32) {
                v = shared[threadIdx.x];
                for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffff, v, offset);
            }
            return v;
            ### END SOLUTION
        }

        __global__ void block_sums_kernel(const float* __restrict__ x, float* __restrict__ partial, int64_t n) {
            // TODO: the block's total of the threads' sums; thread 0 writes it to partial[blockIdx.x]
            ### BEGIN SOLUTION
            const float total = block_reduce(thread_sum(x, n));
            if (threadIdx.x == 0) partial[blockIdx.x] = total;
            ### END SOLUTION
        }

        __global__ void atomic_sum_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t n) {
            // TODO: the block's total; thread 0 adds it to *out atomically
            ### BEGIN SOLUTION
            const float total = block_reduce(thread_sum(x, n));
            if (threadIdx.x == 0) atomicAdd(out, total);
            ### END SOLUTION
        }

        // One partial sum per element of `partial` (its numel() is the number of blocks).
        void block_sums(torch::Tensor x, torch::Tensor partial) {
            // TODO: TORCH_CHECK x and partial (CUDA, float32, contiguous, partial non-empty); launch; check the launch
            ### BEGIN SOLUTION
            TORCH_CHECK(x.is_cuda() && partial.is_cuda(), "block_sums: x and partial must be CUDA tensors");
            TORCH_CHECK(x.scalar_type() == torch::kFloat32 && partial.scalar_type() == torch::kFloat32,
                        "block_sums: x and partial must be float32, got ", x.scalar_type(), " and ",
                        partial.scalar_type());
            TORCH_CHECK(x.is_contiguous() && partial.is_contiguous(), "block_sums: x and partial must be contiguous");
            TORCH_CHECK(partial.numel() >= 1 && partial.numel() <= 2147483647,
                        "block_sums: partial needs between 1 and 2^31 - 1 elements, got ", partial.numel());
            const c10::cuda::CUDAGuard guard(x.device());
            const unsigned int blocks = static_cast<unsigned int>(partial.numel());
            block_sums_kernel<<<blocks, THREADS, 0, c10::cuda::getCurrentCUDAStream()>>>(
                x.data_ptr<float>(), partial.data_ptr<float>(), x.numel());
            C10_CUDA_KERNEL_LAUNCH_CHECK();
            ### END SOLUTION
        }

        torch::Tensor sum_two_pass(torch::Tensor x) {
            // TODO: partials for min(max(ceil(n / (2 * THREADS)), 1), 1024) blocks, then one block over them
            ### BEGIN SOLUTION
            TORCH_CHECK(x.is_cuda(), "sum_two_pass: x must be a CUDA tensor");
            const c10::cuda::CUDAGuard guard(x.device());
            const int64_t n = x.numel();
            const int64_t blocks = std::min<int64_t>(std::max<int64_t>((n + 2 * THREADS - 1) / (2 * THREADS), 1), 1024);
            auto partial = torch::empty({blocks}, x.options());
            block_sums(x, partial);
            auto out = torch::empty({1}, x.options());
            block_sums(partial, out);
            return out.reshape({});
            ### END SOLUTION
        }

        torch::Tensor sum_atomic(torch::Tensor x) {
            // TODO: a zeroed 0-d output; the same grid as sum_two_pass; one atomicAdd per block
            ### BEGIN SOLUTION
            TORCH_CHECK(x.is_cuda(), "sum_atomic: x must be a CUDA tensor");
            TORCH_CHECK(x.scalar_type() == torch::kFloat32, "sum_atomic: x must be float32, got ", x.scalar_type());
            TORCH_CHECK(x.is_contiguous(), "sum_atomic: x must be contiguous");
            const c10::cuda::CUDAGuard guard(x.device());
            const int64_t n = x.numel();
            auto out = torch::zeros({}, x.options());
            const int64_t blocks = std::min<int64_t>(std::max<int64_t>((n + 2 * THREADS - 1) / (2 * THREADS), 1), 1024);
            atomic_sum_kernel<<<static_cast<unsigned int>(blocks), THREADS, 0, c10::cuda::getCurrentCUDAStream()>>>(
                x.data_ptr<float>(), out.data_ptr<float>(), n);
            C10_CUDA_KERNEL_LAUNCH_CHECK();
            return out;
            ### END SOLUTION
        }
        """


        def load_reduction():
            """Your extension, built from REDUCTION_CUDA (or loaded from the cache): a module with block_sums,
            sum_two_pass and sum_atomic."""
            # TODO: compile_cuda(REDUCTION_CUDA, [the three host functions], name="p04_reduction")
            ### BEGIN SOLUTION
            return compile_cuda(REDUCTION_CUDA, ["block_sums", "sum_two_pass", "sum_atomic"], name="p04_reduction")
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 6. Bandwidth against the roofline (GPU only)

        `python -m llm_algo bench p04.reduction` times `sum_two_pass`, `sum_atomic` and `torch.sum` on $2^{28}$ float32
        elements, as read bandwidth $4n / t$, next to a device-to-device copy (which reads and writes, so a reduction
        can report up to about twice the copy's figure if reads alone run at full speed). The cell below times your
        two kernels against `torch.sum` over sizes; on a CPU it says so and does nothing.
    """)
    lesson.code(r"""
        if not torch.cuda.is_available():
            print("Benchmarks need a CUDA GPU; skipped here.")
        else:
            import triton.testing

            try:
                module = load_reduction()
                sizes = [2 ** k for k in range(12, 29, 2)]
                providers = {
                    "your sum_two_pass": lambda x: module.sum_two_pass(x),
                    "your sum_atomic": lambda x: module.sum_atomic(x),
                    "torch.sum": lambda x: x.sum(),
                }
                rates = {label: [] for label in providers}
                for n in sizes:
                    x = torch.randn(n, device="cuda")
                    for label, fn in providers.items():
                        ms = triton.testing.do_bench(lambda: fn(x), return_mode="median")
                        rates[label].append(4 * n * 1e-9 / (ms * 1e-3))  # GB/s read
                for label, values in rates.items():
                    plt.semilogx(sizes, values, marker="o", label=label)
                plt.xlabel("n (float32 elements)")
                plt.ylabel("GB/s read (4 n bytes / time)")
                plt.title("sum: bandwidth")
                plt.legend()
                plt.show()
            except NotImplementedError:
                print("Implement reduction_cuda first: this benchmark times your kernels.")
    """)
    lesson.md(r"""
        **Reading the numbers.** Measured on an H200 (torch 2.11, CUDA 13.0; `python -m llm_algo bench p04.reduction`,
        one run, $n = 2^{28}$ float32, bytes read per second): `sum_two_pass` 4200 GB/s, `sum_atomic` 4222 GB/s,
        `torch.sum` 4204 GB/s, and the device-to-device copy 4224 GB/s (read plus write). Both kernels are within 1% of
        the copy and of `torch.sum`: the target of 90% is met. What to expect and why: the target for this lesson is 90% of the copy bandwidth at $2^{28}$ elements. Both kernels read the
        input once; the two-pass version pays a second, tiny launch (1024 partials), which costs a few microseconds and
        is invisible at this size but dominates below about a million elements. The atomic version saves that launch
        and does 1024 atomic additions to one address, also invisible at this size; with one atomic per *thread*
        instead (the simulator exercise) it would serialise about 260 000 additions.
    """)
    lesson.stop()
    lesson.md(r"""
        ## 7. Reading the solutions

        **`block_sum_kernel`.** The first add during the load makes each of the 64 threads start with two elements, so
        a block covers 128 and no thread is idle at the first step. Both loads are guarded separately: the last block
        may have its first element in range and its partner out of range. The barrier after the store and after each
        step are both needed; the loop runs $\log_2 64 = 6$ steps, and thread 0 writes the result after the last barrier.

        **`sum_two_pass_sim`.** Each pass divides the count by 128, so 1 000 elements take two passes (8 partials, then
        1). The loop stops when a single block did the work, which also handles $n = 0$ (one block, nothing loaded,
        partial 0). Every pass reads only what the previous wrote: one extra launch, no atomics, a deterministic result.

        **`atomic_sum_kernel`.** The grid-stride loop sums in a register (registers are private, no race), and only the
        final add touches shared state, atomically. The launcher must zero `out` first: `np.empty` would start from
        whatever the memory held.

        **The C++.** `thread_sum` does almost all the work: with 1024 blocks of 256 threads and $n = 2^{28}$ every
        thread adds 1024 elements in a register before any cooperation. `block_reduce` stores once, runs the tree while
        the stride is at least 32 (three steps for 256 threads), then warp 0 finishes with shuffles: no shared memory
        and no barrier in the last five steps. `__shfl_down_sync(0xffffffff, v, offset)` requires all 32 lanes named in
        the mask to execute it, which is why the whole of warp 0 enters the `if`. The two-pass host function reuses
        `block_sums` for its second pass, with a one-element `partial`; the atomic one adds 1024 block totals into a
        zeroed scalar.

        **The usual mistakes, and why they are wrong**. In the simulator: no
        barrier between the steps of the tree or between the store and the tree (threads read partners' values before
        they are written: a race the strict launch reports), the tree's barrier inside `if t < stride:` (a barrier only
        some threads reach), Harris's interleaved strided index `2 * stride * t` (the right sum with bank conflicts, found
        by replaying each warp's accesses), a loop that stops one step early (`stride > 1`), the second load unguarded (reads past $n$), a single pass that returns the
        first partial, a plain `out[0] += value` instead of an atomic, a grid-stride step of one block (elements counted
        by several blocks), `value = x[i]` instead of `+=`. In C++: no barrier between the store to shared memory and
        the tree (a race: on a GPU it gives wrong sums on most runs, not all — which is what makes races dangerous), a
        tree that stops at stride 64, shuffles that start at offset 8 (lanes 16-31 never added), a loop that reads
        `x[n]`, a single pass, `*out += total` instead of `atomicAdd` (blocks overwrite each other's additions), and a
        launch of $\lceil n/T \rceil$ blocks that writes past the partials.

        **Accuracy.** A float32 sum accumulated one element at a time has an error bound growing like $n\varepsilon$;
        a tree's grows like $\log_2(n)\,\varepsilon$. The kernel above is a hybrid — chains of 1024 in registers, then a
        tree — and lands close to `torch.sum`, which uses the same structure. For exact reproducibility across runs use
        the two-pass version; for a result independent of the grid too, you need a fixed reduction order (or
        higher-precision accumulators, as in `torch.sum` of float16 inputs, which accumulates in float32).

        **Production.** PyTorch's reductions (`aten/src/ATen/native/cuda/Reduce.cuh`) are this design generalised:
        each thread accumulates several vectorised loads, a block reduces through shared memory and warp shuffles, and
        when one block cannot cover the output, a global semaphore lets the last block to finish reduce the partials
        (a two-pass reduction in one launch). CUB's `BlockReduce` and `DeviceReduce` are the library versions. Fused
        kernels go further: an RMSNorm or softmax kernel (`p03.softmax`, `p04.warp_primitives`) reduces each row in one
        block or one warp, never writing the sum to memory at all.
    """)
    lesson.mistakes()
    return lesson
