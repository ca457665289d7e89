"""Source of 03_Triton_Kernels/06_RoPE.ipynb (build with `python -m llm_algo build p03.rope`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p03.rope",
        path="03_Triton_Kernels/06_RoPE.ipynb",
        title_en="Fused RoPE: rotating q and k in place",
        title_zh="融合 RoPE：原地旋转 q 与 k",
        difficulty="medium",
        device="cpu",
        minutes=80,
        prerequisites=["p02.rope", "p03.fused_elementwise"],
        triton=True,
    )
    lesson.title(
        intro=r"""
        Every attention layer of Llama, Qwen, Mistral and DeepSeek rotates its queries and keys by their positions
        before the scores. The math (lesson `p02.rope`) is a handful of multiplies per element; what costs time is
        memory. Hugging Face's `apply_rotary_pos_emb` is written as `q * cos + rotate_half(q) * sin`: a gather of the
        tables, a `cat` of two halves, two multiplies and an add, each a kernel with its own trip through HBM, for
        q and again for k: about 8% of the copy bandwidth in this project's H200 measurement (issue 4). A fused kernel reads each element of
        q and k once and writes it once, in place, and the cos/sin row of a token once for all of its heads.

        **You will implement** the in-place rotary kernel for q and k in the `(batch, seq, heads, head_dim)` layout,
        rotate-half convention (Hugging Face compatible), with different query and key head counts (GQA), per-sequence
        position offsets for decoding, and the inverse rotation; then a `torch.autograd.Function` whose backward is
        that inverse rotation. **Graded against** Hugging Face's `apply_rotary_pos_emb` in float64 with tables from the
        closed form, float64 autograd through it, a hand-checkable rotation by one radian, and guard elements around
        every head that the kernel must not touch.
        """,
    )
    lesson.md(r"""
        ## 本节要点

        - **问题**：RoPE 的计算量很小，耗时在显存访问；Hugging Face 的 `q * cos + rotate_half(q) * sin` 拆成多个 kernel，q、k 各自多次往返 HBM。融合 kernel 对 q、k 的每个元素只读写一次（in-place），每个 token 的 cos/sin 行只读一次、供它的所有 head 共用。
        - **形状**：q 为 `(B, S, H_q, D)`，k 为 `(B, S, H_kv, D)`（GQA 下 $H_q \ne H_{kv}$）；cos/sin 表为 `(P, D/2)`；token $(b, s)$ 的位置 $m = \text{offset}_b + s$（prefill 时 offset 为 0，decode 时为序列当前长度）。
        - **公式（rotate-half 约定）**：第 $i$ 维与第 $i + D/2$ 维成对，$x_1' = x_1\cos m\theta_i - x_2\sin m\theta_i$，$x_2' = x_2\cos m\theta_i + x_1\sin m\theta_i$。
        - **实现**：grid 为 `(B * S,)`，每个 program 处理一个 token 的所有 q head 和 k head；`INVERSE` 为 `tl.constexpr`，逆旋转只需把 sin 取负；在 fp32 中计算后写回。
        - **autograd**：旋转是正交变换，反向就是逆旋转（转置）；forward 要旋转副本而不是调用者的 q、k，backward 要为 forward 的每个输入返回一个梯度。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. The operation, with shapes

        Queries $q \in \mathbb{R}^{B \times S \times H_q \times D}$ and keys $k \in \mathbb{R}^{B \times S \times H_{kv}
        \times D}$, $H_{kv} \le H_q$ (GQA: Llama-3-8B has 32 query heads and 8 key heads of $D = 128$). Token $(b, s)$
        sits at position $m = \text{offset}_b + s$: 0-based in a prefill, and the current length of sequence $b$ when
        decoding one token ($S = 1$) into a KV cache, different for every sequence of a batch. With
        $\theta_i = \text{base}^{-2i/D}$, $i = 0, \dots, D/2 - 1$, the tables are

        $$
        C_{m,i} = \cos(m\,\theta_i), \qquad S_{m,i} = \sin(m\,\theta_i), \qquad C, S \in \mathbb{R}^{P \times D/2}
        $$

        for $P$ positions. Rotate-half pairs coordinate $i$ with coordinate $i + D/2$ of each head
        ($x_1 = x_{[0, D/2)}$, $x_2 = x_{[D/2, D)}$):

        $$
        x_1' = x_1 \odot C_m - x_2 \odot S_m, \qquad x_2' = x_2 \odot C_m + x_1 \odot S_m .
        $$

        It is a rotation of each pair by the angle $m\theta_i$, so its inverse (and its transpose, which is what the
        backward needs) is the rotation by $-m\theta_i$: the same formula with $S$ negated.

        Hugging Face stores the tables as `(P, D)`, the half repeated (`torch.cat((freqs, freqs), dim=-1)`), so that
        `q * cos + rotate_half(q) * sin` broadcasts; the kernel needs only the first half. Given a `(P, D)` table,
        `cos[:, : D // 2]` is a view with row stride $D$ — one more reason to pass strides.

        **Traffic.** Reading and writing q and k once: $2 (H_q + H_{kv}) D b$ bytes per token, plus $2 \cdot 4 \cdot D/2$
        bytes of fp32 table row, shared by all heads of the token. For Llama-3-8B in bf16 that is 20 KiB of q/k per
        token against 512 B of table: the tables are noise, if each is read once per token and not once per head.
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt
        import torch
        import triton
        import triton.language as tl


        def rope_tables(num_positions: int, head_dim: int, base: float = 10000.0, device=None):
            '''cos and sin of m * theta_i for positions m < num_positions: each (num_positions, head_dim // 2) float32.'''
            theta = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)  # (D/2,)
            angles = torch.arange(num_positions, dtype=torch.float64)[:, None] * theta        # (P, D/2)
            return angles.cos().float().to(device), angles.sin().float().to(device)
    """)
    lesson.md(r"""
        ## 2. One program per token

        ```
        grid = (B * S,)          program t -> b = t // S, s = t % S, m = offsets[b] + s
        load C[m, 0:D/2], S[m, 0:D/2] once                                  (BLOCK_HALF,)
        q heads as a tile:  rows = head h < H_q, cols = i < D/2             (BLOCK_QH, BLOCK_HALF)
            x1 = q[b, s, h, i]        x2 = q[b, s, h, i + D/2]              two masked tile loads
            store x1*C - x2*S to x1's place, x2*C + x1*S to x2's place    (in place: same addresses)
        k heads: the same with H_kv and k's strides
        ```

        The tables broadcast over the head axis (`cos[None, :]`). Two masks per tile: heads `h < H`, because
        `BLOCK_QH = next_power_of_2(H_q)` may exceed $H_q$ (e.g. 40 heads, or 6 in the checks), and `i < D/2`,
        because `D/2` need not be a power of two (Phi-2 has $D = 80$). Addresses come from three strides per tensor
        (batch, seq, head; the last dimension must be contiguous): q and k are often views of one fused QKV
        projection, `qkv.view(B, S, H_q + 2 H_kv, D)` split along the heads, and writing through such a view must not
        touch `v`.

        `INVERSE` is a `tl.constexpr`: the inverse rotation negates the sine, a compile-time choice. Upcast to fp32 after
        loading, store in the tensor's dtype.

        ## 3. Exercise `rope`: the in-place kernel

        Keep the kernel's signature (the check launches it on guarded buffers). The wrapper checks the layout, chooses
        the blocks, and launches; it returns `q` and `k` themselves, rotated.
    """)
    lesson.exercise(
        "rope",
        r'''
        @triton.jit
        def rope_kernel(
            # Pointers
            q_ptr, k_ptr, cos_ptr, sin_ptr, offsets_ptr,
            # Strides
            q_batch_stride, q_seq_stride, q_head_stride,
            k_batch_stride, k_seq_stride, k_head_stride,
            table_row_stride,
            # Shapes
            seq_len, num_q_heads, num_kv_heads, half_dim,
            # Meta-parameters
            BLOCK_QH: tl.constexpr, BLOCK_KH: tl.constexpr, BLOCK_HALF: tl.constexpr, INVERSE: tl.constexpr,
        ):
            """Rotate, in place, all query and key heads of the token (b, s) = divmod(program_id, seq_len)."""
            token = tl.program_id(axis=0).to(tl.int64)
            batch = token // seq_len
            seq = token % seq_len
            # TODO: the position m = offsets[batch] + seq; masked fp32 loads of cos[m, :] and sin[m, :] (negate sin if INVERSE)
            # TODO: for q: a (BLOCK_QH, BLOCK_HALF) tile of pointers to x1 (x2 is half_dim further); mask heads and columns
            # TODO:   load x1, x2 (fp32), store x1*cos - x2*sin and x2*cos + x1*sin in place
            # TODO: the same for k with its own strides and num_kv_heads
            ### BEGIN SOLUTION
            position = tl.load(offsets_ptr + batch).to(tl.int64) + seq
            cols = tl.arange(0, BLOCK_HALF)                                           # (BLOCK_HALF,)
            col_mask = cols < half_dim
            cos = tl.load(cos_ptr + position * table_row_stride + cols, mask=col_mask, other=0.0).to(tl.float32)
            sin = tl.load(sin_ptr + position * table_row_stride + cols, mask=col_mask, other=0.0).to(tl.float32)
            if INVERSE:
                sin = -sin
            cos = cos[None, :]                                                        # (1, BLOCK_HALF)
            sin = sin[None, :]

            q_heads = tl.arange(0, BLOCK_QH)                                          # (BLOCK_QH,)
            q_mask = (q_heads[:, None] < num_q_heads) & col_mask[None, :]             # (BLOCK_QH, BLOCK_HALF)
            q_first = q_ptr + batch * q_batch_stride + seq * q_seq_stride + q_heads[:, None] * q_head_stride + cols[None, :]
            q1 = tl.load(q_first, mask=q_mask, other=0.0).to(tl.float32)
            q2 = tl.load(q_first + half_dim, mask=q_mask, other=0.0).to(tl.float32)
            tl.store(q_first, (q1 * cos - q2 * sin).to(q_ptr.dtype.element_ty), mask=q_mask)
            tl.store(q_first + half_dim, (q2 * cos + q1 * sin).to(q_ptr.dtype.element_ty), mask=q_mask)

            k_heads = tl.arange(0, BLOCK_KH)                                          # (BLOCK_KH,)
            k_mask = (k_heads[:, None] < num_kv_heads) & col_mask[None, :]            # (BLOCK_KH, BLOCK_HALF)
            k_first = k_ptr + batch * k_batch_stride + seq * k_seq_stride + k_heads[:, None] * k_head_stride + cols[None, :]
            k1 = tl.load(k_first, mask=k_mask, other=0.0).to(tl.float32)
            k2 = tl.load(k_first + half_dim, mask=k_mask, other=0.0).to(tl.float32)
            tl.store(k_first, (k1 * cos - k2 * sin).to(k_ptr.dtype.element_ty), mask=k_mask)
            tl.store(k_first + half_dim, (k2 * cos + k1 * sin).to(k_ptr.dtype.element_ty), mask=k_mask)
            ### END SOLUTION


        def rope_(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, offsets: torch.Tensor,
                  inverse: bool = False):
            """Rotary embedding applied in place to q and k; returns (q, k).

            q: (B, S, H_q, D), k: (B, S, H_kv, D), same dtype, D even, unit stride along D (any other strides)
            cos, sin: (P, D/2) or (P, D) float32 tables, unit column stride; only the first D/2 columns are used
            offsets: (B,) integer of any stride (the kernel reads offsets_ptr + b: pass offsets.contiguous()), the
                     position of token (b, s) is offsets[b] + s (must be < P)
            inverse: rotate by -m * theta (the transpose, used by the backward)
            """
            # TODO 1: check constraints with messages (4-D, matching B, S, D and dtype, D even, unit stride along D,
            #         table shapes, offsets of shape (B,))
            # TODO 2: block sizes: next powers of two of H_q, H_kv and D/2
            # TODO 3: launch B * S programs with the strides of q, k and the table; return (q, k)
            ### BEGIN SOLUTION
            if q.dim() != 4 or k.dim() != 4 or q.shape[:2] != k.shape[:2] or q.shape[3] != k.shape[3] or q.dtype != k.dtype:
                raise ValueError(f"q (B, S, H_q, D) and k (B, S, H_kv, D) must agree, got {tuple(q.shape)} {tuple(k.shape)}")
            batch, seq_len, num_q_heads, head_dim = q.shape
            if head_dim % 2 or q.stride(3) != 1 or k.stride(3) != 1:
                raise ValueError(f"head_dim must be even with unit stride, got D={head_dim}, strides {q.stride()} {k.stride()}")
            half_dim = head_dim // 2
            if cos.shape != sin.shape or cos.dim() != 2 or cos.shape[1] not in (half_dim, head_dim) or cos.stride() != sin.stride() or cos.stride(1) != 1:
                raise ValueError(f"cos and sin must be (P, {half_dim}) or (P, {head_dim}) with unit column stride, got {tuple(cos.shape)}")
            if offsets.shape != (batch,):
                raise ValueError(f"offsets must have shape ({batch},), got {tuple(offsets.shape)}")
            rope_kernel[(batch * seq_len,)](
                q, k, cos, sin, offsets.contiguous(),                                 # a strided view: copied
                q.stride(0), q.stride(1), q.stride(2),
                k.stride(0), k.stride(1), k.stride(2),
                cos.stride(0),
                seq_len, num_q_heads, k.shape[2], half_dim,
                BLOCK_QH=triton.next_power_of_2(num_q_heads), BLOCK_KH=triton.next_power_of_2(k.shape[2]),
                BLOCK_HALF=triton.next_power_of_2(half_dim), INVERSE=inverse, num_warps=4,
            )
            return q, k
            ### END SOLUTION
        ''',
    )
    lesson.md(r"""
        ### What the rotation does, drawn

        One head of $D = 64$ with every coordinate pair set to $(1, 0)$, rotated at positions 0 to 63 by your kernel:
        each line is one pair $i$, tracing $\cos(m\theta_i)$ over $m$. The first pairs spin fast (a full turn every
        $2\pi$ positions), the last ones barely move: the spectrum of wavelengths from $2\pi$ to $2\pi \cdot
        \text{base}$ that lets attention read both local and long-range offsets.
    """)
    lesson.code(r"""
        positions, head_dim = 64, 64
        cos_table, sin_table = rope_tables(positions, head_dim, device=DEVICE)
        probe = torch.zeros(1, positions, 1, head_dim, device=DEVICE)
        probe[..., : head_dim // 2] = 1.0  # x1 = 1, x2 = 0 in every pair
        keys = torch.zeros(1, positions, 1, head_dim, device=DEVICE)
        try:
            rope_(probe, keys, cos_table, sin_table, torch.zeros(1, dtype=torch.int32, device=DEVICE))
        except NotImplementedError:
            print("Implement rope_ first.")
        else:
            fig, axis = plt.subplots(figsize=(6.5, 3))
            for pair in (0, 2, 4, 8, 16, 31):
                axis.plot(probe[0, :, 0, pair].cpu(), label=f"pair {pair}")
            axis.set_xlabel("position m"); axis.set_ylabel("x1' = cos(m theta_i)"); axis.legend(ncol=3, fontsize=8)
            fig.tight_layout(); plt.show()
    """)
    lesson.md(r"""
        ## 4. Exercise `rotary_embedding`: an autograd Function

        Training needs gradients through RoPE. The rotation $R_m$ is linear and orthogonal, so for $y = R_m x$:
        $\partial L / \partial x = R_m^\top\, \partial L / \partial y = R_{-m}\, \partial L / \partial y$ — the inverse
        rotation of the incoming gradient, which is the same kernel with `inverse=True`. No tensor needs to be saved;
        only the tables and offsets (inputs that get no gradient).

        Autograd and in-place updates of a function's *inputs* need care (`ctx.mark_dirty`), so this Function is
        out of place: `forward` rotates **copies** of q and k (`contiguous` copies are fine), leaving the caller's
        tensors untouched, and `backward` rotates copies of the incoming gradients back. It returns one gradient per
        input of `forward`: `None` for the tables and offsets.
    """)
    lesson.exercise(
        "rotary_embedding",
        r'''
        class RotaryEmbedding(torch.autograd.Function):
            """(q', k') = RoPE(q, k) out of place with the fused kernel; use RotaryEmbedding.apply(q, k, cos, sin, offsets)."""

            @staticmethod
            def forward(ctx, q, k, cos, sin, offsets):
                # TODO: remember the tables and offsets; rotate copies of q and k; return them
                ### BEGIN SOLUTION
                ctx.save_for_backward(cos, sin, offsets)
                return rope_(q.clone(), k.clone(), cos, sin, offsets)
                ### END SOLUTION

            @staticmethod
            def backward(ctx, d_q, d_k):
                # TODO: rotate copies of the gradients by the inverse rotation; None for cos, sin and offsets
                ### BEGIN SOLUTION
                cos, sin, offsets = ctx.saved_tensors
                d_q, d_k = rope_(d_q.contiguous().clone(), d_k.contiguous().clone(), cos, sin, offsets, inverse=True)
                return d_q, d_k, None, None, None
                ### END SOLUTION
        ''',
    )
    lesson.md(r"""
        ## 5. Bandwidth (GPU only)

        With a CUDA GPU of compute capability 8.0 or newer, the cell below times your in-place `rope_` against the
        Hugging Face formulation in eager PyTorch (`q * cos + rotate_half(q) * sin`, out of place) at Llama-3-8B's
        head layout (32 query heads, 8 key heads, $D = 128$), batch 4, growing sequence length, bf16, in GB/s of
        $2 (H_q + H_{kv}) D b$ bytes per token. `python -m llm_algo bench p03.rope` adds `torch.compile` of the same
        PyTorch code and a device-to-device copy of q and k measured in the same run.
    """)
    lesson.code(r"""
        if lesson.policy.triton_path != "compiled":
            print("Benchmarks need a CUDA GPU with compute capability >= 8.0; skipped here.")
        else:
            def rotate_half(x):
                return torch.cat((-x[..., x.shape[-1] // 2 :], x[..., : x.shape[-1] // 2]), dim=-1)

            def hf_style(q, k, cos, sin, positions):
                cos, sin = cos[positions][:, :, None].to(q.dtype), sin[positions][:, :, None].to(q.dtype)  # (B, S, 1, D)
                return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin

            @triton.testing.perf_report(triton.testing.Benchmark(
                x_names=["seq_len"], x_vals=[512 * 2 ** k for k in range(0, 5)], x_log=True,
                line_arg="provider", line_vals=["fused", "eager"], line_names=["your rope_", "HF-style eager"],
                ylabel="GB/s", plot_name="RoPE on q and k, B=4, 32/8 heads, D=128, bf16", args={"batch": 4},
            ))
            def bandwidth(batch, seq_len, provider):
                q = torch.randn(batch, seq_len, 32, 128, device=DEVICE, dtype=torch.bfloat16)
                k = torch.randn(batch, seq_len, 8, 128, device=DEVICE, dtype=torch.bfloat16)
                cos, sin = rope_tables(seq_len, 128, base=500000.0, device=DEVICE)
                offsets = torch.zeros(batch, dtype=torch.int32, device=DEVICE)
                positions = torch.arange(seq_len, device=DEVICE).expand(batch, seq_len)
                full_cos, full_sin = torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)
                fn = {
                    "fused": lambda: rope_(q, k, cos, sin, offsets),
                    "eager": lambda: hf_style(q, k, full_cos, full_sin, positions),
                }[provider]
                ms = triton.testing.do_bench(fn, return_mode="median")
                return 2 * (q.numel() + k.numel()) * q.element_size() * 1e-9 / (ms * 1e-3)

            try:
                bandwidth.run(print_data=True, show_plots=True)
            except NotImplementedError:
                print("Implement rope_ first: this benchmark times your kernel.")
    """)
    lesson.md(r"""
        **Reading the numbers** (one run of `python -m llm_algo bench p03.rope` with the reference solution on an NVIDIA
        H200, Triton 3.6, torch 2.11; your GPU will differ). Per token the kernel streams $2 (H_q + H_{kv}) D b$ bytes
        and does 6 FLOPs per pair: a pure bandwidth kernel, whose ceiling is the device-to-device copy of q and k,
        4005 GB/s in this run. At B = 4, S = 4096, 32/8 heads, D = 128 in bf16, in place on q and k, `rope_` ran at
        3681 GB/s, 92% of the copy, ahead of `torch.compile` (3204, 80%): the course's target (≥ 90% of the copy and at
        least `torch.compile`) is met. What keeps a per-token kernel below the copy: each program moves only
        $(H_q + H_{kv}) D b$ = 10 KiB each way at Llama-3-8B's layout, so many programs must be in flight per SM to
        cover HBM latency (the batch × sequence grid provides tens of thousands); the x1 and x2 loads of a head are two
        half-rows rather than one contiguous row (still whole 128-byte segments at $D = 128$ in bf16); and the table
        rows, read once per token and not counted by the formula, add at most about 2.5%. This run does not say how
        the 8 points split between these. HF-style eager materialises `rotate_half` (a `cat`), the gathered tables and
        the products, several full passes over q and k, and reached 314 GB/s, 8% of the copy and a twelfth of the
        fused kernel. `torch.compile` fuses that code into out-of-place kernels that write new q and k tensors; what
        costs it the 12 points it trails your kernel by was not measured.
    """)
    lesson.stop()
    lesson.md(r"""
        ## 6. Reading the solutions

        **`rope_kernel`.** `program_id` as int64 before it meets a stride (B·S·H·D passes $2^{31}$ at long contexts).
        The position is `offsets[batch] + seq`, so one kernel serves a prefill (offsets 0), a decode step (S = 1,
        offsets = lengths so far) and a chunked prefill (offsets = chunk starts). The table row is loaded once and
        broadcast over the heads with `[None, :]`; the head tile is `(BLOCK_QH, BLOCK_HALF)` and `x2` is the same
        tile shifted by `half_dim` elements. Loads and stores use the same addresses: in place, with no extra buffer,
        because each program owns its token's heads and nothing else reads them during the kernel.
        Both masks, heads and columns, are needed: `next_power_of_2` pads both axes.

        **`rope_`.** Strides for batch, sequence and head, so q and k may be views of a fused QKV projection; a
        `(P, D)` Hugging Face table works through its row stride. Offsets are not range-checked on the host: that
        would need `offsets.max().item()`, a device synchronisation per call — production kernels trust the caller
        (and `p03.debugging` shows how to catch such bugs with the interpreter).

        **`RotaryEmbedding`.** Orthogonality makes the backward the inverse rotation, which needs no saved
        activation at all. `clone` keeps the Function out of place.

        **The usual mistakes, and why they are wrong**: the interleaved (GPT-J / Meta)
        pairing instead of rotate-half — both are "RoPE", and a checkpoint trained with one gives garbage with the
        other; the sine with the wrong sign (rotating backwards); the offsets ignored (right for a prefill, wrong for
        every decode step); k processed with the query head count (writing into `v` of a fused QKV buffer); a
        missing column mask when $D/2$ is not a power of two; `inverse` ignored; the backward rotating forwards; a
        forward that rotates the caller's tensors in place.

        **Production.** vLLM's rotary kernels (`rotary_embedding` in CUDA, plus Triton variants) take flattened
        `positions` (one per token), a `cos_sin_cache` of shape `(max_positions, D)` holding cos in the first half and
        sin in the second, and rotate q and k in place, with an `is_neox_style` flag choosing rotate-half or
        interleaved. Liger-Kernel's `LigerRopeFunction` launches one program per token over padded head tiles as
        here, and its backward is the forward kernel with the sine negated. FlashAttention's and FlashInfer's
        attention kernels can apply RoPE to q and k inside the attention kernel itself (fused on load), removing even
        this pass; for long contexts with scaling (YaRN, Llama 3.1's `rope_scaling`) only the tables change.
    """)
    lesson.mistakes()
    return lesson
