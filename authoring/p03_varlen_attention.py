"""Source of 03_Triton_Kernels/20_Varlen_Attention.ipynb (build with `python -m llm_algo build p03.varlen_attention`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p03.varlen_attention",
        path="03_Triton_Kernels/20_Varlen_Attention.ipynb",
        title_en="Variable-length attention over packed sequences",
        title_zh="打包序列上的变长注意力（cu_seqlens 与右下对齐的因果掩码）",
        difficulty="hard",
        device="cpu",
        minutes=90,
        prerequisites=["p03.flash_attention_fwd"],
        triton=True,
    )
    lesson.title(
        intro=r"""
        A batch of prompts is never rectangular. Padding every sequence to the longest one wastes the work on the
        padding: for a batch of 16 lengths drawn uniformly between 1 and 4096, a padded causal batch computes about
        $\mathbb{E}[L_{max}^2] / \mathbb{E}[L^2] \approx 2.7$ times the attention FLOPs it needs. Training frameworks
        (Hugging Face's `DataCollatorWithFlattening`, Megatron-LM's packed sequences) and inference servers (vLLM, SGLang)
        therefore *pack* the sequences end to end into one `(total_tokens, heads, head_dim)` tensor and describe the
        boundaries with `cu_seqlens`, the cumulative lengths `[0, L_0, L_0 + L_1, ...]`: FlashAttention's
        `flash_attn_varlen_func` interface. Inference adds a twist: in *chunked prefill* a long prompt is processed
        a chunk at a time, so a sequence's queries are only the last $S_q$ of its $S_k$ keys, and the causal mask is
        aligned to the bottom-right corner.

        **You will implement** the FlashAttention forward over packed sequences: one program per
        (query tile, sequence, head), the tile's rows and keys found through `cu_seqlens_q` and `cu_seqlens_k`,
        bottom-right causal masking, GQA. **Graded against** a per-sequence float64 loop with an explicit
        bottom-right mask and SDPA with `causal_lower_right`, with sequences of length 1 and 0 and lengths that are
        not multiples of the tile, guard elements around the output, and bad `cu_seqlens` refused.
        """,
    )
    lesson.md(r"""
        ## 本节要点

        - **问题**：一个批次中序列长度不同；补齐（padding）到最长会浪费大量计算（长度在 1..4096 均匀分布时，因果注意力约多 3 倍 FLOPs）。训练框架与推理引擎把序列首尾相接打包为 `(total_tokens, H, d)`，用 `cu_seqlens = [0, L_0, L_0+L_1, ...]`（int32，长度 B+1）描述边界。
        - **kernel**：每个 program 处理一个（序列, 头, 查询块）；从 `cu_seqlens_q[b]`、`cu_seqlens_k[b]` 读出起点与长度；查询块超出本序列长度时直接返回（空序列 `L = 0` 的所有块都如此）。
        - **右下对齐的因果掩码**：分块预填充（chunked prefill）中查询是 K 的最后 $S_q$ 个位置，第 $i$ 行可见 $j \le i + (S_k - S_q)$；$S_q = S_k$ 时退化为普通因果掩码。SDPA 的 `is_causal=True` 是左上对齐，$S_q \ne S_k$ 时结果不同。
        - **GQA**：查询头 $h$ 读取 KV 头 $h / (H / H_{kv})$。
        - **int64**：`(起点 + 行号) * stride` 在打包后的百万级 token 上会超过 $2^{31}$，先转 int64。
        - **实测（H200，一次运行）**：16 条 649..3696 token 的因果序列，打包内核 312 TFLOP/s（按实际计算量）。逐序列调用 SDPA（默认后端为 cuDNN attention）为 438，快 1.41 倍；补齐到最长后调用 SDPA 为 294，打包内核快 1.06 倍。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. Packing, and what padding costs

        Three sequences of lengths 3, 5 and 2 packed together:

        ```
        tokens:       [a0 a1 a2 | b0 b1 b2 b3 b4 | c0 c1]        q, k, v: (10, H, d)
        cu_seqlens:   [0, 3, 8, 10]   (int32, B + 1 entries)     sequence b = tokens cu[b] .. cu[b+1]-1
        ```

        Attention never crosses a boundary: token `b0` attends to `b0` only, never to `a2`. Padded to `(3, 5, H, d)`
        the same batch stores 15 token slots for 10 tokens and computes the causal score tiles of the padding too.
        The waste grows with the spread of lengths: causal attention costs $\propto L^2$ per sequence, so a padded
        batch costs $B \cdot L_{max}^2$ against $\sum_b L_b^2$. For lengths uniform on $[1, 4096]$, a batch of 16
        has $\mathbb{E}[L_{max}] \approx 3855$ while $\mathbb{E}[L^2]^{1/2} \approx 2365$: about 2.7 times the work.
        Section 4 draws it.

        **The program grid.** FlashAttention's varlen kernels launch
        $\lceil \max_b L_b / \text{BLOCK\_M} \rceil \times B \times H$ programs. Program $(t, b, h)$ reads
        `q_start = cu_seqlens_q[b]` and `seq_len_q = cu_seqlens_q[b + 1] - q_start`; if `t * BLOCK_M >= seq_len_q`
        it returns at once (a short sequence needs fewer tiles than the longest; an empty sequence needs none).
        Otherwise it is the forward of `p03.flash_attention_fwd` on the rows
        `q_start + t * BLOCK_M + [0, BLOCK_M)` and the keys `k_start + [0, seq_len_k)`, with every row and key
        beyond the sequence masked. The idle programs cost one load of two integers each.

        **Chunked prefill and the bottom-right mask.** An inference server that receives a 100k-token prompt does
        not run it in one step: it splits it into chunks of a few thousand tokens and runs one chunk per step next to
        the decode tokens of other requests (vLLM, SGLang: "chunked prefill"). When the chunk covering positions
        $[S_k - S_q, S_k)$ runs, the KV cache already holds the earlier positions, so the sequence has $S_k$ keys but
        only $S_q$ queries, the *last* $S_q$ positions. Query row $i$ is position $i + (S_k - S_q)$ and may attend to
        keys

        $$ j \le i + (S_k - S_q), $$

        the causal mask aligned to the bottom-right corner of the $S_q \times S_k$ score matrix. When $S_q = S_k$
        this is the usual causal mask. PyTorch's `F.scaled_dot_product_attention(..., is_causal=True)` aligns the mask
        to the *top-left* ($j \le i$), which for $S_q < S_k$ would let the chunk see only the first $S_q$ keys of
        the cache: a silent, plausible-looking wrong answer. PyTorch names the bottom-right variant
        `torch.nn.attention.bias.causal_lower_right`; FlashAttention ≥ 2.1 uses it whenever `causal=True`.
        A decode step is the extreme case, $S_q = 1$: the one query sees every key.

        In the kernel, with `offset = seq_len_k - seq_len_q`, the tile of rows $[m_0, m_0 + \text{BLOCK\_M})$ sees
        keys up to $m_0 + \text{BLOCK\_M} - 1 + \text{offset}$, so its key loop ends at
        `min(m0 + BLOCK_M + offset, seq_len_k)`, and the key blocks that start before
        `(m0 + offset) // BLOCK_N * BLOCK_N` are visible to every row: they run without a mask. This lesson asks
        $S_q \le S_k$ of every sequence under a causal mask (a query row with no visible key has no softmax; FlashAttention
        returns zeros there, SDPA NaN) and refuses the rest.

        **Addresses.** Q's row $r$ of sequence $b$, head $h$ is at
        `q_ptr + (q_start + r) * stride_qt + h * stride_qh + d`. A packed batch of a million tokens with 32 heads of
        128 holds $2^{32}$ elements: `(q_start + r) * stride_qt` passes $2^{31}$ from token 524288 on, so cast the
        start and the strides to int64 before any product, as in `p03.flash_attention_fwd`.
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
    lesson.md(r"""
        ## 2. Exercise `varlen_attention`

        Two pieces, in one cell:

        1. `varlen_attention_kernel`: one program per (query tile, sequence, head). Keep the signature: the
           memory-safety check launches it directly. The inner loop over key blocks is given (`attend_key_blocks`,
           the loop of `p03.flash_attention_fwd` with the causal mask shifted by `offset`); you write the program's
           setup, the two calls (unmasked blocks, then masked ones) and the store.
        2. `varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, causal=False, sm_scale=None)`: check the inputs,
           allocate, launch. `q` is `(total_q, H, d)`, `k` and `v` are `(total_k, H_kv, d)`, fp16 or bf16 with a
           contiguous head dim and every other stride free (q, k and v are usually slices of one fused QKV
           projection), $d \in \{16, 32, 64, 128\}$; `cu_seqlens_*` int32 `(B + 1,)` of any stride (the kernel reads
           `ptr + b`: pass `.contiguous()`), starting at 0, non-decreasing, ending at the number of tokens; the same $B$ for both; under `causal`,
           $S_q \le S_k$ for every sequence; and $S_k > 0$ wherever $S_q > 0$. Reading the lengths on the host (one
           `.tolist()`) gives `max_seqlen_q` for the grid. Blocks: `BLOCK_M = 128, BLOCK_N = 64, num_warps = 8,
           num_stages = 3` on a GPU (as in `p03.flash_attention_fwd`), 16 × 16 on the interpreter.
    """)
    lesson.exercise(
        "varlen_attention",
        r'''
        @triton.jit
        def attend_key_blocks(
            acc, m_i, l_i, q, k_ptrs, v_ptrs, offs_m, offs_n, start_n, end_n, seq_len_k, offset,
            stride_kt, stride_vt, qk_scale,
            BLOCK_N: tl.constexpr, MASKED: tl.constexpr, IS_CAUSAL: tl.constexpr,
        ):
            """Online softmax over the key blocks [start_n, end_n); when MASKED, keys >= seq_len_k and (causal) keys
            after row + offset get -inf. offs_m are rows within the sequence; k_ptrs point at key 0 of it."""
            for start in tl.range(start_n, end_n, BLOCK_N):
                cols = start + offs_n
                if MASKED:
                    k = tl.load(k_ptrs + start * stride_kt, mask=cols[:, None] < seq_len_k, other=0.0)
                else:
                    k = tl.load(k_ptrs + start * stride_kt)
                s = tl.dot(q, tl.trans(k)) * qk_scale
                if MASKED:
                    keep = cols[None, :] < seq_len_k
                    if IS_CAUSAL:
                        keep = keep & (cols[None, :] <= offs_m[:, None] + offset)  # bottom-right aligned
                    s = tl.where(keep, s, float("-inf"))
                m_new = tl.maximum(m_i, tl.max(s, axis=1))
                alpha = tl.exp2(m_i - m_new)
                p = tl.exp2(s - m_new[:, None])
                l_i = l_i * alpha + tl.sum(p, axis=1)
                acc = acc * alpha[:, None]
                if MASKED:
                    v = tl.load(v_ptrs + start * stride_vt, mask=cols[:, None] < seq_len_k, other=0.0)
                else:
                    v = tl.load(v_ptrs + start * stride_vt)
                acc = tl.dot(p.to(v.dtype), v, acc)
                m_i = m_new
            return acc, m_i, l_i


        @triton.jit
        def varlen_attention_kernel(
            # Pointers
            q_ptr, k_ptr, v_ptr, out_ptr, cu_seqlens_q_ptr, cu_seqlens_k_ptr,
            # Strides (token, head; the head dimension is contiguous)
            stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_ot, stride_oh,
            # Shapes
            num_heads, num_kv_heads, qk_scale,
            # Meta-parameters
            HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, IS_CAUSAL: tl.constexpr,
        ):
            """Program (tile, sequence * num_heads + head): BLOCK_M query rows of one sequence and head.
            qk_scale = sm_scale * log2(e)."""
            # TODO: program ids -> start_m, sequence, head, kv head (GQA)
            # TODO: q_start, seq_len_q, k_start, seq_len_k from cu_seqlens; return when start_m >= seq_len_q
            # TODO: pointers (starts and strides in int64); load the query tile (rows < seq_len_q)
            # TODO: offset = seq_len_k - seq_len_q; unmasked blocks [0, masked_start), then masked [masked_start, end):
            #       causal: masked_start = min((start_m + offset) // BLOCK_N * BLOCK_N, full blocks end),
            #               end = min(start_m + BLOCK_M + offset, seq_len_k); else only a last partial block is masked
            # TODO: store acc / l_i into the rows < seq_len_q
            ### BEGIN SOLUTION
            start_m = tl.program_id(0) * BLOCK_M
            seq_head = tl.program_id(1)
            seq = seq_head // num_heads
            head = (seq_head % num_heads).to(tl.int64)
            kv_head = head // (num_heads // num_kv_heads)                         # GQA: consecutive heads share
            q_start = tl.load(cu_seqlens_q_ptr + seq).to(tl.int64)
            seq_len_q = (tl.load(cu_seqlens_q_ptr + seq + 1) - q_start).to(tl.int32)
            if start_m >= seq_len_q:                                              # a short (or empty) sequence
                return
            k_start = tl.load(cu_seqlens_k_ptr + seq).to(tl.int64)
            seq_len_k = (tl.load(cu_seqlens_k_ptr + seq + 1) - k_start).to(tl.int32)
            stride_qt, stride_ot = tl.cast(stride_qt, tl.int64), tl.cast(stride_ot, tl.int64)
            stride_kt, stride_vt = tl.cast(stride_kt, tl.int64), tl.cast(stride_vt, tl.int64)
            offs_m = start_m + tl.arange(0, BLOCK_M)                              # rows within the sequence
            offs_n = tl.arange(0, BLOCK_N)
            offs_d = tl.arange(0, HEAD_DIM)
            q_ptrs = q_ptr + (q_start + offs_m[:, None]) * stride_qt + head * stride_qh + offs_d[None, :]
            k_ptrs = k_ptr + (k_start + offs_n[:, None]) * stride_kt + kv_head * stride_kh + offs_d[None, :]
            v_ptrs = v_ptr + (k_start + offs_n[:, None]) * stride_vt + kv_head * stride_vh + offs_d[None, :]
            q = tl.load(q_ptrs, mask=offs_m[:, None] < seq_len_q, other=0.0)

            m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
            l_i = tl.zeros([BLOCK_M], tl.float32)
            acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
            offset = seq_len_k - seq_len_q                                        # bottom-right alignment
            full_blocks_end = seq_len_k // BLOCK_N * BLOCK_N
            if IS_CAUSAL:
                masked_start = tl.minimum((start_m + offset) // BLOCK_N * BLOCK_N, full_blocks_end)
                end = tl.minimum(start_m + BLOCK_M + offset, seq_len_k)
            else:
                masked_start = full_blocks_end
                end = seq_len_k
            acc, m_i, l_i = attend_key_blocks(acc, m_i, l_i, q, k_ptrs, v_ptrs, offs_m, offs_n, 0, masked_start,
                                              seq_len_k, offset, stride_kt, stride_vt, qk_scale,
                                              BLOCK_N, False, IS_CAUSAL)
            acc, m_i, l_i = attend_key_blocks(acc, m_i, l_i, q, k_ptrs, v_ptrs, offs_m, offs_n, masked_start, end,
                                              seq_len_k, offset, stride_kt, stride_vt, qk_scale,
                                              BLOCK_N, True, IS_CAUSAL)
            out = acc / l_i[:, None]
            o_ptrs = out_ptr + (q_start + offs_m[:, None]) * stride_ot + head * stride_oh + offs_d[None, :]
            tl.store(o_ptrs, out.to(out_ptr.dtype.element_ty), mask=offs_m[:, None] < seq_len_q)
            ### END SOLUTION


        def varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, causal=False, sm_scale=None):
            """Attention over packed sequences. q (total_q, H, d); k, v (total_k, H_kv, d); cu_seqlens_q/k int32 (B + 1,).
            causal: bottom-right aligned (query row i of a sequence sees keys j <= i + S_k - S_q). Returns (total_q, H, d)."""
            # TODO 1: check shapes, dtypes (fp16/bf16, same for all), d, GQA divisibility, unit stride on d; cu_seqlens
            #         int32 (B + 1,) for both, same B, starting at 0, non-decreasing, ending at total_q / total_k;
            #         S_k > 0 wherever S_q > 0; causal: S_q <= S_k. Raise ValueError with a message.
            # TODO 2: allocate out; block sizes (GPU / interpreter); grid (cdiv(max S_q, BLOCK_M), B * H); launch
            ### BEGIN SOLUTION
            if q.dim() != 3 or k.dim() != 3 or v.dim() != 3:
                raise ValueError("q, k and v must be packed (tokens, heads, head_dim) tensors")
            total_q, num_heads, head_dim = q.shape
            total_k, num_kv_heads, _ = k.shape
            if q.dtype not in (torch.float16, torch.bfloat16) or k.dtype != q.dtype or v.dtype != q.dtype:
                raise ValueError(f"q, k, v must share a 16-bit dtype (tensor cores), got {q.dtype}, {k.dtype}, {v.dtype}")
            if k.shape != v.shape or k.shape[2] != head_dim:
                raise ValueError(f"k and v must be (total_k, H_kv, {head_dim}), got {tuple(k.shape)} and {tuple(v.shape)}")
            if num_heads % num_kv_heads != 0:
                raise ValueError(f"{num_heads} query heads cannot be split into groups of {num_kv_heads} KV heads")
            if head_dim not in (16, 32, 64, 128):
                raise ValueError(f"head_dim must be 16, 32, 64 or 128, got {head_dim}")
            if q.stride(2) != 1 or k.stride(2) != 1 or v.stride(2) != 1:
                raise ValueError("the head dimension of q, k and v must be contiguous")
            for name, cu, total in (("cu_seqlens_q", cu_seqlens_q, total_q), ("cu_seqlens_k", cu_seqlens_k, total_k)):
                if cu.dtype != torch.int32 or cu.dim() != 1 or cu.numel() < 2:
                    raise ValueError(f"{name} must be int32 of shape (B + 1,), got {cu.dtype} {tuple(cu.shape)}")
            if cu_seqlens_q.numel() != cu_seqlens_k.numel():
                raise ValueError(f"cu_seqlens_q and cu_seqlens_k describe {cu_seqlens_q.numel() - 1} and "
                                 f"{cu_seqlens_k.numel() - 1} sequences")
            bounds = torch.stack([cu_seqlens_q, cu_seqlens_k]).tolist()              # one host sync for both
            lens_q = [b - a for a, b in zip(bounds[0], bounds[0][1:])]
            lens_k = [b - a for a, b in zip(bounds[1], bounds[1][1:])]
            for name, cu, lens, total in (("cu_seqlens_q", bounds[0], lens_q, total_q),
                                          ("cu_seqlens_k", bounds[1], lens_k, total_k)):
                if cu[0] != 0 or cu[-1] != total or min(lens) < 0:
                    raise ValueError(f"{name} must start at 0, never decrease and end at {total}, got {cu}")
            for b, (sq, sk) in enumerate(zip(lens_q, lens_k)):
                if sq > 0 and sk == 0:
                    raise ValueError(f"sequence {b} has {sq} queries and no key: its softmax is undefined")
                if causal and sq > sk:
                    raise ValueError(f"sequence {b}: causal attention with S_q = {sq} > S_k = {sk} would leave "
                                     "rows with no visible key (the queries are the last S_q positions)")
            out = torch.empty_like(q)
            if total_q == 0:
                return out
            scale = 1.0 / math.sqrt(head_dim) if sm_scale is None else sm_scale
            if q.is_cuda:
                block_m, block_n, extra = 128, 64, {"num_warps": 8, "num_stages": 3}
            else:
                block_m, block_n, extra = 16, 16, {}
            grid = (triton.cdiv(max(lens_q), block_m), len(lens_q) * num_heads)
            varlen_attention_kernel[grid](                                            # cu_seqlens read at ptr + b:
                q, k, v, out, cu_seqlens_q.contiguous(), cu_seqlens_k.contiguous(),  # a strided view is copied
                q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
                out.stride(0), out.stride(1),
                num_heads, num_kv_heads, scale * math.log2(math.e),
                HEAD_DIM=head_dim, BLOCK_M=block_m, BLOCK_N=block_n, IS_CAUSAL=causal, **extra,
            )
            return out
            ### END SOLUTION
        ''',
    )
    lesson.md(r"""
        ## 3. Exercise `pack_sequences`: from a list to `cu_seqlens`

        The other half of every varlen API is the packing. Write `pack_sequences(seqs)`: given a list of
        `(L_b, H, d)` tensors (some may have $L_b = 0$), return the packed `(sum L_b, H, d)` tensor, the int32
        `cu_seqlens` of shape `(B + 1,)` and `max_seqlen` (a Python int, what `flash_attn_varlen_func` takes to size its
        grid without reading `cu_seqlens` on the host). Refuse an empty list and tensors whose `(H, d)` or dtypes
        differ. And `unpack_sequences(packed, cu_seqlens)`, the inverse: the list of views.
    """)
    lesson.exercise(
        "pack_sequences",
        r'''
        def pack_sequences(seqs: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, int]:
            """[(L_b, H, d)] -> (packed (sum L_b, H, d), cu_seqlens int32 (B + 1,), max_seqlen)."""
            # TODO: validate (a non-empty list of 3-D tensors with the same (H, d), dtype and device)
            # TODO: concatenate along the tokens; cu_seqlens = [0, cumulative sums of L_b] as int32; max of the L_b
            ### BEGIN SOLUTION
            if not seqs:
                raise ValueError("pack_sequences needs at least one sequence")
            first = seqs[0]
            for i, s in enumerate(seqs):
                if s.dim() != 3 or s.shape[1:] != first.shape[1:] or s.dtype != first.dtype or s.device != first.device:
                    raise ValueError(f"sequence {i} is {s.dtype} {tuple(s.shape)}; expected (L, {first.shape[1]}, "
                                     f"{first.shape[2]}) {first.dtype} on {first.device}")
            lengths = [s.shape[0] for s in seqs]
            cu_seqlens = torch.zeros(len(seqs) + 1, dtype=torch.int32, device=first.device)
            cu_seqlens[1:] = torch.tensor(lengths, device=first.device).cumsum(0)
            return torch.cat(seqs, dim=0), cu_seqlens, max(lengths)
            ### END SOLUTION


        def unpack_sequences(packed: torch.Tensor, cu_seqlens: torch.Tensor) -> list[torch.Tensor]:
            """The inverse of pack_sequences: views of packed, one per sequence."""
            # TODO: one slice per consecutive pair of cu_seqlens entries
            ### BEGIN SOLUTION
            bounds = cu_seqlens.tolist()
            return [packed[a:b] for a, b in zip(bounds, bounds[1:])]
            ### END SOLUTION
        ''',
    )
    lesson.md(r"""
        ## 4. What padding costs, in a picture

        The cell below draws, for batches of 16 sequences with lengths uniform on $[1, L]$, the ratio of causal
        attention work done by a padded batch ($B \cdot L_{max}^2$) to the packed one ($\sum_b L_b^2$), and then runs
        your kernel on a small packed batch with a chunked-prefill sequence, printing each sequence's error against a
        float64 loop.
    """)
    lesson.code(r"""
        rng = np.random.default_rng(0)
        caps = [64, 256, 1024, 4096, 16384]
        ratios = []
        for cap in caps:
            lengths = rng.integers(1, cap + 1, size=(2000, 16))
            ratios.append(np.mean(16 * lengths.max(axis=1) ** 2 / (lengths**2).sum(axis=1)))
        fig, ax = plt.subplots(figsize=(6, 3.4))
        ax.plot(caps, ratios, "o-")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("longest allowed length L (lengths uniform on [1, L], batch 16)")
        ax.set_ylabel("padded / packed attention FLOPs")
        ax.set_title("causal attention work wasted by padding")
        ax.grid(alpha=0.3)
        plt.show()

        def bottom_right_reference(q, k, v, causal):
            # float64, one sequence: q (S_q, H, d), k v (S_k, H_kv, d)
            group = q.shape[1] // k.shape[1]
            qd, kd, vd = (t.double().transpose(0, 1) for t in (q, k, v))
            kd, vd = kd.repeat_interleave(group, 0), vd.repeat_interleave(group, 0)
            s = qd @ kd.transpose(1, 2) / math.sqrt(q.shape[-1])
            if causal:
                s_q, s_k = q.shape[0], k.shape[0]
                visible = torch.arange(s_k)[None, :] <= torch.arange(s_q)[:, None] + (s_k - s_q)
                s = s.masked_fill(~visible, float("-inf"))
            return (s.softmax(-1) @ vd).transpose(0, 1)

        lens_q, lens_k = [5, 1, 0, 19], [5, 9, 0, 40]  # a full sequence, a decode step, an empty one, a prefill chunk
        qs = [torch.randn(n, 4, 16, device=DEVICE).half() for n in lens_q]
        ks = [torch.randn(n, 2, 16, device=DEVICE).half() for n in lens_k]
        vs = [torch.randn(n, 2, 16, device=DEVICE).half() for n in lens_k]
        try:
            q, cu_q, _ = pack_sequences(qs)
            k, cu_k, _ = pack_sequences(ks)
            v, _, _ = pack_sequences(vs)
            out = varlen_attention(q, k, v, cu_q, cu_k, causal=True)
            for b, o in enumerate(unpack_sequences(out, cu_q)):
                if lens_q[b]:
                    err = (o.double().cpu() - bottom_right_reference(qs[b].cpu(), ks[b].cpu(), vs[b].cpu(), True)).abs().max()
                    print(f"sequence {b}: S_q={lens_q[b]:2d} S_k={lens_k[b]:2d}  max |error| = {float(err):.1e}")
                else:
                    print(f"sequence {b}: empty")
        except NotImplementedError:
            print("Implement varlen_attention and pack_sequences first.")
    """)
    lesson.md(r"""
        ## 5. Speed (GPU only)

        `python -m llm_algo bench p03.varlen_attention` times a causal packed batch of 16 sequences with lengths
        between 256 and 4096 (32 query heads, 8 KV heads, $d = 128$, bf16) three ways: your kernel on the packed
        tensor; a Python loop of `F.scaled_dot_product_attention(..., is_causal=True)` per sequence, with PyTorch's
        default backend choice (the benchmark names the backend in the row; on an H200 with bf16 it is cuDNN); and one
        SDPA call on the batch padded to the longest sequence (right padding, so `is_causal=True` is still right
        for the real rows), also the default backend. TFLOP/s count only the real work,
        $\sum_b 2 \cdot 2 \cdot H \cdot d \cdot L_b^2 / 2$.

        **Reading the numbers** (one run of `python -m llm_algo bench p03.varlen_attention` with the reference
        solutions on an NVIDIA H200, Triton 3.6, torch 2.11, CUDA 13.0; your GPU will differ). 16 causal sequences of
        649 to 3696 tokens, 38264 in all; TFLOP/s of real work:

        | row | ms | TFLOP/s of real work |
        |---|---|---|
        | `varlen_attention` (yours, packed, one launch) | 2.78 | 312 |
        | SDPA per sequence, 16 calls, default backend: `CUDNN_ATTENTION` | 1.98 | 438 |
        | SDPA on the batch padded to 3696, default backend: `CUDNN_ATTENTION` | 2.95 | 294 |

        The backend is named by the benchmark itself (`llm_algo.bench.sdpa_backend_name` asks PyTorch's dispatcher):
        on this H200 with bf16, both SDPA rows ran cuDNN attention. The packed kernel is 1.06 times faster than
        padding, but cuDNN run sequence by sequence is 1.41 times faster than it.

        *Padding.* For these 16 lengths the padded call computes $16 \cdot 3696^2 / \sum_b L_b^2 = 2.07$ times the
        needed work (section 1's 2.7 is for lengths uniform on $[1, 4096]$; these were drawn from $[256, 4096]$), yet
        it takes only 1.49 times as long as the per-sequence loop. Counted over the work it actually does, the padded
        cuDNN call runs at about $294 \cdot 2.07 = 607$ TFLOP/s. One large launch keeps cuDNN's kernel busy, while in
        the loop the short sequences likely give grids too small to fill the GPU (32 heads times a few query tiles,
        with a causal tail). Our packed kernel avoids both the padding and the 16 launches, and still loses to the
        loop.

        *Against cuDNN.* The expectation written before this run was that cuDNN would be about 1.25 times faster than
        this kernel. It measured 1.41 times. In the same run, the dense kernel of `p03.flash_attention_fwd` ran the
        causal $4 \times 32 \times 4096$ case at 352 TFLOP/s, 1.09 times SDPA's FlashAttention-2 backend (323). The
        packed kernel uses the same tiles and loop, and gets 312 here, 0.89 times that. The likely reason is shorter
        sequences: with lengths down to 649, a larger share of the key blocks lie on the causal diagonal, where the
        masked loop runs. The remaining gap to cuDNN is most likely the Hopper-specific machinery of cuDNN's kernels,
        as in FlashAttention-3: TMA loads from producer warps, and the softmax of one tile overlapped with the matmuls
        of the next. This kernel does the two in turn, in the same warps. This run does not measure either point. An
        Nsight Compute comparison of tensor-pipe utilisation in the two kernels would, as would timing this kernel on
        16 sequences of one length.
    """)
    lesson.stop()
    lesson.md(r"""
        ## 6. Reading the solutions

        **`varlen_attention_kernel`.** The program id's second axis packs (sequence, head) as in the dense kernel's
        (batch, head). Four scalar loads give the sequence's start and length in Q and K; a tile past the end
        returns before anything else, which is also what makes an empty sequence free (without it the results would
        still be right, since every row of such a tile is masked at the store, but the program would attend over
        keys for nothing). All addresses are
        `(start + row) * stride`, in int64. `offset = S_k - S_q` shifts the causal diagonal; the unmasked loop covers
        the key blocks that end before the tile's first row can see past them, the masked loop the diagonal band and
        a last partial block. The store is masked to the sequence's rows, so a tile never writes into the next
        sequence's tokens.

        **`varlen_attention`.** The host reads `cu_seqlens` once, both tensors stacked, to validate them and to size
        the grid. FlashAttention's `flash_attn_varlen_func` takes `max_seqlen_q` and `max_seqlen_k` as arguments
        instead and does no validation, so that it never synchronises; a serving engine knows the lengths when it
        builds the batch.

        **The usual mistakes, and why they are wrong**:
        - *The top-left causal mask* (`offset` left out): right when $S_q = S_k$, wrong for chunked prefill.
        - *K addressed with Q's start* (`cu_seqlens_q` for both): right only when every sequence has $S_q = S_k$.
        - *The key loop ending at `m0 + BLOCK_M`* without the offset: the mask is right but the last
          `S_k - S_q` visible keys of a prefill chunk are never visited.
        - *`head % num_kv_heads`* for the KV head: a GQA layout that no model uses.
        - *An unmasked store*: a tile's rows past the sequence's end overwrite the next sequence's rows, or the
          memory after the buffer for the last sequence (the guard check sees it).
        - *No validation of `cu_seqlens`*: an int64 tensor would be read as int32 pairs; a wrong last entry reads
          outside `q`. *No check of $S_q \le S_k$* under a causal mask: rows with no visible key.
        - *`cu_seqlens` in int64*, or *without its leading 0*, from `pack_sequences`; *inclusive ends* in
          `unpack_sequences`.

        **Production.** FlashAttention's `flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
        max_seqlen_k, causal=True)` is this interface (bottom-right causal since 2.1). vLLM's FlashAttention backend
        calls it for prefill and chunked-prefill batches, with the KV cache stored in pages (a block table maps
        each sequence's positions to cache blocks); Hugging Face transformers reaches it with `attn_implementation="flash_attention_2"`
        and `DataCollatorWithFlattening`, which packs a training batch and passes `position_ids` from which the
        `cu_seqlens` are derived. PyTorch exposes packed sequences through nested tensors (`torch.nested`, jagged
        layout) in SDPA.
    """)
    lesson.mistakes()
    return lesson
