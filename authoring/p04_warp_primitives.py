"""Source of 04_CUDA_Systems/03_Warp_Primitives.ipynb (build with `python -m llm_algo build p04.warp_primitives`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p04.warp_primitives",
        path="04_CUDA_Systems/03_Warp_Primitives.ipynb",
        title_en="Warp primitives: shuffle reductions and a warp-per-row softmax",
        title_zh="Warp 原语：shuffle 归约与每行一个 warp 的 softmax",
        difficulty="medium",
        device="cpu",
        minutes=100,
        prerequisites=["p04.shared_memory", "p03.softmax"],
    )
    lesson.title(
        intro=r"""
        The 32 threads of a warp execute together, and since Kepler they can read each other's **registers** directly:
        `__shfl_xor_sync`, `__shfl_down_sync` and friends move a value from one lane to another in a single
        instruction, with no shared memory and no `__syncthreads()`. Every fast reduction in CUDA ends with them — the
        max and sum of a softmax, the mean and variance of a LayerNorm or RMSNorm, the partial sums of a reduction
        kernel — and PyTorch's own softmax for rows up to 1024 elements (`aten/src/ATen/native/cuda/
        PersistentSoftmax.cuh`) gives each row to one warp and reduces it with `__shfl_xor_sync` only.

        **You will implement** the butterfly all-reduce (sum and max, in groups of 32, 16, ... lanes) and a
        warp-per-row softmax on a **lane-level model** of a warp — 32 lanes as the last dimension of a tensor, and
        `shfl_xor(values, lane_mask, mask)` as the permutation the hardware performs (undefined reads come back as
        NaN) — and then the same softmax in CUDA C++. **Graded against** float64 `torch.softmax` and sums, a count of
        the shuffles you issue, rows of any length and rows with huge values; the lane-model exercises grade on every
        machine, the C++ one on a GPU (on a CPU it reads *needs a GPU*).
    """
    )
    lesson.md(r"""
        ## 本节要点

        - **Warp shuffle**：`__shfl_xor_sync(mask, v, laneMask)` 让第 $i$ 个 lane 读到第 $i \oplus \text{laneMask}$ 个 lane 的寄存器值；`__shfl_down_sync(mask, v, d)` 读 lane $i+d$（越界时保留自己的值）。不经过共享内存、不需要 `__syncthreads()`。
        - **Butterfly 归约**：偏移 16, 8, 4, 2, 1 各做一次 `v = op(v, shfl_xor(v, o))`，5 步后**每个** lane 都得到整个 warp 的和/最大值；`shfl_down` 版本只有 lane 0 得到结果。
        - **分组**：只用偏移 $w/2, \dots, 1$ 时，归约在每 $w$ 个 lane 的组内进行（如 16 个 lane 处理一行）。
        - **mask**：`mask` 中的每个 lane 都必须执行这条 shuffle；从 mask 之外的 lane 读数是未定义的。行不满 32 个元素时，不要缩小 mask，而是让空闲 lane 持有单位元（求和为 0，求最大值为 $-\infty$）。
        - **Warp-per-row softmax**：lane $\ell$ 处理第 $\ell, \ell+32, \dots$ 列（合并访存），先求每个 lane 的最大值再 butterfly 求行最大值，减去最大值后求 $\sum e^{x-m}$，再写出 $e^{x-m}/s$。
        {易错点}
        - **性能**：softmax 是访存受限的，目标是设备内拷贝带宽的 85% 以上且不慢于 `torch.softmax`。
    """)
    lesson.md(r"""
        ## 1. Shuffles: registers across lanes

        A warp is 32 threads (*lanes*, 通道) that issue each instruction together. A shuffle is an instruction in which
        every participating lane *offers* one 4-byte register value and *receives* the value of another lane:

        | intrinsic | lane $i$ receives | typical use |
        | --- | --- | --- |
        | `__shfl_sync(mask, v, src)` | lane `src`'s `v` | broadcast from one lane |
        | `__shfl_xor_sync(mask, v, m)` | lane $i \oplus m$'s `v` | butterfly all-reduce |
        | `__shfl_down_sync(mask, v, d)` | lane $i + d$'s `v` (its own if $i + d \ge 32$) | tree reduction into lane 0 |
        | `__shfl_up_sync(mask, v, d)` | lane $i - d$'s `v` (its own if $i < d$) | prefix sums (scan) |

        **The mask.** Since CUDA 9 (Volta's independent thread scheduling) every shuffle names, in a 32-bit `mask`, the
        lanes that take part; each of them must execute the same shuffle, and the result of reading from a lane that is
        not in the mask (or has exited) is undefined. Use the full mask `0xffffffff` and keep all 32 lanes alive; a lane
        with no data contributes the operation's identity. The model below makes "undefined" visible: such a read
        returns NaN.

        **The butterfly.** With $m = 16$, lane $i$ and lane $i \oplus 16$ swap values; after `v += shfl_xor(v, 16)` both
        hold the sum of their pair. Repeating with 8, 4, 2, 1 doubles the group each time, so after $\log_2 32 = 5$ steps
        **every** lane holds the sum of all 32:

        ```
        step (xor)   lanes whose values lane 0 has summed
        16           {0, 16}
         8           {0, 8, 16, 24}
         4           {0, 4, 8, ..., 28}
         2           {0, 2, 4, ..., 30}
         1           {0, 1, 2, ..., 31}
        ```

        Use only the offsets $w/2, w/4, \dots, 1$ and the reduction stays inside aligned groups of $w$ lanes: with $w = 16$ a warp reduces two rows at once, one per half. `shfl_down` with
        the same offsets builds a tree whose result is only in lane 0 (the other lanes end with partial sums), which is
        enough when lane 0 alone writes the answer, as in `p04.reduction`.

        **Why not shared memory?** A shuffle moves 32 values in one instruction with no bank conflicts and no barrier;
        the shared-memory tree of `p04.shared_memory` needs a store, a `__syncthreads()` and a load per step. NVIDIA's
        "Faster Parallel Reductions on Kepler" (Justin Luitjens, 2014) introduced the pattern; CUB's `WarpReduce`
        (used by PyTorch) is built on it.
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt
        import torch

        from llm_algo.cuda.inline import compile_cuda

        WARP = 32
        FULL_MASK = 0xFFFFFFFF


        def shfl_xor(values: torch.Tensor, lane_mask: int, mask: int = FULL_MASK) -> torch.Tensor:
            # __shfl_xor_sync(mask, v, lane_mask) for many warps at once: values (..., 32), one column per lane.
            # Lane i receives lane (i ^ lane_mask)'s value. A lane outside `mask`, or reading from a lane outside
            # `mask`, gets an undefined value: NaN in this model.
            if not isinstance(values, torch.Tensor) or values.shape[-1:] != (WARP,):
                raise ValueError(f"shfl_xor takes a tensor (..., 32) (one value per lane), got {type(values).__name__}"
                                 f" {tuple(getattr(values, 'shape', ()))}")
            if not (isinstance(lane_mask, int) and 0 <= lane_mask < WARP):
                raise ValueError(f"lane_mask must be an int in [0, 32), got {lane_mask!r}")
            lanes = torch.arange(WARP)
            source = lanes ^ lane_mask
            taking_part = ((int(mask) >> lanes) & 1).bool()
            received = values[..., source]
            return received.masked_fill(~taking_part | ~taking_part[source], float("nan"))
    """)
    lesson.md(r"""
        ## 2. Exercise `warp_reduce`: the butterfly all-reduce

        Write `warp_allreduce(values, op="sum", width=32)`: `values` is a float tensor `(..., 32)` — each row one warp,
        each column one lane — and the result has the same shape, where every lane holds the `op` (`"sum"` or
        `"max"`) over its aligned group of `width` lanes (`width` one of 2, 4, 8, 16, 32). Use only `shfl_xor` with
        the full mask, $\log_2 \text{width}$ times, and elementwise operations (`+`, `torch.maximum`): reductions such
        as `sum`, `max`, `amax` are what the checks use, and refused here. Refuse a bad `op` or `width` with a
        `ValueError`.
    """)
    lesson.exercise(
        "warp_reduce",
        r'''
        def warp_allreduce(values: torch.Tensor, op: str = "sum", width: int = WARP) -> torch.Tensor:
            """Every lane of values (..., 32) ends with the sum (op="sum") or max (op="max") over its aligned group of
            `width` lanes (2, 4, 8, 16 or 32), by log2(width) butterfly steps of shfl_xor with the full mask."""
            # TODO 1: validate op and width (ValueError)
            # TODO 2: for offset = width // 2, width // 4, ..., 1: combine values with shfl_xor(values, offset)
            ### BEGIN SOLUTION
            if op not in ("sum", "max"):
                raise ValueError(f"op must be 'sum' or 'max', got {op!r}")
            if width not in (2, 4, 8, 16, 32):
                raise ValueError(f"width must be a power of two from 2 to 32, got {width!r}")
            offset = width // 2
            while offset >= 1:
                other = shfl_xor(values, offset, FULL_MASK)
                values = values + other if op == "sum" else torch.maximum(values, other)
                offset //= 2
            return values
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        The figure shows, for each step of a 32-lane butterfly, how many of the original lanes each lane has already
        combined (it doubles each step), computed with your function on one-hot inputs.
    """)
    lesson.code(r"""
        try:
            eye = torch.eye(WARP, dtype=torch.float64)  # row j: lane j holds 1, the others 0
            widths = (2, 4, 8, 16, 32)
            # seen[j, i] = 1 when lane j's value reached lane i in a butterfly over groups of `width` lanes
            seens = [warp_allreduce(eye, "sum", width) for width in widths]
            fig, axes = plt.subplots(1, 5, figsize=(13, 2.8))
            for ax, width, seen in zip(axes, widths, seens):
                ax.imshow(seen.numpy(), cmap="Greys", vmin=0, vmax=1)
                ax.set_title(f"width {width}", fontsize=9)
                ax.set_xlabel("lane i")
                ax.set_ylabel("source lane j")
            plt.suptitle("after the butterfly over groups of `width` lanes: lane i holds lane j's value (black)", fontsize=9)
            plt.tight_layout()
            plt.show()
        except NotImplementedError:
            print("Implement warp_allreduce first: this figure uses it.")
    """)
    lesson.md(r"""
        ## 3. A warp per row: softmax

        $\text{softmax}(x)_j = e^{x_j - m} / \sum_k e^{x_k - m}$ with $m = \max_k x_k$ (the shift by $m$ changes nothing
        mathematically and keeps $e^{x}$ from overflowing: $e^{89}$ is already infinite in float32). For a row of $L$
        elements, one warp:

        1. lane $\ell$ walks the columns $\ell, \ell + 32, \ell + 64, \dots < L$ (a **strided loop**: on every pass the
           32 lanes read 32 consecutive floats, one coalesced 128-byte access) keeping its own maximum;
        2. a butterfly max gives every lane the row maximum $m$;
        3. the same walk accumulates $\sum e^{x - m}$ per lane; a butterfly sum gives the row sum $s$;
        4. a third walk writes $e^{x - m} / s$.

        A lane that owns no column of a short row ($L < 32$) still takes part in both butterflies with the identity:
        $-\infty$ for the max (0 would be wrong for a row of negative numbers), 0 for the sum. The rows are independent,
        so a block of 4 warps handles 4 rows, and the grid covers all rows. This is what PyTorch does for rows up to
        1024 elements (`dispatch_softmax_forward` in `PersistentSoftmax.cuh`, which also keeps the row in registers);
        longer rows go to a block-per-row kernel that combines the warps' partial results through shared memory.

        ## 4. Exercise `warp_softmax`: the algorithm on the lane model

        Write `warp_softmax(x)` for `x` a 2-D float32 tensor `(R, L)`, $L \ge 1$: row $r$ is warp $r$, and lane $\ell$
        owns the columns $\ell + 32 t$. Keep per-lane state as `(R, 32)` tensors, walk the columns in chunks of 32
        (`x[:, c0 : c0 + 32]`, padded with the identity where the row ends), reduce across lanes **only** with your
        `warp_allreduce` (or `shfl_xor`), and return a new `(R, L)` float32 tensor. `torch.softmax`, `logsumexp` and
        the reductions `max`, `amax`, `sum` are refused. Refuse a tensor that is not 2-D float32 or has $L = 0$ with a
        `ValueError`/`TypeError`.
    """)
    lesson.exercise(
        "warp_softmax",
        r'''
        def warp_softmax(x: torch.Tensor) -> torch.Tensor:
            """softmax over the last dimension of x (R, L) float32, one warp per row: lane l owns columns l, l + 32, ...;
            the row max and the row sum of exp(x - max) by butterflies across the 32 lanes."""
            # TODO 1: validate (a 2-D float32 tensor with L >= 1)
            # TODO 2: per-lane max over the lane's columns (identity -inf), then warp_allreduce(..., "max")
            # TODO 3: per-lane sum of exp(x - m) (identity 0), then warp_allreduce(..., "sum")
            # TODO 4: write exp(x - m) / s
            ### BEGIN SOLUTION
            if not isinstance(x, torch.Tensor) or x.dtype != torch.float32:
                raise TypeError(f"warp_softmax takes a float32 tensor, got {getattr(x, 'dtype', type(x).__name__)}")
            if x.dim() != 2 or x.shape[1] == 0:
                raise ValueError(f"warp_softmax needs a 2-D tensor (R, L) with L >= 1, got {tuple(x.shape)}")
            rows, length = x.shape
            chunks = []  # the row in chunks of 32 columns, padded with -inf past its end: chunk[:, l] is lane l's
            for c0 in range(0, length, WARP):
                chunk = x[:, c0 : c0 + WARP]
                if chunk.shape[1] < WARP:
                    pad = torch.full((rows, WARP - chunk.shape[1]), float("-inf"), dtype=x.dtype)
                    chunk = torch.cat([chunk, pad], dim=1)
                chunks.append(chunk)
            lane_max = torch.full((rows, WARP), float("-inf"), dtype=x.dtype)
            for chunk in chunks:
                lane_max = torch.maximum(lane_max, chunk)
            row_max = warp_allreduce(lane_max, "max")  # every lane: the row's max
            lane_sum = torch.zeros((rows, WARP), dtype=x.dtype)
            for chunk in chunks:
                lane_sum = lane_sum + torch.exp(chunk - row_max)  # exp(-inf - m) = 0 for the padding
            row_sum = warp_allreduce(lane_sum, "sum")
            out = torch.cat([torch.exp(chunk - row_max) / row_sum for chunk in chunks], dim=1)
            return out[:, :length]
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 5. Exercise `warp_softmax_cuda`: the warp-per-row softmax in CUDA C++

        Fill in `WARP_SOFTMAX_CUDA` (each `raise NotImplementedError` line inside the string is C++ for you to write):
        `warp_max` and `warp_sum` (five `__shfl_xor_sync(0xffffffff, v, offset)` steps), the kernel (warp `w` of block
        `b` handles row `b * warps_per_block + w`; a warp whose row is past the end returns **as a whole** before any
        shuffle, so every shuffle still has all 32 lanes; three strided walks as in section 3, with 64-bit row offsets),
        and the host function `warp_softmax_cuda(x)`: `TORCH_CHECK` a contiguous 2-D float32 CUDA tensor, allocate the
        output, launch $\lceil R / 4 \rceil$ blocks of 128 threads on the current stream (nothing for an empty
        tensor), check the launch and return the output. Then `load_warp_softmax` builds it.
    """)
    lesson.exercise(
        "warp_softmax_cuda",
        r'''
        WARP_SOFTMAX_CUDA = r"""
        #include <c10/cuda/CUDAException.h>
        #include <c10/cuda/CUDAGuard.h>
        #include <c10/cuda/CUDAStream.h>

        constexpr unsigned FULL_MASK = 0xffffffffu;
        constexpr int WARPS_PER_BLOCK = 4;

        // Every lane ends with the max / sum over the 32 lanes of its warp (all 32 lanes must call it).
        __device__ __forceinline__ float warp_max(float v) {
            // TODO: five butterfly steps, offsets 16, 8, 4, 2, 1, with fmaxf
            ### BEGIN SOLUTION
        #pragma unroll
            for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, offset));
            return v;
            ### END SOLUTION
        }

        __device__ __forceinline__ float warp_sum(float v) {
            // TODO: the same with +
            ### BEGIN SOLUTION
        #pragma unroll
            for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(FULL_MASK, v, offset);
            return v;
            ### END SOLUTION
        }

        // y[row, :] = softmax(x[row, :]) for x, y (rows, cols) row-major; one warp per row.
        __global__ void warp_softmax_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t rows,
                                            int64_t cols) {
            // TODO 1: lane and row; a warp past the last row returns (the whole warp, before any shuffle)
            // TODO 2: m = warp_max of the lane's max over columns lane, lane + 32, ... (-INFINITY if none)
            // TODO 3: s = warp_sum of the lane's sum of expf(x - m); then write expf(x - m) / s
            ### BEGIN SOLUTION
            const int lane = threadIdx.x % 32;
            const int64_t row = static_cast<int64_t>(blockIdx.x) * WARPS_PER_BLOCK + threadIdx.x / 32;
            if (row >= rows) return;  // the row is the same for the 32 lanes: the warp exits as a whole
            const float* xr = x + row * cols;
            float* yr = y + row * cols;
            float m = -INFINITY;
            for (int64_t c = lane; c < cols; c += 32) m = fmaxf(m, xr[c]);
            m = warp_max(m);
            float s = 0.0f;
            for (int64_t c = lane; c < cols; c += 32) s += expf(xr[c] - m);
            s = warp_sum(s);
            const float inv = 1.0f / s;
            for (int64_t c = lane; c < cols; c += 32) yr[c] = expf(xr[c] - m) * inv;
            ### END SOLUTION
        }

        torch::Tensor warp_softmax_cuda(torch::Tensor x) {
            // TODO: TORCH_CHECK CUDA, float32, 2-D, contiguous, at least one column; allocate y; launch
            //       ceil(rows / WARPS_PER_BLOCK) blocks of 32 * WARPS_PER_BLOCK threads on the current stream (none
            //       for zero rows); C10_CUDA_KERNEL_LAUNCH_CHECK(); return y
            ### BEGIN SOLUTION
            TORCH_CHECK(x.is_cuda(), "warp_softmax_cuda: x must be a CUDA tensor");
            TORCH_CHECK(x.scalar_type() == torch::kFloat32, "warp_softmax_cuda: x must be float32, got ", x.scalar_type());
            TORCH_CHECK(x.dim() == 2, "warp_softmax_cuda: x must be 2-D (rows, cols), got ", x.sizes());
            TORCH_CHECK(x.is_contiguous(), "warp_softmax_cuda: x must be contiguous (call .contiguous() first)");
            TORCH_CHECK(x.size(1) >= 1, "warp_softmax_cuda: a softmax needs at least one column");
            const c10::cuda::CUDAGuard guard(x.device());
            auto y = torch::empty_like(x);
            const int64_t rows = x.size(0), cols = x.size(1);
            if (rows == 0) return y;
            const int64_t blocks = (rows + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK;
            TORCH_CHECK(blocks <= 2147483647, "warp_softmax_cuda: too many rows");
            warp_softmax_kernel<<<static_cast<unsigned>(blocks), 32 * WARPS_PER_BLOCK, 0,
                                  c10::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), y.data_ptr<float>(), rows,
                                                                       cols);
            C10_CUDA_KERNEL_LAUNCH_CHECK();
            return y;
            ### END SOLUTION
        }
        """


        def load_warp_softmax():
            """Your extension, built from WARP_SOFTMAX_CUDA (or loaded from the cache): a module with
            warp_softmax_cuda(x)."""
            # TODO: compile_cuda(WARP_SOFTMAX_CUDA, ["warp_softmax_cuda"], name="p04_warp_softmax")
            ### BEGIN SOLUTION
            return compile_cuda(WARP_SOFTMAX_CUDA, ["warp_softmax_cuda"], name="p04_warp_softmax")
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 6. Bandwidth against the roofline (GPU only)

        `python -m llm_algo bench p04.warp_primitives` times your `warp_softmax_cuda`, `torch.softmax` and a
        device-to-device copy of the same bytes at $(32768, 4096)$ fp32 (512 MiB in, 512 MiB out) and at a
        vocabulary-sized $(8192, 128256)$ (Llama 3's vocabulary: the softmax over logits; 3.9 GiB each way). A softmax
        must read $x$ and write $y$: the copy is its roofline. The cell below plots your kernel against `torch.softmax`
        for 32768 rows of growing length; on a CPU it says so and does nothing.
    """)
    lesson.code(r"""
        if not torch.cuda.is_available():
            print("Benchmarks need a CUDA GPU; skipped here.")
        else:
            import triton.testing

            try:
                module = load_warp_softmax()
                lengths = [128, 512, 1024, 2048, 4096, 8192]
                rates = {"your warp_softmax_cuda": [], "torch.softmax": []}
                for length in lengths:
                    x = torch.randn(32768, length, device="cuda")
                    fns = [module.warp_softmax_cuda, lambda x: torch.softmax(x, dim=-1)]
                    for label, fn in zip(rates, fns):
                        ms = triton.testing.do_bench(lambda fn=fn: fn(x), return_mode="median")
                        rates[label].append(2 * x.numel() * 4 * 1e-9 / (ms * 1e-3))  # GB/s
                for label, values in rates.items():
                    plt.semilogx(lengths, values, marker="o", label=label, base=2)
                plt.xlabel("row length L (32768 rows, fp32)")
                plt.ylabel("GB/s (read x + write y)")
                plt.legend()
                plt.show()
            except NotImplementedError:
                print("Implement warp_softmax_cuda first: this benchmark times your kernel.")
    """)
    lesson.md(r"""
        **Reading the numbers.** Measured on an H200 (torch 2.11, CUDA 13.0; `python -m llm_algo bench
        p04.warp_primitives`, one run, fp32, read plus write per second): at (32768, 4096) `warp_softmax_cuda` 2070
        GB/s, `torch.softmax` 2569 GB/s, the copy 4162 GB/s; at (8192, 128256) 2069, 2085 and 4280 GB/s. The kernel
        reaches 50% and 48% of the copy and 81% and 99% of `torch.softmax`: the lesson's target (85% of the copy and at
        least `torch.softmax`) is missed at both shapes, by 35 points of copy bandwidth, and even `torch.softmax` stays
        at 62% and 49% of the copy. Three walks over each row cost more than the L1/L2 hits below assume. What to
        expect and why: the kernel walks each row three times. For rows of a few thousand floats one hopes the second and
        third walks hit L1/L2, so that HBM sees one read and one write, like the copy; the numbers above say they do not
        often enough at this occupancy (the lesson's target: 85% of the copy and at
        least `torch.softmax`). For a 128256-wide row (501 KiB) thousands of warps in flight exceed the 50 MB L2, the
        later walks go back to HBM, and the kernel falls towards a third or half of the copy. The fixes production
        kernels use: the **online softmax** (a running max with a rescaled running sum, as in FlashAttention and in
        `p03.softmax`) merges the first two walks, and keeping the row in registers (PyTorch, for $L \le 1024$) or in
        shared memory removes the re-reads altogether.
    """)
    lesson.stop()
    lesson.md(r"""
        ## 7. Reading the solutions

        **`warp_allreduce`.** `offset = width // 2` down to 1 by halving: the first step pairs lane $i$ with
        $i \oplus w/2$, which is inside the same aligned group of $w$ lanes, and so are all later partners. The order of
        the offsets does not matter for a xor butterfly (any order of the $\log_2 w$ bits reaches every lane of the
        group); *which* offsets does: an offset of $w$ or more crosses into the next group, and a missing offset leaves
        half of the group out.

        **`warp_softmax`.** The padding with $-\infty$ is the identity of the max, and $e^{-\infty - m} = 0$ makes the
        same chunks right for the sum. The shift by the row max happens before `exp`; without it a row containing 100
        overflows to `inf` and the result is NaN. The reductions across lanes are 10 shuffles per warp in total.

        **The C++.** `row` is the same for the 32 lanes of a warp (they have the same `threadIdx.x / 32`), so the early
        return removes whole warps and every remaining shuffle sees all 32 lanes. `expf` is the accurate exponent (2 ulp);
        the intrinsic `__expf` is faster but its error grows with $|x|$ (CUDA Programming Guide, "Intrinsic
        functions"), and a memory-bound kernel gains nothing from it. `1.0f / s` once per row turns a division per
        element into a multiply. The three walks read consecutive floats across the lanes: coalesced.

        **The usual mistakes, and why they are wrong**: butterfly offsets
        that start at `width` (crossing groups) or stop at 2, a sum-combine used for the max, 0 as the padding of the
        max (a row of negative numbers gets the wrong max), no max subtraction (overflow for large logits), a partial
        shuffle mask (`(1 << L) - 1`) for short rows that reads lanes outside the mask; in C++, a warp that reduces with
        offsets 8..1 only, a per-row test that lets lanes past the row's end return early (`if (lane >= cols) return;`:
        a shuffle with exited lanes), no max subtraction, and no contiguity check.

        **Production.** PyTorch's `softmax` (`SoftMax.cu`, `PersistentSoftmax.cuh`), Apex's and Megatron's fused
        scaled-masked softmax, FlashAttention's row statistics and every RMSNorm/LayerNorm kernel reduce with
        `__shfl_xor_sync` exactly like this, usually templated on the number of elements per lane so that the row
        stays in registers. Next: `p04.reduction`, where warps combine through shared memory and atomics.
    """)
    lesson.mistakes()
    return lesson
