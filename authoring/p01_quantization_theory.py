"""Source of 01_Hardware_Math_Systems/13_Quantization_Theory.ipynb (build with `python -m llm_algo build
p01.quantization_theory`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p01.quantization_theory",
        path="01_Hardware_Math_Systems/13_Quantization_Theory.ipynb",
        title_en="Quantization error: bits, clipping and scales",
        title_zh="量化误差：位数、截断与缩放粒度",
        difficulty="medium",
        device="cpu",
        minutes=60,
        prerequisites=["p01.number_formats"],
    )
    lesson.title(
        intro=r"""
        **本节要点**
        - 均匀量化器 (uniform quantizer)：$\hat{x} = s \cdot \text{clamp}(\text{round}(x / s), -q_{\max}, q_{\max})$，
          对称 absmax 缩放 $s = \max|x| / (2^{b-1} - 1)$；步长 $\Delta = s$ 内的舍入误差近似均匀分布，均方误差
          (MSE) $\approx \Delta^2 / 12$。
        - 每多 1 位，$\Delta$ 减半，MSE 降为 1/4：信噪比 (SQNR) 每位提高 $20\log_{10}2 \approx 6.02$ dB。
        - 高斯分布的权重：截断 (clipping) 范围 $\pm\alpha$ 越大，舍入误差越大，截断误差越小；两者之和有最优 $\alpha$，
          截断误差有闭式 $2[(1+\alpha^2)Q(\alpha) - \alpha\varphi(\alpha)]$。
        - 缩放粒度 (granularity)：每张量 (per-tensor) → 每通道 (per-channel) → 每组 (per-group, 如 128)：
          一个离群值 (outlier) 只污染它自己那一行/组的步长。
        - 结果与 PyTorch 的 `torch.fake_quantize_per_*_affine`、数值积分和实测误差比对。
        {易错点}

        A 70B-parameter model is 140 GB in BF16 and 35 GB in 4 bits: quantization (量化) decides whether it fits on
        one GPU, and, since decoding is memory-bound (`p01.kv_cache_math`), how fast it runs. Every 4-bit method you
        will meet (GPTQ, AWQ, bitsandbytes' NF4, llama.cpp's Q4 formats) is a uniform or near-uniform quantizer
        with a choice of *scale* and *granularity*; the choices are judged by the error they leave. This lesson
        derives that error: where the famous "6 dB per bit" comes from, what clipping costs, and why per-group scales
        are worth their overhead.

        **You will implement** symmetric absmax fake quantization (quantize, then dequantize) of a weight matrix with
        per-tensor, per-channel and per-group scales, and the closed-form mean squared error of a clipped uniform
        quantizer on Gaussian data, split into its rounding and clipping parts. **Graded against** PyTorch's
        `torch.fake_quantize_per_tensor_affine` and `torch.fake_quantize_per_channel_affine` (fp32, bf16, fp16;
        2 to 8 bits), a numerical integral in float64, and the error measured on a million Gaussian samples.
    """
    )
    lesson.md(r"""
        ## 1. The uniform quantizer, with shapes

        A $b$-bit signed symmetric quantizer maps a real $x$ to an integer $q \in \{-q_{\max}, \dots, q_{\max}\}$,
        $q_{\max} = 2^{b-1} - 1$ (127 for INT8, 7 for INT4; the code $-2^{b-1}$ is left unused so that the grid is
        symmetric), and back:

        $$
        q = \text{clamp}\big(\text{round}(x / s),\, -q_{\max},\, q_{\max}\big), \qquad \hat{x} = s\, q .
        $$

        The *absmax* scale puts the largest magnitude on the last code: $s = \max |x| / q_{\max}$. Which values
        share one scale is the **granularity**, for a weight $W$ of shape $(\text{out}, \text{in})$:

        | granularity | scales | shape of $s$ | used by |
        | --- | --- | --- | --- |
        | per tensor | one | $()$ | early INT8 inference, activations in many engines |
        | per channel | one per output row | $(\text{out}, 1)$ | LLM.int8() weights (Dettmers et al., arXiv:2208.07339) |
        | per group of $g$ | one per $g$ consecutive inputs of a row | $(\text{out}, \text{in}/g)$ | GPTQ and AWQ ($g = 128$ is their usual setting), NF4 in QLoRA ($g = 64$, Dettmers et al., arXiv:2305.14314) |

        A group's scale costs bits too: an FP16 scale per 128 weights adds $16/128 = 0.125$ bit per weight, so "4-bit
        with group size 128" stores 4.125 bits per weight.

        "Fake" quantization returns $\hat{x}$ in the original dtype: the values a quantized kernel would compute with,
        which is what training with quantization and every error measurement need. PyTorch has it built in
        (`torch.fake_quantize_per_tensor_affine`, `..._per_channel_affine`); here you write it, and those builtins
        grade it.

        ## 2. Exercise `absmax_fake_quantize`

        `w` is a 2-D float tensor (fp32, bf16 or fp16). Compute in float32, return `(w_hat, scales)`: `w_hat` in
        `w`'s dtype and shape, `scales` float32 with the shapes of the table. A row or group that is all zeros has
        nothing to scale: give it scale 1 (its values stay 0) rather than dividing by zero. Refuse (`ValueError`):
        `w` not 2-D, `bits` outside 2..8, an unknown `granularity`, a `group_size` that does not divide the columns.
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt
        import torch
    """)
    lesson.exercise(
        "absmax_fake_quantize",
        r'''
        def absmax_fake_quantize(w: torch.Tensor, bits: int, granularity: str = "tensor",
                                 group_size: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
            """Symmetric absmax quantize-dequantize of w (out, in) to `bits` bits.

            granularity "tensor": scales (); "channel": scales (out, 1); "group": scales (out, in // group_size).
            Returns (w_hat in w.dtype, scales float32)."""
            # TODO: refuse a non-2-D w, bits outside 2..8, an unknown granularity, group_size not dividing in
            # TODO: view w in float32 so that each scale covers the last axis: (1, -1), (out, in) or (out*groups, g)
            # TODO: absmax per scale / q_max (zero -> 1), round, clamp, dequantize, back to w's shape and dtype
            ### BEGIN SOLUTION
            if w.dim() != 2:
                raise ValueError(f"w must be 2-D (out, in), got shape {tuple(w.shape)}")
            if not 2 <= bits <= 8:
                raise ValueError(f"bits must be between 2 and 8, got {bits}")
            rows, cols = w.shape
            if granularity == "tensor":
                blocks = w.float().reshape(1, -1)  # (1, out*in): one scale
            elif granularity == "channel":
                blocks = w.float()  # (out, in): one scale per output row
            elif granularity == "group":
                if group_size < 1 or cols % group_size:
                    raise ValueError(f"group_size={group_size} must divide the {cols} columns")
                blocks = w.float().reshape(rows * (cols // group_size), group_size)  # consecutive inputs of a row
            else:
                raise ValueError(f"granularity must be 'tensor', 'channel' or 'group', not {granularity!r}")
            q_max = 2 ** (bits - 1) - 1
            absmax = blocks.abs().amax(dim=1, keepdim=True)  # (blocks, 1)
            scale = torch.where(absmax > 0, absmax / q_max, torch.ones_like(absmax))  # an all-zero block keeps 1
            q = torch.clamp(torch.round(blocks / scale), -q_max, q_max)  # integers in [-q_max, q_max]
            w_hat = (q * scale).reshape(rows, cols).to(w.dtype)
            if granularity == "tensor":
                return w_hat, scale.reshape(())
            if granularity == "channel":
                return w_hat, scale  # (out, 1)
            return w_hat, scale.reshape(rows, cols // group_size)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### One outlier, three granularities

        LLM.int8() found that from about 6.7B parameters on, a few hidden dimensions carry values far larger than the
        rest (arXiv:2208.07339). Below, a Gaussian weight matrix with one row scaled by 50: with one scale for the
        tensor, every other row is quantized with a step 50 times too coarse.
    """)
    lesson.code(r"""
        def sqnr_db(x, x_hat):
            x, x_hat = x.double(), x_hat.double()
            return 10 * math.log10(float((x**2).sum() / ((x - x_hat) ** 2).sum()))


        torch.manual_seed(0)
        weight = torch.randn(256, 1024)
        weight[17] *= 50  # one outlier row
        bits_range = range(2, 9)
        fig, ax = plt.subplots(figsize=(6.5, 3.4))
        for granularity in ("tensor", "channel", "group"):
            try:
                values = [sqnr_db(weight, absmax_fake_quantize(weight, b, granularity, 128)[0]) for b in bits_range]
                who = "yours"
            except NotImplementedError:  # PyTorch's builtins with absmax scales
                who = "torch.fake_quantize_*"
                values = []
                for b in bits_range:
                    q_max = 2 ** (b - 1) - 1
                    rows = weight.reshape(-1, 128) if granularity == "group" else weight
                    if granularity == "tensor":
                        rows = weight.reshape(1, -1)
                    scale = rows.abs().amax(dim=1) / q_max
                    zero = torch.zeros(len(scale), dtype=torch.int32)
                    w_hat = torch.fake_quantize_per_channel_affine(rows, scale, zero, 0, -q_max, q_max)
                    values.append(sqnr_db(weight, w_hat.reshape(weight.shape)))
            ax.plot(list(bits_range), values, marker="o", label=f"per {granularity} ({who})")
        ax.plot(list(bits_range), [6.02 * b for b in bits_range], "k:", label="6.02 dB x bits")
        ax.set_xlabel("bits"); ax.set_ylabel("SQNR (dB)"); ax.legend(fontsize=8); ax.grid(alpha=0.3)
        ax.set_title("256 x 1024 Gaussian weight, one row x 50")
        plt.tight_layout(); plt.show()
    """)
    lesson.md(r"""
        Per channel and per group climb by about 6 dB per bit, a few dB below the line (section 3 says why). Per
        tensor stalls near 10 dB from 4 to 6 bits: its step, set by the outlier row, is larger than most values of the
        other 255 rows, which round to 0, so the error is simply their power: $10 \log_{10}\frac{255 + 2500}{255}
        \approx 10.3$ dB, whatever the bits, until the step becomes small enough to resolve them.

        ## 3. Where 6 dB per bit comes from

        Inside the clipping range the rounding error $e = \hat{x} - x$ lies in $[-\Delta/2, \Delta/2]$ with
        $\Delta = s$ the step. When $\Delta$ is small against the spread of $x$, $e$ is close to uniform on that
        interval (Bennett, *Spectra of quantized signals*, Bell System Technical Journal, 1948), so

        $$
        \mathbb{E}[e^2] = \frac{1}{\Delta}\int_{-\Delta/2}^{\Delta/2} e^2 \, de = \frac{\Delta^2}{12}.
        $$

        A full-scale uniform signal on $[-A, A]$ quantized with $2^b$ levels has $\Delta = 2A / 2^b$ and power
        $A^2/3$, so $\text{SQNR} = \frac{A^2/3}{\Delta^2/12} = 2^{2b}$, that is $20 \log_{10} 2 \approx 6.02$ dB per
        bit. Each extra bit halves $\Delta$ and quarters the error.

        **Gaussian data** (weights are close to it) has no edge. Take the mid-rise quantizer with $2^b$ levels on
        $[-\alpha, \alpha]$: step $\Delta = 2\alpha / 2^b$, levels at $(j + \tfrac12)\Delta$ for
        $j = -2^{b-1}, \dots, 2^{b-1} - 1$, so the outermost level is $\beta = \alpha - \Delta/2$ and every sample
        beyond $\pm\alpha$ is clipped to $\pm\beta$. It makes two errors. For $x \sim \mathcal{N}(0, 1)$, with
        $\varphi$ the density and $Q(\alpha) = P(X > \alpha) = \tfrac12 \operatorname{erfc}(\alpha / \sqrt{2})$:

        $$
        \text{MSE}(\alpha) \approx \underbrace{\frac{\Delta^2}{12} \, P(|X| \le \alpha)}_{\text{rounding (granular)}}
        + \underbrace{2 \int_{\alpha}^{\infty} (x - \beta)^2 \varphi(x)\, dx}_{\text{clipping}}, \qquad
        \int_{\alpha}^{\infty} (x - \beta)^2 \varphi(x)\, dx = (1 + \beta^2)\, Q(\alpha) + (\alpha - 2\beta)\, \varphi(\alpha).
        $$

        (Expand $(x-\beta)^2$ and use $\int_\alpha^\infty x \varphi = \varphi(\alpha)$ and
        $\int_\alpha^\infty x^2 \varphi = \alpha \varphi(\alpha) + Q(\alpha)$.) The clipping term is exact; the
        rounding term is Bennett's approximation, within 0.5% of the exact error of this quantizer from 2 bits on
        (the checks measure it). A larger $\alpha$ coarsens every step; a smaller one clips more of the tail. The best
        $\alpha$ grows with $b$, and so the Gaussian gains a little *less* than 6.02 dB per bit. Absmax scaling is one
        particular $\alpha$: the largest of $n$ samples, about $\sqrt{2 \ln n}$ standard deviations, which for a
        $4096 \times 4096$ matrix is 5.8σ, far past the optimum at 4 bits: hence clipping and smaller groups.

        ## 4. Exercise `gaussian_quantizer_mse`

        Return `(granular, clipping)` for $x \sim \mathcal{N}(0, 1)$, a quantizer with $2^b$ levels on
        $[-\alpha, \alpha]$, as Python floats. `math.erf`, `math.erfc`, `math.exp` are all you need (Q(α) and φ(α) as above). Refuse
        `bits < 1` and `clip <= 0` (`ValueError`).
    """)
    lesson.exercise(
        "gaussian_quantizer_mse",
        r'''
        def gaussian_quantizer_mse(bits: int, clip: float) -> tuple[float, float]:
            """(rounding MSE, clipping MSE) of a 2**bits-level uniform quantizer on [-clip, clip] for N(0, 1) data."""
            # TODO: refuse bits < 1 and clip <= 0 (ValueError)
            # TODO: the step; the uniform-error model times the probability of landing inside the range
            # TODO: the clipping error in closed form, both tails, clipped to the outermost level clip - step / 2
            ### BEGIN SOLUTION
            if bits < 1 or clip <= 0:
                raise ValueError(f"need bits >= 1 and clip > 0, got bits={bits}, clip={clip}")
            step = 2 * clip / 2**bits
            inside = math.erf(clip / math.sqrt(2))  # P(|X| <= clip)
            granular = step**2 / 12 * inside
            tail = 0.5 * math.erfc(clip / math.sqrt(2))  # Q(clip) = P(X > clip)
            density = math.exp(-clip**2 / 2) / math.sqrt(2 * math.pi)  # phi(clip)
            outer = clip - step / 2  # the outermost level: where clipped samples land
            clipping = 2 * ((1 + outer**2) * tail + (clip - 2 * outer) * density)  # both tails
            return granular, clipping
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### Model against measurement, and the best clipping range

        Left: the two terms and their sum against the error measured on a million Gaussian samples, at 4 bits. Right:
        the SQNR at the best $\alpha$ for each bit width, against the 6.02 dB rule.
    """)
    lesson.code(r"""
        def model(bits, clip):
            try:
                return gaussian_quantizer_mse(bits, clip), "yours"
            except NotImplementedError:
                step = 2 * clip / 2**bits
                tail = 0.5 * math.erfc(clip / math.sqrt(2))
                density = math.exp(-clip**2 / 2) / math.sqrt(2 * math.pi)
                outer = clip - step / 2
                return (step**2 / 12 * math.erf(clip / math.sqrt(2)),
                        2 * ((1 + outer**2) * tail + (clip - 2 * outer) * density)), "formula"


        def measured(samples, bits, clip):
            step = 2 * clip / 2**bits
            levels = torch.clamp(torch.floor(samples / step), -(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
            return float(((levels + 0.5) * step - samples).pow(2).mean())  # mid-rise: 2**bits levels


        torch.manual_seed(0)
        samples = torch.randn(1_000_000, dtype=torch.float64)
        clips = [0.5 + 0.1 * i for i in range(46)]
        fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.6))
        terms = [model(4, c)[0] for c in clips]
        left.plot(clips, [g for g, _ in terms], label="rounding, Δ²/12 · P(|X| ≤ α)")
        left.plot(clips, [c for _, c in terms], label="clipping, closed form")
        left.plot(clips, [g + c for g, c in terms], "k", label=f"sum ({model(4, 1.0)[1]})")
        left.plot(clips[::3], [measured(samples, 4, c) for c in clips[::3]], "o", color="C3", label="measured, 10⁶ samples")
        left.set_yscale("log"); left.set_xlabel("clipping range α (σ)"); left.set_ylabel("MSE (σ²)")
        left.set_title("4-bit uniform quantizer, N(0, 1) data"); left.legend(fontsize=8)
        best = []
        for bits in range(2, 9):
            grid = [0.5 + 0.01 * i for i in range(700)]
            mse, alpha = min((sum(model(bits, c)[0]), c) for c in grid)
            best.append((bits, alpha, 10 * math.log10(1 / mse)))
            print(f"{bits} bits: best clip {alpha:.2f} sigma, SQNR {10 * math.log10(1 / mse):5.2f} dB")
        right.plot([b for b, _, _ in best], [s for _, _, s in best], marker="o", label="Gaussian, best α")
        right.plot([b for b, _, _ in best], [6.02 * b for b, _, _ in best], "k:", label="6.02 dB x bits (uniform data)")
        right.set_xlabel("bits"); right.set_ylabel("SQNR (dB)"); right.legend(fontsize=8); right.grid(alpha=0.3)
        plt.tight_layout(); plt.show()
    """)
    lesson.stop()
    lesson.md(r"""
        The best clipping ranges printed above, 1.99σ, 2.34σ and 2.68σ for 2, 3 and 4 bits, are the optimal uniform
        step sizes that Max tabulated for Gaussian data (0.996σ, 0.586σ, 0.335σ for 4, 8 and 16 levels; J. Max,
        *Quantizing for minimum distortion*, IRE Transactions on Information Theory, 1960) times $2^{b-1}$. The
        Gaussian gains 5.0 to 5.4 dB per bit there, not 6.02: part of each new bit goes into widening the range.

        ## 5. Reading the solutions

        **`absmax_fake_quantize`.** One trick carries the three granularities: reshape so that every scale covers one
        row of a 2-D view (`(1, out·in)`, `(out, in)`, `(out·in/g, g)`), take `amax(dim=1)`, and the rest is the same
        code. Groups are *consecutive inputs of a row*, which is what `reshape` gives for a row-major `(out, in)`
        tensor. The usual mistakes: *$q_{\max} = 2^{b-1}$* (128 for INT8: the absmax lands on a code that
        does not exist, and is clamped to 127), *`trunc` or `floor` instead of `round`* (a biased error, four times the
        MSE), *the per-channel max over the wrong axis* (one scale per input column), *no guard for an all-zero
        group* (0/0: NaN everywhere in that group), and *returning float32* for a bf16 weight. `torch.round` rounds
        half to even, as the builtins do.

        **`gaussian_quantizer_mse`.** The mistakes: *$2^b - 1$ intervals* (a mid-tread grid: a different quantizer,
        and the 6 dB ratio between bit widths is lost), *the rounding term without $P(|X| \le \alpha)$* (it counts
        rounding noise for samples that were clipped), *one tail only*, *clipping to $\alpha$* instead of the outermost level $\beta$ (the textbook shortcut:
        23% too little error at 4 bits, $\alpha = 2$) and *$\beta^2 Q(\alpha)$ without the $+1$*. Cost: a handful of `erf` calls.

        **What production does.** Weight-only methods keep per-group scales ($g$ = 128 in GPTQ and AWQ; 32 in
        llama.cpp's Q4_0 blocks; 64 in NF4) and improve the *values* (GPTQ corrects the rounding error of one column
        on the next using second-order information, arXiv:2210.17323; AWQ scales salient channels before rounding,
        arXiv:2306.00978). NF4 replaces the uniform grid by the quantiles of a Gaussian (QLoRA), the grid that is
        optimal for Gaussian data in the sense of equal probability per level. FP8 (`p01.number_formats`) is a
        non-uniform grid too: its relative error is roughly constant, so it needs a per-tensor scale only to fit the
        range. Activation quantization faces outliers that cannot be grouped away offline: LLM.int8() keeps outlier
        columns in FP16, SmoothQuant moves them into the weights (arXiv:2211.10438).
    """)
    lesson.mistakes()
    return lesson
