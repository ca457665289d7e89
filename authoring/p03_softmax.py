"""Source of 03_Triton_Kernels/03_Softmax.ipynb (build with `python -m llm_algo build p03.softmax`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p03.softmax",
        path="03_Triton_Kernels/03_Softmax.ipynb",
        title_en="Fused softmax and the online softmax",
        title_zh="融合 Softmax 与在线 Softmax",
        difficulty="medium",
        device="cpu",
        minutes=90,
        prerequisites=["p03.vector_add"],
        triton=True,
    )
    lesson.title(
        intro=r"""
        Softmax turns a row of scores into probabilities: attention weights over keys, the next-token distribution over a
        128k vocabulary. Written in PyTorch it is three passes over memory — find the max, sum the exponentials,
        divide — and each eager op writes its result back to HBM. A fused kernel reads the row once and writes it once.
        The idea that lets a kernel handle a row *longer* than it can hold at once, the **online softmax** (在线
        softmax), is the same idea that makes FlashAttention possible.

        **You will implement** a fused, numerically stable row softmax in Triton (one program per row); the online
        running-max/running-sum recurrence in PyTorch, checked prefix by prefix; and a Triton kernel that uses it to
        handle rows of any length in two passes. **Graded against** `torch.softmax` and `torch.logsumexp` in float64,
        closed forms, and guard bytes that catch out-of-bounds writes.
        """,
    )
    lesson.md(r"""
        ## 本节要点

        - **问题**：softmax 用于 attention 权重和 128k 词表上的 next-token 分布；eager PyTorch 要三遍内存（max、指数和、除法），融合 kernel 只读一次、写一次。
        - **稳定 softmax**：$\operatorname{softmax}(x)_j = e^{x_j - m}/\sum_k e^{x_k - m}$，$m = \max_k x_k$；一个 program 处理一行，padding lane 用 `other=-inf` 加载，使 $e^{-\infty} = 0$。
        - **Online softmax**：分块维护 running max $m$ 和 running sum $d$：$m' = \max(m, \max x_\text{blk})$，$d' = d\,e^{m - m'} + \sum e^{x_\text{blk} - m'}$；全是 $-\infty$ 时用 0 代替 max，避免 nan。这也是 FlashAttention 的核心思想。
        - **长行两遍 kernel**：第一遍按 lane 更新 $(m, d)$，最后把各 lane 的 sum 缩放到整行的 max 再求和；第二遍重新加载并写出 $e^{x - m}/d$，任意行长都可处理。
        - **实现要点**：行号先转 `int64` 再乘 stride（可能超过 $2^{31}$），行地址用 `row_stride` 而不是 `n_cols`；行能放进一个 block 时优先用单遍 kernel。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. What it costs, and the stable formula

        For a row $x \in \mathbb{R}^{N}$:

        $$
        \operatorname{softmax}(x)_j = \frac{e^{x_j - m}}{\sum_{k} e^{x_k - m}}, \qquad m = \max_k x_k .
        $$

        Subtracting $m$ changes nothing mathematically (it cancels) and everything numerically: $e^{x}$ overflows float32
        for $x > 88.7$ and float16 for $x > 11.1$, while $e^{x_j - m} \le 1$ always, and the largest term is exactly 1,
        so the sum is at least 1. Logits of a few hundred are common in real models (before soft-capping or
        QK-norm), so the naive formula is not an option.

        **Traffic.** For an `(M, N)` input of `b`-byte elements, eager PyTorch
        (`x.max`, `x - m`, `exp`, `sum`, `/`) reads about $5MNb$ bytes and writes $3MNb$. `torch.softmax` is already one
        fused kernel, but a row-wise kernel of your own needs to read $MNb$ and write $MNb$: the floor is the time of a
        device-to-device copy of the tensor. On an H200 (about 4.8 TB/s of HBM), a `65536 × 4096` fp16 tensor (512 MiB)
        cannot be softmaxed faster than about $2 \cdot 512\,\text{MiB} / 4.8\,\text{TB/s} \approx 0.22$ ms.

        ## 2. One row, one program

        If a row fits in one block (`BLOCK_SIZE = next_power_of_2(N)` elements in registers), a program loads it once,
        computes the max and the sum on-chip, and stores the result once:

        ```
        program r:  load x[r, 0:BLOCK]  (masked: lanes >= N get -inf, so they add e^(-inf) = 0 to the sum)
                    m = max(x); p = exp(x - m); s = sum(p); store p / s   (masked)
        ```

        The padding value matters: lanes past the end of the row must be the identity of the reductions that follow —
        $-\infty$ for the max, which then contributes $e^{-\infty} = 0$ to the sum. Padding with 0 would add
        $e^{0 - m}$ per padded lane. Compute in float32 whatever the input dtype, and address rows by their stride.
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt
        import torch
        import triton
        import triton.language as tl
    """)
    lesson.md(r"""
        ## 3. Exercise `softmax`: the fused kernel

        Write `softmax_kernel` (one program per row; keep its signature, the check calls it directly on strided rows) and
        the wrapper: check that `x` is 2-D with unit column stride and a row that fits in one block (at most
        `MAX_FUSED_COLS` columns), allocate the output, launch one program per row. Pick `num_warps` from the block size
        (more warps for longer rows: 4 up to 2048 elements, 8 up to 8192, then 16).
    """)
    lesson.exercise(
        "softmax",
        r'''
        MAX_FUSED_COLS = 16384


        @triton.jit
        def softmax_kernel(
            # Pointers
            out_ptr, in_ptr,
            # Strides
            in_row_stride, out_row_stride,
            # Shapes
            n_cols,
            # Meta-parameters
            BLOCK_SIZE: tl.constexpr,
        ):
            """Row softmax of one row per program; the row fits in one block (BLOCK_SIZE >= n_cols)."""
            # TODO: my row (tl.program_id; cast to int64 before multiplying by a stride: rows * stride can pass 2**31)
            # TODO: load the row masked, padding with -inf, and upcast to float32
            # TODO: subtract the max, exponentiate, divide by the sum; store masked in the output's dtype
            ### BEGIN SOLUTION
            row = tl.program_id(axis=0).to(tl.int64)
            cols = tl.arange(0, BLOCK_SIZE)                                   # (BLOCK_SIZE,)
            mask = cols < n_cols
            x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=float("-inf")).to(tl.float32)
            x = x - tl.max(x, axis=0)                                         # every entry <= 0
            numerator = tl.exp(x)                                             # padded lanes: exp(-inf) = 0
            probabilities = numerator / tl.sum(numerator, axis=0)
            tl.store(out_ptr + row * out_row_stride + cols, probabilities.to(out_ptr.dtype.element_ty), mask=mask)
            ### END SOLUTION


        def softmax(x: torch.Tensor) -> torch.Tensor:
            """Softmax over the last dimension of a 2-D tensor whose rows fit in one block; returns a new tensor."""
            # TODO 1: check constraints (2-D, x.stride(1) == 1, n_cols <= MAX_FUSED_COLS) with messages
            # TODO 2: allocate the output
            # TODO 3: BLOCK_SIZE = next power of two >= n_cols, num_warps from BLOCK_SIZE, one program per row
            ### BEGIN SOLUTION
            if x.dim() != 2 or x.stride(1) != 1:
                raise ValueError(f"softmax needs a 2-D tensor with contiguous rows, got shape {tuple(x.shape)} strides {x.stride()}")
            n_rows, n_cols = x.shape
            if n_cols > MAX_FUSED_COLS:
                raise ValueError(f"{n_cols} columns do not fit in one block; use softmax_long_rows")
            out = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
            block_size = triton.next_power_of_2(n_cols)
            num_warps = 4 if block_size <= 2048 else 8 if block_size <= 8192 else 16
            softmax_kernel[(n_rows,)](out, x, x.stride(0), out.stride(0), n_cols, BLOCK_SIZE=block_size, num_warps=num_warps)
            return out
            ### END SOLUTION
        ''',
    )
    lesson.md(r"""
        ## 4. Rows longer than a block: the online softmax

        A 128k-entry vocabulary row does not fit in registers, and an attention row (one query against every key) is
        never even materialised. We need the max and the sum without holding the whole row. Process it in blocks and
        keep two numbers per row, the running max $m$ and the running sum $d$ of $e^{x - m}$ over what has been seen.
        When block $j$ arrives:

        $$
        m_j = \max\big(m_{j-1},\ \max_{k \in \text{block } j} x_k\big), \qquad
        d_j = d_{j-1}\, e^{\,m_{j-1} - m_j} + \sum_{k \in \text{block } j} e^{\,x_k - m_j},
        \qquad m_0 = -\infty,\ d_0 = 0 .
        $$

        The factor $e^{m_{j-1} - m_j} \le 1$ **rescales** the old sum to the new max: $d_{j-1}$ was a sum of
        $e^{x - m_{j-1}}$, and $e^{x - m_{j-1}} \cdot e^{m_{j-1} - m_j} = e^{x - m_j}$. After the last block, $(m, d)$ are
        exactly the max and the stable sum of the whole row, and $m + \ln d = \operatorname{logsumexp}(x)$. This is
        Milakov & Gimelshein (2018); FlashAttention applies the same rescaling to its output accumulator.

        One edge case is real: a block that is entirely $-\infty$ (a causal or padding mask) while $m_{j-1} = -\infty$
        too gives $e^{-\infty - (-\infty)} = \text{NaN}$. Guard it: when the new max is $-\infty$, subtract 0 instead
        (then every term is $e^{-\infty} = 0$ and $d$ stays 0).

        ## 5. Exercise `online_softmax_stats`: the recurrence, in PyTorch

        Return the state after every block, so that each prefix of the row can be checked: `m[:, j]` and `d[:, j]` are the
        max and the sum over `x[:, : (j + 1) * block_size]`.
    """)
    lesson.exercise(
        "online_softmax_stats",
        r'''
        def online_softmax_stats(x: torch.Tensor, block_size: int):
            """Running max and running sum of exp(x - max) over blocks of columns.

            x: (n_rows, n_cols) float32 or float64
            returns (m, d), each (n_rows, n_blocks) in x.dtype, n_blocks = ceil(n_cols / block_size);
            column j holds the max and sum(exp(x - max)) of x[:, : (j + 1) * block_size]
            """
            n_rows, n_cols = x.shape
            m = torch.full((n_rows,), float("-inf"), dtype=x.dtype, device=x.device)  # running max   (n_rows,)
            d = torch.zeros(n_rows, dtype=x.dtype, device=x.device)                   # running sum   (n_rows,)
            history_m, history_d = [], []
            for start in range(0, n_cols, block_size):
                block = x[:, start : start + block_size]                              # (n_rows, <= block_size)
                # TODO: the new running max; a -inf-safe version of it to subtract
                # TODO: rescale the old sum to the new max, add this block's exponentials; keep the state
                ### BEGIN SOLUTION
                m_new = torch.maximum(m, block.max(dim=1).values)                     # (n_rows,)
                m_safe = torch.where(m_new == float("-inf"), torch.zeros_like(m_new), m_new)
                d = d * torch.exp(m - m_safe) + torch.exp(block - m_safe[:, None]).sum(dim=1)
                m = m_new
                ### END SOLUTION
                history_m.append(m)
                history_d.append(d)
            return torch.stack(history_m, dim=1), torch.stack(history_d, dim=1)
        ''',
    )
    lesson.md(r"""
        ### The recurrence, drawn

        Below, one row of 64 scores with a spike in the middle, in blocks of 8: the running max steps up when the spike
        arrives, and at that moment the running sum *drops*, because everything seen so far is rescaled by
        $e^{m_{j-1} - m_j}$. The dashed line is the true $\sum e^{x - \max x}$ of the whole row, which the last state hits.
    """)
    lesson.code(r"""
        row = torch.randn(1, 64, dtype=torch.float64)
        row[0, 37] = 6.0  # a spike in block 4
        try:
            m_hist, d_hist = online_softmax_stats(row, 8)
        except NotImplementedError:
            print("Implement online_softmax_stats first.")
        else:
            blocks = range(1, m_hist.shape[1] + 1)
            fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3))
            left.step(blocks, m_hist[0], where="post"); left.set_title("running max m_j")
            right.step(blocks, d_hist[0], where="post", color="C1"); right.set_title("running sum d_j")
            right.axhline(torch.exp(row - row.max()).sum().item(), ls="--", color="grey", label="whole-row sum")
            for axis in (left, right):
                axis.set_xlabel("blocks seen")
            right.legend(); fig.tight_layout(); plt.show()
    """)
    lesson.md(r"""
        ## 6. Exercise `softmax_long_rows`: two passes in Triton

        One program per row again, now looping over the row in blocks of `BLOCK_SIZE`:

        1. **Pass 1** runs the recurrence. Keep the state *per lane*: `m` and `d` are `(BLOCK_SIZE,)` vectors, and lane
           `i` tracks the columns `i, i + BLOCK_SIZE, i + 2·BLOCK_SIZE, ...`. The update is elementwise, so there is no
           cross-thread reduction inside the loop.
        2. **Merge the lanes.** Two states combine by the same rule: the row max is $M = \max_i m_i$ and the row sum is
           $\sum_i d_i\, e^{m_i - M}$ (guard $M = -\infty$ as before).
        3. **Pass 2** reads the row again and stores $e^{x - M} / D$.

        Two reads and one write, against three reads and one write for max-then-sum-then-normalise. Pad masked lanes
        with $-\infty$. Keep the kernel's signature.
    """)
    lesson.exercise(
        "softmax_long_rows",
        r'''
        @triton.jit
        def softmax_online_kernel(
            # Pointers
            out_ptr, in_ptr,
            # Strides
            in_row_stride, out_row_stride,
            # Shapes
            n_cols,
            # Meta-parameters
            BLOCK_SIZE: tl.constexpr,
        ):
            """Row softmax of one row per program, any row length, in two passes over the row."""
            row = tl.program_id(axis=0).to(tl.int64)
            in_row = in_ptr + row * in_row_stride
            out_row = out_ptr + row * out_row_stride
            cols = tl.arange(0, BLOCK_SIZE)
            m = tl.full([BLOCK_SIZE], float("-inf"), tl.float32)  # per-lane running max
            d = tl.zeros([BLOCK_SIZE], tl.float32)                # per-lane running sum
            # TODO: pass 1: for each block, a masked load (other=-inf), the per-lane update of m and d (-inf-safe)
            # TODO: merge the lanes into the row max and the row sum
            # TODO: pass 2: for each block, load again and store exp(x - row_max) / row_sum, masked
            ### BEGIN SOLUTION
            for start in range(0, n_cols, BLOCK_SIZE):
                mask = start + cols < n_cols
                x = tl.load(in_row + start + cols, mask=mask, other=float("-inf")).to(tl.float32)
                m_new = tl.maximum(m, x)
                m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
                d = d * tl.exp(m - m_safe) + tl.exp(x - m_safe)
                m = m_new
            row_max = tl.max(m, axis=0)
            row_max_safe = tl.where(row_max == float("-inf"), 0.0, row_max)
            row_sum = tl.sum(d * tl.exp(m - row_max_safe), axis=0)
            for start in range(0, n_cols, BLOCK_SIZE):
                mask = start + cols < n_cols
                x = tl.load(in_row + start + cols, mask=mask, other=float("-inf")).to(tl.float32)
                tl.store(out_row + start + cols, (tl.exp(x - row_max) / row_sum).to(out_ptr.dtype.element_ty), mask=mask)
            ### END SOLUTION


        def softmax_long_rows(x: torch.Tensor, block_size: int = 1024) -> torch.Tensor:
            """Softmax over the last dimension of a 2-D tensor with rows of any length."""
            # TODO 1: check constraints (2-D, unit column stride)
            # TODO 2: allocate the output
            # TODO 3: one program per row
            ### BEGIN SOLUTION
            if x.dim() != 2 or x.stride(1) != 1:
                raise ValueError(f"softmax_long_rows needs a 2-D tensor with contiguous rows, got strides {x.stride()}")
            n_rows, n_cols = x.shape
            out = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
            softmax_online_kernel[(n_rows,)](out, x, x.stride(0), out.stride(0), n_cols, BLOCK_SIZE=block_size, num_warps=8)
            return out
            ### END SOLUTION
        ''',
    )
    lesson.md(r"""
        ## 7. Bandwidth (GPU only)

        On a GPU of compute capability 8.0 or newer, the cell below plots your fused `softmax`, `torch.softmax` and
        `softmax_long_rows` in GB/s ($2 \cdot M N b$ bytes per call) for 4096 rows of growing length, in fp16. The
        table from `python -m llm_algo bench p03.softmax` adds the device-to-device copy measured in the same run.
    """)
    lesson.code(r"""
        if lesson.policy.triton_path != "compiled":
            print("Benchmarks need a CUDA GPU with compute capability >= 8.0; skipped here.")
        else:
            @triton.testing.perf_report(triton.testing.Benchmark(
                x_names=["n_cols"], x_vals=[256 * 2 ** k for k in range(0, 7)], x_log=True,
                line_arg="provider", line_vals=["fused", "online", "torch"],
                line_names=["your softmax", "your softmax_long_rows", "torch.softmax"],
                ylabel="GB/s", plot_name="row softmax, 4096 rows, fp16", args={"n_rows": 4096},
            ))
            def bandwidth(n_rows, n_cols, provider):
                x = torch.randn(n_rows, n_cols, device=DEVICE, dtype=torch.float16)
                fn = {"fused": lambda: softmax(x), "online": lambda: softmax_long_rows(x),
                      "torch": lambda: torch.softmax(x, dim=-1)}[provider]
                ms = triton.testing.do_bench(fn, return_mode="median")
                return 2 * x.numel() * x.element_size() * 1e-9 / (ms * 1e-3)

            try:
                bandwidth.run(print_data=True, show_plots=True)
            except NotImplementedError:
                print("Implement softmax and softmax_long_rows first: this benchmark times your kernels.")
    """)
    lesson.md(r"""
        **Reading the numbers** (one run of the reference solutions on an NVIDIA H200, Triton 3.6, torch 2.11; your GPU
        will differ). At `65536 × 4096` fp16, `python -m llm_algo bench p03.softmax` measured the fused kernel at
        4098 GB/s, 98% of the 4167 GB/s of a device-to-device copy of the same 512 MiB timed in the same run, and
        `torch.softmax` at 1286 GB/s. In the plot above (4096 rows), the fused kernel passes 3000 GB/s from 4096 columns
        on, while at 256-1024 columns it is *slower* than `torch.softmax`: 4096 programs of a few hundred elements each
        are too little work to hide memory latency, which a persistent kernel (each program loops over many rows) fixes.
        The two-pass kernel reaches 2100-2430 GB/s from 4096 columns on: it reads every element twice, so at the same memory speed it can
        reach only about two thirds of the fused kernel's rate by this formula, which counts one read and one write.
        `num_warps` matters: 8 warps gave 4106 GB/s at 4096 columns, 16 gave 3354 and 32 gave 2021.
    """)
    lesson.stop()
    lesson.md(r"""
        ## 8. Reading the solutions

        **`softmax_kernel`.** `tl.program_id(0).to(tl.int64)` before the multiply: `65536 rows × 32768 stride` is
        $2^{31}$, one past what int32 can hold, and an overflowed offset is a silent wild read. The load pads with
        `-inf` and upcasts in the same line, so the max, the exponentials and the sum all run in float32 in registers;
        the output is cast once, by the store, to `out_ptr.dtype.element_ty`. Everything between the load and the
        store happens on-chip: HBM sees one read and one write per element, which is why this kernel can run at
        copy speed. `num_warps` grows with the block so that each thread holds a few elements, not hundreds (which
        would spill registers).

        **`online_softmax_stats`.** `torch.maximum` with the block's max is the new running max; `m_safe` replaces
        $-\infty$ by 0 so a fully masked prefix gives `d = 0` instead of `nan`; `d * exp(m - m_safe)` is the
        rescaling. Without that factor the sum mixes terms relative to different maxima: right whenever the first
        block holds the row max, wrong otherwise — which is why the check puts the max in the last block.

        **`softmax_online_kernel`.** Per-lane state turns the recurrence into elementwise math inside the loop; the lane
        merge at the end is the same combine rule applied across lanes, which works because combining two
        `(max, sum)` states is associative. FlashAttention uses exactly this: each query block keeps `(m, l)` per row
        and rescales its output accumulator with the same factor.

        **The usual mistakes, and why they are wrong**: no max subtraction (`inf/inf =
        nan` on logits of a few hundred); padding with 0 instead of `-inf` (wrong whenever the row length is not a
        power of two); an unmasked store (guard bytes after the row overwritten); rows addressed with `n_cols` instead
        of the row stride (wrong on strided views); no rescaling of the running sum; no `-inf` guard (`nan` on masked
        blocks).

        **Cost and production.** Both kernels are memory-bound: a few FLOPs per byte. The fused kernel moves $2MNb$
        bytes, the online one $3MNb$ (two reads), so it runs at about two thirds of the fused kernel's speed when both
        are at the roofline — pick the single-pass kernel whenever the row fits. Production softmax kernels are
        *persistent* (a fixed grid of programs, each looping over many rows, so launch and scheduling costs are paid
        once per SM), are autotuned over `num_warps`, and are usually fused into their neighbours: attention never
        stores its softmax at all (FlashAttention, `p03.flash_attention_fwd`), and the cross-entropy loss over a
        vocabulary computes the log-sum-exp online without writing the probabilities (`p03.cross_entropy`).
    """)
    lesson.mistakes()
    return lesson
