"""Source of 00_Prerequisites/10_Activations.ipynb (build with `python -m llm_algo build p00.activations`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p00.activations",
        path="00_Prerequisites/10_Activations.ipynb",
        title_en="Activation functions: GELU, SiLU and their derivatives",
        title_zh="激活函数：GELU、SiLU 及其导数",
        difficulty="easy",
        device="cpu",
        minutes=35,
        prerequisites=["p00.autograd", "p00.optim_and_loss"],
    )
    lesson.title(
        intro=r"""
        The MLP of a transformer holds most of its parameters (80% of each Llama-3-8B layer: 176M of 218M), and
        between its matrices sits one elementwise function. GPT-2 and BERT use **GELU** (Hendrycks and Gimpel, 2016), in GPT-2's case its tanh
        approximation (`gelu_new` in Hugging Face, the `approximate="tanh"` of PyTorch); Llama, Qwen and Mistral use
        **SiLU** inside SwiGLU (Shazeer, *GLU Variants Improve Transformer*, 2020). Loading GPT-2 weights with the exact
        GELU instead of the tanh one changes activations by up to $5 \times 10^{-4}$: small, but enough to fail a
        logits comparison with the reference and to drift over a long generation. And every fused kernel
        (Liger-Kernel's SwiGLU, Megatron's bias-GELU fusion) recomputes the activation in the backward pass from its
        derivative, written by hand.

        **You will implement** `gelu` (exact and tanh), the closed-form derivatives `gelu_grad` and `silu_grad`,
        and a `torch.autograd.Function` for SiLU whose backward uses your derivative and saves only the input.
        **Graded against** `F.gelu` (both modes) and `F.silu` in float64 with low-precision baselines, their
        derivatives through `torch.autograd` in float64, and `gradcheck`. `F.gelu`, `nn.GELU`, `F.silu`, `nn.SiLU`
        are forbidden, and so is autograd inside the derivatives.

        **本节要点**
        - GELU(x) = x·Φ(x) = ½x(1 + erf(x/√2))，Φ 是标准正态分布函数；tanh 近似：½x(1 + tanh(√(2/π)(x + 0.044715x³)))，GPT-2 用的是近似版本。
        - SiLU(x) = x·σ(x)（也叫 swish），LLaMA 系列在 SwiGLU 中使用。
        - 导数：GELU′(x) = Φ(x) + x·φ(x)；SiLU′(x) = σ(x)(1 + x(1 − σ(x)))。两者在负半轴都有非零梯度，且最小值略小于 0（非单调）。
        - 低精度输入先升到 float32 计算再转回；大的负数输入下 `exp` 下溢为 0 是安全的，不要自己写 `1/(1+exp(-x))` 以免溢出。
        - 自定义 `autograd.Function`：`forward` 中 `ctx.save_for_backward(x)`，`backward` 返回 `grad_out * f′(x)`，用 `gradcheck` 在 float64 下验证。
        {易错点}
        """
    )
    lesson.md(r"""
        ## 1. Two smooth ReLUs

        **GELU** weights its input by the probability that a standard normal variable is below it:

        $$
        \operatorname{GELU}(x) = x\,\Phi(x) = \tfrac12 x\Big(1 + \operatorname{erf}\big(x/\sqrt2\big)\Big),
        \qquad
        \operatorname{GELU}_{\tanh}(x) = \tfrac12 x\Big(1 + \tanh\big(\sqrt{2/\pi}\,(x + 0.044715\,x^3)\big)\Big).
        $$

        The tanh form dates from when `erf` was slow on accelerators; GPT-2's original TensorFlow code used it, so
        every port of GPT-2 (and GPT-J, Gemma's `gelu_pytorch_tanh`) must too. **SiLU**, or swish, gates with the
        logistic sigmoid $\sigma(x) = 1/(1 + e^{-x})$:

        $$
        \operatorname{SiLU}(x) = x\,\sigma(x).
        $$

        All act elementwise: `x (...)` in, the same shape out. For `x (B, T, d_ff)` in Llama-3-8B's MLP,
        $d_\text{ff} = 14336$, the activation touches $B \cdot T \cdot 14336$ values per layer: it costs no FLOPs
        worth counting but a full read and write of that tensor, which is why it is fused into the neighbouring
        matmul or into the gate multiplication in production kernels.

        ## 2. Their derivatives

        With $\varphi(x) = e^{-x^2/2}/\sqrt{2\pi}$ the normal density, the product rule gives

        $$
        \operatorname{GELU}'(x) = \Phi(x) + x\,\varphi(x), \qquad
        \operatorname{SiLU}'(x) = \sigma(x) + x\,\sigma(x)(1 - \sigma(x)) = \sigma(x)\big(1 + x(1 - \sigma(x))\big),
        $$

        and for the tanh form, with $u = \sqrt{2/\pi}\,(x + 0.044715\,x^3)$ and $t = \tanh u$,

        $$
        \operatorname{GELU}_{\tanh}'(x) = \tfrac12 (1 + t) + \tfrac12 x\,(1 - t^2)\,\sqrt{2/\pi}\,\big(1 + 3 \cdot 0.044715\,x^2\big).
        $$

        Unlike ReLU's, these derivatives are non-zero for negative inputs (no "dead" units), and they dip slightly
        below 0 (both functions have a minimum: GELU at $x \approx -0.75$, SiLU at $x \approx -1.28$). The figure after
        the first exercise draws them.

        **Numerics.** Compute in at least float32 and cast back, like PyTorch's own kernels for half-precision
        inputs. Use `torch.sigmoid` and `torch.erf`, which are accurate for any sign; `1 / (1 + torch.exp(-x))`
        overflows `exp` for $x < -88$ in float32 and for $x < -11$ in float16: `1 / (1 + inf)` still gives 0, but
        any rearrangement such as `exp(x) / (1 + exp(x))` then gives `inf / inf = nan` on the other side.
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt
        import torch
        import torch.nn.functional as F
    """)
    lesson.md(r"""
        ## 3. Exercise `gelu`

        `gelu(x, approximate="none")`: the exact form, or the tanh form for `approximate="tanh"`; any other value is
        refused with `ValueError` (PyTorch's two names). Compute in at least float32, return `x`'s dtype; tensor ops
        only (the checks differentiate through it). The likely mistakes: $\operatorname{erf}(x)$ instead of
        $\operatorname{erf}(x/\sqrt2)$, the constant $\sqrt{2/\pi}$ forgotten or applied to $x$ only, and no upcast.
    """)
    lesson.exercise(
        "gelu",
        r'''
        SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


        def gelu(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
            """Exact GELU x * Phi(x), or its tanh approximation; computed in >= float32, returned in x's dtype."""
            # TODO: refuse approximate other than "none" / "tanh"
            # TODO: upcast; exact: 0.5 x (1 + erf(x / sqrt 2)); tanh: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
            ### BEGIN SOLUTION
            if approximate not in ("none", "tanh"):
                raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")
            xc = x.to(torch.promote_types(x.dtype, torch.float32))
            if approximate == "tanh":
                inner = SQRT_2_OVER_PI * (xc + 0.044715 * xc**3)
                out = 0.5 * xc * (1.0 + torch.tanh(inner))
            else:
                out = 0.5 * xc * (1.0 + torch.erf(xc / math.sqrt(2.0)))
            return out.to(x.dtype)
            ### END SOLUTION
    ''',
    )
    lesson.code(r"""
        x = torch.linspace(-5, 3, 801, dtype=torch.float64)
        def curves(fn):
            xx = x.clone().requires_grad_(True)
            y = fn(xx)
            (g,) = torch.autograd.grad(y.sum(), xx)
            return y.detach(), g
        try:
            mine = {"GELU (yours)": lambda t: gelu(t), "GELU tanh (yours)": lambda t: gelu(t, "tanh")}
            mine["GELU (yours)"](x)
        except NotImplementedError:
            mine = {"GELU": F.gelu, "GELU tanh": lambda t: F.gelu(t, approximate="tanh")}
        functions = {"ReLU": torch.relu, **mine, "SiLU": F.silu}
        fig, (ax, bx, cx) = plt.subplots(1, 3, figsize=(12, 3.2))
        for name, fn in functions.items():
            y, g = curves(fn)
            ax.plot(x, y, label=name); bx.plot(x, g, label=name)
        ax.set_title("activation"); bx.set_title("derivative"); ax.legend(fontsize=8)
        for a in (ax, bx):
            a.axhline(0, color="grey", lw=0.5); a.set_xlabel("x")
        gap = (F.gelu(x) - F.gelu(x, approximate="tanh")).abs()
        cx.semilogy(x, gap.clamp(min=1e-12)); cx.set_title("|GELU − GELU_tanh|"); cx.set_xlabel("x")
        plt.tight_layout(); plt.show()
        print(f"largest gap between exact and tanh GELU: {gap.max():.2e} at x = {x[gap.argmax()]:.2f}")
    """)
    lesson.md(r"""
        ## 4. Exercise `derivatives`

        `gelu_grad(x, approximate="none")` and `silu_grad(x)` return $f'(x)$ elementwise by the closed forms of
        section 2: same shape, `x`'s dtype, computed in at least float32, for any finite `x`. No autograd inside
        (`backward`, `torch.autograd.grad` are forbidden here: this is the function a fused kernel's backward
        evaluates), and refuse an unknown `approximate` with `ValueError`. The likely mistakes: the tanh form's
        inner derivative without the factor $3 \cdot 0.044715$, and $\sigma(x)(1-\sigma(x))$ (the sigmoid's own
        derivative) in place of SiLU's.
    """)
    lesson.exercise(
        "derivatives",
        r'''
        def gelu_grad(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
            """d GELU / dx, elementwise, in x's dtype (computed in >= float32)."""
            # TODO: refuse an unknown approximate; Phi(x) + x phi(x), or section 2's tanh-form derivative
            ### BEGIN SOLUTION
            if approximate not in ("none", "tanh"):
                raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")
            xc = x.to(torch.promote_types(x.dtype, torch.float32))
            if approximate == "tanh":
                t = torch.tanh(SQRT_2_OVER_PI * (xc + 0.044715 * xc**3))
                inner_grad = SQRT_2_OVER_PI * (1.0 + 3 * 0.044715 * xc**2)
                grad = 0.5 * (1.0 + t) + 0.5 * xc * (1.0 - t * t) * inner_grad
            else:
                cdf = 0.5 * (1.0 + torch.erf(xc / math.sqrt(2.0)))
                pdf = torch.exp(-0.5 * xc * xc) / math.sqrt(2.0 * math.pi)
                grad = cdf + xc * pdf
            return grad.to(x.dtype)
            ### END SOLUTION


        def silu_grad(x: torch.Tensor) -> torch.Tensor:
            """d SiLU / dx = sigmoid(x) (1 + x (1 - sigmoid(x))), in x's dtype (computed in >= float32)."""
            # TODO: one line with torch.sigmoid, upcast and cast back
            ### BEGIN SOLUTION
            xc = x.to(torch.promote_types(x.dtype, torch.float32))
            s = torch.sigmoid(xc)
            return (s * (1.0 + xc * (1.0 - s))).to(x.dtype)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 5. Exercise `silu_function`

        A `torch.autograd.Function` is how PyTorch lets you choose what a backward computes and what the forward
        saves. `SiLUFunction.forward(ctx, x)` returns $\operatorname{SiLU}(x)$ (at least float32 inside, `x`'s dtype
        out) and saves **only `x`** with `ctx.save_for_backward`; `backward(ctx, grad_out)` returns
        `grad_out * silu_grad(x)` in `x`'s dtype. `silu(x)` applies it. Saving the input rather than the output is
        what lets activation checkpointing or a fused kernel recompute everything from $x$ alone. The backward uses
        your `silu_grad` from the previous exercise, so write that one first.
    """)
    lesson.exercise(
        "silu_function",
        r'''
        class SiLUFunction(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x: torch.Tensor) -> torch.Tensor:
                # TODO: save x for backward; return x * sigmoid(x) computed in >= float32, in x's dtype
                ### BEGIN SOLUTION
                ctx.save_for_backward(x)
                xc = x.to(torch.promote_types(x.dtype, torch.float32))
                return (xc * torch.sigmoid(xc)).to(x.dtype)
                ### END SOLUTION

            @staticmethod
            def backward(ctx, grad_out: torch.Tensor) -> torch.Tensor:
                # TODO: grad_out * silu_grad(x), in float32 or more, returned in x's dtype
                ### BEGIN SOLUTION
                (x,) = ctx.saved_tensors
                compute = torch.promote_types(x.dtype, torch.float32)
                return (grad_out.to(compute) * silu_grad(x).to(compute)).to(x.dtype)
                ### END SOLUTION


        def silu(x: torch.Tensor) -> torch.Tensor:
            """SiLU through SiLUFunction (so its backward is yours)."""
            # TODO: apply the Function (never call forward directly: autograd would not record it)
            ### BEGIN SOLUTION
            return SiLUFunction.apply(x)
            ### END SOLUTION
    ''',
    )
    lesson.stop()
    lesson.md(r"""
        ## 6. Reading the solutions

        **`gelu`.** One upcast, one formula, one cast back; `torch.erf` and `torch.tanh` saturate cleanly to $\pm 1$,
        so large inputs of either sign are safe. Besides the mistakes listed below, watch the cube term's constant
        (0.044715) and the dtype: computing in float16 throws away the digits the upcast keeps. Production: PyTorch's CPU and CUDA kernels compute in float32
        for half-precision inputs exactly like this; Hugging Face maps `"gelu"` to the exact form and
        `"gelu_new"`/`"gelu_pytorch_tanh"` to the tanh one (`transformers.activations.ACT2FN`).

        **`gelu_grad` and `silu_grad`.** The closed forms cost a few elementwise operations, cheaper than storing
        the activation's output: Megatron's `bias_gelu` fusion and Liger-Kernel's SwiGLU recompute them in the
        backward instead of saving extra tensors.

        **`SiLUFunction`.** `ctx.save_for_backward(x)` keeps a reference (no copy) and lets autograd check that `x`
        was not modified in place before the backward. Returning the gradient in `x`'s dtype matters for bf16
        training; saving the output instead would not help, since SiLU is not one-to-one and cannot be inverted. Next: [p02.swiglu](../02_PyTorch_Algorithms/03_SwiGLU.ipynb)
        gates Llama's MLP with SiLU, and [p03.fused_elementwise](../03_Triton_Kernels/02_Fused_Elementwise.ipynb)
        writes the fused kernel.
    """)
    lesson.mistakes()
    return lesson
