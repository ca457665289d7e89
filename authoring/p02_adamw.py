"""Source of 02_PyTorch_Algorithms/14_AdamW.ipynb (build with `python -m llm_algo build p02.adamw`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p02.adamw",
        path="02_PyTorch_Algorithms/14_AdamW.ipynb",
        title_en="AdamW from scratch",
        title_zh="从零实现 AdamW 优化器",
        difficulty="medium",
        device="cpu",
        minutes=60,
        prerequisites=["p00.optim_and_loss"],
    )
    lesson.title(
        intro=r"""
        Llama, Qwen, DeepSeek, GPT-3 and nearly every other LLM was trained with AdamW. It is a dozen lines of
        arithmetic, yet it decides most of a training run's memory (two float32 moments per parameter: 64 GB for an
        8B model, before the weights and gradients) and several of its failure modes: forget the bias correction and
        the first steps have the wrong size (up to 6.5 times too large with PyTorch's default betas); put the weight decay in the gradient and it silently stops acting on
        the parameters that need it most; decay the LayerNorm gains and the model slowly loses its scale.

        **You will implement** one AdamW update on a tensor (bias correction, decoupled weight decay, `eps` where
        PyTorch puts it, optional AMSGrad), a `torch.optim.Optimizer` subclass with param groups and PyTorch's
        state layout, and the usual rule that decides which parameters get weight decay. **Graded against**
        `torch.optim.AdamW` step for step over 50 steps (float64, and float32 against float64), its `state_dict`
        (your optimizer resumes from a `torch.optim.AdamW` checkpoint), closed forms for the first step and for pure
        decay, and `torch.optim.AdamW` driven by your param groups.
    """
    )
    lesson.md(r"""
        ## 本节要点

        - **问题**：几乎所有 LLM 都用 AdamW 训练；两个 float32 动量使 8B 模型多占 64 GB，偏差修正、weight decay 的写法错了会悄悄改变训练。
        - **更新公式**：$m_t = \beta_1 m + (1-\beta_1) g$，$v_t = \beta_2 v + (1-\beta_2) g^2$；$\theta \leftarrow \theta(1 - \eta\lambda)$，再 $\theta \leftarrow \theta - \eta\,\dfrac{m_t/(1-\beta_1^t)}{\sqrt{v_t}/\sqrt{1-\beta_2^t} + \epsilon}$。
        - **eps 的位置**：与 PyTorch 一致，在除以 $\sqrt{1-\beta_2^t}$ 之后、根号之外加 $\epsilon$。
        - **解耦的 weight decay**：直接缩放旧参数 $(1-\eta\lambda)$，在 Adam 更新之前；不是把 $\lambda\theta$ 加进梯度（那是 Adam + L2）。AMSGrad 对原始 $v$ 取最大值，并用它做分母。
        - **Optimizer 子类**：按 param group 读取 `lr`、`weight_decay`；state 布局与 PyTorch 相同（`step` 为 float32 标量 tensor），能从 `torch.optim.AdamW` 的 checkpoint 恢复；没有梯度的参数跳过。
        - **Weight decay 分组**：维度 $\ge 2$ 的权重（linear、embedding）做 decay；bias、LayerNorm/RMSNorm gain 等一维参数不 decay；冻结参数不放进组。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. From SGD to Adam: a step size per coordinate

        Stochastic gradient descent moves every parameter by $\eta\, g$. In a transformer the gradients of different
        parameters differ by orders of magnitude (embedding rows of rare tokens, output-head columns, LayerNorm gains),
        so one learning rate is too large for some and too small for others. Adam (Kingma & Ba, 2015) keeps two
        exponential moving averages per parameter, elementwise, with the parameter's shape:

        $$
        m_t = \beta_1 m_{t-1} + (1-\beta_1)\, g_t, \qquad v_t = \beta_2 v_{t-1} + (1-\beta_2)\, g_t^2,
        \qquad m_0 = v_0 = 0 ,
        $$

        and moves by $m / \sqrt{v}$: a signal-to-noise ratio, about $\pm 1$ for a consistent gradient whatever its
        scale, near 0 for a gradient that flips sign. Typical LLM settings: $\beta_1 = 0.9$, $\beta_2 = 0.95$,
        $\varepsilon = 10^{-8}$, peak $\eta \approx 3 \times 10^{-4}$, weight decay $0.1$.

        **Bias correction.** Starting from zero, $m_t$ is biased towards 0: with a constant gradient $g$,
        $m_t = (1 - \beta_1^t)\, g$ and $v_t = (1 - \beta_2^t)\, g^2$. Dividing by $1 - \beta_1^t$ (and $v_t$ by
        $1 - \beta_2^t$) removes it. Without the corrections step $t$ is
        $(1-\beta_1^t)/\sqrt{1-\beta_2^t}$ times the intended one. With $(\beta_1, \beta_2) = (0.9, 0.999)$ that is
        $0.1 / \sqrt{0.001} \approx 3.2$ at the first step, about 6.5 around step 10 and still 1.6 at step 500: too
        large exactly when the weights are least trained and most fragile. With the LLM setting $(0.9, 0.95)$ the first
        step is instead $0.1/\sqrt{0.05} \approx 0.45$ times the intended one, about 1.1 around step 20, and still 2% above
        it at step 60.

        ## 2. AdamW: decay the weights, not the gradient

        Classic L2 regularisation adds $\lambda \theta$ to the gradient. With SGD that is the same as shrinking the
        weights by $\eta\lambda$ each step. With Adam it is not: the $\lambda\theta$ term goes into $m$ and $v$ and is
        divided by $\sqrt{\hat v}$, so parameters with large gradients (large $\hat v$) are barely decayed and parameters
        with tiny gradients are decayed at the full normalised step. Loshchilov & Hutter (2019, *Decoupled Weight Decay
        Regularization*) take the decay out of the gradient. PyTorch's `torch.optim.AdamW` does, per step $t$ and
        elementwise:

        $$
        \begin{aligned}
        \theta &\leftarrow \theta\,(1 - \eta\lambda) && \text{decoupled decay, on the old weights, scaled by } \eta \\
        m &\leftarrow \beta_1 m + (1-\beta_1)\, g, \qquad v \leftarrow \beta_2 v + (1-\beta_2)\, g^2 \\
        \theta &\leftarrow \theta - \frac{\eta}{1-\beta_1^t} \cdot \frac{m}{\sqrt{v} / \sqrt{1-\beta_2^t} + \varepsilon}
        \end{aligned}
        $$

        Two details matter for step-for-step equality. The decay is multiplied by the learning rate (so a cosine
        schedule on $\eta$ also schedules the decay; the paper has a separate multiplier). And $\varepsilon$ is added
        *after* the square root and *after* the bias correction of $v$: $\sqrt{\hat v} + \varepsilon$, not
        $\sqrt{\hat v + \varepsilon}$ and not $\sqrt{v} + \varepsilon$ then corrected. These give different numbers
        whenever gradients are small, which is exactly where $\varepsilon$ matters: with $\sqrt{\hat v} \approx |g|$
        the step is shrunk by the factor $|g| / (|g| + \varepsilon)$, 1% at $|g| = 10^{-6}$ and half at
        $|g| = \varepsilon = 10^{-8}$. Wortsman et al. (2023, *Small-scale proxies for large-scale Transformer
        training instabilities*) observe the gradient RMS shrinking as models grow, towards that range, and find that
        a smaller $\varepsilon$ restores the damped updates.

        **AMSGrad** (Reddi et al., 2018) keeps $v_{\max} = \max(v_{\max}, v)$ (PyTorch takes the maximum of the
        uncorrected $v$, then bias-corrects it) and divides by that, so a
        coordinate's effective step can never grow back after a burst of large gradients. It is rarely used for LLMs,
        but `torch.optim.AdamW(amsgrad=True)` has it and so will yours.
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt
        import torch
        import torch.nn as nn
    """)
    lesson.md(r"""
        ## 3. Exercise `adamw_step`: one update of one tensor

        Update `param`, `exp_avg` ($m$), `exp_avg_sq` ($v$) and, when given, `max_exp_avg_sq` in place, in PyTorch's
        order. `step` is the number of this step, starting at 1. The function runs under `torch.no_grad()` (the
        decorator), so in-place updates of a parameter are allowed.
    """)
    lesson.exercise(
        "adamw_step",
        r'''
        @torch.no_grad()
        def adamw_step(
            param: torch.Tensor,
            grad: torch.Tensor,
            exp_avg: torch.Tensor,
            exp_avg_sq: torch.Tensor,
            step: int,
            *,
            lr: float,
            beta1: float,
            beta2: float,
            eps: float,
            weight_decay: float,
            max_exp_avg_sq: torch.Tensor | None = None,
        ) -> None:
            """One AdamW update, in place. All tensors have param's shape and dtype; step >= 1.

            max_exp_avg_sq: None for plain AdamW, the AMSGrad running max of exp_avg_sq otherwise.
            """
            # TODO: decoupled weight decay: shrink param by (1 - lr * weight_decay), before the Adam update
            # TODO: update the moving averages m and v in place
            # TODO: bias corrections 1 - beta**step; with AMSGrad, keep and use the running max of v
            # TODO: denominator sqrt(v) / sqrt(1 - beta2**step) + eps; param -= lr / (1 - beta1**step) * m / denominator
            ### BEGIN SOLUTION
            param.mul_(1 - lr * weight_decay)                              # decoupled: never enters m or v
            exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)                # m_t
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)   # v_t
            bias_correction1 = 1 - beta1**step
            bias_correction2 = 1 - beta2**step
            second_moment = exp_avg_sq
            if max_exp_avg_sq is not None:                                 # AMSGrad: the denominator never shrinks
                torch.maximum(max_exp_avg_sq, exp_avg_sq, out=max_exp_avg_sq)
                second_moment = max_exp_avg_sq
            denom = second_moment.sqrt() / math.sqrt(bias_correction2) + eps  # eps after the corrected sqrt
            param.addcdiv_(exp_avg, denom, value=-lr / bias_correction1)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 4. Exercise `AdamW`: an optimizer PyTorch code can use

        `torch.optim.Optimizer` does the bookkeeping: it turns `params` into `self.param_groups` (a list of dicts, each
        with its own `lr`, `betas`, `weight_decay`, ..., filled from `defaults` where a group does not say), gives you
        `self.state` (a dict from parameter to its state dict), and provides `zero_grad`, `state_dict` and
        `load_state_dict`. You write `step`.

        **Keep PyTorch's state layout**, so checkpoints move between implementations: per parameter,
        `state["step"]` is a float32 *scalar tensor* (PyTorch keeps it a tensor so that CUDA-graph-captured and fused
        optimizers can increment it on the device), `state["exp_avg"]` and `state["exp_avg_sq"]` have the parameter's
        shape, and `state["max_exp_avg_sq"]` exists only with `amsgrad=True`. State is created lazily, on a
        parameter's first step.

        **A parameter whose `.grad` is `None` is skipped entirely**: no moment update, no step count, *and no weight
        decay*. It was not used in this step's forward pass (a frozen layer, an expert that received no token, an
        embedding row you did not look up in a sparse setting); decaying it anyway would shrink it towards zero while
        it cannot learn back.
    """)
    lesson.exercise(
        "adamw_optimizer",
        r'''
        class AdamW(torch.optim.Optimizer):
            """AdamW with param groups and torch.optim.AdamW's state layout."""

            def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False):
                if lr < 0 or eps < 0 or weight_decay < 0 or not all(0.0 <= b < 1.0 for b in betas):
                    raise ValueError(f"invalid AdamW hyper-parameters: {lr=}, {betas=}, {eps=}, {weight_decay=}")
                defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad)
                super().__init__(params, defaults)

            @torch.no_grad()
            def step(self, closure=None):
                loss = None
                if closure is not None:
                    with torch.enable_grad():
                        loss = closure()
                # TODO: for every group and every parameter of it that has a gradient:
                # TODO:   create the state on first use (step: float32 scalar tensor 0; zeros like the parameter)
                # TODO:   increment the step and call adamw_step with this group's hyper-parameters
                ### BEGIN SOLUTION
                for group in self.param_groups:
                    beta1, beta2 = group["betas"]
                    for p in group["params"]:
                        if p.grad is None:
                            continue  # not used in this forward: no moments, no step, no decay
                        state = self.state[p]
                        if not state:  # lazily, with torch.optim.AdamW's keys and dtypes
                            state["step"] = torch.tensor(0.0)
                            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                            if group["amsgrad"]:
                                state["max_exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                        state["step"] += 1
                        adamw_step(
                            p,
                            p.grad,
                            state["exp_avg"],
                            state["exp_avg_sq"],
                            int(state["step"].item()),
                            lr=group["lr"],
                            beta1=beta1,
                            beta2=beta2,
                            eps=group["eps"],
                            weight_decay=group["weight_decay"],
                            max_exp_avg_sq=state.get("max_exp_avg_sq"),
                        )
                ### END SOLUTION
                return loss
    ''',
    )
    lesson.md(r"""
        ### Adam + L2 against AdamW: a picture

        Two scalar parameters start at 1 and see *pure noise* gradients (no signal at all), one of scale 10 and one of
        scale 0.01; weight decay $\lambda = 0.1$ should shrink both alike. With `torch.optim.Adam(weight_decay=0.1)`
        (L2: the decay goes through $m/\sqrt{\hat v}$) the quiet parameter is pulled to zero at the full normalised
        step while the noisy one is hardly decayed at all. With your `AdamW` the two curves are *one* line: both see
        the same noise up to a factor, Adam's $m/\sqrt{\hat v}$ does not depend on the gradient's scale, and the decay
        does not depend on the gradient at all. That line follows the $(1 - \eta\lambda)^t$ envelope, plus the random
        walk of $\pm\eta$ steps that pure noise drives.
    """)
    lesson.code(r"""
        def trajectory(make_optimizer, noise_scale, steps=1500):
            torch.manual_seed(0)
            p = nn.Parameter(torch.ones(1))
            optimizer = make_optimizer([p])
            values = []
            for _ in range(steps):
                p.grad = noise_scale * torch.randn(1)
                optimizer.step()
                values.append(abs(p.item()))
            return values

        lr, decay = 1e-2, 0.1
        plt.figure(figsize=(6.5, 3.5))
        for noise_scale, color in ((10.0, "C0"), (0.01, "C3")):
            plt.plot(trajectory(lambda ps: torch.optim.Adam(ps, lr=lr, weight_decay=decay), noise_scale),
                     color=color, ls="--", label=f"Adam + L2, gradient noise {noise_scale:g}")
            try:
                plt.plot(trajectory(lambda ps: AdamW(ps, lr=lr, weight_decay=decay), noise_scale),
                         color=color, label=f"AdamW (yours), gradient noise {noise_scale:g}")
            except NotImplementedError:
                pass  # not attempted yet: no AdamW curves
        plt.plot([(1 - lr * decay) ** t for t in range(1500)], "k:", label="(1 - lr·wd)^t")
        plt.xlabel("step"); plt.ylabel("|θ|"); plt.yscale("log"); plt.ylim(1e-3, 3)
        plt.title("Weight decay under pure-noise gradients (lr 1e-2, wd 0.1)"); plt.legend(fontsize=7)
        plt.tight_layout(); plt.show()
    """)
    lesson.md(r"""
        ## 5. Exercise `weight_decay_param_groups`: what to decay

        Weight decay keeps weights small; it should not act on parameters whose size *is* the point. A LayerNorm or
        RMSNorm gain (initialised to 1) decayed towards 0 shrinks the activations it exists to scale, and a bias has no
        interaction with the input scale that decay would regularise. The rule used by GPT-3-style training code
        (nanoGPT, Megatron's `get_param_groups`, most Hugging Face scripts in spirit) is by *shape*:

        - `p.dim() >= 2` (weight matrices of linear layers, embeddings, the output head): weight decay;
        - `p.dim() < 2` (biases, norm gains, scalar gates): no weight decay;
        - parameters with `requires_grad=False` (a frozen backbone, LoRA's base weights): not in any group.

        The shape rule needs no list of module names, so it keeps working when a new norm class appears; Hugging Face's
        `Trainer` uses a type and names instead (`nn.LayerNorm` modules, and parameter names matching `bias`,
        `layernorm`, `rmsnorm`, `norm` or `*_norm`), which decays a hand-written norm named otherwise (say `ln_1`) and
        every 1-d gate or scale. Tied weights (the embedding shared with the output head) appear once in `named_parameters()`, so they
        are in exactly one group.

        Return two groups, decay first, each keeping the order of `model.named_parameters()`:
        `[{"params": [...], "weight_decay": weight_decay}, {"params": [...], "weight_decay": 0.0}]`.
    """)
    lesson.exercise(
        "weight_decay_param_groups",
        r'''
        def weight_decay_param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
            """[{"params": matrices and embeddings, "weight_decay": weight_decay},
                {"params": biases, norm gains and other 0-d/1-d parameters, "weight_decay": 0.0}]
            Only trainable parameters, each exactly once, in named_parameters() order."""
            # TODO: walk model.named_parameters(); skip frozen ones; split by p.dim()
            ### BEGIN SOLUTION
            decay, no_decay = [], []
            for _name, p in model.named_parameters():
                if not p.requires_grad:
                    continue  # frozen: the optimizer must not see it
                (decay if p.dim() >= 2 else no_decay).append(p)  # matrices and embeddings decay; 0-d/1-d do not
            return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        The groups plug straight into any optimizer, yours or PyTorch's:
        `AdamW(weight_decay_param_groups(model, 0.1), lr=3e-4, betas=(0.9, 0.95))`.
    """)
    lesson.stop()
    lesson.md(r"""
        ## 6. Reading the solutions

        **`adamw_step`.** The decay `param.mul_(1 - lr * weight_decay)` comes first and uses the *old* weights, as
        PyTorch does; it never touches `exp_avg` or `exp_avg_sq`. The moments update in place (`mul_`, `add_`,
        `addcmul_`: no temporaries of the parameter's size). The two bias corrections are Python floats computed from
        the step number; `lr / bias_correction1` folds the first into the step size, and $\sqrt{1-\beta_2^t}$ divides
        $\sqrt{v}$ *before* `eps` is added. `addcdiv_` performs $\theta \mathrel{-}= s \cdot m / d$ in one pass.
        PyTorch writes `exp_avg.lerp_(grad, 1 - beta1)`, the same value up to rounding.

        **`AdamW`.** Hyper-parameters are read from the *group*, never from `self.defaults`, because a group may
        override any of them (a smaller learning rate for embeddings, no decay for norms). State is created on first
        use with PyTorch's keys, so `load_state_dict` accepts a `torch.optim.AdamW` checkpoint and continues it exactly
        (a check does that). `@torch.no_grad()` on `step` keeps the update out of autograd's graph.

        **The usual mistakes, and why they are wrong**:
        - *No bias correction*: the first step is $(1-\beta_1)/\sqrt{1-\beta_2}$ times too small or large.
        - *`eps` inside the square root*, or added before the bias correction of $v$: visible only on small gradients.
        - *Adam + L2* (decay added to the gradient), *decay without the learning rate* ($\theta(1-\lambda)$), and
          *decay after the update* instead of before: each changes the trajectory within a few steps.
        - *$\sqrt{1 - \beta_2^t}$ forgotten* (dividing $\sqrt v$ by $1-\beta_2^t$): a wrong scale early in training.
        - *AMSGrad's maximum ignored* in the denominator, or taken over the bias-corrected $\hat v$ instead of the
          raw $v$.
        - In the optimizer: *decaying parameters that have no gradient*, *the defaults' weight decay instead of the
          group's*, *`step` stored as a Python int* (not PyTorch's layout), *AMSGrad state never passed*.
        - In the groups: *a name rule that only exempts biases* (norm gains get decayed), *`dim() > 2`* (no linear
          layer is decayed), *frozen parameters included*.

        **Cost.** Per parameter and step: about 12 FLOPs, and the state is two extra tensors of the parameter's size.
        In mixed-precision training the optimizer holds float32 master weights, $m$ and $v$: 12 bytes per parameter,
        plus 2+2 for the bf16 weights and gradients, the 16 bytes/parameter of the ZeRO paper (Rajbhandari et al.,
        2020): 128 GB for an 8B model, more than one GPU holds, which is why ZeRO shards the optimizer state across
        data-parallel ranks (`p02.zero`). The update is memory-bound (it reads 4 and writes 3 tensors per parameter),
        so production optimizers fuse it: PyTorch's `foreach=True` (one kernel per op over a list of tensors, the
        default on CUDA) and `fused=True` (one kernel for the whole update), Apex `FusedAdam`, DeepSpeed's `FusedAdam`
        and CPU-offloaded `DeepSpeedCPUAdam`. Memory-saving variants keep $m$ and $v$ in bf16 or 8 bits
        (bitsandbytes' 8-bit Adam) or factorise $v$ (Adafactor).
    """)
    lesson.mistakes()
    return lesson
