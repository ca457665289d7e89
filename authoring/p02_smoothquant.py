"""Source of 02_PyTorch_Algorithms/37_SmoothQuant.ipynb (build with `python -m llm_algo build p02.smoothquant`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p02.smoothquant",
        path="02_PyTorch_Algorithms/37_SmoothQuant.ipynb",
        title_en="SmoothQuant: activation outliers and W8A8",
        title_zh="SmoothQuant：激活离群值与 W8A8 量化",
        difficulty="medium",
        device="cpu",
        minutes=70,
        prerequisites=["p02.quant_w8a16"],
    )
    lesson.title(
        intro=r"""
        **本节要点**
        - W8A8：权重和激活都量化为 int8，矩阵乘用 int8 张量核心 (tensor core)、int32 累加，比 W8A16 再快一截。
        - 难点在激活：少数通道 (channel) 的幅值比其余大几十倍（离群值 outliers），而且总是同一批通道。
          逐 token 量化时，一个离群通道就决定了整行的缩放因子，其余通道只剩几个量化级。
        - 权重容易量化、激活难量化 → 把难度从激活"迁移"到权重：$Y = (X\,\mathrm{diag}(s)^{-1})(\mathrm{diag}(s)\,W^\top)$，
          数学上完全等价。
        - 平滑因子 (smoothing factor)：$s_j = \max|X_j|^{\alpha} / \max|W_{:,j}|^{1-\alpha}$，迁移强度 $\alpha$ 通常取 0.5。
        - $1/s$ 折叠进前一层的 LayerNorm/RMSNorm 权重，$s$ 乘进线性层的权重列：推理时零额外开销。
        - 本节在一个离群值很重的层上量化验证：平滑后 W8A8 的输出误差至少降低一半。
        {易错点}

        Weight-only quantisation (`p02.quant_w8a16`) shrinks the bytes but still multiplies in 16 bits. For
        compute-bound work (prefill, large batches) the win is in the multiply itself: an H100 SXM does 1979 dense
        int8 TOPS against 989 dense bf16 TFLOPS (NVIDIA H100 datasheet). That needs the *activations* in int8 too,
        and activations are hard: from about 6.7B parameters, LLMs develop a few hidden *feature dimensions* whose
        values are far larger than all others, in most layers and for most tokens (Dettmers et al., 2022, LLM.int8(),
        arXiv:2208.07339). Quantise such a token to int8 with one scale and the outlier takes the whole range; the
        ordinary channels are left with a handful of levels. SmoothQuant (Xiao et al., 2022, arXiv:2211.10438)
        observes that the outliers sit in fixed *channels*, divides those channels down and multiplies the matching
        weight columns up, an exact identity, and reports W8A8 with negligible accuracy loss on OPT-175B, BLOOM-176B
        and GLM-130B, with up to 1.56× speed-up and 2× less memory.

        **You will implement** per-channel activation statistics over calibration batches, the smoothing factors for
        a migration strength $\alpha$, their folding into a norm layer and the linear layers after it, and a W8A8
        linear layer (int8 per-token activations, int8 per-channel weights, integer accumulation). **Graded against**
        the paper's formulas in float64, the exact equivalence of the smoothed block, closed forms for $\alpha = 0$,
        $\tfrac12$ and $1$, a float64 specification of W8A8, and an outlier-heavy layer where smoothing must cut the
        W8A8 error at least in half.
    """
    )
    lesson.md(r"""
        ## 1. Why activations are the hard part

        Take one token $x \in \mathbb{R}^K$ quantised symmetrically to int8 with one scale
        $s_x = \max_j |x_j| / 127$ (per-token, dynamic: computed on the fly for every token). Each entry is rounded
        with an error of at most $s_x / 2$. If one channel holds $|x_o| = 60$ while the others are of size 1, then
        $s_x \approx 0.47$: every ordinary entry is rounded to a multiple of 0.47, i.e. to $\{-2, \ldots, 2\}$ levels.
        The relative error of the ordinary channels is tens of percent, whatever the weights do.

        Weights have no such structure: their per-output-channel ranges are narrow, and int8 per-channel weights are
        nearly lossless (`p02.quant_w8a16`). So move the difficulty. For a linear layer $Y = X W^\top$
        ($X$: $(T, K)$ tokens × input channels; $W$: $(N, K)$ as in `nn.Linear`) and any positive $s \in \mathbb{R}^K$:

        $$
        Y = \left(X\, \mathrm{diag}(s)^{-1}\right) \left(W\, \mathrm{diag}(s)\right)^\top
        = \hat X \hat W^\top, \qquad \hat X_{:,j} = X_{:,j} / s_j, \quad \hat W_{:,j} = W_{:,j}\, s_j .
        $$

        ## 2. The smoothing factor

        SmoothQuant chooses, per input channel $j$, from calibration statistics
        $a_j = \max_t |X_{t,j}|$ (over all calibration tokens) and $b_j = \max_n |W_{n,j}|$ (over the output channels):

        $$
        s_j = \frac{a_j^{\alpha}}{b_j^{\,1-\alpha}}, \qquad \alpha \in [0, 1] \text{ (the migration strength)} .
        $$

        After smoothing, channel $j$'s activations peak at $a_j / s_j = a_j^{1-\alpha} b_j^{1-\alpha}$ and its weights
        at $b_j s_j = a_j^{\alpha} b_j^{\alpha}$. With $\alpha = \tfrac12$ both peak at $\sqrt{a_j b_j}$: the
        difficulty is split evenly. $\alpha = 0$ leaves the activations' range as it was, divided by $b_j$ ($s = 1/b$);
        $\alpha = 1$ flattens the activations entirely (every channel peaks at 1) and puts all of their range into the
        weights. The paper uses 0.5 for OPT and BLOOM and a larger value (0.75) for GLM-130B, whose outliers are
        stronger. To stay finite, clamp $a_j$ and $b_j$ below at $10^{-5}$ (a channel that is always 0).

        ## 3. Folding: no extra work at inference

        Dividing $X$ by $s$ at run time would cost a pass over the activations. But in a transformer the input of
        `q_proj`/`k_proj`/`v_proj` (and of `gate_proj`/`up_proj`) is the output of a norm layer,
        $X = \gamma \odot \hat{x} + \beta$ per token. Divide $\gamma$ and $\beta$ by $s$ once and the norm emits
        $X / s$ directly. All linear layers that read the same norm's output share one $s$, computed from the
        largest of their weight columns: $b_j = \max_{\text{layers}} \max_n |W_{n,j}|$.

        ## 4. W8A8

        The smoothed layer runs in integers. Weights: per output channel, symmetric, $q_W = \mathrm{round}(W / s_W)$
        with $s_W = \max_k |W_{n,k}| / 127$, shape $(N, 1)$. Activations: per token, $q_X = \mathrm{round}(X / s_X)$,
        $s_X$ of shape $(T, 1)$. Then

        $$
        Y_{t,n} \approx s_{X,t}\; s_{W,n} \sum_k q_{X,t,k}\, q_{W,n,k} + \text{bias}_n ,
        $$

        an int8 × int8 product summed exactly in int32 ($K \cdot 127^2 < 2^{31}$ for $K$ up to $1.3 \times 10^5$),
        then one float multiply per output: the scales factor out of the sum because they are constant along $k$.
        That is why the activation scale can be per *token* but not per *channel*: a per-channel activation scale
        would sit inside the sum. The outliers live in channels; smoothing is how to get a per-channel effect anyway.
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt
        import torch
        import torch.nn as nn
        import torch.nn.functional as F


        def quantize_int8_per_channel(w: torch.Tensor):
            # Symmetric int8 per output channel (p02.quant_w8a16): codes (N, K) int8, scales (N, 1) float32.
            scale = w.float().abs().amax(dim=1, keepdim=True) / 127
            scale = torch.where(scale > 0, scale, torch.ones_like(scale))
            return torch.clamp(torch.round(w.float() / scale), -127, 127).to(torch.int8), scale
    """)
    lesson.md(r"""
        ## 5. Exercise `act_stats`: per-channel maxima over calibration batches

        `channel_absmax(batches)` takes an iterable of activation tensors, each `(..., K)` (any floating dtype, any
        leading shape: `(B, T, K)` from a forward hook), and returns $a$: `(K,)` float32, the largest $|x|$ of each
        channel over every token of every batch. Refuse (`ValueError`) an empty iterable and batches whose last
        dimensions differ.
    """)
    lesson.exercise(
        "act_stats",
        r'''
        def channel_absmax(batches) -> torch.Tensor:
            """max over all tokens of all batches of |x[..., j]|, for each channel j: (K,) float32."""
            # TODO: keep a running (K,) maximum; refuse no batches, or batches with different K
            ### BEGIN SOLUTION
            running = None
            for x in batches:
                batch_max = x.detach().abs().reshape(-1, x.shape[-1]).amax(dim=0).float()  # (K,)
                if running is None:
                    running = batch_max
                elif batch_max.shape != running.shape:
                    raise ValueError(f"batches have {running.shape[0]} and {batch_max.shape[0]} channels")
                else:
                    running = torch.maximum(running, batch_max)
            if running is None:
                raise ValueError("channel_absmax needs at least one batch")
            return running
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 6. Exercise `smoothing`: the factors, and folding them in

        `smoothing_factors(act_absmax, weights, alpha)` returns $s$ `(K,)` float32 from $a$ `(K,)` and a list of
        weight matrices `(N_i, K)` that read the same input ($b_j$ is the largest $|W_{n,j}|$ over all of them).
        Clamp $a$ and $b$ at `min=1e-5`. Refuse (`ValueError`) `alpha` outside $[0, 1]$ and a weight whose second
        dimension is not $K$.

        `apply_smoothing(norm, linears, s)` modifies the modules in place, under `torch.no_grad()`: the norm's
        `weight` (and `bias`, when it has one: `nn.LayerNorm` does, an RMSNorm does not) divided by $s$, each
        linear's weight columns multiplied by $s$. The block `norm → linear` must compute the same function
        afterwards.
    """)
    lesson.exercise(
        "smoothing",
        r'''
        def smoothing_factors(act_absmax: torch.Tensor, weights: list, alpha: float = 0.5) -> torch.Tensor:
            """s_j = a_j**alpha / b_j**(1 - alpha), b_j = max |W[:, j]| over all weights; (K,) float32."""
            # TODO: validate alpha and the weights' shapes; clamp a and b at 1e-5; the formula
            ### BEGIN SOLUTION
            if not 0.0 <= alpha <= 1.0:
                raise ValueError(f"alpha must lie in [0, 1], got {alpha}")
            K = act_absmax.shape[0]
            if any(w.dim() != 2 or w.shape[1] != K for w in weights):
                raise ValueError(f"every weight must be (N, {K}), got {[tuple(w.shape) for w in weights]}")
            a = act_absmax.float().clamp(min=1e-5)  # (K,)
            b = torch.stack([w.detach().float().abs().amax(dim=0) for w in weights]).amax(dim=0).clamp(min=1e-5)
            return a.pow(alpha) / b.pow(1 - alpha)
            ### END SOLUTION


        @torch.no_grad()
        def apply_smoothing(norm: nn.Module, linears: list, s: torch.Tensor) -> None:
            """Fold 1/s into norm (weight, and bias if any) and s into the input columns of each linear, in place."""
            # TODO: divide the norm's weight (and bias) by s; multiply each linear's weight columns by s
            ### BEGIN SOLUTION
            norm.weight.div_(s.to(norm.weight.dtype))
            if getattr(norm, "bias", None) is not None:
                norm.bias.div_(s.to(norm.bias.dtype))
            for linear in linears:
                linear.weight.mul_(s.to(linear.weight.dtype)[None, :])  # (N, K) * (1, K): column j times s_j
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 7. Exercise `w8a8`: integers in, floats out

        `quantize_per_token(x)` returns `(q, scale)`: `q` int8 with `x`'s shape, `scale` float32 of shape
        `(..., 1)`, symmetric with $q_{\max} = 127$ and scale 1 for an all-zero token. `w8a8_linear(x, q_w, w_scale,
        bias)` quantises `x` `(..., K)` per token, multiplies the codes in integers (int32 accumulation: cast the
        codes to `torch.int32` and use `@`, which runs exact integer arithmetic on the CPU), applies both scales and
        the bias (float32, or `None`), and returns `(..., N)` in `x.dtype`. Refuse (`ValueError`) a `q_w` whose second
        dimension is not `x`'s last. `torch._int_mm` and `torch.ao` are off limits.
    """)
    lesson.exercise(
        "w8a8",
        r'''
        def quantize_per_token(x: torch.Tensor):
            """Symmetric int8 per token (last axis): q (..., K) int8, scale (..., 1) float32."""
            # TODO: absmax over the last axis / 127 (1 where the token is all zeros); round; clamp to [-127, 127]
            ### BEGIN SOLUTION
            x = x.float()
            scale = x.abs().amax(dim=-1, keepdim=True) / 127  # (..., 1)
            scale = torch.where(scale > 0, scale, torch.ones_like(scale))
            return torch.clamp(torch.round(x / scale), -127, 127).to(torch.int8), scale
            ### END SOLUTION


        def w8a8_linear(x: torch.Tensor, q_w: torch.Tensor, w_scale: torch.Tensor, bias: torch.Tensor | None = None):
            """x (..., K) float; q_w (N, K) int8, w_scale (N, 1) float32 -> (..., N) in x.dtype."""
            # TODO: refuse q_w whose K differs from x's; quantise x per token
            # TODO: integer matmul (int32), then multiply by the token scales and the channel scales, add the bias
            ### BEGIN SOLUTION
            if q_w.shape[1] != x.shape[-1]:
                raise ValueError(f"q_w has {q_w.shape[1]} input channels, x has {x.shape[-1]}")
            q_x, x_scale = quantize_per_token(x)  # (..., K) int8, (..., 1)
            acc = q_x.to(torch.int32) @ q_w.to(torch.int32).T  # (..., N) int32, exact
            y = acc.float() * x_scale * w_scale.float().reshape(-1)  # (..., N): per-token and per-channel scales
            if bias is not None:
                y = y + bias.float()
            return y.to(x.dtype)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### Smoothing an outlier-heavy block: a picture

        A LayerNorm feeding a linear layer, with four hidden channels whose LayerNorm gain is 40 times the others
        (this is how outlier features look in OPT and BLOOM: fixed channels, large for nearly every token). Left:
        the per-channel activation maxima before and after smoothing with $\alpha = 0.5$, and the weights' per-column
        maxima after it. Right: the W8A8 output error relative to the float layer, against $\alpha$.
    """)
    lesson.code(r"""
        torch.manual_seed(0)
        K, N, T = 128, 64, 256
        outliers = torch.randperm(K)[:4]

        def make_block():
            torch.manual_seed(1)
            norm, linear = nn.LayerNorm(K), nn.Linear(K, N)
            with torch.no_grad():
                norm.weight.uniform_(0.5, 1.5)
                norm.weight[outliers] *= 40.0
                norm.bias.normal_(0.0, 0.1)
            return norm, linear

        hidden = torch.randn(4, T, K)
        norm, linear = make_block()
        y_float = linear(norm(hidden)).detach()

        def w8a8_error(norm, linear):
            q_w, w_scale = quantize_int8_per_channel(linear.weight.detach())
            y = w8a8_linear(norm(hidden).detach(), q_w, w_scale, linear.bias.detach())
            return ((y - y_float).norm() / y_float.norm()).item()

        try:
            a_before = channel_absmax([norm(hidden)])
            alphas = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
            errors = []
            for alpha in alphas:
                n_block, l_block = make_block()
                s = smoothing_factors(channel_absmax([n_block(hidden)]), [l_block.weight], alpha)
                apply_smoothing(n_block, [l_block], s)
                errors.append(w8a8_error(n_block, l_block))
            n_block, l_block = make_block()
            s = smoothing_factors(a_before, [l_block.weight], 0.5)
            apply_smoothing(n_block, [l_block], s)
            a_after = channel_absmax([n_block(hidden)])
            fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.4))
            ax1.plot(a_before.numpy(), lw=0.8, label="activations, before")
            ax1.plot(a_after.numpy(), lw=0.8, label="activations, after (α = 0.5)")
            ax1.plot(l_block.weight.detach().abs().amax(0).numpy(), lw=0.8, label="weights, after")
            ax1.set_yscale("log"); ax1.set_xlabel("input channel j"); ax1.set_ylabel("max |·|"); ax1.legend(fontsize=7)
            ax2.plot(alphas, errors, marker="o")
            ax2.axhline(w8a8_error(norm, linear), color="k", ls="--", label="no smoothing")
            ax2.set_xlabel("migration strength α"); ax2.set_ylabel("‖Y_w8a8 − Y‖ / ‖Y‖"); ax2.set_yscale("log")
            ax2.legend(fontsize=7); fig.tight_layout(); plt.show()
            print(f"W8A8 error without smoothing {w8a8_error(norm, linear):.4f}; with α = 0.5 {errors[5]:.4f}")
        except NotImplementedError:
            print("write channel_absmax, smoothing_factors, apply_smoothing and w8a8_linear to see the figure")
    """)
    lesson.md(r"""
        On the left, the orange curve (activations after smoothing) hides under the green one (weights after): at
        $\alpha = \tfrac12$ both peak at $\sqrt{a_j b_j}$, and the 40-fold outliers are down to about 6-fold. On the
        right, $\alpha = 0.5$ cuts the W8A8 error about 3.5 times on this block (the printed numbers).
        The error against $\alpha$ is U-shaped: small $\alpha$ leaves the activation outliers in place, large
        $\alpha$ moves them into the weight columns, where they now spoil the per-channel weight scales. The bottom is
        broad, which is why one value (0.5) works across most models. AWQ, for 4-bit weights, instead searches a similar
        exponent per layer on a grid between 0 and 1, measuring the layer's output error at each point.
    """)
    lesson.stop()
    lesson.md(r"""
        ## 8. Reading the solutions

        **`channel_absmax`.** A running maximum is all the state calibration needs: one `(K,)` vector per linear
        input, collected by a forward hook over a few hundred sequences (SmoothQuant's `get_act_scales` uses 512
        samples of the Pile). The reshape to `(-1, K)` treats every leading index as a token.

        **`smoothing_factors`.** The clamps keep a dead channel ($a_j = 0$) or a zero weight column from producing
        $0$ or $\infty$. Several linear layers that read the same norm (q, k, v) must share one $s$, because the norm
        can only emit one $X/s$; their column maxima are combined by a maximum.

        **`apply_smoothing`.** Division on the norm, multiplication on the weights' *columns* (`[None, :]`), both
        in place under `no_grad`. The block's function is unchanged up to rounding; only the ranges moved.

        **`w8a8_linear`.** The two scales come out of the integer sum because each is constant along $k$: the
        token scale per row of the output, the channel scale per column. Everything inside the sum is exact.

        **The usual mistakes, and why they are wrong**:
        - $\alpha$ on the wrong side ($a^{1-\alpha}/b^{\alpha}$), $b$ taken over the wrong axis (per output row
          instead of per input column), no clamp (a dead channel gives $s = 0$ and then NaN).
        - Folding the wrong way: multiplying the norm by $s$, scaling the weight *rows*, forgetting the norm's bias.
        - Per-tensor instead of per-token activation scales; the scales applied on the wrong axis; the bias added
          before the scales; the codes multiplied in float32 instead of int32 (exact only while every partial sum
          stays below $2^{24}$: $K = 2048$ codes near 127 reach $3 \cdot 10^7$, and the checks compare with the int64 sum);
          the result not cast back to `x.dtype`.

        **Cost.** Calibration: one forward pass over the calibration set. Smoothing: $O(K)$ per norm and $O(NK)$ per
        linear, once. At inference: nothing; W8A8 kernels then run at int8 tensor-core speed, twice bf16's peak.

        **In production.** SmoothQuant's reference code (`smoothquant/smooth.py`) does exactly this fold for OPT,
        BLOOM and Llama blocks; `llm-compressor` ships it as `SmoothQuantModifier` before a GPTQ or round-to-nearest
        W8A8 pass; TensorRT-LLM and vLLM run the W8A8 results with per-token dynamic activation scales and per-channel
        weight scales, as here. FP8 (E4M3) W8A8 on Hopper has the same outlier problem in a milder form and uses the
        same per-token/per-channel scaling. AWQ applies the same identity to *weight-only* quantisation: it scales up
        the weight columns that meet large activations so that their rounding error matters less.
    """)
    lesson.mistakes()
    return lesson
