"""Source of 01_Hardware_Math_Systems/06_Roofline.ipynb (build with `python -m llm_algo build p01.roofline`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p01.roofline",
        path="01_Hardware_Math_Systems/06_Roofline.ipynb",
        title_en="GPU memory hierarchy and the roofline",
        title_zh="GPU 存储层次与屋顶线模型",
        difficulty="medium",
        device="cpu",
        minutes=60,
        prerequisites=["p01.params_and_flops", "p01.kv_cache_math"],
    )
    lesson.title(
        intro=r"""
        **本节要点**
        - 一个算子的时间下限 $= \max(\text{FLOPs} / \text{峰值算力},\ \text{字节数} / \text{带宽})$：屋顶线模型 (roofline)。
        - 算术强度 (arithmetic intensity) $I = \text{FLOPs} / \text{HBM 字节数}$；脊点 (ridge point)
          $I^* = \text{峰值算力} / \text{带宽}$，H100 上约 295 FLOP/B。$I < I^*$ 为访存受限 (memory-bound)。
        - 矩阵乘 $(M,K)\times(K,N)$：$2MNK$ FLOPs，理想字节数 $(MK+KN+MN)\cdot s$；大方阵计算受限，解码时
          $M=1$ 的矩阵-向量乘强度约为 1，严重访存受限。
        - 注意力：FLOPs $= 4 B H T_q T_{kv} d$；融合实现的字节数 $= (Q + K + V + O)$，GQA 时 K/V 只有 $K$ 个头；
          预填充 (prefill) 计算受限，解码 (decode) 访存受限，强度约为 $H/K$。
        - FLOPs 与 `FlopCounterMode` 比对，字节数与真实张量的 `nbytes` 比对；峰值数据来自 NVIDIA 官方数据手册。
        {易错点}

        An H100 SXM can do 989 trillion dense BF16 floating-point operations per second but read only 3.35 trillion
        bytes per second from its HBM (NVIDIA H100 Tensor Core GPU datasheet, dense BF16 and HBM3 bandwidth): to keep its tensor
        cores busy, a kernel must do about 295 FLOPs for every byte it reads. A 4096×4096 BF16 matmul does 1365; a
        decoding step's matrix-vector products do 1; elementwise ops do less than 1. That single ratio explains why
        prefill is fast and decode is slow, why batching helps decoding, why kernels are fused (FlashAttention), and
        why quantising weights speeds up decoding even when the math stays in BF16.

        **You will implement** the FLOPs and the minimal memory traffic of a matrix multiplication and of an attention
        call (grouped-query heads, prefill and decode), and the roofline time bound with the side of the ridge each
        operation falls on. **Graded against** `torch.utils.flop_counter.FlopCounterMode` on `torch.mm` and on eager
        attention, the `nbytes` of the actual tensors each operation reads and writes, and closed forms with the
        published peaks of the H100, H200, A100 and T4.
    """
    )
    lesson.md(r"""
        ## 1. The memory hierarchy, in numbers

        A GPU computes in its streaming multiprocessors (SMs) on data that must first come from HBM (high-bandwidth
        memory, the "80 GB" of an H100) through the L2 cache into each SM's registers and shared memory (SRAM). Each
        level is faster and smaller:

        | level (H100 SXM) | capacity | bandwidth |
        | --- | --- | --- |
        | HBM3 | 80 GB | 3.35 TB/s |
        | L2 cache | 50 MB | several times HBM |
        | shared memory / L1, per SM | up to 228 KB (132 SMs) | tens of TB/s in total |
        | registers, per SM | 256 KB | highest |

        (Capacities from NVIDIA's H100 datasheet and *NVIDIA H100 Tensor Core GPU Architecture* whitepaper, 2022.)
        Everything a kernel reads from HBM crosses the slowest link once at least; the question is whether the
        arithmetic done per byte is enough to hide that.

        ## 2. The roofline

        For an operation that does $F$ floating-point operations and moves $Q$ bytes between HBM and the chip, on a
        device with peak compute $P$ (FLOP/s) and bandwidth $\beta$ (bytes/s), neither resource can be beaten:

        $$
        t \;\ge\; \max\!\left(\frac{F}{P},\; \frac{Q}{\beta}\right), \qquad
        \text{attainable FLOP/s} = \min\big(P,\; I \cdot \beta\big), \quad I = \frac{F}{Q} .
        $$

        $I$ is the **arithmetic intensity** (算术强度) in FLOP/byte. Plotted on log-log axes, attainable FLOP/s against
        $I$ is a slanted line (memory-bound) that meets a flat roof (compute-bound) at the **ridge point**
        $I^* = P / \beta$ (Williams, Waterman and Patterson, *Roofline*, CACM 2009). Published dense peaks:

        | GPU | dense BF16/FP16 tensor peak | memory bandwidth | ridge $I^*$ | source |
        | --- | --- | --- | --- | --- |
        | H100 SXM | 989 TFLOP/s | 3.35 TB/s | 295 | NVIDIA H100 datasheet |
        | H200 SXM | 989 TFLOP/s | 4.8 TB/s | 206 | NVIDIA H200 datasheet |
        | A100 SXM 80 GB | 312 TFLOP/s | 2.039 TB/s | 153 | NVIDIA A100 datasheet |
        | T4 | 65 TFLOP/s (FP16) | 320 GB/s | 203 | NVIDIA T4 datasheet |

        Datasheets also print numbers "with sparsity" (2:4 structured sparsity), twice these: never use them for
        dense work. The model counts HBM traffic only; it is a bound, not a prediction, and the gap to it is what a
        kernel engineer works on.
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt
        import torch

        GPUS = {  # dense BF16 (T4: FP16) tensor-core peak FLOP/s and HBM bandwidth in bytes/s, from NVIDIA's datasheets
            "H100 SXM": (989e12, 3.35e12),
            "H200 SXM": (989e12, 4.8e12),
            "A100 SXM 80GB": (312e12, 2.039e12),
            "T4": (65e12, 320e9),
        }
    """)
    lesson.md(r"""
        ## 3. Exercise `matmul_cost`

        $C = A B$ with $A: (M, K)$, $B: (K, N)$, $C: (M, N)$: $MNK$ multiply-adds, so $F = 2MNK$. The *minimal* traffic
        reads $A$ and $B$ once and writes $C$ once: $Q = (MK + KN + MN) \cdot s$ for $s$ bytes per element (a tiled
        kernel reads each operand more than once from L2, but from HBM about once when the tiles are well ordered).

        For a square $n \times n \times n$ BF16 product $I = 2n^3 / (6n^2) = n/3$: above the H100 ridge once
        $n > 885$. For a decoding step $M = 1$ (one token) and $I = 2NK / ((K + NK + N) s) \approx 2/s = 1$: three
        hundred times below the ridge. Batching $B$ sequences makes $M = B$ and multiplies the intensity by about $B$,
        which is why servers batch decode requests.
    """)
    lesson.exercise(
        "matmul_cost",
        r'''
        def matmul_cost(M: int, N: int, K: int, dtype: torch.dtype) -> tuple[int, int]:
            """(FLOPs, minimal HBM bytes) of (M, K) @ (K, N) -> (M, N), all three tensors in dtype."""
            # TODO: refuse non-positive sizes with a ValueError
            # TODO: FLOPs: 2 per multiply-add; bytes: read A and B once, write C once
            ### BEGIN SOLUTION
            if min(M, N, K) < 1:
                raise ValueError(f"matrix sizes must be positive, got M={M}, N={N}, K={K}")
            element = torch.empty((), dtype=dtype).element_size()
            flops = 2 * M * N * K
            traffic = (M * K + K * N + M * N) * element  # A, B read once; C written once
            return flops, traffic
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 4. Exercise `attention_cost`

        Attention over `batch` sequences, $H$ query heads and $K$ key/value heads of size $d$, $T_q$ queries against
        $T_{kv}$ keys: $S = Q K^\top$ is $(B, H, T_q, d) \times (B, H, d, T_{kv})$ and $O = PV$ is
        $(B, H, T_q, T_{kv}) \times (B, H, T_{kv}, d)$, so $F = 4 B H T_q T_{kv} d$ (the full score matrix, as eager
        attention computes it and as the reports count it; the softmax's $O(BHT_qT_{kv})$ is left out, as
        `FlopCounterMode` does). A fused kernel (FlashAttention) never writes $S$ or $P$ to HBM: it reads $Q$, $K$, $V$
        once and writes $O$ once,

        $$
        Q_{\text{bytes}} = \big(\underbrace{B H T_q d}_{Q} + \underbrace{2 B K T_{kv} d}_{K,\,V} + \underbrace{B H T_q d}_{O}\big)\, s .
        $$

        **Prefill** ($T_q = T_{kv} = T$): $I \approx 4HT^2d / ((2H + 2K)Td\,s)$ grows with $T$: compute-bound. **Decode**
        ($T_q = 1$, $T_{kv}$ = the context): $I \approx 4HT_{kv}d / (2KT_{kv}d\,s) = H/K$ for BF16: 4 for Llama 3's
        GQA, 1 for MHA. No batch size helps here: each sequence has its own keys and values (`p01.kv_cache_math`).
    """)
    lesson.exercise(
        "attention_cost",
        r'''
        def attention_cost(batch: int, q_heads: int, kv_heads: int, q_len: int, kv_len: int, head_dim: int,
                           dtype: torch.dtype) -> tuple[int, int]:
            """(FLOPs, minimal HBM bytes) of fused attention: Q (B, H, Tq, d), K and V (B, Hkv, Tkv, d), O like Q."""
            # TODO: refuse non-positive sizes, and kv_heads that do not divide q_heads, with a ValueError
            # TODO: FLOPs of QK^T and PV over all query heads; bytes of Q, K, V read and O written
            ### BEGIN SOLUTION
            if min(batch, q_heads, kv_heads, q_len, kv_len, head_dim) < 1 or q_heads % kv_heads:
                raise ValueError("sizes must be positive and kv_heads must divide q_heads")
            element = torch.empty((), dtype=dtype).element_size()
            flops = 4 * batch * q_heads * q_len * kv_len * head_dim  # QK^T and PV, 2 FLOPs per multiply-add
            query_and_output = 2 * batch * q_heads * q_len * head_dim
            keys_and_values = 2 * batch * kv_heads * kv_len * head_dim  # GQA: only the KV heads are stored
            return flops, (query_and_output + keys_and_values) * element
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 5. Exercise `roofline_bound`

        Given an operation's FLOPs and bytes and a device's peak and bandwidth, return the time bound in seconds and
        which roof it hits: `"compute"` when $F/P \ge Q/\beta$ (equivalently $I \ge I^*$), else `"memory"`.
    """)
    lesson.exercise(
        "roofline_bound",
        r'''
        def roofline_bound(flops: float, bytes_moved: float, peak_flops_per_s: float,
                           bandwidth_bytes_per_s: float) -> tuple[float, str]:
            """(lower bound on the time in seconds, "compute" or "memory": the roof that sets it)."""
            # TODO: refuse negative work, nothing to do at all, or a non-positive peak or bandwidth (ValueError)
            # TODO: the slower of the two times, and which one it is (a tie counts as compute-bound)
            ### BEGIN SOLUTION
            if flops < 0 or bytes_moved < 0 or flops + bytes_moved == 0:
                raise ValueError("need non-negative work, not all zero")
            if peak_flops_per_s <= 0 or bandwidth_bytes_per_s <= 0:
                raise ValueError("peak and bandwidth must be positive")
            compute_time = flops / peak_flops_per_s
            memory_time = bytes_moved / bandwidth_bytes_per_s
            if compute_time >= memory_time:
                return compute_time, "compute"
            return memory_time, "memory"
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### The roofline of four GPUs, with the operations of an LLM on it

        Llama-3-8B-sized operations in BF16: a prefill projection (8192 tokens × 4096 × 4096), the same at decode
        batch 1 and batch 64, attention over 8192 tokens (prefill and one decode step, 32 query and 8 KV heads of
        128), and an elementwise residual add (2 reads, 1 write, 1 FLOP per element).
    """)
    lesson.code(r"""
        def costs():
            try:
                ops = {
                    "prefill GEMM 8192x4096x4096": matmul_cost(8192, 4096, 4096, torch.bfloat16),
                    "decode GEMV, batch 1": matmul_cost(1, 4096, 4096, torch.bfloat16),
                    "decode GEMM, batch 64": matmul_cost(64, 4096, 4096, torch.bfloat16),
                    "attention prefill, T=8192": attention_cost(1, 32, 8, 8192, 8192, 128, torch.bfloat16),
                    "attention decode, T=8192": attention_cost(1, 32, 8, 1, 8192, 128, torch.bfloat16),
                }
                who = "yours"
            except NotImplementedError:
                mm = lambda M, N, K: (2 * M * N * K, 2 * (M * K + K * N + M * N))
                att = lambda Tq, Tkv: (4 * 32 * Tq * Tkv * 128, 2 * (2 * 32 * Tq * 128 + 2 * 8 * Tkv * 128))
                ops = {"prefill GEMM 8192x4096x4096": mm(8192, 4096, 4096), "decode GEMV, batch 1": mm(1, 4096, 4096),
                       "decode GEMM, batch 64": mm(64, 4096, 4096), "attention prefill, T=8192": att(8192, 8192),
                       "attention decode, T=8192": att(1, 8192)}
                who = "formulas"
            ops["residual add (elementwise)"] = (4096 * 8192, 3 * 2 * 4096 * 8192)
            return ops, who


        ops, who = costs()
        intensity = {name: f / q for name, (f, q) in ops.items()}
        fig, ax = plt.subplots(figsize=(9, 4.6))
        x = [10 ** (k / 20) for k in range(-40, 101)]  # 0.01 .. 1e5 FLOP/byte
        for (gpu, (peak, bw)), color in zip(GPUS.items(), ("C0", "C1", "C2", "C3")):
            ax.loglog(x, [min(peak, i * bw) / 1e12 for i in x], color=color, label=f"{gpu}: ridge {peak / bw:.0f} FLOP/B")
        for k, (name, value) in enumerate(sorted(intensity.items(), key=lambda item: item[1])):
            ax.axvline(value, color="0.6", ls=":", lw=1)
            ax.text(value, 0.02 * 2.2**k, " " + name, fontsize=7, rotation=0, va="bottom")
        ax.set_xlabel("arithmetic intensity (FLOP / HBM byte)"); ax.set_ylabel("attainable TFLOP/s")
        ax.set_title(f"Roofline, dense BF16/FP16 peaks from NVIDIA datasheets; operations: {who}")
        ax.set_ylim(0.01, 2000); ax.legend(fontsize=8, loc="lower right"); plt.tight_layout(); plt.show()

        peak, bw = GPUS["H100 SXM"]
        for name, (f, q) in ops.items():
            try:
                seconds, bound = roofline_bound(f, q, peak, bw)
            except NotImplementedError:
                seconds, bound = max(f / peak, q / bw), "compute" if f / peak >= q / bw else "memory"
            print(f"{name:30} I = {f / q:9.2f} FLOP/B   H100 bound {seconds * 1e6:10.2f} us   {bound}-bound")
    """)
    lesson.md(r"""
        Read the table: the prefill GEMM and prefill attention sit far right of every ridge (compute-bound: the tensor
        cores are the limit, and FP8 would double their speed); the decode GEMV and decode attention sit near 1-4
        FLOP/B, two orders of magnitude left of the ridge (memory-bound: only fewer bytes help, by batching the GEMMs,
        quantising weights and KV cache, or GQA/MLA). Batch 64 moves decode GEMMs about 62× to the right (still left
        of the H100 ridge); it does nothing for decode attention. The H200 has the H100's compute and 43% more bandwidth: it speeds up exactly the memory-bound
        operations, which is why it was marketed for inference.
    """)
    lesson.stop()
    lesson.md(r"""
        ## 6. Reading the solutions

        **`matmul_cost`.** Two products and a sum, in integers. The usual mistakes: *$MNK$ FLOPs* (counting
        multiply-adds, half of what `FlopCounterMode`, datasheets and MFU count), *the output not written* (at $M = 1$
        that is small, for a square product a third of the traffic), and *elements instead of bytes* (a factor 2 in
        BF16, 4 in FP32).

        **`attention_cost`.** The FLOPs use the *query* heads (each query head does its own $QK^\top$ even when it
        shares keys), the bytes the *KV* heads for $K$ and $V$. The mistakes: *KV heads in the FLOPs*, *query heads in
        the K/V bytes* (no GQA saving), *the output forgotten*, and *the causal half* (a FlashAttention kernel with a
        causal mask skips about half of the blocks, so its real work is nearer $2BHT^2d$; the checks follow the
        convention that `FlopCounterMode` and the PaLM/Megatron formulas use). On CPU, this PyTorch's
        `FlopCounterMode` counts 0 FLOPs for `F.scaled_dot_product_attention` (the CPU flash kernel has no FLOP
        formula registered), so the checks count an eager attention: a reminder to know what a counter counts.

        **`roofline_bound`.** A max and a comparison. The mistakes: *adding the two times* (that is a model with no
        overlap of compute and memory traffic, a pessimistic bound, not the roofline) and *the tie on the wrong side*.

        **Production.** Profilers report exactly these quantities: Nsight Compute's "Speed Of Light" section and
        roofline chart give achieved FLOP/s and bytes per kernel against the device's roofs; `torch.profiler` with
        `with_flops=True` reports FLOPs. Real kernels reach 70-80% of the compute roof for large GEMMs (cuBLAS, CUTLASS)
        and 80-90% of the bandwidth roof for memory-bound kernels; the difference between an operation's bound and its
        measured time is the budget for fusion (fewer HBM round trips), better tiling (more reuse from SRAM), and
        lower-precision storage.
    """)
    lesson.mistakes()
    return lesson
