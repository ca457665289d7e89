"""Source of 03_Triton_Kernels/05_LayerNorm.ipynb (build with `python -m llm_algo build p03.layernorm`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p03.layernorm",
        path="03_Triton_Kernels/05_LayerNorm.ipynb",
        title_en="LayerNorm forward and backward",
        title_zh="LayerNorm 前向与反向",
        difficulty="hard",
        device="cpu",
        minutes=120,
        prerequisites=["p03.softmax"],
        triton=True,
    )
    lesson.title(
        intro=r"""
        LayerNorm (Ba et al., 2016) normalises every token's hidden vector to zero mean and unit variance, then scales
        and shifts it by learned vectors. GPT-2, GPT-J, BERT, ViT, Whisper, Stable Diffusion's text encoder and many
        more use it (Llama replaced it by RMSNorm, `p03.rmsnorm`). It does almost no arithmetic, so its speed is the
        speed of memory: the forward pass should run at the bandwidth of a copy, and the backward pass has a
        twist that makes it harder than it looks — the gradients of the weight and the bias are sums over **every
        row**, a reduction across programs.

        **You will implement** numerically stable statistics by merging blocks (Welford/Chan, in PyTorch), the fused
        forward kernel that also saves the mean and $1/\sigma$ of every row, the backward kernel that computes
        $\partial x$ row by row and partial weight and bias gradients per program, the second-stage reduction of
        those partials, and the `torch.autograd.Function` that makes it a drop-in layer. **Graded against**
        `torch.var_mean` and `F.layer_norm` in float64, float64 autograd, closed forms, and guard elements around
        every output.
        """,
    )
    lesson.md(r"""
        ## 本节要点

        - **问题**：LayerNorm（GPT-2、BERT、ViT、Whisper 等）几乎没有计算量，速度取决于显存带宽；前向应达到 copy 的带宽，反向的难点在于 weight/bias 梯度是对**所有行**的归约（跨 program 的 reduction）。
        - **公式**：对每行 $x \in \mathbb{R}^N$，$\mu = \frac1N\sum x_i$，$\sigma^2 = \frac1N\sum (x_i-\mu)^2$（有偏方差，除以 $N$），$\hat x = (x-\mu)/\sqrt{\sigma^2+\epsilon}$，$y = \hat x \odot w + b$。
        - **数值稳定的统计量**：分块合并（Welford/Chan）：$\mu \leftarrow \mu + \delta\, n_b/n$，$M_2 \leftarrow M_2 + M_{2,b} + \delta^2 n_a n_b/n$；不要用 $E[x^2]-\mu^2$（均值大时灾难性抵消）。
        - **前向 kernel**：每个 program 处理一行，先中心化再求方差，并保存每行的 $\mu$ 和 $1/\sigma$（不是 $\sigma$）供反向使用。
        - **反向**：$g = dy \odot w$，$dx = \frac1\sigma\big(g - \overline{g} - \hat x\,\overline{g \hat x}\big)$（比 RMSNorm 多一个均值项）；$dw = \sum_\text{rows} dy \odot \hat x$，$db = \sum_\text{rows} dy$：每个 program 累加部分和，第二阶段再归约所有部分和。
        - **autograd**：`torch.autograd.Function` 把它包装成可替换的层；传入 kernel 的梯度要先 `.contiguous()`。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. The math, with shapes

        For one row $x \in \mathbb{R}^{N}$ (a token's hidden vector; a batch is `(M, N)`, `M` = tokens), weight $w$
        and bias $b \in \mathbb{R}^{N}$:

        $$
        \mu = \frac{1}{N}\sum_j x_j,\qquad \sigma^2 = \frac{1}{N}\sum_j (x_j - \mu)^2,\qquad
        r = \frac{1}{\sqrt{\sigma^2 + \varepsilon}},\qquad \hat{x} = (x - \mu)\, r,\qquad y = \hat{x} \odot w + b .
        $$

        The variance is the **biased** one (divide by $N$, as `torch.nn.LayerNorm` does), and $\varepsilon$ (1e-5 by
        default) sits inside the root. The forward pass saves $\mu$ and $r$, `(M,)` each in float32, for the backward.

        **Backward.** With $\bar{y} = \partial L / \partial y$ (`(M, N)`) and $g = \bar{y} \odot w$:

        $$
        \frac{\partial L}{\partial x} = r\Big(g - \underbrace{\tfrac{1}{N}\textstyle\sum_j g_j}_{\text{from } \mu}
        - \hat{x} \cdot \underbrace{\tfrac{1}{N}\textstyle\sum_j g_j \hat{x}_j}_{\text{from } \sigma}\Big),
        \qquad
        \frac{\partial L}{\partial w} = \sum_{\text{rows}} \bar{y} \odot \hat{x},\qquad
        \frac{\partial L}{\partial b} = \sum_{\text{rows}} \bar{y} .
        $$

        $\partial x$ is $r\,g$ with two components removed: the mean of the row (shifting $x$ by a constant does not
        change $y$) and the component along $\hat x$ (scaling $x$ does not change $y$). RMSNorm's backward has only
        the second. $\partial x$ is per row: one program per row, like the forward. $\partial w$ and $\partial b$ sum
        over all $M$ rows: a **reduction across programs**, section 5.

        **Traffic**, with $b$ bytes per element: the forward reads $x$ and writes $y$, $2MNb$ bytes (plus $w, b$ and
        $8M$ bytes of statistics); the backward reads $x$ and $\bar y$ and writes $\partial x$, $3MNb$ bytes. Eager
        PyTorch composed of elementwise ops (`x - mean`, `pow`, `mean`, ...) moves several times that; a fused kernel
        moves exactly this and can run at the speed of a device-to-device copy.

        ## 2. Stable statistics: why not $E[x^2] - E[x]^2$

        One pass computing $\sum x$ and $\sum x^2$ and then $\sigma^2 = \overline{x^2} - \mu^2$ subtracts two large,
        nearly equal numbers when $|\mu| \gg \sigma$. In float32 (about 7 digits) a row with mean 1000 and standard
        deviation 1 has $\overline{x^2} \approx 10^6$, where neighbouring float32 values are $0.06$ apart, and the rounding
        of thousands of additions piles up: the variance of 1 comes out wrong by tens of percent, and for mean $10^4$ it
        is noise (the plot after the first exercise measures both). Two remedies:

        - **Two passes over data already in registers**: $\mu$ first, then $\sum (x-\mu)^2$. When a row fits in one
          block (every hidden size in practice, up to 16k), this costs nothing extra: the row is read from memory once.
          This is what the forward kernel does.
        - **Welford's update, and Chan's merge** (Chan, Golub & LeVeque, 1979), when data arrives in pieces (a row
          longer than a block, or per-thread partial statistics merged across a warp, as PyTorch's own CUDA LayerNorm
          kernel does with its `WelfordOps`). Keep $(n, \mu, M_2)$ with $M_2 = \sum (x - \mu)^2$; two pieces $A, B$
          merge as

        $$
        n = n_A + n_B,\qquad \delta = \mu_B - \mu_A,\qquad \mu = \mu_A + \delta\, \frac{n_B}{n},\qquad
        M_2 = M_{2,A} + M_{2,B} + \delta^2\, \frac{n_A n_B}{n} .
        $$

        Nothing large is subtracted: $\delta$ is a difference of means, $M_2$ a sum of non-negative terms.
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt
        import torch
        import torch.nn.functional as F
        import triton
        import triton.language as tl
    """)
    lesson.md(r"""
        ## 3. Exercise `welford_stats`: merge per-block statistics (PyTorch)

        Walk the columns of `x: (M, N)` in blocks of `block_size` (the last one may be shorter). For each block
        compute its mean and $M_2$ directly (two passes over the block), then merge it into the running $(n, \mu,
        M_2)$ with Chan's formula. Return the mean and the biased variance $M_2 / N$, `(M,)` each, in `x`'s dtype.
    """)
    lesson.exercise(
        "welford_stats",
        r'''
        def welford_stats(x: torch.Tensor, block_size: int):
            """Mean and biased variance over the last dimension by merging blocks of columns (Chan et al.).

            x: (M, N) float32 or float64;  returns (mean (M,), var (M,)) in x.dtype
            """
            n_rows, n_cols = x.shape
            count = 0
            mean = torch.zeros(n_rows, dtype=x.dtype, device=x.device)   # running mean   (M,)
            m2 = torch.zeros(n_rows, dtype=x.dtype, device=x.device)     # running M2     (M,)
            for start in range(0, n_cols, block_size):
                block = x[:, start : start + block_size]                 # (M, n_b)
                n_b = block.shape[1]
                # TODO: the block's mean and M2 (sum of squared deviations from the block's own mean)
                # TODO: Chan's merge into (count, mean, m2)
                ### BEGIN SOLUTION
                block_mean = block.mean(dim=1)                            # (M,)
                block_m2 = (block - block_mean[:, None]).pow(2).sum(dim=1)  # (M,)
                total = count + n_b
                delta = block_mean - mean
                mean = mean + delta * (n_b / total)
                m2 = m2 + block_m2 + delta.pow(2) * (count * n_b / total)
                count = total
                ### END SOLUTION
            return mean, m2 / count
    ''',
    )
    lesson.md(r"""
        ### One pass vs merged blocks, in float32

        Rows of 4096 values with standard deviation 1 around a growing mean: the relative error of the float32
        variance from $\overline{x^2} - \mu^2$ and from your merged blocks (blocks of 256), against float64. Merging is
        not free of rounding either (each block mean is rounded to $|\mu| \cdot 2^{-24}$), but its error grows far more
        slowly.
    """)
    lesson.code(r"""
        offsets = [10.0 ** k for k in range(0, 6)]
        naive_err, merged_err = [], []
        for offset in offsets:
            x64 = torch.randn(64, 4096, dtype=torch.float64) + offset
            x = x64.float()
            true_var = x.double().var(dim=1, unbiased=False)
            naive = (x.pow(2).mean(dim=1) - x.mean(dim=1).pow(2)).double()
            naive_err.append(((naive - true_var).abs() / true_var).max().item())
            try:
                merged_err.append(((welford_stats(x, 256)[1].double() - true_var).abs() / true_var).max().item())
            except NotImplementedError:
                merged_err.append(float("nan"))
        plt.figure(figsize=(6, 3.5))
        plt.loglog(offsets, naive_err, marker="o", label="E[x²] − E[x]² (one pass)")
        plt.loglog(offsets, merged_err, marker="s", label="merged blocks (yours)")
        plt.xlabel("|mean| / std of the row"); plt.ylabel("max relative error of var (float32)")
        plt.title("Variance in float32: cancellation"); plt.legend(); plt.tight_layout(); plt.show()
    """)
    lesson.md(r"""
        ## 4. Exercise `layer_norm_forward`: one row per program

        As in the fused softmax: program `r` loads row `r` (masked, `other=0.0`, upcast to float32), computes $\mu$,
        then the centred row **with the padded lanes forced back to 0** (`tl.where(mask, x - mean, 0.0)`: a padded
        lane holds $0 - \mu$ otherwise, and its square would join the variance), then $\sigma^2$, $r$ and $y$, and
        stores $y$ in the output's dtype and $\mu, r$ (float32) at index `r` of `Mean` and `Rstd`.

        ```
        program r:   x  = load X[r, 0:BLOCK]  (mask cols < N, other 0)      fp32
                     mu = sum(x) / N
                     xc = where(mask, x - mu, 0)
                     rstd = 1 / sqrt(sum(xc * xc) / N + eps)
                     store Y[r, :] = xc * rstd * w + b   (masked);  Mean[r] = mu;  Rstd[r] = rstd
        ```

        The wrapper checks that `x` is 2-D with unit column stride and at most `MAX_FUSED_COLS` columns and that
        `weight`, `bias` are `(N,)`, allocates `y` like `x` and the statistics in float32, and launches `M` programs
        with `num_warps` growing with the block (4 up to 2048 elements, 8 up to 8192, then 16).
    """)
    lesson.exercise(
        "layer_norm_forward",
        r'''
        MAX_FUSED_COLS = 16384


        @triton.jit
        def layer_norm_fwd_kernel(
            # Pointers
            Y, Mean, Rstd, X, W, B,
            # Strides
            x_row_stride, y_row_stride,
            # Shapes
            n_cols, eps,
            # Meta-parameters
            BLOCK_SIZE: tl.constexpr,
        ):
            """One row per program: y = (x - mean) * rstd * w + b; saves mean and rstd (float32)."""
            # TODO: my row (int64 before multiplying by a stride); masked load of x, w, b, upcast to float32
            # TODO: mean; centred row with padded lanes set to 0; biased variance; rstd = 1 / sqrt(var + eps)
            # TODO: store y (masked, output dtype) and this row's mean and rstd
            ### BEGIN SOLUTION
            row = tl.program_id(axis=0).to(tl.int64)
            cols = tl.arange(0, BLOCK_SIZE)                                        # (BLOCK_SIZE,)
            mask = cols < n_cols
            x = tl.load(X + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
            mean = tl.sum(x, axis=0) / n_cols
            xc = tl.where(mask, x - mean, 0.0)                                    # padded lanes stay 0
            var = tl.sum(xc * xc, axis=0) / n_cols                                # biased, two-pass in registers
            rstd = 1.0 / tl.sqrt(var + eps)
            w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
            b = tl.load(B + cols, mask=mask, other=0.0).to(tl.float32)
            y = xc * rstd * w + b
            tl.store(Y + row * y_row_stride + cols, y.to(Y.dtype.element_ty), mask=mask)
            tl.store(Mean + row, mean)
            tl.store(Rstd + row, rstd)
            ### END SOLUTION


        def layer_norm_forward(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5):
            """LayerNorm over the last dimension of a 2-D tensor. Returns (y like x, mean (M,) fp32, rstd (M,) fp32)."""
            # TODO 1: check constraints: x 2-D with x.stride(1) == 1 and n_cols <= MAX_FUSED_COLS; weight, bias (N,)
            # TODO 2: allocate y, mean, rstd
            # TODO 3: BLOCK_SIZE = next power of two >= n_cols, num_warps from it, one program per row
            ### BEGIN SOLUTION
            if x.dim() != 2 or x.stride(1) != 1:
                raise ValueError(f"layer_norm_forward needs a 2-D tensor with contiguous rows, got {tuple(x.shape)} strides {x.stride()}")
            n_rows, n_cols = x.shape
            if n_cols > MAX_FUSED_COLS:
                raise ValueError(f"{n_cols} columns do not fit in one block (at most {MAX_FUSED_COLS})")
            if weight.shape != (n_cols,) or bias.shape != (n_cols,) or not (weight.is_contiguous() and bias.is_contiguous()):
                raise ValueError(f"weight and bias must be contiguous ({n_cols},), got {tuple(weight.shape)}, {tuple(bias.shape)}")
            y = torch.empty_like(x)
            mean = torch.empty(n_rows, dtype=torch.float32, device=x.device)
            rstd = torch.empty(n_rows, dtype=torch.float32, device=x.device)
            block_size = triton.next_power_of_2(n_cols)
            num_warps = 4 if block_size <= 2048 else 8 if block_size <= 8192 else 16
            layer_norm_fwd_kernel[(n_rows,)](
                y, mean, rstd, x, weight, bias, x.stride(0), y.stride(0), n_cols, eps,
                BLOCK_SIZE=block_size, num_warps=num_warps,
            )
            return y, mean, rstd
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 5. Exercise `layer_norm_backward`: $\partial x$ per row, $\partial w$ and $\partial b$ in two stages

        $\partial w = \sum_{\text{rows}} \bar y \odot \hat x$ is a sum over up to hundreds of thousands of rows. Three
        ways to do it:

        1. **Atomics**: every row program `tl.atomic_add`s its `(N,)` contribution into `dw`. $M$ programs fight over
           the same $N$ addresses, and the result depends on the order of the additions (not reproducible run to
           run).
        2. **Store $\bar y \odot \hat x$ for every row** and sum with `torch.sum(dim=0)`: an extra `(M, N)` float32
           tensor written and read, doubling the backward's traffic.
        3. **Two stages** (what Apex, Liger-Kernel and the Triton tutorial do, with variations). Launch a fixed number
           $P$ of programs (a few per SM on a GPU); program $p$ handles a contiguous chunk of
           `rows_per_program` rows, computes their $\partial x$, and accumulates $\sum \bar y \odot \hat x$ and $\sum
           \bar y$ over its chunk in float32 registers; at the end it stores these **partial sums** to row $p$ of
           `DW_partial` and `DB_partial`, `(P, N)` float32. A second small kernel sums the $P$ rows, column block by
           column block. Deterministic, and the extra traffic is $2PN \cdot 4$ bytes, tiny next to $3MNb$.

        ```
        stage 1, program p:  w = load W;  dw_acc = db_acc = 0                       (BLOCK_SIZE,) fp32
                             for row in [p*R, min((p+1)*R, M)):                     R = rows_per_program
                                 x, dy = row `row` (prefetched);  start loading row + 1
                                 mean, rstd = load Mean[row], Rstd[row]
                                 x_hat = (x - mean) * rstd  (0 in padded lanes);  g = dy * w
                                 store DX[row] = rstd * (g - sum(g)/N - x_hat * sum(g * x_hat)/N)
                                 dw_acc += dy * x_hat;  db_acc += dy
                             store DW_partial[p, :] = dw_acc;  DB_partial[p, :] = db_acc
        stage 2, program c:  columns c*BLOCK_N ... : sum DW_partial[:, cols] and DB_partial[:, cols] over the P rows,
                             BLOCK_P rows at a time (mask rows < P), store dw[cols], db[cols] in the weight's dtype
        ```

        **Why the prefetch (given in the cell).** A program works through its rows one after another, and each row
        needs two reductions before $\partial x$ can be stored. Loaded naively, the next row's loads would start only
        after those, leaving the memory system idle in between. Worse, the loop keeps `w`, `dw_acc` and `db_acc` alive
        in registers for the whole loop, so only one or two such programs fit on an SM (at 4096 columns the compiled
        kernel needs about 100 registers per thread at 16 warps; `cuobjdump --dump-resource-usage` shows it): there
        are not enough programs to hide latency by switching. Issuing row $i+1$'s loads at the top of iteration $i$
        keeps two rows in flight per program. (Triton's `tl.range(..., num_stages=k)` software pipelining does this
        for the operands of `tl.dot`; in this loop it pipelined only the two scalar loads, checked in the PTX.)

        Keep both kernels' signatures (the check calls them directly). `num_programs=None` means: on a GPU four per
        SM (`torch.cuda.get_device_properties(...).multi_processor_count`), elsewhere `min(M, 4)`; never more than
        `M`. Give stage 1 about 8 elements per thread, `num_warps = BLOCK_SIZE // 256` clamped to 4..16 (its loop keeps
        three `(BLOCK_SIZE,)` vectors alive, so it needs more threads per row than the forward).
    """)
    lesson.exercise(
        "layer_norm_backward",
        r'''
        @triton.jit
        def layer_norm_bwd_kernel(
            # Pointers
            DX, DW_partial, DB_partial, DY, X, W, Mean, Rstd,
            # Strides
            x_row_stride, dy_row_stride, dx_row_stride,
            # Shapes
            n_rows, n_cols, rows_per_program,
            # Meta-parameters
            BLOCK_SIZE: tl.constexpr,
        ):
            """Stage 1: dx for rows [pid * R, (pid + 1) * R) and this program's partial dw, db (rows of (P, N) fp32)."""
            pid = tl.program_id(axis=0)
            cols = tl.arange(0, BLOCK_SIZE)
            mask = cols < n_cols
            w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
            dw_acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
            db_acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
            first = pid.to(tl.int64) * rows_per_program           # int64: the loop variable and the offsets too
            last = tl.minimum(first + rows_per_program, n_rows)
            # Prefetch (given): row i + 1 is loaded before row i is computed, so its loads overlap row i's reductions.
            upcoming = tl.minimum(first, n_rows - 1)              # a program without rows loads a valid row, unused
            x_next = tl.load(X + upcoming * x_row_stride + cols, mask=mask, other=0.0)
            dy_next = tl.load(DY + upcoming * dy_row_stride + cols, mask=mask, other=0.0)
            for row in range(first, last):
                x = x_next.to(tl.float32)                                          # (BLOCK_SIZE,) row `row`
                dy = dy_next.to(tl.float32)
                upcoming = tl.minimum(row + 1, last - 1)
                x_next = tl.load(X + upcoming * x_row_stride + cols, mask=mask, other=0.0)
                dy_next = tl.load(DY + upcoming * dy_row_stride + cols, mask=mask, other=0.0)
                # TODO: this row's mean and rstd; x_hat (0 in padded lanes); g = dy * w
                # TODO: dx by the formula of section 1; store it (masked, DX's dtype)
                # TODO: accumulate dy * x_hat and dy
                ### BEGIN SOLUTION
                mean = tl.load(Mean + row)
                rstd = tl.load(Rstd + row)
                x_hat = tl.where(mask, (x - mean) * rstd, 0.0)
                g = dy * w
                dx = rstd * (g - tl.sum(g, axis=0) / n_cols - x_hat * (tl.sum(g * x_hat, axis=0) / n_cols))
                tl.store(DX + row * dx_row_stride + cols, dx.to(DX.dtype.element_ty), mask=mask)
                dw_acc += dy * x_hat
                db_acc += dy
                ### END SOLUTION
            # TODO: store the partial sums in row pid of DW_partial and DB_partial ((P, N) contiguous)
            ### BEGIN SOLUTION
            tl.store(DW_partial + pid * n_cols + cols, dw_acc, mask=mask)
            tl.store(DB_partial + pid * n_cols + cols, db_acc, mask=mask)
            ### END SOLUTION


        @triton.jit
        def layer_norm_dwdb_kernel(
            # Pointers
            DW, DB, DW_partial, DB_partial,
            # Shapes
            n_partials, n_cols,
            # Meta-parameters
            BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr,
        ):
            """Stage 2: dw[cols] = sum over the P partial rows, BLOCK_P rows at a time; the same for db."""
            # TODO: my columns; (BLOCK_P, BLOCK_N) fp32 accumulators; loop over the partial rows, masked 2-D loads
            # TODO: reduce over axis 0 and store dw, db (masked, in their dtype)
            ### BEGIN SOLUTION
            cols = tl.program_id(axis=0) * BLOCK_N + tl.arange(0, BLOCK_N)       # (BLOCK_N,)
            col_mask = cols < n_cols
            dw = tl.zeros([BLOCK_P, BLOCK_N], dtype=tl.float32)
            db = tl.zeros([BLOCK_P, BLOCK_N], dtype=tl.float32)
            for start in range(0, n_partials, BLOCK_P):
                rows = start + tl.arange(0, BLOCK_P)                              # (BLOCK_P,)
                mask = (rows[:, None] < n_partials) & col_mask[None, :]
                offsets = rows[:, None] * n_cols + cols[None, :]                  # (BLOCK_P, BLOCK_N)
                dw += tl.load(DW_partial + offsets, mask=mask, other=0.0)
                db += tl.load(DB_partial + offsets, mask=mask, other=0.0)
            tl.store(DW + cols, tl.sum(dw, axis=0).to(DW.dtype.element_ty), mask=col_mask)
            tl.store(DB + cols, tl.sum(db, axis=0).to(DB.dtype.element_ty), mask=col_mask)
            ### END SOLUTION


        def layer_norm_backward(grad_y, x, weight, mean, rstd, num_programs=None):
            """Gradients of LayerNorm: (dx like x, dw like weight, db like weight). grad_y, x: (M, N) with unit column stride."""
            # TODO 1: check shapes and unit column strides; choose P (see the text), rows_per_program = cdiv(M, P)
            # TODO 2: mean and rstd contiguous (the kernel reads them with unit stride); allocate dx, the (P, N)
            #         float32 partials, dw and db
            # TODO 3: launch stage 1 on P programs, then stage 2 over column blocks (BLOCK_P = 32, BLOCK_N = 64)
            ### BEGIN SOLUTION
            if x.dim() != 2 or grad_y.shape != x.shape or x.stride(1) != 1 or grad_y.stride(1) != 1:
                raise ValueError(f"x and grad_y must be 2-D, equal shapes, contiguous rows; got {tuple(x.shape)}, {tuple(grad_y.shape)}")
            n_rows, n_cols = x.shape
            if n_cols > MAX_FUSED_COLS or weight.shape != (n_cols,) or not weight.is_contiguous():
                raise ValueError(f"need a contiguous weight of ({n_cols},) and at most {MAX_FUSED_COLS} columns")
            if num_programs is None:
                if x.is_cuda:
                    num_programs = 4 * torch.cuda.get_device_properties(x.device).multi_processor_count
                else:
                    num_programs = 4
            num_programs = max(1, min(num_programs, n_rows))
            rows_per_program = triton.cdiv(n_rows, num_programs)
            mean, rstd = mean.contiguous(), rstd.contiguous()  # the kernel reads both at ptr + row (unit stride)
            dx = torch.empty_like(x)
            dw_partial = torch.empty((num_programs, n_cols), dtype=torch.float32, device=x.device)
            db_partial = torch.empty((num_programs, n_cols), dtype=torch.float32, device=x.device)
            block_size = triton.next_power_of_2(n_cols)
            num_warps = max(4, min(16, block_size // 256))  # ~8 elements per thread: the loop keeps w, dw, db live
            layer_norm_bwd_kernel[(num_programs,)](
                dx, dw_partial, db_partial, grad_y, x, weight, mean, rstd,
                x.stride(0), grad_y.stride(0), dx.stride(0), n_rows, n_cols, rows_per_program,
                BLOCK_SIZE=block_size, num_warps=num_warps,
            )
            dw = torch.empty_like(weight)
            db = torch.empty_like(weight)
            layer_norm_dwdb_kernel[(triton.cdiv(n_cols, 64),)](
                dw, db, dw_partial, db_partial, num_programs, n_cols, BLOCK_P=32, BLOCK_N=64
            )
            return dx, dw, db
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 6. Exercise `layer_norm`: a drop-in autograd layer

        Wrap both in a `torch.autograd.Function`: `forward` flattens the leading dimensions to rows (`(..., N) -> (M,
        N)`), runs your forward, saves `x`, `weight`, `mean`, `rstd` and returns `y` in `x`'s shape; `backward`
        makes `grad_y` contiguous rows (autograd may hand you an expanded or transposed gradient), runs your backward
        and returns one gradient per input of `forward`, in order (`None` for `eps`).
    """)
    lesson.exercise(
        "layer_norm",
        r'''
        class LayerNormFunction(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, weight, bias, eps):
                # TODO: rows (M, N) -> layer_norm_forward; save what backward needs; y in x's shape
                ### BEGIN SOLUTION
                rows = x.reshape(-1, x.shape[-1]).contiguous()                     # (M, N)
                y, mean, rstd = layer_norm_forward(rows, weight, bias, eps)
                ctx.save_for_backward(rows, weight, mean, rstd)
                return y.view(x.shape)
                ### END SOLUTION

            @staticmethod
            def backward(ctx, grad_y):
                # TODO: contiguous (M, N) rows of grad_y -> layer_norm_backward; (dx in x's shape, dw, db, None)
                ### BEGIN SOLUTION
                rows, weight, mean, rstd = ctx.saved_tensors
                dy = grad_y.reshape(rows.shape).contiguous()                       # (M, N)
                dx, dw, db = layer_norm_backward(dy, rows, weight, mean, rstd)
                return dx.view(grad_y.shape), dw, db, None
                ### END SOLUTION


        def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
            """LayerNorm over the last dimension of x (..., N), differentiable through your kernels."""
            return LayerNormFunction.apply(x, weight, bias, eps)
    ''',
    )
    lesson.md(r"""
        ## 7. Bandwidth (GPU only)

        On a GPU of compute capability 8.0 or newer, the cell below plots the forward pass (your kernel,
        `F.layer_norm`) and forward + backward in GB/s for 16384 rows of growing width in bf16. The bytes counted are
        the essential ones: $2MNb$ for the forward, $5MNb$ for forward + backward. `python -m llm_algo bench
        p03.layernorm` prints the table at 65536 × 4096 with `torch.compile` and a device-to-device copy measured in
        the same run.
    """)
    lesson.code(r"""
        if lesson.policy.triton_path != "compiled":
            print("Benchmarks need a CUDA GPU with compute capability >= 8.0; skipped here.")
        else:
            def torch_fwd_bwd(x, w, b, dy):
                xr = x.detach().requires_grad_(True)
                wr = w.detach().requires_grad_(True)
                br = b.detach().requires_grad_(True)
                return torch.autograd.grad(F.layer_norm(xr, (x.shape[-1],), wr, br), (xr, wr, br), dy)

            def mine_fwd_bwd(x, w, b, dy):
                y, mean, rstd = layer_norm_forward(x, w, b)
                return layer_norm_backward(dy, x, w, mean, rstd)

            @triton.testing.perf_report([
                triton.testing.Benchmark(
                    x_names=["n_cols"], x_vals=[512 * 2 ** k for k in range(0, 6)], x_log=True,
                    line_arg="provider", line_vals=["mine", "torch"], line_names=["your kernels", "F.layer_norm"],
                    ylabel="GB/s", plot_name=f"LayerNorm {mode}, 16384 rows, bf16", args={"n_rows": 16384, "mode": mode},
                ) for mode in ("forward", "forward+backward")
            ])
            def bandwidth(n_rows, n_cols, provider, mode):
                x = torch.randn(n_rows, n_cols, device=DEVICE, dtype=torch.bfloat16)
                w = torch.randn(n_cols, device=DEVICE, dtype=torch.bfloat16)
                b = torch.randn(n_cols, device=DEVICE, dtype=torch.bfloat16)
                dy = torch.randn_like(x)
                if mode == "forward":
                    fn = (lambda: layer_norm_forward(x, w, b)) if provider == "mine" else (lambda: F.layer_norm(x, (n_cols,), w, b))
                    moved = 2 * x.numel() * x.element_size()
                else:
                    fn = (lambda: mine_fwd_bwd(x, w, b, dy)) if provider == "mine" else (lambda: torch_fwd_bwd(x, w, b, dy))
                    moved = 5 * x.numel() * x.element_size()
                ms = triton.testing.do_bench(fn, return_mode="median")
                return moved * 1e-9 / (ms * 1e-3)

            try:
                bandwidth.run(print_data=True, show_plots=True)
            except NotImplementedError:
                print("Implement layer_norm_forward and layer_norm_backward first: this benchmark times your kernels.")
    """)
    lesson.md(r"""
        **Reading the numbers** (one run of `python -m llm_algo bench p03.layernorm` with the reference solutions on an
        NVIDIA H200, Triton 3.6, torch 2.11; your GPU will differ). Both passes are memory-bound — a handful of FLOPs
        per byte, far below any GPU's ridge point — so the yardstick is the device-to-device copy, which moves the same
        bytes with no arithmetic at all: 4133 GB/s in this run. At `65536 × 4096` bf16, in GB/s and % of the copy:

        | | yours | `F.layer_norm` eager | `torch.compile` | target |
        | --- | --- | --- | --- | --- |
        | forward ($2MNb$) | 3993 (97%) | 2743 (66%) | 2930 (71%) | ≥ 90% and ≥ `torch.compile`: met |
        | forward + backward ($5MNb$) | 3058 (74%) | 2049 (50%) | 2053 (50%) | ≥ 70%: met |

        - **Forward.** One read and one write per element, like the fused softmax (98% of the copy in `p03.softmax`),
          and it lands in the same place. `F.layer_norm` is one fused CUDA kernel too, but written for all shapes and
          dtypes, and here it reaches two thirds of the copy. At small widths (512–1024 columns) a program has too
          little work to hide memory latency, and the fix is the same as for softmax: several rows per program.
        - **Forward + backward** (your two functions called one after the other; the PyTorch rows go through
          autograd). The backward reads $x$ and $\bar y$ and writes $\partial x$: 3 of the 5 $MNb$. Taking the
          forward's time away, everything after it moved its 3 transfers at about 2650 GB/s, 64% of the copy — just
          above the ~60% that the 70% target requires of it. Its costs beyond the copy: every program walks its rows
          one after another with two block-wide reductions per row (the prefetch overlaps the next row's loads with
          them, but only two rows are in flight per program); the live `w`, `dw_acc`, `db_acc` registers allow only
          one or two programs per SM at 4096 columns; and the second stage. The knobs: the number of programs $P$,
          `num_warps`, and how many rows are in flight per program. Both PyTorch versions stop at half the copy:
          `torch.compile` gains nothing over eager here.
    """)
    lesson.stop()
    lesson.md(r"""
        ## 8. Reading the solutions

        **`welford_stats`.** Each block's $M_2$ is computed around the block's own mean, so it never subtracts large
        numbers; the merge adds the between-block term $\delta^2 n_A n_B / n$, which is what a "sum the block
        variances" shortcut forgets. The running mean moves by $\delta \cdot n_B / n$: weighting by counts is what
        makes a short last block count for what it is.

        **`layer_norm_fwd_kernel`.** The row is loaded once and upcast once; the mean and the variance are two
        reductions over registers, not two trips to memory. `tl.where(mask, x - mean, 0.0)` is the line people
        forget: without it every padded lane adds $\mu^2$ to the sum of squares, wrong exactly when $N$ is not a power
        of two and the mean is not 0. The statistics are stored in float32 whatever the input dtype: the backward
        recomputes $\hat x$ from them and needs the precision.

        **`layer_norm_bwd_kernel` and `layer_norm_dwdb_kernel`.** `w` is loaded once per program, not once per row.
        The loop's bounds are clamped to $M$, so the last program may get fewer rows (or none: it then stores zero
        partials, which the second stage adds harmlessly). `first` is int64, so `row * stride` cannot overflow at
        $2^{31}$ elements. The partial sums stay in float32 end to end: summing 65536 bf16 products in bf16 would keep
        about 3 significant digits. The second stage is a column-blocked sum with a 2-D tile, masked on both edges.

        **`LayerNormFunction`.** `reshape(...).contiguous()` before the kernels because autograd may pass a gradient
        that is expanded (the gradient of `y.sum()` has stride 0) or otherwise strided; `backward` returns one value
        per `forward` input, `None` for `eps`.

        **The usual mistakes, and why they are wrong**: the between-block term missing
        from the merge, or block means averaged without their counts; $E[x^2] - \mu^2$ (wrong by tens of percent at mean
        1000 in float32); padded lanes in the variance; the unbiased variance; a store without a mask; $\partial x$
        without the mean term (RMSNorm's formula); the weight gradient overwritten instead of accumulated; `db` with
        $\hat x$; $\partial w$ and $\partial b$ returned in the wrong order; a strided `mean` or `rstd` handed to the
        backward kernel, which reads them with unit stride.

        **Production.** PyTorch's `F.layer_norm` CUDA kernels compute Welford statistics per thread and merge them
        across the warp with Chan's formula; their backward computes $\partial w, \partial b$ in separate
        column-parallel kernels. Apex's `FusedLayerNorm` and the Triton tutorial's kernel use the two-stage partial
        sums (the tutorial with a lock-protected buffer per group of rows), Liger-Kernel launches one program per SM
        with a row loop, as here. Training frameworks fuse further: the residual add into the norm (vLLM's
        `fused_add_rms_norm`), or the norm into the following GEMM's prologue.
    """)
    lesson.mistakes()
    return lesson
