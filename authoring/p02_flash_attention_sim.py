"""Source of 02_PyTorch_Algorithms/30_Flash_Attention_Sim.ipynb (build with `python -m llm_algo build p02.flash_attention_sim`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p02.flash_attention_sim",
        path="02_PyTorch_Algorithms/30_Flash_Attention_Sim.ipynb",
        title_en="Online softmax and tiled attention (FlashAttention in PyTorch)",
        title_zh="在线 Softmax 与分块注意力（用 PyTorch 模拟 FlashAttention）",
        difficulty="hard",
        device="cpu",
        minutes=100,
        prerequisites=["p02.attention_mha_gqa", "p00.autograd"],
    )
    lesson.title(
        intro=r"""
        Attention written the textbook way builds the score matrix $QK^\top$ of shape `(B, H, S, S)`. For Llama-3-8B
        (32 query heads) at $S = 8192$ tokens that is $32 \times 8192^2 = 2.1\cdot10^9$ scores per layer and sequence:
        4.3 GB in bf16, written to GPU memory, read back by the softmax, written again, read again by $PV$. Nothing
        about attention needs that matrix to exist. FlashAttention (Dao et al., 2022) computes exact attention one
        tile of keys at a time with an *online softmax*, keeps only `(S, D)`-sized tensors plus one number per query
        row (the log-sum-exp), and recomputes the tiles in the backward pass instead of storing them. The paper reports
        a 3× speed-up on GPT-2 at 1K tokens and memory linear in $S$; FlashAttention-2 (Dao, 2023) reaches 50–73 % of
        an A100's peak FLOP/s. Every serving and training stack uses it (PyTorch SDPA's flash backend, vLLM, HF
        `attn_implementation="flash_attention_2"`).

        **You will implement** the tiled forward with the online softmax and its log-sum-exp, for any block sizes,
        causal or not; the tiled backward by recomputation from the log-sum-exp; and the `autograd.Function` that
        saves only $Q, K, V, O$ and the LSE. **Graded against** `F.scaled_dot_product_attention` and its autograd in
        float64, `torch.logsumexp` of the float64 scores, closed forms for uniform attention, `gradcheck`, and a
        size watch (a `TorchFunctionMode` plus `saved_tensors_hooks`) that fails if any `(S, S)` tensor is ever made.
        SDPA, softmax and logsumexp are forbidden in your code. The Triton versions come later (`p03.flash_attention_fwd`, `p03.flash_attention_bwd`).
    """
    )
    lesson.md(r"""
        ## 本节要点

        - **问题**：标准注意力要物化 `(B, H, S, S)` 的分数矩阵，显存随序列长度平方增长（Llama-3-8B 在 8K 上下文时每层约 4.3 GB）。
        - **在线 Softmax（online softmax）**：按键块流式处理，维护每行的运行最大值 $m$ 与分母 $\ell$；新块到来时用 $e^{m_\text{old}-m_\text{new}}$ 重新缩放旧的分母和累加器。
        - **LSE（log-sum-exp）**：$L_i = m_i + \log \ell_i$，每行只存一个数，反向传播靠它重算概率 $P = e^{S - L}$。
        - **反向重计算（recomputation）**：$D_i = \sum_j dO_{ij} O_{ij}$，$dS = P \odot (dP - D)$，$dQ = dS\,K \cdot s$，$dK = dS^\top Q \cdot s$，$dV = P^\top dO$。
        - **因果掩码（causal mask）**：查询 $i$ 只看键 $j \le i$；整块都在对角线右侧的键块可以直接跳过，省一半计算。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. The problem, with numbers

        Standard attention for one head, queries $Q \in \mathbb{R}^{S_q \times D}$, keys $K \in \mathbb{R}^{S_k \times D}$,
        values $V \in \mathbb{R}^{S_k \times D_v}$ and scale $s = 1/\sqrt{D}$:

        $$
        S = s\,QK^\top \in \mathbb{R}^{S_q\times S_k},\qquad P = \operatorname{softmax}_\text{row}(S),\qquad O = PV \in \mathbb{R}^{S_q\times D_v}.
        $$

        Computed in that order, $S$ and $P$ each cost $S_q S_k$ elements of memory and at least two passes over HBM.
        The FLOPs are $4 S_q S_k D$ (two matmuls), the bytes moved are dominated by $S_q S_k$ once $S \gg D$, so the
        naive version is memory-bound exactly where long contexts live. And autograd keeps $P$ for the backward
        ($dV = P^\top dO$), so a training step pays the $S^2$ memory on every layer at once.

        ## 2. The online softmax

        Split the keys into blocks $K_1, K_2, \dots$ of $b_k$ rows. For one query row, after the first $t$ blocks keep

        $$
        m^{(t)} = \max_{j \in \text{blocks} \le t} S_j,\qquad
        \ell^{(t)} = \sum_{j} e^{S_j - m^{(t)}},\qquad
        a^{(t)} = \sum_{j} e^{S_j - m^{(t)}}\, V_j \in \mathbb{R}^{D_v}.
        $$

        When block $t+1$ arrives with scores $S_{t+1}$ (a row of $b_k$ numbers), the new maximum is
        $m' = \max(m, \max S_{t+1})$ and everything summed so far was relative to the *old* maximum, so it is rescaled
        by $\alpha = e^{m - m'} \le 1$:

        $$
        \ell' = \alpha\,\ell + \textstyle\sum e^{S_{t+1} - m'},\qquad a' = \alpha\,a + e^{S_{t+1} - m'}\,V_{t+1}.
        $$

        At the end $O = a / \ell$ exactly (no approximation: $e^{S_j - m}/\sum e^{S_j - m}$ is the softmax for any
        $m$), and the row's **log-sum-exp** is $L = \log\sum_j e^{S_j} = m + \log \ell$. Every exponent is $\le 0$, so
        nothing overflows whatever the size of the logits. Shapes per tile, with $b_q$ query rows at once:
        `s: (B, H, b_q, b_k)`, `m, l: (B, H, b_q, 1)`, `acc: (B, H, b_q, D_v)`; memory per tile $b_q b_k$, never $S_q S_k$.

        **Causal.** Query $i$ sees keys $j \le i$ (top-left alignment, as SDPA's `is_causal=True`; we require
        $S_q = S_k$ then). A key block that starts after the query block's last row is fully masked: skip it. That
        halves the work. Inside a tile on the diagonal, mask $j > i$ with $-\infty$, whose $e^{-\infty} = 0$.
        Process key blocks in increasing order: the first one always holds key 0, which every query sees, so $m$
        is finite after it and $e^{m - m'}$ never meets $-\infty - (-\infty)$.

        ## 3. The backward, by recomputation

        With $dO$ given, the chain rule through $O = PV$ and the softmax gives ($\odot$ elementwise, $D_i$ one
        number per query row):

        $$
        dV = P^\top dO,\qquad dP = dO\,V^\top,\qquad dS_{ij} = P_{ij}\,(dP_{ij} - D_i),\quad
        D_i = \sum_j P_{ij}\,dP_{ij} = \sum_d dO_{id}\,O_{id},
        $$
        $$
        dQ = s\,dS\,K,\qquad dK = s\,dS^\top Q .
        $$

        The identity $\sum_j P_{ij} dP_{ij} = \sum_j P_{ij} (dO_i \cdot V_j) = dO_i \cdot O_i$ is what makes tiling
        possible: $D$ needs only $O$ and $dO$, `(S, D_v)`-sized, computed once before the loop. Then each tile
        recomputes $P_{\text{tile}} = e^{s\,Q_\text{blk} K_\text{blk}^\top - L_\text{blk}}$ from the saved LSE (no
        max, no sum: $L$ already normalises) and adds its share to $dQ$, $dK$, $dV$. The backward does one more
        matmul per tile than the forward; in exchange it never reads an $S^2$ tensor.
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt
        import torch
        import torch.nn.functional as F
    """)
    lesson.md(r"""
        ## 4. Exercise `flash_attention_forward`

        Tile the queries by `block_q` rows and the keys by `block_k` rows (the last tile may be shorter; a block larger
        than the sequence is one tile). Compute in float32 at least (float64 stays float64). Return the output in the
        input's dtype and the LSE in the compute dtype (FlashAttention keeps it in float32). Validate the inputs:
        4-D tensors with matching batch, heads, sequence and head sizes, block sizes $\ge 1$, at least one key, and
        $S_q = S_k$ when causal, each refused with a `ValueError` that says what was wrong.
    """)
    lesson.exercise(
        "flash_attention_forward",
        r'''
        def flash_attention_forward(q, k, v, causal=False, block_q=64, block_k=64, scale=None):
            """Exact attention computed tile by tile with the online softmax.

            q: (B, H, Sq, D), k: (B, H, Sk, D), v: (B, H, Sk, Dv); float16, bfloat16, float32 or float64
            causal: query i sees keys j <= i (top-left, as SDPA's is_causal); requires Sq == Sk
            scale: defaults to 1 / sqrt(D)
            returns out (B, H, Sq, Dv) in q.dtype, lse (B, H, Sq) in float32 (float64 for float64 inputs)
            """
            # TODO: validate shapes, block sizes and the causal case (ValueError with a clear message)
            # TODO: for each query block: running max m = -inf, denominator l = 0, accumulator acc = 0
            # TODO: for each key block (skip those fully masked when causal): scores, mask, new max,
            #       rescale l and acc by exp(m_old - m_new), add this block's exp(s - m_new) and its product with v
            # TODO: out = acc / l, lse = m + log(l)
            ### BEGIN SOLUTION
            if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
                raise ValueError(f"q, k, v must be (B, H, S, D); got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
            B, H, Sq, D = q.shape
            Sk, Dv = k.shape[2], v.shape[3]
            if k.shape[:2] != (B, H) or k.shape[3] != D or v.shape[:3] != k.shape[:3]:
                raise ValueError(f"shapes do not match: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
            if block_q < 1 or block_k < 1:
                raise ValueError(f"block sizes must be >= 1, got block_q={block_q}, block_k={block_k}")
            if Sk == 0:
                raise ValueError("attention over zero keys is undefined")
            if causal and Sq != Sk:
                raise ValueError(f"causal attention here needs Sq == Sk, got Sq={Sq}, Sk={Sk}")
            scale = D ** -0.5 if scale is None else scale
            compute_dtype = torch.promote_types(q.dtype, torch.float32)
            qc, kc, vc = q.to(compute_dtype), k.to(compute_dtype), v.to(compute_dtype)
            out = torch.empty(B, H, Sq, Dv, dtype=compute_dtype)
            lse = torch.empty(B, H, Sq, dtype=compute_dtype)
            for q_start in range(0, Sq, block_q):
                q_end = min(q_start + block_q, Sq)
                q_blk = qc[:, :, q_start:q_end] * scale                            # (B, H, bq, D)
                m = torch.full((B, H, q_end - q_start, 1), float("-inf"), dtype=compute_dtype)
                l = torch.zeros(B, H, q_end - q_start, 1, dtype=compute_dtype)
                acc = torch.zeros(B, H, q_end - q_start, Dv, dtype=compute_dtype)
                k_stop = q_end if causal else Sk                                    # later key blocks: fully masked
                for k_start in range(0, k_stop, block_k):
                    k_end = min(k_start + block_k, Sk)
                    s = q_blk @ kc[:, :, k_start:k_end].transpose(-1, -2)           # (B, H, bq, bk)
                    if causal:
                        rows = torch.arange(q_start, q_end)[:, None]                # (bq, 1)
                        cols = torch.arange(k_start, k_end)[None, :]                # (1, bk)
                        s = s.masked_fill(cols > rows, float("-inf"))
                    m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))          # (B, H, bq, 1)
                    alpha = torch.exp(m - m_new)                                    # rescales what came before
                    p = torch.exp(s - m_new)                                        # (B, H, bq, bk)
                    l = alpha * l + p.sum(dim=-1, keepdim=True)
                    acc = alpha * acc + p @ vc[:, :, k_start:k_end]                 # (B, H, bq, Dv)
                    m = m_new
                out[:, :, q_start:q_end] = acc / l
                lse[:, :, q_start:q_end] = (m + torch.log(l)).squeeze(-1)
            return out.to(q.dtype), lse
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        The checks compare with `F.scaled_dot_product_attention` in float64 over block sizes that divide the sequence,
        that do not, that exceed it and that are 1; the LSE with `torch.logsumexp` of the float64 scores; logits of
        size $10^4$ (where $e^{S}$ overflows); and they watch every tensor your code creates: none may hold
        $S_q \cdot S_k$ elements per head.
    """)
    lesson.code(r"""
        # How the running max, the denominator and the output of one query row evolve as key blocks stream in.
        torch.manual_seed(0)
        q1, k1, v1 = torch.randn(1, 1, 1, 16) * 3, torch.randn(1, 1, 64, 16) * 3, torch.randn(1, 1, 64, 4)
        scores = (q1 @ k1.transpose(-1, -2) / 4).flatten()
        running_max, partial_out = [], []
        try:
            for stop in range(8, 65, 8):  # attention over the first `stop` keys = the state after stop/8 blocks
                o_part, _ = flash_attention_forward(q1, k1[:, :, :stop], v1[:, :, :stop], block_k=8)
                running_max.append(scores[:stop].max().item())
                partial_out.append(o_part.flatten()[0].item())
            fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3))
            ax1.bar(range(64), scores.numpy(), color="lightgrey", label="scores s·q·kⱼ")
            ax1.step(range(7, 64, 8), running_max, where="post", color="C3", label="running max m after each block")
            ax1.set_xlabel("key j (blocks of 8)"); ax1.legend(fontsize=8); ax1.set_title("one query row")
            ax2.plot(range(1, 9), partial_out, marker="o", label="out[0] after t blocks")
            ax2.axhline(F.scaled_dot_product_attention(q1, k1, v1).flatten()[0].item(), color="k", ls=":", label="SDPA, all keys")
            ax2.set_xlabel("blocks seen t"); ax2.legend(fontsize=8); ax2.set_title("the rescaled accumulator converges")
            plt.tight_layout(); plt.show()
        except NotImplementedError:
            print("flash_attention_forward not attempted yet")
    """)
    lesson.md(r"""
        ## 5. Exercise `flash_attention_backward`

        Given the forward's `out` and `lse` and the incoming gradient `grad_out`, return `(dq, dk, dv)` in the dtypes
        of `q`, `k`, `v`, computed in float32 at least, tile by tile, recomputing each tile's probabilities from the
        LSE. FlashAttention-2 makes the *key* block the outer loop (each program owns a `dK`, `dV` tile and adds into
        `dQ`); either order is correct. Refuse an `lse` or `out`/`grad_out` of the wrong shape with a `ValueError`.
    """)
    lesson.exercise(
        "flash_attention_backward",
        r'''
        def flash_attention_backward(q, k, v, out, lse, grad_out, causal=False, block_q=64, block_k=64, scale=None):
            """Gradients of flash attention by recomputation.

            q: (B, H, Sq, D), k: (B, H, Sk, D), v: (B, H, Sk, Dv)
            out, grad_out: (B, H, Sq, Dv); lse: (B, H, Sq), as flash_attention_forward returned them
            returns (dq, dk, dv), same shapes and dtypes as q, k, v
            """
            # TODO: validate the shapes of out, grad_out and lse (and block sizes, causal Sq == Sk)
            # TODO: delta = rowsum(grad_out * out): (B, H, Sq, 1)
            # TODO: for each key block, for each query block it can see: recompute p = exp(s - lse),
            #       dv += p^T dO, dp = dO v^T, ds = p * (dp - delta), dq += scale ds k, dk += scale ds^T q
            ### BEGIN SOLUTION
            B, H, Sq, D = q.shape
            Sk, Dv = k.shape[2], v.shape[3]
            if out.shape != (B, H, Sq, Dv) or grad_out.shape != out.shape:
                raise ValueError(f"out and grad_out must be {(B, H, Sq, Dv)}, got {tuple(out.shape)}, {tuple(grad_out.shape)}")
            if lse.shape != (B, H, Sq):
                raise ValueError(f"lse must be {(B, H, Sq)} (one value per query row), got {tuple(lse.shape)}")
            if block_q < 1 or block_k < 1:
                raise ValueError(f"block sizes must be >= 1, got block_q={block_q}, block_k={block_k}")
            if causal and Sq != Sk:
                raise ValueError(f"causal attention here needs Sq == Sk, got Sq={Sq}, Sk={Sk}")
            scale = D ** -0.5 if scale is None else scale
            compute_dtype = torch.promote_types(q.dtype, torch.float32)
            qc, kc, vc = q.to(compute_dtype), k.to(compute_dtype), v.to(compute_dtype)
            do = grad_out.to(compute_dtype)                                           # (B, H, Sq, Dv)
            lse_c = lse.to(compute_dtype)[..., None]                                  # (B, H, Sq, 1)
            delta = (do * out.to(compute_dtype)).sum(dim=-1, keepdim=True)            # (B, H, Sq, 1)
            dq, dk, dv = torch.zeros_like(qc), torch.zeros_like(kc), torch.zeros_like(vc)
            for k_start in range(0, Sk, block_k):
                k_end = min(k_start + block_k, Sk)
                k_blk, v_blk = kc[:, :, k_start:k_end], vc[:, :, k_start:k_end]         # (B, H, bk, D), (B, H, bk, Dv)
                first_q = k_start if causal else 0                                       # earlier queries see none of it
                for q_start in range(first_q - first_q % block_q, Sq, block_q):
                    q_end = min(q_start + block_q, Sq)
                    q_blk = qc[:, :, q_start:q_end]                                     # (B, H, bq, D)
                    s = (q_blk @ k_blk.transpose(-1, -2)) * scale                       # (B, H, bq, bk)
                    if causal:
                        rows = torch.arange(q_start, q_end)[:, None]
                        cols = torch.arange(k_start, k_end)[None, :]
                        s = s.masked_fill(cols > rows, float("-inf"))
                    p = torch.exp(s - lse_c[:, :, q_start:q_end])                       # (B, H, bq, bk)
                    do_blk = do[:, :, q_start:q_end]                                    # (B, H, bq, Dv)
                    dv[:, :, k_start:k_end] += p.transpose(-1, -2) @ do_blk             # (B, H, bk, Dv)
                    dp = do_blk @ v_blk.transpose(-1, -2)                               # (B, H, bq, bk)
                    ds = p * (dp - delta[:, :, q_start:q_end])                          # (B, H, bq, bk)
                    dq[:, :, q_start:q_end] += (ds @ k_blk) * scale                     # (B, H, bq, D)
                    dk[:, :, k_start:k_end] += (ds.transpose(-1, -2) @ q_blk) * scale   # (B, H, bk, D)
            return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 6. Exercise `flash_attention`: the autograd function

        Wire both into a `torch.autograd.Function`: `forward` runs your tiled forward and saves **only** $Q, K, V, O$
        and the LSE (`ctx.save_for_backward`), plus the plain settings on `ctx`; `backward` calls your tiled backward
        and returns one gradient per `forward` input (`None` for the non-tensors). `flash_attention(...)` applies it.
        The check records every tensor autograd saves (`torch.autograd.graph.saved_tensors_hooks`): a `(S, S)` one fails.
    """)
    lesson.exercise(
        "flash_attention",
        r'''
        class FlashAttentionFunction(torch.autograd.Function):
            """Memory-efficient exact attention: saves q, k, v, out and lse, never the (Sq, Sk) probabilities."""

            @staticmethod
            def forward(ctx, q, k, v, causal, block_q, block_k, scale):
                # TODO: run flash_attention_forward, save the tensors the backward needs, keep the settings on ctx
                ### BEGIN SOLUTION
                out, lse = flash_attention_forward(q, k, v, causal, block_q, block_k, scale)
                ctx.save_for_backward(q, k, v, out, lse)
                ctx.settings = (causal, block_q, block_k, scale)
                return out
                ### END SOLUTION

            @staticmethod
            def backward(ctx, grad_out):
                # TODO: run flash_attention_backward; one return value per forward input
                ### BEGIN SOLUTION
                q, k, v, out, lse = ctx.saved_tensors
                causal, block_q, block_k, scale = ctx.settings
                dq, dk, dv = flash_attention_backward(q, k, v, out, lse, grad_out, causal, block_q, block_k, scale)
                return dq, dk, dv, None, None, None, None
                ### END SOLUTION


        def flash_attention(q, k, v, causal=False, block_q=64, block_k=64, scale=None):
            """q: (B, H, Sq, D), k: (B, H, Sk, D), v: (B, H, Sk, Dv) -> (B, H, Sq, Dv), differentiable."""
            return FlashAttentionFunction.apply(q, k, v, causal, block_q, block_k, scale)
    ''',
    )
    lesson.code(r"""
        # Memory: the largest tensor each version creates, per (batch, head), against the sequence length.
        from torch.overrides import TorchFunctionMode


        class LargestTensor(TorchFunctionMode):
            def __init__(self):
                super().__init__()
                self.largest = 0

            def __torch_function__(self, func, types, args=(), kwargs=None):
                result = func(*args, **(kwargs or {}))
                for t in result if isinstance(result, (tuple, list)) else [result]:
                    if isinstance(t, torch.Tensor):
                        self.largest = max(self.largest, t.numel())
                return result


        def naive_attention(q, k, v):
            return torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1) @ v


        lengths, naive_sizes, tiled_sizes = [32, 64, 128, 256], [], []
        for n in lengths:
            q2, k2, v2 = (torch.randn(1, 1, n, 32, requires_grad=True) for _ in range(3))
            for fn, sizes in ((naive_attention, naive_sizes), (lambda a, b, c: flash_attention(a, b, c, True, 32, 32), tiled_sizes)):
                try:
                    with LargestTensor() as watch:
                        fn(q2, k2, v2).sum().backward()
                    sizes.append(watch.largest)
                except NotImplementedError:
                    sizes.append(float("nan"))
        plt.figure(figsize=(5.5, 3.3))
        plt.loglog(lengths, naive_sizes, marker="o", label="softmax(QKᵀ)V with autograd")
        plt.loglog(lengths, tiled_sizes, marker="s", label="your flash_attention, 32×32 tiles")
        plt.xlabel("sequence length S"); plt.ylabel("largest tensor (elements)")
        plt.title("forward + backward, one head, D = 32"); plt.legend(fontsize=8); plt.tight_layout(); plt.show()
    """)
    lesson.stop()
    lesson.md(r"""
        ## 7. Reading the solutions

        **Forward.** The scale multiplies the query block once (`b_q·D` multiplications instead of `b_q·b_k`). `m`
        starts at $-\infty$ and `l`, `acc` at 0, so the first block's $\alpha = e^{-\infty} = 0$ wipes nothing that
        mattered. The order inside the loop is the whole algorithm: new max, rescale factor, this block's
        exponentials, then `l` and `acc` rescaled and extended, then `m` updated. The division by `l` happens once,
        at the end (FlashAttention-2's change from FlashAttention-1, which rescaled the output on every block). For
        causal attention `k_stop = q_end` skips the key blocks right of the diagonal, and the mask is needed only
        on the blocks that cross it.

        **Backward.** `delta` comes first, from `out` and `grad_out` alone. The loop skips the query blocks that end
        before the key block starts (causal). `p` is recomputed with the saved LSE: one `exp`, no max and no sum. Each
        tile adds to three gradients; on a GPU, FlashAttention-2 gives each program one key block so `dK`, `dV` stay in
        registers, and `dQ` is accumulated with atomics (FlashAttention-3 on Hopper does the same with TMA and warp
        specialisation).

        **The usual mistakes, and why they are wrong**:
        - *No rescale*: `acc` or `l` not multiplied by $\alpha$ — right with one key block, wrong with two.
        - *Block max instead of running max*: every block normalised by its own max; the sums mix scales.
        - *LSE = m*: forgets $\log \ell$; the forward is right, the backward that uses it is not.
        - *Causal mask off by one* (`cols >= rows`): the diagonal masked, the first row all $-\infty$, NaN.
        - *Skipping one block too many* (`k_stop = q_start`): the diagonal tiles are never visited.
        - *Backward*: `delta` from `dP` instead of `dO·O`, the scale missing from `dQ` or `dK`, `P` taken as
          $e^{S}$ without subtracting the LSE, and an `autograd.Function` that saves the scores "to be faster".

        **Cost.** FLOPs: forward $4 S_q S_k D$ (half with causal), backward $2.5\times$ that (five matmuls per tile, one
        of them the recomputation). Memory: $O(S\,D)$ for the inputs, output and LSE, plus one $b_q \times b_k$ tile
        per program. HBM traffic of the forward: $Q$ once, $K$ and $V$ once per query block, so
        $S_q D + 2 S_k D \cdot \lceil S_q / b_q \rceil$ elements; larger query blocks mean less traffic, and the
        on-chip memory (SRAM) bounds the tile size, which is FlashAttention's whole analysis. In the memory figure
        above, the naive curve is the $S^2$ probability matrix; the tiled one is the inputs themselves ($S \cdot D$
        elements, larger than a $32 \times 32$ tile from $S = 32$ on), so it grows linearly.

        **In production.** PyTorch's `F.scaled_dot_product_attention` dispatches to a FlashAttention-2 kernel when
        the inputs allow it (`torch.nn.attention.sdpa_kernel(SDPBackend.FLASH_ATTENTION)` forces it), and returns the
        LSE internally for its backward exactly as you did. vLLM uses FlashAttention and FlashInfer kernels for
        prefill; decode (one query row) is a different problem — the KV cache is the bottleneck, and it is split
        along the keys instead (flash-decoding), whose partial results merge with the same $(m, \ell)$ rescaling you
        wrote, via their LSEs. Ring attention (context parallelism) merges across GPUs the same way. You will write
        the tiles as Triton kernels in `p03.flash_attention_fwd` and `p03.flash_attention_bwd`.
    """)
    lesson.mistakes()
    return lesson
