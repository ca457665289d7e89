"""Source of 03_Triton_Kernels/08_MatMul_Epilogue.ipynb (build with `python -m llm_algo build p03.matmul_epilogue`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p03.matmul_epilogue",
        path="03_Triton_Kernels/08_MatMul_Epilogue.ipynb",
        title_en="GEMM epilogues: bias, activation and residual fused into the matmul",
        title_zh="GEMM 尾处理融合：偏置、激活与残差",
        difficulty="medium",
        device="cpu",
        minutes=75,
        prerequisites=["p03.matmul"],
        triton=True,
    )
    lesson.title(
        intro=r"""
        A linear layer is rarely alone: `act(x @ W.T + b)` in an MLP, `x + attn_out @ W_o.T` on the residual stream.
        Run eagerly, the GEMM writes its `(M, N)` output to HBM, the bias add reads it and writes it again, the
        activation reads and writes it once more. The GEMM's output tile was already in registers: applying the bias,
        the activation and the residual there — the **epilogue** (尾处理) — costs a few FLOPs per element and saves
        every one of those round trips.

        **You will implement** the activations as a `@triton.jit` function (ReLU, SiLU, and GeLU in its tanh form,
        written to be stable for large inputs), and a fused `linear_act` kernel: `act(x @ W.T + bias) + residual` in
        one pass, on top of your grouped tile order from `p03.matmul`. **Graded against** `F.linear`, `F.relu`,
        `F.silu` and `F.gelu(approximate="tanh")` in float64, and guard bytes around the output.
        """,
    )
    lesson.md(r"""
        ## 本节要点

        - **问题**：线性层后面通常还有 bias、激活和残差：`act(x @ W.T + b) + r`。eager 执行时 GEMM 的 `(M, N)` 输出要在 HBM 上多次往返；在输出 tile 还在寄存器中时做这些运算（epilogue，尾处理），每个元素只多几次 FLOP，却省掉所有往返。
        - **形状**：$x \in \mathbb{R}^{M\times K}$，$W \in \mathbb{R}^{N\times K}$（`nn.Linear` 布局），bias $\in \mathbb{R}^N$，residual 与输出均为 $(M, N)$；bias 按**列**（`offs_n`）广播。
        - **激活**：ReLU；SiLU $z\,\sigma(z)$；GeLU 的 tanh 近似 $\tfrac12 z\big(1+\tanh(\sqrt{2/\pi}(z+0.044715z^3))\big)$；tanh 要写成对大输入稳定的形式（教科书式 $(e^{2u}-1)/(e^{2u}+1)$ 会得到 inf/inf = nan）。
        - **实现**：在 `p03.matmul` 的分组 tile 顺序和 K 循环之上，float32 累加后依次加 bias → 激活 → 加 residual，再带 mask 存储。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. What fusion saves

        Take $x \in \mathbb{R}^{M \times K}$ (tokens × features), the weight $W \in \mathbb{R}^{N \times K}$ in PyTorch's
        `nn.Linear` layout, $b \in \mathbb{R}^{N}$, an optional residual $r \in \mathbb{R}^{M \times N}$:

        $$
        y = \operatorname{act}\!\left(x W^\top + \mathbf{1} b^\top\right) + r, \qquad
        y_{ij} = \operatorname{act}\Big(\sum_k x_{ik} W_{jk} + b_j\Big) + r_{ij}.
        $$

        The bias is indexed by the **column** $j$ (one value per output feature, broadcast over tokens). With $b$-byte
        elements, eager PyTorch moves, besides the GEMM's own reads of $x$ and $W$:

        | step | reads | writes |
        | --- | --- | --- |
        | `F.linear` (cuBLAS adds the bias in its own epilogue) | $MK + NK$ (+ $N$) | $MN$ |
        | activation | $MN$ | $MN$ |
        | `+ r` | $2MN$ | $MN$ |

        The fused kernel writes $MN$ once and reads $r$ once: it saves $4MN\,b$ bytes with a residual, $2MN\,b$ without.
        For one Llama-3-8B MLP projection on 8192 tokens ($N = 14336$) in bf16, $2MN\,b = 470$ MB — about 0.1 ms at
        4.8 TB/s, next to a 0.96 TFLOP GEMM of about 1.6 ms (measured below). A few percent per layer, and it also removes two kernel
        launches; for the small-M GEMMs of decoding, where the GEMM itself takes microseconds, the launches and round
        trips dominate.

        ## 2. The activations, and computing them safely

        $$
        \operatorname{relu}(z) = \max(z, 0), \qquad
        \operatorname{silu}(z) = z\,\sigma(z) = \frac{z}{1 + e^{-z}}, \qquad
        \operatorname{gelu}_{\tanh}(z) = \tfrac{1}{2} z \left(1 + \tanh\!\Big(\sqrt{2/\pi}\,\big(z + 0.044715 z^3\big)\Big)\right).
        $$

        GeLU's exact form is $z\,\Phi(z)$ (the Gaussian CDF); the tanh form is the approximation GPT-2 was trained with
        and that Gemma and many others still use (`F.gelu(approximate="tanh")`, Hugging Face's `gelu_pytorch_tanh`).
        SiLU is Llama's. Triton has `tl.exp` and `tl.sigmoid` but no portable `tanh`, so write it from the identity
        $\tanh(u) = 2\sigma(2u) - 1$. The textbook $\tanh(u) = (e^{2u} - 1)/(e^{2u} + 1)$ overflows to $\infty/\infty$
        for $u > 44$ in float32; $\sigma(2u) = 1/(1 + e^{-2u})$ only ever overflows to $1/\infty = 0$, which is the right
        limit. Compute the epilogue in float32 (the accumulator's dtype) and cast once at the store.
    """)
    lesson.setup(r"""
        import matplotlib.pyplot as plt
        import torch
        import torch.nn.functional as F
        import triton
        import triton.language as tl

        grouped_tile, matmul_configs, matmul = lesson.use("p03.matmul", "grouped_tile", "matmul_configs", "matmul")
    """)
    lesson.md(r"""
        ## 3. Exercise `activation`: an epilogue function

        One `@triton.jit` function, `apply_activation(z, ACTIVATION)`, where `ACTIVATION` is a compile-time string:
        `"none"`, `"relu"`, `"silu"` or `"gelu_tanh"`. Because it is a `tl.constexpr`, the `if` chain is resolved when
        the kernel compiles: each activation gets its own kernel with no branch in it. `z` is a float32 block.
    """)
    lesson.exercise(
        "activation",
        r'''
        SQRT_2_OVER_PI = tl.constexpr(0.7978845608028654)  # sqrt(2 / pi); a kernel reads only constexpr globals


        @triton.jit
        def apply_activation(z, ACTIVATION: tl.constexpr):
            """ACTIVATION(z) elementwise on a float32 block: "none", "relu", "silu" or "gelu_tanh" (GeLU, tanh form)."""
            # TODO: one branch per ACTIVATION; tanh(u) = 2 * sigmoid(2u) - 1 (finite for any u)
            ### BEGIN SOLUTION
            if ACTIVATION == "relu":
                z = tl.maximum(z, 0.0)
            elif ACTIVATION == "silu":
                z = z * tl.sigmoid(z)
            elif ACTIVATION == "gelu_tanh":
                inner = SQRT_2_OVER_PI * (z + 0.044715 * z * z * z)
                z = 0.5 * z * (1.0 + (2.0 * tl.sigmoid(2.0 * inner) - 1.0))
            ### END SOLUTION
            return z
        ''',
    )
    lesson.md(r"""
        ### The three activations, drawn

        ReLU cuts at zero; SiLU and GeLU are smooth and dip slightly below zero (minimum $-0.28$ at $z \approx -1.28$ for
        SiLU, $-0.17$ at $z \approx -0.75$ for GeLU) before returning to zero. Drawn from PyTorch's functions, so the
        plot does not depend on your kernel.
    """)
    lesson.code(r"""
        z = torch.linspace(-5, 3, 400)
        fig, axis = plt.subplots(figsize=(5, 3))
        axis.plot(z, F.relu(z), label="relu"); axis.plot(z, F.silu(z), label="silu")
        axis.plot(z, F.gelu(z, approximate="tanh"), label="gelu (tanh)")
        axis.axhline(0, color="grey", lw=0.5); axis.set_xlabel("z"); axis.legend(); fig.tight_layout(); plt.show()
    """)
    lesson.md(r"""
        ## 4. Exercise `linear_act`: the fused kernel

        Start from your GEMM kernel of `p03.matmul` (the setup cell took `grouped_tile` from it: yours if its checks
        pass). What changes:

        - **The weight is `(N, K)`** and we multiply by its transpose: pass `weight.stride(1)` as the stride along K
          and `weight.stride(0)` as the stride along N; the kernel is the same as for any transposed operand.
        - **The epilogue**, on the float32 accumulator `acc` `(BLOCK_M, BLOCK_N)`, in this order: add the bias, loaded
          once per tile as a `(BLOCK_N,)` vector over the tile's **columns** and broadcast as `bias[None, :]`; apply the
          activation; add the residual tile (same masks and layout rules as the output). Then cast and store.
        - **Optional operands** are compile-time flags `HAS_BIAS`, `HAS_RESIDUAL`: when one is absent the wrapper
          still has to pass *some* pointer — pass the output, which the kernel never reads under a false flag.

        - **int64 strides.** `p03.matmul` kept its offsets in int32 and refused operands that reach $2^{31}$; a layer
          that must take any activation cannot. An LM head's output at $V = 128256$ passes $2^{31}$ elements from
          16744 rows on (`p03.cross_entropy`), and a 28672-wide MLP projection from 74899 tokens on, a long prefill.
          `offs_m * stride_om` is a product of two int32 values and wraps silently, so cast the strides to int64 at
          the top of the kernel (`tl.cast(stride, tl.int64)`): every product with a stride is then int64. It costs
          little: the pointer tiles are built once per program, and the K loop only adds `BLOCK_K * stride`, a scalar.

        The order matters and is a classic bug: the residual goes **after** the activation (`act(...) + r`, a
        pre-norm transformer's residual add), the bias **before** it.
    """)
    lesson.exercise(
        "linear_act",
        r'''
        @triton.jit
        def linear_act_kernel(
            # Pointers
            x_ptr, w_ptr, bias_ptr, res_ptr, out_ptr,
            # Shapes
            M, N, K,
            # Strides
            stride_xm, stride_xk, stride_wk, stride_wn, stride_rm, stride_rn, stride_om, stride_on,
            # Meta-parameters
            HAS_BIAS: tl.constexpr, HAS_RESIDUAL: tl.constexpr, ACTIVATION: tl.constexpr,
            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
        ):
            """out[tile] = ACTIVATION(x @ w + bias) + res for one BLOCK_M x BLOCK_N tile; w is addressed by
            (stride_wk, stride_wn), so w = weight.T of an (N, K) weight costs nothing."""
            pid = tl.program_id(axis=0)
            pid_m, pid_n = grouped_tile(pid, tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)
            offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
            offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
            offs_k = tl.arange(0, BLOCK_K)
            # TODO: the strides in int64 (tl.cast), so that row * stride cannot wrap past 2**31
            # TODO: the GEMM main loop of p03.matmul into a float32 accumulator acc (BLOCK_M, BLOCK_N)
            # TODO: the epilogue on acc: + bias over columns (if HAS_BIAS), apply_activation, + residual (if HAS_RESIDUAL)
            # TODO: cast to out's dtype and store, masked on both edges
            ### BEGIN SOLUTION
            stride_xm, stride_xk = tl.cast(stride_xm, tl.int64), tl.cast(stride_xk, tl.int64)  # every product with
            stride_wk, stride_wn = tl.cast(stride_wk, tl.int64), tl.cast(stride_wn, tl.int64)  # a stride is int64
            stride_rm, stride_rn = tl.cast(stride_rm, tl.int64), tl.cast(stride_rn, tl.int64)
            stride_om, stride_on = tl.cast(stride_om, tl.int64), tl.cast(stride_on, tl.int64)
            x_ptrs = x_ptr + (offs_m % M)[:, None] * stride_xm + offs_k[None, :] * stride_xk  # (BLOCK_M, BLOCK_K)
            w_ptrs = w_ptr + offs_k[:, None] * stride_wk + (offs_n % N)[None, :] * stride_wn  # (BLOCK_K, BLOCK_N)
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for step in range(0, tl.cdiv(K, BLOCK_K)):
                k_left = K - step * BLOCK_K
                x = tl.load(x_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
                w = tl.load(w_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
                acc = tl.dot(x, w, acc, input_precision="ieee")
                x_ptrs += BLOCK_K * stride_xk
                w_ptrs += BLOCK_K * stride_wk
            mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)                           # (BLOCK_M, BLOCK_N)
            if HAS_BIAS:
                bias = tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)  # (BLOCK_N,)
                acc += bias[None, :]
            acc = apply_activation(acc, ACTIVATION)
            if HAS_RESIDUAL:
                res_ptrs = res_ptr + offs_m[:, None] * stride_rm + offs_n[None, :] * stride_rn
                acc += tl.load(res_ptrs, mask=mask, other=0.0).to(tl.float32)
            out_ptrs = out_ptr + offs_m[:, None] * stride_om + offs_n[None, :] * stride_on
            tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=mask)
            ### END SOLUTION


        # Every (ACTIVATION, HAS_BIAS, HAS_RESIDUAL, dtype) is its own compiled kernel, and every config multiplies that:
        # two candidates: a large 256 x 128 tile for the big GEMMs this kernel is for (one of p03.matmul's two large
        # configs; section 5 reports what a tile sweep gave) and the small one that fits fp32.
        _configs = matmul_configs()
        EPILOGUE_CONFIGS = list({id(c): c for c in (_configs[min(1, len(_configs) - 1)], _configs[-1])}.values())
        linear_act_kernel_tuned = triton.autotune(configs=EPILOGUE_CONFIGS, key=["M", "N", "K"])(linear_act_kernel)
        ACTIVATIONS = ("none", "relu", "silu", "gelu_tanh")


        def linear_act(x, weight, bias=None, activation="gelu_tanh", residual=None):
            """activation(x @ weight.T + bias) + residual in one kernel.

            x: (M, K); weight: (N, K) as in nn.Linear; bias: (N,) or None; residual: (M, N) or None;
            all of one dtype (fp16, bf16 or fp32) and device. Returns (M, N) contiguous in that dtype.
            """
            # TODO 1: check shapes, dtypes, devices and the activation name, with messages
            # TODO 2: allocate the output
            # TODO 3: launch linear_act_kernel_tuned; weight.T via its strides; absent operands -> pass out, flag False;
            #         the kernel reads the bias with unit stride: pass bias.contiguous()
            ### BEGIN SOLUTION
            if x.dim() != 2 or weight.dim() != 2 or x.shape[1] != weight.shape[1]:
                raise ValueError(f"linear_act needs x (M, K) and weight (N, K), got {tuple(x.shape)}, {tuple(weight.shape)}")
            M, K = x.shape
            N = weight.shape[0]
            if bias is not None and tuple(bias.shape) != (N,):
                raise ValueError(f"bias must be ({N},), got {tuple(bias.shape)}")
            if residual is not None and tuple(residual.shape) != (M, N):
                raise ValueError(f"residual must be ({M}, {N}), got {tuple(residual.shape)}")
            if activation not in ACTIVATIONS:
                raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
            for t in (weight, bias, residual):
                if t is not None and (t.dtype != x.dtype or t.device != x.device):
                    raise ValueError(f"every operand must be {x.dtype} on {x.device}, got {t.dtype} on {t.device}")
            out = torch.empty((M, N), dtype=x.dtype, device=x.device)
            bias = bias.contiguous() if bias is not None else None  # the kernel reads bias_ptr + offs_n (unit stride)
            res = residual if residual is not None else out
            grid = lambda META: (triton.cdiv(M, META["BLOCK_M"]) * triton.cdiv(N, META["BLOCK_N"]),)
            linear_act_kernel_tuned[grid](
                x, weight, bias if bias is not None else out, res, out, M, N, K,
                x.stride(0), x.stride(1), weight.stride(1), weight.stride(0),
                res.stride(0), res.stride(1), out.stride(0), out.stride(1),
                HAS_BIAS=bias is not None, HAS_RESIDUAL=residual is not None, ACTIVATION=activation,
            )
            return out
            ### END SOLUTION
        ''',
    )
    lesson.md(r"""
        ## 5. Fused against eager and `torch.compile` (GPU only)

        The cell below times, for the MLP up-projection of a Llama-3-8B-sized layer (`K = 4096`, `N = 14336`) in bf16
        over a growing number of tokens `M`: your fused `linear_act` (bias + GeLU), the eager
        `F.gelu(F.linear(x, w, b), approximate="tanh")`, and your unfused `matmul` followed by the same PyTorch
        epilogue. Throughput is $2MNK$ FLOPs over the time, so the lines show how much of the GEMM's speed each
        version keeps. `python -m llm_algo bench p03.matmul_epilogue` adds `torch.compile`, which fuses the epilogue
        into its own Triton kernel or a cuBLAS epilogue.
    """)
    lesson.code(r"""
        if lesson.policy.triton_path != "compiled":
            print("Benchmarks need a CUDA GPU with compute capability >= 8.0; skipped here.")
        else:
            K, N = 4096, 14336
            w = torch.randn(N, K, device=DEVICE, dtype=torch.bfloat16) / K**0.5
            b = torch.randn(N, device=DEVICE, dtype=torch.bfloat16)

            @triton.testing.perf_report(triton.testing.Benchmark(
                x_names=["M"], x_vals=[256, 1024, 4096, 8192], x_log=True,
                line_arg="provider", line_vals=["fused", "eager", "unfused"],
                line_names=["your linear_act", "F.linear + F.gelu", "your matmul + bias + F.gelu"],
                ylabel="TFLOP/s", plot_name="x @ W.T + b, GeLU; K=4096, N=14336, bf16", args={},
            ))
            def throughput(M, provider):
                x = torch.randn(M, K, device=DEVICE, dtype=torch.bfloat16)
                fn = {
                    "fused": lambda: linear_act(x, w, b, "gelu_tanh"),
                    "eager": lambda: F.gelu(F.linear(x, w, b), approximate="tanh"),
                    "unfused": lambda: F.gelu(matmul(x, w.T) + b, approximate="tanh"),
                }[provider]
                ms = triton.testing.do_bench(fn, return_mode="median")
                return 2 * M * N * K * 1e-12 / (ms * 1e-3)

            try:
                throughput.run(print_data=True, show_plots=True)
            except NotImplementedError:
                print("Implement linear_act first: this benchmark times your kernel.")
    """)
    lesson.md(r"""
        **Reading the numbers** (one run of the reference solutions on an NVIDIA H200, Triton 3.6, torch 2.11, at
        `M = 8192, K = 4096, N = 14336`; your GPU will differ). The fused kernel did **not** beat eager PyTorch here:
        in fp16 with GeLU, 480 TFLOP/s against 596 for `F.linear` + `F.gelu` and 576 under `torch.compile`; with SiLU
        and a residual, 502 against 563 and 581. The epilogue is not what costs: in a bf16 sweep of five tile configs, the same
        kernel with the bias and `ACTIVATION="none"` ran at 512-553 TFLOP/s and with GeLU at 478-533, i.e. GeLU costs
        about 4%. The loss is in the main loop, and it is the **weight layout**: reading `W` as `(N, K)` (K contiguous,
        the `nn.Linear` layout) the kernel reached at most 553 TFLOP/s, while the same kernel on a `(K, N)` copy of `W.T`
        reached 697 (no epilogue) and 641 (GeLU) — faster than cuBLAS's 666 for `F.linear` with its bias. Triton's
        pointer-based loads of a K-contiguous B tile feed Hopper's wgmma less well; the fixes are a TMA descriptor
        load (`tl.make_tensor_descriptor`), or storing the weight transposed once at load time, which inference
        engines do for exactly this reason. The bytes saved ($2MN\,b$ = 470 MB in bf16 without a residual, about
        0.1 ms) are real but small next to a 1.6 ms GEMM at this M; they matter at small M (decode), where the GEMM
        itself is memory-bound and the extra passes are a large share.
    """)
    lesson.stop()
    lesson.md(r"""
        ## 6. Reading the solutions

        **`apply_activation`.** `ACTIVATION` is a `tl.constexpr`, so the `if` chain is evaluated by the compiler: the
        `"silu"` kernel contains only `z * sigmoid(z)`. `tl.sigmoid` is stable at both ends ($e^{-z}$ overflows to
        $\infty$ for very negative $z$, and $1/(1+\infty) = 0$ is the right limit), and building tanh from it inherits
        that: $2\sigma(2u) - 1$ is exactly $\pm 1$ far out. The cubic $0.044715\,z^3$ (evaluated left to right as written) reaches
        $\pm\infty$ only beyond $|z| \approx 2 \cdot 10^{13}$ in float32, where the result is still right ($z$ or $0$).

        **`linear_act_kernel`.** The main loop is `p03.matmul`'s, reading the weight through `(stride_wk, stride_wn) =
        (weight.stride(1), weight.stride(0))`: no transpose is ever materialised. The epilogue works on `acc` while it is
        in registers: the bias is one `(BLOCK_N,)` load per tile (`offs_n`, the tile's columns — loading it by
        `offs_m` is the bug that square test matrices hide), broadcast over rows; then the activation in float32; then
        the residual tile, read with the same mask as the store. `HAS_BIAS` and `HAS_RESIDUAL` are constexprs, so the
        kernel without them contains no dead loads.

        **The usual mistakes, and why they are wrong**: the textbook tanh
        ($\infty/\infty$ = NaN for large inputs), GeLU without the cubic term, SiLU with $\sigma(-z)$; the bias indexed by
        rows, the activation applied before the bias, the residual added inside the activation, and an unmasked store;
        a strided bias (a column of a bigger tensor) handed to the kernel, which reads it with unit stride, without
        `.contiguous()` — the checks give every operand a layout of its own.

        **Cost and production.** The fused kernel does the GEMM's $2MNK$ FLOPs plus a few per output element and moves
        $2MN\,b$ (no residual) to $4MN\,b$ (residual) fewer bytes than the eager chain. cuBLASLt has fixed epilogues
        (bias, ReLU, GeLU, their backward variants) that PyTorch uses for `F.linear` with a bias and that
        `torch.compile` can select; Inductor otherwise generates a Triton GEMM with the pointwise ops fused into the
        store, exactly as here. CUTLASS builds epilogues from composable "visitor" trees (EVT); vLLM and TensorRT-LLM fuse
        activation-and-quantise epilogues so that the next GEMM reads int8/fp8. The same place holds SwiGLU's
        `silu(gate) * up` when the gate and up projections are one GEMM with interleaved columns, and the backward pass
        needs the pre-activation (or recomputes it) — a fused forward that only stores the activation has to save
        `x @ W.T + b` too when training.
    """)
    lesson.mistakes()
    return lesson
