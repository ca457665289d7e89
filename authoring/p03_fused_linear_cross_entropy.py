"""Source of 03_Triton_Kernels/19_Fused_Linear_Cross_Entropy.ipynb (build with
`python -m llm_algo build p03.fused_linear_cross_entropy`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p03.fused_linear_cross_entropy",
        path="03_Triton_Kernels/19_Fused_Linear_Cross_Entropy.ipynb",
        title_en="Fused linear + cross-entropy: the loss without the logits",
        title_zh="融合线性层与交叉熵：不生成完整 logits 的损失",
        difficulty="hard",
        device="cpu",
        minutes=75,
        prerequisites=["p03.cross_entropy", "p03.matmul"],
        triton=True,
    )
    lesson.title(
        intro=r"""
        `p03.cross_entropy` stopped eager PyTorch from tripling the logits of a Llama-3 training step: its kernel
        turns the `(N, V)` logits into their own gradient in place. But the logits still exist: at `N = 8192` tokens
        and `V = 128256` they are 1.96 GiB in bf16, produced by the output projection `h @ W.T` only to be consumed
        by the loss a moment later. Liger-Kernel's *fused linear cross-entropy* (FLCE) asks why they should ever
        exist whole. Cut the tokens into chunks of `C` rows: for each chunk compute its `(C, V)` logits, let the
        cross-entropy kernel overwrite them with their gradient, push that gradient through the two matmuls of the
        projection's backward, and drop it. The memory of the loss falls from `N·V` to `C·V` elements.

        **You will implement** the chunked forward+backward (`linear_cross_entropy_fwd_bwd`), launching the fused
        cross-entropy kernel of `p03.cross_entropy` on each chunk with the batch-wide normaliser, and a
        `torch.autograd.Function` around it. **Graded against** `F.linear` + `F.cross_entropy` under float64
        autograd (loss, $\partial L / \partial h$, $\partial L / \partial W$), with `ignore_index`, `mean` and `sum`
        reductions, chunk sizes that do not divide `N`, and a memory probe that records every tensor your code
        allocates and fails if one has `N·V` elements.
        """,
    )
    lesson.md(r"""
        ## 本节要点

        - **问题**：输出层 `h @ W.T` 生成 `(N, V)` 的 logits；Llama-3（`V = 128256`）在 `N = 8192` 时 bf16 就有 1.96 GiB，它们只是为了被损失函数立即消耗。Liger-Kernel 的 FLCE：按 token 分块，每块只生成 `(C, V)` 的 logits，内存从 `N·V` 降到 `C·V`。
        - **每块的步骤**：`logits_c = h_c @ W.T` → 交叉熵 kernel 原地把 logits 改写为梯度（用**全批次**的有效 token 数 $n$ 归一化）→ `dh_c = dlogits_c @ W`，`dW += dlogits_c.T @ h_c`（float32 累加）→ 丢弃这一块。
        - **归一化**：`mean` 的分母是整个批次中非 `ignore_index` 的行数，必须在循环前算好传给 kernel；用块内计数会让每块权重不同。`sum` 时分母为 1。
        - **autograd**：梯度在前向中已经算完；`backward` 只把保存的 `dh`、`dW` 乘以 `grad_output`。
        - **块大小**：Liger 取 `C = next_pow2(ceil(N / ceil(V / d)))`，使一块 logits 约与隐藏状态 `(N, d)` 一样大。
        - **代价**：计算量不变（$6NVd$ FLOPs），节省的是显存；float32 的 `dW` 累加器本身有 `V·d·4` 字节。
        - **实测（H200，一次运行，N=8192）**：峰值显存 3,133 MiB，eager 为 12,024 MiB（少 3.8 倍），与 torch.compile（3,070 MiB）持平。但时间为 102 ms，是 eager（47 ms）的 2.2 倍、三次矩阵乘法本身（37 ms）的 2.8 倍，未达到「时间与矩阵乘法相当」的预期。按字节数估算，主要原因是 32 个块各做一次 float32 `dW` 累加（共约 188 GiB 的访存）。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. Where the memory of the last layer goes

        The head of a causal LM maps hidden states $h \in \mathbb{R}^{N \times d}$ to logits $Z = h W^\top \in
        \mathbb{R}^{N \times V}$ and the mean loss over the $n$ rows whose target is not `ignore_index`:

        $$
        L = \frac{1}{n} \sum_{i \in \mathcal{V}} \big(\operatorname{LSE}(Z_i) - Z_{i, t_i}\big), \qquad
        G = \frac{\partial L}{\partial Z} = \frac{\operatorname{softmax}(Z) - \operatorname{onehot}(t)}{n}
        \ \text{(rows in } \mathcal{V}\text{; 0 elsewhere)}, \qquad
        \frac{\partial L}{\partial h} = G\, W, \quad \frac{\partial L}{\partial W} = G^\top h .
        $$

        Shapes: $G$ is `(N, V)`, $G W$ is `(N, V) @ (V, d) = (N, d)`, $G^\top h$ is `(V, N) @ (N, d) = (V, d)`.

        **Llama-3 8B's head in numbers** ($d = 4096$, $V = 128256$, from its `config.json`; $N = 8192$ tokens per
        step): the bf16 weight is $128256 \cdot 4096 \cdot 2$ B $= 0.98$ GiB, the hidden states 64 MiB, and the
        logits $8192 \cdot 128256 \cdot 2$ B $= 1.96$ GiB. Eager `F.cross_entropy(logits.float(), t)` adds a float32
        copy (3.9 GiB) and saves a float32 log-softmax (3.9 GiB) for its backward. The fused kernel of
        `p03.cross_entropy` removes those, but not the 1.96 GiB of logits themselves, and the logits grow with the
        batch: at 32k tokens they are 7.8 GiB, more than the weights of the whole 8B model's attention layers.

        **The observation.** Row $i$ of $G$ depends only on row $i$ of $Z$ (and on $n$, a number for the whole
        batch). And both products that consume $G$ are sums over rows: $\partial L / \partial h$ row by row, and
        $G^\top h = \sum_c G_c^\top h_c$ over any partition of the rows into chunks $c$. So the rows can be processed
        a chunk at a time:

        ```
        n = number of targets != ignore_index            (one host sync, before the loop)
        dW = zeros(V, d) float32
        for each chunk c of C rows:
            Z_c = h_c @ W.T                        (C, V)   a cuBLAS matmul
            cross_entropy_kernel(Z_c, t_c, loss_c, n)       Z_c now holds G_c = (softmax - onehot) / n
            dh_c = Z_c @ W                         (C, d)
            dW  += Z_c.T @ h_c                     (V, d)   accumulate in float32
        loss = sum(loss) / n
        ```

        The largest temporary is one $(C, V)$ chunk. Nothing of size $(N, V)$ is allocated at any time.

        **The normaliser is global.** The kernel you wrote in `p03.cross_entropy` takes `n_valid` as an argument
        and divides each gradient row by it. Its wrapper counted the valid rows of the tensor it was given; here that
        tensor is one chunk, so calling the wrapper per chunk would divide chunk $c$'s gradient by the chunk's own
        count $n_c$ instead of $n$. That is why this lesson launches the *kernel* directly, with $n$ counted once
        over the whole batch. For `reduction="sum"` the normaliser is 1.

        **What it costs.** The FLOPs do not change: three matmuls of $2NVd$ each, $6NVd = 25.8$ TFLOP at Llama-3's
        sizes, against about 2 GB of traffic for the cross-entropy kernel. The head is compute-bound either way, so
        chunking should cost little time as long as each chunk is a large enough matmul to keep the tensor cores
        busy, and as long as the per-chunk accumulation of $\partial L / \partial W$ stays cheap. Section 5 measures
        that at Llama-3's sizes it does not: the chunked loop is 2.2 times slower than eager.
        Liger-Kernel's rule makes a chunk of logits about as large as the hidden states:
        $C = \operatorname{next\_pow2}\big(\lceil N / \lceil V / d \rceil \rceil\big)$, which gives
        $\lceil 128256 / 4096 \rceil = 32$ and $C = 256$ at Llama-3's sizes: 63 MiB of logits per chunk instead of
        1.96 GiB.

        **The gradient of the weight.** $\partial L / \partial W$ is a sum over chunks. Accumulated in bf16, every
        chunk's partial sum is rounded to 8 bits of mantissa, 32 times at Llama-3's sizes; accumulated in float32
        (`dW.add_(Z_c.T @ h_c)`: the in-place add converts each chunk's product as it reads it, with no float32
        temporary), only each chunk's product is rounded, once, and the sum is not. The price is a
        float32 buffer of $V d \cdot 4$ B $= 1.96$ GiB for Llama-3's head, as large as the logits we removed, but
        fixed: it does not grow with the batch. Accumulating in the weight's dtype halves it at the price of those
        roundings. This lesson accumulates in float32, so that its gradient stays within the error of a single
        bf16 matmul.

        **Why not autograd per chunk?** torchtune's `CEWithChunkedOutputLoss` applies the output projection to
        chunks of tokens and lets autograd run `F.cross_entropy` on each chunk upcast to float32: that bounds the
        float32 copies to one chunk, but every bf16 chunk of logits is returned by the model and lives until the
        backward, so together they still hold $N \cdot V$ elements. Computing each chunk's gradient *before* the
        next chunk's logits exist is what removes them, and it forces the backward of the loss and of the
        projection to run inside the forward: after the loop, the chunks of $G$ are gone.
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt
        import torch
        import torch.nn.functional as F
        import triton
        import triton.language as tl

        cross_entropy_kernel = lesson.use("p03.cross_entropy", "cross_entropy_kernel")
    """)
    lesson.md(r"""
        ## 2. Exercise `linear_cross_entropy_fwd_bwd`: the chunked loop

        Write `linear_cross_entropy_fwd_bwd(hidden, weight, targets, ignore_index=-100, reduction="mean",
        chunk_size=None)`, returning `(loss, grad_hidden, grad_weight)`: the float32 scalar loss and the gradients of
        that loss with respect to `hidden` `(N, d)` and `weight` `(V, d)`, in their dtypes.

        1. Validate: `hidden` 2-D, `weight` 2-D with the same `d` and dtype, `targets` int64 of shape `(N,)`,
           `reduction` `"mean"` or `"sum"`, `chunk_size` `None` or a positive int, every non-ignored target in
           `[0, V)` (the kernel reads `Z[i, t_i]` without a bounds check). Raise `ValueError` with a message.
        2. Count the valid rows once; the normaliser is $n$ for `mean`, 1 for `sum`. `chunk_size=None` takes
           Liger's rule above.
        3. Loop over the chunks: the chunk's logits with a matmul, one launch of `cross_entropy_kernel` (signature
           `(logits, targets, loss, row_stride, n_cols, n_valid, ignore_index, BLOCK_SIZE)`, one program per row;
           `BLOCK_SIZE = min(next_power_of_2(V), 8192)`, and `num_warps` 4, 8 or 16 as in `p03.cross_entropy`)
           writing into a slice of a float32 per-row loss, then the two gradient matmuls. The kernel reads the
           target of row `i` at `targets_ptr + i`: a strided `targets` (a column of a bigger tensor) must be made
           contiguous first.
        4. Return the loss (sum of the per-row losses divided by the normaliser; a `mean` over zero valid rows is
           NaN, as in `F.cross_entropy`), `grad_hidden`, and `grad_weight` cast to the weight's dtype.

        The checks forbid `F.cross_entropy`, softmax, log-sum-exp, `torch.exp` and autograd in your code: the loss and
        $G$ come from the kernel. Matmuls are allowed: cuBLAS is the right tool for them.
    """)
    lesson.exercise(
        "linear_cross_entropy_fwd_bwd",
        r'''
        def liger_chunk_size(n_rows: int, hidden_dim: int, vocab_size: int) -> int:
            """Liger-Kernel's chunk: a (C, V) chunk of logits about as large as the (N, d) hidden states."""
            chunks = triton.cdiv(vocab_size, hidden_dim)
            return triton.next_power_of_2(triton.cdiv(n_rows, chunks))


        def linear_cross_entropy_fwd_bwd(
            hidden: torch.Tensor,
            weight: torch.Tensor,
            targets: torch.Tensor,
            ignore_index: int = -100,
            reduction: str = "mean",
            chunk_size: int | None = None,
        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            """cross_entropy(hidden @ weight.T, targets) and its gradients w.r.t. hidden (N, d) and weight (V, d),
            computed chunk of rows by chunk of rows: no (N, V) tensor is ever allocated."""
            # TODO 1: validate (2-D hidden and weight with the same d and dtype, int64 targets (N,), reduction in
            #         {"mean", "sum"}, chunk_size None or >= 1, non-ignored targets in [0, V)); raise ValueError
            # TODO 2: n_valid (one host sync); the normaliser (n_valid for mean, 1 for sum); the chunk size
            # TODO 3: allocate the per-row float32 loss, grad_hidden, and a float32 grad_weight accumulator
            # TODO 4: for each chunk: logits = h_c @ W.T; launch cross_entropy_kernel (it overwrites logits with
            #         their gradient; it reads targets as contiguous); grad_hidden[chunk] = logits @ W;
            #         grad_weight.add_(logits.T @ h_c)
            # TODO 5: return loss.sum() / normaliser, grad_hidden, grad_weight in the weight's dtype
            ### BEGIN SOLUTION
            if hidden.dim() != 2 or weight.dim() != 2 or hidden.shape[1] != weight.shape[1]:
                raise ValueError(
                    f"need hidden (N, d) and weight (V, d), got {tuple(hidden.shape)} and {tuple(weight.shape)}"
                )
            if hidden.dtype != weight.dtype:
                raise ValueError(f"hidden is {hidden.dtype} but weight is {weight.dtype}")
            n_rows, vocab_size = hidden.shape[0], weight.shape[0]
            if targets.shape != (n_rows,) or targets.dtype != torch.int64:
                raise ValueError(f"targets must be int64 of shape ({n_rows},), got {targets.dtype} {tuple(targets.shape)}")
            if reduction not in ("mean", "sum"):
                raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
            if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size < 1):
                raise ValueError(f"chunk_size must be None or a positive int, got {chunk_size!r}")
            valid = targets != ignore_index
            out_of_range = valid & ((targets < 0) | (targets >= vocab_size))
            n_valid, n_bad = torch.stack([valid.sum(), out_of_range.sum()]).tolist()  # one host sync for both
            if n_bad:
                raise ValueError(f"{n_bad} targets are outside [0, {vocab_size}) and are not ignore_index={ignore_index}")
            normaliser = n_valid if reduction == "mean" else 1
            if chunk_size is None:
                chunk_size = liger_chunk_size(n_rows, hidden.shape[1], vocab_size)

            hidden, targets = hidden.contiguous(), targets.contiguous()  # the kernel reads targets_ptr + row
            loss = torch.zeros(n_rows, dtype=torch.float32, device=hidden.device)
            grad_hidden = torch.empty_like(hidden)
            grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
            block = min(triton.next_power_of_2(vocab_size), 8192)
            num_warps = 4 if block <= 1024 else 8 if block <= 4096 else 16
            for start in range(0, n_rows, chunk_size):
                end = min(start + chunk_size, n_rows)
                h_chunk = hidden[start:end]
                logits = h_chunk @ weight.T                                   # (C, V): the only big temporary
                cross_entropy_kernel[(end - start,)](
                    logits, targets[start:end], loss[start:end], logits.stride(0),
                    vocab_size, max(normaliser, 1), ignore_index,
                    BLOCK_SIZE=block, num_warps=num_warps,
                )                                                             # logits now hold dL/dlogits
                grad_hidden[start:end] = logits @ weight                      # (C, V) @ (V, d)
                grad_weight.add_(logits.T @ h_chunk)                          # (V, C) @ (C, d), summed in float32
            return loss.sum() / normaliser, grad_hidden, grad_weight.to(weight.dtype)
            ### END SOLUTION
        ''',
    )
    lesson.md(r"""
        ## 3. Exercise `fused_linear_cross_entropy`: plugging it into autograd

        As in `p03.cross_entropy`, the gradients are ready when the forward returns, so the `torch.autograd.Function`
        saves them and its backward only applies the chain rule: `grad_output` (a scalar: 1 after
        `loss.backward()`, the loss weight otherwise) times each saved gradient. Scale them in place (`mul_`): they
        are not needed afterwards, and $\partial L / \partial W$ has the size of the weight. Return `None` for the
        arguments that are not tensors with gradients (targets, ignore_index, reduction, chunk_size).

        Unlike the plain cross-entropy, nothing is overwritten that another op needs: the Function's inputs are
        `hidden` and `weight`, which it only reads. The price of the design is elsewhere: the backward of the loss
        runs during the forward, so a forward without a backward (evaluation) should not use this Function: compute
        the loss alone, chunk by chunk, under `torch.no_grad()`.
    """)
    lesson.exercise(
        "fused_linear_cross_entropy",
        r'''
        class FusedLinearCrossEntropy(torch.autograd.Function):
            """cross_entropy(hidden @ weight.T, targets) whose forward already computes both gradients."""

            @staticmethod
            def forward(ctx, hidden, weight, targets, ignore_index, reduction, chunk_size):
                # TODO: run linear_cross_entropy_fwd_bwd; save grad_hidden and grad_weight; return the loss
                ### BEGIN SOLUTION
                loss, grad_hidden, grad_weight = linear_cross_entropy_fwd_bwd(
                    hidden, weight, targets, ignore_index, reduction, chunk_size
                )
                ctx.save_for_backward(grad_hidden, grad_weight)
                return loss
                ### END SOLUTION

            @staticmethod
            def backward(ctx, grad_output):
                # TODO: scale both saved gradients by grad_output (in place) and return them, then None for
                #       targets, ignore_index, reduction and chunk_size
                ### BEGIN SOLUTION
                grad_hidden, grad_weight = ctx.saved_tensors
                grad_hidden.mul_(grad_output)  # a 0-dim tensor: the in-place product keeps each dtype
                grad_weight.mul_(grad_output)
                return grad_hidden, grad_weight, None, None, None, None
                ### END SOLUTION


        def fused_linear_cross_entropy(
            hidden: torch.Tensor,
            weight: torch.Tensor,
            targets: torch.Tensor,
            ignore_index: int = -100,
            reduction: str = "mean",
            chunk_size: int | None = None,
        ) -> torch.Tensor:
            """F.cross_entropy(F.linear(hidden, weight), targets, ...) without the (N, V) logits."""
            return FusedLinearCrossEntropy.apply(hidden, weight, targets, ignore_index, reduction, chunk_size)
        ''',
    )
    lesson.md(r"""
        ## 4. The memory, in a picture

        The cell below draws the extra memory of the head's loss for Llama-3 8B's head ($d = 4096$, $V = 128256$, bf16)
        as the number of tokens grows, by the byte counts of section 1: eager PyTorch (bf16 logits, a float32 copy
        and a float32 log-softmax saved for the backward), the in-place kernel of `p03.cross_entropy` (the bf16
        logits only), and the chunked version (one chunk of logits by Liger's rule, plus the float32 `dW`
        accumulator and one chunk's bf16 `(V, d)` product, which do not grow with $N$). Where the curves cross is
        the batch size from which fusing the projection pays for its float32 accumulator. Then it runs your function on a small problem under a probe
        that records the largest tensor created, for several chunk sizes: it should grow with the chunk, and reach
        the size of the full logits only when one chunk covers every row.
    """)
    lesson.code(r"""
        GiB = 2**30
        d_model, vocab = 4096, 128256
        tokens = [2**k for k in range(10, 17)]
        eager = [n * vocab * (2 + 4 + 4) / GiB for n in tokens]
        in_place = [n * vocab * 2 / GiB for n in tokens]
        chunked = [(liger_chunk_size(n, d_model, vocab) * vocab * 2 + vocab * d_model * (4 + 2)) / GiB for n in tokens]
        fig, ax = plt.subplots(figsize=(7, 4))
        ax.plot(tokens, eager, "o-", label="eager: logits + float32 copy + float32 log-softmax")
        ax.plot(tokens, in_place, "s-", label="p03.cross_entropy: logits only (gradient in place)")
        ax.plot(tokens, chunked, "^-", label="fused linear + CE: one chunk + float32 dW + one bf16 (V, d) product")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.set_xlabel("tokens per step N")
        ax.set_ylabel("GiB beyond inputs, weights and dh")
        ax.set_title("Llama-3 8B head (d=4096, V=128256, bf16)")
        ax.legend(fontsize=8)
        plt.show()

        from torch.utils._python_dispatch import TorchDispatchMode

        class LargestTensor(TorchDispatchMode):
            # records the largest tensor (in bytes) any torch op returns while it is active; bytes, because
            # Triton's interpreter copies each tensor argument's storage as a flat uint8 tensor
            def __init__(self):
                super().__init__()
                self.largest = 0

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                for t in out if isinstance(out, (tuple, list)) else [out]:
                    if isinstance(t, torch.Tensor):
                        self.largest = max(self.largest, t.numel() * t.element_size())
                return out

        n_small, d_small, v_small = 64, 16, 300
        h = torch.randn(n_small, d_small, device=DEVICE)
        w = torch.randn(v_small, d_small, device=DEVICE) * 0.3
        t = torch.randint(0, v_small, (n_small,), device=DEVICE)
        try:
            for chunk in (8, 32, 64):
                with LargestTensor() as probe:
                    linear_cross_entropy_fwd_bwd(h, w, t, chunk_size=chunk)
                print(f"chunk_size={chunk:3d}: largest tensor {probe.largest:6d} B; float32 sizes: "
                      f"C*V {4 * chunk * v_small} B, V*d {4 * v_small * d_small} B, N*V {4 * n_small * v_small} B")
        except NotImplementedError:
            print("Implement linear_cross_entropy_fwd_bwd first.")
    """)
    lesson.md(r"""
        ## 5. Time and memory (GPU only)

        `python -m llm_algo bench p03.fused_linear_cross_entropy` times forward+backward of the head at the issue's
        shape, `N = 8192`, `V = 128256`, `d = 4096` in bf16, for your chunked version, eager `F.linear` +
        `F.cross_entropy` (bf16 logits upcast to float32, as training code does) and `torch.compile` of the same
        function, each in TFLOP/s by the $6NVd$ count, next to the three matmuls alone (cuBLAS, the roofline of any
        version), and prints the peak memory each one allocates beyond its inputs
        (`torch.cuda.max_memory_allocated`).

        **Reading the numbers** (one run of `python -m llm_algo bench p03.fused_linear_cross_entropy` with the
        reference solutions on an NVIDIA H200, Triton 3.6, torch 2.11, CUDA 13.0; your GPU will differ). Forward +
        backward of the head at $N = 8192$, $V = 128256$, $d = 4096$, bf16; TFLOP/s by $6NVd$:

        | version | ms | TFLOP/s | peak memory beyond inputs |
        |---|---|---|---|
        | chunked (yours, Liger's chunk $C = 256$) | 102.4 | 252 | 3,133 MiB |
        | `F.linear` + `F.cross_entropy`, eager | 47.5 | 544 | 12,024 MiB |
        | the same, `torch.compile` | 39.8 | 648 | 3,070 MiB |
        | cuBLAS: the three matmuls alone | 36.8 | 702 | |

        **Memory: 3.8 times less than eager, level with `torch.compile`.** Counting bytes accounts for the chunked and
        compiled rows to the MiB. Yours holds 3,133 MiB: the float32 `dW` accumulator (2,004 MiB), one chunk's bf16
        `(V, d)` product (1,002 MiB), one chunk of logits (63 MiB) and `dh` (64 MiB). Eager peaks at 12,024 MiB,
        exactly six times the 2,004 MiB of the bf16 logits: the logits and float32 tensors of the logits' shape (the
        upcast, the log-softmax saved for the backward, their gradients). The benchmark records the peak, not its
        parts. Compiled, the head holds 3,070 MiB = 2,004 + 1,002 + 64, which is consistent with keeping the bf16
        logits but no float32 copy of them, plus `dW` and `dh` in bf16. So at this $N$ the chunked version saves
        nothing against `torch.compile`: it trades the bf16 logits for a float32 `dW` of the same size. The difference
        is growth. The compiled head's logits grow with $N$ (7.8 GiB at 32k tokens), while the chunked version's
        memory stays about the same.

        **Time: 2.16 times slower than eager, 2.6 times slower than `torch.compile`, 2.8 times the three matmuls.**
        Section 1 expected the chunked loop to cost about as much as the matmuls. It misses that by 66 ms. Nothing is
        recomputed: each chunk's logits are computed once and overwritten with their gradient in place. The likely
        causes, by byte count (not profiled in this run):

        - *The float32 accumulation of `dW`, 32 times.* Each chunk's `logits.T @ h_c` writes a bf16 `(V, d)` product
          (1.0 GiB). `grad_weight.add_` then reads it and reads and writes the 2.0 GiB float32 accumulator: about 5.9
          GiB of traffic per chunk, 188 GiB over the 32 chunks. At the ~4.1 TB/s of a copy (the decode lessons' copy
          rows in the same run) that is about 49 ms, most of the gap. The unchunked versions compute `dW` in one
          matmul with $K = N = 8192$ and write it once.
        - *Small matmuls that re-read the weight.* With $C = 256$ rows, `h_c @ W.T` and `G_c @ W` each read the whole
          0.98 GiB weight, 64 reads in all, for 0.27 TFLOP each: 256 FLOP per byte, close to the H200's balance point
          of about 200, so these matmuls run nearer the memory limit than the tensor cores' peak. `G_c @ W` also has
          an output of only $256 \times 4096$, a few dozen tiles for 132 SMs unless cuBLAS splits $K$.
        - *Smaller items.* The cross-entropy kernel reads and writes each chunk of logits (about 4 GiB in all), and
          the final float32-to-bf16 cast of `dW` moves about 3 GiB. Together these are a couple of milliseconds.

        A `torch.profiler` trace of one call, giving time per op, would confirm this split. The first fixes follow
        from it. Accumulate in the GEMM's epilogue with `torch.addmm(grad_weight, G_c.T, h_c, out_dtype=torch.float32,
        out=grad_weight)` (PyTorch ≥ 2.8; Liger-Kernel does this when asked for a float32 accumulator), which removes
        the bf16 product and its read. Accumulate in bf16, Liger's default, which halves the remaining traffic at the
        price of the roundings of section 1. Or take larger chunks: at $C = 1024$ there are 8 passes over `dW` instead
        of 32, for 250 MiB of logits per chunk. Cut Cross-Entropy (section 6) goes further and never writes a chunk of
        logits to HBM at all.
    """)
    lesson.stop()
    lesson.md(r"""
        ## 6. Reading the solutions

        **`linear_cross_entropy_fwd_bwd`.** Validation and the batch-wide count first: both the valid-row count and
        the out-of-range count come back in one device-to-host transfer. Each chunk then costs one forward matmul,
        one kernel launch and two backward matmuls. The per-row loss is a slice of one `(N,)` buffer, so the loss is
        one sum at the end. `grad_hidden[start:end] = logits @ weight` writes each chunk's rows once; `grad_weight`
        accumulates across chunks, in float32. `max(normaliser, 1)` keeps the kernel from dividing by zero in an
        all-ignored batch, where every row is zeroed anyway; the loss is then `0 / 0 = nan` for `mean` (as in
        `F.cross_entropy`) and 0 for `sum`.

        **`FusedLinearCrossEntropy`.** The forward saves the two gradients; the backward scales them in place by
        `grad_output` and returns them. Liger-Kernel skips the multiply when `grad_output` is 1, and runs it as a small
        Triton kernel otherwise.

        **The usual mistakes, and why they are wrong**:
        - *The chunk's own count as the normaliser* (what calling the `p03.cross_entropy` wrapper per chunk does):
          right only when every chunk has the same number of valid rows.
        - *`grad_weight =` instead of `+=`*: the weight gradient of the last chunk only.
        - *`dW` accumulated in the weight's dtype* (fp16): every chunk's addition rounds to 11 bits, so with many
          chunks the rounding errors add up; the check sums 256 chunks of one row each in fp16.
        - *A strided `targets` passed to the kernel as it is* (a column of a bigger tensor): the kernel reads
          `targets_ptr + row`, so it takes other rows' (or random) targets; the checks pass every operand in a
          layout of its own.
        - *`sum` still divided by $n$*, or *the mean over all rows* instead of the valid ones.
        - *The logits computed once* (`hidden @ weight.T`) and then sliced: right numbers, and exactly the `(N, V)`
          tensor the lesson removes; the memory probe sees it.
        - *Forgetting `grad_output`*, or *no gradient for the weight* in the backward.
        - *No range check on the targets*: the kernel would read outside the row.
        - *The loss in PyTorch* (`F.cross_entropy` or a log-softmax on the chunk): the restriction refuses it.

        **Production.** Liger-Kernel's `LigerFusedLinearCrossEntropyLoss` is this loop (its cross-entropy kernel
        adds label smoothing, z-loss and logit soft-capping, and an optional bias gradient); it is what Liger's
        Llama and Qwen patches install for training. Apple's Cut Cross-Entropy (Wijmans et al., 2024) goes one step
        further: one kernel computes the log-sum-exp of each row by blocks of the vocabulary, keeping the logits in
        SRAM, and the backward recomputes them block by block, so even the `(C, V)` chunk never reaches HBM.
        Megatron-LM instead shards $V$ over tensor-parallel ranks: each rank holds `(N, V / tp)` logits and the
        ranks combine their per-row (max, sum) pairs with all-reduces.
    """)
    lesson.mistakes()
    return lesson
