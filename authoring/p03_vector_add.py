"""Source of 03_Triton_Kernels/01_Vector_Add.ipynb (build with `python -m llm_algo build p03.vector_add`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p03.vector_add",
        path="03_Triton_Kernels/01_Vector_Add.ipynb",
        title_en="Programs, blocks and masks: vector add in Triton",
        title_zh="程序、块与掩码：Triton 向量加法",
        difficulty="easy",
        device="cpu",
        minutes=50,
        prerequisites=[],
        triton=True,
    )
    lesson.title(
        intro=r"""
        Most of the kernels behind an LLM — RMSNorm, RoPE, SwiGLU, softmax, the residual add — do very little
        arithmetic per byte they touch. Their speed is set by how fast they stream memory: an H200 moves about 4.8 TB/s
        from HBM and does ~990 TFLOP/s of bf16 matrix math, so an elementwise kernel that does one add per 12 bytes
        can never be compute-bound. The only question is whether it reaches the memory roofline.

        **You will implement** a 1-D vector add (program ids, blocks, masks) and a 2-D add over strided, possibly
        transposed tensors (strides and 2-D grids). **Graded against** `torch.add` on many sizes that are not a multiple
        of the block, with guard bytes after the output that a missing mask would overwrite. On a CPU the kernels run in
        Triton's interpreter (`TRITON_INTERPRET=1`, set by the setup cell before Triton is imported); on a GPU of compute
        capability 8.0 or newer they are compiled.
    """
    )
    lesson.md(r"""
        ## 本节要点

        - **问题**：RMSNorm、RoPE、SwiGLU、residual add 等逐元素 kernel 每字节的计算极少（H200：约 4.8 TB/s HBM 对 ~990 TFLOP/s bf16），一定是 memory-bound；唯一的问题是能否跑到内存 roofline。
        - **Triton 编程模型**：一个 grid 启动多个 program，每个 program 处理一个 block：`pid = tl.program_id(0)`，`offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)`。
        - **Grid 与 mask**：program 数为 $\lceil n / \text{BLOCK\_SIZE}\rceil$（`triton.cdiv`），最后一个 block 用 `mask = offsets < n` 保护 `tl.load` 和 `tl.store`。
        - **2-D add**：二维 grid，每个 program 处理一个 tile；地址 = `row * stride_0 + col * stride_1`，每个 tensor 用自己的 stride（支持转置、非连续），mask 同时检查行和列。
        - **测试方式**：大小不是 block 的整数倍，输出后面放 guard 字节，缺 mask 的写越界会被发现；CPU 上用 Triton interpreter（`TRITON_INTERPRET=1`）运行。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. The programming model

        A CUDA kernel is written for one *thread*. A Triton kernel is written for one **program** (程序实例): a
        block of work that the compiler spreads over the threads of one GPU thread block. You launch a 1-D, 2-D or 3-D
        **grid** of programs; each finds its share with `tl.program_id(axis)` and works on whole blocks of elements at a
        time, as tensors of a compile-time size (`tl.constexpr`, a power of two).

        For $n$ elements and a block of $B$:

        $$
        \text{grid} = \lceil n / B \rceil,\qquad
        \text{offsets}_p = pB + [0, 1, \dots, B-1],\qquad
        \text{mask}_p = \text{offsets}_p < n .
        $$

        ```
        n = 10, BLOCK_SIZE = 4, grid = cdiv(10, 4) = 3 programs
        element:  0 1 2 3 | 4 5 6 7 | 8 9 . .
        program:  0 0 0 0 | 1 1 1 1 | 2 2 2 2
        mask:     1 1 1 1 | 1 1 1 1 | 1 1 0 0   <- the last block hangs over the end
        ```

        `tl.load(ptr + offsets, mask=mask)` reads only where the mask is true, and `tl.store` writes only there. A
        missing mask on the last block reads past the end of the tensor (garbage, or an illegal-address fault) and, worse,
        *writes* into whatever the allocator placed next: another tensor of your model. Pointers are plain addresses:
        `x_ptr + offsets` is pointer arithmetic in elements of `x`'s dtype.

        **Traffic.** `out = x + y` reads $2n$ and writes $n$ elements: $3n \cdot$ `element_size` bytes. That number,
        divided by the time, is the bandwidth we plot at the end.

        > **Interpreter vs GPU.** On a CPU these notebooks run your kernels in Triton's interpreter
        > (`TRITON_INTERPRET=1`): plain NumPy, one program after another. It is a good debugger, but it accepts
        > code the GPU compiler rejects, so keep three rules from this lesson on, even when the CPU does not ask:
        >
        > - **Globals read inside a kernel must be `tl.constexpr`** (`LN2 = tl.constexpr(0.693...)`). The interpreter
        >   reads any Python global; the compiler refuses a plain `float` global with "Cannot access global variable".
        > - **`tl.dot` has minimum shapes** on the GPU, set by the tensor-core instructions: Triton 3.9's NVIDIA
        >   backend wants K ≥ 16 for 16-bit inputs (8 for fp32, 32 for 8-bit) and pads small M and N; older releases
        >   wanted 16 in every dimension. Tiles of at least 16 × 16 × 16 compile everywhere. The interpreter multiplies
        >   an `8 × 8` by an `8 × 8` without complaint.
        > - **`tl.device_assert` checks nothing by default**: on a GPU it is compiled in only with `TRITON_DEBUG=1`
        >   set before the first launch; Triton 3.9's interpreter ignores it. Validate inputs in the wrapper.
        >
        > The interpreter also runs programs in order, so races between programs never show. `p03.debugging` has the
        > whole table and the tools for what the interpreter cannot show.
    """)
    lesson.setup(r"""
        import matplotlib.pyplot as plt
        import torch
        import triton
        import triton.language as tl
    """)
    lesson.md(r"""
        ## 2. Exercise `vector_add`: one program per block

        Write the kernel (each program loads its block of `x` and `y` under a mask, adds, stores under the mask) and the
        wrapper, in three steps: check the inputs (same shape, same device, contiguous) with a message; allocate the
        output; launch `cdiv(n, BLOCK_SIZE)` programs. Keep the kernel's signature: the check calls it directly.
    """)
    lesson.exercise(
        "vector_add",
        r'''
        @triton.jit
        def add_kernel(
            # Pointers
            x_ptr, y_ptr, out_ptr,
            # Shapes
            n_elements,
            # Meta-parameters
            BLOCK_SIZE: tl.constexpr,
        ):
            """out[i] = x[i] + y[i] for the BLOCK_SIZE elements of this program, masked at the end."""
            # TODO: which block is mine? (tl.program_id) -> the offsets of my elements -> a mask for the tail
            # TODO: masked loads of x and y, the add, a masked store
            ### BEGIN SOLUTION
            pid = tl.program_id(axis=0)
            offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)  # (BLOCK_SIZE,)
            mask = offsets < n_elements
            x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
            y = tl.load(y_ptr + offsets, mask=mask, other=0.0)
            tl.store(out_ptr + offsets, x + y, mask=mask)
            ### END SOLUTION


        def vector_add(x: torch.Tensor, y: torch.Tensor, block_size: int = 1024) -> torch.Tensor:
            """x + y for contiguous tensors of the same shape, dtype and device; returns a new tensor."""
            # TODO 1: check constraints (shape, dtype, device, contiguity) and raise ValueError with a message
            # TODO 2: allocate the output
            # TODO 3: launch enough programs to cover every element
            ### BEGIN SOLUTION
            if x.shape != y.shape or x.dtype != y.dtype or x.device != y.device:
                raise ValueError(f"x and y must match: {tuple(x.shape)} {x.dtype} {x.device} vs {tuple(y.shape)} {y.dtype} {y.device}")
            if not (x.is_contiguous() and y.is_contiguous()):
                raise ValueError("vector_add needs contiguous tensors; call .contiguous() first")
            out = torch.empty_like(x)
            n = x.numel()
            grid = lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)
            add_kernel[grid](x, y, out, n, BLOCK_SIZE=block_size)
            return out
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 3. Exercise `matrix_add`: strides and a 2-D grid

        A tensor is a pointer plus **strides** (步长): element `(i, j)` of `x` lives at `x_ptr + i * x.stride(0) + j * x.stride(1)`.
        A transposed view swaps the strides; a slice `x[:, ::2]` doubles one. A kernel that assumes `stride = (N, 1)` is
        correct for exactly one layout and silently wrong for the others, which is why every kernel in this part takes
        strides as arguments and the wrapper passes `x.stride(i)`.

        Program `(pid_m, pid_n)` of a 2-D grid owns the tile of rows `pid_m * BLOCK_M + [0, BLOCK_M)` and columns
        `pid_n * BLOCK_N + [0, BLOCK_N)`. Build the 2-D offsets by broadcasting a column of row indices `[:, None]`
        against a row of column indices `[None, :]`, and mask both edges. Write the output contiguous.
    """)
    lesson.exercise(
        "matrix_add",
        r'''
        @triton.jit
        def add_2d_kernel(
            # Pointers
            x_ptr, y_ptr, out_ptr,
            # Shapes
            M, N,
            # Strides
            stride_xm, stride_xn, stride_ym, stride_yn, stride_om, stride_on,
            # Meta-parameters
            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
        ):
            """out[i, j] = x[i, j] + y[i, j] over one (BLOCK_M, BLOCK_N) tile, for any strides."""
            # TODO: row and column indices of my tile from the two program ids
            # TODO: (BLOCK_M, BLOCK_N) pointers for x, y and out from the strides; a mask for both edges
            ### BEGIN SOLUTION
            rows = tl.program_id(axis=0) * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,)
            cols = tl.program_id(axis=1) * BLOCK_N + tl.arange(0, BLOCK_N)  # (BLOCK_N,)
            mask = (rows[:, None] < M) & (cols[None, :] < N)                 # (BLOCK_M, BLOCK_N)
            x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xn, mask=mask, other=0.0)
            y = tl.load(y_ptr + rows[:, None] * stride_ym + cols[None, :] * stride_yn, mask=mask, other=0.0)
            tl.store(out_ptr + rows[:, None] * stride_om + cols[None, :] * stride_on, x + y, mask=mask)
            ### END SOLUTION


        def matrix_add(x: torch.Tensor, y: torch.Tensor, block_m: int = 32, block_n: int = 32) -> torch.Tensor:
            """x + y for 2-D tensors of the same shape, any strides; returns a new contiguous tensor."""
            # TODO 1: check constraints (2-D, same shape, dtype, device)
            # TODO 2: allocate a contiguous output
            # TODO 3: a 2-D grid of tiles; pass every stride from .stride(i)
            ### BEGIN SOLUTION
            if x.dim() != 2 or x.shape != y.shape or x.dtype != y.dtype or x.device != y.device:
                raise ValueError(f"matrix_add needs two 2-D tensors that match: {tuple(x.shape)} vs {tuple(y.shape)}")
            M, N = x.shape
            out = torch.empty((M, N), dtype=x.dtype, device=x.device)
            grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]), triton.cdiv(N, meta["BLOCK_N"]))
            add_2d_kernel[grid](
                x, y, out, M, N,
                x.stride(0), x.stride(1), y.stride(0), y.stride(1), out.stride(0), out.stride(1),
                BLOCK_M=block_m, BLOCK_N=block_n,
            )
            return out
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 4. Bandwidth against the roofline (GPU only)

        On a GPU, the cell below times your `vector_add` and `torch.add` with `triton.testing.do_bench` (CUDA events, the
        median of many runs after a warm-up) for sizes from 4 K to 256 M elements and plots achieved bandwidth,
        $3 n \cdot 4\ \text{bytes} / t$. Small sizes are dominated by the ~5 µs it takes to launch a kernel; from a few
        million elements on, both curves should sit near the device-to-device copy bandwidth. On a CPU it says so and
        does nothing: the interpreter measures Python, not a GPU.
    """)
    lesson.code(r"""
        if lesson.policy.triton_path != "compiled":
            print("Benchmarks need a CUDA GPU with compute capability >= 8.0; skipped here.")
        else:
            @triton.testing.perf_report(triton.testing.Benchmark(
                x_names=["n"], x_vals=[2 ** k for k in range(12, 29, 2)], x_log=True,
                line_arg="provider", line_vals=["triton", "torch"], line_names=["your vector_add", "torch.add"],
                ylabel="GB/s", plot_name="vector-add bandwidth (fp32)", args={},
            ))
            def bandwidth(n, provider):
                x = torch.randn(n, device=DEVICE)
                y = torch.randn(n, device=DEVICE)
                fn = (lambda: vector_add(x, y)) if provider == "triton" else (lambda: x + y)
                ms = triton.testing.do_bench(fn, return_mode="median")
                return 3 * n * x.element_size() * 1e-9 / (ms * 1e-3)  # GB/s

            try:
                bandwidth.run(print_data=True, show_plots=True)
            except NotImplementedError:
                print("Implement vector_add first: this benchmark times your kernel.")
    """)
    lesson.md(r"""
        **Reading the numbers** (one run of the reference solution on an NVIDIA H200; your GPU will differ). At
        $2^{28}$ fp32 elements (3 GiB moved per call) both `vector_add` and `torch.add` reached 4345 GB/s, and a
        device-to-device copy of 1 GiB timed in the same run 4214 GB/s: at this size there is nothing left to gain.
        At 4096 elements both managed about 10 GB/s — the few microseconds of a launch dominate — and they cross
        1 TB/s only around a million elements. Small elementwise ops in a real model are launch-bound, which is the
        argument for fusing them into their neighbours (and for CUDA graphs, `p04.cuda_graphs`).
    """)
    lesson.stop()
    lesson.md(r"""
        ## 5. Reading the solutions

        **`add_kernel`.** `tl.arange(0, BLOCK_SIZE)` is a block of consecutive indices; adding `pid * BLOCK_SIZE` places it.
        The mask is computed once and used for both loads and the store. `other=0.0` fills the masked-off lanes with a
        harmless value: for an add it does not matter, but make it a habit — before a `max` the identity is `-inf`,
        before a sum or a `tl.dot` it is `0`. The store's mask is the one that protects memory.

        **The wrapper.** Checking first means a shape mismatch raises a readable error instead of reading past the end
        of the shorter tensor. `grid` is a function of the meta-parameters, so the same wrapper works when an autotuner
        picks `BLOCK_SIZE` later. `triton.cdiv(n, B)` rounds up; `n // B` drops the tail, and tests at sizes that are
        multiples of the block never notice.

        **`add_2d_kernel`.** `rows[:, None]` is `(BLOCK_M, 1)` and `cols[None, :]` is `(1, BLOCK_N)`: their broadcast sum is a
        `(BLOCK_M, BLOCK_N)` tile of addresses. Every operand gets its own strides, so `x.t()` or `x[:, ::2]` works with
        no copy. The output is allocated contiguous; its strides are passed anyway, so the kernel never assumes a layout.

        **The usual mistakes, and why they are wrong**: no mask on the store
        (the guard bytes after the output get overwritten), `n // BLOCK_SIZE` programs (the tail is never written),
        swapped or hard-coded strides (wrong on transposed and sliced inputs), masking only the rows of a 2-D tile.

        **Cost and production.** One read of `x` and `y`, one write of `out`: nothing to fuse inside the kernel. The win
        in real models comes from fusing the add *into a neighbour*: vLLM's `fused_add_rms_norm` adds the residual and
        normalises in one pass, saving a full write and read of the hidden state per layer. `p03.fused_elementwise`
        builds that. Real kernels also pick `BLOCK_SIZE` and `num_warps` by autotuning (`p03.autotune`) and, for very
        large tensors, loop inside a program over several blocks (a *persistent* kernel) instead of launching millions
        of programs.
    """)
    lesson.mistakes()
    return lesson
