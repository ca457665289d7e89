"""Source of 03_Triton_Kernels/18_Multi_LoRA.ipynb (build with `python -m llm_algo build p03.multi_lora`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p03.multi_lora",
        path="03_Triton_Kernels/18_Multi_LoRA.ipynb",
        title_en="Multi-LoRA serving: SGMV shrink and expand kernels",
        title_zh="多 LoRA 服务：SGMV 的 shrink 与 expand 内核",
        difficulty="hard",
        device="cpu",
        minutes=100,
        prerequisites=["p03.matmul", "p02.lora"],
        triton=True,
    )
    lesson.title(
        intro=r"""
        A LoRA adapter is small: rank 16 on one $4096 \times 4096$ projection of Llama-3-8B is
        $16 \cdot (4096 + 4096) = 131\,072$ parameters, 0.8% of the projection. So one GPU can hold hundreds of
        adapters next to one base model, and a server that fine-tunes per customer (S-LoRA, Sheng et al. 2023, served
        2000 adapters on one A100; vLLM's `--enable-lora`, `--max-loras`) wants to batch requests of *different*
        adapters together: the base GEMM $x W^\top$ is shared, and each token adds its own adapter's
        $s_a (x A_a^\top) B_a^\top$. The obvious PyTorch version gathers every token's $A$ and $B$ (`A[ids]`) and runs a
        batched matmul: at 256 tokens, rank 16 and $4096 \to 4096$ in fp16 that gather copies
        $256 \cdot 16 \cdot 8192 \cdot 2$ bytes = 67 MB per projection, for 0.07 GFLOP of work. Punica (Chen et al.
        2023) named the fix **SGMV**, segmented gather matrix-vector multiplication: sort the tokens by adapter, and
        let each segment's programs read their adapter's weights once.

        **You will implement** the segments (tokens sorted by adapter id, $-1$ = no adapter), the **shrink** kernel
        ($x \to v = s_a\, x A_a^\top$, rank $r$) and the **expand** kernel ($y \mathrel{+}= v B_a^\top$), both reading
        and writing token rows through the sorted order, and `add_lora`, the layer's LoRA path. **Graded against** a
        per-token loop in float64, Hugging Face PEFT's mixed-adapter batch (`adapter_names=`) on a LoRA layer holding
        the same weights, and guard bytes around the outputs.
        """,
    )
    lesson.md(r"""
        ## 本节要点

        - **问题**：多租户服务中同一批 token 使用不同的 LoRA 适配器（adapter id，$-1$ 表示不用）；基座 GEMM $xW^\top$ 共享，每个 token 额外加上 $s_a (x A_a^\top) B_a^\top$。
        - **朴素做法**：`A[ids]`、`B[ids]` 为每个 token 复制一份权重再做 bmm，显存流量与 token 数成正比（256 个 token、rank 16、4096→4096 的 fp16 约 67 MB）。
        - **SGMV**：按 adapter id 稳定排序得到 `order`，相同 id 的连续 token 组成段（segment），`seg_offsets` 指向 `order`，`seg_adapter` 给出每段的 adapter；$-1$ 的 token 不属于任何段。
        - **shrink**：$v = s_a\, x A_a^\top$，形状 $(T, r)$，float32；**expand**：$y \mathrel{+}= v B_a^\top$，原地累加到基座输出。两个 kernel 都通过 `order` 间接读写 token 行，不需要拷贝 $x$。
        - **tl.dot 的约束**：$r$ 常为 8 或 16，而 GPU 上 `tl.dot` 每维需 ≥ 16，所以 rank 维用 `BLOCK_R = max(16, next_pow2(r))` 并用掩码补零。
        - **实测（H200，一次运行）**：4096 个 token 时 SGMV（fp16）0.489 ms，比 gather + bmm（torch.compile，0.906 ms）快 1.85 倍；64 个 token 时 0.460 ms，反而比它（0.073 ms）慢 6.3 倍。两种规模耗时几乎相同，说明时间主要花在每次调用的固定开销上，很可能是包装函数中多次设备到主机的同步和小算子，而不是 kernel 本身。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. The math with shapes

        $T$ tokens $x \in \mathbb{R}^{T \times d_{in}}$, base output $y_0 = x W^\top \in \mathbb{R}^{T \times d_{out}}$
        (a cuBLAS GEMM, shared by all tokens), $L$ adapters stacked as $A \in \mathbb{R}^{L \times r \times d_{in}}$,
        $B \in \mathbb{R}^{L \times d_{out} \times r}$ (PEFT's `lora_A.weight` and `lora_B.weight` layouts) and scales
        $s \in \mathbb{R}^{L}$ ($s_a = \alpha_a / r$, or $\alpha_a / \sqrt{r}$ with rsLoRA, as in `p02.lora`). With
        $a_t$ the adapter of token $t$:

        $$
        y_t = y_{0,t} + \begin{cases} s_{a_t}\, (x_t A_{a_t}^\top)\, B_{a_t}^\top & a_t \ge 0 \\ 0 & a_t = -1 \end{cases}
        \qquad
        \underbrace{x_t A_a^\top}_{\text{shrink: } d_{in} \to r} \qquad \underbrace{v_t B_a^\top}_{\text{expand: } r \to d_{out}}
        $$

        Two small GEMMs per segment, $2 r (d_{in} + d_{out})$ FLOPs per token: tiny, so the kernels are
        memory-bound, and what matters is that each adapter's $A_a$ and $B_a$ are read once per segment (per row tile),
        not once per token.

        ## 2. Segments

        ```
        adapter_ids  = [ 2, -1,  0,  2,  2, -1,  0]      (T = 7, L = 3 adapters)
        order        = [ 1,  5,  2,  6,  0,  3,  4]      stable argsort: the -1 tokens first, then adapter 0, 2
        sorted ids   = [-1, -1,  0,  0,  2,  2,  2]
        seg_offsets  = [ 2,  4,  7]                      segment s = order[seg_offsets[s] : seg_offsets[s+1]]
        seg_adapter  = [ 0,  2]                          adapter 1 is used by nobody: no segment
        ```

        In a serving engine the batch is usually already grouped: a request's tokens are contiguous and share one
        adapter, so Punica's SGMV takes segment boundaries directly. vLLM's Triton LoRA kernels
        (`vllm/lora/ops/triton_ops/`) do what this lesson does: they sort the token indices by LoRA id once per batch
        (`token_indices_sorted_by_lora_ids`, with the number of tokens and the start of each LoRA) and every kernel
        reads rows through that list.

        ## 3. The kernels' grid

        Segment lengths vary, from one decode token to thousands of prefill tokens. Launch a 2-D grid
        `(num_segments, cdiv(max_len, BLOCK_M))` (expand adds a third axis over output columns): program `(s, m)` takes
        rows `seg_offsets[s] + m * BLOCK_M + arange(BLOCK_M)` of segment $s$, and returns at once when that start is past
        the segment's end. Every program reads its segment's adapter id and scale; its rows are token ids
        `order[row]`, loaded with the row mask, and the $x$ and $y$ pointers are built from those token ids (a gather
        and a scatter inside the kernel, no copy of $x$).
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt
        import torch
        import triton
        import triton.language as tl
    """)
    lesson.md(r"""
        ## 4. Exercise `lora_segments`

        `lora_segments(adapter_ids, num_adapters)` returns `order (T,)` (stable argsort of the ids), `seg_offsets (S+1,)`
        and `seg_adapter (S,)`, all int64, for the $S$ adapters that at least one token uses, in increasing id. Tokens
        with id $-1$ sort first and belong to no segment, so `seg_offsets[0]` is their count. Refuse ids below $-1$ or
        at least `num_adapters` with a `ValueError`: an out-of-range id would read another tensor's memory as an
        adapter. `torch.unique_consecutive(..., return_counts=True)` finds the runs.
    """)
    lesson.exercise(
        "lora_segments",
        r'''
        def lora_segments(adapter_ids: torch.Tensor, num_adapters: int):
            """Tokens sorted by adapter, cut into one segment per used adapter.

            adapter_ids: (T,) integers in [-1, num_adapters); -1 = no adapter
            returns (order (T,) int64, seg_offsets (S+1,) int64, seg_adapter (S,) int64):
                    segment s holds tokens order[seg_offsets[s] : seg_offsets[s+1]], all using adapter seg_adapter[s]
            """
            if adapter_ids.dim() != 1:
                raise ValueError(f"adapter_ids must be (T,), got shape {tuple(adapter_ids.shape)}")
            # TODO: refuse ids < -1 or >= num_adapters
            # TODO: stable argsort; the -1 tokens come first and are skipped
            # TODO: runs of equal ids among the rest: their adapters and lengths; offsets start after the -1 tokens
            ### BEGIN SOLUTION
            ids = adapter_ids.long()
            if ids.numel() and (int(ids.min()) < -1 or int(ids.max()) >= num_adapters):
                bad = int(ids.min()) if int(ids.min()) < -1 else int(ids.max())
                raise ValueError(f"adapter id {bad} is outside [-1, {num_adapters})")
            order = torch.argsort(ids, stable=True)                                 # (T,)
            sorted_ids = ids[order]
            first = int((sorted_ids < 0).sum())                                     # tokens without an adapter
            seg_adapter, lengths = torch.unique_consecutive(sorted_ids[first:], return_counts=True)
            seg_offsets = torch.zeros(seg_adapter.numel() + 1, dtype=torch.int64, device=ids.device)
            seg_offsets[0] = first
            seg_offsets[1:] = first + torch.cumsum(lengths, dim=0)
            ### END SOLUTION
            return order, seg_offsets, seg_adapter
        ''',
    )
    lesson.md(r"""
        ## 5. Exercise `lora_shrink`: $x \to v = s_a\, x A_a^\top$

        One program: segment `s = program_id(0)`, row tile `m = program_id(1)`.

        1. `start, end = seg_offsets[s], seg_offsets[s + 1]`; `row0 = start + m * BLOCK_M`; return if `row0 >= end`.
        2. `adapter = seg_adapter[s]` (int64: `adapter * stride_al` grows with the number of adapters), `scale =
           scales[adapter]`; rows `row0 + arange(BLOCK_M)` masked by `< end`; tokens `tok = order[rows]` (masked load).
        3. The K loop: an $x$ tile `(BLOCK_M, BLOCK_K)` at `x_ptr + tok * stride_xm + k * stride_xk`, an $A_a^\top$ tile
           `(BLOCK_K, BLOCK_R)` at `a_ptr + adapter * stride_al + r * stride_ar + k * stride_ak`, masked along $k$ and
           along $r$ (`r < R`: `BLOCK_R` is at least 16 for `tl.dot`, ranks are often 8), `tl.dot` into float32.
        4. Store `acc * scale` into `v[tok, :R]` (float32), masked by rows and `r < R`.

        The wrapper `lora_shrink(x, A, scales, order, seg_offsets, seg_adapter)` returns `v (T, R)` float32, zero for
        tokens without an adapter (allocate with `torch.zeros`: the kernel never writes them). The scale is applied
        here, once; the expand kernel does not scale again. `launch_config(seg_offsets)` (given) returns the longest
        segment and the tile sizes for both wrappers.
    """)
    lesson.exercise(
        "lora_shrink",
        r'''
        @triton.jit
        def lora_shrink_kernel(
            x_ptr, a_ptr, scales_ptr, v_ptr, order_ptr, seg_offsets_ptr, seg_adapter_ptr,
            K, R,
            stride_xm, stride_xk, stride_al, stride_ar, stride_ak, stride_vm, stride_vr,
            BLOCK_M: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr, INPUT_PRECISION: tl.constexpr,
        ):
            """v[tok] = scale[a] * x[tok] @ A[a].T for the tokens of one row tile of one segment."""
            seg = tl.program_id(axis=0)
            pid_m = tl.program_id(axis=1)
            # TODO: the segment's start and end; return when this tile starts past the end
            # TODO: adapter id (int64) and scale; rows, row mask, token ids through order
            # TODO: K loop: x tile (BLOCK_M, BLOCK_K) from the token ids, A[a].T tile (BLOCK_K, BLOCK_R), tl.dot
            # TODO: store acc * scale into v[tok, r], masked by rows and r < R
            ### BEGIN SOLUTION
            start = tl.load(seg_offsets_ptr + seg)
            end = tl.load(seg_offsets_ptr + seg + 1)
            row0 = start + pid_m * BLOCK_M
            if row0 >= end:
                return
            adapter = tl.load(seg_adapter_ptr + seg).to(tl.int64)
            scale = tl.load(scales_ptr + adapter).to(tl.float32)
            rows = row0 + tl.arange(0, BLOCK_M)
            row_ok = rows < end
            tok = tl.load(order_ptr + rows, mask=row_ok, other=0).to(tl.int64)   # (BLOCK_M,) token ids
            offs_r = tl.arange(0, BLOCK_R)
            r_ok = offs_r < R
            offs_k = tl.arange(0, BLOCK_K)
            x_ptrs = x_ptr + tok[:, None] * stride_xm + offs_k[None, :] * stride_xk                     # (BM, BK)
            a_ptrs = a_ptr + adapter * stride_al + offs_k[:, None] * stride_ak + offs_r[None, :] * stride_ar  # (BK, BR)
            acc = tl.zeros((BLOCK_M, BLOCK_R), dtype=tl.float32)
            for step in range(0, tl.cdiv(K, BLOCK_K)):
                k_left = K - step * BLOCK_K
                xt = tl.load(x_ptrs, mask=row_ok[:, None] & (offs_k[None, :] < k_left), other=0.0)
                at = tl.load(a_ptrs, mask=(offs_k[:, None] < k_left) & r_ok[None, :], other=0.0)
                acc = tl.dot(xt, at, acc, input_precision=INPUT_PRECISION)
                x_ptrs += BLOCK_K * stride_xk
                a_ptrs += BLOCK_K * stride_ak
            v_ptrs = v_ptr + tok[:, None] * stride_vm + offs_r[None, :] * stride_vr
            tl.store(v_ptrs, acc * scale, mask=row_ok[:, None] & r_ok[None, :])
            ### END SOLUTION


        def block_r(rank: int) -> int:
            """The rank dimension's block: a power of two, at least 16 (tl.dot's smallest size on a GPU)."""
            return max(16, triton.next_power_of_2(rank))


        def launch_config(seg_offsets: torch.Tensor) -> dict:
            """The longest segment (the grid's row-tile axis is cdiv(longest, BLOCK_M)) and the tile sizes: 16-row
            tiles under the interpreter and for short (decode) segments, 64 rows for prefill-sized ones."""
            longest = int((seg_offsets[1:] - seg_offsets[:-1]).max())
            compiled = lesson.policy.triton_path == "compiled"
            return {
                "longest": longest,
                "BLOCK_M": 16 if not compiled or longest <= 16 else 64,
                "BLOCK_K": 64 if compiled else 32,    # shrink: the K loop's step
                "BLOCK_N": 128 if compiled else 32,   # expand: output columns per program
            }


        def lora_shrink(x: torch.Tensor, A: torch.Tensor, scales: torch.Tensor, order: torch.Tensor,
                        seg_offsets: torch.Tensor, seg_adapter: torch.Tensor) -> torch.Tensor:
            """v (T, R) float32: scales[a] * x[t] @ A[a].T for the tokens t of every segment, 0 for the others.

            x: (T, K); A: (L, R, K) in x's dtype; scales: (L,) float; segments from lora_segments
            """
            # TODO: validate (x 2-D, A 3-D with A's K equal to x's, same dtype, R <= 128, scales (L,))
            # TODO: v = zeros; scales and the segment tensors contiguous (the kernel reads them with unit stride);
            #       no segments -> return v; grid (S, cdiv(longest, BLOCK_M)) from launch_config; launch
            ### BEGIN SOLUTION
            if x.dim() != 2 or A.dim() != 3 or A.shape[2] != x.shape[1]:
                raise ValueError(f"lora_shrink needs x (T, K) and A (L, R, K), got {tuple(x.shape)}, {tuple(A.shape)}")
            if x.dtype != A.dtype or x.dtype not in (torch.float16, torch.bfloat16, torch.float32):
                raise ValueError(f"x and A must share a float16, bfloat16 or float32 dtype, got {x.dtype}, {A.dtype}")
            L, R, K = A.shape
            if R > 128 or scales.shape != (L,):
                raise ValueError(f"rank must be <= 128 and scales (L,) = ({L},), got R={R}, {tuple(scales.shape)}")
            T = x.shape[0]
            v = torch.zeros((T, R), dtype=torch.float32, device=x.device)
            # the kernel reads the scales and the segment tensors with unit stride (scales_ptr + adapter, ...)
            scales, order, seg_offsets, seg_adapter = (t.contiguous() for t in (scales, order, seg_offsets, seg_adapter))
            num_segments = seg_adapter.numel()
            if num_segments == 0:
                return v
            cfg = launch_config(seg_offsets)
            grid = (num_segments, triton.cdiv(cfg["longest"], cfg["BLOCK_M"]))
            lora_shrink_kernel[grid](
                x, A, scales, v, order, seg_offsets, seg_adapter, K, R,
                x.stride(0), x.stride(1), A.stride(0), A.stride(1), A.stride(2), v.stride(0), v.stride(1),
                BLOCK_M=cfg["BLOCK_M"], BLOCK_R=block_r(R), BLOCK_K=cfg["BLOCK_K"], INPUT_PRECISION="ieee",
            )
            return v
            ### END SOLUTION
        ''',
    )
    lesson.md(r"""
        ## 6. Exercise `lora_expand`: $y \mathrel{+}= v B_a^\top$, and the whole LoRA path

        Program `(s, m, n)`: the same segment, rows and token ids as the shrink kernel, and a `BLOCK_N` slice of the
        output columns. The inner dimension is the rank, one `BLOCK_R` step, no loop: load the `v` tile
        `(BLOCK_M, BLOCK_R)` (masked, `other=0.0`) and cast it to $B$'s dtype (`tl.dot` wants both operands in one dtype;
        vLLM's expand kernel casts the same way), the $B_a^\top$ tile `(BLOCK_R, BLOCK_N)` at `b_ptr + adapter *
        stride_bl + r * stride_br + n * stride_bn`, one `tl.dot`, then **read-add-write** the `y` tile at the token
        rows in float32 and store it in `y`'s dtype. Each token belongs to one segment, so no two programs touch the
        same element of `y` and no atomics are needed.

        `add_lora(y, x, adapter_ids, A, B, scales)` is the layer's LoRA path: segments, shrink, expand, in place on
        `y` (the base output $x W^\top$ that the caller computed), and returns `y`.
    """)
    lesson.exercise(
        "lora_expand",
        r'''
        @triton.jit
        def lora_expand_kernel(
            v_ptr, b_ptr, y_ptr, order_ptr, seg_offsets_ptr, seg_adapter_ptr,
            N, R,
            stride_vm, stride_vr, stride_bl, stride_bn, stride_br, stride_ym, stride_yn,
            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_R: tl.constexpr, INPUT_PRECISION: tl.constexpr,
        ):
            """y[tok, n-slice] += v[tok] @ B[a].T for the tokens of one row tile of one segment."""
            seg = tl.program_id(axis=0)
            pid_m = tl.program_id(axis=1)
            pid_n = tl.program_id(axis=2)
            # TODO: segment bounds, early return, adapter (int64), rows, token ids (as in the shrink kernel)
            # TODO: v tile (BLOCK_M, BLOCK_R) cast to B's dtype; B[a].T tile (BLOCK_R, BLOCK_N); one tl.dot
            # TODO: y tile at the token rows: load, add in float32, store in y's dtype (masked)
            ### BEGIN SOLUTION
            start = tl.load(seg_offsets_ptr + seg)
            end = tl.load(seg_offsets_ptr + seg + 1)
            row0 = start + pid_m * BLOCK_M
            if row0 >= end:
                return
            adapter = tl.load(seg_adapter_ptr + seg).to(tl.int64)
            rows = row0 + tl.arange(0, BLOCK_M)
            row_ok = rows < end
            tok = tl.load(order_ptr + rows, mask=row_ok, other=0).to(tl.int64)
            offs_r = tl.arange(0, BLOCK_R)
            r_ok = offs_r < R
            offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
            n_ok = offs_n < N
            v_ptrs = v_ptr + tok[:, None] * stride_vm + offs_r[None, :] * stride_vr                      # (BM, BR)
            vt = tl.load(v_ptrs, mask=row_ok[:, None] & r_ok[None, :], other=0.0).to(b_ptr.dtype.element_ty)
            b_ptrs = b_ptr + adapter * stride_bl + offs_r[:, None] * stride_br + offs_n[None, :] * stride_bn  # (BR, BN)
            bt = tl.load(b_ptrs, mask=r_ok[:, None] & n_ok[None, :], other=0.0)
            acc = tl.dot(vt, bt, input_precision=INPUT_PRECISION)                                       # (BM, BN) fp32
            y_ptrs = y_ptr + tok[:, None] * stride_ym + offs_n[None, :] * stride_yn
            mask = row_ok[:, None] & n_ok[None, :]
            y_old = tl.load(y_ptrs, mask=mask, other=0.0).to(tl.float32)
            tl.store(y_ptrs, (y_old + acc).to(y_ptr.dtype.element_ty), mask=mask)
            ### END SOLUTION


        def lora_expand(y: torch.Tensor, v: torch.Tensor, B: torch.Tensor, order: torch.Tensor,
                        seg_offsets: torch.Tensor, seg_adapter: torch.Tensor) -> torch.Tensor:
            """In place: y[t] += v[t] @ B[a].T for the tokens t of every segment; returns y.

            y: (T, N) any float dtype; v: (T, R) float32; B: (L, N, R)
            """
            # TODO: validate shapes (y (T, N), v (T, R), B (L, N, R)) and R <= 128
            # TODO: the segment tensors contiguous (the kernel reads them with unit stride); no segments -> return y;
            #       grid (S, cdiv(longest, BLOCK_M), cdiv(N, BLOCK_N)) from launch_config
            ### BEGIN SOLUTION
            if y.dim() != 2 or v.dim() != 2 or B.dim() != 3 or v.shape[0] != y.shape[0] or B.shape[1:] != (
                y.shape[1], v.shape[1]):
                raise ValueError(f"lora_expand needs y (T, N), v (T, R), B (L, N, R), got {tuple(y.shape)}, "
                                 f"{tuple(v.shape)}, {tuple(B.shape)}")
            L, N, R = B.shape
            if R > 128:
                raise ValueError(f"rank must be <= 128, got {R}")
            order, seg_offsets, seg_adapter = (t.contiguous() for t in (order, seg_offsets, seg_adapter))  # unit stride
            num_segments = seg_adapter.numel()
            if num_segments == 0 or N == 0:
                return y
            cfg = launch_config(seg_offsets)
            grid = (num_segments, triton.cdiv(cfg["longest"], cfg["BLOCK_M"]), triton.cdiv(N, cfg["BLOCK_N"]))
            lora_expand_kernel[grid](
                v, B, y, order, seg_offsets, seg_adapter, N, R,
                v.stride(0), v.stride(1), B.stride(0), B.stride(1), B.stride(2), y.stride(0), y.stride(1),
                BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_R=block_r(R), INPUT_PRECISION="ieee",
            )
            return y
            ### END SOLUTION


        def add_lora(y: torch.Tensor, x: torch.Tensor, adapter_ids: torch.Tensor, A: torch.Tensor, B: torch.Tensor,
                     scales: torch.Tensor) -> torch.Tensor:
            """In place: y[t] += scales[a] * (x[t] @ A[a].T) @ B[a].T with a = adapter_ids[t] (nothing for -1).

            y: (T, N) the base output; x: (T, K); A: (L, R, K); B: (L, N, R); scales: (L,)
            """
            # TODO: check that B and A agree (L and R) and that y and x have T rows; segments, shrink, expand
            ### BEGIN SOLUTION
            if A.dim() != 3 or B.dim() != 3 or B.shape[0] != A.shape[0] or B.shape[2] != A.shape[1]:
                raise ValueError(f"A (L, R, K) and B (L, N, R) disagree: {tuple(A.shape)}, {tuple(B.shape)}")
            if y.shape[0] != x.shape[0] or adapter_ids.shape != (x.shape[0],):
                raise ValueError(f"y, x and adapter_ids need T rows: {tuple(y.shape)}, {tuple(x.shape)}, "
                                 f"{tuple(adapter_ids.shape)}")
            order, seg_offsets, seg_adapter = lora_segments(adapter_ids, A.shape[0])
            v = lora_shrink(x, A, scales, order, seg_offsets, seg_adapter)
            return lora_expand(y, v, B, order, seg_offsets, seg_adapter)
            ### END SOLUTION
        ''',
    )
    lesson.md(r"""
        ### Why not gather and bmm?

        The cell below counts the bytes each approach reads for the LoRA path of one $4096 \to 4096$ projection,
        rank 16, fp16, with 8 adapters in use: gather-then-bmm copies $A$ and $B$ once per *token*, SGMV reads them
        once per row tile of a segment (with `BLOCK_M = 64`, long prefill segments read them once per 64 tokens),
        and both read $x$ and read and write $y$.
    """)
    lesson.code(r"""
        d_in = d_out = 4096
        rank, used_adapters, elem = 16, 8, 2
        tokens = [8, 32, 128, 512, 2048, 8192]
        adapter_bytes = rank * (d_in + d_out) * elem
        io = [t * (d_in + 2 * d_out) * elem for t in tokens]                           # x read, y read + written
        gather = [i + 2 * t * adapter_bytes for t, i in zip(tokens, io)]               # copy written, then read
        sgmv = [i + max(used_adapters, math.ceil(t / 64)) * adapter_bytes for t, i in zip(tokens, io)]
        plt.figure(figsize=(6, 3.5))
        plt.loglog(tokens, [g / 2**20 for g in gather], "o-", label="gather A[ids], B[ids] + bmm")
        plt.loglog(tokens, [s / 2**20 for s in sgmv], "o-", label="SGMV (segments, BLOCK_M = 64)")
        plt.loglog(tokens, [i / 2**20 for i in io], "k--", label="x and y only")
        plt.xlabel("tokens in the batch"); plt.ylabel("MiB moved"); plt.legend(); plt.title("LoRA path, r = 16, fp16")
        plt.tight_layout(); plt.show()
    """)
    lesson.md(r"""
        The gather moves about 22 times the bytes of $x$ and $y$ alone, at every batch size: per token it writes and
        then reads a copy of $r (d_{in} + d_{out}) = 131\,072$ weight elements, $2 \cdot 131\,072$ against the
        $d_{in} + 2 d_{out} = 12\,288$ activation elements. SGMV reads each used adapter once per row tile: at decode
        sizes (8 to 32 tokens) that fixed 2 MiB still dominates, yet it is 2 to 6 times less than the gather, and from a
        few hundred tokens on it is small next to $x$ and $y$.

        ## 7. Throughput (GPU only)

        `python -m llm_algo bench p03.multi_lora` times `add_lora` at a decode batch (64 tokens) and a prefill
        batch (4096 tokens), 16 adapters of rank 16 on a $4096 \to 4096$ projection, fp16 and bf16, as GB/s of the
        bytes SGMV must move, next to the gather-then-bmm PyTorch version (eager and `torch.compile`) and a
        device-to-device copy of the same number of bytes (the roofline).

        **Reading the numbers** (one run of `python -m llm_algo bench p03.multi_lora` with the reference solutions on
        an NVIDIA H200, Triton 3.6, torch 2.11, CUDA 13.0; your GPU will differ). GB/s of the bytes SGMV must move
        ($x$ read, $y$ read and written, each used adapter once), milliseconds in brackets:

        | row | T = 64, fp16 | T = 4096, fp16 | T = 64, bf16 | T = 4096, bf16 |
        |---|---|---|---|---|
        | `add_lora` (Triton SGMV, yours) | 12.5 (0.460) | 215 (0.489) | 7.3 (0.791) | 186 (0.564) |
        | gather + bmm, eager | 53.4 (0.108) | 107 (0.981) | 27.4 (0.210) | 107 (0.976) |
        | gather + bmm, `torch.compile` | 79.1 (0.073) | 116 (0.906) | 41.6 (0.139) | 116 (0.906) |
        | device-to-device copy of as many bytes | 879 (0.0066) | 3421 (0.031) | 964 (0.0060) | 3428 (0.031) |

        There is no numeric goal for this lesson, and the result is mixed. At the prefill batch (4096 tokens) SGMV is
        1.85 times faster than the compiled gather + bmm in fp16 (1.6 times in bf16). That is the byte count of the
        "why not gather" cell at work: the gather writes and reads a copy of $A$ and $B$ for every token, 512 MiB each
        at this size. At the decode batch (64 tokens) SGMV is 6.3 times *slower* than the compiled gather (5.7 times
        in bf16), and at both sizes it is far from the copy: 6% of it at $T = 4096$, 1.4% at $T = 64$.

        The rows explain why. The fp16 call takes nearly the same time at 64 tokens (0.460 ms) as at 4096 (0.489 ms),
        64 times more tokens and 18 times more bytes, and 0.46 ms is 70 times what a copy of the decode batch's 5.8 MB
        takes. So the time is a fixed cost per call that does not scale with the work. Read the kernels and the
        wrapper at $T = 64$: the 57 tokens that have an adapter fall into 16 segments of 1 to 6 tokens, so
        `launch_config` picks `BLOCK_M = 16`, and only 22% of the rows of each tile are real. The shrink grid is 16
        programs for 132 SMs. Each of them walks $K = 4096$ in 64 steps to stream its adapter's 128 KiB $A$, which is
        a latency-bound loop. The expand grid is 16 × 1 × 32 = 512 programs, each a single `tl.dot`. This is poor use
        of the GPU, but by the byte count these kernels should take microseconds, not 460 of them. The likely fixed
        cost is the host side of `add_lora`. `lora_segments` reads back `ids.min()`, `ids.max()`, the count of $-1$
        tokens and the output size of `unique_consecutive`. `launch_config` reads the longest segment, once for the
        shrink and once for the expand. That makes six device-to-host synchronisations, each of which drains the GPU,
        with about twenty small PyTorch ops and two Triton launches between them. This run does not measure the split.
        Two measurements would settle it: a `torch.profiler` trace of one call, and `lora_shrink` + `lora_expand`
        timed with segments computed once outside the timing.

        The bf16 rows at $T = 64$ are all about twice their fp16 counterparts, the gather rows included, while the
        copies are not. The dtype does not change the work here, so this looks like host-side variation between the
        two parts of the run rather than a property of bf16. Only a second run would tell. Production implementations
        avoid the fixed cost: vLLM computes the segment metadata once per batch and shares it with every LoRA layer of
        the model instead of recomputing it per call, and its shrink splits $K$ across programs so that a decode batch
        still fills the GPU (see below).
    """)
    lesson.stop()
    lesson.md(r"""
        ## 8. Reading the solutions

        **`lora_segments`.** `argsort(stable=True)` keeps each segment in token order; the $-1$ tokens sort first,
        and `unique_consecutive` on the rest gives each used adapter and its run length. `seg_offsets` starts at the
        count of $-1$ tokens, so those tokens are in `order` but in no segment.

        **The shrink kernel.** The early `return` handles both the ragged grid (every segment gets
        `cdiv(longest, BLOCK_M)` row tiles) and short segments. Rows are *positions in `order`*; the tokens they name,
        `tok`, address `x` and `v`. Writing `v[rows]` instead of `v[tok]` passes only when `order` is the identity,
        which is why the checks shuffle the adapters. `BLOCK_R` is at least 16 and the masks `r < R` make the padded
        rank columns zero.

        **The expand kernel.** `y` is read and written at the same token rows; a plain store (no read) would replace
        the base output instead of adding to it. The scale was applied once, in the shrink.

        **The usual mistakes, and why they are wrong**: the $-1$ tokens counted
        as a segment of adapter $-1$, a segment end off by one, `v` written at sorted positions, the scale
        dropped or applied twice, the store replacing $y$, the rank mask missing, a K loop without the K mask; strided
        scales or segment tensors (a column of a bigger tensor) handed to a kernel that reads them with unit stride.

        **What production does.** Punica's SGMV CUDA kernels and S-LoRA's unified paging (adapters and KV cache in
        one memory pool, adapters paged in on demand) introduced the approach. vLLM implements it in Triton
        (`vllm/lora/ops/triton_ops/lora_shrink_op.py` and `lora_expand_op.py`): the shrink splits $K$ across programs
        (split-K, atomics into $v$) because $r$ is too small to give the GPU enough programs at decode, handles all
        slices of a fused QKV projection in one launch, and `--max-lora-rank` pads adapters to one rank. LoRAX and
        TensorRT-LLM serve many adapters the same way; a merged adapter ($W + s B A$) is faster for a single tenant
        but cannot be mixed in one batch.
    """)
    lesson.mistakes()
    return lesson
