"""Source of 02_PyTorch_Algorithms/03_SwiGLU.ipynb (build with `python -m llm_algo build p02.swiglu`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p02.swiglu",
        path="02_PyTorch_Algorithms/03_SwiGLU.ipynb",
        title_en="SwiGLU feed-forward",
        title_zh="SwiGLU 门控前馈网络",
        difficulty="medium",
        device="cpu",
        minutes=70,
        prerequisites=["p00.optim_and_loss", "p02.rmsnorm"],
    )
    lesson.title(
        intro=r"""
        Two thirds of a Llama's parameters are not in attention. In Llama-2-7B each of the 32 layers holds
        $4 \cdot 4096^2 \approx 67$M attention weights and $3 \cdot 4096 \cdot 11008 \approx 135$M feed-forward weights
        (前馈网络, FFN), so the FFN is where most of the FLOPs of a forward pass go. Every Llama, Mistral, Qwen and
        DeepSeek uses the same FFN: **SwiGLU**, a gated MLP with three matrices instead of two, and a hidden size
        (11008, 14336, 28672, ...) that looks arbitrary until you know the rule that produced it.

        **You will implement** the SwiGLU function on raw weight matrices, Llama's hidden-size rule, the
        `nn.Module` whose parameter names load a Hugging Face checkpoint, the backward pass by hand in a
        `torch.autograd.Function`, and the fused `gate_up_proj` layout that vLLM and Phi-3 use, with a conversion from
        separate weights. **Graded against** a float64 closed form with `F.silu`, Hugging Face `LlamaMLP` and
        `Phi3MLP` built locally from tiny random configs, float64 autograd and `gradcheck`, and the published sizes of
        real Llama configs (Llama-2 7B/13B/70B, Llama-3 8B/70B/405B).
    """,
    )
    lesson.md(r"""
        ## 本节要点

        - **问题**：Llama 约三分之二的参数在 FFN 中（Llama-2-7B 每层 attention 约 67M，FFN 约 135M），所有主流开源模型都用 SwiGLU。
        - **公式**：$\operatorname{SwiGLU}(x) = W_\text{down}\big(\operatorname{silu}(W_\text{gate}x) \odot W_\text{up}x\big)$，$\operatorname{silu}(z) = z\cdot\operatorname{sigmoid}(z)$；激活只作用在 gate 分支上。
        - **形状**：$W_\text{gate}, W_\text{up} \in \mathbb{R}^{h\times d}$，$W_\text{down} \in \mathbb{R}^{d\times h}$，三个矩阵，无 bias。
        - **hidden size 规则**：令 $3dh = 8d^2$ 得 $h = \tfrac23\cdot 4d$，再乘 `ffn_dim_multiplier`，最后**向上**取整到 `multiple_of` 的倍数；Llama-2-7B 得 11008，Llama-3-8B 得 14336。
        - **模块**：参数名 `gate_proj`、`up_proj`、`down_proj`，`bias=False`，才能直接加载 Hugging Face checkpoint。
        - **手写反向**：$\bar A = \bar Y W_\text{down}$，$\bar U = \bar A \odot \operatorname{silu}(G)$，$\bar G = \bar A \odot U \odot \operatorname{silu}'(G)$，$\operatorname{silu}'(z) = \sigma(z)(1 + z(1-\sigma(z)))$；权重梯度对 $N$ 行求和（$\bar W_\text{gate} = \bar G^\top X$ 等），$\bar X = \bar G W_\text{gate} + \bar U W_\text{up}$ 两条路径相加；只保存 gate、up，反向时重算 silu。
        - **融合 gate_up_proj**：把 $W_\text{gate}$、$W_\text{up}$ 拼成 $(2h, d)$，一次 GEMM 后切分；vLLM `MergedColumnParallelLinear` 与 HF Phi-3 都是 **gate 在前半**（gpt-oss 则交错存放）。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. From a plain MLP to a gated one

        The original Transformer's FFN is two matrices with a non-linearity between them, applied to each token on
        its own: $\operatorname{FFN}(x) = W_2\,\operatorname{ReLU}(W_1 x)$ with a hidden size of $4d$. Its weights are
        $2 \cdot d \cdot 4d = 8d^2$.

        A **gated linear unit** (GLU, Dauphin et al., 2017) computes *two* projections of the input and multiplies them
        element by element: one goes through an activation and acts as a *gate*, the other is the *value* it lets
        through. Shazeer (2020, *GLU Variants Improve Transformer*) tried several activations for the gate:

        | variant | gate activation $\sigma$ | used by |
        | --- | --- | --- |
        | GLU | sigmoid | the original GLU |
        | ReGLU | ReLU | (in the paper) |
        | GeGLU | GELU | T5 v1.1, Gemma (`gelu_pytorch_tanh`) |
        | **SwiGLU** | SiLU (Swish with $\beta = 1$): $\operatorname{silu}(z) = z \cdot \operatorname{sigmoid}(z)$ | PaLM, Llama 1/2/3, Mistral, Qwen, DeepSeek |

        In Shazeer's experiments GeGLU and SwiGLU gave the best perplexity at the same parameter count and compute.
        His explanation is one sentence: "We offer no explanation as to why these architectures seem to work; we
        attribute their success, as all else, to divine benevolence." A useful way to see it: the product of two
        linear functions of $x$ lets the layer compute *quadratic* interactions between features, which a plain MLP
        only approximates with many ReLU pieces.

        ## 2. The math, with shapes

        For a token $x \in \mathbb{R}^{d}$ and weights in `nn.Linear`'s layout (out_features, in_features):
        $W_{\text{gate}}, W_{\text{up}} \in \mathbb{R}^{h \times d}$ and $W_{\text{down}} \in \mathbb{R}^{d \times h}$,

        $$
        \operatorname{SwiGLU}(x) = W_{\text{down}}\,\big(\operatorname{silu}(W_{\text{gate}}\,x) \odot W_{\text{up}}\,x\big).
        $$

        Shapes for a batch: `x: (..., d)` → `gate = x @ W_gate.T: (..., h)`, `up = x @ W_up.T: (..., h)` →
        `silu(gate) * up: (..., h)` → `@ W_down.T: (..., d)`. Every leading dimension (batch, sequence) is just
        carried along: the FFN never mixes tokens. No biases (Llama dropped them everywhere; PaLM reports it helps
        stability at scale).

        **Why $8/3$.** Three matrices of size $d \times h$ cost $3dh$ weights. To match the plain MLP's $8d^2$ at the same
        $d$, set $3dh = 8d^2$, so $h = \tfrac{8}{3}d = \tfrac{2}{3} \cdot 4d$. That is Shazeer's rule, and Meta's
        `llama/model.py` writes it literally: start from `hidden = 4 * dim`, take `int(2 * hidden / 3)`, optionally
        multiply by `ffn_dim_multiplier`, then **round up** to a multiple of `multiple_of`:

        $$
        h = m \cdot \Big\lceil \frac{\lfloor c \cdot \lfloor 2 \cdot 4d / 3 \rfloor \rfloor}{m} \Big\rceil,
        \qquad c = \texttt{ffn\_dim\_multiplier} \ (1 \text{ if None}),\quad m = \texttt{multiple\_of}.
        $$

        Rounding up to a multiple of 256 (or 1024, 4096) keeps every GEMM tile full and lets tensor parallelism split
        $h$ evenly over 8 or 16 GPUs. For Llama-2-7B, $d = 4096$: $\lfloor 32768/3 \rfloor = 10922$, rounded up to a
        multiple of 256 gives $43 \cdot 256 = 11008$.

        **Gradients.** With $g = W_{\text{gate}} x$, $u = W_{\text{up}} x$, $a = \operatorname{silu}(g) \odot u$ and
        incoming gradient $\bar y$: $\bar a = W_{\text{down}}^\top \bar y$, $\bar u = \bar a \odot \operatorname{silu}(g)$,
        $\bar g = \bar a \odot u \odot \operatorname{silu}'(g)$ with
        $\operatorname{silu}'(z) = \operatorname{sigmoid}(z)\,\big(1 + z\,(1 - \operatorname{sigmoid}(z))\big)$.
        Autograd derives this for you; fused kernels (Liger-Kernel's `LigerSiLUMulFunction`) write it by hand and
        recompute $\operatorname{silu}(g)$ in the backward pass instead of storing it.
    """)
    lesson.setup(r"""
        import matplotlib.pyplot as plt
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
    """)
    lesson.md(r"""
        ## 3. Exercise `swiglu`: the function on raw weights

        Implement the formula above for any number of leading dimensions. Weights are stored like `nn.Linear.weight`,
        `(out_features, in_features)`, so a projection is `x @ W.T` (or `F.linear(x, W)`, which is the same and uses
        one GEMM). Compute in the input's dtype, as Hugging Face's `LlamaMLP` does.
    """)
    lesson.exercise(
        "swiglu",
        r'''
        def swiglu(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor) -> torch.Tensor:
            """SwiGLU feed-forward: w_down applied to silu(x w_gate^T) * (x w_up^T).

            x:      (..., d)  float32 / float16 / bfloat16 / float64
            w_gate: (h, d)    nn.Linear layout (out_features, in_features)
            w_up:   (h, d)
            w_down: (d, h)
            returns (..., d), same dtype as x
            """
            # TODO: the gate and the up projection of x, each (..., h)
            # TODO: silu on the gate only, multiplied element by element with the up projection
            # TODO: project back to d with w_down
            ### BEGIN SOLUTION
            gate = F.linear(x, w_gate)               # (..., h) = x @ w_gate.T
            up = F.linear(x, w_up)                   # (..., h)
            return F.linear(F.silu(gate) * up, w_down)  # (..., h) -> (..., d)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        The checks compare with the float64 closed form on inputs with 1 to 4 dimensions and odd sizes, in fp32,
        fp16, bf16 and fp64; run `torch.autograd.gradcheck` through all four arguments; and feed a hand-checkable case
        where each hidden unit can be computed on paper.
    """)
    lesson.md(r"""
        ### The gate, in a picture

        The left panel shows the gate activations of the GLU family. SiLU is smooth, dips slightly below zero (its
        minimum is $-0.278$ at $z \approx -1.28$) and grows like $z$ for large $z$. The right panel shows what one
        hidden unit of your `swiglu` computes for a 2-D input when the gate reads $x_1$ and the value reads $x_2$:
        $\operatorname{silu}(x_1)\cdot x_2$. Where the gate is closed ($x_1 \ll 0$) nothing passes whatever $x_2$ is;
        where it is open the output is linear in $x_2$. A plain MLP unit would be a function of one direction only.
    """)
    lesson.code(r"""
        z = torch.linspace(-5, 5, 401)
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
        for name, fn in (("sigmoid (GLU)", torch.sigmoid), ("ReLU (ReGLU)", F.relu),
                         ("GELU (GeGLU)", F.gelu), ("SiLU (SwiGLU)", F.silu)):
            left.plot(z, fn(z), label=name)
        left.axhline(0, color="grey", lw=0.5); left.set_ylim(-1, 5)
        left.set_xlabel("gate pre-activation z"); left.set_ylabel("σ(z)"); left.set_title("gate activations")
        left.legend(fontsize=8)
        grid = torch.linspace(-3, 3, 121)
        x = torch.stack(torch.meshgrid(grid, grid, indexing="xy"), dim=-1)  # (121, 121, 2): (x1, x2)
        w_gate, w_up, w_down = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0]]), torch.ones(1, 1)
        try:
            surface = swiglu(x, w_gate, w_up, w_down)[..., 0]
        except NotImplementedError:
            surface = F.silu(x[..., 0]) * x[..., 1]  # not attempted yet: the formula itself
        image = right.imshow(surface, origin="lower", extent=(-3, 3, -3, 3), cmap="RdBu_r", vmin=-8, vmax=8)
        right.set_xlabel("x1 (read by the gate)"); right.set_ylabel("x2 (read by up)")
        right.set_title("one hidden unit: silu(x1) · x2"); fig.colorbar(image, ax=right)
        fig.tight_layout()
        plt.show()
    """)
    lesson.md(r"""
        ## 4. Exercise `swiglu_hidden_dim`: Llama's size rule

        Write the rule of section 2 exactly as Meta's `FeedForward.__init__` computes it, with integer truncation at
        the same two places (`int(2 * hidden / 3)`, then `int(multiplier * hidden)`) and rounding **up** to the next
        multiple. Published configs are the test: Llama-2-7B ($d = 4096$, `multiple_of=256`) has $h = 11008$, and
        Llama-3-8B ($d = 4096$, `ffn_dim_multiplier=1.3`, `multiple_of=1024`) has $h = 14336$.
    """)
    lesson.exercise(
        "swiglu_hidden_dim",
        r'''
        def swiglu_hidden_dim(dim: int, multiple_of: int = 256, ffn_dim_multiplier: float | None = None) -> int:
            """Llama's FFN hidden size: 2/3 of 4 * dim, times an optional multiplier, rounded up to multiple_of.

            returns a Python int
            """
            # TODO: start from 4 * dim and keep two thirds of it, truncated to an integer
            # TODO: if a multiplier is given, scale by it (truncate again)
            # TODO: round UP to the next multiple of multiple_of (a value already on a multiple stays)
            ### BEGIN SOLUTION
            hidden = int(2 * (4 * dim) / 3)                  # 8/3 * dim keeps 3*d*h equal to a 4d MLP's 8*d^2
            if ffn_dim_multiplier is not None:
                hidden = int(ffn_dim_multiplier * hidden)    # Llama-3 widens the FFN by 1.3
            return multiple_of * ((hidden + multiple_of - 1) // multiple_of)  # ceil to a multiple of multiple_of
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 5. Exercise `SwiGLU`: the layer a checkpoint loads into

        A Hugging Face Llama checkpoint stores the FFN of layer 0 as `model.layers.0.mlp.gate_proj.weight`,
        `...up_proj.weight` and `...down_proj.weight`. Give your module three bias-free `nn.Linear` members with
        exactly those names, so that `load_state_dict(LlamaMLP.state_dict())` works as is, and make `forward` call
        your `swiglu`. (Meta's original checkpoints call the same matrices `w1`, `w3` and `w2`: gate, up, down. The
        tiny-Llama lesson converts between the two.)
    """)
    lesson.exercise(
        "SwiGLU",
        r'''
        class SwiGLU(nn.Module):
            """Llama's FFN: state_dict() == {gate_proj.weight (h, d), up_proj.weight (h, d), down_proj.weight (d, h)}."""

            def __init__(self, dim: int, hidden_dim: int):
                super().__init__()
                # TODO: three nn.Linear layers without bias: gate_proj and up_proj d -> h, down_proj h -> d
                ### BEGIN SOLUTION
                self.gate_proj = nn.Linear(dim, hidden_dim, bias=False)  # weight (h, d)
                self.up_proj = nn.Linear(dim, hidden_dim, bias=False)    # weight (h, d)
                self.down_proj = nn.Linear(hidden_dim, dim, bias=False)  # weight (d, h)
                ### END SOLUTION

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                # TODO: your swiglu with this layer's three weights
                ### BEGIN SOLUTION
                return swiglu(x, self.gate_proj.weight, self.up_proj.weight, self.down_proj.weight)
                ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### Parameters: SwiGLU at 8/3 vs a plain 4d MLP

        The cell below counts the weights of your module at Llama-2-7B's width next to a plain $4d$ MLP, and plots
        the hidden size that your rule gives across widths. The rounding costs at most `multiple_of - 1` extra units.
    """)
    lesson.code(r"""
        def parameters(module):
            return sum(p.numel() for p in module.parameters())

        dim = 4096
        plain = parameters(nn.Sequential(nn.Linear(dim, 4 * dim, bias=False), nn.Linear(4 * dim, dim, bias=False)))
        try:
            hidden = swiglu_hidden_dim(dim)
            with torch.device("meta"):  # shapes only: no memory, no initialisation
                gated = parameters(SwiGLU(dim, hidden))
            print(f"d = {dim}: plain 4d MLP {plain / 1e6:.1f}M weights; SwiGLU h = {hidden}: {gated / 1e6:.1f}M "
                  f"({gated / plain:.3f}x)")
            dims = list(range(256, 8193, 64))
            plt.figure(figsize=(6, 3.4))
            plt.plot(dims, [8 * d / 3 for d in dims], label="8d/3 exactly")
            plt.step(dims, [swiglu_hidden_dim(d) for d in dims], where="post", label="rounded up to 256 (yours)")
            plt.xlabel("model width d"); plt.ylabel("FFN hidden size h")
            plt.title("Llama's FFN size rule"); plt.legend(fontsize=8); plt.tight_layout()
            plt.show()
        except NotImplementedError:
            print(f"plain 4d MLP at d = {dim}: {plain / 1e6:.1f}M weights; finish the exercises for the comparison")
    """)
    lesson.md(r"""
        ## 6. Exercise `SwiGLUFunction`: the backward by hand

        Autograd differentiates your `swiglu` for you, and keeps everything it needs: for an `(N, h)` hidden layer it
        saves `gate`, `silu(gate)`, `up` and the product `a = silu(gate) * up`, four `(N, h)` tensors per layer
        (the cell after this exercise measures it). Fused kernels write the backward by hand instead, save only the
        two pre-activations and recompute the rest: Liger-Kernel's `LigerSiLUMulFunction` saves `gate` and `up` and
        recomputes `silu(gate)` in its backward; Megatron-LM's fused `bias_swiglu` does the same. Writing it
        yourself is also the best way to see where the FFN's backward FLOPs go.

        **Derivation.** Flatten the leading dimensions into $N$ rows: $X$ $(N, d)$, the incoming gradient
        $\bar Y = \partial L / \partial Y$ $(N, d)$. Forward:

        $$
        G = X W_{\text{gate}}^\top,\quad U = X W_{\text{up}}^\top \ (N, h), \qquad S = \operatorname{silu}(G), \quad
        A = S \odot U \ (N, h), \qquad Y = A W_{\text{down}}^\top \ (N, d).
        $$

        Each line of the backward is the chain rule through one line of the forward, read bottom-up. A linear map
        $Y = A W^\top$ sends $\bar Y$ to $\bar A = \bar Y W$ and gives $\bar W = \bar Y^\top A$ (a sum over the $N$
        rows, never a mean: the loss already carries its own normalisation). The product and the activation are
        element-wise:

        $$
        \begin{aligned}
        \bar A &= \bar Y\, W_{\text{down}} \ (N, h), & \bar W_{\text{down}} &= \bar Y^\top A \ (d, h),\\
        \bar U &= \bar A \odot S, & \bar G &= \bar A \odot U \odot \operatorname{silu}'(G),
          \quad \operatorname{silu}'(z) = \sigma(z)\big(1 + z\,(1 - \sigma(z))\big),\\
        \bar W_{\text{gate}} &= \bar G^\top X \ (h, d), & \bar W_{\text{up}} &= \bar U^\top X \ (h, d),\\
        \bar X &= \bar G\, W_{\text{gate}} + \bar U\, W_{\text{up}} \ (N, d) . &&
        \end{aligned}
        $$

        $X$ feeds two projections, so its gradient is the **sum** of the two paths. The forward has three GEMMs of
        $2Ndh$ FLOPs; the backward has six ($\bar A$, $\bar W_{\text{down}}$, $\bar W_{\text{gate}}$,
        $\bar W_{\text{up}}$ and the two halves of $\bar X$): twice the forward, the usual "backward = 2 × forward"
        rule, exactly.

        **Write** `SwiGLUFunction`, a `torch.autograd.Function`. `forward(ctx, x, w_gate, w_up, w_down)` refuses
        weights that do not fit `x (..., d)` with a `ValueError`, computes the output as in `swiglu` and saves `x`,
        the three weights, `gate` and `up`. `backward(ctx, grad_out)` returns the four gradients in the shapes and
        dtypes of the four inputs. Compute the element-wise part ($\sigma$, $S$, $\bar G$, $\bar U$) in at least float32
        and cast back before the GEMMs, as fused kernels do. Autograd (`torch.autograd.grad`, `.backward()`) is the
        checks' reference, so it is forbidden inside your function.
    """)
    lesson.exercise(
        "SwiGLUFunction",
        r'''
        class SwiGLUFunction(torch.autograd.Function):
            """SwiGLU with a hand-written backward. SwiGLUFunction.apply(x, w_gate, w_up, w_down) -> (..., d).

            forward:  x (..., d); w_gate, w_up (h, d); w_down (d, h); all one dtype. Saves x, the weights, gate, up.
            backward: grad_out (..., d) -> grad_x (..., d), grad_w_gate (h, d), grad_w_up (h, d), grad_w_down (d, h)
            """

            @staticmethod
            def forward(ctx, x, w_gate, w_up, w_down):
                # TODO: refuse (ValueError) weights whose shapes do not fit x: w_gate, w_up (h, d) and w_down (d, h)
                # TODO: gate and up (..., h); save x, the weights, gate and up; return the SwiGLU output (..., d)
                ### BEGIN SOLUTION
                d, h = x.shape[-1], w_gate.shape[0]
                if w_gate.dim() != 2 or w_gate.shape != (h, d) or w_up.shape != (h, d) or w_down.shape != (d, h):
                    raise ValueError(f"expected w_gate, w_up (h, d) and w_down (d, h) for x (..., d={d}), got "
                                     f"{tuple(w_gate.shape)}, {tuple(w_up.shape)}, {tuple(w_down.shape)}")
                gate = F.linear(x, w_gate)  # (..., h)
                up = F.linear(x, w_up)  # (..., h)
                ctx.save_for_backward(x, w_gate, w_up, w_down, gate, up)
                return F.linear(F.silu(gate) * up, w_down)  # (..., d)
                ### END SOLUTION

            @staticmethod
            def backward(ctx, grad_out):
                x, w_gate, w_up, w_down, gate, up = ctx.saved_tensors
                # TODO: flatten the leading dimensions: x, grad_out (N, d); gate, up (N, h) in >= float32
                # TODO: recompute s = silu(gate) and a = s * up; grad_a = grad_out @ w_down
                # TODO: grad_up = grad_a * s; grad_gate = grad_a * up * silu'(gate), cast back to x's dtype
                # TODO: the weight gradients (sums over the N rows) and grad_x (both paths), in the inputs' shapes
                ### BEGIN SOLUTION
                d, h = x.shape[-1], gate.shape[-1]
                compute = torch.promote_types(x.dtype, torch.float32)
                rows, grad_rows = x.reshape(-1, d), grad_out.reshape(-1, d)  # (N, d)
                g, u = gate.reshape(-1, h).to(compute), up.reshape(-1, h).to(compute)  # (N, h)
                sig = torch.sigmoid(g)
                s = g * sig  # silu(gate), recomputed instead of saved
                a = (s * u).to(x.dtype)  # (N, h): what down_proj read
                grad_a = (grad_rows @ w_down).to(compute)  # (N, h)
                grad_up = (grad_a * s).to(x.dtype)  # (N, h)
                grad_gate = (grad_a * u * sig * (1 + g * (1 - sig))).to(x.dtype)  # (N, h): silu'(g)
                grad_w_down = grad_rows.T @ a  # (d, h)
                grad_w_gate = grad_gate.T @ rows  # (h, d)
                grad_w_up = grad_up.T @ rows  # (h, d)
                grad_x = grad_gate @ w_gate + grad_up @ w_up  # (N, d): x feeds both projections
                return grad_x.reshape(x.shape), grad_w_gate, grad_w_up, grad_w_down
                ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        The checks run `gradcheck` in float64 through all four inputs; compare the four gradients with autograd
        through the closed form for inputs of 1 to 4 dimensions and odd sizes, in float64, float32, bfloat16 and
        float16; work one $d = h = 1$ case out on paper; and feed weights that do not fit.
    """)
    lesson.md(r"""
        ### What each backward keeps alive

        The cell below runs a Llama-shaped FFN slice ($d = 256$, $h = 688$, 512 tokens) through autograd and through
        your `SwiGLUFunction`, and measures with `torch.autograd.graph.saved_tensors_hooks` how many bytes each saves
        for its backward, besides the weights.
    """)
    lesson.code(r"""
        def saved_bytes(run):
            seen = {}
            def pack(t):
                seen[(t.untyped_storage().data_ptr(), t.dtype, tuple(t.shape))] = t.numel() * t.element_size()
                return t
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                out = run()
            return out, seen

        torch.manual_seed(0)
        d, h, tokens = 256, 688, 512
        x = torch.randn(tokens, d, requires_grad=True)
        weights = [(torch.randn(h, d) / d**0.5).requires_grad_(), (torch.randn(h, d) / d**0.5).requires_grad_(),
                   (torch.randn(d, h) / h**0.5).requires_grad_()]
        weight_ids = {w.untyped_storage().data_ptr() for w in weights}
        try:
            for name, run in (("autograd through swiglu", lambda: swiglu(x, *weights)),
                              ("your SwiGLUFunction", lambda: SwiGLUFunction.apply(x, *weights))):
                out, seen = saved_bytes(run)
                activations = sum(size for (ptr, _, _), size in seen.items() if ptr not in weight_ids)
                grads = torch.autograd.grad(out, [x, *weights], torch.ones_like(out))
                print(f"{name:24s}: {activations / 2**20:5.2f} MiB of activations saved, "
                      f"|grad x| = {grads[0].norm():.4f}")
        except NotImplementedError:
            print("finish swiglu and SwiGLUFunction to compare what they save")
    """)
    lesson.md(r"""
        ## 7. Exercise `FusedSwiGLU`: one GEMM for gate and up

        `gate_proj` and `up_proj` read the same $x$. Stacking their weights into one $(2h, d)$ matrix turns two GEMMs
        into one of twice the width: $x$ is read once, one kernel launch instead of two, and a wider GEMM keeps the
        GPU's tiles fuller. Every serving engine does it:

        - **vLLM** builds `gate_up_proj = MergedColumnParallelLinear(hidden_size, [intermediate_size] * 2)` and loads
          the checkpoint's `gate_proj` as shard 0 and `up_proj` as shard 1 (`stacked_params_mapping` in
          `vllm/model_executor/models/llama.py`). Its `SiluAndMul` then computes `silu(x[..., :h]) * x[..., h:]`:
          **the gate is the first half**.
        - **Hugging Face** loads a Llama checkpoint unfused, but some checkpoints are stored fused: Phi-3's
          `model.layers.N.mlp.gate_up_proj.weight` has shape $(2h, d)$, and `Phi3MLP.forward` does
          `gate, up = gate_up_proj(x).chunk(2, dim=-1)`, again **gate first** (GLM-4's MLP is the same).
        - Not every checkpoint agrees: OpenAI's gpt-oss stores its experts' gate and up **interleaved** (gate in the
          even columns, up in the odd ones). The layout is part of the checkpoint format; read the reference code.

        With tensor parallelism the fused weight is not split in two contiguous halves of the full matrix: rank $r$
        of $T$ holds $[W_{\text{gate}}^{(r)}; W_{\text{up}}^{(r)}]$, the $r$-th slice of each, so that its own output
        splits into its gate and up halves again. That is why vLLM loads the two shards separately instead of
        loading one pre-fused matrix.

        **Write** `FusedSwiGLU(dim, hidden_dim)` with `gate_up_proj` ($d \to 2h$) and `down_proj` ($h \to d$), no biases,
        so that a Phi-3 state dict loads as is; `forward` does **one** GEMM through `gate_up_proj`, splits it into the
        gate (first $h$ columns) and up (last $h$), and applies `down_proj` to `silu(gate) * up`. The class method
        `from_unfused(mlp)` converts any module with `gate_proj`, `up_proj` and `down_proj` (your `SwiGLU`, Hugging
        Face's `LlamaMLP`) into a `FusedSwiGLU` that computes the same function, in the same dtype and on the same
        device, with copies of the weights; it refuses gate and up weights of different shapes, or a `down_proj` that
        does not fit them, with a `ValueError`.
    """)
    lesson.exercise(
        "FusedSwiGLU",
        r'''
        class FusedSwiGLU(nn.Module):
            """SwiGLU with gate and up stacked: state_dict() == {gate_up_proj.weight (2h, d), down_proj.weight (d, h)};
            rows 0..h-1 of gate_up_proj.weight are the gate's, rows h..2h-1 the up projection's (vLLM, HF Phi-3)."""

            def __init__(self, dim: int, hidden_dim: int):
                super().__init__()
                self.hidden_dim = hidden_dim
                # TODO: gate_up_proj d -> 2h and down_proj h -> d, both nn.Linear without bias
                ### BEGIN SOLUTION
                self.gate_up_proj = nn.Linear(dim, 2 * hidden_dim, bias=False)  # weight (2h, d) = [W_gate; W_up]
                self.down_proj = nn.Linear(hidden_dim, dim, bias=False)  # weight (d, h)
                ### END SOLUTION

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                # TODO: one GEMM to (..., 2h); gate = the first h columns, up = the last h; silu(gate) * up; down_proj
                ### BEGIN SOLUTION
                gate, up = self.gate_up_proj(x).split(self.hidden_dim, dim=-1)  # (..., 2h) -> two (..., h) views
                return self.down_proj(F.silu(gate) * up)  # (..., d)
                ### END SOLUTION

            @classmethod
            def from_unfused(cls, mlp: nn.Module) -> "FusedSwiGLU":
                """The same function as mlp (gate_proj, up_proj, down_proj), weights copied, same dtype and device."""
                # TODO: refuse (ValueError) gate and up weights of different shapes, or a down_proj that does not fit
                # TODO: a new FusedSwiGLU in the weights' dtype and device; copy [gate; up] and down into it
                ### BEGIN SOLUTION
                w_gate, w_up, w_down = mlp.gate_proj.weight, mlp.up_proj.weight, mlp.down_proj.weight
                h, d = w_gate.shape
                if w_up.shape != (h, d) or w_down.shape != (d, h):
                    raise ValueError(f"gate_proj {tuple(w_gate.shape)}, up_proj {tuple(w_up.shape)} and down_proj "
                                     f"{tuple(w_down.shape)} do not form one SwiGLU (h, d), (h, d), (d, h)")
                fused = cls(d, h).to(dtype=w_gate.dtype, device=w_gate.device)
                with torch.no_grad():
                    fused.gate_up_proj.weight.copy_(torch.cat((w_gate, w_up), dim=0))  # (2h, d): gate rows first
                    fused.down_proj.weight.copy_(w_down)
                return fused
                ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        The checks convert a Hugging Face `LlamaMLP` (fp32, bf16) and compare outputs and gradients (the fused
        weight's gradient must be $[\bar W_{\text{gate}}; \bar W_{\text{up}}]$); load a tiny Hugging Face `Phi3MLP`'s
        fused state dict and compare outputs; record the matrix multiplications of your `forward` to see one GEMM of
        width $2h$ and one of width $d$; and check the refusal.
    """)
    lesson.stop()
    lesson.md(r"""
        ## 8. Reading the solutions

        **`swiglu`.** `F.linear(x, W)` computes `x @ W.T` in one GEMM over all leading dimensions, so `(B, T, d)` and
        `(d,)` inputs need no reshaping. The activation goes on the **gate** projection only; the up projection stays
        linear. Nothing is upcast: a GEMM on a GPU already accumulates fp16/bf16 products in float32, and
        `F.silu` computes internally in float32 for half-precision inputs.

        **`swiglu_hidden_dim`.** Integer arithmetic in the same order as Meta's code, because checkpoints were saved
        with *its* numbers: `int(2 * 16384 / 3) = 10922`, then a ceiling division `(h + m - 1) // m`. Llama-3-8B:
        $\lfloor 1.3 \cdot 10922 \rfloor = 14198$, rounded up to 1024 gives 14336. Llama-2-70B ($d = 8192$, 1.3, 4096):
        $\lfloor 1.3 \cdot 21845 \rfloor = 28398 \to 28672$. Hugging Face configs skip the rule and store the result as
        `intermediate_size`.

        **`SwiGLU`.** Three `nn.Linear(..., bias=False)`: the attribute names *are* the checkpoint format.

        **The usual mistakes, and why they are wrong**:
        - *Activation on the wrong branch* (`silu(up) * gate`): same shapes, same cost, a different function. Only a
          reference with distinct gate and up weights sees it; with a checkpoint it silently ruins the model.
        - *GELU or sigmoid instead of SiLU*: a different GLU variant. GELU is within about 0.1 of SiLU near zero, so
          only a comparison with a reference at realistic scales catches it.
        - *Forgetting the up projection* (`W_down silu(W_gate x)`): a plain MLP with the wrong weights.
        - *Rounding down* (`h // m * m`): 10752 instead of 11008 for Llama-2-7B, and a checkpoint no longer loads.
          *Always adding a multiple* (`(h // m + 1) * m`) is right for Llama-2-7B, but wrong whenever $h$ is already
          on a multiple: $d = 3072$ gives 8448 instead of 8192.
        - *Applying the multiplier after rounding*: Llama-3-8B gets 14643 instead of 14336.
        - *`bias=True`*: the state dict grows `gate_proj.bias` keys that no Llama checkpoint has (strict loading fails).
        - *Gate and up weights swapped in `forward`*: loads cleanly, computes the wrong thing.
        - In the backward: *$\operatorname{silu}'$ taken as $\sigma$* (the derivative of the sigmoid gate, not of
          $z\,\sigma(z)$); *$\bar X$ from the gate path only* (`grad_gate @ w_gate`), which forgets that $x$ also feeds
          `up`; *$\bar U = \bar A \odot G$* (the pre-activation instead of $\operatorname{silu}(G)$); *a mean over the
          rows* in a weight gradient; and calling autograd inside `backward`, which the restriction refuses.
        - In the fused layout: *up first* (`up, gate = ...split(h)`) or *the halves swapped in `from_unfused`*, each
          right on its own and wrong against the other side's checkpoint; *interleaved columns* (`[..., ::2]`), gpt-oss's
          layout, applied to a gate-first checkpoint.

        **`SwiGLUFunction`.** The forward saves $x$, the weights and the two pre-activations, nothing derived from them;
        the backward recomputes $\sigma(G)$, $S$ and $A$ from `gate` and `up` in float32, which costs a few element-wise
        passes and saves two $(N, h)$ tensors per layer (the measurement above shows autograd keeping four). Every
        gradient is one GEMM on the flattened $(N, \cdot)$ rows, and the weight gradients are sums over those rows,
        which is exactly what autograd's `mm` backward computes. A production version also checks
        `ctx.needs_input_grad` and skips the weight GEMMs of frozen weights (LoRA, QLoRA), a third of the backward.

        **`FusedSwiGLU`.** `split(h, dim=-1)` returns two views of the $(…, 2h)$ output, so the fusion costs no copy.
        `from_unfused` copies under `torch.no_grad()` so that the new parameters are leaves with no history, in the
        source's dtype and device. The conversion is the same `torch.cat` that vLLM's weight loader performs shard by
        shard.

        **Cost.** Per token, $3 \cdot 2dh$ FLOPs (three GEMMs) and, in eager PyTorch, four extra element-wise passes
        over `(T, h)` tensors: silu reads and writes `gate`, the product reads two and writes one. At Llama-2-7B's
        $h = 11008$ and 4096 tokens in bf16 each `(T, h)` tensor is 90 MB. **Production code** removes these passes:
        - vLLM concatenates $W_{\text{gate}}$ and $W_{\text{up}}$ into one `gate_up_proj` (`MergedColumnParallelLinear`,
          one GEMM producing `(T, 2h)`, your `FusedSwiGLU`) and applies a fused `SiluAndMul` kernel that reads it once
          and writes `(T, h)`.
        - Megatron-LM does the same with `gated_linear_unit=True`: `linear_fc1` outputs $2h$ and the activation
          function splits it with `torch.chunk`. Under tensor parallelism gate/up are column-parallel and down is
          row-parallel, so each GPU holds $h/\text{TP}$ hidden units and needs one all-reduce after the FFN, another
          reason for $h$ to be a round multiple.
        - Liger-Kernel's `LigerSwiGLUMLP` fuses silu and the product in Triton and recomputes the activation in the
          backward pass to save activation memory; `p03.fused_elementwise` builds that kernel.
    """)
    lesson.mistakes()
    return lesson
