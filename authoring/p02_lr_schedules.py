"""Source of 02_PyTorch_Algorithms/15_LR_Schedules.ipynb (build with `python -m llm_algo build p02.lr_schedules`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p02.lr_schedules",
        path="02_PyTorch_Algorithms/15_LR_Schedules.ipynb",
        title_en="Learning-rate schedules: warmup + cosine, WSD, inverse square root",
        title_zh="学习率调度：预热 + 余弦、WSD 与平方根倒数",
        difficulty="easy",
        device="cpu",
        minutes=50,
        prerequisites=["p02.adamw"],
    )
    lesson.title(
        intro=r"""
        **本节要点**
        - 大模型训练几乎都用“线性预热（warmup）+ 衰减”的学习率调度：预热让 Adam 的二阶矩估计先稳定下来，衰减让损失在训练末尾继续下降。
        - 余弦调度：$\eta_t = \eta_{\min} + (\eta_{\max}-\eta_{\min})\cdot\tfrac12\bigl(1+\cos(\pi p)\bigr)$，$p$ 为衰减进度；衰减终点是一个**绝对步数**，过了终点要停在下限 $\eta_{\min}$。
        - `CosineAnnealingLR` 和 transformers 的余弦调度在终点之后会重新上升——这是真实存在的坑。
        - WSD（warmup-stable-decay）：预热后保持峰值，最后 10–20% 的步数再衰减（线性、余弦或 1-sqrt），可以从任意稳定期检查点开始衰减。
        - 平方根倒数（inverse-sqrt）：$\eta_t = \eta_{\max}\sqrt{W/t}$，即原始 Transformer 的 Noam 调度，没有固定终点。
        - `LambdaLR` 的因子乘在每个参数组自己的初始学习率上：因子必须是**相对值** $\eta_t/\eta_{\max}$，不能返回绝对学习率。
        {易错点}

        Llama 2 was trained with AdamW at a peak learning rate of $3\times10^{-4}$ (7B, 13B), a linear warmup of 2000
        steps and a cosine decay to 10% of the peak (Touvron et al., 2023, *Llama 2*, §2.2). Llama 3 405B used a peak of
        $8\times10^{-5}$, 8000 warmup steps, and a cosine decay to $8\times10^{-7}$ over 1,200,000 steps (Llama Team,
        2024, *The Llama 3 Herd of Models*, §3.4.1). DeepSeek-V3 warmed up over 2000 steps, held $2.2\times10^{-4}$ for
        most of its 14.8T tokens, then decayed with a cosine to $2.2\times10^{-5}$ (DeepSeek-AI, 2024, *DeepSeek-V3
        Technical Report*, §4.2). The schedule is a handful of lines, but a wrong one costs a whole run: too short a
        warmup and the first Adam steps blow up the loss; a decay end that is off by the warmup length and the last
        10% of compute runs at the floor or never reaches it.

        **You will implement** warmup + cosine decay to a floor (the end of the decay given as an absolute step),
        warmup-stable-decay (WSD) with linear, cosine and 1-sqrt cool-downs, the inverse square root schedule, each as
        a plain function of the step, and a `LambdaLR` built from any of them that scales every param group.
        **Graded against** `torch.optim.lr_scheduler` (`LambdaLR`, `CosineAnnealingLR`, `SequentialLR`) step by step,
        transformers' `get_cosine_with_min_lr_schedule_with_warmup`, `get_wsd_schedule` and
        `get_inverse_sqrt_schedule`, and closed forms at the boundaries (step 0, end of warmup, end of decay, past it).
    """
    )
    lesson.md(r"""
        ## 1. Why a schedule at all

        **Warmup (预热).** At step 1 Adam's second-moment estimate $\hat v$ comes from a single gradient, so the update
        $m/\sqrt{\hat v}$ is about $\pm\eta$ in *every* coordinate, whatever the gradient says (the bias-corrected
        first step of `p02.adamw`). With a randomly initialised transformer those first gradients are also the largest
        and least informative of the run. A full-size step in every coordinate at once is what makes early loss
        spikes; ramping $\eta$ up linearly over $W$ steps (a few hundred to a few thousand) lets $\hat v$ average over
        many gradients before the steps get large. Liu et al. (2020, *On the Variance of the Adaptive Learning Rate and
        Beyond*, RAdam) make the variance argument precise.

        **Decay (衰减).** With a constant $\eta$ the weights keep bouncing in a band whose width grows with $\eta$ and
        the gradient noise; lowering $\eta$ at the end shrinks the band and the loss drops, often by a visible step.
        Cosine decay (Loshchilov & Hutter, 2017, *SGDR*) to about 10% of the peak became the default for LLMs
        (GPT-3, Chinchilla, Llama). Its weakness: the decay end must be fixed before training, so a run cannot be
        extended and every model size needs its own run. **WSD** (warmup-stable-decay, MiniCPM: Hu et al., 2024)
        keeps the peak for most of training and decays only in the last 10-20% of steps; any checkpoint of the
        stable phase can be cooled down into a finished model, and Hägele et al. (2024, *Scaling Laws and
        Compute-Optimal Training Beyond Fixed Training Durations*) find that a short cool-down, with the $1-\sqrt{p}$
        shape, matches cosine. **Inverse square root** (Vaswani et al., 2017; T5) has no end at all:
        $\eta_t \propto 1/\sqrt t$ after warmup.

        ## 2. The math, with the step as the only input

        A schedule is a function of the integer step $t = 0, 1, 2, \dots$ (the number of optimizer steps already taken:
        step $t$ is the learning rate used by the $(t+1)$-th `optimizer.step()`). All lengths are integers, and
        $\eta_{\max}$ is the peak.

        **Warmup + cosine to a floor.** Warmup for $W$ steps, cosine decay that reaches $\eta_{\min}$ at the absolute step
        $E > W$ (*not* $W + E$), then the floor:

        $$
        \eta_t = \begin{cases}
        \eta_{\max}\, t / W & 0 \le t < W \\
        \eta_{\min} + (\eta_{\max} - \eta_{\min})\, \tfrac12\bigl(1 + \cos(\pi p)\bigr),\quad p = \dfrac{t - W}{E - W} & W \le t < E \\
        \eta_{\min} & t \ge E
        \end{cases}
        $$

        Boundaries: $\eta_0 = 0$ (the first step does nothing; Hugging Face and Megatron agree), $\eta_W = \eta_{\max}$,
        the midpoint $t = (W+E)/2$ gives $(\eta_{\max} + \eta_{\min})/2$, and $\eta_E = \eta_{\min}$. The last case
        matters: $\cos(\pi p)$ for $p > 1$ climbs back up, and both `CosineAnnealingLR` (it is periodic, with period
        $2(E-W)$) and transformers' cosine lambda (no clamp) do exactly that if training runs past $E$.

        **WSD** with warmup $W$, stable $S$, decay $D$ steps and floor ratio $r$ ($\eta_{\min} = r\,\eta_{\max}$), as
        transformers' `get_wsd_schedule` defines it (its warmup starts from the floor, not from 0):

        $$
        \eta_t = \begin{cases}
        \eta_{\min} + (\eta_{\max} - \eta_{\min})\, t/W & t < W \\
        \eta_{\max} & W \le t < W + S \\
        \eta_{\min} + (\eta_{\max} - \eta_{\min})\, s(p),\quad p = \dfrac{t - W - S}{D} & W + S \le t < W + S + D \\
        \eta_{\min} & \text{after}
        \end{cases}
        \qquad s(p) = \begin{cases} 1 - p & \text{linear} \\ \tfrac12(1 + \cos \pi p) & \text{cosine} \\ 1 - \sqrt{p} & \text{1-sqrt} \end{cases}
        $$

        **Inverse square root** with warmup $W \ge 1$: $\eta_t = \eta_{\max}\, t / W$ for $t < W$, then
        $\eta_{\max} \sqrt{W / t}$: continuous at $t = W$, and $\eta_{4W} = \eta_{\max} / 2$. The original
        Transformer writes it as $d_{\text{model}}^{-1/2} \min(t^{-1/2},\ t\, W^{-3/2})$, the same curve with
        $\eta_{\max} = (d_{\text{model}} W)^{-1/2}$ (0.0007 for $d_{\text{model}} = 512$, $W = 4000$).

        All three functions are pure: `float` in, `float` out, no state, so a resumed run only needs the step number.
        Each validates its arguments and raises `ValueError` with a message: a negative step, a decay that ends before
        the warmup does, a floor above the peak, an unknown decay shape.
    """)
    lesson.setup(r"""
        import functools
        import math

        import matplotlib.pyplot as plt
        import torch
    """)
    lesson.md(r"""
        ## 3. Exercise `warmup_cosine_lr`
    """)
    lesson.exercise(
        "warmup_cosine_lr",
        r'''
        def warmup_cosine_lr(step: int, *, peak_lr: float, min_lr: float, warmup_steps: int, decay_end: int) -> float:
            """Learning rate at `step` (>= 0): linear warmup from 0 to peak_lr over warmup_steps (>= 0) steps, then a
            half cosine from peak_lr down to min_lr (0 <= min_lr <= peak_lr) that reaches it at the ABSOLUTE step
            decay_end (> warmup_steps), then min_lr forever. Raises ValueError on invalid arguments."""
            # TODO: validate: step >= 0, warmup_steps >= 0, decay_end > warmup_steps, 0 <= min_lr <= peak_lr
            # TODO: the three pieces: warmup, cosine decay with its progress p in [0, 1), the floor
            ### BEGIN SOLUTION
            if step < 0:
                raise ValueError(f"step must be >= 0, got {step}")
            if warmup_steps < 0 or decay_end <= warmup_steps:
                raise ValueError(f"need 0 <= warmup_steps < decay_end, got {warmup_steps=}, {decay_end=}")
            if not 0 <= min_lr <= peak_lr:
                raise ValueError(f"need 0 <= min_lr <= peak_lr, got {min_lr=}, {peak_lr=}")
            if step < warmup_steps:
                return peak_lr * step / warmup_steps                       # 0 at step 0, peak at step W
            if step >= decay_end:
                return min_lr                                              # hold the floor: cos would climb back
            progress = (step - warmup_steps) / (decay_end - warmup_steps)  # decay_end is absolute, not a duration
            return min_lr + (peak_lr - min_lr) * 0.5 * (1 + math.cos(math.pi * progress))
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 4. Exercise `wsd_lr`: warmup, stable, decay

        The warmup starts at the floor $\eta_{\min} = r\,\eta_{\max}$ (transformers' convention), the stable phase
        holds the peak, and the cool-down has one of three shapes. A decay of zero steps jumps to the floor.
    """)
    lesson.exercise(
        "wsd_lr",
        r'''
        def wsd_lr(
            step: int,
            *,
            peak_lr: float,
            warmup_steps: int,
            stable_steps: int,
            decay_steps: int,
            min_lr_ratio: float = 0.0,
            decay_type: str = "1-sqrt",
        ) -> float:
            """Warmup-stable-decay learning rate at `step` (>= 0); all lengths >= 0; 0 <= min_lr_ratio <= 1;
            decay_type in ("linear", "cosine", "1-sqrt"). Raises ValueError on invalid arguments."""
            # TODO: validate the arguments (an unknown decay_type must be refused, not silently treated as linear)
            # TODO: warmup from min_lr to peak_lr; stable at peak_lr; decay with the chosen shape; then min_lr
            ### BEGIN SOLUTION
            if decay_type not in ("linear", "cosine", "1-sqrt"):
                raise ValueError(f"decay_type must be 'linear', 'cosine' or '1-sqrt', got {decay_type!r}")
            if step < 0 or min(warmup_steps, stable_steps, decay_steps) < 0:
                raise ValueError(f"step and lengths must be >= 0, got {step=}, {warmup_steps=}, {stable_steps=}, {decay_steps=}")
            if not 0 <= min_lr_ratio <= 1:
                raise ValueError(f"min_lr_ratio must be in [0, 1], got {min_lr_ratio}")
            min_lr = min_lr_ratio * peak_lr
            if step < warmup_steps:
                return min_lr + (peak_lr - min_lr) * step / warmup_steps
            decay_start = warmup_steps + stable_steps
            if step < decay_start:
                return peak_lr
            if step >= decay_start + decay_steps:
                return min_lr
            progress = (step - decay_start) / decay_steps                # in [0, 1)
            if decay_type == "linear":
                shape = 1 - progress
            elif decay_type == "cosine":
                shape = 0.5 * (1 + math.cos(math.pi * progress))
            else:
                shape = 1 - math.sqrt(progress)                          # steep at first, gentle at the end
            return min_lr + (peak_lr - min_lr) * shape
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 5. Exercise `inverse_sqrt_lr`
    """)
    lesson.exercise(
        "inverse_sqrt_lr",
        r'''
        def inverse_sqrt_lr(step: int, *, peak_lr: float, warmup_steps: int) -> float:
            """Linear warmup from 0 to peak_lr over warmup_steps (>= 1) steps, then peak_lr * sqrt(warmup_steps / step).
            Raises ValueError on a negative step or warmup_steps < 1."""
            # TODO: validate; warmup; then the inverse square root decay, continuous at step == warmup_steps
            ### BEGIN SOLUTION
            if step < 0 or warmup_steps < 1:
                raise ValueError(f"need step >= 0 and warmup_steps >= 1, got {step=}, {warmup_steps=}")
            if step < warmup_steps:
                return peak_lr * step / warmup_steps
            return peak_lr * math.sqrt(warmup_steps / step)              # peak at W, peak / 2 at 4 W
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 6. Exercise `make_lambda_lr`: a schedule PyTorch's training loops understand

        `torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)` remembers each param group's learning rate at
        construction as `initial_lr` (its `base_lrs`), and after its $t$-th `scheduler.step()` sets every group's
        `lr` to `base_lr * lr_lambda(t)`; it also calls `lr_lambda(0)` right away, in the constructor. So `lr_lambda`
        must return a **factor**, $\eta_t / \eta_{\max}$, not a learning rate: then a group created with the peak
        learning rate follows the schedule exactly, and a group created with a tenth of it (embeddings, a frozen-ish
        backbone) follows the same shape a tenth as high. Transformers' `get_*_schedule*` functions are exactly such
        `LambdaLR`s.

        The loop is `loss.backward(); optimizer.step(); scheduler.step()`: the optimizer step $t$ (counted from 0)
        uses the factor of step $t$. Calling `scheduler.step()` first shifts the whole schedule by one step (PyTorch
        warns about it).

        `schedule` is any function of the step, for example
        `functools.partial(warmup_cosine_lr, peak_lr=3e-4, min_lr=3e-5, warmup_steps=2000, decay_end=100_000)`.
    """)
    lesson.exercise(
        "make_lambda_lr",
        r'''
        def make_lambda_lr(optimizer: torch.optim.Optimizer, schedule, peak_lr: float):
            """A torch.optim.lr_scheduler.LambdaLR under which a param group created with lr = peak_lr follows
            schedule(step) exactly and every other group is scaled by its own initial lr. peak_lr > 0, else ValueError."""
            # TODO: validate peak_lr; the factor at step t is schedule(t) relative to peak_lr
            ### BEGIN SOLUTION
            if not peak_lr > 0:
                raise ValueError(f"peak_lr must be > 0, got {peak_lr}")

            def factor(step: int) -> float:
                return schedule(step) / peak_lr                          # relative: LambdaLR multiplies by base_lr

            return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### The schedules side by side

        A 1000-step run with the peak at $3\times10^{-4}$ and a floor at 10%: warmup + cosine ending at step 800, WSD
        with a 200-step cool-down in each shape, inverse square root, and what `CosineAnnealingLR` (inside a
        `SequentialLR` after a warmup) does when training runs past its end. The right panel zooms on the cool-downs.
    """)
    lesson.code(r"""
        steps = range(1000)
        peak, floor = 3e-4, 3e-5
        curves = {}
        try:
            curves["warmup + cosine (yours, E = 800)"] = [
                warmup_cosine_lr(s, peak_lr=peak, min_lr=floor, warmup_steps=50, decay_end=800) for s in steps]
            for shape in ("linear", "cosine", "1-sqrt"):
                curves[f"WSD, {shape} cool-down (yours)"] = [
                    wsd_lr(s, peak_lr=peak, warmup_steps=50, stable_steps=750, decay_steps=200, min_lr_ratio=0.1,
                           decay_type=shape) for s in steps]
            curves["inverse sqrt (yours)"] = [inverse_sqrt_lr(s, peak_lr=peak, warmup_steps=50) for s in steps]
        except NotImplementedError:
            pass  # not attempted yet: only PyTorch's curve

        param = torch.nn.Parameter(torch.zeros(1))
        optimizer = torch.optim.SGD([param], lr=peak)
        warmup = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: s / 50)
        cosine = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=750, eta_min=floor)
        scheduler = torch.optim.lr_scheduler.SequentialLR(optimizer, [warmup, cosine], milestones=[50])
        torch_curve = []
        for s in steps:
            torch_curve.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            scheduler.step()
        curves["torch SequentialLR(warmup, CosineAnnealingLR), run past E"] = torch_curve

        fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.6))
        for label, values in curves.items():
            style = dict(ls=":", color="k") if label.startswith("torch") else {}
            left.plot(steps, values, lw=1.2, label=label, **style)
            right.plot(steps, values, lw=1.2, **style)
        left.set_xlabel("step"); left.set_ylabel("learning rate"); left.legend(fontsize=7)
        left.set_title("schedules, peak 3e-4, floor 3e-5")
        right.set_xlim(750, 1000); right.set_xlabel("step"); right.set_title("the cool-downs (zoom)")
        fig.tight_layout()
        plt.show()
    """)
    lesson.md(r"""
        ### In a training loop

        Your scheduler drives two param groups, one at the peak and one at a tenth of it. The learning rate is read
        *before* each `optimizer.step()`, which is the one that step uses.
    """)
    lesson.code(r"""
        try:
            model = torch.nn.Linear(4, 1)
            optimizer = torch.optim.AdamW(
                [{"params": [model.weight], "lr": 3e-4}, {"params": [model.bias], "lr": 3e-5}], weight_decay=0.1)
            schedule = functools.partial(warmup_cosine_lr, peak_lr=3e-4, min_lr=3e-5, warmup_steps=3, decay_end=8)
            scheduler = make_lambda_lr(optimizer, schedule, peak_lr=3e-4)
            for step in range(10):
                lrs = [group["lr"] for group in optimizer.param_groups]
                print(f"step {step}: lr used = {lrs[0]:.3e} (weights), {lrs[1]:.3e} (bias)")
                loss = model(torch.randn(8, 4)).pow(2).mean()
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                scheduler.step()
        except NotImplementedError:
            print("make_lambda_lr is not attempted yet")
    """)
    lesson.stop()
    lesson.md(r"""
        ## 7. Reading the solutions

        **`warmup_cosine_lr`.** Validation first, so that a typo in a config (`decay_end=800` with
        `warmup_steps=2000`) fails at step 0 instead of producing a negative progress and a learning rate above the
        peak. The warmup is `peak * step / W`: 0 at step 0, $\eta_{\max}(W-1)/W$ at the last warmup step, and the
        cosine takes over at exactly $\eta_{\max}$ at step $W$. The progress divides by $E - W$ because $E$ is where
        the decay *ends*, an absolute step; with `warmup_steps=0` there is no warmup and the function is a plain
        cosine. The explicit floor branch is what `CosineAnnealingLR` and transformers' lambda do not have.

        **`wsd_lr`.** The stable phase is the point of WSD: a checkpoint from it has not been annealed, so you can
        resume from any of them with a longer stable phase, or branch off a cool-down. The 1-sqrt shape drops fast at
        first ($s(0.25) = 0.5$) and flattens at the end, where the loss falls most.

        **`inverse_sqrt_lr`.** $\sqrt{W/t}$ equals 1 at $t = W$, so the two pieces meet without a jump, and the
        schedule never needs the run's length.

        **`make_lambda_lr`.** One line plus validation; the content is the convention. The factor is relative, the
        scheduler reads each group's *initial* lr (LambdaLR stores it as `initial_lr`), and the constructor already
        applies `factor(0)`.

        **The usual mistakes, and why they are wrong**:
        - *The decay end taken as a duration after the warmup* ($p = (t - W)/E$): the cosine reaches the floor $W$
          steps late, or never does before the run ends.
        - *No floor past the end*: the cosine climbs back to the peak by $t = 2E - W$.
        - *The floor ignored* (decay to 0) or the cosine without its $\frac12(1+\cdot)$ (negative learning rates).
        - *Warmup off by one* ($(t+1)/W$: the first step is not 0 and the peak comes a step early).
        - *WSD's warmup from 0* instead of from the floor, *an unknown decay shape treated as linear*, and *1-sqrt
          written as $\sqrt{1-p}$*.
        - *An inverse square root of $t/W$ without the square root* (a $1/t$ decay).
        - *An absolute learning rate returned as the `LambdaLR` factor* (the lr becomes $\eta^2$), or *the factor
          divided by the group's current lr* (which the scheduler itself keeps changing).

        **What production code does.** Hugging Face `Trainer` builds the scheduler from `lr_scheduler_type`
        (`"cosine"`, `"cosine_with_min_lr"`, `"warmup_stable_decay"`, `"inverse_sqrt"`) through
        `get_scheduler`, always as a `LambdaLR`, and calls `scheduler.step()` after every optimizer step (not every
        micro-batch under gradient accumulation). Megatron-LM's `OptimizerParamScheduler` computes the lr directly from
        the number of consumed samples or steps, with `lr_decay_style` `cosine`, `linear`, `inverse-square-root` or
        `WSD` (with `lr_wsd_decay_style` `exponential`, `linear`, `cosine` or `minus_sqrt`), and clamps at
        `min_lr` past `lr_decay_iters`. nanoGPT's `get_lr(it)` has the same three pieces and the floor; its warmup is
        `learning_rate * (it + 1) / (warmup_iters + 1)`, so its first step is not wasted at 0.
        Because all of them are pure functions of the step, resuming a run only restores the step counter;
        `LambdaLR.state_dict()` saves `last_epoch` and `base_lrs`, not the lambda itself. Resume in this order: build
        the optimizer and the scheduler, *then* load both state dicts. Building the scheduler after loading the
        optimizer's state overwrites the restored lr with `factor(0)` until the next `scheduler.step()`.
    """)
    lesson.mistakes()
    return lesson
