"""Source of 01_Hardware_Math_Systems/08_Flash_Attention_IO.ipynb (build with `python -m llm_algo build p01.flash_attention_io`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p01.flash_attention_io",
        path="01_Hardware_Math_Systems/08_Flash_Attention_IO.ipynb",
        title_en="IO complexity of attention",
        title_zh="注意力的 IO 复杂度",
        difficulty="medium",
        device="cpu",
        minutes=60,
        prerequisites=["p01.roofline"],
    )
    lesson.title(
        intro=r"""
        **本节要点**
        - GPU 上注意力的瓶颈常常不是 FLOPs，而是 HBM（显存）读写：标准实现把 $N \times N$ 的分数矩阵 $S$ 和概率 $P$ 写回 HBM 再读出。
        - 标准实现（FlashAttention 论文 Algorithm 0）每个头读写 $4Nd + 4N^2$ 个元素：$N^2$ 项在长序列时占绝对多数。
        - 分块 (tiling) + 在线 softmax (online softmax)：一块 $Q$ 留在 SRAM，K/V 分块流过，$S$、$P$ 从不离开 SRAM。
        - 外层循环遍历 $Q$ 块（FlashAttention-2 的顺序）：$Q$、$O$ 各读写一次，$K$、$V$ 每个 $Q$ 块读一遍：
          $2Nd + 2Nd\lceil N/B_q \rceil$ 个元素。
        - SRAM 大小 $M$ 决定 $B_q \approx M/(4d)$，于是 HBM 访问量 $\Theta(N^2 d^2 / M)$（论文 Theorem 2），SRAM 越大读写越少。
        {易错点}

        On an A100, the FlashAttention paper (Dao et al., 2022, arXiv:2205.14135, Figure 2) measured attention for
        GPT-2 medium (sequence 1024, head size 64, 16 heads, batch 64, forward and backward): the standard implementation
        moves 40.3 GB between HBM and the chip and takes 41.7 ms; FlashAttention moves 4.4 GB and takes 7.3 ms, while
        doing *more* FLOPs (75.2 against 66.6 GFLOPs, because it recomputes in the backward pass). Runtime followed the
        bytes, not the FLOPs. This lesson counts those bytes.

        **You will implement** the HBM traffic of standard attention, a tiled attention forward with online softmax
        that moves every tile through a byte-counting `HBM` object, and the IO formula of the tiled algorithm as a
        function of the block size (and so of the SRAM size). **Graded against** `F.scaled_dot_product_attention`
        (float32 and float64; lengths that are not multiples of the blocks), the bytes actually counted while a tiled
        and a standard implementation run, and closed forms.
    """
    )
    lesson.md(r"""
        ## 1. The standard implementation, counted

        For one head, $Q, K, V \in \mathbb{R}^{N \times d}$ and $O = \operatorname{softmax}(QK^\top / \sqrt d)\, V$.
        A framework that runs this as three kernels (matmul, softmax, matmul) writes every intermediate to HBM,
        because each kernel starts from HBM and ends in HBM (FlashAttention paper, Algorithm 0):

        | kernel | reads | writes |
        | --- | --- | --- |
        | $S = QK^\top / \sqrt d$ | $Q, K$: $2Nd$ | $S$: $N^2$ |
        | $P = \operatorname{softmax}(S)$ | $S$: $N^2$ | $P$: $N^2$ |
        | $O = PV$ | $P$: $N^2$, $V$: $Nd$ | $O$: $Nd$ |

        In all, $4Nd + 4N^2$ elements per head. With $N = 1024$, $d = 64$: $4.46 \cdot 10^6$ elements, and 94% of them
        are the $4N^2$ of $S$ and $P$. At $N = 8192$ the matrices are 99%. The FLOPs ($4N^2 d$ for the two matmuls) have
        an arithmetic intensity of about $d/2$ FLOPs per byte in fp16, 32 for $d = 64$: far under an A100's ridge of
        about 150 (`p01.roofline`). The fix is to never write $S$ and $P$.
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt
        import torch


        class HBM:
            '''The GPU's main memory, as far as this lesson is concerned: named (N, d) tensors that a kernel reads and
            writes only in whole row ranges, with every byte moved counted. What `load` returns is "in SRAM".'''

            def __init__(self, **tensors):
                self.tensors = {name: t.clone() for name, t in tensors.items()}
                self.bytes_read = 0
                self.bytes_written = 0

            def alloc(self, name, shape, dtype):
                self.tensors[name] = torch.full(shape, float("nan"), dtype=dtype)  # uninitialised memory

            def load(self, name, start, stop):
                '''Rows start:stop of tensor `name` (stop past the end is clipped, as a masked load).'''
                tile = self.tensors[name][start:stop].clone()
                self.bytes_read += tile.numel() * tile.element_size()
                return tile

            def store(self, name, start, tile):
                '''Write `tile` into rows start:start + len(tile) of tensor `name`.'''
                target = self.tensors[name]
                target[start:start + tile.shape[0]] = tile
                self.bytes_written += tile.numel() * target.element_size()

            @property
            def bytes_moved(self):
                return self.bytes_read + self.bytes_written
    """)
    lesson.md(r"""
        ## 2. Exercise `standard_attention_bytes`

        HBM bytes moved by the standard three-kernel implementation, per the table, for `batch_heads` independent
        (batch, head) pairs of $N \times d$ and `element_size` bytes per element. Refuse sizes below 1 with a
        `ValueError`.
    """)
    lesson.exercise(
        "standard_attention_bytes",
        r'''
        def standard_attention_bytes(seq_len: int, head_dim: int, element_size: int, batch_heads: int = 1) -> int:
            """HBM bytes read + written by S = QK^T, P = softmax(S), O = PV as three kernels."""
            # TODO: refuse sizes below 1 (ValueError)
            # TODO: the reads and writes of the three kernels
            ### BEGIN SOLUTION
            if min(seq_len, head_dim, element_size, batch_heads) < 1:
                raise ValueError("all sizes must be at least 1")
            n, d = seq_len, head_dim
            per_head = (2 * n * d + n * n) + (n * n + n * n) + (n * n + n * d + n * d)  # QK^T, softmax, PV
            return batch_heads * per_head * element_size
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 3. Tiling with an online softmax

        Split $Q$ into blocks of $B_q$ rows and $K, V$ into blocks of $B_k$ rows. For one $Q$ block, keep in SRAM a
        running row maximum $m \in \mathbb{R}^{B_q}$, a running denominator $\ell \in \mathbb{R}^{B_q}$ and an
        unnormalised output $A \in \mathbb{R}^{B_q \times d}$, all starting empty ($m = -\infty$, $\ell = 0$, $A = 0$).
        For each $K, V$ block:

        $$
        S = Q_b K_j^\top / \sqrt d \;(B_q, B_k), \quad m' = \max(m, \operatorname{rowmax} S), \quad
        \alpha = e^{m - m'}, \quad \tilde P = e^{S - m'},
        $$
        $$
        \ell \leftarrow \alpha\,\ell + \operatorname{rowsum} \tilde P, \qquad A \leftarrow \alpha\, A + \tilde P V_j,
        \qquad m \leftarrow m'.
        $$

        After the last block, $O_b = A / \ell$. The factor $\alpha$ rescales what was accumulated under the old
        maximum; it is what makes a softmax over a row that was never whole in memory exact (Milakov and Gimelshein,
        2018, *Online normalizer calculation for softmax*). $S$ and $\tilde P$ live and die in SRAM.

        HBM traffic with the $Q$ blocks in the outer loop (FlashAttention-2's order, Dao 2023, arXiv:2307.08691): each
        $Q$ block is read once and its $O$ block written once; $K$ and $V$ are read in full once per $Q$ block:

        $$
        \text{elements} = \underbrace{Nd}_{Q} + \underbrace{Nd}_{O} + \lceil N / B_q \rceil \cdot \underbrace{2Nd}_{K, V}.
        $$

        $B_k$ does not appear: it only sets how much SRAM one step needs.
    """)
    lesson.md(r"""
        ## 4. Exercise `tiled_attention`

        Compute $O$ for the tensors `"q"`, `"k"`, `"v"` of shape $(N, d)$ held in `hbm`, moving data only through
        `hbm.load(name, start, stop)` and `hbm.store("o", start, tile)`: allocate `"o"` with
        `hbm.alloc("o", (N, d), dtype)` first, load each $Q$ block once, stream every $K$ and $V$ block through it
        (at most `block_kv` rows a load: that is the SRAM the block size budgets for, and the checks measure every tile),
        store each $O$ block once. Accumulate in float32 at least (`torch.promote_types(dtype, torch.float32)`) and
        store in the input dtype. Refuse block sizes below 1 with a `ValueError`. `torch.softmax` and SDPA are the
        reference, so they are off limits.
    """)
    lesson.exercise(
        "tiled_attention",
        r'''
        def tiled_attention(hbm: HBM, block_q: int, block_kv: int) -> None:
            """O = softmax(Q K^T / sqrt(d)) V for hbm's "q", "k", "v" (N, d), written to hbm "o" block by block."""
            # TODO: refuse block sizes below 1 (ValueError); read N, d and the dtype from hbm.tensors["q"]
            # TODO: for each Q block: m = -inf, l = 0, acc = 0; for each K/V block: S, new max, rescale, accumulate
            # TODO: store acc / l for the block
            ### BEGIN SOLUTION
            if block_q < 1 or block_kv < 1:
                raise ValueError(f"block sizes must be at least 1, got {block_q}, {block_kv}")
            n, d = hbm.tensors["q"].shape
            dtype = hbm.tensors["q"].dtype
            acc_dtype = torch.promote_types(dtype, torch.float32)
            scale = 1.0 / math.sqrt(d)
            hbm.alloc("o", (n, d), dtype)
            for q_start in range(0, n, block_q):
                q = hbm.load("q", q_start, q_start + block_q).to(acc_dtype)  # (Bq, d), stays in SRAM
                rows = q.shape[0]
                row_max = torch.full((rows, 1), -math.inf, dtype=acc_dtype)
                row_sum = torch.zeros(rows, 1, dtype=acc_dtype)
                acc = torch.zeros(rows, d, dtype=acc_dtype)
                for kv_start in range(0, n, block_kv):
                    k = hbm.load("k", kv_start, kv_start + block_kv).to(acc_dtype)  # (Bk, d)
                    v = hbm.load("v", kv_start, kv_start + block_kv).to(acc_dtype)  # (Bk, d)
                    scores = (q @ k.T) * scale  # (Bq, Bk), never leaves SRAM
                    new_max = torch.maximum(row_max, scores.amax(dim=1, keepdim=True))
                    rescale = torch.exp(row_max - new_max)  # alpha: corrects what was summed under the old max
                    probs = torch.exp(scores - new_max)
                    row_sum = rescale * row_sum + probs.sum(dim=1, keepdim=True)
                    acc = rescale * acc + probs @ v
                    row_max = new_max
                hbm.store("o", q_start, (acc / row_sum).to(dtype))
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 5. Exercise `tiled_attention_bytes`

        The HBM bytes of your `tiled_attention` as a closed form, for `batch_heads` (batch, head) pairs: section 3's
        formula. Refuse sizes below 1 with a `ValueError`.
    """)
    lesson.exercise(
        "tiled_attention_bytes",
        r'''
        def tiled_attention_bytes(seq_len: int, head_dim: int, block_q: int, element_size: int,
                                  batch_heads: int = 1) -> int:
            """HBM bytes read + written by the Q-outer tiled attention forward."""
            # TODO: refuse sizes below 1 (ValueError)
            # TODO: Q once, O once, K and V once per Q block (round the number of blocks up)
            ### BEGIN SOLUTION
            if min(seq_len, head_dim, block_q, element_size, batch_heads) < 1:
                raise ValueError("all sizes must be at least 1")
            q_blocks = -(-seq_len // block_q)
            per_head = 2 * seq_len * head_dim + q_blocks * 2 * seq_len * head_dim
            return batch_heads * per_head * element_size
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 6. As a function of SRAM size

        One step holds $Q_b$ and the accumulator ($2 B_q d$), a $K$ and a $V$ block ($2 B_k d$) and the scores
        ($B_q B_k$). FlashAttention's paper takes $B_k = \lceil M / 4d \rceil$ and $B_q = \min(\lceil M/4d \rceil, d)$
        for an SRAM of $M$ elements; with $B_q \approx M/(4d)$ the tiled traffic is about
        $2Nd \cdot N \cdot 4d / M = 8N^2d^2/M$: Theorem 2's $\Theta(N^2 d^2 M^{-1})$. An A100 has 192 KB of shared memory
        per SM (H100: 228 KB, NVIDIA architecture whitepapers), about $10^5$ bf16 elements, so for $d = 128$ a $Q$ block
        of about 192 rows: at $N = 8192$ the tiled forward moves $(2 + 2 \cdot 43)\,Nd = 88\,Nd$ elements against
        $4Nd + 4N^2 = 260\,Nd$ for the standard one, and the gap widens as $N/d$ grows or as SRAM grows. Below: one head, $d = 128$, bf16,
        $N = 8192$, with $B_q = \lfloor M / 4d \rfloor$ elements of SRAM (rounded down to a multiple of 16), against
        the standard implementation.
    """)
    lesson.code(r"""
        n, d, size = 8192, 128, 2
        sram_kib = [16, 32, 64, 128, 192, 228, 512, 1024]
        try:
            naive = standard_attention_bytes(n, d, size)
            tiled = [tiled_attention_bytes(n, d, max(16, (k * 1024 // size) // (4 * d) // 16 * 16), size) for k in sram_kib]
            who = "yours"
        except NotImplementedError:
            naive = (4 * n * d + 4 * n * n) * size
            tiled = [(2 * n * d + -(-n // max(16, (k * 1024 // size) // (4 * d) // 16 * 16)) * 2 * n * d) * size
                     for k in sram_kib]
            who = "formula"
        fig, ax = plt.subplots(figsize=(6.5, 3.4))
        ax.plot(sram_kib, [t / 2**20 for t in tiled], "o-", label="tiled, Q-outer")
        ax.axhline(naive / 2**20, color="C3", ls="--", label="standard (S and P in HBM)")
        ax.axhline(4 * n * d * size / 2**20, color="gray", ls=":", label="reading Q, K, V and writing O once")
        ax.set_xscale("log", base=2); ax.set_yscale("log")
        ax.set_xlabel("SRAM per SM (KiB)"); ax.set_ylabel("HBM traffic per head (MiB)")
        ax.set_title(f"Attention forward, N={n}, d={d}, bf16 ({who})"); ax.legend(fontsize=8)
        plt.tight_layout(); plt.show()
        print(f"standard: {naive / 2**20:.0f} MiB; tiled at 192 KiB: {tiled[4] / 2**20:.0f} MiB "
              f"({naive / tiled[4]:.1f}x less)")
    """)
    lesson.md(r"""
        The tiled line falls as $1/M$, Theorem 2's law, and crosses the standard implementation near 64 KiB: with a
        smaller SRAM the $Q$ block holds so few rows that re-reading $K$ and $V$ for every block costs more than
        writing $S$ and $P$ once. Tiling wins because modern SMs have hundreds of KiB, and it keeps winning as they
        grow; what it can never beat is the dotted floor of reading the inputs and writing the output once.
    """)
    lesson.stop()
    lesson.md(r"""
        ## 7. Reading the solutions

        **`standard_attention_bytes`.** Three kernels, each from HBM to HBM. The mistakes: *$S$ written but $P$ not*
        (forgetting that the softmax is its own kernel, $2N^2$ instead of $4N^2$), and *$V$ or the output left out*.
        PyTorch eager runs exactly these kernels (plus the scaling and masking, often fused into the softmax); a
        compiler such as `torch.compile` fuses the scaling and softmax but still writes $S$ and $P$.

        **`tiled_attention`.** Three state tensors per $Q$ block ($m$, $\ell$, the accumulator) and one rescaling
        factor per step. The usual mistakes: *the accumulator or the denominator not rescaled by $\alpha$*
        (right only when the first block happened to hold the row maximum), *no final division by $\ell$*, *the last,
        shorter $Q$ block dropped* (lengths that are not multiples of the block leave rows of $O$ unwritten), *all of
        $K$ and $V$ loaded once per $Q$ block with a plain softmax over the whole row* (right values and exactly the
        formula's bytes, but a $B_q \times N$ score tile that no SRAM holds at long $N$: the checks' own `HBM` records
        the rows of every tile each load moves and fails a $K$ or $V$ tile above `block_kv` rows), *$K$/$V$ reloaded in
        full at every step* ($N/B_k$ times the traffic: the byte count shows it), and *accumulating in bf16 or fp16*
        (less accurate than SDPA in that dtype). FlashAttention itself does the same work in one
        kernel with the $Q$ block in registers, `exp2` with the $\log_2 e$ folded into the scale, and the division
        by $\ell$ deferred to the end exactly as here; it also writes the log-sum-exp $m + \log \ell$ ($N$ floats) for
        the backward pass (`p03.flash_attention_fwd`, `p03.flash_attention_bwd`).

        **`tiled_attention_bytes`.** The number of $Q$ blocks is a ceiling: 1000 rows in blocks of 128 are 8 blocks.
        The mistakes: *floor division*, and *the $K$/$V$ term counted once* (that is the traffic only when one $Q$
        block holds the whole sequence). Decoding is the other extreme: $N_q = 1$, so $K$ and $V$ are read exactly once
        and the kernel is purely bandwidth-bound (FlashDecoding splits the keys across SMs instead, `p01.kv_cache_math`).
    """)
    lesson.mistakes()
    return lesson
