"""Source of 03_Triton_Kernels/16_Quant_Matmul.ipynb (build with `python -m llm_algo build p03.quant_matmul`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p03.quant_matmul",
        path="03_Triton_Kernels/16_Quant_Matmul.ipynb",
        title_en="Quantised matmul in Triton: int8, packed int4 and FP8",
        title_zh="Triton 量化矩阵乘法：int8、打包 int4 与 FP8",
        difficulty="hard",
        device="cpu",
        minutes=130,
        prerequisites=["p02.quant_w8a16", "p03.matmul"],
        triton=True,
    )
    lesson.title(
        intro=r"""
        Decoding one token at batch size 1 reads every weight of the model once and does two FLOPs per weight: the
        speed limit is HBM bandwidth divided by the bytes of the weights. Llama-3-8B has 8.0 billion parameters
        (Llama 3 paper, arXiv:2407.21783), 16 GB in bf16; an H200 reads HBM at 4.8 TB/s (NVIDIA H200 datasheet), so no
        bf16 kernel decodes faster than about 3.3 ms per token. In `p02.quant_w8a16` you stored the weights as int8 or
        packed int4 with group scales, but the `QuantLinear` you wrote there *dequantised the whole weight* into a
        bf16 tensor before the matmul: per token it read the int8 codes, wrote a bf16 copy and read that again, more
        traffic than plain bf16. The saving only
        appears when a kernel reads the int8 (or int4) bytes from HBM, turns them into floating point **in registers**,
        and feeds them straight to the tensor cores. That is what this lesson builds.

        **You will implement** two Triton kernels for `y = x @ dequant(W)^T` with `W` stored `(N, K)` like
        `nn.Linear.weight`: int8 codes with one scale per output channel or per group of `G` input columns, and packed
        signed int4 (two codes per byte along K) with group scales, unpacked with shifts and masks inside the K loop.
        Both wrappers validate what they are given (dtypes, packed shapes, a group size that divides K). Then the
        Hopper format: a row-wise FP8 E4M3 quantiser and a scaled FP8 GEMM (graded in Triton's interpreter on a CPU,
        compiled on a GPU of compute capability 8.9+). **Graded
        against** a float64 dequantise-then-matmul written in the checks, a bit-level unpacking written there
        independently, the nearest E4M3 value found among all 256 codes (and torch's `float8_e4m3fn` cast), guard
        bytes around the output, and the refusals. `torch.matmul`, `F.linear`, and torch's
        quantised matmuls (`torch._weight_int8pack_mm`, `torch._weight_int4pack_mm`, `torch._scaled_mm`) are off limits:
        your kernel does the work.
        """,
    )
    lesson.md(r"""
        ## 本节要点

        - **问题**：batch=1 解码每个 token 要把全部权重从显存读一遍，速度上限 = 带宽 / 权重字节数；Llama-3-8B 的 bf16 权重 16 GB，H200 带宽 4.8 TB/s，上限约 3.3 ms/token。int8 减半，int4（组大小 128）约为 1/4。
        - **关键**：只有内核直接从 HBM 读 int8/int4 字节、在寄存器里反量化、再交给 tensor core，才能真正省带宽；先把整个权重反量化成 bf16 再做 matmul 等于什么都没省。
        - **形状**：$y = x \hat W^\top$，$x \in \mathbb{R}^{M\times K}$，$W$ 按 `nn.Linear` 存成 $(N, K)$，缩放因子 $(N, K/G)$；元素 $(n, k)$ 用第 $\lfloor k/G \rfloor$ 组的缩放因子。
        - **int8**：K 循环里加载 `(BLOCK_K, BLOCK_N)` 的 int8 块，乘以按 `k // G` 取出的缩放因子，转成 x 的 dtype 后 `tl.dot`，float32 累加。
        - **int4**：每字节两个有符号 4 位码（偶数列在低 4 位，奇数列在高 4 位）；第 k 列在第 `k // 2` 字节，右移 `(k % 2) * 4` 位，`& 0xF`，再做符号扩展（≥8 减 16）。
        - **边界与输入检查**：K 方向的 load（包括缩放因子）都要 mask；K 必须是 G 的倍数；打包形状必须是 `(N, K/2)` 的 uint8；dtype 不对要报错。
        {易错点}
        - **FP8 (E4M3)**：激活按行 (per-token)、权重按输出通道各取一个缩放因子 $s = \max|\cdot|/448$，先 clamp 到 ±448 再转 `float8_e4m3fn`（不要依赖转换本身的溢出行为）；两个缩放因子与 K 无关，在 K 循环之后乘到累加器上。FP8 tensor core 需要 cc ≥ 8.9 的 GPU，CPU 上用 Triton 解释器评分。
        - **性能**：解码（M=1..16）按权重字节算 GB/s，与拷贝带宽比；预填充（M=4096）按 TFLOP/s 与 cuBLAS fp16 比——那里 int8/int4 的反量化是额外计算，FP8 则两边都是 8 位，预填充也更快。一次 H200 实测：int8 解码只达到拷贝带宽的 11–27%，比 cuBLAS fp16 还慢 1.6–2.2 倍（目标是快约 2 倍，未达到：瓶颈在每个权重的解包、缩放因子加载等指令和 program 太少，而不是显存字节）；int4 更慢；预填充 int8/int4 只有 cuBLAS fp16 的 0.19–0.27 倍；FP8 是 `torch._scaled_mm` 的 0.90–1.05 倍、cuBLAS fp16 的 1.6–1.9 倍。
    """)
    lesson.md(r"""
        ## 1. Why the dequantisation has to happen inside the kernel

        A linear layer with weight $W \in \mathbb{R}^{N \times K}$ ($N$ outputs, $K$ inputs) and activations
        $x \in \mathbb{R}^{M \times K}$ costs $2MNK$ FLOPs and reads $NKb_w + MKb_x$ bytes, writing $MNb_x$. In decoding,
        $M$ is the batch size (1 to a few dozen) and the weight bytes dominate: at $M = 1$, $K = 4096$, $N = 14336$ (one
        of Llama-3-8B's MLP projections) the weight is 117 MB in bf16 and the activations 8 KB. The arithmetic intensity
        is about $2M / b_w$ FLOPs per byte: 1 at $M = 1$ in bf16, against the ~200 an H200 needs to be compute-bound. So
        the time is the weight bytes over the bandwidth, and the only lever is **fewer bytes per weight**:

        | storage | bytes per weight | weights read per token (7.5 billion) | bound at 4.8 TB/s |
        |---|---|---|---|
        | bf16 | 2 | 15.0 GB | 3.1 ms |
        | int8, one fp16 scale per row | 1.0005 | 7.5 GB | 1.6 ms |
        | int4, one fp16 scale per 128 weights | 0.5 + 2/128 = 0.516 | 3.9 GB | 0.8 ms |

        (7.5 billion: the 32 layers' projections, $32 \cdot 4096 \cdot (4096 + 1024 + 1024 + 4096 + 3 \cdot 14336)$, plus
        the $128256 \times 4096$ LM head; the embedding table is only indexed.)

        The kernel therefore reads each int8 or int4 code once from HBM and does the rest on chip:

        $$
        \hat W_{nk} = s_{n,\lfloor k/G \rfloor}\; q_{nk}, \qquad
        y_{mn} = \sum_{k=0}^{K-1} x_{mk}\, \hat W_{nk}
              = \sum_{g=0}^{K/G - 1} s_{n,g} \sum_{k = gG}^{(g+1)G - 1} x_{mk}\, q_{nk},
        $$

        with $q \in \mathbb{Z}^{N \times K}$ the codes, $s \in \mathbb{R}^{N \times K/G}$ the scales, and $G$ the
        group size ($G = K$ is one scale per output channel: `scales` has shape `(N, 1)`). It is the tiled GEMM of
        `p03.matmul` with one change: the B tile is loaded as integers and **dequantised in registers** before
        `tl.dot`:

        ```
        program (pid_n, pid_m): output tile y[pid_m rows, pid_n cols]      (BLOCK_M, BLOCK_N), float32 accumulator
        for k0 in 0, BLOCK_K, 2 BLOCK_K, ...:
            x tile  = x[rows, k0:k0+BLOCK_K]                               (BLOCK_M, BLOCK_K)  fp16/bf16/fp32
            q tile  = W_q[cols, k0:k0+BLOCK_K]^T                          (BLOCK_K, BLOCK_N)  int8 from HBM: 1 B each
            s tile  = scales[cols, (k0 + k) // G]^T                        (BLOCK_K, BLOCK_N)  tiny, stays in cache
            w tile  = (q * s) cast to x's dtype                            in registers, never written to memory
            acc    += tl.dot(x tile, w tile)
        store acc as x's dtype, masked
        ```

        Two things change compared with an fp16 GEMM. The weight is read transposed (`W` is `(N, K)`, the dot wants
        `(BLOCK_K, BLOCK_N)`), which costs nothing: the pointer tile is built from the strides, as in `p03.matmul`.
        And the scale of element $(n, k)$ depends on $k$: with $G$ a multiple of `BLOCK_K` one scale per column covers
        the whole tile, but the kernel below handles any $G$ that divides $K$ by loading the scale tile with the group
        index `k // G` of every row of the tile (the loads hit the same few cache lines, so they cost little HBM
        traffic, but they are still one load per weight element, which likely shows in section 5's decode numbers).
        Production kernels pick `BLOCK_K` to divide $G$ and load one scale row per step; per-channel kernels go
        further and apply $s_n$ once to the accumulator after the loop, since it factors out of the whole sum.

        **Decode needs small tiles.** `tl.dot` needs every dimension at least 16 on a GPU, so $M = 1$ runs with
        `BLOCK_M = 16` and 15 of 16 rows of the MMA wasted; that is fine, the tensor cores are idle anyway. What is not
        fine is too few programs: $N = 4096$ in tiles of 128 is 32 programs for an H200's 132 SMs, and 100 SMs then
        wait. So the autotuner also gets `BLOCK_N = 32` and `64` configs for small $M$ (split-K, which `p03.autotune`
        builds, is the other answer).
    """)
    lesson.setup(r"""
        import matplotlib.pyplot as plt
        import torch
        import triton
        import triton.language as tl


        def quant_configs():
            # The autotuner's search space for both kernels: decode-sized (BLOCK_M 16, narrow N tiles so that a
            # 4096-wide layer still makes 64-128 programs) and prefill-sized tiles when compiled; one small tile
            # under the interpreter, where timing means nothing.
            if lesson.policy.triton_path != "compiled":
                return [triton.Config({"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32}, num_warps=4)]
            tiles = [  # (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages)
                (16, 32, 128, 4, 4), (16, 64, 128, 4, 4), (16, 128, 64, 4, 3),
                (64, 128, 64, 4, 3), (128, 128, 64, 8, 3), (128, 256, 64, 8, 3),
            ]
            return [
                triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k}, num_warps=w, num_stages=s)
                for m, n, k, w, s in tiles
            ]
    """)
    lesson.md(r"""
        ## 2. Exercise `int8_matmul`: W8A16 with per-channel or group scales

        Write `w8_matmul_kernel` and the wrapper `int8_weight_matmul(x, qweight, scales, group_size=None)`:

        - `x` `(M, K)` float16, bfloat16 or float32, any strides; `qweight` `(N, K)` `torch.int8`; `scales`
          `(N, K // G)` floating point (float32 or x's dtype), `G = group_size` (`None` means `K`: one scale per row).
        - Returns `y` `(M, N)`, contiguous, in `x.dtype`: $y = x\,(s \odot q)^\top$ with the scale broadcast over each
          group of $G$ columns, accumulated in float32.
        - Refuse, before launching: a non-2-D input, `qweight` not int8 (`TypeError`), `x` not a float16/bfloat16/float32
          (`TypeError`), scales that are not floating point (`TypeError`), a `K` that differs between `x` and `qweight`,
          a group size that does not divide `K` or is not positive, and `scales` of the wrong shape (`ValueError`).

        The kernel, one program per `(BLOCK_M, BLOCK_N)` tile on a 2-D grid (axis 0 over N, axis 1 over M):

        1. Rows `offs_m`, columns `offs_n`, and `offs_k = tl.arange(0, BLOCK_K)`; wrap rows with `% M` and columns with
           `% N` as in `p03.matmul`, so the loads stay inside `x` and `qweight` and only the store needs the M/N mask.
        2. In the K loop (`k = k0 + offs_k`): load the x tile masked on `k < K` with `other=0.0`; the weight tile
           `(BLOCK_K, BLOCK_N)` from `w_ptr + cols * stride_wn + k * stride_wk`, masked the same way with `other=0`;
           the scale tile from `s_ptr + cols * stride_sn + (k // GROUP_SIZE) * stride_sg`, also masked (past $K$, the
           group index points past the last group).
        3. `w = (q.to(tl.float32) * s.to(tl.float32)).to(x_ptr.dtype.element_ty)`, then
           `acc = tl.dot(x_tile, w, acc, input_precision="ieee")` (full fp32 precision for fp32 inputs; no effect for
           16-bit ones).
        4. Store `acc` cast to y's dtype with the mask `(offs_m < M) & (offs_n < N)`.

        Keep the kernel's signature: the checks call it directly on windows of guard buffers.
    """)
    lesson.exercise(
        "int8_matmul",
        r'''
        @triton.jit
        def w8_matmul_kernel(
            x_ptr, w_ptr, s_ptr, y_ptr,
            M, N, K, GROUP_SIZE,
            stride_xm, stride_xk, stride_wn, stride_wk, stride_sn, stride_sg, stride_ym, stride_yn,
            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
        ):
            """y[tile] = x[tile rows, :] @ (scales * q)[tile cols, :]^T for int8 q (N, K), group scales (N, K // G)."""
            pid_n = tl.program_id(axis=0)
            pid_m = tl.program_id(axis=1)
            # TODO: rows (wrapped % M), columns (wrapped % N) and k offsets; a float32 accumulator
            # TODO: the K loop: masked loads of the x tile, the int8 weight tile (BLOCK_K, BLOCK_N) and the scale
            #       tile at group k // GROUP_SIZE; dequantise in registers; tl.dot into the accumulator
            # TODO: store the accumulator in y's dtype, masked on both edges
            ### BEGIN SOLUTION
            offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)            # (BLOCK_M,) rows of y
            offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)            # (BLOCK_N,) columns of y = rows of W
            offs_k = tl.arange(0, BLOCK_K)
            rows = offs_m % M
            cols = offs_n % N
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for k0 in range(0, K, BLOCK_K):
                k = k0 + offs_k                                          # (BLOCK_K,)
                k_in = k < K
                a = tl.load(x_ptr + rows[:, None] * stride_xm + k[None, :] * stride_xk,
                            mask=k_in[None, :], other=0.0)              # (BLOCK_M, BLOCK_K)
                q = tl.load(w_ptr + cols[None, :] * stride_wn + k[:, None] * stride_wk,
                            mask=k_in[:, None], other=0)                # (BLOCK_K, BLOCK_N) int8
                s = tl.load(s_ptr + cols[None, :] * stride_sn + (k[:, None] // GROUP_SIZE) * stride_sg,
                            mask=k_in[:, None], other=0.0)              # (BLOCK_K, BLOCK_N) scale of each element
                w = (q.to(tl.float32) * s.to(tl.float32)).to(x_ptr.dtype.element_ty)
                acc = tl.dot(a, w, acc, input_precision="ieee")
            y_ptrs = y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn
            tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))
            ### END SOLUTION


        w8_matmul_kernel_tuned = triton.autotune(configs=quant_configs(), key=["M", "N", "K"])(w8_matmul_kernel)


        def int8_weight_matmul(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, group_size=None):
            """x (M, K) @ dequant(qweight (N, K) int8, scales (N, K // G))^T -> (M, N) in x.dtype; G = group_size or K."""
            # TODO 1: validate dtypes (TypeError) and shapes, K, the group size and the scales' shape (ValueError)
            # TODO 2: allocate y and launch w8_matmul_kernel_tuned on a grid (cdiv(N, BLOCK_N), cdiv(M, BLOCK_M))
            ### BEGIN SOLUTION
            if x.dim() != 2 or qweight.dim() != 2 or scales.dim() != 2:
                raise ValueError(f"need x (M, K), qweight (N, K), scales (N, K // G); got {tuple(x.shape)}, "
                                 f"{tuple(qweight.shape)}, {tuple(scales.shape)}")
            if x.dtype not in (torch.float16, torch.bfloat16, torch.float32):
                raise TypeError(f"x must be float16, bfloat16 or float32, got {x.dtype}")
            if qweight.dtype != torch.int8:
                raise TypeError(f"qweight must hold torch.int8 codes, got {qweight.dtype}")
            if not scales.is_floating_point():
                raise TypeError(f"scales must be floating point, got {scales.dtype}")
            M, K = x.shape
            N = qweight.shape[0]
            if qweight.shape[1] != K:
                raise ValueError(f"x has K = {K} columns but qweight is {tuple(qweight.shape)}")
            G = K if group_size is None else int(group_size)
            if G <= 0 or K % G != 0:
                raise ValueError(f"group_size {group_size} must be positive and divide K = {K}")
            if tuple(scales.shape) != (N, K // G):
                raise ValueError(f"scales must be (N, K // G) = {(N, K // G)}, got {tuple(scales.shape)}")
            y = torch.empty((M, N), dtype=x.dtype, device=x.device)
            grid = lambda META: (triton.cdiv(N, META["BLOCK_N"]), triton.cdiv(M, META["BLOCK_M"]))
            w8_matmul_kernel_tuned[grid](
                x, qweight, scales, y, M, N, K, G,
                x.stride(0), x.stride(1), qweight.stride(0), qweight.stride(1),
                scales.stride(0), scales.stride(1), y.stride(0), y.stride(1),
            )
            return y
            ### END SOLUTION
        ''',
    )
    lesson.md(r"""
        ### What the group size buys

        The cell below quantises a weight whose rows have a few large outliers (as real LLM weights do) at several
        group sizes with the round-to-nearest rule of `p02.quant_w8a16`, and runs your kernel on it. The error of
        `y` falls as groups shrink (here from about 4% per channel to under 1% at $G = 16$), because one outlier then
        only coarsens the scale of its own $G$ weights, while the bytes per weight grow by $2/G$ for fp16 scales.
        With 16 levels instead of 256, int4 errors are about 18x larger at every $G$, which is why int4 formats are
        always grouped (32 to 128) and int8 ones are often per channel.
    """)
    lesson.code(r"""
        def quantize_rtn(w, bits, group):
            # symmetric round-to-nearest per group (p02.quant_w8a16): s = max|w| / qmax, q = round(w / s)
            qmax = 2 ** (bits - 1) - 1
            wg = w.reshape(w.shape[0], -1, group)
            s = (wg.abs().amax(dim=-1, keepdim=True) / qmax).clamp(min=1e-8)
            q = torch.clamp(torch.round(wg / s), -qmax, qmax)
            return q.reshape(w.shape).to(torch.int8), s.squeeze(-1)


        torch.manual_seed(0)
        N, K, M = 64, 512, 8
        w = torch.randn(N, K) * 0.02
        w[torch.rand(N, K) < 0.002] *= 40  # a few outliers per row, as in trained LLM weights
        x = torch.randn(M, K, device=DEVICE)
        exact = x.cpu().double() @ w.double().T
        groups = [16, 32, 64, 128, 256, 512]
        errors = []
        for G in groups:
            q, s = quantize_rtn(w, 8, G)
            try:
                y = int8_weight_matmul(x, q.to(DEVICE), s.to(DEVICE), group_size=G)
            except NotImplementedError:
                print("Implement int8_weight_matmul to see your kernel's errors.")
                break
            errors.append(((y.cpu().double() - exact).norm() / exact.norm()).item())
        if errors:
            fig, ax = plt.subplots(figsize=(5.5, 3.2))
            ax.plot(groups[: len(errors)], errors, "o-", label="int8, your kernel")
            ax.set_xscale("log", base=2); ax.set_yscale("log")
            ax.set_xlabel("group size G (512 = per channel)"); ax.set_ylabel("relative error of y")
            ax.set_title("smaller groups: outliers spoil fewer weights"); ax.legend(); fig.tight_layout(); plt.show()
    """)
    lesson.md(r"""
        ## 3. Exercise `int4_matmul`: packed int4, unpacked with shifts and masks

        Int4 halves the bytes again, but there is no int4 type to load: two codes share a byte. This lesson uses the
        layout of `p02.quant_w8a16`'s `pack_int4`: **signed** codes $q \in [-8, 7]$ in two's complement, stored
        `(N, K // 2)` as `torch.uint8`, code $k$ of row $n$ in byte $\lfloor k/2 \rfloor$: **even $k$ in the low nibble,
        odd $k$ in the high nibble**. Scales as before, `(N, K // G)`. (The other common choice stores unsigned codes
        $u \in [0, 15]$ with a zero point, $\hat w = s\,(u - z)$: GPTQ/AWQ checkpoints and torch's `_weight_int4pack_mm`
        do that. With symmetric codes the zero point is the constant 0 and the kernel saves a load and a subtraction.)

        In the kernel, the weight tile `(BLOCK_K, BLOCK_N)` is built from bytes:

        $$
        \text{byte} = P_{n, \lfloor k/2 \rfloor}, \qquad
        u = (\text{byte} \gg 4\,(k \bmod 2))\ \&\ \texttt{0xF} \in [0, 15], \qquad
        q = u - 16\,[u \ge 8] \in [-8, 7] .
        $$

        Work in int32 after the load (`byte.to(tl.int32)`: uint8 zero-extends, so no stray sign bits), and write the
        sign extension with integer operations (`u - ((u >> 3) << 4)`, or `(u ^ 8) - 8`, or a `tl.where`). Each byte
        is loaded for two values of $k$; the second load hits the cache. (Production int4 kernels load each byte once
        and split it with `tl.join`/`tl.interleave` or in-register permutes, as Marlin does; the gather form keeps
        any `BLOCK_K` and any even $K$ working.) The group of column $k$ is $\lfloor k/G \rfloor$: $k$ is the
        **unpacked** column, not the byte index.

        Write `w4_matmul_kernel` and `int4_weight_matmul(x, packed, scales, group_size)`: same contract as the int8
        version, except `packed` must be `torch.uint8` of shape `(N, K // 2)` for the `K` of `x` (refuse an odd `K`,
        another dtype (`TypeError`) or another shape (`ValueError`)), and `group_size` is required.
    """)
    lesson.exercise(
        "int4_matmul",
        r'''
        @triton.jit
        def w4_matmul_kernel(
            x_ptr, p_ptr, s_ptr, y_ptr,
            M, N, K, GROUP_SIZE,
            stride_xm, stride_xk, stride_pn, stride_pk, stride_sn, stride_sg, stride_ym, stride_yn,
            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
        ):
            """y[tile] = x @ (scales * unpack(p))^T for p (N, K // 2) uint8 holding signed int4 codes (even k low)."""
            pid_n = tl.program_id(axis=0)
            pid_m = tl.program_id(axis=1)
            # TODO: offsets as in the int8 kernel; a float32 accumulator
            # TODO: in the K loop: load byte k // 2 of each column, shift by (k % 2) * 4, keep 4 bits, sign-extend;
            #       the scale of group k // GROUP_SIZE; dequantise and tl.dot
            # TODO: store, masked
            ### BEGIN SOLUTION
            offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
            offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
            offs_k = tl.arange(0, BLOCK_K)
            rows = offs_m % M
            cols = offs_n % N
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for k0 in range(0, K, BLOCK_K):
                k = k0 + offs_k
                k_in = k < K
                a = tl.load(x_ptr + rows[:, None] * stride_xm + k[None, :] * stride_xk,
                            mask=k_in[None, :], other=0.0)              # (BLOCK_M, BLOCK_K)
                byte = tl.load(p_ptr + cols[None, :] * stride_pn + (k[:, None] // 2) * stride_pk,
                               mask=k_in[:, None], other=0)             # (BLOCK_K, BLOCK_N) uint8, each byte twice
                u = (byte.to(tl.int32) >> ((k[:, None] % 2) * 4)) & 0xF  # the nibble of column k, in [0, 15]
                q = u - ((u >> 3) << 4)                                  # sign extension: u >= 8 -> u - 16
                s = tl.load(s_ptr + cols[None, :] * stride_sn + (k[:, None] // GROUP_SIZE) * stride_sg,
                            mask=k_in[:, None], other=0.0)
                w = (q.to(tl.float32) * s.to(tl.float32)).to(x_ptr.dtype.element_ty)
                acc = tl.dot(a, w, acc, input_precision="ieee")
            y_ptrs = y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn
            tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))
            ### END SOLUTION


        w4_matmul_kernel_tuned = triton.autotune(configs=quant_configs(), key=["M", "N", "K"])(w4_matmul_kernel)


        def int4_weight_matmul(x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, group_size: int):
            """x (M, K) @ dequant(packed (N, K // 2) uint8 int4 codes, scales (N, K // G))^T -> (M, N) in x.dtype."""
            # TODO 1: validate: dtypes (TypeError); K even, packed (N, K // 2), G divides K, scales (N, K // G)
            # TODO 2: allocate y and launch w4_matmul_kernel_tuned
            ### BEGIN SOLUTION
            if x.dim() != 2 or packed.dim() != 2 or scales.dim() != 2:
                raise ValueError(f"need x (M, K), packed (N, K // 2), scales (N, K // G); got {tuple(x.shape)}, "
                                 f"{tuple(packed.shape)}, {tuple(scales.shape)}")
            if x.dtype not in (torch.float16, torch.bfloat16, torch.float32):
                raise TypeError(f"x must be float16, bfloat16 or float32, got {x.dtype}")
            if packed.dtype != torch.uint8:
                raise TypeError(f"packed must be torch.uint8 (two int4 codes per byte), got {packed.dtype}")
            if not scales.is_floating_point():
                raise TypeError(f"scales must be floating point, got {scales.dtype}")
            M, K = x.shape
            N = packed.shape[0]
            if K % 2 != 0:
                raise ValueError(f"K = {K} is odd: int4 codes are packed in pairs along K")
            if packed.shape[1] != K // 2:
                raise ValueError(f"x has K = {K}, so packed must be (N, {K // 2}); got {tuple(packed.shape)}")
            G = int(group_size)
            if G <= 0 or K % G != 0:
                raise ValueError(f"group_size {group_size} must be positive and divide K = {K}")
            if tuple(scales.shape) != (N, K // G):
                raise ValueError(f"scales must be (N, K // G) = {(N, K // G)}, got {tuple(scales.shape)}")
            y = torch.empty((M, N), dtype=x.dtype, device=x.device)
            grid = lambda META: (triton.cdiv(N, META["BLOCK_N"]), triton.cdiv(M, META["BLOCK_M"]))
            w4_matmul_kernel_tuned[grid](
                x, packed, scales, y, M, N, K, G,
                x.stride(0), x.stride(1), packed.stride(0), packed.stride(1),
                scales.stride(0), scales.stride(1), y.stride(0), y.stride(1),
            )
            return y
            ### END SOLUTION
        ''',
    )
    lesson.md(r"""
        ### The nibbles, looked at

        One byte, two codes. The cell below packs eight codes the way the kernel expects, then unpacks them with the
        same three operations (shift, mask, sign-extend) in torch, and shows each step: a swapped nibble order or a
        forgotten sign extension is visible at once.
    """)
    lesson.code(r"""
        codes = torch.tensor([3, -2, 7, -8, 0, -1, 5, 1])
        nibbles = codes & 0xF                                   # two's complement, 4 bits: -2 -> 14, -8 -> 8
        packed = (nibbles[0::2] | (nibbles[1::2] << 4)).to(torch.uint8)
        print("codes   ", codes.tolist())
        print("packed  ", [f"0x{b:02X}" for b in packed.tolist()], "(high nibble = odd column)")
        k = torch.arange(8)
        u = (packed[k // 2].to(torch.int32) >> ((k % 2) * 4)) & 0xF
        print("nibbles ", u.tolist())
        print("signed  ", (u - ((u >> 3) << 4)).tolist())
    """)
    lesson.md(r"""
        ## 4. Exercises `fp8_quantize` and `fp8_matmul`: FP8 E4M3 with row-wise scales

        Hopper (H100/H200, cc 9.0) and Ada (cc 8.9) tensor cores multiply FP8 directly: E4M3 (`torch.float8_e4m3fn`,
        largest finite value 448, see `p01.number_formats`) at twice the bf16 rate, about 1979 dense TFLOP/s on an
        H200 (NVIDIA H200 datasheet). Unlike int8/int4 weight-only formats, an FP8 GEMM quantises **both** operands,
        so prefill gets faster too, not only decode. The recipe used by `torch._scaled_mm`'s row-wise mode and by
        vLLM's "dynamic per-token" FP8 checkpoints:

        $$
        s^x_m = \frac{\max_k |x_{mk}|}{448}, \quad \tilde x_{mk} = \mathrm{fp8}\!\left(\mathrm{clamp}\!\left(\frac{x_{mk}}{s^x_m}, -448, 448\right)\right),
        \qquad \text{likewise } s^w_n, \tilde W_{nk} \text{ per output channel}, \qquad
        y_{mn} = s^x_m\, s^w_n \sum_k \tilde x_{mk}\, \tilde W_{nk} .
        $$

        $\mathrm{fp8}(\cdot)$ rounds to the nearest E4M3 value (ties to even): 3 mantissa bits, so a relative step
        of $2^{-3}$ to $2^{-4}$. The scale maps each row's largest magnitude onto 448, using the whole range. Both
        scales are constant along $k$, so they factor out of the sum: the kernel multiplies FP8 tiles with `tl.dot`
        into a float32 accumulator and applies $s^x_m s^w_n$ **once, after the K loop**. (DeepSeek-V3,
        arXiv:2412.19437, uses finer scales — 1 x 128 tiles of activations, 128 x 128 blocks of weights — which
        change inside the K loop; the kernel then scales each K block's partial product before adding it.)

        Write three functions (the first is exercise `fp8_quantize`, the other two `fp8_matmul`):

        - `quantize_fp8_rowwise(t, scale=None)`: `t` `(R, C)` float32/float16/bfloat16 → `(codes, scale)` with
          `codes` `(R, C)` `torch.float8_e4m3fn` and `scale` `(R, 1)` float32, $t \approx$ `codes * scale`. With
          `scale=None`, compute it per row as above, in float32 (a row of zeros gets scale 1). A given `scale` (static
          or delayed scaling: last step's amax) is used as is, and values beyond $\pm 448 \cdot s$ **saturate** to
          $\pm 448$ — clamp before the cast; do not rely on the cast's own overflow rule, which has changed between
          PyTorch versions (NaN in older ones). Refuse a non-2-D or non-float `t` and a scale that is not `(R, 1)`,
          positive and finite.
        - `fp8_scaled_mm_kernel`: `a` `(M, K)` and `b` `(N, K)` FP8 (the weight layout), `scale_a` `(M, 1)`,
          `scale_b` `(N, 1)` float32 → `c` `(M, N)`. The K loop is `p03.matmul`'s (masked loads, `other=0.0`), the
          epilogue `acc * sa[:, None] * sb[None, :]`, masked on both edges.
        - `fp8_scaled_mm(a, scale_a, b, scale_b, out_dtype=torch.bfloat16)`: validate (FP8 E4M3 operands, matching
          `K`, scale shapes; `TypeError`/`ValueError`), and on a CUDA device **refuse** (`RuntimeError`) a GPU of
          compute capability below 8.9, which has no FP8 tensor cores; under the interpreter it runs anywhere.

        The checks compare your codes with the nearest E4M3 value computed from the list of all 256 codes (and with
        torch's cast), and the product with float64 arithmetic on the same codes. On the CPU the kernel runs in
        Triton's interpreter (exact FP8 products, float32 sums); on an H200 it compiles to FP8 `wgmma` instructions.
    """)
    lesson.exercise(
        "fp8_quantize",
        r'''
        FP8_MAX = 448.0  # largest finite torch.float8_e4m3fn


        def quantize_fp8_rowwise(t: torch.Tensor, scale: torch.Tensor | None = None):
            """t (R, C) float -> (codes (R, C) float8_e4m3fn, scale (R, 1) float32) with t ~ codes * scale."""
            # TODO 1: refuse a non-2-D or non-floating t, and a given scale that is not (R, 1), positive and finite
            # TODO 2: no scale given: the row's max |t| / 448 in float32 (1.0 for a row of zeros)
            # TODO 3: divide, clamp to [-448, 448], cast to torch.float8_e4m3fn
            ### BEGIN SOLUTION
            if t.dim() != 2:
                raise ValueError(f"quantize_fp8_rowwise expects a 2-D tensor, got shape {tuple(t.shape)}")
            if t.dtype not in (torch.float32, torch.float16, torch.bfloat16):
                raise TypeError(f"t must be float32, float16 or bfloat16, got {t.dtype}")
            if scale is None:
                amax = t.abs().amax(dim=1, keepdim=True).float()                 # (R, 1)
                scale = torch.where(amax > 0, amax / FP8_MAX, torch.ones_like(amax))
            else:
                if tuple(scale.shape) != (t.shape[0], 1):
                    raise ValueError(f"scale must be (R, 1) = {(t.shape[0], 1)}, got {tuple(scale.shape)}")
                scale = scale.float()
                if not bool(torch.isfinite(scale).all()) or bool((scale <= 0).any()):
                    raise ValueError("scale must be positive and finite")
            codes = (t.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
            return codes, scale
            ### END SOLUTION
        ''',
    )
    lesson.md(r"""
        Now the GEMM. `fp8_linear` (given) chains your quantiser and your scaled GEMM; the checks grade
        `fp8_scaled_mm` on codes and scales they build themselves, so this exercise does not depend on the previous
        one, except for `fp8_linear`.
    """)
    lesson.exercise(
        "fp8_matmul",
        r'''
        @triton.jit
        def fp8_scaled_mm_kernel(
            a_ptr, b_ptr, sa_ptr, sb_ptr, c_ptr,
            M, N, K,
            stride_am, stride_ak, stride_bn, stride_bk, stride_sa, stride_sb, stride_cm, stride_cn,
            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
        ):
            """c[tile] = scale_a[rows] * scale_b[cols] * (a[rows, :] @ b[cols, :]^T), a and b FP8, float32 sums."""
            pid_n = tl.program_id(axis=0)
            pid_m = tl.program_id(axis=1)
            # TODO: offsets (rows % M, cols % N), the K loop over FP8 tiles (masked along K) into a float32 accumulator
            # TODO: after the loop: multiply by scale_a of each row and scale_b of each column; masked store
            ### BEGIN SOLUTION
            offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
            offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
            offs_k = tl.arange(0, BLOCK_K)
            rows = offs_m % M
            cols = offs_n % N
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for k0 in range(0, K, BLOCK_K):
                k = k0 + offs_k
                k_in = k < K
                a = tl.load(a_ptr + rows[:, None] * stride_am + k[None, :] * stride_ak, mask=k_in[None, :], other=0.0)
                b = tl.load(b_ptr + cols[None, :] * stride_bn + k[:, None] * stride_bk, mask=k_in[:, None], other=0.0)
                acc = tl.dot(a, b, acc)                                          # FP8 x FP8 -> float32
            sa = tl.load(sa_ptr + rows * stride_sa)                              # (BLOCK_M,)
            sb = tl.load(sb_ptr + cols * stride_sb)                              # (BLOCK_N,)
            acc = acc * sa[:, None] * sb[None, :]
            c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
            tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))
            ### END SOLUTION


        def fp8_configs():
            # FP8 tl.dot on Hopper wants BLOCK_K >= 32 and a warpgroup-sized BLOCK_M; one small tile interpreted.
            if lesson.policy.triton_path != "compiled":
                return [triton.Config({"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32}, num_warps=4)]
            tiles = [(64, 128, 128, 4, 3), (128, 128, 128, 8, 3), (128, 256, 128, 8, 3)]
            return [
                triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k}, num_warps=w, num_stages=s)
                for m, n, k, w, s in tiles
            ]


        fp8_scaled_mm_kernel_tuned = triton.autotune(configs=fp8_configs(), key=["M", "N", "K"])(fp8_scaled_mm_kernel)


        def fp8_scaled_mm(a, scale_a, b, scale_b, out_dtype=torch.bfloat16):
            """(scale_a * a) @ (scale_b * b)^T for FP8 E4M3 a (M, K), b (N, K), float32 scales (M, 1), (N, 1)."""
            # TODO 1: validate dtypes (TypeError), shapes (ValueError); refuse CUDA tensors on cc < 8.9 (RuntimeError)
            # TODO 2: allocate c (M, N) in out_dtype and launch fp8_scaled_mm_kernel_tuned
            ### BEGIN SOLUTION
            if a.dtype != torch.float8_e4m3fn or b.dtype != torch.float8_e4m3fn:
                raise TypeError(f"a and b must be torch.float8_e4m3fn, got {a.dtype} and {b.dtype}")
            if scale_a.dtype != torch.float32 or scale_b.dtype != torch.float32:
                raise TypeError(f"scales must be float32, got {scale_a.dtype} and {scale_b.dtype}")
            if out_dtype not in (torch.float32, torch.float16, torch.bfloat16):
                raise TypeError(f"out_dtype must be float32, float16 or bfloat16, got {out_dtype}")
            if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1]:
                raise ValueError(f"need a (M, K) and b (N, K), got {tuple(a.shape)} and {tuple(b.shape)}")
            M, K = a.shape
            N = b.shape[0]
            if tuple(scale_a.shape) != (M, 1) or tuple(scale_b.shape) != (N, 1):
                raise ValueError(f"scales must be (M, 1) and (N, 1), got {tuple(scale_a.shape)}, {tuple(scale_b.shape)}")
            if a.is_cuda and lesson.policy.triton_path == "compiled" and torch.cuda.get_device_capability(a.device) < (8, 9):
                raise RuntimeError("FP8 tensor cores need a GPU of compute capability 8.9 or newer (Ada, Hopper)")
            c = torch.empty((M, N), dtype=out_dtype, device=a.device)
            grid = lambda META: (triton.cdiv(N, META["BLOCK_N"]), triton.cdiv(M, META["BLOCK_M"]))
            fp8_scaled_mm_kernel_tuned[grid](
                a, b, scale_a, scale_b, c, M, N, K,
                a.stride(0), a.stride(1), b.stride(0), b.stride(1), scale_a.stride(0), scale_b.stride(0),
                c.stride(0), c.stride(1),
            )
            return c
            ### END SOLUTION


        def fp8_linear(x: torch.Tensor, w: torch.Tensor, out_dtype=torch.bfloat16) -> torch.Tensor:
            """x (M, K) @ w (N, K)^T through FP8: both quantised row-wise, then the scaled FP8 GEMM."""
            xq, sx = quantize_fp8_rowwise(x)
            wq, sw = quantize_fp8_rowwise(w)
            return fp8_scaled_mm(xq, sx, wq, sw, out_dtype)
        ''',
    )
    lesson.md(r"""
        ### How much FP8 loses

        The cell below makes four tokens of an activation $f$ times larger than the rest and measures the error of
        the *ordinary* rows of `y` under three schemes: your row-wise FP8 (`fp8_linear`), FP8 with one scale for the
        whole activation (your `fp8_scaled_mm` with a constant `scale_a`), and, for contrast, int8 with one scale for
        the whole activation (simulated in torch). Row-wise scaling does not care about $f$. Per-tensor FP8 holds up
        far longer than per-tensor int8, because E4M3 is a floating-point format: an ordinary row divided by the
        outliers' scale keeps its 3 mantissa bits until it falls below $2^{-6}$ (the subnormals) — that is why
        per-tensor FP8 scaling (NVIDIA Transformer Engine's delayed scaling) works at all, while int8 activations
        need per-token scales or outlier handling (LLM.int8(), SmoothQuant). At $f = 1$, though, int8 is the more
        precise format (about 1% against FP8's 3-4% here): 255 evenly spaced levels beat 3 mantissa bits when the
        range is tame. FP8 trades precision for range.
    """)
    lesson.code(r"""
        torch.manual_seed(0)
        M, K, N = 32, 128, 48
        w = torch.randn(N, K) * 0.05
        factors = [1, 10, 100, 1000, 10000, 100000]
        ordinary = torch.arange(M) % 8 != 0
        curves = {"FP8, row-wise scales": [], "FP8, one scale for x": [], "int8, one scale for x": []}
        try:
            wq, sw = quantize_fp8_rowwise(w)
            for f in factors:
                x = torch.randn(M, K)
                x[::8] *= f  # four outlier tokens
                exact = x.double() @ w.double().T
                err = lambda y: (((y.double() - exact).norm(dim=1) / exact.norm(dim=1))[ordinary]).mean().item()
                curves["FP8, row-wise scales"].append(err(fp8_linear(x.to(DEVICE), w.to(DEVICE), torch.float32).cpu()))
                xq, sx = quantize_fp8_rowwise(x, torch.full((M, 1), x.abs().max().item() / 448))
                y = fp8_scaled_mm(xq.to(DEVICE), sx.to(DEVICE), wq.to(DEVICE), sw.to(DEVICE), torch.float32).cpu()
                curves["FP8, one scale for x"].append(err(y))
                s8 = x.abs().max() / 127
                curves["int8, one scale for x"].append(err((torch.round(x / s8).clamp(-127, 127) * s8) @ w.T))
        except NotImplementedError:
            print("Implement fp8_quantize and fp8_matmul to see the errors.")
        else:
            fig, ax = plt.subplots(figsize=(6, 3.4))
            for name, errs in curves.items():
                ax.loglog(factors, errs, "o-", label=name)
            ax.set_xlabel("outlier tokens are f times larger"); ax.set_ylabel("relative error, ordinary rows")
            ax.set_title("activation scale granularity"); ax.legend(); fig.tight_layout(); plt.show()
    """)
    lesson.md(r"""
        ## 5. Throughput: decode in GB/s, prefill in TFLOP/s (GPU only)

        `python -m llm_algo bench p03.quant_matmul` prints two tables on a GPU. **Decode** ($M$ = 1 and 16, $K$ and $N$
        from Llama-3-8B's projections: 4096 x 4096, 4096 -> 14336 and 14336 -> 4096): every row in GB/s of the bytes
        it must read (codes + scales + x + y), next to the device-to-device copy (the bandwidth roofline), cuBLAS on
        the fp16 weight (`torch.matmul`, eager and compiled: what you run without quantisation; it reads 2 bytes per
        weight, so at equal GB/s it is 2x/4x slower per token), and `torch._weight_int8pack_mm` (PyTorch's own W8A16
        kernel, per-channel scales; used by torchao's `int8_weight_only`) where it exists. **Prefill** ($M = 4096$):
        TFLOP/s against cuBLAS fp16; here the int8/int4 kernels are compute-bound and every program dequantises its
        weight tile again, $M / \text{BLOCK\_M}$ times in total, so expect them *below* cuBLAS: weight-only formats pay
        off in decode. The prefill table also times your `fp8_scaled_mm` and `torch._scaled_mm` (row-wise scales,
        cuBLASLt's FP8 GEMM) on pre-quantised operands: on an H200 FP8 has twice bf16's tensor-core rate, which is why
        prefill-heavy servers run FP8 checkpoints.

        **Reading the numbers.** One run of `python -m llm_algo bench p03.quant_matmul` with the reference solutions
        on an NVIDIA H200 (Triton 3.6, torch 2.11), every baseline in the same run; your GPU will differ. The copy row
        (56 MiB read and written) measured 3663 GB/s. Decode, GB/s of the bytes each kernel must read, and
        milliseconds:

        | $M$, $K \to N$ | int8 G=128 | int4 G=128 | cuBLAS fp16 (eager) | `_weight_int8pack_mm` |
        | --- | --- | --- | --- | --- |
        | 1, 4096 -> 4096 | 420 GB/s, 0.041 ms | 180, 0.048 ms | 1796, 0.019 ms | 100, 0.169 ms |
        | 1, 4096 -> 14336 | 969, 0.062 ms | 259, 0.117 ms | 2985, 0.039 ms | 205, 0.287 ms |
        | 1, 14336 -> 4096 | 670, 0.089 ms | 199, 0.152 ms | 2837, 0.041 ms | 103, 0.573 ms |
        | 16, 4096 -> 4096 | 581, 0.030 ms | 197, 0.045 ms | 1797, 0.019 ms | 27, 0.625 ms |
        | 16, 4096 -> 14336 | 972, 0.062 ms | 298, 0.104 ms | 2991, 0.040 ms | 28, 2.136 ms |
        | 16, 14336 -> 4096 | 662, 0.091 ms | 208, 0.148 ms | 2826, 0.042 ms | 27, 2.205 ms |

        The decode target — int8 near the copy bandwidth and about 2x faster than cuBLAS fp16 per call, int4 about
        4x — is **missed by a wide margin**. int8 reaches 11-27% of the copy row and takes 1.56-2.17x *longer* than
        cuBLAS on the fp16 weight, which itself reads 2x the bytes at 49-82% of the copy; int4 reaches 5-8% and takes
        2.4-3.7x longer. (`torch.compile` of the fp16 matmul is the same cuBLAS call, within 5%.) The one baseline the
        kernels beat is PyTorch's own W8A16 kernel, `torch._weight_int8pack_mm`: int8 is 4.2-6.4x faster at $M = 1$
        and 21-35x at $M = 16$. Two facts locate the limit. First, int4 reads half of int8's bytes and is *slower*
        (0.117 ms against 0.062 at 4096 -> 14336), so these kernels are not bound by HBM bytes but by the
        instructions spent per weight: the gather that loads each int4 byte twice (`k // 2`), the shift, mask and
        sign extension, and in both kernels a scale load per weight element (`GROUP_SIZE` is a run-time argument, so
        the compiler cannot tell that a `BLOCK_K`-long column of the tile shares one scale), the conversions, and
        moving the dequantised tile into the layout `tl.dot` wants. Second, the widest layer, 4096 -> 14336, is the
        fastest one (969 GB/s against 420 for 4096 -> 4096): at $M = 1$ the grid is $N$ / `BLOCK_N` programs, 128
        for $N = 4096$ with 32-wide tiles, about one 4-warp program per SM, too few loads in flight to cover HBM
        latency. Both are likely causes rather than measured ones; Nsight Compute (`ncu --set full`) on one launch
        would separate them (issue-slot utilisation against DRAM throughput). The fixes production kernels use are
        the ones section 6 lists: a `constexpr` group size with one scale row per step (or per-channel scales applied
        after the loop), codes pre-shuffled offline so that a thread unpacks a 32-bit word with a few instructions
        (Marlin, tinygemm), and split-K for small $M$ (`p03.autotune`).

        Prefill ($M = 4096$), TFLOP/s:

        | $K \to N$ | int8 | int4 | cuBLAS fp16 (eager) | FP8 row-wise (yours) | `torch._scaled_mm` (cuBLASLt FP8) |
        | --- | --- | --- | --- | --- | --- |
        | 4096 -> 4096 | 177 (0.25x cuBLAS) | 139 (0.20x) | 696 | 1234 (1.05x `_scaled_mm`) | 1180 |
        | 4096 -> 14336 | 178 (0.27x) | 146 (0.22x) | 671 | 1045 (0.90x) | 1158 |
        | 14336 -> 4096 | 180 (0.26x) | 127 (0.19x) | 684 | 1279 (1.05x) | 1217 |

        int8 and int4 land *below* cuBLAS as expected, by 3.7-5.4x: the same structure without dequantisation
        (`p03.matmul`) reached 653 TFLOP/s at 4096^3 fp16 in the course's p03 run. Each program dequantises its whole
        weight tile at every K step, $M$ / `BLOCK_M` times over the weight in total (32 at `BLOCK_M = 128`), and the
        tile reaches the tensor cores from registers rather than straight from an asynchronous copy into shared memory,
        so the software pipeline that keeps `p03.matmul` fed has much less to overlap (likely; the kernel's TTGIR,
        dumped with `MLIR_ENABLE_DUMP=1`, shows which MMA and which copies it got). The FP8 kernel is level with
        cuBLASLt's FP8 GEMM (0.90-1.05x) and 1.56-1.87x faster than cuBLAS fp16, short of the 2x of the tensor-core
        rates, at 53-65% of the datasheet's 1979 TFLOP/s. One difference in favour of yours: on compute capability 9.0
        Triton's FP8 `tl.dot` by default never promotes its partial sums to full float32 (the backend's
        `max_num_imprecise_acc_default` is $2^{30}$ there), which is cuBLASLt's `use_fast_accum=True`, while the
        benchmark calls `torch._scaled_mm` with the default `use_fast_accum=False`; timing both settings would show how
        much of the comparison that is.
    """)
    lesson.stop()
    lesson.md(r"""
        ## 6. Reading the solutions

        **`w8_matmul_kernel`.** The structure of `p03.matmul`'s kernel on a 2-D grid (grouped ordering matters less here:
        in decode there is one row of tiles). The weight pointer tile is `cols[None, :] * stride_wn + k[:, None] *
        stride_wk`: `(BLOCK_K, BLOCK_N)`, `W` read transposed in place. Every load along K is masked: the x tile
        (`other=0.0`: zero is the identity of the sum), the codes, and the scales, whose group index `k // GROUP_SIZE`
        points past the last group once $k \ge K$. The dequantisation `(q.to(tl.float32) * s).to(x dtype)` happens on
        a tile in registers; the only HBM traffic for the weight is one byte per code.

        **`w4_matmul_kernel`.** The same kernel with three integer instructions in front of the dequantisation:
        `byte >> ((k % 2) * 4)` brings the nibble of column $k$ to the bottom, `& 0xF` drops the other one, and
        `u - ((u >> 3) << 4)` subtracts 16 exactly when bit 3 is set. The scale is indexed by the unpacked $k$; using
        the byte index `k // 2` there silently applies the scale of group $g$ to columns of group $2g$, which is
        invisible when all scales are equal and is why the checks use scales that differ per group.

        **The wrappers.** They refuse what the kernel would misread rather than crash on: a `K` that `G` does not
        divide (the last group would be short and `k // G` would index a scale that the tensor does not have), a
        packed tensor whose shape does not match the `K` of `x` (the kernel would read half the codes, or past them),
        an `int8` tensor passed as packed int4 (same bytes, different meaning).

        **`quantize_fp8_rowwise`.** `abs()` before `amax` (a row's extreme may be negative), the division in float32,
        `torch.where` so that a zero row divides by 1 rather than 0, and the clamp before the cast: with a static or
        delayed scale the values can exceed $448 s$, and whether the cast then saturates or produces NaN depends on
        the PyTorch version. The cast itself rounds to nearest, ties to even, which is what the checks compare with.

        **`fp8_scaled_mm_kernel`.** `p03.matmul`'s K loop on FP8 tiles (`tl.dot` of two FP8 tiles accumulates in
        float32), then the epilogue `acc * sa[:, None] * sb[None, :]`: row scales down the rows, column scales across
        the columns, once. The wrapper refuses CUDA devices below compute capability 8.9 instead of letting the
        compiler fail with a message about `fp8e4nv`.

        **The usual mistakes, and why they are wrong**: one scale per row instead of per
        group; scale strides swapped; loads without the K mask; an unmasked store; the dequantised weight rounded back
        to int8; nibbles in the wrong order, no sign extension, the offset-binary confusion (`u - 8`), the byte index
        used for the scale group; wrappers that accept a group size that does not divide $K$, a packed tensor of the
        wrong shape or int8 bytes as packed int4; for FP8, an amax without `abs`, the int8 habit of mapping onto 127,
        a zero row divided by a zero scale, multiplying by the scale, an unchecked given scale, a forgotten or
        misindexed weight scale, scales applied at every K step, and an ignored `out_dtype`.

        **What production does.** torchao's `int8_weight_only` compiles to `torch._weight_int8pack_mm` or an Inductor
        Triton kernel much like yours; `int4_weight_only` uses `torch._weight_int4pack_mm` (tinygemm: bf16 with a scale
        *and* a zero point per group of 32-256, the codes pre-shuffled by `torch._convert_weight_to_int4pack` into the
        tensor-core fragment order so that a warp loads them with wide, conflict-free loads). vLLM serves GPTQ/AWQ
        int4 checkpoints with Marlin (Frantar et al., arXiv:2408.11743: near the 4x ideal speed-up up to batch 16-32 on
        an A10) and Machete on Hopper; both reorder the codes offline, prefetch asynchronously, and use split-K style
        schedules for small $M$. FP8 (`torch._scaled_mm`, DeepSeek-V3's block scaling, vLLM's and TensorRT-LLM's FP8
        checkpoints) changes the story on Hopper: both operands are 8-bit, so prefill gets faster too.
    """)
    lesson.mistakes()
    return lesson
