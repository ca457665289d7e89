"""Source of 02_PyTorch_Algorithms/05_Attention_MHA_GQA.ipynb (build with `python -m llm_algo build p02.attention_mha_gqa`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p02.attention_mha_gqa",
        path="02_PyTorch_Algorithms/05_Attention_MHA_GQA.ipynb",
        title_en="Attention: MHA, MQA and GQA with masks and a KV cache",
        title_zh="注意力机制：MHA、MQA、GQA，掩码与 KV 缓存",
        difficulty="medium",
        device="cpu",
        minutes=75,
        prerequisites=["p00.numpy_einsum", "p00.tensor_layout", "p00.attention_intro", "p02.rope"],
    )
    lesson.title(
        intro=r"""
        Llama-2-70B has 80 layers, 64 query heads and head size 128. As plain multi-head attention it would store
        2.5 MiB of keys and values per generated token in fp16; it stores 320 KiB. The difference is one number in
        the config, `num_key_value_heads`: 8 (grouped-query attention) instead of 64 (multi-head attention), a
        choice Llama-3-70B kept. At a 32k-token context and a batch of 8, that is
        640 GiB against 80 GiB of KV cache. Grouped-query attention is why a 70B model can serve long contexts on one
        node at all.

        **You will implement** `repeat_kv` (the head grouping), one `attention` function that covers multi-head,
        multi-query and grouped-query attention with causal and padding masks and a query length different from the
        key length, and a preallocated `KVCache` with one length per sequence (a ragged batch), which makes
        token-by-token decoding give the same numbers as recomputing each sequence in full. **Graded against**
        `torch.nn.functional.scaled_dot_product_attention` (SDPA) in float64 with explicit boolean masks (the oracle)
        and in the dtype under test (the baseline), `torch.repeat_interleave`, float64 autograd through SDPA for the
        gradients, and, for the cache, a plain list of tensors per sequence under random ragged workloads.
    """,
    )
    lesson.md(r"""
        ## 本节要点

        - **问题**：KV cache 每 token 大小为 $2 \cdot L \cdot H_{kv} \cdot D$ 个元素；Llama-2-70B 用 GQA（$H_{kv}=8$ 而非 64）把每 token 的 KV cache 从 2.5 MiB 降到 320 KiB。
        - **形状**：$Q$ 为 `(B, H, S_q, D)`，$K, V$ 为 `(B, H_kv, S_k, D)`；`repeat_kv` 把每个 KV 头连续复制 $H/H_{kv}$ 次，query 头 $h$ 使用 KV 头 $\lfloor h/(H/H_{kv})\rfloor$（`repeat_interleave` 顺序，不是 `.repeat` 的平铺）。MHA 与 MQA 是 $H_{kv}=H$ 和 $H_{kv}=1$ 的特例。
        - **公式**：$\operatorname{softmax}(QK^\top/\sqrt D + \text{mask})V$；scores 和 softmax 在 float32 中计算。
        - **mask**：$S_q \ne S_k$ 时 causal mask 是右下对齐的：query $i$ 能看到 key $j \le i + S_k - S_q$；padding mask 作用在 key 轴上；没有可见 key 的行输出 0，而不是 NaN。
        - **KV cache**：`torch.cat` 每步复制整个缓存（$n$ 步共 $\approx n^2/2$ 个位置）；改为首次 `update` 时预分配 `(B, H_kv, max_len, D)`，原地写入。每条序列有自己的长度 `lengths[b]`（ragged batch），新块写在各自的位置，超过 `max_len` 时在写入前报错；返回有效前缀 `keys[:, :, :length]`（视图，不复制）和 `key_mask()`：$j < \text{lengths}[b]$。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. The problem: attention reads the whole past at every step

        A decoder generates one token at a time. To produce token $t$, every layer compares the new token's
        **query** with the **keys** of all $t$ earlier tokens and averages their **values**. Recomputing those keys
        and values at every step would cost $O(t)$ matrix multiplies per step, so every inference engine keeps
        them: the **KV cache** (KV 缓存). Its size per token is

        $$
        \text{bytes per token} = 2 \times n_{\text{layers}} \times H_{kv} \times D \times \text{bytes per element},
        $$

        the 2 counting keys and values, $H_{kv}$ the number of key/value heads and $D$ the head size.

        | model | layers | $H_q$ | $H_{kv}$ | $D$ | KV cache per token (fp16) |
        | --- | --- | --- | --- | --- | --- |
        | Llama-2-7B (MHA) | 32 | 32 | 32 | 128 | $2 \cdot 32 \cdot 32 \cdot 128 \cdot 2$ B = 512 KiB |
        | Llama-3-8B (GQA) | 32 | 32 | 8 | 128 | 128 KiB |
        | Llama-2-70B / Llama-3-70B (GQA) | 80 | 64 | 8 | 128 | 320 KiB |
        | the same 70B with MHA | 80 | 64 | 64 | 128 | 2560 KiB |
        | Falcon-7B (MQA) | 32 | 71 | 1 | 64 | 8 KiB |

        During decoding each step reads the whole cache once and does one multiply-add (2 FLOPs) per cached element
        and query head that reads it ($q \cdot k$ for keys, $p\,v$ for values): about 1 FLOP per fp16 byte for MHA,
        $g$ for a group of $g$ query heads. Arithmetic intensity is tiny, so decode speed is set by how many bytes of
        cache a GPU can read per second. Fewer KV heads means fewer bytes, a bigger batch in the same memory, and faster
        steps. That is the whole motivation for MQA (Shazeer, 2019, *Fast Transformer Decoding: One Write-Head is
        All You Need*) and GQA (Ainslie et al., 2023, *GQA: Training Generalized Multi-Query Transformer Models from
        Multi-Head Checkpoints*).

        ## 2. The math, with shapes

        One layer's attention takes queries, keys and values already projected and split into heads:

        - `q`: $(B, H_q, S_q, D)$, `k`, `v`: $(B, H_{kv}, S_k, D)$, with $H_q = g \cdot H_{kv}$ for an integer group
          size $g$ (`n_rep` in Hugging Face's code).
        - **MHA**: $g = 1$. **MQA**: $H_{kv} = 1$, $g = H_q$. **GQA**: anything in between. The group size depends on
          the model, not the family: Llama-3-8B has 32 query heads over 8 KV heads ($g = 4$), Llama-3-70B 64 over 8
          ($g = 8$) (`num_attention_heads` and `num_key_value_heads` in the `config.json` of
          `meta-llama/Meta-Llama-3-8B` and `meta-llama/Meta-Llama-3-70B` on the Hugging Face Hub).

        Query head $h$ uses key/value head $\lfloor h / g \rfloor$: consecutive query heads share a KV head. For each
        batch row $b$ and query head $h$,

        $$
        S = \frac{Q_{b,h} K_{b,\lfloor h/g \rfloor}^\top}{\sqrt{D}} \in \mathbb{R}^{S_q \times S_k}, \qquad
        P = \operatorname{softmax}_{\text{row}}\!\big(S + M\big), \qquad
        O_{b,h} = P\, V_{b,\lfloor h/g \rfloor} \in \mathbb{R}^{S_q \times D},
        $$

        with $M_{ij} = 0$ where query $i$ may see key $j$ and $-\infty$ where it may not. The output is
        $(B, H_q, S_q, D)$ in the input dtype.

        **Masks.** Two reasons to hide a key:

        1. *Causal*: a token may not see the future. With a KV cache, the $S_q$ new queries are the **last** $S_q$
           positions of the sequence: query $i$ sits at absolute position $S_k - S_q + i$ and may see keys
           $j \le S_k - S_q + i$. This is a lower triangle aligned to the **bottom-right** corner of the
           $S_q \times S_k$ score matrix. During decoding ($S_q = 1$) the single query sees every key.
        2. *Padding*: batched prompts of different lengths are padded to one length. `key_padding_mask`, $(B, S_k)$
           bool with `True` for a real token, hides the padding keys from every query.

        **A trap in SDPA.** `F.scaled_dot_product_attention(..., is_causal=True)` builds `tril(ones(S_q, S_k))`, a
        triangle aligned to the **top-left** corner: query $i$ sees keys $j \le i$. For $S_q = S_k$ the two
        alignments agree. For $S_q = 1$ (a decoding step) top-left lets the new token see only key 0, which is
        silently wrong. FlashAttention 2.1+ and this lesson use bottom-right; with SDPA you pass an explicit mask.
        The picture below shows both.

        **A query row with no visible key.** With left padding and a causal mask, a padding query at position 0
        may see only key 0, which is padding: every entry of its row of $M$ is $-\infty$ and the softmax is
        $0/0 = $ NaN. Such a row's output is never used, but a NaN in it can still leak, e.g. into a sum, a
        gradient, or a loss with a forgotten mask. This lesson's rule, the same as FlashAttention's and recent SDPA's:
        **a query that may see no key outputs zeros**, and its gradients are zeros, never NaN.

        **Precision.** In fp16 and bf16 the scores, the softmax and its normaliser are computed in float32 and the
        output is cast back. bf16 keeps 8 significant bits, so a softmax in bf16 rounds every probability to about
        2 decimal digits, and a sum of thousands of them drifts.
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt
        import torch
        import torch.nn.functional as F
    """)
    lesson.code(r"""
        def causal_picture(num_queries, num_keys, bottom_right):
            offset = num_keys - num_queries if bottom_right else 0
            return torch.ones(num_queries, num_keys).tril(diagonal=offset)

        fig, axes = plt.subplots(1, 3, figsize=(9, 2.6))
        cases = [(6, 6, True, "S_q = S_k = 6 (both agree)"), (2, 6, True, "S_q = 2, S_k = 6, bottom-right"),
                 (2, 6, False, "S_q = 2, S_k = 6, top-left (SDPA)")]
        for ax, (sq, sk, bottom_right, title) in zip(axes, cases):
            ax.imshow(causal_picture(sq, sk, bottom_right), cmap="Blues", vmin=0, vmax=1.3)
            ax.set_title(title, fontsize=9); ax.set_xlabel("key position j"); ax.set_ylabel("query i")
            ax.set_xticks(range(sk)); ax.set_yticks(range(sq))
        fig.suptitle("dark = query i may see key j", fontsize=10)
        fig.tight_layout()
        plt.show()
    """)
    lesson.md(r"""
        ## 3. Exercise `repeat_kv`: from $H_{kv}$ heads to $H_q$ heads

        The simplest way to run GQA is to copy each KV head $g$ times and then do ordinary multi-head attention.
        Output head $h$ must be input head $\lfloor h/g \rfloor$: heads $[0, 0, 1, 1, 2, 2]$ for $H_{kv} = 3$,
        $g = 2$, never $[0, 1, 2, 0, 1, 2]$. The second order (tiling) has the right shape, runs, and pairs every
        query head with the wrong key head. A checkpoint trained with one grouping gives garbage with the other.

        Hugging Face's `repeat_kv` does it with `expand` (a view, no copy) and one `reshape` (one copy). Shapes:
        $(B, H_{kv}, S, D) \to (B, H_{kv}, 1, S, D) \to (B, H_{kv}, g, S, D) \to (B, H_{kv} g, S, D)$.
    """)
    lesson.exercise(
        "repeat_kv",
        r'''
        def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
            """Repeat each key/value head n_rep times, consecutively.

            x:       (B, H_kv, S, D) any dtype
            returns  (B, H_kv * n_rep, S, D), same dtype; output head h is input head h // n_rep
            """
            # TODO: n_rep == 1 needs no copy: return x
            # TODO: insert a group axis after the head axis, expand it to n_rep, merge it with the head axis
            ### BEGIN SOLUTION
            if n_rep == 1:
                return x
            B, H_kv, S, D = x.shape
            expanded = x[:, :, None, :, :].expand(B, H_kv, n_rep, S, D)  # (B, H_kv, n_rep, S, D), a view
            return expanded.reshape(B, H_kv * n_rep, S, D)  # (B, H_q, S, D): head h is h // n_rep
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 4. Exercise `attention`: one function for MHA, MQA and GQA

        Write the reference attention every later lesson builds on (the Llama block of the next lessons calls
        it). Steps, with shapes:

        1. `g = H_q // H_kv` (refuse an $H_q$ that is not a multiple of $H_{kv}$ with a clear error); repeat `k`, `v`
           to $(B, H_q, S_k, D)$.
        2. Scores in float32 (float64 stays float64): $(B, H_q, S_q, S_k)$, times $1/\sqrt{D}$.
        3. The allowed-key mask, broadcastable to $(B, H_q, S_q, S_k)$: bottom-right causal
           `tril(ones(S_q, S_k), diagonal=S_k - S_q)` and/or `key_padding_mask[:, None, None, :]`.
        4. Softmax over keys with masked scores at $-\infty$, and rows with no visible key set to **zero**, with no NaN
           in the forward or the backward pass. One way: subtract the row max where it is finite, exponentiate, and
           divide by the row sum clamped away from 0 (a row of all-masked keys sums to 0 and gives $0/\epsilon = 0$).
        5. $P V$: $(B, H_q, S_q, D)$, cast back to `q`'s dtype.

        Hint on step 4: `masked_fill(~allowed, -inf)` followed by `torch.softmax` is correct for every row that has
        a visible key; it is the all-masked rows where it returns NaN.
    """)
    lesson.exercise(
        "attention",
        r'''
        def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                      key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
            """Scaled dot-product attention for MHA, MQA and GQA.

            q:                 (B, H_q, S_q, D) float16 / bfloat16 / float32 / float64
            k, v:              (B, H_kv, S_k, D) same dtype; H_q must be a multiple of H_kv
            causal:            query i sits at absolute position S_k - S_q + i and sees keys j <= S_k - S_q + i
                               (bottom-right aligned, what a KV cache needs)
            key_padding_mask:  (B, S_k) bool, True = a real token that may be attended to; None = all real
            returns            (B, H_q, S_q, D) in q's dtype; scale 1/sqrt(D); softmax in float32 (float64 stays);
                               a query row that may see no key at all returns zeros (and zero gradients, no NaN)
            """
            B, H_q, S_q, D = q.shape
            H_kv, S_k = k.shape[1], k.shape[2]
            # TODO: refuse H_q that is not a multiple of H_kv (ValueError with both numbers)
            # TODO: repeat the KV heads to H_q heads
            # TODO: scores in at least float32, scaled by 1 / sqrt(D): (B, H_q, S_q, S_k)
            # TODO: the allowed mask: bottom-right causal triangle and/or the padding mask, broadcast to the scores
            # TODO: softmax over keys; rows with no allowed key must come out as zeros, with no NaN anywhere
            # TODO: probabilities @ values, cast back to q's dtype: (B, H_q, S_q, D)
            ### BEGIN SOLUTION
            if H_q % H_kv:
                raise ValueError(f"the number of query heads ({H_q}) must be a multiple of the KV heads ({H_kv})")
            compute_dtype = torch.promote_types(q.dtype, torch.float32)
            k = repeat_kv(k, H_q // H_kv).to(compute_dtype)  # (B, H_q, S_k, D)
            v = repeat_kv(v, H_q // H_kv).to(compute_dtype)  # (B, H_q, S_k, D)
            scores = q.to(compute_dtype) @ k.transpose(-2, -1) / math.sqrt(D)  # (B, H_q, S_q, S_k)

            allowed = torch.ones(S_q, S_k, dtype=torch.bool, device=q.device)  # (S_q, S_k)
            if causal:
                allowed = allowed.tril(diagonal=S_k - S_q)  # query i is at position S_k - S_q + i
            allowed = allowed[None, None]  # (1, 1, S_q, S_k)
            if key_padding_mask is not None:
                allowed = allowed & key_padding_mask[:, None, None, :].bool()  # (B, 1, S_q, S_k)

            scores = scores.masked_fill(~allowed, float("-inf"))
            row_max = scores.amax(dim=-1, keepdim=True)  # (B, H_q, S_q, 1), -inf for an all-masked row
            row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
            weights = torch.exp(scores - row_max)  # masked entries are exp(-inf) = 0
            denominator = weights.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(compute_dtype).tiny)
            probs = weights / denominator  # an all-masked row: 0 / tiny = 0
            return (probs @ v).to(q.dtype)  # (B, H_q, S_q, D)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        The checks compare with SDPA in float64 (and in your dtype, for the tolerance) using explicit boolean masks
        that they build themselves, for MHA, GQA and MQA, $S_q \ne S_k$, left and right padding, one-token decoding
        steps, fp16 and bf16 inputs, and gradients. A query row with nothing to see must return exact zeros.
    """)
    lesson.md(r"""
        ## 5. Exercise `KVCache`: decoding one token at a time

        Prefill (预填充) runs the prompt through the model in one call: $S_q = S_k = $ prompt length. Each decoding
        step then feeds **one** new token: its query, key and value are $(B, H, 1, D)$. The layer appends the new key
        and value to its cache and attends from the one query to every cached position, with the bottom-right causal
        mask, which for $S_q = 1$ lets it see everything. If the cache is right, the step's output equals row $t$ of
        a full causal attention over all $t + 1$ tokens, to rounding.

        **Why not `torch.cat`?** The obvious cache appends with `torch.cat((keys, k), dim=2)`. That allocates a new
        tensor and copies the whole cache at every step: after $n$ steps it has written $\sum_t t \approx n^2/2$
        positions instead of $n$. For Llama-3-8B (128 KiB per token over all layers) a 4,096-token generation copies
        $4096^2/2 \times 128$ KiB $= 1$ TiB, against 512 MiB of new keys and values; and the cache changes shape at
        every step, which rules out CUDA graphs and a `torch.compile`d decode step. Production caches
        **preallocate** $(B, H_{kv}, L_{max}, D)$ once and write each step's few positions in place: Hugging Face's
        `StaticCache` (it allocates on the first update, when the batch, heads, dtype and device are known, then
        `index_copy_`s the new positions in), TensorRT-LLM's KV pools, vLLM's paged blocks.

        **Ragged batches.** Prompts in one batch have different lengths, and a server keeps every sequence at its
        own length: row $b$ holds `lengths[b]` positions, and its next chunk is written at columns `lengths[b]`,
        `lengths[b] + 1`, ... of its own row. A chunk is $(B, H_{kv}, S_{new}, D)$ with row $b$'s first
        `num_new[b]` columns real (the rest is padding and is never stored): a right-padded prefill passes the prompt
        lengths, a decode step passes ones, a paused or finished sequence passes 0. Attention then reads the
        **valid prefix** `keys[:, :, :length]`, `length = max(lengths)`, a view of the buffer (no copy), with a key
        mask that hides the columns row $b$ has not written (they hold zeros or stale values):

        $$
        \text{key\_mask}[b, j] = \big(j < \text{lengths}[b]\big), \qquad
        \text{key\_mask} \in \{0, 1\}^{B \times \text{length}} .
        $$

        A decode step of a ragged batch is then `attention(q, k_all, v_all, key_padding_mask=cache.key_mask())`. (A
        chunk of several tokens on rows of *different* lengths also needs a causal mask per row, since the
        bottom-right rule assumes one length for the batch: lesson `p02.kv_cache` builds it.)

        **Write the cache of one layer.** `KVCache(max_len)` reserves `max_len` positions per sequence (4096 by
        default, plenty for this course's tiny models; an engine sizes it from the model's context and its memory
        budget). `update(k, v, num_new=None)`:

        1. Validate: `k` $(B, H_{kv}, S_{new}, D_k)$ and `v` $(B, H_{kv}, S_{new}, D_v)$, 4-D, with the same first
           three sizes ($D_v \ne D_k$ is allowed: the MLA lesson caches a 512-wide latent next to a 64-wide RoPE
           key); after the first update, the batch, heads, head sizes and dtypes of the buffers; `num_new` $(B,)$
           with values in $[0, S_{new}]$ (`None` means $S_{new}$ for every row). Refuse a write that would take any
           row past `max_len` **before writing anything**, with a `ValueError` that names the row.
        2. On the first update, allocate `keys` $(B, H_{kv}, L_{max}, D_k)$ and `values` $(B, H_{kv}, L_{max}, D_v)$
           (zeros, in `k`'s and `v`'s dtype and device) and `lengths` $(B,)$ int64 zeros.
        3. Write row $b$'s first `num_new[b]` columns at positions `lengths[b]`, ...; advance `lengths`; set
           `length` to the largest.
        4. Return the views `keys[:, :, :length]` and `values[:, :, :length]`.

        `key_mask()` returns the $(B, \text{length})$ mask above. The cache stores $H_{kv}$ heads, not $H_q$: repeat
        after the cache, never before, or GQA saves nothing. Called with `num_new=None` every time, the cache returns
        exactly what a `torch.cat` cache would (the Llama block, the tiny Llama and MLA of the next lessons use it
        that way), for a fraction of the memory traffic.
    """)
    lesson.exercise(
        "KVCache",
        r'''
        class KVCache:
            """Keys and values of one attention layer, preallocated, with one length per sequence.

            KVCache(max_len):  room for max_len positions per sequence; the buffers are allocated by the first update
            update(k, v, num_new=None):
                k (B, H_kv, S_new, D_k), v (B, H_kv, S_new, D_v); row b's first num_new[b] columns are real
                (num_new: (B,) ints in [0, S_new]; None = S_new for every row), written at positions lengths[b], ...
                returns (k_all, v_all): the views keys[:, :, :length], values[:, :, :length]
            lengths:           (B,) int64, each sequence's cached positions; length: int, their maximum (0 if empty)
            key_mask():        (B, length) bool, True where row b holds a written position
            """

            def __init__(self, max_len: int = 4096):
                if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 1:
                    raise ValueError(f"max_len must be an int >= 1, got {max_len!r}")
                self.max_len = max_len
                self.keys: torch.Tensor | None = None     # (B, H_kv, max_len, D_k) after the first update
                self.values: torch.Tensor | None = None   # (B, H_kv, max_len, D_v)
                self.lengths: torch.Tensor | None = None  # (B,) int64
                self.length = 0

            def update(self, k: torch.Tensor, v: torch.Tensor, num_new=None) -> tuple[torch.Tensor, torch.Tensor]:
                # TODO: refuse (ValueError) k, v that are not 4-D with the same (B, H_kv, S_new), and, after the first
                #       update, a batch, head count, head size or dtype other than the buffers'
                # TODO: on the first update allocate keys and values (zeros, max_len positions) and lengths (B,) zeros
                # TODO: num_new None means S_new for every row; refuse a shape other than (B,), values outside [0, S_new]
                # TODO: refuse a write that takes a row past max_len, before writing anything (name the row)
                # TODO: write row b's first num_new[b] columns at positions lengths[b], ...; advance lengths and length
                # TODO: return the valid prefix of both buffers (views, not copies)
                ### BEGIN SOLUTION
                if k.dim() != 4 or v.dim() != 4 or k.shape[:3] != v.shape[:3]:
                    raise ValueError(f"k and v must be (B, H_kv, S_new, D) with the same B, H_kv and S_new, got "
                                     f"{tuple(k.shape)} and {tuple(v.shape)}")
                B, H_kv, S_new = k.shape[:3]
                if self.keys is None:
                    self.keys = k.new_zeros(B, H_kv, self.max_len, k.shape[3])  # (B, H_kv, L_max, D_k)
                    self.values = v.new_zeros(B, H_kv, self.max_len, v.shape[3])  # (B, H_kv, L_max, D_v)
                    self.lengths = torch.zeros(B, dtype=torch.long, device=k.device)
                given = (B, H_kv, k.shape[3], v.shape[3], k.dtype, v.dtype)
                held = (*self.keys.shape[:2], self.keys.shape[3], self.values.shape[3], self.keys.dtype,
                        self.values.dtype)
                if given != held:
                    raise ValueError(f"this cache holds (B, H_kv, D_k, D_v, dtypes) = {held}, got {given}")
                if num_new is None:
                    num_new = [S_new] * B
                num_new = torch.as_tensor(num_new).long().to(self.lengths.device)
                if num_new.shape != (B,) or bool((num_new < 0).any()) or bool((num_new > S_new).any()):
                    raise ValueError(f"num_new must be (B={B},) with values in [0, S_new={S_new}], got {num_new.tolist()}")
                new_lengths = self.lengths + num_new  # (B,)
                if bool((new_lengths > self.max_len).any()):
                    row = int((new_lengths > self.max_len).nonzero()[0])
                    raise ValueError(f"row {row} would hold {int(new_lengths[row])} positions, more than max_len = "
                                     f"{self.max_len}; nothing was written")
                for row in range(B):
                    start, count = int(self.lengths[row]), int(num_new[row])
                    self.keys[row, :, start : start + count] = k[row, :, :count]  # (H_kv, count, D_k), in place
                    self.values[row, :, start : start + count] = v[row, :, :count]
                self.lengths = new_lengths
                self.length = int(new_lengths.max())
                return self.keys[:, :, : self.length], self.values[:, :, : self.length]  # views (B, H_kv, length, D)
                ### END SOLUTION

            def key_mask(self) -> torch.Tensor:
                """(B, length) bool, after the first update: column j of row b is real when j < lengths[b]."""
                # TODO: compare each column index with each row's length
                ### BEGIN SOLUTION
                columns = torch.arange(self.length, device=self.lengths.device)  # (length,)
                return columns[None, :] < self.lengths[:, None]  # (B, length)
                ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        The checks feed uniform chunks (prefill, single tokens, a chunk of three) and compare with the exact
        concatenation and with full causal attention; run random ragged workloads (rows of different lengths, rows
        that pause, GQA and MLA-like head sizes, float32, bfloat16, float64) against a plain list of tensors per
        sequence; decode a ragged batch and compare every row with attention over that row alone; check that the
        buffers are allocated once and that the returned tensors are views of them; and check that every bad update
        is refused before it writes anything.
    """)
    lesson.md(r"""
        ### A ragged batch through your cache, and what `torch.cat` would have copied

        The cell below prefills three prompts of lengths 7, 3 and 5 (right-padded to 7) and decodes 40 tokens, the
        second sequence pausing for ten steps, through your `KVCache` and your `attention` with the cache's key mask.
        Each row is compared with causal attention over that row alone. The plot counts the key/value positions
        written to memory per layer: your cache writes the new ones only; a `torch.cat` cache rewrites the whole
        (padded) cache at every step.
    """)
    lesson.code(r"""
        torch.manual_seed(0)
        prompt_lengths, steps, num_heads, num_kv_heads, head_dim = [7, 3, 5], 40, 4, 2, 16
        totals = [n + steps for n in prompt_lengths]
        qs = [torch.randn(num_heads, n, head_dim) for n in totals]  # each sequence's queries (H, n, D)
        ks = [torch.randn(num_kv_heads, n, head_dim) for n in totals]  # keys and values (H_kv, n, D)
        vs = [torch.randn(num_kv_heads, n, head_dim) for n in totals]

        def column(tensors, positions, active):  # (3, heads, 1, D): each row's next column (ignored when paused)
            return torch.stack([t[:, p : p + 1] if a else t[:, :1] for t, p, a in zip(tensors, positions, active)])

        try:
            cache, worst, written, copied = KVCache(max_len=64), 0.0, [], []
            T = max(prompt_lengths)
            padded = lambda tensors: torch.stack([F.pad(t[:, :n], (0, 0, 0, T - n)) for t, n in zip(tensors, prompt_lengths)])
            cache.update(padded(ks), padded(vs), num_new=torch.tensor(prompt_lengths))  # right-padded prefill
            positions = list(prompt_lengths)
            for step in range(steps):
                active = [not (row == 1 and 10 <= step < 20) for row in range(3)]  # row 1 pauses for ten steps
                k_all, v_all = cache.update(column(ks, positions, active), column(vs, positions, active),
                                            num_new=torch.tensor(active).long())
                out = attention(column(qs, positions, active), k_all, v_all, causal=True,
                                key_padding_mask=cache.key_mask())  # (3, H, 1, D)
                for b in range(3):
                    if active[b]:
                        n = positions[b] + 1
                        alone = attention(qs[b][None, :, :n], ks[b][None, :, :n], vs[b][None, :, :n], causal=True)
                        worst = max(worst, (out[b, :, 0] - alone[0, :, -1]).abs().max().item())
                        positions[b] = n
                written.append(sum(positions))  # a preallocated cache writes each position once
                copied.append((copied[-1] if copied else sum(prompt_lengths)) + 3 * cache.length)  # cat rewrites all
            print(f"lengths after decoding: {cache.lengths.tolist()} of max_len {cache.max_len}; largest difference "
                  f"from attention over each row alone: {worst:.1e}")
            fig, ax = plt.subplots(figsize=(6, 3.2))
            ax.plot(range(1, steps + 1), written, label="preallocated: new positions only")
            ax.plot(range(1, steps + 1), copied, label="torch.cat: the whole padded cache, every step")
            ax.set_xlabel("decode step"); ax.set_ylabel("positions written, cumulative")
            ax.set_title("B = 3, one layer: cat's traffic grows quadratically"); ax.legend()
            fig.tight_layout()
            plt.show()
        except NotImplementedError:
            print("attention or KVCache not attempted yet: nothing to run")
    """)
    lesson.md(r"""
        ### Decoding with your cache: the bytes each step reads

        The cell below decodes 64 tokens through your `attention` and `KVCache` for an MHA, a GQA and an MQA layer of
        the same query width, checks each step against full recomputation, and plots how many bytes of keys and
        values each step reads. The lines grow linearly with the context, and the GQA line is $H_q / H_{kv}$ times
        lower: that ratio is the bandwidth GQA saves at every decoding step.
    """)
    lesson.code(r"""
        torch.manual_seed(0)
        batch, num_heads, head_dim, steps = 2, 8, 32, 64
        fig, ax = plt.subplots(figsize=(6, 3.2))
        for num_kv_heads, label in ((8, "MHA (H_kv = 8)"), (2, "GQA (H_kv = 2)"), (1, "MQA (H_kv = 1)")):
            q = torch.randn(batch, num_heads, steps, head_dim)
            k = torch.randn(batch, num_kv_heads, steps, head_dim)
            v = torch.randn(batch, num_kv_heads, steps, head_dim)
            try:
                full = attention(q, k, v, causal=True)
                cache, sizes, worst = KVCache(max_len=steps), [], 0.0
                for t in range(steps):
                    k_all, v_all = cache.update(k[:, :, t : t + 1], v[:, :, t : t + 1])
                    step = attention(q[:, :, t : t + 1], k_all, v_all, causal=True)
                    worst = max(worst, (step - full[:, :, t : t + 1]).abs().max().item())
                    sizes.append((k_all.numel() + v_all.numel()) * k_all.element_size() / 1024)
            except NotImplementedError:
                print("attention or KVCache not attempted yet: nothing to plot")
                break
            print(f"{label}: largest difference decode vs full = {worst:.2e}")
            ax.plot(range(1, steps + 1), sizes, label=label)
        ax.set_xlabel("cached tokens"); ax.set_ylabel("keys + values read per step (KiB, fp32)")
        ax.set_title("one layer, B = 2, H_q = 8, D = 32"); ax.legend()
        fig.tight_layout()
        plt.show()
    """)
    lesson.stop()
    lesson.md(r"""
        ## 6. Reading the solutions

        **`repeat_kv`.** `x[:, :, None]` adds the group axis *after* the head axis, so `reshape` lays the copies of
        head 0 first, then those of head 1: output head $h$ is input head $h // g$. `expand` is free (stride 0);
        `reshape` then copies, because the merged axis is not contiguous. Hugging Face's `repeat_kv` is the same
        three lines. The same result comes from `torch.repeat_interleave(x, g, dim=1)`, which is what the checks
        use as a reference.

        **`attention`.** The `ValueError` turns a wrong config ($H_q = 6$, $H_{kv} = 4$) into a message instead of a
        shape error two calls later. The scores are computed in float32 (`torch.promote_types` keeps float64).
        `tril(diagonal=S_k - S_q)` is the bottom-right triangle; `diagonal=0` would be SDPA's top-left one. The
        padding mask is broadcast over heads and queries: `[:, None, None, :]` takes $(B, S_k)$ to
        $(B, 1, 1, S_k)$. The softmax is written out so that an all-masked row never produces NaN: its max is
        $-\infty$ and is replaced by 0, every weight is $\exp(-\infty) = 0$, and the clamped denominator gives
        exactly 0. Because no intermediate is NaN, the backward pass is clean too: the gradient flowing into an
        all-masked row is multiplied by probabilities that are all zero.

        **`KVCache`.** All validation comes first, so a refused update leaves the cache exactly as it was (a server
        that rejects one request must not corrupt the rows of the others). The buffers are allocated on the first
        update because only then are the batch, the heads, the head sizes, the dtype and the device known, the same
        choice as Hugging Face's `StaticLayer.lazy_initialization`. Each row's chunk goes to its own columns
        `lengths[b] : lengths[b] + num_new[b]`; only the first `num_new[b]` columns of the chunk are read, so padding
        never enters the cache and never counts in `lengths`. The loop over rows is $B$ small copies; a vectorised
        write lists every real (row, column) pair with `(arange(S_new) < num_new[:, None]).nonzero()` and writes
        them with one advanced-indexing assignment at slots `lengths[rows] + columns` (lesson `p02.kv_cache` does
        that). The returned tensors are basic slices, so they are views: no copy, and the same storage at every
        step.

        **The usual mistakes, and why they are wrong**:
        - *Tiling the KV heads* (`x.repeat(1, g, 1, 1)`, or the group axis in front of the head axis): query head $h$
          uses KV head $h \bmod H_{kv}$. Right shape, wrong pairing; MHA ($g = 1$) and MQA ($H_{kv} = 1$) still pass,
          only real GQA exposes it.
        - *Top-left causal mask* (`tril()` without the offset): identical for prefill, wrong for every decoding step.
        - *A causal mask off by one* (`diagonal=S_k - S_q - 1`): every token loses sight of itself.
        - *Scale $1/D$ instead of $1/\sqrt D$*: the softmax becomes too flat.
        - *`masked_fill(-inf)` + `torch.softmax`*: correct everywhere except the all-masked rows, which are NaN.
        - *A large negative number instead of $-\infty$* (`-1e9`, or `finfo.min` as Hugging Face's eager path uses):
          an all-masked row then attends **uniformly to the padding**, which is finite but not zero.
        - *The padding mask on the query axis* instead of the key axis.
        - *Softmax in fp16/bf16*: the probabilities are rounded to 8 or 11 bits before the weighted sum.
        - *A cache that returns only the new keys*, or grows by `torch.cat` (right values, a new tensor and a full
          copy at every step), or returns the whole buffer (`max_len` columns, most of them never written).
        - *Every row written at the batch's longest length* instead of its own `lengths[b]`: correct as long as all
          rows have the same length, wrong at the first ragged batch.
        - *Padding counted as cached* (`lengths += S_new` instead of `num_new`), or a key mask with `<=`.
        - *The bound checked row by row while writing*: the refusal comes after the earlier rows were written.

        **Cost.** Scores and $PV$ are $2 \cdot 2 \cdot B H_q S_q S_k D$ FLOPs. This implementation materialises the
        $(B, H_q, S_q, S_k)$ score matrix in float32: at $S = 8192$, 32 heads and batch 1 that is 8 GiB for one
        layer, which is why nobody runs attention this way in production. `repeat_kv` also copies the cache $g$
        times per step, throwing away the bandwidth GQA saved. Both problems are solved inside the kernel.

        **What production code does.**
        - *FlashAttention* (Dao et al., 2022; FlashAttention-2, 2023) tiles $Q$, $K$, $V$ into SRAM and uses the
          online softmax, so the $S_q \times S_k$ matrix is never written to memory. GQA is handled by indexing:
          query head $h$ reads KV head $h // g$ directly, no copy. Causal masking is bottom-right since 2.1, and
          fully masked tiles are skipped, so causal attention costs about half. A row with no visible key has
          log-sum-exp $-\infty$ and returns zeros. Part 03 writes this kernel in Triton.
        - *SDPA* dispatches to a flash, memory-efficient, cuDNN or math backend. `enable_gqa=True` (torch 2.5+)
          accepts fewer KV heads without `repeat_kv`; `is_causal` is top-left, so decoding code passes
          `is_causal=False` for $S_q = 1$ or an explicit mask.
        - *Hugging Face* has both: `DynamicCache` grows by `torch.cat` (the default of `generate`), and
          `StaticCache` preallocates `max_cache_len` positions, like yours, so that `torch.compile` and CUDA graphs
          see fixed shapes. `StaticCache` keeps one length for the whole batch and returns the whole buffer with an
          attention mask over all `max_cache_len` columns (a fixed shape matters more to a compiled graph than the
          wasted reads); ragged prompts are left-padded to a common length instead.
        - *vLLM* stores the cache in fixed-size blocks (PagedAttention, Kwon et al., 2023) shared by all sequences:
          each new token's key and value are written to the slot its block table names (`slot_mapping`), so
          sequences grow independently without reserving `max_len` each, and nothing is ever copied. Lessons
          `p02.kv_cache` (a static cache inside a whole model) and `p02.paged_attention` build both. vLLM's decode
          kernels read each KV head once per group of query heads, which is where GQA's bandwidth saving is cashed
          in.
        - *Quantised caches* (FP8 KV cache in vLLM and TensorRT-LLM) halve the bytes per token again, and DeepSeek's
          multi-head latent attention (the next lesson) caches one compressed latent instead of per-head keys.
    """)
    lesson.mistakes()
    return lesson
