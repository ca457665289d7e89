"""Source of 02_PyTorch_Algorithms/17_Mixed_Precision.ipynb (build with `python -m llm_algo build p02.mixed_precision`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p02.mixed_precision",
        path="02_PyTorch_Algorithms/17_Mixed_Precision.ipynb",
        title_en="Mixed precision: dynamic loss scaling and fp32 master weights",
        title_zh="混合精度训练：动态损失缩放与 FP32 主权重",
        difficulty="medium",
        device="cpu",
        minutes=70,
        prerequisites=["p00.debugging", "p02.adamw", "p02.grad_accum_clip"],
    )
    lesson.title(
        intro=r"""
        **本节要点**
        - fp16 只有 5 位指数：最大 65504，最小正规数约 $6.1\times10^{-5}$，更小的梯度会下溢（underflow）为 0；bf16 有与 fp32 相同的 8 位指数，但只有 8 位有效位。
        - 动态损失缩放（dynamic loss scaling）：反向传播前把损失乘以 $S$（默认 $2^{16}$），梯度随之放大、避开下溢；更新前再除以 $S$。
        - 若任何梯度出现 inf/NaN：跳过这一步（优化器完全不动，包括 AdamW 的步数），$S$ 乘以回退因子 0.5，连续成功计数清零；连续 $N$ 步（默认 2000）无溢出则 $S$ 乘以 2。
        - FP32 主权重（master weights）：模型参数用 bf16/fp16 计算，优化器在 fp32 副本上更新，再四舍五入拷回模型；否则小于 bf16 分辨率的更新会被直接舍掉（更新停滞）。
        - 每个参数 16 字节：fp16/bf16 参数 2 + 梯度 2 + fp32 主权重 4 + Adam 的 $m$、$v$ 各 4（ZeRO 论文）。
        {易错点}

        fp16 training needs help: its largest number is 65504 and its smallest normal one $6.1\times10^{-5}$, and the
        gradients of activations deep in a network are often smaller than that; they flush to zero and the layer stops
        learning. Micikevicius et al. (2018, *Mixed Precision Training*) introduced the two fixes every fp16 recipe
        still uses: multiply the loss by a large **loss scale** $S$ so that the gradients land in fp16's range, and keep
        an **fp32 master copy** of the weights that the optimizer updates. bf16 (Google Brain's format, on TPUs, A100
        and later GPUs) has fp32's exponent range and needs no loss scale, but its 8 significant bits make the second
        problem worse: just below 1.0 representable bf16 numbers are $2^{-8} \approx 0.0039$ apart, so an AdamW update of
        $3\times10^{-4}$ applied to a bf16 weight of 1.0 rounds away entirely. That is why Megatron-LM, DeepSpeed and
        PyTorch FSDP's mixed precision keep the optimizer's copy of the weights in fp32, and why ZeRO counts 16 bytes
        per parameter (Rajbhandari et al., 2020).

        **You will implement** `DynamicLossScaler` (scale the loss, unscale the gradients, skip the step on inf/NaN and
        back off, grow after $N$ clean steps) and `MasterWeights` (an fp32 copy of bf16/fp16 parameters that an
        optimizer updates, rounded back into the model after every step). **Graded against** `torch.amp.GradScaler`
        (which runs on the CPU in torch 2.13) step for step: its scale, its growth tracker, which steps it skips, and
        the parameters and AdamW state it leaves; a real fp16 overflow; closed forms for the scale sequence; and
        `torch.optim.AdamW` on fp32 parameters fed the same gradients (bit for bit).
    """
    )
    lesson.md(r"""
        ## 1. What fp16 and bf16 can hold

        | format | exponent bits | significant bits | largest | smallest normal | spacing just above 1 |
        | --- | --- | --- | --- | --- | --- |
        | fp32 | 8 | 24 | $3.4\times10^{38}$ | $1.2\times10^{-38}$ | $2^{-23} \approx 1.2\times10^{-7}$ |
        | fp16 | 5 | 11 | 65504 | $6.1\times10^{-5}$ (subnormals down to $6\times10^{-8}$) | $2^{-10} \approx 9.8\times10^{-4}$ |
        | bf16 | 8 | 8 | $3.4\times10^{38}$ | $1.2\times10^{-38}$ | $2^{-7} \approx 7.8\times10^{-3}$ |

        `torch.finfo` gives every entry (the cell below prints them). Two failure modes follow.

        **Gradient underflow (fp16).** A gradient of $10^{-8}$ is 0 in fp16. Scaling the loss by $S$ scales every
        gradient by $S$ (the chain rule is linear in the incoming gradient), so $S = 2^{16}$ moves it to
        $6.6\times10^{-4}$, where fp16 still has 10 bits of precision. Powers of two are used because multiplying and
        dividing by them is exact in binary floating point: unscaling returns exactly the gradient that was computed,
        unless something overflowed.

        **Update stagnation (bf16 and fp16).** $w \leftarrow w - \eta\,u$ in bf16 leaves $w$ unchanged whenever
        $|\eta u| < |w| \cdot 2^{-9}$ (half the spacing). An fp32 master copy holds the sum of many small updates until
        they are large enough to change the bf16 weight.

        ## 2. Dynamic loss scaling

        A large $S$ avoids underflow; too large and the scaled gradients overflow to `inf`. The right $S$ changes
        during training, so it is adjusted on the fly. With backoff factor $b = 0.5$, growth factor $g = 2$ and growth
        interval $N$ (PyTorch's defaults: $S_0 = 2^{16}$, $N = 2000$), at every iteration:

        1. backward of $S \cdot L$ (the scaled loss computed in at least fp32: $S \cdot L$ for a loss of 2 is
           131072, already `inf` in fp16);
        2. unscale: $g_i \leftarrow g_i / S$ for every gradient, and note whether any entry is `inf` or `NaN`;
        3. overflow: **skip** `optimizer.step()` (no update, no AdamW step count, no weight decay), $S \leftarrow b S$,
           tracker $\leftarrow 0$;
           no overflow: `optimizer.step()`, tracker $\leftarrow$ tracker $+ 1$, and when it reaches $N$:
           $S \leftarrow g S$, tracker $\leftarrow 0$.

        A skipped step is cheap insurance: an overflow means the gradient is garbage, and one step fewer changes
        nothing. With $N = 2000$ the scale tries to double every 2000 clean steps, overflows, halves, and so hovers
        just below the largest safe value. `torch.amp.GradScaler` also refuses to grow past fp32's range and keeps the
        scale as a float32 tensor on the device (to avoid a CPU-GPU sync per step); here it is a Python float.

        ## 3. fp32 master weights

        The model's parameters $w^{16}$ (bf16 or fp16, $P$ of them) compute the forward and backward, so the
        gradients $g^{16}$ arrive in 16 bits. The optimizer owns fp32 copies $w^{32}$ and its state. Each step:
        $g^{32} = \mathrm{float}(g^{16})$, the optimizer updates $w^{32}$, and $w^{16} \leftarrow \mathrm{round}(w^{32})$.
        Memory per parameter: 2 (weights) + 2 (gradients) + 4 (master) + 8 (AdamW's $m$, $v$) = 16 bytes, against
        4 + 4 + 8 = 16 for plain fp32 training. The saving is in activations and in matmul speed, not in the optimizer.
    """)
    lesson.setup(r"""
        import copy
        import math

        import matplotlib.pyplot as plt
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
    """)
    lesson.code(r"""
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            info = torch.finfo(dtype)
            print(f"{str(dtype):15} max {info.max:.4g}  smallest normal {info.tiny:.3g}  "
                  f"smallest subnormal {info.smallest_normal * info.eps:.3g}  spacing above 1: {info.eps:.3g}")
        small = torch.tensor([1e-4, 1e-6, 1e-8])
        print("1e-4, 1e-6, 1e-8 in fp16:", small.half().tolist(), " times 2**16 in fp16:", (small * 2**16).half().tolist())
        print("bf16(1.0) - 3e-4 =", (torch.tensor(1.0, dtype=torch.bfloat16) - 3e-4).item(), "(the update is lost)")
    """)
    lesson.md(r"""
        ### Where the gradients of a nearly fitted network lie

        A 6-layer tanh MLP whose targets are its own outputs plus noise of $10^{-3}$ (the small residuals of late
        training). Its float32 parameter gradients, on a log scale, against fp16's smallest subnormal ($2^{-24}$) and
        smallest normal number ($2^{-14}$); then the same backward pass run in fp16 with several loss scales, counting
        the gradient entries that came out exactly 0 although their float32 value is not.
    """)
    lesson.code(r"""
        torch.manual_seed(0)
        layers = []
        for _ in range(6):
            layers += [nn.Linear(64, 64), nn.Tanh()]
        net = nn.Sequential(*layers, nn.Linear(64, 1))
        x = torch.randn(256, 64)
        y = net(x).detach() + 1e-3 * torch.randn(256, 1)
        F.mse_loss(net(x), y).backward()
        grad32 = torch.cat([p.grad.flatten() for p in net.parameters()])

        half = copy.deepcopy(net).half()
        for scale in (1.0, 2.0**8, 2.0**16):
            half.zero_grad(set_to_none=True)
            (F.mse_loss(half(x.half()).float(), y) * scale).backward()
            grad16 = torch.cat([p.grad.flatten().float() for p in half.parameters()]) / scale
            lost = ((grad16 == 0) & (grad32 != 0)).float().mean().item()
            print(f"loss scale 2**{int(math.log2(scale)):2d}: {100 * lost:5.2f}% of the gradient entries flushed to 0")

        plt.figure(figsize=(6.5, 3.2))
        plt.hist(torch.log2(grad32.abs().clamp_min(2.0**-60)).numpy(), bins=80, color="C0")
        plt.axvline(-24, color="C3", ls="--", label="fp16 smallest subnormal 2^-24")
        plt.axvline(-14, color="C1", ls="--", label="fp16 smallest normal 2^-14")
        plt.axvline(-24 - 16, color="C2", ls=":", label="what 2^-24 means at loss scale 2^16")
        plt.xlabel("log2 |gradient| (float32)"); plt.ylabel("entries"); plt.legend(fontsize=7)
        plt.title("parameter gradients of a nearly fitted 6-layer MLP"); plt.tight_layout(); plt.show()
    """)
    lesson.md(r"""
        ## 4. Exercise `DynamicLossScaler`

        The iteration is `loss = ...; scaler.scale_loss(loss).backward(); scaler.step(optimizer)`, and `step` does
        items 2 and 3 above for every parameter of every param group of `optimizer` that has a gradient. It returns
        whether the optimizer stepped. Invalid settings raise `ValueError`: $S_0 \le 0$, $g \le 1$,
        $b \notin (0, 1)$, $N < 1$.
    """)
    lesson.exercise(
        "DynamicLossScaler",
        r'''
        class DynamicLossScaler:
            """Dynamic loss scaling with torch.amp.GradScaler's rules. `scale` (float) and `growth_tracker` (int, clean
            steps since the last change of the scale) are public."""

            def __init__(self, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000):
                # TODO: refuse invalid settings with ValueError; keep the settings; scale = init_scale, tracker 0
                ### BEGIN SOLUTION
                if not init_scale > 0 or not growth_factor > 1 or not 0 < backoff_factor < 1 or growth_interval < 1:
                    raise ValueError(f"invalid loss-scaler settings: {init_scale=}, {growth_factor=}, "
                                     f"{backoff_factor=}, {growth_interval=}")
                self.scale = float(init_scale)
                self.growth_factor, self.backoff_factor = growth_factor, backoff_factor
                self.growth_interval = int(growth_interval)
                self.growth_tracker = 0
                ### END SOLUTION

            def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
                """loss * scale, computed in at least float32 (a float64 loss stays float64)."""
                # TODO: upcast a 16-bit loss before multiplying
                ### BEGIN SOLUTION
                return loss.to(torch.promote_types(loss.dtype, torch.float32)) * self.scale
                ### END SOLUTION

            @torch.no_grad()
            def step(self, optimizer: torch.optim.Optimizer) -> bool:
                """Unscale every gradient of the optimizer's parameters in place; step the optimizer only if all are
                finite; update scale and growth_tracker. Returns True when the optimizer stepped."""
                # TODO: divide each existing grad by the scale and find out whether any entry is inf or NaN
                # TODO: overflow: skip the step, back off, reset the tracker
                # TODO: else: step, count the clean step, grow the scale every growth_interval clean steps
                ### BEGIN SOLUTION
                found_inf = False
                for group in optimizer.param_groups:
                    for p in group["params"]:
                        if p.grad is None:
                            continue
                        p.grad.div_(self.scale)                          # exact: the scale is a power of two
                        found_inf = found_inf or not bool(torch.isfinite(p.grad).all())
                if found_inf:
                    self.scale *= self.backoff_factor                   # skip the step entirely
                    self.growth_tracker = 0
                    return False
                optimizer.step()
                self.growth_tracker += 1
                if self.growth_tracker == self.growth_interval:
                    self.scale *= self.growth_factor
                    self.growth_tracker = 0
                return True
                ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 5. Exercise `MasterWeights`

        `MasterWeights(params, make_optimizer)` takes the model's 16-bit parameters (the same `Parameter` objects stay
        in the model and are updated in place), makes an fp32 copy of each, and builds the optimizer on the copies:
        `self.optimizer = make_optimizer(self.master)`. `step()` upcasts the model's gradients into the masters'
        `.grad` (a parameter without a gradient gets none, so the optimizer skips it), steps the optimizer, rounds the
        masters back into the model's parameters, and clears the model's gradients (`None`). A parameter that is not
        fp16 or bf16, or an empty list, raises `ValueError`: wrapping fp32 weights only doubles their memory.
    """)
    lesson.exercise(
        "MasterWeights",
        r'''
        class MasterWeights:
            """fp32 master copies of 16-bit model parameters; the optimizer updates the copies."""

            def __init__(self, params, make_optimizer):
                # TODO: keep the model's parameters (refuse an empty list and anything but fp16/bf16)
                # TODO: self.master: one fp32 leaf tensor per parameter, a copy (not a view) of its values
                # TODO: self.optimizer = make_optimizer(self.master)
                ### BEGIN SOLUTION
                self.params = list(params)
                if not self.params:
                    raise ValueError("no parameters")
                for p in self.params:
                    if p.dtype not in (torch.float16, torch.bfloat16):
                        raise ValueError(f"master weights are for fp16/bf16 parameters, got {p.dtype}")
                self.master = [nn.Parameter(p.detach().to(torch.float32)) for p in self.params]  # a new fp32 copy
                self.optimizer = make_optimizer(self.master)
                ### END SOLUTION

            @torch.no_grad()
            def step(self) -> None:
                """grads (16-bit) -> fp32 master grads; optimizer step on the masters; masters rounded into the model's
                parameters in place; model grads set to None."""
                # TODO: copy the grads up (None stays None), step, copy the weights down, clear the model's grads
                ### BEGIN SOLUTION
                for p, master in zip(self.params, self.master):
                    master.grad = None if p.grad is None else p.grad.to(torch.float32)
                self.optimizer.step()
                for p, master in zip(self.params, self.master):
                    p.copy_(master)                                      # round to nearest into bf16/fp16
                    p.grad = None
                ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### Small updates: bf16 alone against bf16 with fp32 master weights

        A bf16 weight of 1.0 gets 2000 SGD steps of $-10^{-4}$ each; the exact result is 0.8. Updated in bf16
        directly, every step rounds away. Through your `MasterWeights`, the fp32 copy accumulates them, and the bf16
        weight moves each time the copy crosses a rounding boundary.
    """)
    lesson.code(r"""
        steps, lr = 2000, 1e-4
        pure = nn.Parameter(torch.ones(1, dtype=torch.bfloat16))
        pure_sgd = torch.optim.SGD([pure], lr=lr)
        pure_curve, master_curve, model_curve = [], [], []
        try:
            weight = nn.Parameter(torch.ones(1, dtype=torch.bfloat16))
            master = MasterWeights([weight], lambda ps: torch.optim.SGD(ps, lr=lr))
        except NotImplementedError:
            master = None
        for _ in range(steps):
            pure.grad = torch.ones(1, dtype=torch.bfloat16)
            pure_sgd.step()
            pure_curve.append(pure.detach().item())
            if master is not None:
                weight.grad = torch.ones(1, dtype=torch.bfloat16)
                master.step()
                master_curve.append(master.master[0].detach().item())
                model_curve.append(weight.detach().item())
        plt.figure(figsize=(6.5, 3.4))
        plt.plot(pure_curve, label="bf16 weight updated in bf16")
        if master is not None:
            plt.plot(master_curve, label="fp32 master (yours)")
            plt.plot(model_curve, label="bf16 model weight (rounded master)", lw=0.8)
        plt.plot([1 - lr * (t + 1) for t in range(steps)], "k:", label="exact")
        plt.xlabel("step"); plt.ylabel("weight"); plt.legend(fontsize=8)
        plt.title("2000 updates of -1e-4 on a weight of 1.0"); plt.tight_layout(); plt.show()
    """)
    lesson.md(r"""
        ### fp16 training with both: the scale over time

        A small MLP whose forward and backward run in fp16 (parameters fp16), trained with your `MasterWeights`
        (AdamW on the fp32 copies) and your `DynamicLossScaler` stepping the master optimizer after the gradients are
        upcast. The scaler starts at $2^{24}$ with a growth interval of 50, so it overflows at first, backs off to a
        safe scale, and then probes upwards every 50 clean steps. As the loss falls the gradients shrink, so the
        largest safe scale rises, and the scale follows it up.
    """)
    lesson.code(r"""
        class UpcastGrads:
            '''The optimizer the scaler steps: fp16 grads -> fp32 masters, then AdamW, then rounding back.'''
            def __init__(self, master):
                self.master, self.param_groups = master, master.optimizer.param_groups
            def step(self):
                self.master.optimizer.step()
                for p, m in zip(self.master.params, self.master.master):
                    p.copy_(m)

        try:
            torch.manual_seed(0)
            net = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 1)).half()
            master = MasterWeights(list(net.parameters()), lambda ps: torch.optim.AdamW(ps, lr=1e-3))
            scaler = DynamicLossScaler(init_scale=2.0**24, growth_interval=50)
            w_true = torch.randn(16, 1)
            scales, losses, skipped = [], [], []
            for step in range(400):
                x = torch.randn(32, 16)
                loss = F.mse_loss(net(x.half()).float(), x @ w_true)
                for p in net.parameters():
                    p.grad = None
                scaler.scale_loss(loss).backward()
                for p, m in zip(master.params, master.master):  # upcast the scaled fp16 grads (inf stays inf)
                    m.grad = p.grad.float()
                scales.append(scaler.scale)
                if not scaler.step(UpcastGrads(master)):
                    skipped.append(step)
                losses.append(loss.item())
            fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.4))
            left.semilogy(scales, drawstyle="steps-post"); left.set_xlabel("step"); left.set_ylabel("loss scale S")
            left.set_title(f"{len(skipped)} skipped steps (first: {skipped[:6]})")
            right.semilogy(losses); right.set_xlabel("step"); right.set_ylabel("loss (fp16 forward)")
            fig.tight_layout(); plt.show()
        except NotImplementedError:
            print("DynamicLossScaler or MasterWeights is not attempted yet")
    """)
    lesson.stop()
    lesson.md(r"""
        ## 6. Reading the solutions

        **`DynamicLossScaler`.** `scale_loss` upcasts first: a 16-bit loss times $2^{16}$ overflows for any loss
        above 1, and `GradScaler.scale` avoids the same trap by multiplying with a float32 scale tensor. `step` unscales
        every gradient before looking at any of them, so that a skipped step still leaves true (if infinite)
        gradients, and a clean one leaves exactly the unscaled gradients that clipping or logging may read next. A
        division by a power of two is exact, so no rounding is added. On an overflow nothing else happens: no
        `optimizer.step()`, so AdamW's moments, its step count and the weight decay all stay where they were. The
        tracker counts *consecutive* clean steps; it restarts at 0 after a growth and after a backoff.

        **`MasterWeights`.** `p.detach().to(torch.float32)` allocates a new fp32 tensor (never a view of the 16-bit
        one), and the optimizer is built on the copies, so its state is fp32 too. `p.copy_(master)` rounds to nearest
        and writes into the model's own parameter, so the model, its hooks and any other references keep working.
        The copy-down happens after every step; rebuilding the masters from the rounded model weights would throw the
        accumulated small updates away, which is exactly the stagnation the masters exist to prevent.

        **The usual mistakes, and why they are wrong**:
        - *Stepping on an overflow* (only backing off), *not resetting the tracker after a backoff* (the scale grows
          again too soon), *growing every step*, *a tracker that is not reset after growth*.
        - *Unscaling with a multiplication by $S$*, *not unscaling at all*, *an unscaled loss* (no scaling), and
          *the scaled loss computed in fp16* (overflows).
        - *Masters that share memory with the model* (a view: nothing is fp32), *masters rebuilt from the model each
          step*, *grads not upcast*, *weights never copied back*, *model grads not cleared*.

        **What production code does.** PyTorch AMP on GPUs runs the forward under `torch.autocast` (matmuls in
        fp16/bf16, reductions and losses in fp32, parameters in fp32) with `torch.amp.GradScaler` for fp16; there the
        fp32 parameters *are* the masters. Megatron-LM's `Float16OptimizerWithFloat16Params` keeps fp16/bf16 model
        parameters and fp32 main parameters, with a `DynamicGradScaler` (initial scale $2^{32}$, window 1000, and a
        *hysteresis* of 2: it backs off only after two overflows). DeepSpeed's fp16 optimizer has the same knobs
        (`initial_scale_power` 16, `loss_scale_window` 1000, `hysteresis` 2, `min_loss_scale` 1). PyTorch FSDP's
        `MixedPrecision(param_dtype=torch.bfloat16)` keeps fp32 sharded parameters and casts them to bf16 for the
        forward. bf16 training (most LLMs since 2022) drops the loss scaler but keeps the fp32 masters; fp8 training
        (DeepSeek-V3, NVIDIA Transformer Engine) adds per-tensor or per-block scales, the same idea at finer grain.
    """)
    lesson.mistakes()
    return lesson
