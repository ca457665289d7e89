"""Source of 00_Prerequisites/12_Attention_Intro.ipynb (build with `python -m llm_algo build p00.attention_intro`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p00.attention_intro",
        path="00_Prerequisites/12_Attention_Intro.ipynb",
        title_en="Attention from first principles",
        title_zh="从零理解注意力机制",
        difficulty="easy",
        device="cpu",
        minutes=45,
        prerequisites=["p00.numpy_einsum", "p00.optim_and_loss"],
    )
    lesson.title(
        intro=r"""
        Attention is how a token reads the tokens before it: every query scores every key, a softmax turns the
        scores into weights, and the output is the weighted average of the values. It is the one place where
        tokens of a sequence meet, and its cost grows with the square of the length: for Llama-3-8B (32 heads of
        dimension 128) at 8192 tokens, the score matrix of one head in one layer has $8192^2 = 67$ million
        entries, 128 MiB in bf16, and 4 GiB for the 32 heads of one layer. That is why FlashAttention never stores
        it, and why the mask (causal, padding) must be right: a wrong mask trains a model that reads the future or
        the padding, with no error anywhere.

        **You will implement** attention as a loop spec (one query, one key at a time), then vectorised over
        batch and heads with a boolean mask and a causal flag that also works for decoding with a KV cache, and
        the causal-plus-padding mask of a right-padded batch. **Graded against** `F.scaled_dot_product_attention`
        (float64 oracle, the builtin in the tested dtype as the baseline), masks built by an index rule, each
        sequence of a batch attended alone, and `gradcheck`.

        **本节要点**
        - 缩放点积注意力：`softmax(Q Kᵀ / sqrt(d)) V`，Q `(…, Tq, d)`、K `(…, Tk, d)`、V `(…, Tk, dv)`，输出 `(…, Tq, dv)`。
        - 除以 `sqrt(d)`：d 个方差为 1 的乘积之和方差为 d，不缩放时 softmax 饱和成近似 one-hot，梯度消失。
        - softmax 沿 key 维（最后一维）做，先减去行最大值；fp16/bf16 分数在 float32 中计算。
        - 布尔掩码 True 表示“可以看”；被屏蔽的分数设为 −inf 再做 softmax，权重恰好为 0。
        - 因果掩码：query i 只能看 j ≤ i；带 KV cache 解码时 Tq < Tk，query i 的位置是 Tk − Tq + i（右下对齐），而 SDPA 的 `is_causal` 是左上对齐。
        - 右侧 padding 的 batch：key j 必须满足 j < length[b]；正确的掩码让每个序列的结果与单独计算时完全相同。
        {易错点}
        """
    )
    lesson.md(r"""
        ## 1. The math, with shapes

        For one head: queries `q (Tq, d)`, keys `k (Tk, d)`, values `v (Tk, dv)` (in a transformer they are three
        linear projections of the hidden states; Llama-3-8B: $d = d_v = 128$). Query $i$ scores key $j$ by a dot
        product, the scores become weights by a softmax over the keys, and the output mixes the values:

        $$
        s_{ij} = \frac{q_i \cdot k_j}{\sqrt d}, \qquad
        a_{ij} = \frac{e^{s_{ij} - m_i}}{\sum_{j'} e^{s_{ij'} - m_i}},\; m_i = \max_{j} s_{ij}, \qquad
        o_i = \sum_j a_{ij} v_j .
        $$

        In matrices: `S = q @ k.T / sqrt(d)` `(Tq, Tk)`, `A = softmax(S, dim=-1)` `(Tq, Tk)` (each row sums to 1),
        `O = A @ v` `(Tq, dv)`. With batch and heads in front, `(B, H, T, d)`, the same three lines broadcast over
        the leading axes: `k.transpose(-2, -1)` instead of `k.T`.

        **Why $1/\sqrt d$** (Vaswani et al., 2017, *Attention Is All You Need*, section 3.2.1). If the components of
        $q$ and $k$ are independent with mean 0 and variance 1, $q \cdot k$ is a sum of $d$ products of variance 1,
        so its standard deviation is $\sqrt d$: about 11 for $d = 128$. Softmax of scores that far apart is nearly
        one-hot, and its gradient nearly zero. Dividing by $\sqrt d$ brings the scores back to unit scale.

        **Masks.** A boolean `mask` with `True` where query $i$ may read key $j$. Masked scores are set to $-\infty$
        before the softmax, so $e^{-\infty} = 0$: the key gets weight exactly 0 and the other weights still sum to
        1. (Multiplying the weights by the mask *after* the softmax leaves rows that no longer sum to 1.)

        - **Causal** (every decoder-only LLM): query $i$ reads keys $j \le i$. During decoding with a KV cache the
          $T_q$ new queries are the *last* $T_q$ positions of a sequence of $T_k$, so query $i$ sits at position
          $T_k - T_q + i$ and reads $j \le T_k - T_q + i$ ("bottom-right" alignment). PyTorch's
          `F.scaled_dot_product_attention(..., is_causal=True)` aligns top-left ($j \le i$) instead, which is only
          the same when $T_q = T_k$; PyTorch offers `torch.nn.attention.bias.causal_lower_right` for the other one.
        - **Padding.** A batch of sequences of different lengths is padded on the right to a common `T`. Keys at
          positions $j \ge$ `length[b]` are padding and must get weight 0, or every real token's output changes
          with the amount of padding. Queries at padded positions produce garbage that the loss ignores.
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt
        import torch
        import torch.nn.functional as F
    """)
    lesson.md(r"""
        ## 2. Exercise `attention_loops`: the specification

        One head, no batch: `q (Tq, d)`, `k (Tk, d)`, `v (Tk, dv)`, an optional boolean `mask (Tq, Tk)`. Write it with
        Python loops over queries and keys, computing each score, the row's max, the exponentials and the weighted
        sum of value rows yourself, so that every number of the formula above has a line. (Tensor arithmetic on
        a row or a scalar is fine; the softmax, `logsumexp` and attention builtins are forbidden.) Refuse with
        `ValueError`: `q` and `k` with different `d`, `k` and `v` with different `Tk`, a mask that is not boolean or
        not `(Tq, Tk)`, and a query whose mask row allows no key (its softmax would be 0/0). Return `q`'s dtype.
    """)
    lesson.exercise(
        "attention_loops",
        r'''
        def attention_loops(
            q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None
        ) -> torch.Tensor:
            """q: (Tq, d), k: (Tk, d), v: (Tk, dv), mask: (Tq, Tk) bool (True = may attend) or None -> (Tq, dv)"""
            # TODO: validate the shapes and the mask (see the list above)
            # TODO: for each query i: the scores of its allowed keys, their max, exp(score - max), the total,
            #       and the weighted sum of the value rows; store it as row i of the output
            ### BEGIN SOLUTION
            Tq, d = q.shape
            Tk, dv = v.shape
            if k.shape != (Tk, d):
                raise ValueError(f"k must be (Tk={Tk}, d={d}) to match v {tuple(v.shape)} and q {tuple(q.shape)}, got {tuple(k.shape)}")
            if mask is not None and (mask.dtype != torch.bool or mask.shape != (Tq, Tk)):
                raise ValueError(f"mask must be a ({Tq}, {Tk}) bool tensor, got {tuple(mask.shape)} {mask.dtype}")
            scale = 1.0 / math.sqrt(d)
            rows = []
            for i in range(Tq):
                allowed = [j for j in range(Tk) if mask is None or bool(mask[i, j])]
                if not allowed:
                    raise ValueError(f"query {i} may attend to no key: its softmax would be 0/0")
                scores = {j: (q[i] * k[j]).sum() * scale for j in allowed}  # s_ij, 0-d tensors
                row_max = max(scores.values()).detach()  # m_i: it cancels in the ratio, no gradient needed
                weights = {j: torch.exp(s - row_max) for j, s in scores.items()}
                total = sum(weights.values())
                rows.append(sum(weights[j] / total * v[j] for j in allowed))  # (dv,)
            return torch.stack(rows).to(q.dtype)  # (Tq, dv)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 3. Exercise `attention`: vectorised over batch and heads

        `attention(q, k, v, mask=None, is_causal=False)` for `q (..., Tq, d)`, `k (..., Tk, d)`, `v (..., Tk, dv)`
        with the same leading axes (batch, heads): three lines of section 1 plus the masks. `mask` is boolean and
        broadcastable to `(..., Tq, Tk)` (a padding mask `(B, 1, 1, Tk)` is common). `is_causal=True` applies the
        **bottom-right** causal rule $j \le T_k - T_q + i$ (it needs $T_q \le T_k$); both can be given, and then a key
        must pass both. Compute the scores and softmax in at least float32 and return `q`'s dtype. Refuse with
        `ValueError`: mismatched `d` or `Tk`, a non-boolean mask, and `is_causal` with $T_q > T_k$.

        `F.scaled_dot_product_attention`, `nn.MultiheadAttention`, the softmax builtins and `logsumexp` are forbidden;
        `@`, `torch.matmul`, `einsum`, `masked_fill`, `amax` and `exp` are fine. Every query row keeps at least one
        key in the checks (a fully masked row has no defined answer; here it may come out `nan`).
    """)
    lesson.exercise(
        "attention",
        r'''
        def attention(
            q: torch.Tensor,
            k: torch.Tensor,
            v: torch.Tensor,
            mask: torch.Tensor | None = None,
            is_causal: bool = False,
        ) -> torch.Tensor:
            """q: (..., Tq, d), k: (..., Tk, d), v: (..., Tk, dv); mask: bool, broadcastable to (..., Tq, Tk), True =
            may attend; is_causal: key j allowed for query i iff j <= Tk - Tq + i. Returns (..., Tq, dv), q's dtype."""
            # TODO: validate (see the list above)
            # TODO: scores = q k^T / sqrt(d) in >= float32                      (..., Tq, Tk)
            # TODO: masked scores -> -inf (the mask and/or the bottom-right causal rule)
            # TODO: softmax over the keys (subtract the row max), weights @ v, cast back
            ### BEGIN SOLUTION
            Tq, d = q.shape[-2:]
            Tk = k.shape[-2]
            if k.shape[-1] != d or v.shape[-2] != Tk:
                raise ValueError(f"need q (..., Tq, d), k (..., Tk, d), v (..., Tk, dv); got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
            if mask is not None and mask.dtype != torch.bool:
                raise ValueError(f"mask must be bool (True = may attend), got {mask.dtype}")
            if is_causal and Tq > Tk:
                raise ValueError(f"is_causal needs Tq <= Tk (queries are the last Tq positions), got Tq={Tq}, Tk={Tk}")
            compute = torch.promote_types(q.dtype, torch.float32)
            scores = q.to(compute) @ k.to(compute).transpose(-2, -1) / math.sqrt(d)  # (..., Tq, Tk)
            if is_causal:
                causal = torch.ones(Tq, Tk, dtype=torch.bool, device=q.device).tril(diagonal=Tk - Tq)  # (Tq, Tk)
                scores = scores.masked_fill(~causal, float("-inf"))
            if mask is not None:
                scores = scores.masked_fill(~mask, float("-inf"))
            weights = (scores - scores.amax(dim=-1, keepdim=True)).exp()  # (..., Tq, Tk)
            weights = weights / weights.sum(dim=-1, keepdim=True)
            return (weights @ v.to(compute)).to(q.dtype)  # (..., Tq, dv)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 4. Exercise `padded_causal_mask`

        A batch of `B` sequences with `lengths (B,)` (int64, each in `[1, T]`), right-padded to `T` tokens. Return
        the boolean mask `(B, 1, T, T)` for causal attention that ignores padding keys: entry `[b, 0, i, j]` is
        `True` iff $j \le i$ and $j <$ `lengths[b]`. The axis of size 1 broadcasts over the heads. Refuse lengths
        outside `[1, T]`, or `lengths` that is not 1-D, with `ValueError`. Build it with comparisons of index
        vectors (`torch.arange`) and broadcasting: no Python loop over the batch.

        With this mask, the outputs at every real position of every sequence are exactly what the sequence
        would get alone, without padding; that is what the checks test, through PyTorch's attention.
    """)
    lesson.exercise(
        "padded_causal_mask",
        r'''
        def padded_causal_mask(lengths: torch.Tensor, T: int) -> torch.Tensor:
            """lengths: (B,) int64 in [1, T] -> (B, 1, T, T) bool, True where query i may read key j"""
            # TODO: validate lengths
            # TODO: causal part (T, T): key index <= query index
            # TODO: padding part (B, T): key index < length; combine both with broadcasting
            ### BEGIN SOLUTION
            if lengths.dim() != 1 or lengths.numel() == 0:
                raise ValueError(f"lengths must be a non-empty 1-D tensor (B,), got shape {tuple(lengths.shape)}")
            if int(lengths.min()) < 1 or int(lengths.max()) > T:
                raise ValueError(f"every length must lie in [1, {T}], got {lengths.tolist()}")
            positions = torch.arange(T, device=lengths.device)  # (T,)
            causal = positions[None, :] <= positions[:, None]  # (T, T): [i, j] = j <= i
            real_key = positions[None, :] < lengths[:, None]  # (B, T): [b, j] = j < length_b
            return causal[None, None, :, :] & real_key[:, None, None, :]  # (B, 1, T, T)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### Pictures: the mask, the weights, and why we scale

        Left: the mask of a batch with lengths 6 and 4 (the second sequence padded by 2), one panel per sequence.
        Middle: your attention weights for the second sequence; the padding keys (columns 4 and 5) get weight 0,
        while the padded queries (rows 4 and 5) still produce rows that the loss will ignore. Right: the largest
        softmax weight of a random query against 256 random keys, as $d$ grows: without the $1/\sqrt d$ the softmax
        becomes one-hot. (Your functions when they pass, PyTorch's otherwise.)
    """)
    lesson.code(r"""
        try:
            padded_causal_mask(torch.tensor([2]), 2)
            make_mask, who_mask = padded_causal_mask, "yours"
        except NotImplementedError:
            def make_mask(lengths, T):
                i = torch.arange(T)
                return (i[None, :] <= i[:, None])[None, None] & (i[None, :] < lengths[:, None])[:, None, None]
            who_mask = "reference"
        try:
            attention(torch.randn(1, 2), torch.randn(1, 2), torch.randn(1, 2))
            attend, who_attn = attention, "yours"
        except NotImplementedError:
            attend, who_attn = (lambda q, k, v, mask=None: F.scaled_dot_product_attention(q, k, v, attn_mask=mask)), "SDPA"

        torch.manual_seed(0)
        T, d = 6, 16
        lengths = torch.tensor([6, 4])
        mask = make_mask(lengths, T)  # (2, 1, 6, 6)
        q, k, v = torch.randn(3, 2, 1, T, d).unbind(0)
        scores = (q @ k.transpose(-2, -1) / math.sqrt(d)).masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)  # what attention computes inside, for the picture
        out = attend(q, k, v, mask=mask)
        print(f"attention output {tuple(out.shape)} ({who_attn}); mask {tuple(mask.shape)} ({who_mask})")

        dims = [4, 16, 64, 128, 256, 1024]
        peak_scaled, peak_raw = [], []
        for dim in dims:
            qd, kd = torch.randn(200, 1, dim), torch.randn(200, 256, dim)
            raw = (qd @ kd.transpose(-2, -1)).squeeze(1)  # (200, 256)
            peak_raw.append(torch.softmax(raw, -1).amax(-1).mean().item())
            peak_scaled.append(torch.softmax(raw / math.sqrt(dim), -1).amax(-1).mean().item())

        fig, axes = plt.subplots(1, 4, figsize=(14, 3.2))
        for b in range(2):
            axes[b].imshow(mask[b, 0], cmap="Greens")
            axes[b].set_title(f"mask, sequence {b} (length {int(lengths[b])})")
            axes[b].set_xlabel("key j"); axes[b].set_ylabel("query i")
        image = axes[2].imshow(weights[1, 0], cmap="viridis", vmin=0, vmax=1)
        axes[2].set_title("weights, sequence 1"); axes[2].set_xlabel("key j"); axes[2].set_ylabel("query i")
        fig.colorbar(image, ax=axes[2], fraction=0.046)
        axes[3].semilogx(dims, peak_raw, marker="o", label="q·k (no scaling)")
        axes[3].semilogx(dims, peak_scaled, marker="s", label="q·k / sqrt(d)")
        axes[3].set_xlabel("head dimension d"); axes[3].set_ylabel("mean max weight (256 keys)")
        axes[3].set_title("softmax saturation"); axes[3].legend(fontsize=8)
        plt.tight_layout(); plt.show()
    """)
    lesson.stop()
    lesson.md(r"""
        ## 5. Reading the solutions

        **`attention_loops`.** Each line is one symbol of the formula: `(q[i] * k[j]).sum() * scale` is $s_{ij}$,
        `row_max` is $m_i$ (detached: the max only shifts the exponent and cancels in the ratio, so it needs no
        gradient), the weights are $e^{s_{ij} - m_i}$ and `total` is the denominator. Masked keys are simply never
        visited, which is what $-\infty$ does in the vectorised form. It costs $T_q T_k (2d + 2 d_v)$ FLOPs, like the
        vectorised form, but each one pays Python's overhead: use it as the specification, never for speed.

        **`attention`.** `transpose(-2, -1)` swaps only the last two axes, so the batch and head axes broadcast.
        `tril(diagonal=Tk - Tq)` moves the causal diagonal to the bottom-right corner: with $T_q = 1$ (one decoding
        step) the single query reads every cached key. `masked_fill(~mask, -inf)` before the softmax, and the max
        subtraction, keep it exact and finite: without the max, large scores overflow.

        **`padded_causal_mask`.** Two comparisons of index vectors and one `&`, broadcast to `(B, 1, T, T)`:
        $O(BT^2)$ booleans, no loop. Keep the head axis: a `(B, T, T)` mask broadcast against `(B, H, T, T)` scores
        lines the batch up with the heads.
    """)
    lesson.mistakes()
    lesson.md(r"""
        **What production code does.** `F.scaled_dot_product_attention` picks FlashAttention, memory-efficient or
        the plain math kernel; the first two never store the $T_q \times T_k$ scores, computing the softmax online
        block by block ([p03.flash_attention_fwd](../03_Triton_Kernels/10_Flash_Attention_Fwd.ipynb)). Hugging Face
        builds a 4-D mask like yours and passes it to SDPA; vLLM does not pad at all, it packs sequences end to end
        and gives the kernel the cumulative lengths (`cu_seqlens`), so no FLOPs are spent on padding.

        **Where this is used next.** [p02.attention_mha_gqa](../02_PyTorch_Algorithms/05_Attention_MHA_GQA.ipynb)
        adds the projections, multiple heads and grouped-query attention around this function, with RoPE from
        [p02.rope](../02_PyTorch_Algorithms/04_RoPE.ipynb).
    """)
    return lesson
