"""Source of 02_PyTorch_Algorithms/02_RMSNorm.ipynb (build with `python -m llm_algo build p02.rmsnorm`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p02.rmsnorm",
        path="02_PyTorch_Algorithms/02_RMSNorm.ipynb",
        title_en="RMSNorm",
        title_zh="RMSNorm 均方根归一化",
        difficulty="easy",
        device="cpu",
        minutes=45,
        prerequisites=["p00.module_basics", "p00.autograd", "p00.normalization"],
    )
    lesson.title(
        intro=r"""
        Every Llama, Qwen, Mistral and DeepSeek layer normalises its hidden state twice (before attention and
        before the MLP), and once more before the output head: Llama-3-8B runs $2 \times 32 + 1 = 65$ RMSNorms per
        token. It is the simplest layer in the model, and one of the easiest to get subtly wrong: in fp16 a single
        missing `.float()` turns a healthy activation into `inf`.

        **You will implement** the RMSNorm forward pass with a float32 upcast, the `nn.Module` that Hugging Face
        checkpoints load into, and the backward pass by hand. **Graded against** `torch.nn.functional.rms_norm`
        (float64 oracle), Hugging Face `LlamaRMSNorm` built locally with random weights, and float64 autograd.
    """
    )
    lesson.md(r"""
        ## 本节要点

        - **问题**：每个 Llama/Qwen/DeepSeek 层做两次 RMSNorm（attention 前、MLP 前），输出头前再做一次；Llama-3-8B 每个 token 要做 65 次。
        - **公式**：对 $x \in \mathbb{R}^{d}$（形状 `(..., d)` 的最后一维），$y = \dfrac{x}{\sqrt{\tfrac1d\sum_i x_i^2 + \epsilon}} \odot g$，$g \in \mathbb{R}^{d}$；与 LayerNorm 相比不减均值、无 bias。
        - **精度**：fp16/bf16 输入先 upcast 到 float32（float64 保持不变）再平方求均值，最后 cast 回输入 dtype；否则 fp16 中 $|x| > 256$ 时平方溢出为 `inf`。
        - **模块**：gain 是 `nn.Parameter`，初始化为全 1，参数名 `weight` 与 Hugging Face checkpoint 一致，forward 使用本层的 `eps`。
        - **反向**：令 $r = 1/\mathrm{rms}$、$\hat x = r x$、$u = g \odot \partial L/\partial y$，则 $\partial L/\partial x = r\,(u - \hat x\,\tfrac{1}{d}\langle u, \hat x\rangle)$；$\partial L/\partial g$ 是 $\partial L/\partial y \odot \hat x$ 对所有前导维求和（不是平均）。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. Why normalise, and why not LayerNorm?

        A residual stream adds every block's output to its input, so activations drift in scale with depth.
        Normalising the input of each block keeps every layer working on values of a known size (pre-norm).
        LayerNorm (Ba et al., 2016) subtracts the mean and divides by the standard deviation, then adds a learned
        bias. RMSNorm (Zhang & Sennrich, 2019) keeps only the re-scaling: no mean, no bias. It costs one reduction
        instead of two, and works as well in practice, which is why every recent open model uses it.

        ## 2. The math, with shapes

        For a hidden vector $x \in \mathbb{R}^{d}$ (the last dimension of a tensor of shape `(..., d)`) and a learned
        gain $g \in \mathbb{R}^{d}$:

        $$
        \operatorname{rms}(x) = \sqrt{\tfrac{1}{d}\textstyle\sum_{i=1}^{d} x_i^2 + \varepsilon},\qquad
        \hat{x} = \frac{x}{\operatorname{rms}(x)},\qquad
        y = \hat{x} \odot g .
        $$

        `x: (..., d)` → `rms: (..., 1)` (a reduction over the last dimension, kept for broadcasting) →
        `x_hat: (..., d)` → `y: (..., d)`, same dtype as `x`. $\varepsilon$ sits *inside* the square root so an all-zero
        row gives 0, not a division by zero. Its value is part of the checkpoint's config (`rms_norm_eps`): `1e-5` in
        Llama 2, Llama 3 and Mistral; `1e-6` in the original LLaMA, Qwen2, Qwen3 and DeepSeek-V3, and the default of
        Hugging Face's `LlamaConfig`. Load the value the config gives, never the default.

        **Precision.** fp16's largest finite value is 65504, so $x_i^2$ overflows once $|x_i| > 255.9$, and large
        activations of that size do occur (the "massive activations" of Sun et al., 2024). bf16 has fp32's range but
        only 8 bits of mantissa, so a sum of thousands of squares loses most of its digits. Production code therefore
        computes the statistic in float32 and casts the result back to the input dtype at the end.
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
    """)
    lesson.md(r"""
        ## 3. Exercise `rms_norm`: the forward pass

        Implement $y = x / \sqrt{\operatorname{mean}(x^2) + \varepsilon} \odot g$ over the last dimension, computing
        in float32 whatever the input dtype, and returning the input's dtype. Use `torch.rsqrt`: one instruction on a
        GPU instead of a square root and a division.
    """)
    lesson.exercise(
        "rms_norm",
        r'''
        def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
            """Root-mean-square normalisation over the last dimension.

            x:      (..., d) float32, float16 or bfloat16
            weight: (d,) the learned gain g
            returns (..., d), same dtype as x
            """
            # TODO: compute in at least float32 (what happens to x**2 in fp16 when |x| > 256?);
            #       float64 inputs stay float64 -- torch.promote_types gives exactly that
            # TODO: mean of squares over the last dimension, keeping it for broadcasting: (..., 1)
            # TODO: multiply by rsqrt(mean + eps), scale by the weight, cast back to x's dtype
            ### BEGIN SOLUTION
            compute_dtype = torch.promote_types(x.dtype, torch.float32)  # fp16/bf16 -> fp32, fp64 stays
            xc = x.to(compute_dtype)                                      # (..., d)
            inv_rms = torch.rsqrt(xc.pow(2).mean(dim=-1, keepdim=True) + eps)  # (..., 1)
            return (xc * inv_rms * weight.to(compute_dtype)).to(x.dtype)  # (..., d) in x's dtype
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        The check compares with `F.rms_norm` on float64 inputs (the oracle). In fp16 and bf16 your result may differ
        from the oracle by rounding, but by no more than a small multiple of what `F.rms_norm` itself makes in that
        dtype (the package's one tolerance policy). It also feeds fp16 activations of size ~1000.
    """)
    lesson.md(r"""
        ### What the upcast buys: a picture

        Run the cell below after your `rms_norm` passes. It normalises fp16 rows whose entries grow in size and
        plots the worst error against a float64 reference, for your upcasting version and for one that stays in
        fp16. The naive curve leaves the chart once $x^2$ passes 65504.
    """)
    lesson.code(r"""
        def rms_norm_fp16_naive(x, weight, eps=1e-6):  # the mistake, kept for the picture
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight

        scales = [2.0 ** k for k in range(-2, 10)]
        largest, errors = [], {"float32 upcast (yours)": [], "all in fp16": []}
        weight = torch.ones(512, dtype=torch.float16)
        for scale in scales:
            x = (torch.randn(64, 512, dtype=torch.float64) * scale).half()
            largest.append(x.abs().max().item())
            oracle = F.rms_norm(x.double(), (512,), weight.double(), 1e-6)
            for name, fn in (("float32 upcast (yours)", rms_norm), ("all in fp16", rms_norm_fp16_naive)):
                try:
                    errors[name].append((fn(x, weight).double() - oracle).abs().max().item())
                except NotImplementedError:
                    errors[name].append(float("nan"))  # not attempted yet: no curve
        plt.figure(figsize=(6, 3.5))
        for name, errs in errors.items():
            plt.loglog(largest, errs, marker="o", label=name)
        plt.axvline(65504 ** 0.5, color="grey", ls=":", label="|x| = 256: x² overflows fp16")
        plt.xlabel("largest |x| in the batch"); plt.ylabel("max |error| vs float64")
        plt.title("RMSNorm in fp16: why the statistic is computed in float32"); plt.legend(fontsize=8); plt.tight_layout()
        plt.show()
    """)
    lesson.md(r"""
        ## 4. Exercise `rmsnorm_module`: the layer a checkpoint loads into

        A model file stores one tensor per parameter, named by its path: `model.layers.0.input_layernorm.weight`.
        For your module to load a Hugging Face Llama checkpoint, its `state_dict()` must be exactly `{"weight"}`:
        `eps` is a hyper-parameter, not a tensor. The gain starts at ones, so a fresh layer only normalises.
    """)
    lesson.exercise(
        "rmsnorm_module",
        r'''
        class RMSNorm(nn.Module):
            """RMSNorm layer: state_dict() == {"weight": (hidden_size,)}, like LlamaRMSNorm."""

            def __init__(self, hidden_size: int, eps: float = 1e-6):
                super().__init__()
                # TODO: a learnable gain of shape (hidden_size,), starting at ones; remember eps
                ### BEGIN SOLUTION
                self.weight = nn.Parameter(torch.ones(hidden_size))
                self.eps = eps
                ### END SOLUTION

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                # TODO: reuse your rms_norm with this layer's weight and eps
                ### BEGIN SOLUTION
                return rms_norm(x, self.weight, self.eps)
                ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 5. Exercise `rms_norm_backward`: the gradient by hand

        Fused kernels (Apex, Liger-Kernel, the Triton lesson `p03.rmsnorm`) write the backward pass themselves, so
        derive it once. Write $u = \bar{y} \odot g$ for the incoming gradient $\bar{y} = \partial L/\partial y$ times the
        gain, and $r = 1/\operatorname{rms}(x)$. Since $\partial r/\partial x_j = -r^3 x_j / d$,

        $$
        \frac{\partial L}{\partial x_j} = r\,u_j + \sum_i u_i x_i \frac{\partial r}{\partial x_j}
        = r\Big(u_j - \hat{x}_j \cdot \tfrac{1}{d}\textstyle\sum_i u_i \hat{x}_i\Big),
        \qquad
        \frac{\partial L}{\partial g} = \sum_{\text{rows}} \bar{y} \odot \hat{x}.
        $$

        The first gradient is $r\,u$ with its component along $\hat{x}$ removed: scaling $x$ does not change $y$, so
        the gradient has no component in that direction. `grad_x: (..., d)`, `grad_weight: (d,)` summed over *every*
        leading dimension (batch and sequence). Compute in float32; return each gradient in its input's dtype.
    """)
    lesson.exercise(
        "rms_norm_backward",
        r'''
        def rms_norm_backward(x: torch.Tensor, weight: torch.Tensor, grad_out: torch.Tensor, eps: float = 1e-6):
            """Gradients of y = rms_norm(x, weight, eps) given grad_out = dL/dy.

            x, grad_out: (..., d); weight: (d,)
            returns (grad_x: (..., d) in x.dtype, grad_weight: (d,) in weight.dtype)
            """
            d = x.shape[-1]
            # TODO: flatten the leading dimensions to rows (n, d) and compute in at least float32
            # TODO: r = rsqrt(mean(x**2) + eps) per row, x_hat = x * r, u = grad_out * weight
            # TODO: grad_x = r * (u - x_hat * mean(u * x_hat)); grad_weight = sum over rows of grad_out * x_hat
            ### BEGIN SOLUTION
            compute_dtype = torch.promote_types(x.dtype, torch.float32)
            xc = x.reshape(-1, d).to(compute_dtype)                         # (n, d)
            dy = grad_out.reshape(-1, d).to(compute_dtype)                  # (n, d)
            r = torch.rsqrt(xc.pow(2).mean(dim=-1, keepdim=True) + eps)     # (n, 1)
            x_hat = xc * r                                                   # (n, d)
            u = dy * weight.to(compute_dtype)                                # (n, d)
            grad_x = r * (u - x_hat * (u * x_hat).mean(dim=-1, keepdim=True))  # (n, d)
            grad_weight = (dy * x_hat).sum(dim=0)                            # (d,)
            return grad_x.reshape(x.shape).to(x.dtype), grad_weight.to(weight.dtype)
            ### END SOLUTION
    ''',
    )
    lesson.stop()
    lesson.md(r"""
        ## 6. Reading the solutions

        **`rms_norm`.** `torch.promote_types(x.dtype, torch.float32)` first: fp16 and bf16 compute in float32 (range to
        $3\times10^{38}$, 24-bit mantissa), float64 stays float64. (`x.float()` would quietly *downcast* a float64 input,
        which is why gradcheck in float64 fails on it.) `keepdim=True` keeps the statistic `(..., 1)` so it broadcasts over `d`. `torch.rsqrt` fuses
        the square root and the division. The weight multiplies in float32 and the result is cast back once: one
        rounding to the output dtype.

        **The usual mistakes, and why they are wrong**:
        - *No upcast*: correct in fp32, `inf`/zeros in fp16 once $|x| > 256$. Tests in fp32 alone never see it.
        - *LayerNorm's statistic*: `(x - x.mean()).pow(2).mean()` is the variance; on activations with a non-zero
          mean it gives a different answer.
        - *`eps` outside the root*: `1 / (sqrt(ms) + eps)` matches to 6 digits on ordinary inputs and is far off on
          tiny ones: only a check with small activations and a large `eps` sees it.
        - *Mean over the wrong axis* or over all elements: every row gets the same statistic.
        - *Backward without the projection term*: `grad_x = r * u` passes a "does it run" test but not autograd.

        **Hugging Face's order of operations.** `LlamaRMSNorm` normalises in float32, casts $\hat{x}$ back to the input
        dtype, *then* multiplies by the weight in that dtype: two roundings instead of one. The difference from your
        version is at most about one unit in the last place, which the tolerance policy accepts (it is what
        `LlamaRMSNorm` itself does in bf16). Gemma stores $w = g - 1$ (initialised to zeros) and multiplies by $(1 + w)$,
        in float32 before the cast back; the checkpoint format, not the math, decides which one you must load.

        **Cost.** Forward reads $x$ and $g$ and writes $y$: about $2 \cdot n \cdot d$ elements of traffic for $4nd$ FLOPs,
        an arithmetic intensity far below any GPU's ridge point, so RMSNorm is memory-bound. Eager PyTorch launches a
        kernel per op (cast, square, mean, rsqrt, multiply, multiply, cast), each a round trip through HBM. Fused kernels
        (Apex `FusedRMSNorm`, Liger-Kernel, `torch.compile`, vLLM's `fused_add_rms_norm`, which also adds the residual)
        read $x$ once and write $y$ once. You will write that kernel in Triton in `p03.rmsnorm`, using the backward you
        derived here, where the weight gradient's sum over rows becomes a two-stage reduction.
    """)
    lesson.mistakes()
    return lesson
