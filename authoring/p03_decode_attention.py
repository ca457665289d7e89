"""Source of 03_Triton_Kernels/14_Decode_Attention.ipynb (build with `python -m llm_algo build p03.decode_attention`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p03.decode_attention",
        path="03_Triton_Kernels/14_Decode_Attention.ipynb",
        title_en="Split-K decode attention (flash-decoding) in Triton",
        title_zh="Split-K 解码注意力（flash-decoding）：Triton 实现",
        difficulty="hard",
        device="cpu",
        minutes=120,
        prerequisites=["p03.flash_attention_fwd", "p02.kv_cache"],
        triton=True,
    )
    lesson.title(
        intro=r"""
        While a model generates text, every step feeds **one** new token per sequence through the network, and that
        token's query must attend to the whole KV cache written so far. For Llama-3-8B at a 32k-token context the cache
        of one sequence is 4 GiB, and every generated token reads all of it once. The arithmetic is tiny next to those
        bytes, so decode attention is a pure bandwidth problem: the only question is how close a kernel gets to the
        speed of copying the cache. The FlashAttention forward of `p03.flash_attention_fwd` gets nowhere near it here:
        it parallelises over *query* blocks, and with one query row there is one program per (sequence, KV head) once
        the heads of a GQA group share it — 64 programs for a batch of 8 on a GPU with 132 SMs. **Flash-decoding** (Dao, Haziza, Massa, Sizov, 2023) splits
        the *keys* instead: many programs each reduce one slice of the cache to a partial softmax state, and a second,
        small kernel merges the partial states with the log-sum-exp rule.

        **You will implement** the two-stage split-K decode kernel (分段 KV 的解码注意力): stage 1 computes a partial
        `(m, l, acc)` per (sequence, KV head, split), serving all $g$ query heads of a grouped-query-attention (GQA)
        group from one load of each K/V tile; stage 2 combines the splits; the wrapper picks the number of splits from
        $B \cdot H_{kv}$ and the context length, and honours a different cache length per sequence (`seq_lens`).
        **Graded against** `F.scaled_dot_product_attention` in float64 per sequence, float64 partial softmax states
        computed slice by slice, closed forms for the combine, and guard bytes around every output.
        """,
    )
    lesson.md(r"""
        ## 本节要点

        - **问题**：解码时每条序列只有 1 个新 token，但要读完整个 KV cache。Llama-3-8B（32 个 query head、8 个 KV head、$d=128$）在 32k 上下文时每层每条序列要读 128 MiB 的 K/V，只做约 0.54 GFLOP：每字节 4 FLOP，远低于 H200 约 200 FLOP/字节的拐点，所以是纯带宽问题，目标是接近拷贝带宽。
        - **为什么要 split-K**：按 (序列, KV head) 各开一个 program 时，batch 8 只有 64 个 program，填不满 132 个 SM；把 key 维切成若干段，每段一个 program，程序数变成 $B\cdot H_{kv}\cdot n_{\text{split}}$。
        - **阶段 1**：每个 program 用 online softmax 处理一段 key，输出部分状态 $(m, \ell, \text{acc})$（未归一化）；一个 KV head 的 K/V tile 只读一次，同时服务该组的 $g = H_q/H_{kv}$ 个 query head（把 $g$ 补齐到 16 行以满足 `tl.dot`）。
        - **阶段 2**：$M=\max_s m_s$，$w_s=e^{m_s-M}$，$O=\sum_s w_s\,\text{acc}_s / \sum_s w_s \ell_s$，$\text{LSE}=M+\log\sum_s w_s\ell_s$；空段的 $m=-\infty$、$\ell=0$ 权重自然为 0。
        - **每条序列长度不同**：`seq_lens[b]` 之后的 key 一律屏蔽；某段完全越过长度时该段为空。
        - **实测（H200，一次运行）**：batch 8 时 split-K 达到 4103 GB/s，是拷贝带宽（4148 GB/s）的 99%，目标（≥ 80%）达成；SDPA 默认后端 4261 GB/s，略快 4%。batch 1 时直接调用只有 1777 GB/s，很可能是 Python 包装与两次启动的主机开销超过了约 39 µs 的 GPU 工作；用 CUDA graph 重放后为 3415 GB/s（拷贝的 94%）。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. Why decode is memory-bound, with real numbers

        Llama-3-8B (its Hugging Face `config.json`): 32 layers, 32 query heads, 8 KV heads, head dim $d = 128$, bf16.
        At one decode step, for one sequence with $S$ cached tokens and one layer:

        | | formula | $S = 32768$ |
        |---|---|---|
        | K and V bytes read | $2 \cdot H_{kv} \cdot S \cdot d \cdot 2\,\text{B}$ | 128 MiB |
        | FLOPs ($q k^\top$ and $p\,V$) | $2 \cdot 2 \cdot H_q \cdot S \cdot d$ | 0.54 GFLOP |
        | FLOPs per byte | $H_q / H_{kv} = g$ | 4 |

        An H200 streams about 4.8 TB/s from HBM3e (NVIDIA's datasheet) and computes about 990 TFLOP/s of dense bf16:
        a kernel needs ~200 FLOPs per byte before the tensor cores become the limit. Decode attention has 4. So the
        time of one step is the time to read the cache: 128 MiB at 4.8 TB/s is 28 µs per layer, 0.9 ms for the 32
        layers of one sequence, 7.2 ms for a batch of 8 — a ceiling of about 140 tokens/s per sequence from attention
        alone, whatever the FLOP rate. (The weights add another 16 GB per step, shared by the whole batch.) GQA is the
        reason the ratio is 4 and not 1: each K/V byte serves $g = 4$ query heads, *if the kernel loads it once for
        all four*. A kernel that runs one program per query head reads the cache four times (mostly from L2, if lucky).

        The yardstick is therefore **GB/s of K+V bytes**, next to a device-to-device copy of the same number of bytes
        (the roofline a memory-bound kernel can hope for).

        ## 2. Occupancy: why one program per head is not enough

        The prefill kernel's grid is (query blocks, $B \cdot H$). With one query row per sequence there is one query
        block, so the grid is $B \cdot H_{kv}$ programs once GQA groups share a program: 8 for a single sequence, 64 for
        a batch of 8. An H200 has 132 SMs, and an SM needs several programs in flight to keep enough loads outstanding
        to saturate HBM. With 8 programs, 124 SMs sit idle and each busy one walks 32768 keys alone.

        **Split-K** (here: split the key axis) cuts each head's cache into $n$ slices of `split_size` keys. Program
        $(s, b, h_{kv})$ runs the online softmax of `p03.softmax` over keys $[s \cdot \text{split}, (s+1)\cdot
        \text{split}) \cap [0, \text{seq\_len}_b)$ and writes the *unnormalised* state of its slice:

        $$
        m_s = \max_{j \in s} x_j, \qquad \ell_s = \sum_{j \in s} e^{x_j - m_s}, \qquad
        \text{acc}_s = \sum_{j \in s} e^{x_j - m_s}\, v_j \in \mathbb{R}^d, \qquad x_j = \tfrac{q \cdot k_j}{\sqrt d}.
        $$

        A second kernel merges the $n$ states of each (sequence, query head) — exactly the rescaling the online softmax
        does between two blocks, applied to all slices at once:

        $$
        M = \max_s m_s,\quad w_s = e^{m_s - M},\quad
        O = \frac{\sum_s w_s\, \text{acc}_s}{\sum_s w_s\, \ell_s},\quad
        \text{LSE} = M + \log \sum_s w_s\, \ell_s .
        $$

        A slice that lies entirely past a sequence's length is empty: $m_s = -\infty$, $\ell_s = 0$, $\text{acc}_s = 0$,
        and its weight $e^{-\infty - M} = 0$ removes it without a branch (as long as one slice is not empty:
        `seq_lens` must be $\ge 1$).

        **How many splits?** Enough programs to fill the GPU several times over, and no more than keeps each slice
        long enough to amortise its fixed costs (loading $q$, writing $d + 2$ floats per query head, one more row for
        the combine). The partial states are small: $4(d + 2)$ bytes per (sequence, query head, split), so
        $4 g (d + 2)$ per program, against $2 \cdot 2 \cdot d$ bytes of K/V per key of its slice. With 256 keys per
        slice, $g = 4$ and $d = 128$: 2080 bytes written (and read once more by the combine) for 131072 bytes read,
        about 3% extra traffic; with 2048 keys per slice, 0.4%. The wrapper in this lesson uses one rule (FlashAttention-2's `num_splits_heuristic` and vLLM's
        fixed 512-token partitions are two others):

        > $n$ = the smallest power of two with $B \cdot H_{kv} \cdot n \ge 4 \cdot \text{SMs}$, but never so many that
        > a slice of a cache of length $S$ has fewer than 256 keys ($\lceil S / n \rceil \ge 256$); at least 1.

        For Llama-3-8B on an H200 ($H_{kv} = 8$, 132 SMs, target 528 programs): a single 32k sequence gets $n = 128$
        slices of 256 keys (1024 programs), a batch of 8 gets $n = 16$ (1024 programs), a batch of 128 needs no split.
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt
        import numpy as np
        import torch
        import torch.nn.functional as F
        import triton
        import triton.language as tl
    """)
    lesson.code(r"""
        # Programs in the grid, with and without splitting, for Llama-3-8B's 8 KV heads at a 32k context.
        batches = [1, 2, 4, 8, 16, 32, 64]
        sms = 132
        no_split = [b * 8 for b in batches]
        with_split = []
        for b in batches:
            n = 1
            while b * 8 * n < 4 * sms and -(-32768 // (2 * n)) >= 256:
                n *= 2
            with_split.append(b * 8 * n)
        fig, ax = plt.subplots(figsize=(6.4, 3.4))
        ax.plot(batches, no_split, "o-", label="one program per (sequence, KV head)")
        ax.plot(batches, with_split, "s-", label="split-K (the rule above)")
        ax.axhline(sms, color="gray", ls="--"); ax.text(1.05, sms * 1.1, "132 SMs (one program each)", fontsize=8)
        ax.set_xscale("log", base=2); ax.set_yscale("log", base=2)
        ax.set_xlabel("batch (sequences of 32k tokens)"); ax.set_ylabel("programs in the grid")
        ax.set_title("Llama-3-8B decode: programs per attention launch", fontsize=10); ax.legend(fontsize=8)
        fig.tight_layout(); plt.show()
    """)
    lesson.md(r"""
        Below the dashed line some SMs get no program at all; just above it each SM holds one program, which cannot
        keep enough loads in flight to reach full bandwidth. The split-K grid stays at 1024 programs (about 8 per SM) over
        the whole range: only from 66 sequences on does the batch alone reach the rule's target of 528 programs.

        ## 3. Stage 1: one program per (split, sequence, KV head)

        ```
        program (split s, batch b, kv head h):                       # grid = (n_splits, B, H_kv)
            q     = load q[b, h·g : h·g + g, :]          # (BLOCK_G, d): the g query heads of this KV head, rows >= g zero
            start = s · split_size;  end = min(start + split_size, seq_lens[b])
            m, l, acc = -inf, 0, 0                         # (BLOCK_G,), (BLOCK_G,), (BLOCK_G, d) float32
            for n in range(start, end, BLOCK_N):
                k, v = load K[b, h, n : n + BLOCK_N, :], V[...]      # masked: keys >= end read nothing
                x    = (q @ kᵀ) · qk_scale                            # (BLOCK_G, BLOCK_N), base 2; masked keys -inf
                online-softmax update of m, l, acc                    # acc += p @ v
            store m (natural log), l, acc for query heads h·g .. h·g + g - 1, split s
        ```

        **GQA in the tile.** The $g$ query heads of one KV head form the rows of a small matrix, so
        $q k^\top$ is a `tl.dot` of shape $(g, d) \times (d, B_N)$ and each K/V tile is loaded once for all of them.
        On the GPU `tl.dot` wants every dimension $\ge 16$, so the group is padded to `BLOCK_G = max(16,
        next_power_of_2(g))` rows: the padding rows load zeros (masked) and are never stored. The tensor cores do 4x
        more math than needed at $g = 4$ — free, since the kernel waits on memory anyway. (SGLang's Triton decode
        kernel pads its grouped heads to 16 rows for the same reason.)

        **Per-sequence lengths.** `seq_lens[b]` is read inside the kernel; the loop simply ends at
        $\min(\text{start} + \text{split\_size}, \text{seq\_len}_b)$, and the last block masks keys $\ge$ `end`. Because
        `split_size` is a multiple of `BLOCK_N`, a block never crosses a slice boundary, and every load stays inside the
        slice. Nothing reads past `seq_lens[b]`: in a serving engine the slots after it hold garbage (the previous
        request's keys, or NaN), and the checks put NaN there.

        **Addresses.** The cache is `(B, H_kv, S, d)` addressed by stride (head dim contiguous). `b · stride_kb` is the
        product that overflows: one 32k Llama sequence holds $8 \cdot 32768 \cdot 128 = 2^{25}$ elements per tensor,
        so from batch index 64 on an int32 offset wraps. Cast the batch and head indices, and the sequence stride, to
        int64 before multiplying.

        **Output layout of the partial states.** `m` and `l` are `(B, H_q, n_splits)` float32, `acc` is
        `(B, H_q, n_splits, d)` float32, all contiguous; `m` is stored in natural-log units (`m₂ · ln 2` when the loop
        works in base 2 with `exp2`), so stage 2 and the checks can use `exp`.

        ## 4. Exercise `decode_partials`

        Write `decode_split_kernel` and its launcher `decode_partials(q, k_cache, v_cache, seq_lens, split_size,
        sm_scale=None, block_n=None, validate=True)`:

        - `q` is `(B, H_q, d)`, the caches `(B, H_kv, S, d)`, fp16 or bf16, $H_q$ a multiple of $H_{kv}$,
          $d \in \{16, 32, 64, 128\}$, head dim contiguous, every other stride free (q a slice of a fused QKV, a
          cache window of a bigger one); `seq_lens` `(B,)` int32 or int64 on the same device, any stride (the kernel
          reads `seq_lens_ptr + b`, so the launcher passes `seq_lens.contiguous()`).
        - `split_size` keys per split, a positive multiple of `block_n` (default 64 on a GPU, 16 on the interpreter);
          `n_splits = ceil(S / split_size)`.
        - With `validate=True`, also check $1 \le$ `seq_lens[b]` $\le S$ (this reads `seq_lens` back to the host: a
          synchronisation a serving engine avoids by checking lengths when it schedules the batch; the benchmark
          passes `validate=False`).
        - Returns `(m, l, acc)` as above. On the GPU launch with `num_warps=4, num_stages=3`.
    """)
    lesson.exercise(
        "decode_partials",
        r'''
        LN2 = tl.constexpr(0.6931471805599453)  # base-2 max -> natural log (kernels may read only constexpr globals)


        @triton.jit
        def decode_split_kernel(
            q_ptr, k_ptr, v_ptr, seq_lens_ptr, m_ptr, l_ptr, acc_ptr,
            stride_qb, stride_qh,                            # q (B, H_q, d), head dim contiguous
            stride_kb, stride_kh, stride_kn,                 # k (B, H_kv, S, d)
            stride_vb, stride_vh, stride_vn,                 # v (B, H_kv, S, d)
            num_heads, num_kv_heads, num_splits, split_size, qk_scale,   # qk_scale = sm_scale * log2(e)
            HEAD_DIM: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr,
        ):
            """One program: keys [split * split_size, ...) of one (batch, KV head), for all its query heads.
            Writes m (natural log), l and acc of each query head of the group into row (b * H_q + head) * n_splits + split
            of the contiguous (B, H_q, n_splits[, d]) float32 outputs."""
            # TODO: program ids -> split, batch, kv_head (batch and kv_head as int64; the sequence strides too)
            # TODO: the g = H_q // H_kv query heads of this KV head as BLOCK_G rows (rows >= g masked); load q
            # TODO: this split's key range [start, min(start + split_size, seq_lens[batch]))
            # TODO: online softmax over it in blocks of BLOCK_N (base 2, masked keys -inf), acc += p @ v
            # TODO: store m * ln 2, l and acc for the g real rows
            ### BEGIN SOLUTION
            split = tl.program_id(0)
            batch = tl.program_id(1).to(tl.int64)
            kv_head = tl.program_id(2).to(tl.int64)
            group = num_heads // num_kv_heads
            stride_kn, stride_vn = tl.cast(stride_kn, tl.int64), tl.cast(stride_vn, tl.int64)
            offs_g = tl.arange(0, BLOCK_G)
            offs_n = tl.arange(0, BLOCK_N)
            offs_d = tl.arange(0, HEAD_DIM)
            heads = kv_head * group + offs_g                                          # query heads of this group
            head_ok = offs_g < group
            q_ptrs = q_ptr + batch * stride_qb + heads[:, None] * stride_qh + offs_d[None, :]
            q = tl.load(q_ptrs, mask=head_ok[:, None], other=0.0)                     # (BLOCK_G, HEAD_DIM)

            seq_len = tl.load(seq_lens_ptr + batch).to(tl.int32)                   # int64 lengths too
            start = split * split_size
            end = tl.minimum(start + split_size, seq_len)
            k_ptrs = k_ptr + batch * stride_kb + kv_head * stride_kh + offs_n[:, None] * stride_kn + offs_d[None, :]
            v_ptrs = v_ptr + batch * stride_vb + kv_head * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :]

            m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)
            l_i = tl.zeros([BLOCK_G], tl.float32)
            acc = tl.zeros([BLOCK_G, HEAD_DIM], tl.float32)
            for n in tl.range(start, end, BLOCK_N):
                key_ok = n + offs_n < end                                             # (BLOCK_N,)
                k = tl.load(k_ptrs + n * stride_kn, mask=key_ok[:, None], other=0.0)  # (BLOCK_N, HEAD_DIM)
                x = tl.dot(q, tl.trans(k)) * qk_scale                                 # (BLOCK_G, BLOCK_N), base 2
                x = tl.where(key_ok[None, :], x, float("-inf"))
                m_new = tl.maximum(m_i, tl.max(x, axis=1))
                alpha = tl.exp2(m_i - m_new)
                p = tl.exp2(x - m_new[:, None])
                l_i = l_i * alpha + tl.sum(p, axis=1)
                v = tl.load(v_ptrs + n * stride_vn, mask=key_ok[:, None], other=0.0)
                acc = acc * alpha[:, None]
                acc = tl.dot(p.to(v.dtype), v, acc)                                   # (BLOCK_G, HEAD_DIM)
                m_i = m_new

            rows = (batch * num_heads + heads) * num_splits + split                   # (BLOCK_G,) int64
            tl.store(m_ptr + rows, m_i * LN2, mask=head_ok)
            tl.store(l_ptr + rows, l_i, mask=head_ok)
            tl.store(acc_ptr + rows[:, None] * HEAD_DIM + offs_d[None, :], acc, mask=head_ok[:, None])
            ### END SOLUTION


        def check_decode_inputs(q, k_cache, v_cache, seq_lens, validate=True):
            """Shared by the launchers of this lesson: raise ValueError on anything the kernels cannot handle."""
            # TODO: dims, dtypes, shapes, GQA divisibility, head_dim, strides, seq_lens (and its values if validate)
            ### BEGIN SOLUTION
            if q.dim() != 3 or k_cache.dim() != 4 or v_cache.dim() != 4:
                raise ValueError("q must be (B, H_q, d) and the caches (B, H_kv, S, d)")
            batch, num_heads, head_dim = q.shape
            _, num_kv_heads, cache_len, _ = k_cache.shape
            if q.dtype not in (torch.float16, torch.bfloat16) or k_cache.dtype != q.dtype or v_cache.dtype != q.dtype:
                raise ValueError(f"q and the caches must share one 16-bit dtype, got {q.dtype}, {k_cache.dtype}, "
                                 f"{v_cache.dtype}")
            if k_cache.shape != v_cache.shape or k_cache.shape[0] != batch or k_cache.shape[3] != head_dim:
                raise ValueError(f"k_cache and v_cache must be (B, H_kv, S, d) matching q {tuple(q.shape)}, got "
                                 f"{tuple(k_cache.shape)} and {tuple(v_cache.shape)}")
            if num_heads % num_kv_heads != 0:
                raise ValueError(f"{num_heads} query heads cannot be split into groups over {num_kv_heads} KV heads")
            if head_dim not in (16, 32, 64, 128):
                raise ValueError(f"head_dim {head_dim} is not supported (16, 32, 64 or 128)")
            if q.stride(2) != 1 or k_cache.stride(3) != 1 or v_cache.stride(3) != 1:
                raise ValueError("the head dimension must be contiguous (stride 1)")
            if seq_lens.shape != (batch,) or seq_lens.dtype not in (torch.int32, torch.int64):
                raise ValueError(f"seq_lens must be a ({batch},) int32/int64 tensor, got {tuple(seq_lens.shape)} "
                                 f"{seq_lens.dtype}")
            if seq_lens.device != q.device:
                raise ValueError(f"seq_lens is on {seq_lens.device}, q on {q.device}")
            if validate and len(seq_lens):
                low, high = int(seq_lens.min()), int(seq_lens.max())
                if low < 1 or high > cache_len:
                    raise ValueError(f"seq_lens must lie in [1, {cache_len}] (the cache length), got [{low}, {high}]")
            ### END SOLUTION


        def decode_partials(q, k_cache, v_cache, seq_lens, split_size, sm_scale=None, block_n=None, validate=True):
            """Stage 1. q (B, H_q, d); caches (B, H_kv, S, d); seq_lens (B,). Returns m, l (B, H_q, n_splits) and
            acc (B, H_q, n_splits, d), float32, with n_splits = ceil(S / split_size)."""
            # TODO 1: check_decode_inputs; block_n (64 on a GPU, 16 on the interpreter); split_size a multiple of it
            # TODO 2: allocate m, l, acc; grid (n_splits, B, H_kv); BLOCK_G = max(16, next_power_of_2(g)); launch
            #         (seq_lens contiguous: the kernel reads seq_lens_ptr + b)
            ### BEGIN SOLUTION
            check_decode_inputs(q, k_cache, v_cache, seq_lens, validate)
            seq_lens = seq_lens.contiguous()                                          # a strided view: copied
            batch, num_heads, head_dim = q.shape
            _, num_kv_heads, cache_len, _ = k_cache.shape
            block_n = block_n or (64 if q.is_cuda else 16)
            if split_size <= 0 or split_size % block_n != 0:
                raise ValueError(f"split_size {split_size} must be a positive multiple of block_n = {block_n}")
            num_splits = triton.cdiv(cache_len, split_size)
            sm_scale = 1.0 / math.sqrt(head_dim) if sm_scale is None else sm_scale
            group = num_heads // num_kv_heads
            m = torch.empty(batch, num_heads, num_splits, device=q.device, dtype=torch.float32)
            l = torch.empty_like(m)
            acc = torch.empty(batch, num_heads, num_splits, head_dim, device=q.device, dtype=torch.float32)
            extra = {"num_warps": 4, "num_stages": 3} if q.is_cuda else {}
            decode_split_kernel[(num_splits, batch, num_kv_heads)](
                q, k_cache, v_cache, seq_lens, m, l, acc,
                q.stride(0), q.stride(1),
                k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
                v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
                num_heads, num_kv_heads, num_splits, split_size, sm_scale * math.log2(math.e),
                HEAD_DIM=head_dim, BLOCK_G=max(16, triton.next_power_of_2(group)), BLOCK_N=block_n, **extra,
            )
            return m, l, acc
            ### END SOLUTION
        ''',
    )
    lesson.md(r"""
        ## 5. Stage 2: combining the splits

        One program per (sequence, query head) loads the `n_splits` partial states — `BLOCK_S =
        next_power_of_2(n_splits)` lanes, the missing ones masked to $m = -\infty$, $\ell = 0$, $\text{acc} = 0$ — and
        applies the merge rule of section 2. The max is subtracted for the same reason as in every softmax: partial
        maxima of 100 are ordinary for large activations, and $e^{100}$ overflows float32. The kernel writes `out`
        `(B, H_q, d)` in the caller's dtype (addressed by stride) and the natural-log `lse` `(B, H_q)` float32 — the
        quantity a later merge (another split, a prefix cache hit computed separately, a speculative-decoding tree)
        needs to combine this result with others.

        ## 6. Exercise `combine_splits`

        `combine_splits(m, l, acc, out=None, out_dtype=torch.float16)`: `m`, `l` `(B, H_q, n)` and `acc`
        `(B, H_q, n, d)`, contiguous float32 (refuse anything else with a `ValueError`); writes into `out`
        `(B, H_q, d)` when given (any strides with a contiguous head dim), else allocates it in `out_dtype`. Returns
        `(out, lse)`. At least one split of every row must be non-empty (this is what `seq_lens >= 1` guarantees).
    """)
    lesson.exercise(
        "combine_splits",
        r'''
        @triton.jit
        def combine_splits_kernel(
            m_ptr, l_ptr, acc_ptr, out_ptr, lse_ptr,
            num_heads, num_splits, stride_ob, stride_oh,
            HEAD_DIM: tl.constexpr, BLOCK_S: tl.constexpr,
        ):
            """One program per (batch, query head) row r = b * H_q + h: merge the num_splits partial states of row r
            (m, l at r * num_splits + s; acc at (r * num_splits + s) * HEAD_DIM + d) into out[b, h, :] and lse[r]."""
            # TODO: row id (int64); load m (other=-inf), l (other=0) and acc (other=0) of the num_splits splits
            # TODO: M = max m; w = exp(m - M); out = sum(w acc) / sum(w l); lse = M + log(sum(w l))
            # TODO: store out (cast to out's dtype) and lse
            ### BEGIN SOLUTION
            row = tl.program_id(0).to(tl.int64)
            offs_s = tl.arange(0, BLOCK_S)
            offs_d = tl.arange(0, HEAD_DIM)
            ok = offs_s < num_splits
            base = row * num_splits + offs_s                                          # (BLOCK_S,)
            m = tl.load(m_ptr + base, mask=ok, other=float("-inf"))
            l = tl.load(l_ptr + base, mask=ok, other=0.0)
            acc = tl.load(acc_ptr + base[:, None] * HEAD_DIM + offs_d[None, :], mask=ok[:, None], other=0.0)
            m_max = tl.max(m, axis=0)
            w = tl.exp(m - m_max)                                                     # empty splits: exp(-inf) = 0
            total = tl.sum(w * l, axis=0)
            out = tl.sum(w[:, None] * acc, axis=0) / total                            # (HEAD_DIM,)
            batch, head = row // num_heads, row % num_heads
            tl.store(out_ptr + batch * stride_ob + head * stride_oh + offs_d, out.to(out_ptr.dtype.element_ty))
            tl.store(lse_ptr + row, m_max + tl.log(total))
            ### END SOLUTION


        def combine_splits(m, l, acc, out=None, out_dtype=torch.float16):
            """Stage 2. m, l (B, H_q, n) and acc (B, H_q, n, d) contiguous float32 -> out (B, H_q, d), lse (B, H_q)."""
            # TODO 1: check shapes, dtypes, contiguity (and out's shape and head-dim stride when given)
            # TODO 2: allocate out (unless given) and lse; one program per (b, h); BLOCK_S = next_power_of_2(n)
            ### BEGIN SOLUTION
            if acc.dim() != 4 or m.shape != acc.shape[:3] or l.shape != m.shape:
                raise ValueError(f"m, l must be (B, H, n) and acc (B, H, n, d) with the same B, H, n; got "
                                 f"{tuple(m.shape)}, {tuple(l.shape)}, {tuple(acc.shape)}")
            if any(t.dtype != torch.float32 or not t.is_contiguous() for t in (m, l, acc)):
                raise ValueError("m, l and acc must be contiguous float32 tensors")
            batch, num_heads, num_splits, head_dim = acc.shape
            if num_splits < 1:
                raise ValueError("there must be at least one split")
            if out is None:
                out = torch.empty(batch, num_heads, head_dim, device=acc.device, dtype=out_dtype)
            elif out.shape != (batch, num_heads, head_dim) or out.stride(2) != 1:
                raise ValueError(f"out must be ({batch}, {num_heads}, {head_dim}) with a contiguous head dim")
            lse = torch.empty(batch, num_heads, device=acc.device, dtype=torch.float32)
            combine_splits_kernel[(batch * num_heads,)](
                m, l, acc, out, lse, num_heads, num_splits, out.stride(0), out.stride(1),
                HEAD_DIM=head_dim, BLOCK_S=triton.next_power_of_2(num_splits),
            )
            return out, lse
            ### END SOLUTION
        ''',
    )
    lesson.md(r"""
        ## 7. Exercise `decode_attention`: the wrapper that picks the splits

        1. `choose_num_splits(batch, num_kv_heads, cache_len, num_sms, min_keys=256, waves=4)` — the rule of
           section 2: the smallest power of two $n$ with $B \cdot H_{kv} \cdot n \ge \text{waves} \cdot \text{SMs}$,
           stopping earlier when doubling $n$ would make $\lceil S/n \rceil < \text{min\_keys}$; at least 1. Plain
           Python, no kernel.
        2. `decode_attention(q, k_cache, v_cache, seq_lens, sm_scale=None, num_splits=None, validate=True)` — returns
           `(out (B, H_q, d) in q.dtype, lse (B, H_q) float32)`. `num_splits=None` asks `choose_num_splits` (SM count from
           `torch.cuda.get_device_properties`, 8 on the interpreter); an explicit `num_splits` must be $\ge 1$ (refuse 0
           or less with a `ValueError`). Slices are `split_size = ceil(ceil(S / n) / BLOCK_N) · BLOCK_N` keys, so the
           real number of splits is $\lceil S / \text{split\_size} \rceil \le n$. The rule uses the cache length $S$,
           not `seq_lens.max()`, which would cost a host synchronisation every step.
    """)
    lesson.exercise(
        "decode_attention",
        r'''
        def choose_num_splits(batch, num_kv_heads, cache_len, num_sms, min_keys=256, waves=4):
            """The number of key splits: enough programs for `waves` per SM, each split keeping >= min_keys keys."""
            # TODO: start at 1; double while the grid is below waves * num_sms programs and a split of twice as
            #       many would still hold >= min_keys keys
            ### BEGIN SOLUTION
            num_splits = 1
            while batch * num_kv_heads * num_splits < waves * num_sms and -(-cache_len // (2 * num_splits)) >= min_keys:
                num_splits *= 2
            return num_splits
            ### END SOLUTION


        def decode_attention(q, k_cache, v_cache, seq_lens, sm_scale=None, num_splits=None, validate=True):
            """Split-K decode attention: q (B, H_q, d); caches (B, H_kv, S, d); seq_lens (B,) with 1 <= len <= S.
            Returns out (B, H_q, d) in q.dtype and lse (B, H_q) float32 (natural log)."""
            # TODO 1: check the inputs (check_decode_inputs), num_splits >= 1 when given
            # TODO 2: num_splits from choose_num_splits when None; split_size a multiple of BLOCK_N
            # TODO 3: decode_partials, then combine_splits into q's dtype
            ### BEGIN SOLUTION
            check_decode_inputs(q, k_cache, v_cache, seq_lens, validate)
            if num_splits is not None and num_splits < 1:
                raise ValueError(f"num_splits must be >= 1, got {num_splits}")
            batch, _, _ = q.shape
            num_kv_heads, cache_len = k_cache.shape[1], k_cache.shape[2]
            block_n = 64 if q.is_cuda else 16
            if num_splits is None:
                num_sms = torch.cuda.get_device_properties(q.device).multi_processor_count if q.is_cuda else 8
                num_splits = choose_num_splits(batch, num_kv_heads, cache_len, num_sms)
            split_size = triton.cdiv(triton.cdiv(cache_len, num_splits), block_n) * block_n
            m, l, acc = decode_partials(q, k_cache, v_cache, seq_lens, split_size, sm_scale, block_n, validate=False)
            return combine_splits(m, l, acc, out_dtype=q.dtype)
            ### END SOLUTION
        ''',
    )
    lesson.md(r"""
        ### What the splits hold, looked at

        One sequence of 300 cached tokens (of a 512-token cache), 4 query heads on 1 KV head, cut into 8 splits of 64
        keys: the partial maxima $m_s$ per split and query head (the empty splits past token 300 are $-\infty$, drawn
        blank), and the weight $w_s \ell_s / \sum w \ell$ each split contributes to the final softmax.
    """)
    lesson.code(r"""
        torch.manual_seed(0)
        q_demo = torch.randn(1, 4, 32, device=DEVICE).half()
        k_demo, v_demo = (torch.randn(1, 1, 512, 32, device=DEVICE).half() for _ in range(2))
        lens_demo = torch.tensor([300], device=DEVICE, dtype=torch.int32)
        try:
            m_demo, l_demo, _ = decode_partials(q_demo, k_demo, v_demo, lens_demo, split_size=64, block_n=16)
            out_demo, lse_demo = decode_attention(q_demo, k_demo, v_demo, lens_demo, num_splits=8)
        except NotImplementedError:
            print("Implement decode_partials, combine_splits and decode_attention first.")
        else:
            m_np = m_demo[0].cpu().numpy()
            share = (torch.exp(m_demo[0] - lse_demo[0, :, None]) * l_demo[0]).cpu().numpy()
            fig, (left, right) = plt.subplots(1, 2, figsize=(9.5, 3.2))
            left.imshow(np.where(np.isfinite(m_np), m_np, np.nan), cmap="viridis", aspect="auto")
            left.set_xlabel("split (64 keys each)"); left.set_ylabel("query head"); left.set_title("partial max m_s")
            for head in range(4):
                right.plot(share[head], "o-", label=f"head {head}")
            right.set_xlabel("split"); right.set_ylabel("share of the softmax mass")
            right.set_title("w_s l_s / sum(w l): sums to 1 per head"); right.legend(fontsize=7)
            fig.tight_layout(); plt.show()
            reference = F.scaled_dot_product_attention(q_demo[:, :, None].float(), k_demo[:, :, :300].float(),
                                                       v_demo[:, :, :300].float(), enable_gqa=True)[:, :, 0]
            print(f"shares sum to {share.sum(1).round(4)}; max |out - SDPA| = "
                  f"{float((out_demo.float() - reference).abs().max()):.1e}")
    """)
    lesson.md(r"""
        ## 8. Bandwidth (GPU only)

        `python -m llm_algo bench p03.decode_attention` times, at Llama-3-8B's shape (32 query heads, 8 KV heads,
        $d = 128$, bf16) with a 32768-token cache, batch 8 and batch 1:

        - your `decode_attention` (`validate=False`), timed with `do_bench` and once more with
          `do_bench_cudagraph` (two launches of a few microseconds matter when the kernel itself takes 30 µs);
        - your kernel forced to `num_splits=1` — the occupancy problem of section 2, measured;
        - what a user calls today: `F.scaled_dot_product_attention` with `enable_gqa=True` and **SDPA's default backend**
          (whichever backend PyTorch picks for a one-row query on this GPU);
        - a plain PyTorch decode (`softmax(q kᵀ/√d) v` with the KV heads repeated), eager and under `torch.compile`;
        - a device-to-device copy that moves as many bytes (half of them read, half written): the roofline.

        All rows in GB/s of K+V bytes read ($2 B H_{kv} S d \cdot 2$ bytes; the query, output and partial states are
        under 1% of it). The issue's goal is $\ge 80\%$ of the copy's bandwidth at batch 8.

        **Reading the numbers** (one run of `python -m llm_algo bench p03.decode_attention` with the reference
        solutions on an NVIDIA H200, Triton 3.6, torch 2.11, CUDA 13.0; your GPU will differ). GB/s of K+V bytes read;
        the copy moves as many bytes, half read and half written:

        | row | batch 8 (1 GiB of K+V) | batch 1 (128 MiB of K+V) |
        |---|---|---|
        | `decode_attention` (split-K) | 0.262 ms, 4103 GB/s | 0.0756 ms, 1777 GB/s |
        | the same, replayed from a CUDA graph | 0.249 ms, 4308 GB/s | 0.0393 ms, 3415 GB/s |
        | `decode_attention`, `num_splits=1` | 0.454 ms, 2363 GB/s | 0.449 ms, 299 GB/s |
        | SDPA, default backend, `enable_gqa=True` | 0.252 ms, 4261 GB/s | 0.0502 ms, 2672 GB/s |
        | `softmax(q kᵀ) v`, eager / `torch.compile` | 197 / 447 GB/s | 185 / 386 GB/s |
        | device-to-device copy | 0.259 ms, 4148 GB/s (512 MiB) | 0.0369 ms, 3636 GB/s (64 MiB) |

        *Batch 8: the goal is met.* Split-K reads the 32k-token cache of 8 sequences at 4103 GB/s, 99% of the copy's
        4148 GB/s (the goal was 80%). SDPA's default backend is 4% faster (0.252 against 0.262 ms). From a CUDA graph
        our two launches take 0.249 ms (4308 GB/s), but SDPA was not timed from a graph, so that is not a
        like-for-like comparison. All three attention rows land within 4% of the copy, two of them above it: the copy
        mixes reads and writes, and a kernel that only reads can edge past it, so treat the copy as the yardstick
        rather than a hard ceiling.

        *One split: the occupancy problem of section 2, measured.* With `num_splits=1` the grid has $B \cdot H_{kv}$
        programs: 64 at batch 8 (57% of the copy), 8 at batch 1 (299 GB/s). Both take the same 0.45 ms, because each
        program walks the 32768 keys of its KV head alone (16 MiB at about 37 GB/s per program), and adding sequences
        only adds programs running side by side.

        *Batch 1: launch overhead shows.* The whole cache is 128 MiB. Called normally, split-K takes 75.6 µs (1777
        GB/s, 49% of the copy) and loses to SDPA's 50.2 µs (2672 GB/s). Replayed from a CUDA graph, the same two
        kernels take 39.3 µs (3415 GB/s, 94% of the 3636 GB/s that a copy of this small size reaches), which beats
        SDPA's normal call. So about 36 µs of the plain row is spent outside the kernels. The likely cause is host
        time: `do_bench` times from the GPU's side, and while Python runs the wrapper (the input checks, twice; the
        SM-count lookup; five allocations; two Triton launches), the GPU has nothing to do. At batch 8 the kernels run
        long enough to hide most of it, and the graph saves only 13 µs. A `torch.profiler` trace of one call, showing
        the idle gaps between the two kernels, would confirm this. SDPA is a single C++ call with less host work. The
        table does not show how much of its 50 µs is host time (it has no CUDA-graph row, and the benchmark does not
        name the backend it picked for a one-row query). Serving engines (vLLM, SGLang) capture their decode steps in
        CUDA graphs for exactly this reason, and the wrapper allows it because it never synchronises.

        *Plain PyTorch* reaches 197 GB/s eager and 447 GB/s compiled at batch 8, 21 and 9 times slower than split-K.
        It repeats each KV head four times (`repeat_interleave` writes a copy four times the cache's size, which is
        then read again) and materialises the scores. Every other row reads the same K+V bytes once, so the
        differences between them come from how well each one keeps HBM busy, not from how much work it does.
    """)
    lesson.code(r"""
        if lesson.policy.triton_path != "compiled":
            print("Benchmarks need a CUDA GPU with compute capability >= 8.0; skipped here.")
        else:
            seq_lens_to_try = [1024, 4096, 16384, 32768]
            for batch in (1, 8):
                q = torch.randn(batch, 32, 128, device=DEVICE, dtype=torch.bfloat16)
                rows = []
                for cache_len in seq_lens_to_try:
                    k, v = (torch.randn(batch, 8, cache_len, 128, device=DEVICE, dtype=torch.bfloat16) for _ in range(2))
                    lens = torch.full((batch,), cache_len, device=DEVICE, dtype=torch.int32)
                    kv_bytes = 2 * k.numel() * k.element_size()
                    try:
                        ms = triton.testing.do_bench(lambda: decode_attention(q, k, v, lens, validate=False))
                        ms1 = triton.testing.do_bench(lambda: decode_attention(q, k, v, lens, num_splits=1,
                                                                               validate=False))
                    except NotImplementedError:
                        print("Implement decode_attention first: this benchmark times your kernel.")
                        break
                    rows.append((kv_bytes / ms * 1e-6, kv_bytes / ms1 * 1e-6))
                if rows:
                    plt.plot(seq_lens_to_try[: len(rows)], [r[0] for r in rows], "o-", label=f"B={batch}, split-K")
                    plt.plot(seq_lens_to_try[: len(rows)], [r[1] for r in rows], "x--", label=f"B={batch}, 1 split")
            plt.xscale("log", base=2); plt.xlabel("cached tokens"); plt.ylabel("GB/s of K+V")
            plt.title("decode attention, Llama-3-8B heads, bf16"); plt.legend(); plt.show()
    """)
    lesson.stop()
    lesson.md(r"""
        ## 9. Reading the solution

        **`decode_split_kernel`.** The grid is `(n_splits, B, H_kv)`; the three ids give the slice, the sequence and
        the KV head directly. `heads = kv_head * g + offs_g` are the query heads of the group (the GQA map
        $h_{kv} = \lfloor h / g \rfloor$, read backwards), and `head_ok` masks the padding rows on the load of `q` and
        on every store. The loop bounds come from data: `end = min(start + split_size, seq_lens[b])`, so a slice past
        the sequence runs zero iterations and stores $(-\infty, 0, 0)$. Inside the loop the only mask is `n + offs_n <
        end`; on the padded key lanes the loads read nothing and the scores become $-\infty$, so zero-filled keys
        never get the weight $e^{0 - m}$. The accumulator is rescaled by `alpha` before `tl.dot` adds the new block.
        `m_i * LN2` converts the base-2 maximum back to natural-log units.

        **`combine_splits_kernel`.** A handful of loads, one max, one exp per split, a weighted sum of `(n, d)`
        values — a few microseconds in total, but it must be a separate launch: the splits of one row are written by
        different programs, and Triton has no grid-wide barrier. (A single-kernel variant lets the last program to
        finish a row do the combine, counting finished splits with an atomic; FlashInfer and some FlashAttention-3
        paths do this.)

        **`decode_attention`.** The wrapper never synchronises with the device when `validate=False`: the number of
        splits depends only on shapes and the SM count, which is what makes it safe to capture in a CUDA graph (the
        way vLLM and SGLang run decode steps).

        **The usual mistakes, and why they are wrong**: the accumulator not
        rescaled; keys up to the cache length instead of `seq_lens[b]` (reads stale slots, NaN in the checks); a slice
        that runs one block past its end (keys counted twice); the splits counted with floor division (the last keys
        belong to no split); padded keys left at score 0; the GQA map written $h \bmod H_{kv}$; `m` stored in base 2;
        a missing refusal of `seq_lens` past the cache; a combine that does not subtract the max (overflow), that
        forgets to weight `acc` by $w_s$, that averages the normalised outputs, that drops $M$ from the LSE or that
        ignores `out`'s strides; a split rule that ignores the minimum slice length or counts $B$ programs instead of
        $B \cdot H_{kv}$; a wrapper that drops `sm_scale` or accepts `num_splits = 0`.

        **What production systems do.** Flash-decoding (Dao et al., 2023) introduced this split for
        `flash_attn_with_kvcache`; FlashAttention-2's C++ picks the split count with `num_splits_heuristic` (maximise
        the efficiency of the last wave of thread blocks). vLLM's `paged_attention_v2` CUDA kernel splits every
        sequence into 512-token partitions and runs a reduce kernel; its Triton backends and SGLang's
        `decode_attention.py` run a stage-1 kernel over `(batch, head group, kv_split)` and a stage-2 merge exactly as
        here, with the cache read through a page table — the next lesson, `p03.paged_attention`. FlashInfer's
        decode kernels add load balancing across sequences of very different lengths (a split plan computed on the
        host once per batch).
    """)
    lesson.mistakes()
    return lesson
