"""Source of 00_Prerequisites/11_Normalization.ipynb (build with `python -m llm_algo build p00.normalization`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p00.normalization",
        path="00_Prerequisites/11_Normalization.ipynb",
        title_en="LayerNorm and BatchNorm",
        title_zh="层归一化与批归一化",
        difficulty="medium",
        device="cpu",
        minutes=45,
        prerequisites=["p00.module_basics", "p00.optim_and_loss"],
    )
    lesson.title(
        intro=r"""
        Every transformer block normalises its input twice: GPT-2 (124M) has 25 LayerNorms (two per block for 12
        blocks, plus the final `ln_f`), Llama-3-8B has 65 RMSNorms (two per block for 32 blocks, plus the final
        `norm`). Without them the residual stream's scale drifts from layer to layer and training diverges. Vision
        models normalised with BatchNorm instead (Ioffe and Szegedy, 2015), which averages over the *batch*; no
        LLM does, and after this lesson you will know why from its code: it mixes the sequences of a batch, it
        behaves differently in training and in inference, and in a causal model it lets a token see the future.

        **You will implement** `layer_norm` (the function behind `nn.LayerNorm`) and a `BatchNorm1d` module with
        running statistics, train and eval modes, and a `state_dict` that `nn.BatchNorm1d` can load. **Graded
        against** `F.layer_norm` and `nn.BatchNorm1d` (float64 oracles, the builtins in the tested dtype as
        baselines), step for step through training and evaluation, and `gradcheck`.

        **本节要点**
        - LayerNorm 对每个 token 的最后一维（特征维 d）单独求均值和方差：`y = (x − μ) / sqrt(σ² + eps) · γ + β`，方差是有偏的（除以 d）。
        - 先减均值再平方（两遍法）；`E[x²] − E[x]²` 在 float32 中对偏移大的输入会严重抵消，甚至得到负方差。
        - `eps` 在开方之内；fp16/bf16 输入在 float32 中计算，再转回输入的 dtype。
        - BatchNorm 对每个通道沿 batch（和长度）维求统计量；训练时用当前 batch 的有偏方差归一化，但 running_var 用无偏方差更新：`r ← (1 − m)·r + m·s`，m = 0.1。
        - 推理（eval）时用 running_mean/running_var，结果与 batch 里的其他样本无关；训练时每个样本的输出依赖同 batch 的其他样本。
        - running 统计量是 buffer（不是参数），更新时不能带梯度（`torch.no_grad()`）。
        - LLM 用 LayerNorm/RMSNorm：变长序列与 padding、batch=1 的自回归解码、以及因果模型中 batch 统计量泄露未来 token 的信息，都让 BatchNorm 不适用。
        {易错点}
        """
    )
    lesson.md(r"""
        ## 1. Two ways to average one activation tensor

        A transformer's hidden states are `h (B, T, d)`: `B` sequences, `T` tokens each, `d` features per token
        (GPT-2 small: $d = 768$). Both normalisations subtract a mean and divide by a standard deviation, then
        apply a learned per-feature scale $\gamma$ (`weight`, `(d,)`) and shift $\beta$ (`bias`, `(d,)`). They differ
        only in **which elements share a mean**:

        | | averages over | statistics shape | one token's output depends on |
        | --- | --- | --- | --- |
        | LayerNorm (Ba et al., 2016) | the `d` features of one token | `(B, T, 1)` | that token only |
        | BatchNorm (Ioffe and Szegedy, 2015) | the `B·T` tokens of the batch, per feature | `(1, 1, d)` (`(d,)`) | every token of the batch |

        **LayerNorm.** For one token $x \in \mathbb{R}^d$:

        $$
        \mu = \frac1d \sum_{i=1}^{d} x_i, \qquad
        \sigma^2 = \frac1d \sum_{i=1}^{d} (x_i - \mu)^2, \qquad
        y_i = \frac{x_i - \mu}{\sqrt{\sigma^2 + \varepsilon}}\,\gamma_i + \beta_i .
        $$

        The variance is the *biased* one (divide by $d$, not $d - 1$), and $\varepsilon$ (`1e-5` in GPT-2 and in
        `nn.LayerNorm`) is inside the square root, so a constant token (σ² = 0) gives $y = \beta$ instead of 0/0.
        RMSNorm (Zhang and Sennrich, 2019; used by Llama, Qwen, Mistral) drops the mean and $\beta$:
        $y = x / \sqrt{\overline{x^2} + \varepsilon}\,\gamma$, one reduction instead of two; the authors report it
        cuts running time by 7% to 64% across their models at the same quality. You build it in
        [p02.rmsnorm](../02_PyTorch_Algorithms/02_RMSNorm.ipynb).

        **Two passes, not one.** The identity $\sigma^2 = \overline{x^2} - \mu^2$ is exact in real numbers and wrong in
        float32: for features around 1000 with spread 1, $\overline{x^2} \approx 10^6$ carries an absolute
        rounding error of about $10^6 \cdot 2^{-24} \approx 0.06$, six percent of the variance you want, and for a
        nearly constant token it can come out *negative* (then `rsqrt` gives `nan`). Subtract the mean first, then
        square. Residual streams do carry such offsets: a few "massive activation" features reach thousands in
        Llama-2 and other LLMs (Sun et al., 2024, *Massive Activations in Large Language Models*).

        **Low precision.** For fp16/bf16 inputs compute in float32 and cast the result back; that is what
        PyTorch's kernels do, and a sum of 768 fp16 values in fp16 loses digits.

        **BatchNorm.** For `x (N, C)` or `x (N, C, L)` (BatchNorm1d's layouts: `C` channels = features), each
        channel $c$ is averaged over all its $n = N$ (or $N \cdot L$) values:

        $$
        \mu_c = \frac1n \sum x_{\cdot c \cdot}, \qquad
        s^2_c = \frac1n \sum (x_{\cdot c \cdot} - \mu_c)^2, \qquad
        y = \frac{x - \mu_c}{\sqrt{s^2_c + \varepsilon}}\,\gamma_c + \beta_c \quad \text{(training)} .
        $$

        At inference the batch may be a single example, so BatchNorm keeps exponential moving averages in two
        **buffers** (state that is saved but not trained, see [p00.module_basics](07_Module_Basics.ipynb)) and uses
        them instead:

        $$
        r_\mu \leftarrow (1 - m)\, r_\mu + m\, \mu, \qquad
        r_{\sigma^2} \leftarrow (1 - m)\, r_{\sigma^2} + m\, \frac{n}{n - 1} s^2, \qquad
        y = \frac{x - r_\mu}{\sqrt{r_{\sigma^2} + \varepsilon}}\,\gamma + \beta \quad \text{(eval)} ,
        $$

        with momentum $m = 0.1$, $r_\mu = 0$ and $r_{\sigma^2} = 1$ at the start, and a counter
        `num_batches_tracked`. Note the two variances: the batch is normalised with the biased $s^2$, the running
        average gets the *unbiased* $\frac{n}{n-1}s^2$ (PyTorch's documented behaviour). Training with
        $n = 1$ is refused: one value has no variance.
    """)
    lesson.setup(r"""
        import matplotlib.pyplot as plt
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
    """)
    lesson.md(r"""
        ## 2. Exercise `layer_norm`

        `layer_norm(x, weight, bias, eps)` normalises over the last dimension of `x (..., d)`; `weight` and `bias`
        are `(d,)` or `None` (no affine). Compute in at least float32 and return `x`'s dtype; keep it
        differentiable (tensor operations only). Refuse a `weight` or `bias` whose shape is not `(d,)` with
        `ValueError`. `F.layer_norm`, `torch.layer_norm` and `nn.LayerNorm` are forbidden (they are the reference);
        `mean`, `rsqrt` and `sqrt` are fine.

        The likely mistakes: `x.var()` (unbiased by default: divides by $d - 1$), `eps` added after the square root,
        the one-pass variance, a mean over the wrong dimension (`dim=0` is the batch: that is BatchNorm).
    """)
    lesson.exercise(
        "layer_norm",
        r'''
        def layer_norm(
            x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float = 1e-5
        ) -> torch.Tensor:
            """x: (..., d) any float dtype; weight, bias: (d,) or None -> (..., d) in x's dtype"""
            # TODO: refuse weight or bias whose shape is not (d,) with ValueError
            # TODO: upcast to at least float32
            # TODO: mean and biased variance over the last dim (keepdim=True), two passes
            # TODO: normalise with rsqrt(var + eps), then scale and shift if given; cast back
            ### BEGIN SOLUTION
            d = x.shape[-1]
            for name, param in (("weight", weight), ("bias", bias)):
                if param is not None and param.shape != (d,):
                    raise ValueError(f"{name} must have shape ({d},) for x {tuple(x.shape)}, got {tuple(param.shape)}")
            xf = x.to(torch.promote_types(x.dtype, torch.float32))  # (..., d)
            mean = xf.mean(dim=-1, keepdim=True)  # (..., 1)
            centred = xf - mean  # (..., d)
            var = (centred * centred).mean(dim=-1, keepdim=True)  # (..., 1), biased: divide by d
            y = centred * torch.rsqrt(var + eps)  # (..., d)
            if weight is not None:
                y = y * weight
            if bias is not None:
                y = y + bias
            return y.to(x.dtype)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 3. Exercise `batch_norm`

        A `BatchNorm1d(num_features, eps=1e-5, momentum=0.1)` module, equal to `nn.BatchNorm1d` (with its defaults
        `affine=True`, `track_running_stats=True`):

        - parameters `weight` (ones) and `bias` (zeros), `(C,)`;
        - buffers `running_mean` (zeros, `(C,)`), `running_var` (ones, `(C,)`) and `num_batches_tracked` (a 0-d int64
          zero), with exactly these names, so that `load_state_dict` accepts an `nn.BatchNorm1d` checkpoint;
        - `forward(x)` for `x (N, C)` or `(N, C, L)`: in training mode (`self.training`) normalise with the batch's
          statistics and update the buffers as in section 1, **without recording gradients** for the update
          (`torch.no_grad()`); in eval mode normalise with the running statistics and change nothing.
        - Refuse with `ValueError`: an input that is not 2-D or 3-D, a channel axis (axis 1) that is not `C`, and a
          training batch with one value per channel.

        `F.batch_norm`, `torch.batch_norm` and `nn.BatchNorm1d` are forbidden (they are the reference). Work in the
        input's dtype; the checks use float32 and float64 (`module.double()` converts parameters and float
        buffers, not the int64 counter).
    """)
    lesson.exercise(
        "batch_norm",
        r'''
        class BatchNorm1d(nn.Module):
            """BatchNorm over (N, C) or (N, C, L) with running statistics, equal to nn.BatchNorm1d."""

            def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1):
                super().__init__()
                self.num_features, self.eps, self.momentum = num_features, eps, momentum
                # TODO: parameters weight (ones) and bias (zeros), (C,)
                # TODO: buffers running_mean (zeros), running_var (ones), num_batches_tracked (0-d int64 zero)
                ### BEGIN SOLUTION
                self.weight = nn.Parameter(torch.ones(num_features))
                self.bias = nn.Parameter(torch.zeros(num_features))
                self.register_buffer("running_mean", torch.zeros(num_features))
                self.register_buffer("running_var", torch.ones(num_features))
                self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))
                ### END SOLUTION

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                """x: (N, C) or (N, C, L) -> same shape and dtype"""
                # TODO: refuse bad shapes (see the list above)
                # TODO: training: biased batch statistics per channel; update the buffers under no_grad
                #       (running_var with the unbiased variance), count the batch
                # TODO: eval: use the running statistics
                # TODO: normalise, scale and shift (broadcast the (C,) vectors over N and L)
                ### BEGIN SOLUTION
                if x.dim() not in (2, 3) or x.shape[1] != self.num_features:
                    raise ValueError(f"expected (N, {self.num_features}) or (N, {self.num_features}, L), got {tuple(x.shape)}")
                dims = (0,) if x.dim() == 2 else (0, 2)  # every axis but the channel axis
                shape = (1, -1) if x.dim() == 2 else (1, -1, 1)  # (C,) -> broadcastable over x
                if self.training:
                    n = x.numel() // self.num_features  # values per channel
                    if n < 2:
                        raise ValueError(f"training needs more than 1 value per channel, got input {tuple(x.shape)}")
                    mean = x.mean(dim=dims)  # (C,)
                    var = ((x - mean.view(shape)) ** 2).mean(dim=dims)  # (C,), biased: normalises the batch
                    with torch.no_grad():
                        m = self.momentum
                        self.running_mean.mul_(1 - m).add_(m * mean)
                        self.running_var.mul_(1 - m).add_(m * var * n / (n - 1))  # unbiased in the average
                        self.num_batches_tracked += 1
                else:
                    mean, var = self.running_mean, self.running_var
                x_hat = (x - mean.view(shape)) * torch.rsqrt(var.view(shape) + self.eps)
                return x_hat * self.weight.view(shape) + self.bias.view(shape)
                ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### Two pictures: what BatchNorm does to a language model

        Left: the output for sequence 0 of a batch, in training mode, as its batch mates are replaced by other
        random sequences. Under LayerNorm it never changes; under BatchNorm it changes, less as the batch grows, but
        it never stops. Right: a causal model must not let token $t$ see tokens after $t$. BatchNorm's statistics for
        a `(B, d, T)` batch average over all positions, so perturbing the *last* token changes the normalised
        output of the *first*; LayerNorm's does not. (Your implementations when they are written, PyTorch's
        otherwise.)
    """)
    lesson.code(r"""
        try:
            layer_norm(torch.randn(2, 4), None, None)
            ln, who_ln = layer_norm, "yours"
        except NotImplementedError:
            ln, who_ln = (lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b)), "F.layer_norm"
        try:
            BatchNorm1d(4)(torch.randn(3, 4))
            bn_class, who_bn = BatchNorm1d, "yours"
        except NotImplementedError:
            bn_class, who_bn = nn.BatchNorm1d, "nn.BatchNorm1d"

        torch.manual_seed(0)
        d, T = 16, 12
        sequence = torch.randn(1, T, d)  # (1, T, d): the sequence we watch
        sizes, bn_change, ln_change = [2, 4, 8, 16, 32, 64], [], []
        for B in sizes:
            outs_bn, outs_ln = [], []
            for _ in range(2):  # two different sets of batch mates
                batch = torch.cat([sequence, torch.randn(B - 1, T, d)])  # (B, T, d)
                bn = bn_class(d)
                outs_bn.append(bn(batch.transpose(1, 2))[0].detach())  # channels on axis 1: (B, d, T)
                outs_ln.append(ln(batch, None, None)[0])
            bn_change.append((outs_bn[0] - outs_bn[1]).abs().max().item())
            ln_change.append((outs_ln[0] - outs_ln[1]).abs().max().item())

        batch = torch.randn(4, T, d)
        later = batch.clone()
        later[:, -1] += 3.0 * torch.randn(4, d)  # change only the last token of every sequence
        bn = bn_class(d)
        leak_bn = (bn(later.transpose(1, 2)) - bn(batch.transpose(1, 2))).transpose(1, 2).abs().amax(dim=(0, 2))
        leak_ln = (ln(later, None, None) - ln(batch, None, None)).abs().amax(dim=(0, 2))

        fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 3.5))
        ax.semilogy(sizes, bn_change, marker="o", label=f"BatchNorm ({who_bn})")
        ax.semilogy(sizes, [max(v, 1e-12) for v in ln_change], marker="s", label=f"LayerNorm ({who_ln})")
        ax.set_xlabel("batch size B"); ax.set_ylabel("max |change| of sequence 0's output")
        ax.set_title("new batch mates, same sequence (0 drawn as 1e-12)"); ax.legend(fontsize=8)
        bx.bar([t - 0.2 for t in range(T)], leak_bn.detach().tolist(), width=0.4, label="BatchNorm")
        bx.bar([t + 0.2 for t in range(T)], [max(v, 1e-12) for v in leak_ln.tolist()], width=0.4, label="LayerNorm")
        bx.set_yscale("log"); bx.set_xlabel("position t"); bx.set_ylabel("max |change| of the output at t")
        bx.set_title(f"only token {T - 1} changed (0 drawn as 1e-12)"); bx.legend(fontsize=8)
        plt.tight_layout(); plt.show()
    """)
    lesson.md(r"""
        ### Train versus eval

        The same input gives different outputs in the two modes: after a few training batches the running
        statistics are only an estimate of the data's. Forgetting `model.eval()` before evaluating, or calling it
        and then fine-tuning with a batch of one, are classic BatchNorm bugs. LayerNorm has no mode: its output for
        a token is the same in training, in evaluation, alone or in a batch of 512.
    """)
    lesson.code(r"""
        torch.manual_seed(1)
        bn = bn_class(8)
        data = lambda: 3.0 + 2.0 * torch.randn(32, 8)  # features with mean 3 and std 2
        gaps = []
        for step in range(40):
            bn.train()
            bn(data())
            probe = data()
            with torch.no_grad():
                train_out = bn(probe)  # a training forward also updates the stats: acceptable for a picture
                bn.eval()
                gaps.append((train_out - bn(probe)).abs().mean().item())
        plt.figure(figsize=(5, 3))
        plt.semilogy(gaps)
        plt.xlabel("training batches seen"); plt.ylabel("mean |train - eval| output")
        plt.title(f"running statistics converge ({who_bn}, momentum 0.1)")
        plt.tight_layout(); plt.show()
        print("running_mean", [round(v, 2) for v in bn.running_mean.tolist()])
        print("running_var ", [round(v, 2) for v in bn.running_var.tolist()])
    """)
    lesson.stop()
    lesson.md(r"""
        ## 4. Reading the solutions

        **`layer_norm`.** `promote_types(x.dtype, float32)` keeps float64 as float64 and lifts fp16/bf16 to float32.
        The mean is subtracted *before* squaring (two passes over the row), which keeps the variance accurate for
        rows with a large offset and never negative. `keepdim=True` leaves `(..., 1)` statistics that broadcast over
        the `d` features. `rsqrt(var + eps)` is one operation and puts `eps` under the root, as `nn.LayerNorm` does.
        The affine part is applied in float32 and the result cast once at the end.
        *Mistakes*: `x.var(-1)` (unbiased, off by a factor
        $\sqrt{d/(d-1)}$, 3% for $d = 16$), `/(std + eps)`, the one-pass $\overline{x^2} - \mu^2$, normalising
        over `dim=0`, computing in fp16.

        **`BatchNorm1d`.** The statistics reduce every axis but the channel axis: `(0,)` for `(N, C)`, `(0, 2)` for
        `(N, C, L)`, and `view(1, -1)` or `view(1, -1, 1)` broadcasts a `(C,)` vector back. The buffer update runs
        under `torch.no_grad()`: without it, `running_mean.add_(m * mean)` would record an autograd graph into a
        buffer that lives across steps (the buffer then `requires_grad`, and every step's graph stays alive through
        it). *Mistakes*: updating `running_var` with the biased variance, or normalising with the unbiased one;
        the momentum the wrong way round ($0.9 \cdot$ new, the Keras/TensorFlow convention is `momentum=0.99` *for
        the old value*); using batch statistics in eval mode; not counting `num_batches_tracked`.

        **Cost.** Both read `x` twice and write it once in the textbook form; a fused kernel (Apex `FusedLayerNorm`,
        the Triton kernel of [p03.layernorm](../03_Triton_Kernels/05_LayerNorm.ipynb)) reads it once into registers
        and uses Welford's running mean and variance, which is one-pass *and* accurate. For a `(B·T, d)` input:
        about $8\,BTd$ FLOPs and $2\,BTd$ elements moved, so normalisation is bandwidth-bound, never compute-bound.

        **What production code does.** `nn.LayerNorm` and `nn.RMSNorm` run one fused kernel per call; Hugging Face
        Llama's `LlamaRMSNorm` upcasts to float32 exactly as here. Megatron-LM and vLLM fuse the residual add with
        the norm (`fused_add_rms_norm`). BatchNorm survives in convolutional vision models (ResNet), where at
        inference it is folded into the preceding convolution's weights; multi-GPU training needs `SyncBatchNorm`
        to average statistics across devices, one more reason transformers avoid it.

        **Where this is used next.** [p02.rmsnorm](../02_PyTorch_Algorithms/02_RMSNorm.ipynb) writes RMSNorm with
        its backward and the Hugging Face module as reference; [p02.llama_block](../02_PyTorch_Algorithms/07_Llama_Block.ipynb)
        puts it before attention and the MLP (pre-norm).
    """)
    lesson.mistakes()
    return lesson
