"""Source of 03_Triton_Kernels/04_RMSNorm.ipynb (build with `python -m llm_algo build p03.rmsnorm`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p03.rmsnorm",
        path="03_Triton_Kernels/04_RMSNorm.ipynb",
        title_en="RMSNorm in Triton: fused forward, backward and the weight-gradient reduction",
        title_zh="Triton RMSNorm：融合前向、反向与权重梯度归约",
        difficulty="medium",
        device="cpu",
        minutes=100,
        prerequisites=["p02.rmsnorm", "p03.softmax"],
        triton=True,
    )
    lesson.title(
        intro=r"""
        A Llama layer normalises twice, so a 32-layer model runs 65 RMSNorms per forward pass (one more before the LM
        head) and as many backwards. Each is a row reduction followed by an elementwise scale — the shape of the
        softmax kernel — and each is memory-bound: on `32768 × 4096` bf16 activations (256 MiB) the best possible
        forward is a read and a write of that tensor. Eager PyTorch gets the forward close to that; the backward is
        where it loses, because the gradient of the weight is a sum over *all* rows, a reduction in the other
        direction, which a row-per-program kernel cannot do alone.

        **You will implement** the fused forward (one program per row, saving $1/\text{rms}$ for the backward); the
        backward as one kernel that computes `dx` row by row and accumulates per-program partial sums of `dweight`,
        followed by a second, tiny reduction; and a `torch.autograd.Function` that makes them a drop-in `rms_norm`.
        **Graded against** `F.rms_norm` and float64 autograd of it, closed forms, and guard elements around every
        output a kernel writes.
        """,
    )
    lesson.md(r"""
        ## 本节要点

        - **问题**：32 层 Llama 每次前向有 65 个 RMSNorm，都是 memory-bound；反向更慢，因为 weight 的梯度是对所有行的求和，一行一个 program 的 kernel 单独做不了。
        - **前向**：$r_i = 1/\sqrt{\frac{1}{d}\sum_j x_{ij}^2 + \epsilon}$，$y_{ij} = g_j\,x_{ij}\,r_i$；eps 在根号内，均值除以 $d$（`n_cols`），不是 `BLOCK_SIZE`；为反向保存 float32 的 $r$（`rstd`，不是 rms）。
        - **反向公式**：$\hat x = x r$，$u = \bar y \odot g$，$c_i = \frac{1}{d}\sum_j u_{ij}\hat x_{ij}$，$\partial L/\partial x_{ij} = r_i(u_{ij} - \hat x_{ij}c_i)$；$\partial L/\partial g_j = \sum_i \bar y_{ij}\hat x_{ij}$。
        - **dweight 的两级归约**：$P$ 个 program 各处理约 $\lceil n/P\rceil$ 行（循环要截断在最后一行），把部分和写进 float32 缓冲区自己的那一行，再在 host 上 `sum(dim=0)`，顺序固定、无 atomic。
        - **autograd 封装**：`torch.autograd.Function` 的 `backward` 返回 `(dx, dweight, None)`，与 forward 的三个输入对应；用 `reshape` 展平，传入 kernel 前把梯度变成行连续。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. The math, with shapes (recap of `p02.rmsnorm`)

        For rows $x \in \mathbb{R}^{n \times d}$ (all leading dimensions flattened: $n$ = batch × sequence), weight
        $g \in \mathbb{R}^{d}$:

        $$
        r_i = \Big(\tfrac{1}{d}\textstyle\sum_j x_{ij}^2 + \varepsilon\Big)^{-1/2} \in \mathbb{R}^{n}, \qquad
        \hat{x}_{ij} = x_{ij}\, r_i, \qquad y_{ij} = g_j\, \hat{x}_{ij} .
        $$

        Given $\bar{y} = \partial L / \partial y \in \mathbb{R}^{n \times d}$ and $u_{ij} = \bar{y}_{ij} g_j$:

        $$
        \frac{\partial L}{\partial x_{ij}} = r_i\Big(u_{ij} - \hat{x}_{ij}\, c_i\Big), \quad
        c_i = \tfrac{1}{d}\textstyle\sum_k u_{ik}\hat{x}_{ik} \in \mathbb{R}^{n};
        \qquad
        \frac{\partial L}{\partial g_j} = \textstyle\sum_{i} \bar{y}_{ij}\, \hat{x}_{ij} \in \mathbb{R}^{d} .
        $$

        `dx` is row-local: one program per row has everything it needs. `dg` sums over the $n$ rows, which are spread
        over all programs. The forward saves $r$ (`rstd`, $n$ floats, 4 bytes per row: nothing next to the row
        itself) so that the backward does not recompute the reduction.

        **Traffic**, for $b$-byte elements, ignoring the $d$-sized weight and the $n$-sized `rstd`:

        | pass | reads | writes | bytes |
        | --- | --- | --- | --- |
        | forward | $x$ | $y$ | $2ndb$ |
        | backward | $x$, $\bar{y}$ | $\bar{x}$ | $3ndb$ |
        | forward + backward | | | $5ndb$ |

        Eager PyTorch's backward runs a chain of kernels (multiplies, a row sum, another multiply, a column sum), each
        with its own round trip: several times $3ndb$.
    """)
    lesson.setup(r"""
        import matplotlib.pyplot as plt
        import numpy as np
        import torch
        import torch.nn.functional as F
        import triton
        import triton.language as tl
    """)
    lesson.md(r"""
        ## 2. Exercise `rmsnorm_forward`: one row, one program

        As in the softmax kernel: load the row once (masked, `other=0.0`, the identity of the sum of squares), upcast to
        fp32, reduce, scale, store once. Two details decide correctness:

        - the mean divides by `n_cols`, not by `BLOCK_SIZE`: the padded lanes are zeros that must not count;
        - $\varepsilon$ goes *inside* the root: `tl.math.rsqrt(mean_square + eps)`.

        Store `rstd` as float32 for every row, whatever the input dtype. Keep the kernel's signature; the wrapper takes
        a 2-D `x` with unit column stride (any row stride) and returns `(y, rstd)`. The row must fit in one block
        (`MAX_FUSED_COLS`): hidden sizes of real models (4096 to 16384) do.
    """)
    lesson.exercise(
        "rmsnorm_forward",
        r'''
        MAX_FUSED_COLS = 65536


        def warps_for(block_size: int) -> int:
            """Enough warps that each thread holds a few elements of the row, not hundreds."""
            return 4 if block_size <= 2048 else 8 if block_size <= 8192 else 16


        @triton.jit
        def rmsnorm_forward_kernel(
            # Pointers
            y_ptr, rstd_ptr, x_ptr, weight_ptr,
            # Strides
            x_row_stride, y_row_stride,
            # Shapes
            n_cols, eps,
            # Meta-parameters
            BLOCK_SIZE: tl.constexpr,
        ):
            """y[r] = weight * x[r] * rstd[r], rstd[r] = 1 / sqrt(mean(x[r]^2) + eps), for the row r of this program."""
            # TODO: my row as int64, the column offsets and their mask
            # TODO: masked fp32 loads of the row and the weight
            # TODO: rstd from the mean of squares over n_cols (eps inside the root); store rstd and y
            ### BEGIN SOLUTION
            row = tl.program_id(axis=0).to(tl.int64)
            cols = tl.arange(0, BLOCK_SIZE)                                          # (BLOCK_SIZE,)
            mask = cols < n_cols
            x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
            weight = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(tl.float32)
            rstd = tl.math.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)               # scalar, fp32
            tl.store(rstd_ptr + row, rstd)
            tl.store(y_ptr + row * y_row_stride + cols, (x * rstd * weight).to(y_ptr.dtype.element_ty), mask=mask)
            ### END SOLUTION


        def rmsnorm_forward(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6):
            """RMSNorm of the rows of x.

            x: (n_rows, n_cols), unit column stride; weight: (n_cols,) contiguous, x's dtype
            returns (y: (n_rows, n_cols) contiguous in x.dtype, rstd: (n_rows,) float32)
            """
            # TODO 1: check constraints with messages (2-D, unit column stride, weight shape, n_cols <= MAX_FUSED_COLS)
            # TODO 2: allocate y and rstd
            # TODO 3: one program per row, BLOCK_SIZE = next power of 2 >= n_cols, num_warps = warps_for(BLOCK_SIZE)
            ### BEGIN SOLUTION
            if x.dim() != 2 or x.stride(1) != 1:
                raise ValueError(f"rmsnorm_forward needs 2-D x with unit column stride, got {tuple(x.shape)} {x.stride()}")
            n_rows, n_cols = x.shape
            if weight.shape != (n_cols,) or not weight.is_contiguous():
                raise ValueError(f"weight must be contiguous of shape ({n_cols},), got {tuple(weight.shape)}")
            if n_cols > MAX_FUSED_COLS:
                raise ValueError(f"{n_cols} columns do not fit in one block (at most {MAX_FUSED_COLS})")
            y = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
            rstd = torch.empty(n_rows, dtype=torch.float32, device=x.device)
            block_size = triton.next_power_of_2(n_cols)
            rmsnorm_forward_kernel[(n_rows,)](
                y, rstd, x, weight, x.stride(0), y.stride(0), n_cols, eps,
                BLOCK_SIZE=block_size, num_warps=warps_for(block_size),
            )
            return y, rstd
            ### END SOLUTION
        ''',
    )
    lesson.md(r"""
        ## 3. The weight gradient: a reduction across programs

        `dx` for row $i$ needs only row $i$. `dg` needs *every* row: $dg_j = \sum_i \bar{y}_{ij}\hat{x}_{ij}$. Three ways
        to do the sum over rows when each row lives in a different program:

        1. **Atomics.** Each program `tl.atomic_add`s its row's $\bar{y}\odot\hat{x}$ into one fp32 `dg`. Simple, but
           $n$ programs hammer the same $d$ addresses (32768 rows → 32768 atomic adds per element), and the order in
           which the additions land changes from run to run. Floating-point addition is not associative, so `dg` is
           **not deterministic**: two identical training steps give gradients that differ in the last bits, which
           breaks bitwise reproducibility and debugging by comparing runs.
        2. **Partial sums, then a second reduction** (two stages, 两阶段归约). Launch a fixed number $P$ of programs
           (a few per SM); program $p$ handles the rows $p\cdot R, \dots, p\cdot R + R - 1$, $R = \lceil n / P\rceil$,
           keeps its own running $dg$ in fp32 *registers* while it walks its rows, and writes it once to row $p$ of a
           `(P, d)` fp32 buffer. A second reduction sums the $P$ rows. Every addition happens in a fixed order:
           **deterministic**. The buffer is tiny ($P \cdot d \cdot 4$ bytes: 132 SMs × 2 × 4096 × 4 ≈ 4 MB against 256 MiB
           of activations).
        3. **Locks and a small buffer** (Triton's layer-norm tutorial): groups of programs take a spin-lock to
           accumulate into one of $G$ partial rows. Fewer partials than option 2, more complexity; also
           deterministic only if the lock order is.

        We do option 2, which is what Liger-Kernel and Apex's fused norms do. A side benefit: a program that walks many
        rows loads `weight` once, not once per row.

        ```
        program p:   dg_acc = 0   (BLOCK_SIZE fp32 registers)
                     for row in [p*R, min((p+1)*R, n)):
                         load x[row], dy[row], rstd[row]
                         x_hat = x * rstd;  u = dy * w;  c = sum(u * x_hat) / n_cols
                         store dx[row] = rstd * (u - x_hat * c)
                         dg_acc += dy * x_hat
                     store dg_partial[p, :] = dg_acc
        host:        dg = dg_partial.sum(dim=0)        (P x d -> d, fixed order)
        ```

        The figure below shows why determinism is a real issue and not a theoretical one: the same 4096 fp32 numbers
        summed in 200 different orders, as atomics would, give many different answers.
    """)
    lesson.code(r"""
        rng = np.random.default_rng(0)
        values = (rng.standard_normal(4096) * 1e3).astype(np.float32)
        # np.cumsum adds strictly left to right in float32: one order of arrival per permutation
        sums = np.array([np.cumsum(rng.permutation(values), dtype=np.float32)[-1] for _ in range(200)])
        exact = values.astype(np.float64).sum()
        fig, axis = plt.subplots(figsize=(6, 2.6))
        axis.hist(sums.astype(np.float64) - exact, bins=30)
        axis.set_xlabel("fp32 sum - exact sum"); axis.set_ylabel("orders")
        axis.set_title(f"one sum, 200 orders: {len(np.unique(sums))} distinct fp32 results")
        fig.tight_layout(); plt.show()
    """)
    lesson.md(r"""
        ## 4. Exercise `rmsnorm_backward`

        Write the kernel of the pseudocode (keep its signature: the check launches it with its own `(P, d)` buffer) and
        the wrapper: `P = min(num_programs, n_rows)`, `R = cdiv(n_rows, P)`; the partial buffer is fp32; the final `dg`
        is cast to the weight's dtype. When `num_programs` is `None`, use two programs per SM on a GPU (enough to hide
        memory latency while the partial buffer stays small) and 4 under the interpreter.

        The loop bounds are runtime values: `for row in range(row_start, row_end)` with
        `row_end = tl.minimum(row_start + rows_per_program, n_rows)` — the last program may own fewer rows, and a
        program past the end owns none (it must still store zeros, or the host sums garbage). The contiguous range is
        one choice, not the rule: program $p$ could as well take rows $p, p + P, p + 2P, \dots$ (every program then gets
        work, and neighbouring programs read neighbouring rows at the same time). The checks do not look at the mapping,
        only at the sum: every row's `dx` written once, and the `P` partial rows adding up to `dg` with every row counted
        exactly once.
    """)
    lesson.exercise(
        "rmsnorm_backward",
        r'''
        @triton.jit
        def rmsnorm_backward_kernel(
            # Pointers
            dx_ptr, dweight_partial_ptr, dy_ptr, x_ptr, weight_ptr, rstd_ptr,
            # Strides
            dx_row_stride, dy_row_stride, x_row_stride, partial_row_stride,
            # Shapes
            n_rows, n_cols, rows_per_program,
            # Meta-parameters
            BLOCK_SIZE: tl.constexpr,
        ):
            """dx for the rows [p * rows_per_program, ...) of program p, and its partial dweight in row p."""
            program = tl.program_id(axis=0).to(tl.int64)
            cols = tl.arange(0, BLOCK_SIZE)                                          # (BLOCK_SIZE,)
            mask = cols < n_cols
            weight = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(tl.float32)
            dweight_acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
            row_start = program * rows_per_program
            row_end = tl.minimum(row_start + rows_per_program, n_rows)
            # TODO: for each of my rows: fp32 loads of x, dy and rstd; x_hat, u = dy * weight, c = mean of u * x_hat
            # TODO:   store dx = rstd * (u - x_hat * c), masked; accumulate dy * x_hat into dweight_acc
            # TODO: store dweight_acc into row `program` of the partial buffer, masked
            ### BEGIN SOLUTION
            for row in range(row_start, row_end):
                x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
                dy = tl.load(dy_ptr + row * dy_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
                rstd = tl.load(rstd_ptr + row)
                x_hat = x * rstd
                u = dy * weight
                c = tl.sum(u * x_hat, axis=0) / n_cols
                tl.store(dx_ptr + row * dx_row_stride + cols, (rstd * (u - x_hat * c)).to(dx_ptr.dtype.element_ty), mask=mask)
                dweight_acc += dy * x_hat
            tl.store(dweight_partial_ptr + program * partial_row_stride + cols, dweight_acc, mask=mask)
            ### END SOLUTION


        def rmsnorm_backward(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, rstd: torch.Tensor, num_programs=None):
            """Gradients of y = rmsnorm_forward(x, weight)[0] given dy = dL/dy and the forward's rstd.

            dy, x: (n_rows, n_cols), unit column stride; weight: (n_cols,); rstd: (n_rows,) float32
            returns (dx: (n_rows, n_cols) in x.dtype, dweight: (n_cols,) in weight.dtype)
            """
            # TODO 1: check constraints (shapes, unit column strides) with messages
            # TODO 2: choose P programs and R rows per program; weight and rstd contiguous (the kernel reads them with
            #         unit stride); allocate dx and a (P, n_cols) float32 partial buffer
            # TODO 3: launch P programs, then reduce the partial buffer over its rows
            ### BEGIN SOLUTION
            if x.dim() != 2 or dy.shape != x.shape or x.stride(1) != 1 or dy.stride(1) != 1:
                raise ValueError(f"dy and x must be 2-D of one shape with unit column stride, got {tuple(dy.shape)} {tuple(x.shape)}")
            n_rows, n_cols = x.shape
            if weight.shape != (n_cols,) or rstd.shape != (n_rows,) or rstd.dtype != torch.float32:
                raise ValueError(f"need weight ({n_cols},) and float32 rstd ({n_rows},), got {tuple(weight.shape)} {tuple(rstd.shape)} {rstd.dtype}")
            if num_programs is None:
                num_programs = 2 * torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 4
            programs = max(1, min(num_programs, n_rows))
            rows_per_program = triton.cdiv(n_rows, programs)
            weight, rstd = weight.contiguous(), rstd.contiguous()  # the kernel reads both with unit stride
            dx = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
            partial = torch.empty((programs, n_cols), dtype=torch.float32, device=x.device)
            block_size = triton.next_power_of_2(n_cols)
            rmsnorm_backward_kernel[(programs,)](
                dx, partial, dy, x, weight, rstd,
                dx.stride(0), dy.stride(0), x.stride(0), partial.stride(0),
                n_rows, n_cols, rows_per_program,
                BLOCK_SIZE=block_size, num_warps=warps_for(block_size),
            )
            return dx, partial.sum(dim=0).to(weight.dtype)
            ### END SOLUTION
        ''',
    )
    lesson.md(r"""
        ## 5. Exercise `rms_norm`: a drop-in autograd Function

        Real activations are `(batch, seq, hidden)`. `RMSNorm.forward` flattens the leading dimensions into rows
        (`reshape`, which copies only when it must — a `view` fails on a non-contiguous input), runs the fused forward,
        saves `x` (as rows), `weight` and `rstd`, and returns `y` in `x`'s shape. `backward` makes `dy` contiguous rows
        first — autograd hands over whatever layout the next op produced: `y.sum()` gives an expanded gradient whose
        strides are all 0, `y.transpose(...)` a transposed one — and returns one gradient per input of `forward`:
        `dx` in `x`'s shape, `dweight`, and `None` for `eps`.
    """)
    lesson.exercise(
        "rms_norm",
        r'''
        class RMSNorm(torch.autograd.Function):
            """y = RMSNorm(x) * weight over the last dimension of x (..., d), with the fused kernels."""

            @staticmethod
            def forward(ctx, x, weight, eps):
                # TODO: rows = x as row-major (n, d) (the kernel needs unit column stride); y, rstd = rmsnorm_forward(...);
                #       save what the backward needs; y in x's shape
                ### BEGIN SOLUTION
                rows = x.reshape(-1, x.shape[-1]).contiguous()        # (n, d) row-major: a copy only if x is not
                y, rstd = rmsnorm_forward(rows, weight, eps)
                ctx.save_for_backward(rows, weight, rstd)
                return y.reshape(x.shape)
                ### END SOLUTION

            @staticmethod
            def backward(ctx, dy):
                # TODO: dy as contiguous (n, d) rows (autograd may pass an expanded or transposed gradient);
                #       return (dx in x's shape, dweight, None for eps)
                ### BEGIN SOLUTION
                rows, weight, rstd = ctx.saved_tensors
                dy_rows = dy.reshape(rows.shape).contiguous()        # y.sum() hands back an expanded (stride 0) dy
                dx, dweight = rmsnorm_backward(dy_rows, rows, weight, rstd)
                return dx.reshape(dy.shape), dweight, None
                ### END SOLUTION


        def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
            """F.rms_norm(x, (d,), weight, eps) with the fused kernels; differentiable in x and weight."""
            return RMSNorm.apply(x, weight, eps)
        ''',
    )
    lesson.md(r"""
        ## 6. Bandwidth (GPU only)

        The cell below times your forward and your forward + backward against `F.rms_norm` (eager) for 32768 rows of
        growing width in bf16, in GB/s of the fused traffic ($2ndb$ and $5ndb$). `python -m llm_algo bench
        p03.rmsnorm` adds `torch.compile` and a device-to-device copy measured in the same run at `32768 × 4096`.
    """)
    lesson.code(r"""
        if lesson.policy.triton_path != "compiled":
            print("Benchmarks need a CUDA GPU with compute capability >= 8.0; skipped here.")
        else:
            def train_step(norm, x, weight, dy):
                return torch.autograd.grad(norm(x, weight), (x, weight), dy)

            @triton.testing.perf_report(triton.testing.Benchmark(
                x_names=["n_cols"], x_vals=[1024 * 2 ** k for k in range(0, 5)], x_log=True,
                line_arg="provider", line_vals=["mine-fwd", "torch-fwd", "mine-fwd-bwd", "torch-fwd-bwd"],
                line_names=["your forward", "F.rms_norm forward", "your fwd+bwd", "F.rms_norm fwd+bwd"],
                ylabel="GB/s", plot_name="RMSNorm, 32768 rows, bf16", args={"n_rows": 32768},
            ))
            def bandwidth(n_rows, n_cols, provider):
                x = torch.randn(n_rows, n_cols, device=DEVICE, dtype=torch.bfloat16, requires_grad=True)
                weight = torch.randn(n_cols, device=DEVICE, dtype=torch.bfloat16, requires_grad=True)
                dy = torch.randn_like(x)
                eager = lambda x, w: F.rms_norm(x, (n_cols,), w, 1e-6)
                fn, passes = {
                    "mine-fwd": (lambda: rms_norm(x, weight), 2),
                    "torch-fwd": (lambda: eager(x, weight), 2),
                    "mine-fwd-bwd": (lambda: train_step(rms_norm, x, weight, dy), 5),
                    "torch-fwd-bwd": (lambda: train_step(eager, x, weight, dy), 5),
                }[provider]
                ms = triton.testing.do_bench(fn, return_mode="median")
                return passes * x.numel() * x.element_size() * 1e-9 / (ms * 1e-3)

            try:
                bandwidth.run(print_data=True, show_plots=True)
            except NotImplementedError:
                print("Implement the three exercises first: this benchmark times your kernels.")
    """)
    lesson.md(r"""
        **Reading the numbers** (one run of `python -m llm_algo bench p03.rmsnorm` with the reference solutions on an
        NVIDIA H200, Triton 3.6, torch 2.11, every baseline in the same run; your GPU will differ). At `32768 × 4096`
        bf16 the forward — a softmax-shaped kernel: one read, one write, a reduction in registers — ran at 4005 GB/s
        (0.134 ms), 98% of the 4077 GB/s of a device-to-device copy timed in the same run, ahead of `F.rms_norm` eager
        (3376) and `torch.compile` (3657, so 1.10x): the course's forward target (≥ 90% of the copy and at least
        `torch.compile`) is met. The forward + backward through `RMSNorm`, counted as $5ndb$, took 0.427 ms, 3147 GB/s
        or 77% of the copy, against 0.567 ms (2367 GB/s) for `F.rms_norm` forward + backward under `torch.compile` and
        0.596 ms (2251) eager: 1.33x faster than compile, so the target of at least 1.1x compile is **met**, and so is
        the older one of 70% of the copy. The two launchers called directly, without autograd, took 0.383 ms (3509 GB/s,
        86%), the second-stage sum of the partial `dweight` buffer included, so autograd and the `Function`'s reshapes
        and checks cost the remaining 0.044 ms, a tenth of the step. (An earlier run, on 2026-11-30, measured a very
        different forward + backward: 2306 GB/s for ours, about 0.2 ms of it outside the kernels, and 3191 for
        `torch.compile`; the reason for the difference between the two runs was not established, so time it on your
        GPU.) A separate sweep of the backward's `num_programs` (another run: compare its numbers with each other)
        showed that the row loop's memory parallelism matters only up to two programs per SM: for the backward kernel
        alone, one per SM gave 2310 GB/s, two (the default) 3256 with 8 or 16 warps alike, four 3096, eight 3128.
    """)
    lesson.stop()
    lesson.md(r"""
        ## 7. Reading the solutions

        **`rmsnorm_forward_kernel`.** `tl.sum(x * x) / n_cols` — the padded lanes were loaded as 0, so they add nothing
        to the sum, but dividing by `BLOCK_SIZE` would count them. `tl.math.rsqrt(ms + eps)` keeps $\varepsilon$ inside
        the root, as `F.rms_norm` and Hugging Face do. `rstd` is stored in fp32: 4 bytes per row, and the backward is
        exact instead of recomputing a reduction. The weight multiplies in fp32 and the store rounds once.

        **`rmsnorm_backward_kernel`.** The weight is loaded once per program, not once per row. Per row: `x_hat` and `u`
        in registers, one reduction for `c`, one store of `dx`. `dweight_acc += dy * x_hat` — `dy`, not `u`: the
        weight's own gradient does not contain the weight. Every program stores its partial row, including a program
        whose row range is empty (zeros), so the host can sum the whole buffer. Summing `(P, d)` on the host is the
        second stage: `P` is a few hundred, so it costs microseconds.

        **`RMSNorm`.** `reshape` instead of `view` (inputs sliced out of a fused QKV projection are not contiguous);
        `save_for_backward(rows, weight, rstd)` keeps $x$ and $r$ rather than $\hat{x}$ (which would cost another
        $ndb$ of memory); `None` for `eps`, which is not a tensor.

        **The usual mistakes, and why they are wrong**: the mean over `BLOCK_SIZE`
        (wrong whenever $d$ is not a power of two); `eps` outside the root; no store mask; rows addressed by
        `n_cols` (wrong on strided views); `rstd` saved as the rms; the backward without the projection term $-\hat{x}
        c$; `dweight` accumulated from `u` instead of `dy`; every program writing partial row 0 (a race: the result
        depends on which program stored last); the loop running to `row_start + rows_per_program` past the last row;
        `view` where `reshape` is needed; the upstream gradient passed to the kernel without `.contiguous()` (refused,
        or read with the wrong strides, after `y.sum()`); a strided `weight` or `rstd` handed to the backward kernel,
        which reads them with unit stride; the Function's gradients in the wrong order.

        **Production.** Liger-Kernel's `LigerRMSNormFunction` is this design: one program per row forward (with a
        `casting_mode` to match Llama's or Gemma's rounding order, and Gemma's `offset` for $(1 + g)$), and a backward
        launched on `sm_count` programs that accumulate `dW` in registers and write a `(sm_count, d)` fp32 buffer summed
        afterwards. Triton's own layer-norm tutorial uses the lock-based variant (option 3). vLLM's inference kernels
        fuse the residual add into the norm (`fused_add_rms_norm`: `x += residual; residual = x; x = rms_norm(x)`, one
        pass instead of three) and often the fp8 quantisation of the output as well; there is no backward at inference.
        Apex's `FusedRMSNorm` (CUDA) and Megatron-LM's use of Transformer Engine's norm kernels do the same two-stage
        weight gradient in C++.
    """)
    lesson.mistakes()
    return lesson
