"""Source of 04_CUDA_Systems/13_CUDA_vs_Triton.ipynb (build with `python -m llm_algo build p04.cuda_vs_triton`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p04.cuda_vs_triton",
        path="04_CUDA_Systems/13_CUDA_vs_Triton.ipynb",
        title_en="CUDA vs Triton vs PyTorch: one fused RMSNorm three ways, timed",
        title_zh="CUDA、Triton 与 PyTorch：同一个融合 RMSNorm 的三种写法与计时",
        difficulty="medium",
        device="cpu",
        minutes=150,
        prerequisites=["p03.rmsnorm", "p04.warp_primitives", "p04.reduction"],
        triton=True,
    )
    lesson.title(
        intro=r"""
        Every Llama layer runs RMSNorm twice, and every serving engine and training framework has to decide how to
        write it: as a few lines of PyTorch, as a Triton kernel, or as CUDA C++. The op is tiny — a sum of squares per
        row and a scale — and entirely **memory-bound**, so the three answers differ not in arithmetic but in how many
        times the activations cross HBM, and in what each one costs the person who writes and maintains it.

        **You will implement** the same algorithm three ways: the PyTorch composition with a correct fp32 upcast
        (`rmsnorm_torch`), a one-program-per-row Triton kernel (`rmsnorm_triton`), and a one-block-per-row CUDA C++
        kernel with 128-bit loads, warp shuffles and a shared-memory step across warps (`rmsnorm_cuda`) — first as a
        thread-level model in PyTorch built on your `warp_allreduce` from `p04.warp_primitives`
        (`rmsnorm_block_model`), then in C++. Then one
        benchmark times them side by side with `torch.compile` and `F.rms_norm`, against a device-to-device copy.
        **Graded against** float64 `F.rms_norm`, a hand-worked row, guard buffers around the Triton kernel's output,
        NaN rows after the CUDA kernel's input and misaligned CUDA inputs, and refused bad input. The PyTorch, Triton
        and thread-model exercises grade on any machine (Triton through its interpreter); the CUDA C++ one on a GPU (on
        a CPU it reads *needs a GPU*).
    """
    )
    lesson.md(r"""
        ## 本节要点

        - **同一个算子**：RMSNorm 前向 $y = x \cdot \text{rsqrt}(\frac{1}{H}\sum x^2 + \epsilon) \cdot w$，行长 $H = 4096$，输入 bf16/fp16/fp32，计算一律用 fp32 累加，最后再转回输入的 dtype。
        - **访存受限 (memory-bound)**：理想流量是 $2NHb + Hb$ 字节（读一次 $x$、写一次 $y$、读一次权重）；H200 的 HBM3e 规格带宽 4.8 TB/s，$32768 \times 4096$ bf16 的理想时间约 112 µs。
        - **PyTorch eager**：`x.float().pow(2).mean(-1, keepdim=True)` 等组合会启动约 9 个 kernel，每个都把中间结果写回显存，流量约为融合版本的 10 倍；`torch.compile` 把它们融合成一个生成的 Triton kernel。
        - **Triton**：一行一个 program，`BLOCK_SIZE` 覆盖整行，`mask` + `other=0.0`，`tl.sum` 归约；布局、向量化、共享内存和 warp 间归约由编译器决定，你只选 `BLOCK_SIZE` 和 `num_warps`。
        - **CUDA C++**：一行一个 block；每个线程以 fp32 累加跨步部分平方和，128-bit 向量化读取（需要对齐和整除检查），warp shuffle 归约，再经共享内存跨 warp 归约，广播 `inv_rms`，最后乘以权重写回——一切都由你决定。先在 PyTorch 的线程级模型上（用 `p04.warp_primitives` 的 `warp_allreduce`）实现同样的三级归约，CPU 上即可评分。
        - **实测（H200，一次运行，`python -m llm_algo bench p04.cuda_vs_triton`）**：$32768 \times 4096$ bf16 时，设备内拷贝 4110 GB/s；Triton 3966 GB/s（拷贝的 0.97 倍），`torch.compile` 3675（0.89 倍），CUDA C++ 3487（0.85 倍），`F.rms_norm` 3379（0.82 倍），PyTorch eager 307（0.075 倍，比 Triton 慢 12.9 倍）。CUDA 版本慢于 Triton 的可能原因：第二遍循环重新读取 $x$（未经 profile 证实）。
        {易错点}
        - **生产选择**：vLLM、SGLang、TensorRT-LLM 用 CUDA（融合残差加法与量化）；Liger-Kernel、Unsloth 用 Triton；PyTorch 自带 `F.rms_norm`（2.4 起）。Triton 也能在 AMD GPU 上运行，CUDA 需要 HIP 移植。
    """)
    lesson.md(r"""
        ## 1. The problem: one small op, 65 times per forward pass

        A Llama-3-8B forward pass runs 65 RMSNorms (two per layer for 32 layers, one before the LM head). A prefill
        batch of 8 sequences of 4096 tokens gives each of them an input of $N \times H = 32768 \times 4096$ bf16
        elements: 256 MiB in, 256 MiB out. The arithmetic is about $4NH \approx 0.5$ GFLOP — a rounding error next to
        the matmuls around it — so the time is set by memory traffic alone:

        $$
        \text{bytes}_{\text{ideal}} = \underbrace{N H b}_{\text{read } x} + \underbrace{N H b}_{\text{write } y}
        + \underbrace{H b}_{\text{read } w} , \qquad b = \text{bytes per element}.
        $$

        At $N = 32768$, $H = 4096$, $b = 2$: $536{,}879{,}104$ bytes. The H200's **spec sheet** gives 4.8 TB/s of
        HBM3e bandwidth, so the floor is $0.537\ \text{GB} / 4.8\ \text{TB/s} \approx 112\ \mu s$ (a spec, not a
        measurement: a device-to-device copy reaches less, and the benchmark measures it in the same run
        as your kernels). For $4096 \times 4096$ fp32 ($b = 4$): $134{,}234{,}112$ bytes, a 28 µs floor, small enough
        that launch latency and the tail of the grid start to show.

        Any implementation that reads $x$ more than once from HBM, or writes an intermediate of size $NH$, pays for
        it in proportion. That is the whole story of this lesson, told three times.

        ## 2. The math, with shapes

        For $x \in \mathbb{R}^{N \times H}$ (all leading dimensions flattened into rows), weight $w \in \mathbb{R}^H$:

        $$
        r_i = \Big(\tfrac{1}{H}\textstyle\sum_{j=1}^{H} x_{ij}^2 + \varepsilon\Big)^{-1/2} \in \mathbb{R}^{N}, \qquad
        y_{ij} = x_{ij}\, r_i\, w_j \in \mathbb{R}^{N \times H}.
        $$

        **Precision.** The inputs are bf16 or fp16, the math is fp32, the output is rounded once, back to the input
        dtype. Squaring in fp16 overflows above $|x| = 256$ ($256^2 = 65536 > 65504$, fp16's largest finite value),
        and a sum of 4096 squares accumulated in bf16 loses everything after its eighth significant bit; fp32 has
        neither problem. $\varepsilon$ sits **inside** the root and the mean divides by $H$, never by a padded length.

        **The algorithm every version below shares**: one row per program (Triton) or per thread block (CUDA); the
        row's elements loaded with wide, coalesced loads; squares accumulated in fp32; one reduction across the
        threads of the row; $r_i$ broadcast to all of them; a second elementwise pass that scales and stores.
    """)
    lesson.setup(r"""
        import inspect

        import matplotlib.pyplot as plt
        import torch
        import torch.nn.functional as F
        import triton
        import triton.language as tl

        from llm_algo.cuda.inline import compile_cuda

        # The butterfly of p04.warp_primitives: every lane of values (..., 32) ends with the sum over its warp
        warp_allreduce = lesson.use("p04.warp_primitives", "warp_allreduce")
    """)
    lesson.md(r"""
        ## 3. Way one: PyTorch, eager

        The textbook version is Hugging Face's `LlamaRMSNorm.forward`:

        ```python
        hidden_states = hidden_states.to(torch.float32)                      # (N, H) fp32
        variance = hidden_states.pow(2).mean(-1, keepdim=True)               # (N, 1)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)                   # (N, H) bf16
        ```

        It is correct and it reads well, but in eager mode **each operator is its own kernel** and each writes its
        full-size result to HBM for the next one to read back: the upcast writes an fp32 copy of $x$ ($4NH$ bytes),
        `pow` reads it and writes another, `mean` reads that, the scale by the rsqrt reads and writes $4NH$ again,
        and the cast and the weight multiply each make one more round trip. Section 6 counts it with a dispatch-mode recorder: about 9 kernels
        and ten times the ideal traffic. The composition is still the right first version — it is the
        **specification** the kernels must match, it runs on every device, and `torch.compile` can fuse it.

        ## Exercise `rmsnorm_torch`

        Write `rmsnorm_torch(x, weight, eps)` for `x` of shape `(..., H)` in float32, float16 or bfloat16 and `weight`
        of shape `(H,)`: compute in float32 and return a tensor of `x`'s shape **and dtype**. `F.rms_norm`,
        `torch.rms_norm` and `torch.nn.RMSNorm` are the checks' reference and refused here. Refuse input that is not a
        floating-point tensor with a `TypeError`, and a 0-dimensional `x` or a weight whose shape is not `(H,)` with a
        `ValueError`.
    """)
    lesson.exercise(
        "rmsnorm_torch",
        r'''
        def rmsnorm_torch(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
            """y = x / sqrt(mean(x^2, last dim) + eps) * weight, computed in float32.

            x: (..., H) float32 / float16 / bfloat16; weight: (H,); returns (..., H) in x.dtype
            """
            # TODO 1: validate (a floating-point tensor with at least one dimension; weight of shape (H,))
            # TODO 2: upcast x to float32; mean of squares over the last dimension, kept as (..., 1)
            # TODO 3: inv_rms = rsqrt(mean + eps); scale by inv_rms and the weight in float32; cast back to x's dtype
            ### BEGIN SOLUTION
            if not isinstance(x, torch.Tensor) or not x.is_floating_point():
                raise TypeError(f"rmsnorm_torch takes a floating-point tensor, got {getattr(x, 'dtype', type(x).__name__)}")
            if x.dim() == 0:
                raise ValueError("rmsnorm_torch needs x of shape (..., H), got a 0-dimensional tensor")
            if not isinstance(weight, torch.Tensor) or tuple(weight.shape) != (x.shape[-1],):
                raise ValueError(f"weight must have shape ({x.shape[-1]},), got {tuple(getattr(weight, 'shape', ()))}")
            x32 = x.float()                                              # (..., H) fp32: squares cannot overflow
            mean_square = x32.pow(2).mean(dim=-1, keepdim=True)          # (..., 1)
            inv_rms = torch.rsqrt(mean_square + eps)                     # (..., 1), eps inside the root
            return (x32 * inv_rms * weight.float()).to(x.dtype)          # (..., H), rounded once
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 4. Way two: Triton — you write the row, the compiler writes the threads

        In Triton a **program** handles a block of data and you never name a thread. For RMSNorm one program takes one
        row, and a block of `BLOCK_SIZE = next_power_of_2(H)` lanes covers it; the lanes past $H$ are masked off:

        ```
        program i  (one row)            cols = 0 1 2 ... H-1 | H ... BLOCK_SIZE-1
                                        mask = 1 1 1 ...  1  | 0 ...     0        (loads give other=0.0)
        x      = load(x_ptr + i * stride_row + cols, mask, other=0.0).to(fp32)    # (BLOCK_SIZE,)
        inv    = rsqrt(sum(x * x) / H + eps)                                       # scalar: divide by H, not BLOCK
        store(y_ptr + i * stride_y + cols, (x * inv * w).to(y's dtype), mask)
        ```

        What you decided: one row per program, the block covers the row, the masks, fp32 math, `num_warps`. What the
        compiler decided for you: how the `BLOCK_SIZE` lanes are spread over `num_warps × 32` threads (its *layout*:
        each thread gets several consecutive elements, so the loads become 128-bit vector loads when it can prove the
        alignment — at each launch Triton notes which pointer arguments are 16-byte aligned and which integer
        arguments are multiples of 16, and compiles a version specialised for that),
        and how `tl.sum` is lowered: a reduction inside each thread, warp shuffles, then shared memory across warps —
        the CUDA you will write by hand in section 5, generated. `num_warps` is the one launch knob that matters here:
        4 warps for rows up to 2048 elements, 8 up to 8192, 16 beyond (close to the `calculate_settings` of Unsloth
        and Liger-Kernel, which also grow `num_warps` with `BLOCK_SIZE`),
        so that each thread holds a handful of elements rather than hundreds of registers' worth.

        ## Exercise `rmsnorm_triton`

        Write `rmsnorm_kernel` (keep its signature: the gate check launches it directly on guarded buffers) and the
        wrapper `rmsnorm_triton(x, weight, eps)` for `x (..., H)` in float32, float16 or bfloat16:

        1. validate: a floating-point `x` (`TypeError` otherwise) with at least one dimension, $1 \le H \le$
           `MAX_FUSED_COLS`, a weight of shape `(H,)` (`ValueError` otherwise);
        2. view `x` as rows `(N, H)` with `reshape` and make the rows contiguous only if the column stride is not 1
           (a slice `x[:, :H]` of a wider tensor keeps its row stride: pass it to the kernel); allocate `y`;
        3. launch one program per row (none for zero rows) and return `y` in `x`'s shape.

        A check records the kernels your wrapper launches: the result must come from your `@triton.jit` kernel.
        (The interpreter has no bfloat16, so bf16 is checked only where Triton compiles, on a GPU.)
    """)
    lesson.exercise(
        "rmsnorm_triton",
        r'''
        MAX_FUSED_COLS = 65536


        @triton.jit
        def rmsnorm_kernel(
            # Pointers
            y_ptr, x_ptr, weight_ptr,
            # Strides
            x_row_stride, y_row_stride,
            # Shapes
            n_cols, eps,
            # Meta-parameters
            BLOCK_SIZE: tl.constexpr,
        ):
            """y[i] = x[i] * rsqrt(mean(x[i]^2) + eps) * weight, for the row i of this program; fp32 math."""
            # TODO 1: my row (as int64: row * stride can pass 2**31), the column offsets and their mask
            # TODO 2: load the row masked with other=0.0 and upcast to fp32; the mean of squares over n_cols
            # TODO 3: inv_rms = rsqrt(mean + eps); load the weight; store x * inv_rms * weight in y's dtype, masked
            ### BEGIN SOLUTION
            row = tl.program_id(axis=0).to(tl.int64)
            cols = tl.arange(0, BLOCK_SIZE)                                            # (BLOCK_SIZE,)
            mask = cols < n_cols
            x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
            inv_rms = tl.math.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)              # scalar, fp32
            weight = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(tl.float32)
            y = x * inv_rms * weight                                                   # (BLOCK_SIZE,) fp32
            tl.store(y_ptr + row * y_row_stride + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
            ### END SOLUTION


        def rmsnorm_triton(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
            """RMSNorm over the last dimension with one Triton program per row.

            x: (..., H) float32 / float16 / bfloat16, H <= MAX_FUSED_COLS; weight: (H,); returns (..., H) in x.dtype
            """
            # TODO 1: check constraints with messages (TypeError for the dtype, ValueError for shapes)
            # TODO 2: rows = x as (N, H) with unit column stride; y = an empty (N, H) tensor in x's dtype
            # TODO 3: BLOCK_SIZE = next power of 2 >= H; num_warps 4 / 8 / 16; launch N programs; y in x's shape
            ### BEGIN SOLUTION
            if not isinstance(x, torch.Tensor) or x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
                raise TypeError(f"rmsnorm_triton takes float32, float16 or bfloat16, got {getattr(x, 'dtype', type(x))}")
            if x.dim() == 0 or not 1 <= x.shape[-1] <= MAX_FUSED_COLS:
                raise ValueError(f"x must be (..., H) with 1 <= H <= {MAX_FUSED_COLS}, got {tuple(x.shape)}")
            hidden = x.shape[-1]
            if not isinstance(weight, torch.Tensor) or tuple(weight.shape) != (hidden,):
                raise ValueError(f"weight must have shape ({hidden},), got {tuple(getattr(weight, 'shape', ()))}")
            rows = x.reshape(-1, hidden)                                  # (N, H): a view whenever it can be
            if rows.stride(1) != 1:
                rows = rows.contiguous()
            weight = weight.contiguous()
            y = torch.empty(rows.shape, dtype=x.dtype, device=x.device)   # (N, H) contiguous
            if rows.shape[0] > 0:
                block_size = triton.next_power_of_2(hidden)
                num_warps = 4 if block_size <= 2048 else 8 if block_size <= 8192 else 16
                rmsnorm_kernel[(rows.shape[0],)](
                    y, rows, weight, rows.stride(0), y.stride(0), hidden, eps,
                    BLOCK_SIZE=block_size, num_warps=num_warps,
                )
            return y.reshape(x.shape)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 5. Way three: CUDA C++ — you write the threads

        Now nothing is decided for you. One **block of 256 threads (8 warps) per row**; the code below is the
        `tl.sum` and the loads of section 4, spelled out:

        ```
        block i (row i), thread t, warp = t / 32, lane = t % 32
        1. sum_sq = 0 (fp32)
           for chunk c = t, t + 256, t + 512, ... < H / VEC:          # strided: neighbours read neighbours
               load VEC elements x[i, c*VEC : c*VEC + VEC] in ONE 128-bit load (VEC = 4 fp32, 8 bf16/fp16)
               sum_sq += each element^2 (as float)
        2. sum_sq = warp_sum(sum_sq)                                    # 5 x __shfl_xor_sync: all lanes of a warp
           lane 0 of each warp: partial[warp] = sum_sq   (shared memory, 8 floats)
           __syncthreads()
           warp 0: total = warp_sum(lane < 8 ? partial[lane] : 0)     # the step across warps
                   lane 0: inv_rms_shared = rsqrtf(total / H + eps)    # divide by H, not by 256 * VEC * ...
           __syncthreads()                                              # broadcast: every thread reads inv_rms
        3. for the same chunks: load x (again: the row was just read, it is in L1/L2) and w, store x * inv_rms * w
        ```

        **Vectorised loads.** With 2-byte loads, one warp-wide load instruction brings 32 consecutive bf16 values:
        64 bytes, which the coalescer serves as one access. With 16-byte (`float4`) loads each thread brings 8
        elements and the same one instruction moves 512 bytes — eight times fewer load instructions (and registers
        holding addresses) for the same bytes, which is what keeps enough bytes in flight to saturate HBM. The catch: a 16-byte load needs a 16-byte aligned address. Rows of a contiguous tensor start at
        multiples of $H \cdot b$ bytes, so the vector path is legal only when $H$ is a multiple of `VEC` **and** the
        data pointers are 16-byte aligned (a tensor sliced at an odd offset is not). Otherwise take the scalar path
        (`VEC = 1`). Both are the same template instantiated twice. `__ldg` routes the load through the read-only
        data cache; with `const T* __restrict__` the compiler usually does that by itself.

        **Why the second `__syncthreads()`?** Thread 0 of warp 0 writes `inv_rms_shared`; every other thread must
        not read it before it is written. The first barrier makes the eight warp partials visible to warp 0.
        Forgetting the cross-warp step (each warp using its own partial sum) gives eight different $r_i$ in one row —
        a mistake invisible while the whole row falls in warp 0's first chunks ($H \le 32 \cdot$ `VEC`: 128 fp32
        or 256 bf16 elements on the vector path, 32 on the scalar one) and glaring at $H = 4096$.

        ## Exercise `rmsnorm_block_model`: the block on a thread model (CPU)

        Before the C++, the same three-level reduction on a **model** that runs anywhere, in the style of
        `p04.warp_primitives`: a block of `THREADS = 256` threads is a tensor dimension, viewed as `(WARPS, 32) =
        (8, 32)` warps × lanes, and `warp_allreduce(values, "sum")` — your butterfly from `p04.warp_primitives`
        (or its reference), `__shfl_xor_sync` five times — is the only way values cross lanes. Write
        `rmsnorm_block_model(x, weight, eps)` for `x (R, H)` float32 (one block per row, all rows at once):

        1. per-thread partial sums of squares `(R, THREADS)`: thread $t$ adds the squares of columns
           $t, t + 256, t + 512, \dots < H$ — walk the row in passes of 256 columns, the last one padded with the
           identity of the sum;
        2. `warp_allreduce` over each warp's 32 lanes; lane 0 of each warp "writes" its warp's sum to shared memory,
           an `(R, WARPS)` tensor;
        3. warp 0 "reads" `shared[lane]` for `lane < WARPS` and 0 for the other lanes, and reduces with
           `warp_allreduce` again; $r = \text{rsqrt}(\text{total} / H + \varepsilon)$;
        4. return $x \cdot r \cdot w$, `(R, H)` float32.

        Reductions (`sum`, `mean`, `norm`, ...) and `F.rms_norm` are refused here: elementwise operations, indexing
        and `warp_allreduce` only, as in the kernel. (The checks swap in their own `warp_allreduce`, so this
        exercise is graded on its own even if your `p04.warp_primitives` is not finished.) Refuse a tensor that is
        not 2-D float32 with $H \ge 1$, or a weight that is not `(H,)`, with a `TypeError` or `ValueError`.
    """)
    lesson.exercise(
        "rmsnorm_block_model",
        r'''
        THREADS, WARPS = 256, 8  # one block per row: 8 warps of 32 lanes


        def rmsnorm_block_model(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
            """RMSNorm of x (R, H) float32 as one block of THREADS threads per row computes it: per-thread strided
            partial sums of squares, warp_allreduce inside each warp, the WARPS partials through shared memory,
            warp_allreduce in warp 0. Returns (R, H) float32."""
            # TODO 1: validate (2-D float32, H >= 1; weight (H,))
            # TODO 2: partial (R, THREADS): thread t accumulates x[:, c0 + t] ** 2 over passes c0 = 0, 256, ... (pad with 0)
            # TODO 3: warp sums: warp_allreduce over partial viewed as (R, WARPS, 32); lane 0's value -> shared (R, WARPS)
            # TODO 4: warp 0: lanes (R, 32) = shared in lanes 0..WARPS-1, 0 elsewhere; warp_allreduce; total in lane 0
            # TODO 5: inv_rms = rsqrt(total / H + eps); return x * inv_rms * weight
            ### BEGIN SOLUTION
            if not isinstance(x, torch.Tensor) or x.dtype != torch.float32:
                raise TypeError(f"rmsnorm_block_model takes a float32 tensor, got {getattr(x, 'dtype', type(x))}")
            if x.dim() != 2 or x.shape[1] == 0:
                raise ValueError(f"x must be 2-D (R, H) with H >= 1, got {tuple(x.shape)}")
            rows, hidden = x.shape
            if not isinstance(weight, torch.Tensor) or tuple(weight.shape) != (hidden,):
                raise ValueError(f"weight must have shape ({hidden},), got {tuple(getattr(weight, 'shape', ()))}")
            partial = torch.zeros(rows, THREADS)                              # (R, THREADS): one register per thread
            for c0 in range(0, hidden, THREADS):
                chunk = x[:, c0 : c0 + THREADS]                                # thread t reads column c0 + t
                if chunk.shape[1] < THREADS:                                   # the last pass: idle threads add 0
                    chunk = torch.cat([chunk, torch.zeros(rows, THREADS - chunk.shape[1])], dim=1)
                partial = partial + chunk * chunk
            warp_sums = warp_allreduce(partial.view(rows, WARPS, 32), "sum")  # (R, WARPS, 32): every lane, its warp's sum
            shared = warp_sums[:, :, 0]                                        # (R, WARPS): lane 0 of each warp writes
            lanes = torch.zeros(rows, 32)                                      # warp 0: lane < WARPS reads shared[lane]
            lanes[:, :WARPS] = shared
            total = warp_allreduce(lanes, "sum")[:, 0]                         # (R,)
            inv_rms = torch.rsqrt(total / hidden + eps)                        # (R,), divide by H, not by the padding
            return x * inv_rms[:, None] * weight                               # (R, H)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## Exercise `rmsnorm_cuda`

        Fill in `RMSNORM_CUDA` (each `raise NotImplementedError` line inside the string is C++ for you to write):
        `warp_sum`, `load_vec`/`store_vec` (one `float4` for `VEC > 1`, a plain element for `VEC == 1`), the kernel
        of the pseudocode above, and the host function `rmsnorm_cuda(x, weight, eps)`: `TORCH_CHECK` a contiguous 2-D
        CUDA `x` with at least one column in float32, float16 or bfloat16, a contiguous `(H,)` weight of the same
        dtype and device; allocate `y`; launch (nothing for zero rows) on the current stream with the vector path when
        it is legal; check the launch. TORCH_CHECK messages: string literals only. Then `load_rmsnorm_cuda` builds it.
    """)
    lesson.exercise(
        "rmsnorm_cuda",
        r'''
        RMSNORM_CUDA = r"""
        #include <c10/cuda/CUDAException.h>
        #include <c10/cuda/CUDAGuard.h>
        #include <c10/cuda/CUDAStream.h>
        #include <c10/util/BFloat16.h>
        #include <c10/util/Half.h>

        #include <cstdint>
        #include <cstring>

        constexpr int THREADS = 256;  // one block of 8 warps per row
        constexpr int WARPS = THREADS / 32;
        constexpr unsigned FULL_MASK = 0xffffffffu;

        // Every lane ends with the sum over the 32 lanes of its warp (all 32 lanes must call it).
        __device__ __forceinline__ float warp_sum(float v) {
            // TODO: five butterfly steps, offsets 16, 8, 4, 2, 1
            ### BEGIN SOLUTION
        #pragma unroll
            for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(FULL_MASK, v, offset);
            return v;
            ### END SOLUTION
        }

        // VEC consecutive elements at src (16-byte aligned when VEC > 1): one 128-bit load, or one element.
        template <typename T, int VEC>
        __device__ __forceinline__ void load_vec(T (&dst)[VEC], const T* __restrict__ src) {
            // TODO: VEC == 1: dst[0] = src[0]; otherwise one __ldg of a float4, copied into dst (memcpy)
            ### BEGIN SOLUTION
            if constexpr (VEC == 1) {
                dst[0] = src[0];
            } else {
                static_assert(VEC * sizeof(T) == 16, "a vector load moves 16 bytes");
                const float4 raw = __ldg(reinterpret_cast<const float4*>(src));
                memcpy(dst, &raw, 16);
            }
            ### END SOLUTION
        }

        template <typename T, int VEC>
        __device__ __forceinline__ void store_vec(T* __restrict__ dst, const T (&src)[VEC]) {
            // TODO: the store of the same width
            ### BEGIN SOLUTION
            if constexpr (VEC == 1) {
                dst[0] = src[0];
            } else {
                float4 raw;
                memcpy(&raw, src, 16);
                *reinterpret_cast<float4*>(dst) = raw;
            }
            ### END SOLUTION
        }

        // y[row] = x[row] * rsqrt(mean(x[row]^2) + eps) * w for x, y (rows, cols) row-major; one block per row.
        // VEC divides cols; fp32 math whatever T is.
        template <typename T, int VEC>
        __global__ void __launch_bounds__(THREADS)
        rmsnorm_kernel(T* __restrict__ y, const T* __restrict__ x, const T* __restrict__ w, int64_t cols, float eps) {
            __shared__ float warp_partials[WARPS];
            __shared__ float inv_rms_shared;
            const int64_t row = blockIdx.x;
            const T* xr = x + row * cols;  // 64-bit: row * cols passes 2**31 for 32768 x 65536
            T* yr = y + row * cols;
            const int64_t chunks = cols / VEC;
            // TODO 1: each thread: fp32 sum of squares over its chunks t, t + THREADS, ...
            // TODO 2: warp_sum; lane 0 writes its warp's partial to shared memory; __syncthreads();
            //         warp 0 sums the WARPS partials and lane 0 stores rsqrtf(total / cols + eps); __syncthreads()
            // TODO 3: every thread reads inv_rms; scale its chunks by inv_rms and w (fp32) and store them as T
            ### BEGIN SOLUTION
            float sum_sq = 0.0f;
            for (int64_t c = threadIdx.x; c < chunks; c += THREADS) {
                T xv[VEC];
                load_vec<T, VEC>(xv, xr + c * VEC);
        #pragma unroll
                for (int k = 0; k < VEC; ++k) {
                    const float v = static_cast<float>(xv[k]);
                    sum_sq += v * v;
                }
            }
            sum_sq = warp_sum(sum_sq);
            const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
            if (lane == 0) warp_partials[warp] = sum_sq;
            __syncthreads();
            if (warp == 0) {
                float total = lane < WARPS ? warp_partials[lane] : 0.0f;
                total = warp_sum(total);
                if (lane == 0) inv_rms_shared = rsqrtf(total / static_cast<float>(cols) + eps);
            }
            __syncthreads();
            const float inv_rms = inv_rms_shared;
            for (int64_t c = threadIdx.x; c < chunks; c += THREADS) {
                T xv[VEC], wv[VEC], yv[VEC];
                load_vec<T, VEC>(xv, xr + c * VEC);
                load_vec<T, VEC>(wv, w + c * VEC);
        #pragma unroll
                for (int k = 0; k < VEC; ++k)
                    yv[k] = static_cast<T>(static_cast<float>(xv[k]) * inv_rms * static_cast<float>(wv[k]));
                store_vec<T, VEC>(yr + c * VEC, yv);
            }
            ### END SOLUTION
        }

        template <typename T>
        void launch_rmsnorm(torch::Tensor& y, const torch::Tensor& x, const torch::Tensor& weight, double eps) {
            constexpr int VEC = 16 / sizeof(T);
            const int64_t rows = x.size(0), cols = x.size(1);
            T* yp = reinterpret_cast<T*>(y.data_ptr());
            const T* xp = reinterpret_cast<const T*>(x.data_ptr());
            const T* wp = reinterpret_cast<const T*>(weight.data_ptr());
            const auto stream = c10::cuda::getCurrentCUDAStream();
            // TODO: the vector path (rmsnorm_kernel<T, VEC>) only when VEC divides cols and x, w, y are 16-byte
            //       aligned; else rmsnorm_kernel<T, 1>. rows blocks of THREADS threads on `stream`; then
            //       C10_CUDA_KERNEL_LAUNCH_CHECK()
            ### BEGIN SOLUTION
            const bool aligned = reinterpret_cast<std::uintptr_t>(xp) % 16 == 0 &&
                                 reinterpret_cast<std::uintptr_t>(wp) % 16 == 0 &&
                                 reinterpret_cast<std::uintptr_t>(yp) % 16 == 0;
            const dim3 grid(static_cast<unsigned>(rows));
            if (cols % VEC == 0 && aligned) {
                rmsnorm_kernel<T, VEC><<<grid, THREADS, 0, stream>>>(yp, xp, wp, cols, static_cast<float>(eps));
            } else {
                rmsnorm_kernel<T, 1><<<grid, THREADS, 0, stream>>>(yp, xp, wp, cols, static_cast<float>(eps));
            }
            C10_CUDA_KERNEL_LAUNCH_CHECK();
            ### END SOLUTION
        }

        torch::Tensor rmsnorm_cuda(torch::Tensor x, torch::Tensor weight, double eps) {
            // TODO 1: TORCH_CHECK (string literals only): CUDA tensors on one device; x 2-D, contiguous, >= 1 column,
            //         float32 / float16 / bfloat16; weight contiguous, (cols,), x's dtype; rows < 2**31
            // TODO 2: CUDAGuard; y = empty_like(x); nothing to launch for zero rows
            // TODO 3: dispatch on the dtype to launch_rmsnorm<float>, <c10::Half>, <c10::BFloat16>; return y
            ### BEGIN SOLUTION
            TORCH_CHECK(x.is_cuda() && weight.is_cuda(), "rmsnorm_cuda: x and weight must be CUDA tensors");
            TORCH_CHECK(x.get_device() == weight.get_device(), "rmsnorm_cuda: x and weight must be on one device");
            TORCH_CHECK(x.scalar_type() == torch::kFloat32 || x.scalar_type() == torch::kFloat16 ||
                            x.scalar_type() == torch::kBFloat16,
                        "rmsnorm_cuda: x must be float32, float16 or bfloat16");
            TORCH_CHECK(x.dim() == 2, "rmsnorm_cuda: x must be 2-D (rows, hidden)");
            TORCH_CHECK(x.is_contiguous(), "rmsnorm_cuda: x must be contiguous (call .contiguous() first)");
            TORCH_CHECK(x.size(1) >= 1, "rmsnorm_cuda: x needs at least one column");
            TORCH_CHECK(weight.dim() == 1 && weight.size(0) == x.size(1), "rmsnorm_cuda: weight must have shape (hidden,)");
            TORCH_CHECK(weight.is_contiguous(), "rmsnorm_cuda: weight must be contiguous");
            TORCH_CHECK(weight.scalar_type() == x.scalar_type(), "rmsnorm_cuda: weight must have the dtype of x");
            TORCH_CHECK(x.size(0) <= 2147483647, "rmsnorm_cuda: at most 2**31 - 1 rows (one block each)");
            const c10::cuda::CUDAGuard guard(x.device());
            auto y = torch::empty_like(x);
            if (x.size(0) == 0) return y;
            switch (x.scalar_type()) {
                case torch::kFloat32:
                    launch_rmsnorm<float>(y, x, weight, eps);
                    break;
                case torch::kFloat16:
                    launch_rmsnorm<c10::Half>(y, x, weight, eps);
                    break;
                case torch::kBFloat16:
                    launch_rmsnorm<c10::BFloat16>(y, x, weight, eps);
                    break;
                default:  // refused above
                    TORCH_CHECK(false, "rmsnorm_cuda: x must be float32, float16 or bfloat16");
            }
            return y;
            ### END SOLUTION
        }
        """


        def load_rmsnorm_cuda():
            """Your extension, built from RMSNORM_CUDA (or loaded from the cache): a module with
            rmsnorm_cuda(x, weight, eps)."""
            # TODO: compile_cuda(RMSNORM_CUDA, ["rmsnorm_cuda"], name="p04_rmsnorm")
            ### BEGIN SOLUTION
            return compile_cuda(RMSNORM_CUDA, ["rmsnorm_cuda"], name="p04_rmsnorm")
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 6. What each way costs: kernels, bytes, lines

        The cell below counts, without a GPU, what the eager composition does: it runs your `rmsnorm_torch` on
        **meta tensors** (shapes and dtypes, no data) of the benchmark's size under a `TorchDispatchMode` that records
        every ATen operator — in eager mode on a GPU, one kernel launch each — and the bytes of the tensors each one
        reads and writes. It also counts the non-blank, non-comment lines of your three implementations as they stand
        in this notebook. The other three bars are stated, not counted: the fused kernels (yours, and the one
        `torch.compile` generates, which is not run here) are one launch each and move the ideal $2NHb + Hb$ bytes
        from HBM — a second pass over a row that was just read is served by L1/L2.
    """)
    lesson.code(r"""
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_leaves


        class KernelRecorder(TorchDispatchMode):
            # Every ATen op (one kernel each in eager mode on a GPU) and the bytes of the tensors it reads and writes.
            def __init__(self):
                super().__init__()
                self.ops = []

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                tensors = [t for t in tree_leaves((args, kwargs, out)) if isinstance(t, torch.Tensor)]
                self.ops.append((func.overloadpacket.__name__, sum(t.numel() * t.element_size() for t in tensors)))
                return out


        def lines_of_code(*sources):
            code = "\n".join(sources).splitlines()
            return sum(1 for line in code if line.strip() and not line.strip().startswith(("#", "//")))


        N, H = 32768, 4096
        x_meta = torch.empty(N, H, dtype=torch.bfloat16, device="meta")
        w_meta = torch.empty(H, dtype=torch.bfloat16, device="meta")
        ideal = 2 * N * H * 2 + H * 2
        try:
            with KernelRecorder() as recorder:
                rmsnorm_torch(x_meta, w_meta, 1e-6)
            eager_ops = [name for name, _ in recorder.ops]
            eager_bytes = sum(nbytes for _, nbytes in recorder.ops)
            print(f"eager composition: {len(eager_ops)} ops {eager_ops}")
            print(f"  bytes read + written: {eager_bytes / 1e9:.2f} GB vs the fused ideal {ideal / 1e9:.3f} GB "
                  f"({eager_bytes / ideal:.1f}x)")
            lines = {
                "PyTorch\n(yours)": lines_of_code(inspect.getsource(rmsnorm_torch)),
                "Triton\n(yours)": lines_of_code(inspect.getsource(rmsnorm_kernel.fn), inspect.getsource(rmsnorm_triton)),
                "CUDA C++\n(yours)": lines_of_code(RMSNORM_CUDA),
            }
            labels = ["PyTorch eager", "torch.compile", "Triton", "CUDA C++"]
            kernels = [len(eager_ops), 1, 1, 1]
            traffic = [eager_bytes / 1e9, ideal / 1e9, ideal / 1e9, ideal / 1e9]
            fig, axes = plt.subplots(1, 3, figsize=(13, 3.4))
            axes[0].bar(list(lines), list(lines.values()), color=["tab:blue", "tab:orange", "tab:green"])
            axes[0].set_ylabel("lines (non-blank, non-comment)")
            axes[0].set_title("code you write and maintain")
            axes[1].bar(labels, kernels, color="tab:gray")
            axes[1].set_ylabel("kernel launches per call")
            axes[1].set_title("kernels launched")
            axes[2].bar(labels, traffic, color="tab:red")
            axes[2].axhline(ideal / 1e9, color="black", lw=0.8, ls="--", label="2NHb + Hb")
            axes[2].set_ylabel("GB read + written")
            axes[2].set_title(f"HBM traffic at {N} x {H} bf16")
            axes[2].legend()
            for ax in axes[1:]:
                ax.tick_params(axis="x", labelsize=8)
            fig.tight_layout()
            plt.show()
        except NotImplementedError:
            print("Implement rmsnorm_torch (and the kernels) first: this figure counts your code.")
    """)
    lesson.md(r"""
        What the count shows, for the reference composition at $32768 \times 4096$ bf16: nine operators — the upcast
        of $x$, `pow`, `mean`, `add`, `rsqrt`, two multiplies, the upcast of the (tiny) weight and the final cast —
        moving about 5.4 GB against the ideal 0.54 GB. Three of them (`add`, `rsqrt`, the weight cast) touch only
        $N$ or $H$ elements, but each still costs a launch of a few microseconds. At the spec bandwidth the extra
        4.8 GB alone is a 1 ms floor against 0.11 ms for the fused kernel: the eager version cannot be faster than
        roughly a tenth of the fused one's speed, however good each of its kernels is.

        ## 7. The benchmark, and reading the numbers (GPU only)

        `python -m llm_algo bench p04.cuda_vs_triton` times, in one run, at $32768 \times 4096$ bf16 and
        $4096 \times 4096$ fp32: your CUDA C++ kernel, your Triton kernel, the PyTorch composition in eager mode and
        under `torch.compile`, `F.rms_norm`, and a device-to-device copy of $x$ (the roofline: read $NHb$, write
        $NHb$). Each row reports GB/s as $(2NHb + Hb)$ divided by the median time of `triton.testing.do_bench`. The
        cell below runs the same comparison in this notebook where there is a GPU.
    """)
    lesson.code(r"""
        if not torch.cuda.is_available() or lesson.policy.triton_path != "compiled":
            print("Benchmarks need a CUDA GPU with compute capability >= 8.0; skipped here.")
        else:
            try:
                module = load_rmsnorm_cuda()
                compiled = torch.compile(rmsnorm_torch, dynamic=False)
                for n, h, dtype in ((32768, 4096, torch.bfloat16), (4096, 4096, torch.float32)):
                    x = torch.randn(n, h, device="cuda", dtype=dtype)
                    w = torch.randn(h, device="cuda", dtype=dtype)
                    moved = 2 * x.numel() * x.element_size() + w.numel() * w.element_size()
                    candidates = {
                        "CUDA C++ (yours)": lambda: module.rmsnorm_cuda(x, w, 1e-6),
                        "Triton (yours)": lambda: rmsnorm_triton(x, w, 1e-6),
                        "PyTorch eager": lambda: rmsnorm_torch(x, w, 1e-6),
                        "torch.compile": lambda: compiled(x, w, 1e-6),
                        "F.rms_norm": lambda: F.rms_norm(x, (h,), w, 1e-6),
                        "copy (roofline)": lambda: x.clone(),
                    }
                    print(f"{n} x {h} {dtype}:")
                    for label, fn in candidates.items():
                        ms = triton.testing.do_bench(fn, return_mode="median")
                        print(f"  {label:18s} {ms * 1e3:9.1f} us  {moved * 1e-9 / (ms * 1e-3):7.0f} GB/s")
            except NotImplementedError:
                print("Implement the three exercises first: this benchmark times your code.")
    """)
    lesson.md(r"""
        **Reading the numbers.** One run on an H200 (`python -m llm_algo bench p04.cuda_vs_triton`, the reference
        solutions; torch 2.11, Triton 3.6, CUDA 13.0; your GPU will differ). GB/s is the ideal traffic
        $2NHb + Hb$ over the median time for every row, and the copy row counts its read and its write:

        | | 32768 × 4096 bf16 | vs copy | 4096 × 4096 fp32 | vs copy |
        | --- | --- | --- | --- | --- |
        | CUDA C++ `rmsnorm_cuda` | 0.154 ms, 3487 GB/s | 0.85x | 40.3 µs, 3332 GB/s | 0.90x |
        | Triton `rmsnorm_triton` | 0.135 ms, 3966 GB/s | 0.97x | 38.5 µs, 3490 GB/s | 0.94x |
        | PyTorch eager `rmsnorm_torch` | 1.747 ms, 307 GB/s | 0.075x | 168.7 µs, 796 GB/s | 0.21x |
        | `torch.compile(rmsnorm_torch)` | 0.146 ms, 3675 GB/s | 0.89x | 37.4 µs, 3592 GB/s | 0.97x |
        | `F.rms_norm` | 0.159 ms, 3379 GB/s | 0.82x | 48.5 µs, 2765 GB/s | 0.75x |
        | device-to-device copy of $x$ | 0.131 ms, 4110 GB/s | 1x | 36.3 µs, 3702 GB/s | 1x |

        - **The copy** sets the roofline: 4110 GB/s for 256 MiB, 86% of the spec's 4.8 TB/s, and 3702 GB/s (77%)
          for 64 MiB. Judge every other row against the copy of the same size in the same run, not against the spec.
        - **Your Triton kernel** is the fastest at the large shape, at 0.97x of the copy: it reads each row once and
          keeps it in registers between the reduction and the scaling. **Your CUDA kernel** is 14% slower there
          (0.154 against 0.135 ms, 0.85x of the copy) and 5% slower at the fp32 shape, more than the "small
          difference either way" one might expect from two kernels with the same algorithm. The likely cause is in
          its code: after the two barriers, the second loop loads the row of $x$ (and $w$) **again**, so every block
          waits for two rounds of memory latency, and the second round is served by L1 or L2 only if the row is still
          there. This was not profiled: Nsight Compute's DRAM bytes read (256 MiB if the second pass hits the caches,
          more if not), its L1 hit rate and its stall reasons would confirm it, and so would a variant that keeps
          each thread's chunks in registers between the passes (two 16-byte vectors per thread in bf16 at
          $H = 4096$, four in fp32), as the Triton kernel does.
        - **PyTorch eager** is 12.9x slower than your Triton kernel at the bf16 shape, 0.075x of the copy, near the
          tenth that its ten-fold traffic predicts (section 6): its 5.4 GB take 1.747 ms, 3.07 TB/s, 0.75x of the
          copy's speed per byte. In fp32 the casts are no-ops (`x.float()` of an fp32 tensor returns it), so the
          composition moves $7NHb$ instead of $2NHb + Hb$ (pow: read and write; mean: read; two multiplies: read and
          write) and lands at 0.21x of the copy: again its kernels stream at about 0.75x of the copy's speed.
        - **`torch.compile`** fuses the composition into one generated Triton kernel: 0.89x of the copy in bf16, 8%
          behind your Triton kernel, and the fastest row in fp32, 0.97x, 3% ahead of it. **`F.rms_norm`** is fused in
          this build (torch 2.11 on CUDA): one kernel, at 0.159 ms rather than the eager composition's 1.747 ms. It is
          nonetheless the slowest fused row, 0.82x and 0.75x of the copy; its kernel was not profiled here.
        - **At $4096 \times 4096$ fp32** the ideal time is 28 µs at the spec bandwidth, and the copy and every fused
          row lose absolute bandwidth against the large shape (the copy from 4110 to 3702 GB/s, Triton from 3966 to
          3490), most likely because fixed costs per call stop being small next to 36 µs: the kernel's start and
          ramp-up, and the partly idle last wave of the grid (4096 blocks on 132 SMs, about 3.9 waves if 8 blocks of
          256 threads fit on an SM). Against the copy of the same size, which pays the same fixed costs, the picture
          is mixed rather than uniformly worse: Triton (0.97x to 0.94x) and `F.rms_norm` (0.82x to 0.75x) fall, your
          CUDA kernel (0.85x to 0.90x) and `torch.compile` (0.89x to 0.97x) rise. (The eager row rises to 796 GB/s
          only because its fp32 casts are no-ops, above.)
    """)
    lesson.stop()
    lesson.md(r"""
        ## 8. Reading the solutions

        **`rmsnorm_torch`.** `x.float()` first: every later operator then runs in fp32, including `pow` (no fp16
        overflow) and the `mean` (fp32 accumulation). `keepdim=True` keeps the mean as `(..., 1)` so it broadcasts
        against `(..., H)`; `mean` over `dim=-1` divides by $H$. `torch.rsqrt(mean_square + eps)` keeps $\varepsilon$
        inside the root, as `F.rms_norm` and Hugging Face do. One `.to(x.dtype)` at the end rounds once. (Hugging
        Face's Llama rounds the normalised $x$ to bf16 *before* multiplying by the bf16 weight; that is a second
        rounding, equally accepted by the checks' tolerance, and the reason Liger-Kernel has a `casting_mode` to
        reproduce each model's order bit for bit.)

        **`rmsnorm_triton`.** `tl.program_id(0).to(tl.int64)` before multiplying by the row stride: a $32768 \times
        65536$ tensor has $2^{31}$ elements. `other=0.0` is the identity of the sum of squares, and the sum is divided
        by `n_cols`, not by `BLOCK_SIZE`. The weight is loaded after the reduction only to keep its registers free
        while the reduction runs; the order does not matter for correctness. The wrapper passes `rows.stride(0)`
        rather than assuming `H`: `x[:, :H]` of a wider buffer is a legal input whose rows are further apart.

        **`rmsnorm_cuda`.** Each thread's strided loop reads, across the block, 256 consecutive 16-byte chunks per
        pass: fully coalesced. The reduction has three levels — inside a thread (its `VEC`-wide chunks), inside a warp
        (`warp_sum`: five shuffles), across warps (shared memory, a barrier, and warp 0 reducing eight partials with
        the same `warp_sum`, the lanes past `WARPS` contributing 0). The second barrier is the broadcast. The alignment
        test is on the pointers as well as on `cols % VEC`: `torch.empty(n + 1)[1:]` is contiguous and misaligned,
        and a `float4` load from it is a *misaligned address* fault that kills the CUDA context. `static_cast<float>`
        of `c10::Half` and `c10::BFloat16` compiles to the hardware conversion; the template instantiates three
        dtypes × two widths.

        **`rmsnorm_block_model`.** The model is the kernel with the threads as a tensor dimension: `partial` is the
        one register per thread, each pass of 256 columns is one iteration of the strided loop (the padded columns of
        the last pass are the threads whose `c < chunks` test fails: they add nothing), `warp_sums[:, :, 0]` is the
        `if (lane == 0) warp_partials[warp] = sum_sq` store, and `lanes[:, :WARPS] = shared` is warp 0's
        `lane < WARPS ? warp_partials[lane] : 0.0f`. The model cannot show the barriers — a tensor is written before
        it is read by construction — which is exactly what the two `__syncthreads()` guarantee on the GPU.

        **The usual mistakes, and why they are wrong**: in PyTorch, no fp32
        upcast (fp16 squares overflow), no cast back (an fp32 result for a bf16 input), $\varepsilon$ outside the
        root, a sum instead of a mean, calling `F.rms_norm`; in Triton, the mean over `BLOCK_SIZE`, no load mask,
        rows addressed with `n_cols` instead of the row stride, no fp32 upcast, returning the builtin's result, the
        hidden size passed as the row stride; in the thread model, no step across warps, the mean over the padded
        length, padding with ones, one pass only; in CUDA, forgetting the cross-warp step, dividing by the padded
        length, accumulating in the input dtype (caught by bf16 rows of 65536 with outlier channels: a bf16 sum of 256
        squares stops growing once it is large), $\varepsilon$ outside the root, and a missing contiguity check.

        ## 9. What each way costs, and who picks which

        | | PyTorch eager | `torch.compile` | Triton | CUDA C++ |
        | --- | --- | --- | --- | --- |
        | you write (section 6 counts) | ~14 lines with validation; the math is 4 | the same | ~40 lines: a row-level kernel + wrapper | ~115 lines: threads, vectors, reductions, launcher, dtype dispatch |
        | decided for you | everything (one kernel per op) | fusion, the generated kernel, its launch | thread layout, vector widths, shared memory, reductions, pipelining | nothing |
        | kernels / traffic | ~9 / ~10× ideal | 1 / ideal | 1 / ideal | 1 / ideal |
        | portability | every backend | CUDA, ROCm, CPU (C++) | NVIDIA and AMD GPUs (and its interpreter) | NVIDIA; AMD through a HIP port (hipify) |
        | debugging | Python, any tensor | generated code to read (`TORCH_LOGS=output_code`) | `TRITON_INTERPRET=1` runs it in Python with `print` and `pdb` | `compute-sanitizer`, `cuda-gdb`, `printf` |
        | build | none | seconds of compile at first call | JIT at first launch, cached | nvcc: tens of seconds (this lesson's `compile_cuda`) |

        **Production.** Serving engines that squeeze every microsecond and fuse more into the norm write it in CUDA:
        vLLM's `csrc/layernorm_kernels.cu` has `rms_norm` and `fused_add_rms_norm` (the residual add fused in: read
        $x$ and the residual once, write both), plus variants that quantise the output to fp8/int8 for the next GEMM;
        SGLang's `sgl-kernel` exposes the same pair, built on FlashInfer's CUDA norm kernels; TensorRT-LLM ships its own
        CUDA RMSNorm (with quantisation fused). Training libraries that care about readability and AMD support write
        Triton: Liger-Kernel's `LigerRMSNormFunction` and Unsloth's `fast_rms_layernorm` are the kernel of section 4
        plus a backward (`p03.rmsnorm`). PyTorch added `F.rms_norm` and `nn.RMSNorm` in 2.4 as a composite of the eager
        ops; later releases route it on CUDA to a fused kernel, `aten._fused_rms_norm` (on other devices it may still
        decompose into the eager ops: the benchmark shows which you got); `torch.compile` of any of these gives one Triton
        kernel. The choice in practice: start from the PyTorch spec, let `torch.compile` fuse it, write Triton when
        you need a fusion the compiler does not find (a norm fused with a residual add, a quantisation, a
        backward's two-stage reduction), and drop to CUDA when you need control Triton does not give — specific
        instructions, warp-specialised pipelines, a library (vLLM, CUTLASS, FlashAttention) already built in C++.
    """)
    lesson.mistakes()
    return lesson
