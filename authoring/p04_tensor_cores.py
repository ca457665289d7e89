"""Source of 04_CUDA_Systems/05_Tensor_Cores.ipynb (build with `python -m llm_algo build p04.tensor_cores`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p04.tensor_cores",
        path="04_CUDA_Systems/05_Tensor_Cores.ipynb",
        title_en="Tensor cores: WMMA fragments, mma.sync layouts and the fp16-accumulate pitfall",
        title_zh="Tensor Core：WMMA fragment、mma.sync 布局与 fp16 累加陷阱",
        difficulty="hard",
        device="cpu",
        minutes=150,
        prerequisites=["p04.shared_memory", "p03.matmul"],
    )
    lesson.title(
        intro=r"""
        An H200 does about **989 TFLOP/s** of dense fp16/bf16 matrix math on its tensor cores and about **67 TFLOP/s**
        of plain fp32 FMA on its CUDA cores (NVIDIA's H200 datasheet; the sparse figure is twice the dense one). That
        factor of 15 is why every large matmul in an LLM (the QKV and MLP projections, attention's $QK^\top$ and $PV$,
        the LM head) runs in fp16, bf16 or fp8 on the tensor cores, and why the register-blocked SGEMM of
        `p04.shared_memory` can never catch up with cuBLAS on half-precision inputs. A tensor core does not run one
        thread's FMA. A whole **warp** issues one matrix multiply-accumulate $D = A B + C$ on small tiles spread across
        its 32 lanes' registers. The usual contract is fp16/bf16 inputs with an **fp32 accumulator**, and this lesson
        shows with numbers what breaks when the accumulator is fp16.

        **You will implement** a tile-level model of a tensor-core GEMM in PyTorch (`mma_tiled`: exact 16×16×16
        tile products, one rounding per K step in the accumulator's dtype), which reproduces the fp16-accumulate
        pitfall (swamping, overflow at 65504); the lane → element map of PTX's `mma.sync.m16n8k16`, and a
        warp-level multiply built from per-lane fragments; and in CUDA C++ a **WMMA GEMM** (fp16 and bf16 in, fp32
        accumulate and out, shared-memory tiles, 8 warps that each own a 4×2 block of 16×16 fragments). **Graded
        against** float64 products and an independently written rounding model, an encoding of the PTX ISA's fragment
        tables, and, for the kernel, float64 products with K-derived error bounds (the allowance of a truncating fp32
        accumulator, as tensor cores have). The first two exercises grade on every machine. The C++ one
        grades on a GPU with compute capability 8.0 or newer (on a CPU it reads *needs a GPU*).
    """
    )
    lesson.md(r"""
        ## 本节要点

        - **为什么用 Tensor Core**：H200 的 fp16/bf16 稠密矩阵算力约 989 TFLOP/s，fp32 FMA 约 67 TFLOP/s（均为 NVIDIA 规格值，非实测），相差约 15 倍；LLM 中所有大矩阵乘都跑在 Tensor Core 上。
        - **Warp 级矩阵乘加**：一个 warp 协作完成 $D = AB + C$。WMMA API（`nvcuda::wmma`）以 16×16×16 的 fragment 为单位：`load_matrix_sync`、`mma_sync`、`store_matrix_sync`；WMMA fragment 内元素到 lane 的映射**未公开**。
        - **PTX `mma.sync.aligned.m16n8k16`**：布局由 PTX ISA 规定。`groupID = lane >> 2`，`threadID_in_group = lane % 4`；A 每个 lane 8 个元素（行 groupID 或 groupID+8，列 2t、2t+1，再加 8），B 4 个元素（行 2t+(i&1)(+8)，列 groupID），C/D 4 个元素（行 groupID(+8)，列 2t+(i&1)）。
        - **fp16 累加陷阱**：fp16 只有 11 位有效数字（$u = 2^{-11}$）、最大 65504。K = 4096 的点积用 fp16 累加：大数吃小数（2048 + 1 = 2048）、误差随 $K$ 增长（最坏 $\approx K u$，随机约 $\sqrt{K} u$）、超过 65504 变成 inf。fp32 累加（$u = 2^{-24}$）几乎无损，所以 cuBLAS / `torch.matmul` 对 fp16/bf16 都用 fp32 累加（参见 `torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction`）。
        - **分块模型**：M、N 方向的分块只是调度，不改变数值；只有沿 K 的每一步舍入决定误差。
        - **WMMA GEMM**：block 计算 128×128 的 C 块，沿 K 每次把 128×32 的 A 和 32×128 的 B 用 16 字节向量读入 shared memory（行尾 padding 8 个 half），8 个 warp 各持 4×2 个 16×16 累加 fragment；累加器用 fp32，输出 fp32。
        - **Hopper**：全速 Tensor Core 需要 `wgmma`（warpgroup 级、操作数直接来自 shared memory）+ TMA，CUTLASS 3 和 FlashAttention-3 就是这样做的；WMMA/`mma.sync` 达不到这个峰值。
        - **实测（H200，一次运行，`python -m llm_algo bench p04.tensor_cores`）**：4096³ 时本节 WMMA GEMM fp16 为 106.6 TFLOP/s，cuBLAS 758.4（0.14 倍）；bf16 为 51.1 对 748.9（0.07 倍）。“达到 cuBLAS 60%”的目标**未达成**：WMMA 只能生成 `mma.sync`，没有 `wgmma`/TMA，且拷贝是同步的、没有流水线。bf16 慢一半的可能原因：其内核用 130 个寄存器（fp16 为 128），每个 SM 只能驻留 1 个 block（fp16 为 2 个）；这是推断，需用 Nsight Compute 证实。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. Why tensor cores, in numbers

        A matmul $C = AB$ with $A \in \mathbb{R}^{M \times K}$, $B \in \mathbb{R}^{K \times N}$ costs $2MNK$ FLOPs. At
        $M = N = K = 4096$ that is $1.37 \times 10^{11}$ FLOPs:

        | unit (H200, spec sheet) | peak | time for 4096³ at peak |
        | --- | --- | --- |
        | CUDA cores, fp32 FMA | ~67 TFLOP/s | 2.05 ms |
        | tensor cores, tf32 (dense) | ~495 TFLOP/s | 0.28 ms |
        | tensor cores, fp16/bf16 (dense) | ~989 TFLOP/s | 0.14 ms |
        | tensor cores, fp8 (dense) | ~1979 TFLOP/s | 0.07 ms |

        The operands are $3 \cdot 4096^2 \cdot 2$ bytes = 100 MB, 21 µs at 4.8 TB/s, so this GEMM is compute-bound with
        room to spare: its arithmetic intensity is about 1400 FLOP/byte, against a ridge point of
        $989 / 4.8 \approx 206$ FLOP/byte. Prefilling 4096 tokens through an 8B-parameter model costs about
        $2 \cdot 8 \times 10^9 \cdot 4096 \approx 6.6 \times 10^{13}$ FLOPs, 66 ms at the fp16 peak and about a second
        on the fp32 cores.

        **What a tensor core computes.** One instruction, issued by all 32 lanes of a warp together ("warp-synchronous"),
        computes a small $D = A B + C$. The operands live in the **registers** of the 32 lanes, each lane holding a few
        elements of each matrix (its *fragment*, 片段). Three programming levels reach it:

        | level | shape per instruction | who issues it | layout of elements in lanes |
        | --- | --- | --- | --- |
        | CUDA C++ `nvcuda::wmma` (Volta+, bf16 on Ampere+) | 16×16×16 (also 32×8×16, 8×32×16) | a warp | **unspecified**: only `load/store_matrix_sync` know it |
        | PTX `mma.sync.aligned.m16n8k16` (Ampere+) | 16×8×16 | a warp | **specified** in the PTX ISA (section 4) |
        | PTX `wgmma.mma_async` (Hopper only) | 64×N×16, N up to 256 | a *warpgroup* of 4 warps, asynchronously | A from registers or shared memory, B from shared memory via descriptors |

        A `wmma::mma_sync` on a 16×16×16 fragment typically compiles to two `mma.sync.m16n8k16` (SASS `HMMA.16816`),
        which you can check with `cuobjdump -sass`. On Hopper, `mma.sync` still works, but the full 989 TFLOP/s needs
        `wgmma`, fed by the **TMA** (Tensor Memory Accelerator) copying tiles into shared memory asynchronously.
        That is what cuBLAS's Hopper kernels, CUTLASS 3 (CuTe's `SM90_64x128x16_F32F16F16_SS` atoms) and
        FlashAttention-3 use. WMMA cannot issue `wgmma`, so a WMMA kernel on an H200 tops out well below cuBLAS, even
        before the pipelining this lesson leaves to `p04.async_copy`. What you learn here carries over: fragments, the
        fp32 accumulator, the shared-memory staging.

        ## 2. The math of a tile-level GEMM

        Split $K$ into steps of $k = 16$. With $A_t = A[:, 16t : 16t + 16]$ of shape $(M, 16)$ and
        $B_t = B[16t : 16t + 16, :]$ of shape $(16, N)$,

        $$
        C = \sum_{t=0}^{K/16 - 1} A_t B_t, \qquad
        \text{acc}_{t+1} = \operatorname{round}_{\text{acc}}\!\left(\text{acc}_t + A_t B_t\right), \quad \text{acc}_0 = 0 .
        $$

        A tensor core forms the 16-term products $A_t B_t$ from fp16/bf16 inputs without rounding each product (an
        11-bit × 11-bit significand product fits in fp32's 24 bits exactly) and adds them to the accumulator, which is
        **rounded to the accumulator's type** once per instruction. Splitting $M$ and $N$ into 16×16 output tiles (or
        128×128 block tiles, or 64×32 warp tiles) decides *who* computes an element and from which memory, but not
        the numbers. Each output element $C_{ij}$ sees the same sequence of $K/16$ roundings. Only the K steps and the
        accumulator's type change the result.

        ## 3. The fp16-accumulate pitfall

        | type | significand bits $p$ | unit roundoff $u = 2^{-p}$ | largest finite | spacing at 2048 |
        | --- | --- | --- | --- | --- |
        | fp16 | 11 | $4.9 \times 10^{-4}$ | 65504 | 2 |
        | bf16 | 8 | $3.9 \times 10^{-3}$ | $3.4 \times 10^{38}$ | 16 |
        | fp32 | 24 | $6.0 \times 10^{-8}$ | $3.4 \times 10^{38}$ | $2.4 \times 10^{-4}$ |

        Each rounding of a running sum $s$ adds an error of at most $u\,|s|$. Over $n = K/16$ steps the error of the
        result is bounded by about $n\,u \sum_k |a_k b_k|$ (the classic bound for recursive summation, Higham,
        *Accuracy and Stability of Numerical Algorithms*, ch. 4). With random signs the errors partly cancel and grow
        like $\sqrt{n}\,u$ times the size of the partial sums. In fp16 at $K = 4096$, the worst-case bound for 256
        roundings of $4.9 \times 10^{-4}$ each is $256 \cdot 4.9 \times 10^{-4} \approx 12\%$ of $\sum |a_k b_k|$.
        Three failure modes, all in the first exercise's checks:

        1. **Swamping** (大数吃小数). Once $|\text{acc}|$ is more than $2^{p}$ times an increment, adding the increment
           changes nothing: in fp16, $2048 + 1 = 2048$ (2049 lies halfway between 2048 and 2050 and rounds to the even
           one). A dot product whose first tile contributes 2048 and whose 255 later tiles contribute 1 each ends at
           2048 instead of 2303.94, a 11% error, and every later increment of 1 is simply lost.
        2. **Overflow.** 4096 products of $4 \times 4$ sum to 65536 > 65504: fp16 returns `inf`, and the `inf` turns
           into NaN in the next softmax or LayerNorm. Large sums are not exotic: LLMs have outlier feature dimensions
           whose values are many times larger than the rest (Dettmers et al., *LLM.int8()*, 2022), and a long K
           adds them up.
        3. **Slow drift.** Even without either extreme, the relative error of an fp16-accumulated dot product grows
           with $K$, while fp32's stays near $10^{-6}$ (the figure after the exercise).

        **Why it is tempting.** On GPUs whose fp16-accumulate tensor-core rate is double the fp32-accumulate rate, fp16
        accumulation is twice as fast. A PyTorch issue quotes 330 vs 165 TFLOP/s for an RTX 4090
        (pytorch/pytorch#123157). Data-center parts (A100, H100, H200) run both at the same rate, so there is nothing to
        gain there. **What production does:** PyTorch calls cuBLAS with an fp32 compute type for fp16 and bf16 GEMMs
        (`cublasGemmEx(..., CUDA_R_32F, ...)`); only the opt-in `torch.backends.cuda.matmul.allow_fp16_accumulation`
        (default `False`) switches fp16 GEMMs to an fp16 compute type.
        `torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction` (default `True`) only lets cuBLAS use
        reduced precision in some *reductions*, such as combining split-K partial sums. Setting it to `False` passes `CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION` (the bf16 twin is
        `allow_bf16_reduced_precision_reduction`). Triton's `tl.dot` accumulates in fp32 by default (`out_dtype`), as
        do CUTLASS's default GEMMs and FlashAttention's $QK^\top$ and $PV$.
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt
        import torch

        from llm_algo.cuda.inline import compile_cuda

        TILE_K = 16  # the K depth of one tensor-core step (wmma 16x16x16, mma.sync m16n8k16)
        WARP = 32
        INPUT_DTYPES = (torch.float16, torch.bfloat16)  # what tensor cores multiply in this lesson
        ACC_DTYPES = (torch.float16, torch.bfloat16, torch.float32)  # accumulators the model supports
    """)
    lesson.md(r"""
        ## 4. Exercise `mma_tiled`: a tensor-core GEMM, one K step at a time

        Write `mma_tiled(A, B, acc_dtype)` for `A` $(M, K)$ and `B` $(K, N)$, both float16 or both bfloat16, with
        $M, N, K$ multiples of 16. Walk $K$ in steps of `TILE_K = 16`. At each step compute the tile products
        $A_t B_t$ **exactly** (in float64: products of fp16/bf16 values are exact there, and a sum of 16 of them is
        exact, or off by far less than any rounding this exercise models), add
        them to the accumulator in float64, and **round the sum to `acc_dtype`** (`float16`, `bfloat16` or `float32`)
        before the next step. Return the $(M, N)$ accumulator in `acc_dtype`. Do all output tiles of a step at once: a
        broadcast multiply and a `sum` over the 16-long K axis do it, because the $M \times N$ tiling does not change
        the numbers (section 2). `torch.matmul`, `@`, `mm`, `bmm`, `einsum` and `F.linear` are refused: the checks use
        them as references. Refuse inputs of another dtype (or of two different dtypes) with a `TypeError`, and
        shapes that are not 2-D, do not match, or are not multiples of 16, and an unsupported `acc_dtype`, with a
        `ValueError`.
    """)
    lesson.exercise(
        "mma_tiled",
        r'''
        def mma_tiled(A: torch.Tensor, B: torch.Tensor, acc_dtype: torch.dtype = torch.float32) -> torch.Tensor:
            """A @ B as a tensor core computes it: A (M, K), B (K, N) float16 or bfloat16, M, N, K multiples of 16.
            Each K step of 16 adds the exact tile products A[:, k0:k0+16] @ B[k0:k0+16, :] to the accumulator and
            rounds the sum to acc_dtype (float16, bfloat16 or float32). Returns the (M, N) accumulator in acc_dtype."""
            # TODO 1: validate (TypeError for dtypes; ValueError for shapes, multiples of 16 and acc_dtype)
            # TODO 2: acc = zeros (M, N) in acc_dtype; for each K step: the exact tile products in float64 by a
            #         broadcast multiply and a sum over K, added to acc in float64, then rounded to acc_dtype
            ### BEGIN SOLUTION
            if not (isinstance(A, torch.Tensor) and isinstance(B, torch.Tensor)):
                raise TypeError(f"mma_tiled takes two tensors, got {type(A).__name__} and {type(B).__name__}")
            if A.dtype not in INPUT_DTYPES or B.dtype != A.dtype:
                raise TypeError(f"mma_tiled multiplies float16 or bfloat16 inputs of one dtype, got {A.dtype}, {B.dtype}")
            if acc_dtype not in ACC_DTYPES:
                raise ValueError(f"acc_dtype must be one of {ACC_DTYPES}, got {acc_dtype!r}")
            if A.dim() != 2 or B.dim() != 2 or A.shape[1] != B.shape[0]:
                raise ValueError(f"mma_tiled needs A (M, K) and B (K, N), got {tuple(A.shape)} and {tuple(B.shape)}")
            M, K = A.shape
            N = B.shape[1]
            if M % TILE_K or N % TILE_K or K % TILE_K:
                raise ValueError(f"M, N and K must be multiples of {TILE_K}, got M={M}, N={N}, K={K}")
            acc = torch.zeros(M, N, dtype=acc_dtype)  # (M, N)
            for k0 in range(0, K, TILE_K):
                a = A[:, k0 : k0 + TILE_K].double()  # (M, 16)
                b = B[k0 : k0 + TILE_K, :].double()  # (16, N)
                tile = (a[:, :, None] * b[None, :, :]).sum(dim=1)  # (M, N): exact tile products
                acc = (acc.double() + tile).to(acc_dtype)  # one rounding per K step
            return acc
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        **Error against K.** The cell below runs your `mma_tiled` on $16 \times K$ by $K \times 16$ fp16 inputs for
        $K = 64 \dots 4096$, and plots the relative error of the result against the float64 product for each
        accumulator. The left panel uses inputs of random sign, so errors partly cancel and the sums stay small. The
        right panel uses positive inputs: the sum only grows, and swamping sets in. The dashed lines show how
        $\sqrt{n}\,u$ and $n\,u$ scale for fp16 (their height is arbitrary).
    """)
    lesson.code(r"""
        try:
            ks = [64, 128, 256, 512, 1024, 2048, 4096]
            generator = torch.Generator().manual_seed(0)
            panels = {
                "random signs: N(0, 1)": lambda shape: torch.randn(shape, generator=generator),
                "positive: U(0, 1)": lambda shape: torch.rand(shape, generator=generator),
            }
            fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), sharey=True)
            for ax, (title, draw) in zip(axes, panels.items()):
                errors = {dtype: [] for dtype in ACC_DTYPES}
                for K in ks:
                    A = draw((16, K)).half()
                    B = draw((K, 16)).half()
                    exact = A.double()[:, :, None].mul(B.double()[None]).sum(1)  # (16, 16) float64
                    for dtype in ACC_DTYPES:
                        got = mma_tiled(A, B, dtype).double()
                        errors[dtype].append(float((got - exact).abs().max() / exact.abs().mean()))
                for dtype, values in errors.items():
                    ax.loglog(ks, values, marker="o", label=f"accumulate in {str(dtype)[6:]}")
                steps = torch.tensor(ks) / TILE_K
                u16 = 2.0**-11
                ax.loglog(ks, (steps.sqrt() * u16).tolist(), "k--", lw=0.8, label=r"$\sqrt{K/16}\,u_{fp16}$")
                ax.loglog(ks, (steps * u16).tolist(), "k:", lw=0.8, label=r"$(K/16)\,u_{fp16}$")
                ax.set_title(title, fontsize=9)
                ax.set_xlabel("K (fp16 inputs, 16 x K @ K x 16)")
            axes[0].set_ylabel("max |error| / mean |C|")
            axes[1].legend(fontsize=7)
            plt.tight_layout()
            plt.show()
            A = torch.randn(16, 4096, generator=generator).half()
            B = torch.randn(4096, 16, generator=generator).half()
            exact = A.double()[:, :, None].mul(B.double()[None]).sum(1)
            for dtype in ACC_DTYPES:
                err = float(((mma_tiled(A, B, dtype).double() - exact).abs().max() / exact.abs().mean()))
                print(f"K = 4096, N(0, 1) inputs, accumulate in {str(dtype)[6:]:>8}: max relative error {err:.2e}")
        except NotImplementedError:
            print("Implement mma_tiled first: this figure uses it.")
    """)
    lesson.md(r"""
        Read the figure with the three numbers the cell prints for $K = 4096$ and N(0, 1) inputs: a maximum relative
        error of about $10^{-2}$ with an fp16 accumulator, about $10^{-1}$ with bf16 and about $10^{-6}$ with fp32, on
        the **same** fp16 inputs. The inputs are not the problem; the accumulator is. bf16 is the worst accumulator of
        the three: its range spares it the overflow at 65504, but its 8-bit significand swamps sooner. That is why
        bf16 training still accumulates every matmul, and the gradients, in fp32 (`p02.mixed_precision`).

        ## 5. Below WMMA: the `mma.sync.m16n8k16` fragment layout

        WMMA hides which lane holds which element. PTX's `mma.sync` shows it, and hand-written kernels (FlashAttention
        2, CUTLASS 2.x, Marlin, every fused epilogue that touches the accumulator in registers) depend on it. For
        `mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32` (and `.bf16`), $A$ is $16 \times 16$ (rows $m$, columns
        $k$), $B$ is $16 \times 8$ ($k \times n$), and $C$, $D$ are $16 \times 8$ in fp32. With

        $$
        g = \text{groupID} = \ell \gg 2 \in [0, 8), \qquad t = \text{threadID\_in\_group} = \ell \bmod 4 \in [0, 4)
        $$

        for lane $\ell$, the PTX ISA ("Matrix Fragments for mma.m16n8k16 with floating point type") gives:

        | operand | registers per lane | element $i$ sits at (row, col) |
        | --- | --- | --- |
        | A (16×16) | $a_0 \dots a_7$ (four `.f16x2`) | row $= g$ for $i \in \{0,1,4,5\}$, $g + 8$ otherwise; col $= 2t + (i \,\&\, 1)$ for $i < 4$, $2t + (i \,\&\, 1) + 8$ for $i \ge 4$ |
        | B (16×8) | $b_0 \dots b_3$ (two `.f16x2`) | row $= 2t + (i \,\&\, 1)$ for $i < 2$, $2t + (i \,\&\, 1) + 8$ for $i \ge 2$; col $= g$ |
        | C, D (16×8) | $c_0 \dots c_3$ (four `.f32`) | row $= g$ for $i < 2$, $g + 8$ for $i \ge 2$; col $= 2t + (i \,\&\, 1)$ |

        Read it as: the 8 groups of 4 lanes take the 8 rows (and rows + 8) of $A$ and $C$, and within a group the 4
        lanes take consecutive **pairs** of columns. The pairs are what makes an `.f16x2` register: two
        neighbouring fp16 values of one row, one 32-bit load. $A$'s four registers are its four 8×8 quadrants, in the
        order top-left, bottom-left, top-right, bottom-right. That order is easy to get wrong: $a_2, a_3$ move **down**
        8 rows, and $a_4, a_5$ move **right** 8 columns. $B$ is stored "col" (each lane holds a pair of consecutive
        $k$ for one $n$), which is why the instruction is `.row.col`, and why `ldmatrix.trans` exists to load a
        row-major $B$ tile into it.

        ## 6. Exercise `mma_fragments`: the lane map and a warp-level multiply

        Write

        - `fragment_coords(operand, lane)`: the list of (row, col) that lane `lane`'s registers hold, in register
          order, for `operand` `"a"` (8 pairs), `"b"` (4) or `"c"`/`"d"` (4, the accumulator layout). Refuse any other
          operand and a lane outside 0..31 (or not an `int`) with a `ValueError`.
        - `warp_mma(a_regs, b_regs, c_regs)`: what one `mma.sync.m16n8k16` leaves in each lane's $d$ registers.
          `a_regs` is $(32, 8)$, `b_regs` $(32, 4)$, both float16 or both bfloat16; `c_regs` is $(32, 4)$ float32; row
          $\ell$ of each holds lane $\ell$'s registers. Reassemble $A$, $B$, $C$ from the fragments with your
          `fragment_coords`, compute $D = AB + C$ in float64 without a matmul builtin, round it to float32 and hand
          each lane its four $d$ values, a $(32, 4)$ float32 tensor. Refuse wrong shapes with a `ValueError` and
          wrong dtypes with a `TypeError`.

        The checks compare `fragment_coords` with their own encoding of the PTX tables. They then feed `warp_mma`
        fragments cut from random matrices and chain several calls into a $16 \times 64$ by $64 \times 8$ product, so a
        wrong map shows up as a wrong product.
    """)
    lesson.exercise(
        "mma_fragments",
        r'''
        FRAGMENT_SHAPES = {"a": (16, 16), "b": (16, 8), "c": (16, 8), "d": (16, 8)}  # (rows, cols) of each operand
        REGISTERS = {"a": 8, "b": 4, "c": 4, "d": 4}  # elements per lane


        def fragment_coords(operand: str, lane: int) -> list[tuple[int, int]]:
            """The (row, col) of each element that `lane` (0..31) holds, in register order, for one
            mma.sync.aligned.m16n8k16 with f16/bf16 inputs and an f32 accumulator: operand "a" (16 x 16, 8 elements),
            "b" (16 x 8, k x n, 4 elements), "c" or "d" (16 x 8, 4 elements)."""
            # TODO 1: validate operand and lane (ValueError)
            # TODO 2: groupID = lane >> 2, threadID_in_group = lane % 4; the PTX ISA's row and col for each register
            ### BEGIN SOLUTION
            if operand not in REGISTERS:
                raise ValueError(f"operand must be 'a', 'b', 'c' or 'd', got {operand!r}")
            if isinstance(lane, bool) or not isinstance(lane, int) or not 0 <= lane < WARP:
                raise ValueError(f"lane must be an int in [0, 32), got {lane!r}")
            group, thread = lane >> 2, lane % 4
            coords = []
            for i in range(REGISTERS[operand]):
                if operand == "a":
                    row = group + 8 * ((i // 2) % 2)  # a0 a1, a4 a5: row g; a2 a3, a6 a7: row g + 8
                    col = 2 * thread + (i & 1) + 8 * (i // 4)  # a4..a7: the right half
                elif operand == "b":
                    row = 2 * thread + (i & 1) + 8 * (i // 2)  # b2 b3: k + 8
                    col = group
                else:
                    row = group + 8 * (i // 2)  # c2 c3: row g + 8
                    col = 2 * thread + (i & 1)
                coords.append((row, col))
            return coords
            ### END SOLUTION


        def warp_mma(a_regs: torch.Tensor, b_regs: torch.Tensor, c_regs: torch.Tensor) -> torch.Tensor:
            """One mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32 on per-lane fragments: a_regs (32, 8)
            and b_regs (32, 4) float16 or bfloat16, c_regs (32, 4) float32 (row = lane). Returns d_regs (32, 4)
            float32 holding D = A B + C in the accumulator layout."""
            # TODO 1: validate shapes (ValueError) and dtypes (TypeError)
            # TODO 2: A (16, 16), B (16, 8), C (16, 8) in float64 from the fragments (fragment_coords)
            # TODO 3: D = A B + C without a matmul builtin, rounded to float32; scatter back into (32, 4) registers
            ### BEGIN SOLUTION
            for regs, operand in ((a_regs, "a"), (b_regs, "b"), (c_regs, "c")):
                if not isinstance(regs, torch.Tensor) or tuple(regs.shape) != (WARP, REGISTERS[operand]):
                    raise ValueError(f"{operand}_regs must be a ({WARP}, {REGISTERS[operand]}) tensor, got "
                                     f"{tuple(getattr(regs, 'shape', ()))}")
            if a_regs.dtype not in INPUT_DTYPES or b_regs.dtype != a_regs.dtype:
                raise TypeError(f"a_regs and b_regs must both be float16 or bfloat16, got {a_regs.dtype}, {b_regs.dtype}")
            if c_regs.dtype != torch.float32:
                raise TypeError(f"c_regs must be float32 (the accumulator), got {c_regs.dtype}")
            matrices = {}
            for regs, operand in ((a_regs, "a"), (b_regs, "b"), (c_regs, "c")):
                matrix = torch.zeros(FRAGMENT_SHAPES[operand], dtype=torch.float64)
                for lane in range(WARP):
                    for i, (row, col) in enumerate(fragment_coords(operand, lane)):
                        matrix[row, col] = regs[lane, i].double()
                matrices[operand] = matrix
            A, B, C = matrices["a"], matrices["b"], matrices["c"]  # (16, 16), (16, 8), (16, 8)
            D = ((A[:, :, None] * B[None, :, :]).sum(dim=1) + C).float()  # (16, 8)
            d_regs = torch.empty(WARP, REGISTERS["d"], dtype=torch.float32)
            for lane in range(WARP):
                for i, (row, col) in enumerate(fragment_coords("d", lane)):
                    d_regs[lane, i] = D[row, col]
            return d_regs
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        The drawing below is made by your `fragment_coords`: each cell of $A$, $B$ and $C$ shows the lane that holds it
        and the register index, and the colour is the lane's group $g$. Compare it with the PTX ISA's figures ("MMA
        .m16n8k16 fragment layout for matrix A with .f16/.bf16 type").
    """)
    lesson.code(r"""
        try:
            fig, axes = plt.subplots(1, 3, figsize=(13, 5.2), gridspec_kw={"width_ratios": [16, 8, 8]})
            for ax, operand, name in zip(axes, ("a", "b", "c"), ("A (16 x 16, m x k)", "B (16 x 8, k x n)",
                                                                   "C / D (16 x 8, m x n)")):
                rows, cols = FRAGMENT_SHAPES[operand]
                owner = torch.full((rows, cols), -1)
                labels = {}
                for lane in range(WARP):
                    for i, (row, col) in enumerate(fragment_coords(operand, lane)):
                        owner[row, col] = lane
                        labels[row, col] = f"T{lane}\n{operand}{i}"
                ax.imshow((owner // 4).numpy(), cmap="tab10", vmin=0, vmax=9, alpha=0.55)
                for (row, col), text in labels.items():
                    ax.text(col, row, text, ha="center", va="center", fontsize=4.5)
                ax.set_title(name, fontsize=9)
                ax.set_xticks(range(cols))
                ax.set_yticks(range(rows))
                ax.tick_params(labelsize=6)
            plt.suptitle("mma.sync.m16n8k16: lane (T) and register of every element; colour = groupID = lane >> 2",
                         fontsize=9)
            plt.tight_layout()
            plt.show()
        except NotImplementedError:
            print("Implement fragment_coords first: this drawing uses it.")
    """)
    lesson.md(r"""
        ## 7. A WMMA GEMM in CUDA C++

        The kernel combines `p04.shared_memory`'s tiling with tensor-core fragments:

        ```
        block (blockIdx.y, blockIdx.x): a 128 x 128 tile of C, 256 threads = 8 warps in a 2 x 4 grid
           warp (wr, wc): a 64 x 32 sub-tile = 4 x 2 accumulator fragments of 16 x 16 (fp32)
        for k0 in 0, 32, 64, ... < K:
           all 256 threads copy A[128 rows, k0 : k0 + 32] -> As[128][32 + 8]    (16-byte vectors, 0 past M or K)
                                and B[k0 : k0 + 32, 128 cols] -> Bs[32][128 + 8]    (0 past K or N)
           __syncthreads()
           for kk in 0, 16:  each warp loads 4 A fragments and 2 B fragments from shared memory
                             and issues 4 x 2 = 8 wmma::mma_sync into its accumulators
           __syncthreads()
        each warp stores its 8 fragments through a 16 x 16 shared buffer into C (fp32), skipping those past M or N
        ```

        **Reuse.** Per K step of 32, a block reads $(128 + 128) \cdot 32 \cdot 2$ bytes = 16 KB and does
        $2 \cdot 128^2 \cdot 32 = 1.05$ MFLOP: 64 FLOP per byte of global (mostly L2) traffic. Inside the block, each A
        fragment a warp loads from shared memory feeds 2 MMAs, and each B fragment feeds 4.

        **Why each choice.**

        - *16-byte vector loads* (`uint4`, 8 halves): a quarter of the load instructions of 4-byte loads. They need
          16-byte aligned addresses. Since $K$ and $N$ are multiples of 16, every row starts 32-byte aligned **if the
          tensor itself does**, and a tensor view can start anywhere. So the host `TORCH_CHECK`s the alignment of
          `data_ptr()`.
        - *Multiples of 16* for $M, N, K$: an 8-element vector and a 16×16 fragment are then either wholly inside the
          matrix or wholly outside, so the kernel needs no per-element edge logic. It zero-fills whole vectors past $M$,
          $N$ or $K$ (a K tail of 16 when $K$ is not a multiple of 32, and the partial block tiles at the right and bottom
          edges), and skips whole fragments at the store. Other sizes are refused (pad them to a multiple of 16
          yourself).
        - *Padding* of 8 halves (16 bytes) per shared row: `load_matrix_sync` needs 32-byte-aligned fragment pointers
          and a leading dimension that is a multiple of 8 halves; the pad keeps both and shifts consecutive rows
          across banks. Swizzled layouts (CUTLASS, `ldmatrix` with an XOR pattern) avoid the wasted space.
        - *An fp32 accumulator and an fp32 output*: section 3. cuBLAS would round the output to fp16 (`torch.matmul`
          returns the input dtype), and a fused epilogue would add a bias or an activation before that rounding.
        - *The epilogue through shared memory*: WMMA does not document which lane holds which accumulator element,
          so per-element work (a conversion, a bound check, a bias) goes through `store_matrix_sync` into a small
          per-warp buffer first.

        ## 8. Exercise `wmma_gemm_cuda`

        Fill in `WMMA_GEMM_CUDA` (each `raise NotImplementedError` line inside the string is C++ for you to write):

        - the kernel's main loop: the two tile copies with their bounds, the barriers, the fragment loads and the
          `mma_sync`s;
        - the epilogue: for each of the warp's fragments inside $C$, `store_matrix_sync` into the warp's staging buffer,
          `__syncwarp()`, convert and write the 256 values to `C`, `__syncwarp()`;
        - `wmma_gemm_out(A, B, out)`: `TORCH_CHECK` CUDA, same dtype (float16 or bfloat16), 2-D, matching inner
          dimensions, $M, N, K$ multiples of 16, contiguous, 16-byte aligned, `out` a contiguous float32 $(M, N)$
          tensor on the same device, sizes that fit an `int` and the grid. Then launch
          $(\lceil N/128 \rceil, \lceil M/128 \rceil)$ blocks of 256 threads on the current stream (nothing when $M$ or
          $N$ is 0), with fp32 accumulation for both input dtypes, check the launch, and **return `out`**. Messages
          are string literals, or `std::string` built with `std::to_string` of integers;
        - `load_wmma_gemm`, which builds the extension.

        `wmma_gemm(A, B)`, which allocates a float32 `out`, is given. bf16 fragments need compute capability 8.0
        (Ampere) or newer, so on a T4 the build fails and the checks read *needs a GPU*.
    """)
    lesson.exercise(
        "wmma_gemm_cuda",
        r'''
        WMMA_GEMM_CUDA = r"""
        #include <c10/cuda/CUDAException.h>
        #include <c10/cuda/CUDAGuard.h>
        #include <c10/cuda/CUDAStream.h>
        #include <cuda_bf16.h>
        #include <cuda_fp16.h>
        #include <mma.h>

        #include <cstdint>
        #include <string>

        using namespace nvcuda;

        constexpr int BM = 128, BN = 128, BK = 32;            // block tile of C, and K per shared-memory step
        constexpr int FRAG = 16;                              // wmma 16 x 16 x 16
        constexpr int WM = 64, WN = 32;                       // warp tile: 4 x 2 fragments
        constexpr int WARPS_M = BM / WM, WARPS_N = BN / WN;   // 2 x 4 warps
        constexpr int THREADS = 32 * WARPS_M * WARPS_N;       // 256
        constexpr int FM = WM / FRAG, FN = WN / FRAG;         // 4 x 2 accumulator fragments per warp
        constexpr int PAD = 8;                                // halves added to each shared row (16 bytes)
        constexpr int VEC = 8;                                // halves per 16-byte vector (uint4)

        // Accumulator element <-> float (torch builds with __CUDA_NO_HALF_CONVERSIONS__: no implicit casts).
        template <typename T> __device__ __forceinline__ T from_float(float v);
        template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
        template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half(v); }
        __device__ __forceinline__ float to_float(float v) { return v; }
        __device__ __forceinline__ float to_float(__half v) { return __half2float(v); }

        // C (M, N) fp32 = A (M, K) @ B (K, N), all row-major; In = __half or __nv_bfloat16; Acc = the accumulator type.
        // M, N, K are multiples of 16 and A, B are 16-byte aligned (the host checks).
        template <typename In, typename Acc>
        __global__ void __launch_bounds__(THREADS)
            wmma_gemm_kernel(const In* __restrict__ A, const In* __restrict__ B, float* __restrict__ C, int M, int N,
                             int K) {
            __shared__ __align__(128) In As[BM][BK + PAD];
            __shared__ __align__(128) In Bs[BK][BN + PAD];
            __shared__ __align__(128) Acc Cs[THREADS / 32][FRAG * FRAG];  // one staging fragment per warp
            const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
            const int warp_row = warp / WARPS_N, warp_col = warp % WARPS_N;
            const int block_row = blockIdx.y * BM, block_col = blockIdx.x * BN;

            wmma::fragment<wmma::accumulator, FRAG, FRAG, FRAG, Acc> acc[FM][FN];
            wmma::fragment<wmma::matrix_a, FRAG, FRAG, FRAG, In, wmma::row_major> a_frag[FM];
            wmma::fragment<wmma::matrix_b, FRAG, FRAG, FRAG, In, wmma::row_major> b_frag[FN];
        #pragma unroll
            for (int i = 0; i < FM; ++i)
        #pragma unroll
                for (int j = 0; j < FN; ++j) wmma::fill_fragment(acc[i][j], from_float<Acc>(0.0f));

            for (int k0 = 0; k0 < K; k0 += BK) {
                // TODO 1: copy A[block_row .. +BM, k0 .. +BK] into As and B[k0 .. +BK, block_col .. +BN] into Bs,
                //         one uint4 (8 elements) per step of a loop over the tile's vectors, zeros past M, N or K
                //         (64-bit global offsets); then __syncthreads()
                // TODO 2: for kk = 0, 16: load_matrix_sync the warp's FM A fragments (rows warp_row * WM + 16 i) and
                //         FN B fragments (cols warp_col * WN + 16 j) from shared memory, mma_sync all FM x FN pairs;
                //         then __syncthreads()
                ### BEGIN SOLUTION
                for (int v = tid; v < BM * BK / VEC; v += THREADS) {
                    const int r = v / (BK / VEC), c = (v % (BK / VEC)) * VEC;
                    const int gr = block_row + r, gc = k0 + c;
                    uint4 value = make_uint4(0u, 0u, 0u, 0u);
                    if (gr < M && gc < K) value = *reinterpret_cast<const uint4*>(A + static_cast<int64_t>(gr) * K + gc);
                    *reinterpret_cast<uint4*>(&As[r][c]) = value;
                }
                for (int v = tid; v < BK * BN / VEC; v += THREADS) {
                    const int r = v / (BN / VEC), c = (v % (BN / VEC)) * VEC;
                    const int gr = k0 + r, gc = block_col + c;
                    uint4 value = make_uint4(0u, 0u, 0u, 0u);
                    if (gr < K && gc < N) value = *reinterpret_cast<const uint4*>(B + static_cast<int64_t>(gr) * N + gc);
                    *reinterpret_cast<uint4*>(&Bs[r][c]) = value;
                }
                __syncthreads();  // the tiles are complete before any warp loads fragments from them
        #pragma unroll
                for (int kk = 0; kk < BK; kk += FRAG) {
        #pragma unroll
                    for (int i = 0; i < FM; ++i)
                        wmma::load_matrix_sync(a_frag[i], &As[warp_row * WM + i * FRAG][kk], BK + PAD);
        #pragma unroll
                    for (int j = 0; j < FN; ++j)
                        wmma::load_matrix_sync(b_frag[j], &Bs[kk][warp_col * WN + j * FRAG], BN + PAD);
        #pragma unroll
                    for (int i = 0; i < FM; ++i)
        #pragma unroll
                        for (int j = 0; j < FN; ++j) wmma::mma_sync(acc[i][j], a_frag[i], b_frag[j], acc[i][j]);
                }
                __syncthreads();  // every warp is done with the tiles before the next copy overwrites them
                ### END SOLUTION
            }

            // TODO 3: the epilogue: for each fragment (i, j) whose top-left corner (row0, col0) is inside C (the test
            //         is the same for the whole warp): store_matrix_sync into Cs[warp] (leading dimension 16, row
            //         major), __syncwarp(), each lane writes elements lane, lane + 32, ... of the 256 with to_float,
            //         __syncwarp()
            ### BEGIN SOLUTION
        #pragma unroll
            for (int i = 0; i < FM; ++i) {
        #pragma unroll
                for (int j = 0; j < FN; ++j) {
                    const int row0 = block_row + warp_row * WM + i * FRAG;
                    const int col0 = block_col + warp_col * WN + j * FRAG;
                    if (row0 < M && col0 < N) {  // M, N multiples of 16: the fragment is wholly inside
                        wmma::store_matrix_sync(Cs[warp], acc[i][j], FRAG, wmma::mem_row_major);
                        __syncwarp();
                        for (int e = lane; e < FRAG * FRAG; e += 32)
                            C[static_cast<int64_t>(row0 + e / FRAG) * N + col0 + e % FRAG] = to_float(Cs[warp][e]);
                        __syncwarp();  // the buffer is read before the next fragment overwrites it
                    }
                }
            }
            ### END SOLUTION
        }

        template <typename In, typename Acc>
        static void wmma_gemm_launch(const torch::Tensor& A, const torch::Tensor& B, torch::Tensor& out) {
            const int M = static_cast<int>(A.size(0)), K = static_cast<int>(A.size(1)), N = static_cast<int>(B.size(1));
            const dim3 blocks((N + BN - 1) / BN, (M + BM - 1) / BM);
            wmma_gemm_kernel<In, Acc><<<blocks, THREADS, 0, c10::cuda::getCurrentCUDAStream()>>>(
                reinterpret_cast<const In*>(A.data_ptr()), reinterpret_cast<const In*>(B.data_ptr()),
                out.data_ptr<float>(), M, N, K);
            C10_CUDA_KERNEL_LAUNCH_CHECK();
        }

        torch::Tensor wmma_gemm_out(torch::Tensor A, torch::Tensor B, torch::Tensor out) {
            // TODO: TORCH_CHECK (literal messages, or std::string + std::to_string of integers): A, B, out CUDA on one
            //       device; A, B the same dtype, float16 or bfloat16; 2-D; A.size(1) == B.size(0); out float32 (M, N);
            //       M, N, K multiples of 16; contiguous; A and B data_ptr 16-byte aligned; M, N, K < 2^31 and
            //       ceil(M / BM) <= 65535. Then the CUDAGuard, nothing to launch when M or N is 0, launch with an fp32
            //       accumulator (wmma_gemm_launch<__half, float> or <__nv_bfloat16, float>), return out
            ### BEGIN SOLUTION
            TORCH_CHECK(A.is_cuda() && B.is_cuda() && out.is_cuda(), "wmma_gemm: A, B and out must be CUDA tensors");
            TORCH_CHECK(A.device() == B.device() && A.device() == out.device(),
                        "wmma_gemm: A, B and out must be on the same GPU");
            TORCH_CHECK(A.scalar_type() == B.scalar_type(), "wmma_gemm: A and B must have the same dtype");
            TORCH_CHECK(A.scalar_type() == torch::kHalf || A.scalar_type() == torch::kBFloat16,
                        "wmma_gemm: A and B must be float16 or bfloat16 (the tensor-core inputs)");
            TORCH_CHECK(out.scalar_type() == torch::kFloat32, "wmma_gemm: out must be float32 (the fp32 accumulator)");
            TORCH_CHECK(A.dim() == 2 && B.dim() == 2 && out.dim() == 2, "wmma_gemm: A, B and out must be 2-D");
            const int64_t M = A.size(0), K = A.size(1), N = B.size(1);
            TORCH_CHECK(B.size(0) == K, std::string("wmma_gemm: inner dimensions differ: A has K = ") +
                                            std::to_string(K) + ", B has " + std::to_string(B.size(0)) + " rows");
            TORCH_CHECK(out.size(0) == M && out.size(1) == N,
                        std::string("wmma_gemm: out must be (M, N) = (") + std::to_string(M) + ", " +
                            std::to_string(N) + ")");
            TORCH_CHECK(M % 16 == 0 && N % 16 == 0 && K % 16 == 0,
                        std::string("wmma_gemm: M, N and K must be multiples of 16 (the WMMA tile), got M = ") +
                            std::to_string(M) + ", N = " + std::to_string(N) + ", K = " + std::to_string(K));
            TORCH_CHECK(A.is_contiguous() && B.is_contiguous() && out.is_contiguous(),
                        "wmma_gemm: A, B and out must be contiguous (row-major; call .contiguous() first)");
            TORCH_CHECK(reinterpret_cast<uintptr_t>(A.data_ptr()) % 16 == 0 &&
                            reinterpret_cast<uintptr_t>(B.data_ptr()) % 16 == 0,
                        "wmma_gemm: A and B must start at 16-byte aligned addresses (the kernel loads 16-byte vectors)");
            TORCH_CHECK(M < (int64_t(1) << 31) && N < (int64_t(1) << 31) && K < (int64_t(1) << 31),
                        "wmma_gemm: M, N and K must fit in an int");
            TORCH_CHECK((M + BM - 1) / BM <= 65535, "wmma_gemm: M is too large for gridDim.y");
            const c10::cuda::CUDAGuard guard(A.device());
            if (M == 0 || N == 0) return out;  // a grid of zero blocks is an invalid launch
            if (A.scalar_type() == torch::kHalf) {
                wmma_gemm_launch<__half, float>(A, B, out);
            } else {
                wmma_gemm_launch<__nv_bfloat16, float>(A, B, out);
            }
            return out;
            ### END SOLUTION
        }

        torch::Tensor wmma_gemm(torch::Tensor A, torch::Tensor B) {
            TORCH_CHECK(A.dim() == 2 && B.dim() == 2, "wmma_gemm: A and B must be 2-D");
            return wmma_gemm_out(A, B, torch::empty({A.size(0), B.size(1)}, A.options().dtype(torch::kFloat32)));
        }
        """


        def load_wmma_gemm():
            """Your extension, built from WMMA_GEMM_CUDA (or loaded from the cache): a module with wmma_gemm(A, B) and
            wmma_gemm_out(A, B, out)."""
            # TODO: compile_cuda(WMMA_GEMM_CUDA, ["wmma_gemm", "wmma_gemm_out"], name="p04_wmma_gemm")
            ### BEGIN SOLUTION
            return compile_cuda(WMMA_GEMM_CUDA, ["wmma_gemm", "wmma_gemm_out"], name="p04_wmma_gemm")
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 9. Against cuBLAS (GPU only)

        `python -m llm_algo bench p04.tensor_cores` times, at $M = N = K = 4096$, your `wmma_gemm` in fp16 and in bf16
        next to `torch.matmul` (cuBLAS, fp32 accumulation, output in the input dtype) on the same inputs, in TFLOP/s
        ($2MNK$ FLOPs per call). The lesson's target is 60% of cuBLAS. The cell below plots the same comparison over
        square sizes. On a CPU it says so and does nothing.
    """)
    lesson.code(r"""
        if not torch.cuda.is_available():
            print("Benchmarks need a CUDA GPU; skipped here.")
        else:
            import triton.testing

            try:
                module = load_wmma_gemm()
                sizes = [1024, 2048, 4096, 8192]
                rates = {"your wmma_gemm (fp16)": [], "torch.matmul (cuBLAS, fp16)": []}
                for n in sizes:
                    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
                    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
                    for label, fn in zip(rates, [module.wmma_gemm, torch.matmul]):
                        ms = triton.testing.do_bench(lambda fn=fn: fn(a, b), return_mode="median")
                        rates[label].append(2 * n**3 * 1e-12 / (ms * 1e-3))  # TFLOP/s
                for label, values in rates.items():
                    plt.semilogx(sizes, values, marker="o", label=label, base=2)
                plt.axhline(989, color="grey", ls=":", label="H200 spec, dense fp16 (989)")
                plt.xlabel("M = N = K")
                plt.ylabel("TFLOP/s")
                plt.legend()
                plt.show()
            except NotImplementedError:
                print("Implement wmma_gemm_cuda first: this benchmark times your kernel.")
    """)
    lesson.md(r"""
        **Reading the numbers.** One run on an H200 (`python -m llm_algo bench p04.tensor_cores`; torch 2.11,
        CUDA 13.0; your GPU will differ), $M = N = K = 4096$, TFLOP/s $= 2MNK / t$, median times:

        | inputs | your `wmma_gemm` (fp32 accumulate, fp32 out) | `torch.matmul` (cuBLAS) | ratio |
        | --- | --- | --- | --- |
        | fp16 | 106.6 TFLOP/s (1.290 ms) | 758.4 TFLOP/s (0.181 ms) | 0.14x of cuBLAS |
        | bf16 | 51.1 TFLOP/s (2.692 ms) | 748.9 TFLOP/s (0.184 ms) | 0.07x of cuBLAS |

        **The 60% target is missed, by far.** 60% of cuBLAS is 455 TFLOP/s in fp16, 4.3x what the kernel reaches,
        and 449 TFLOP/s in bf16, 8.8x. cuBLAS itself runs at 77% of the 989 TFLOP/s spec. What separates the two,
        read from the kernel (the likely causes; the run above measured only the times):

        - **The instruction.** WMMA compiles to `mma.sync` (this kernel's PTX, from `nvcc -arch=sm_90 -ptx`, holds
          `wmma.mma.sync.aligned.row.row.m16n16k16`, two `HMMA.16816` each in SASS, section 1). Hopper runs it, but
          its full tensor-core rate needs `wgmma`, issued by a warpgroup on operands read straight from shared memory,
          fed by the TMA, with producer and consumer warps specialised: that is how cuBLAS's Hopper kernels are built,
          and WMMA cannot express any of it. A WMMA kernel at 60% of cuBLAS on an H200 was not a realistic target. How
          much of the gap the instruction alone accounts for was not measured; an `mma.sync` kernel with the rest of a
          production pipeline (CUTLASS 2.x's sm80 kernels run on the H200) would measure it.
        - **Copies and math never overlap inside a block.** Each K step of 32 copies both tiles through registers
          (global → register → shared), waits at a barrier, issues only $2 \times 8$ `mma_sync` per warp, and waits at
          a second barrier before the next copy: 128 steps and 256 barriers per block at $K = 4096$. While a block
          waits for its loads, only *another* block on the same SM keeps the tensor cores busy, and at 128 registers
          per thread (`ptxas`, section 10) an SM holds two blocks of the fp16 kernel. `cp.async` multistage rings
          (`p04.async_copy`) or TMA remove this wait.
        - **A small warp tile.** Per 16-deep step a warp loads 4 A and 2 B fragments (512 bytes each) from shared
          memory for 8 MMAs. Larger warp tiles, or `wgmma`'s $64 \times N$ tiles ($N$ up to 256) per warpgroup, do
          more MMAs per byte read from shared memory.
        - **Shared-memory reads.** The 8-half padding gives rows strides of 80 and 272 bytes, which put the 16-byte
          pieces of 8 consecutive rows in 8 different groups of 4 banks: conflict-free on paper. Whether
          `load_matrix_sync` becomes `ldmatrix` here, and whether conflicts remain, is what `cuobjdump -sass` and
          Nsight Compute's shared-memory counters would show; cuBLAS uses swizzled layouts instead of padding.
        - **Not the output, nor the grid.** The fp32 output writes 64 MiB where cuBLAS writes 32 MiB of fp16: the
          extra 32 MiB takes about 8 µs at the 4 TB/s a device-to-device copy reaches, under 1% of 1.29 ms. The
          1024 blocks fill 264 slots (132 SMs × 2) in 3.9 waves, the last one 88% full: a few percent.

        Which of these dominates is a profile's answer, not this table's: Nsight Compute's warp-stall breakdown
        (barrier and long-scoreboard stalls point at the synchronous copies, MIO throttle at the shared-memory
        loads), its achieved occupancy and its tensor-pipe utilisation.

        **Why bf16 runs at half the fp16 rate** (2.09x the time). The source is the same for both: the copies move raw
        16-byte vectors with no conversion, the accumulator and the output are fp32 in both, and NVIDIA's specs give
        bf16 and fp16 the same tensor-core rate. The compiled code differs: `ptxas -v` (CUDA 13.0, sm_90) reports 130
        registers per thread for the bf16 kernel against 128 for fp16, and two blocks of 256 threads at 130 registers
        need 66,560 registers, more than an SM's 65,536. So the bf16 kernel runs **one** block (8 warps) per SM where
        fp16 runs two, and the second block is the only thing that hides this kernel's copy latency (above). That fits
        a rate halved, but it is the likely cause, not a measured one. The one difference the PTX shows, and the
        likely source of the two registers: CUDA's `mma.h` loads bf16 fragments with `wmma.load...bf16` on 64-bit
        generic addresses, fp16 fragments with `wmma.load...shared.f16` on 32-bit shared-memory addresses. To confirm:
        Nsight Compute's occupancy section ("Block Limit Registers": 1 for bf16, 2 for fp16), and the bf16 kernel
        rebuilt with `-maxrregcount=128` (ptxas then reports 128 registers and no spills) and timed again.

        The steps that close the gap are, in order: `cp.async` double buffering so the next tile loads while this
        one is multiplied (`p04.async_copy`), `ldmatrix` with swizzled shared layouts instead of padding, larger
        warp tiles (more MMAs per fragment load), and on Hopper `wgmma` + TMA with warp specialisation (CUTLASS 3,
        FlashAttention-3).
    """)
    lesson.stop()
    lesson.md(r"""
        ## 10. Reading the solutions

        **`mma_tiled`.** `a[:, :, None] * b[None, :, :]` is $(M, 16, N)$: every product of the step, exact in float64,
        and `.sum(dim=1)` adds the 16 of each output element, exactly whenever the products lie within about $2^{27}$ of
        each other (fp16 products have 22 significant bits, the sum of 16 needs 4 more, and float64 has 53), and
        otherwise with an error far below one fp32 rounding. The one line that carries the lesson is
        `acc = (acc.double() + tile).to(acc_dtype)`: one rounding per K step, in the accumulator's type, as the
        hardware does per instruction. Keeping `acc` in float64 and rounding once at the end would model an exact
        accumulator and hide the pitfall. Rounding each product before summing would model a worse machine than the
        tensor core. Cost: $2MNK$ multiply-adds in float64 and $K/16$ roundings of an $(M, N)$ tensor, with $16MN$
        doubles of temporary memory per step.

        **`fragment_coords`.** `(i // 2) % 2` selects the bottom half for $a_2, a_3, a_6, a_7$, and `i // 4` selects the
        right half for $a_4 \dots a_7$. The register order is *down first, then right*. `i & 1` is the position inside
        an `.f16x2` pair. $B$ and the accumulator each have two pairs: $B$'s second pair is 8 further along $k$, and the
        accumulator's second pair is 8 rows down.

        **`warp_mma`.** Gather with the map, multiply, scatter with the accumulator map. This is what a kernel does
        when it keeps the result in registers: FlashAttention-2 computes $S = QK^\top$ with `mma.sync`, applies the
        softmax's row max and scaling to each lane's $c_0 \dots c_3$ knowing that $c_0, c_1$ are row $g$ and $c_2, c_3$
        row $g + 8$, converts them to fp16 pairs, and feeds them as the $A$ fragment of $PV$. That last step works
        because an accumulator pair and an A-operand pair cover the same (row, column pair) positions.

        **The WMMA kernel.** The copy loops give each thread two 16-byte vectors of $A$ and two of $B$ per step
        (`BM * BK / VEC = 512` vectors over 256 threads). Four consecutive threads cover one 64-byte row segment of
        the A tile, and sixteen cover a 256-byte row of the B tile, so global reads stay coalesced. The bounds
        `gc < K` (A) and `gr < K` (B) matter whenever $K$ is not a multiple of `BK = 32`: the last step's second
        16-column half must be zeros. Without the first bound, a row of $A$ reads into the start of the next row (the
        checks put NaN after the last row). The fragment pointers
        `&As[warp_row * WM + i * FRAG][kk]` are 32-byte aligned because a row of `As` is 80 bytes and `kk` moves by 32
        bytes, and `&Bs[kk][...]` because a row of `Bs` is 272 bytes: `load_matrix_sync` requires it. `acc` is
        $4 \times 2$ fragments of 8 floats per lane, 64 registers. `nvcc -Xptxas -v` (CUDA 13.0, `-arch=sm_90`)
        reports 128 registers for the fp16 kernel and 130 for the bf16 one, no spills, and 27,136 bytes of static
        shared memory. At 256 threads per block, 128 registers fit two blocks on an SM's 65,536 registers and 130 fit
        only one. `__launch_bounds__(256, 2)` would cap both at 128 registers, and ptxas then spills 8 to 16 bytes per
        thread: a trade to measure, not to guess. The epilogue's `if` is the same for all 32 lanes, so `store_matrix_sync` and
        `__syncwarp()` are reached by the whole warp.

        **The host function.** The alignment check is not pedantry: `torch.empty(n + 1, dtype=torch.half)[1:]` is
        contiguous and starts 2 bytes into an allocation, and a `uint4` load from it is a misaligned-address fault that
        ends the process. Every message is a string literal or a `std::string` built with `std::to_string`.
        Streaming `A.sizes()` or a `ScalarType` into `TORCH_CHECK` has crashed extensions built with some host
        compilers.

        **The usual mistakes, and why they are wrong**: in the model, a
        float64 accumulator rounded once at the end (no swamping, no overflow), products rounded to the accumulator
        before the sum, an fp32 accumulator whatever `acc_dtype` says, and `@` for the tile product (refused); in the
        lane map, $a_2, a_3$ and $a_4, a_5$ swapped (right before down), groupID and threadID_in_group swapped, $B$'s
        row and column swapped, the accumulator's column without the factor 2, and in `warp_mma` a missing $+ C$
        and a $D$ rounded to fp16; in C++, an fp16 accumulator for fp16 inputs (the checks' K = 4096 inputs, their
        65536-sum overflow and their swamping input all reject it), A or B tiles copied without the K bound, B
        fragments loaded as `col_major` ($B^\top$), an epilogue that stores fragments past $M$ or $N$, and a host
        function that accepts sizes that are not multiples of 16.

        **Production.** cuBLAS and cuBLASLt pick among hundreds of kernels per shape. On Ampere these are CUTLASS-2-style
        `mma.sync` kernels with `ldmatrix`, `cp.async` multistage pipelines and swizzled shared memory; on Hopper,
        `wgmma` kernels with TMA loads, thread-block clusters and warp-specialised producer/consumer warps (CUTLASS 3's
        `KernelTmaWarpSpecializedCooperative`). Triton's `tl.dot` lowers to `mma.sync` or `wgmma` with an fp32
        accumulator. FlashAttention-2 is built on `mma.sync.m16n8k16` fragments in registers (the layout of
        section 5), FlashAttention-3 on `wgmma` and TMA. Inference engines (vLLM, SGLang, TensorRT-LLM) call these
        libraries, or Marlin-style kernels that dequantise int4 weights straight into `mma.sync` B fragments. All of
        them accumulate in fp32.
    """)
    lesson.mistakes()
    return lesson
