"""Source of 00_Prerequisites/06_Grad_Hygiene.ipynb (build with `python -m llm_algo build p00.grad_hygiene`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p00.grad_hygiene",
        path="00_Prerequisites/06_Grad_Hygiene.ipynb",
        title_en="Gradient hygiene: no_grad, inference_mode, frozen weights, accumulation, EMA",
        title_zh="梯度卫生：no_grad、inference_mode、冻结参数、梯度累积与 EMA",
        difficulty="easy",
        device="cpu",
        minutes=40,
        prerequisites=["p00.autograd"],
    )
    lesson.title(
        intro=r"""
        Autograd records every operation on a tensor that requires a gradient, and `.grad` *adds* what each
        `backward()` computes. Both are what training needs and what everything else must switch off. An
        evaluation loop that forgets `torch.no_grad()` keeps every activation of every batch alive for a backward that
        never comes; a logging line `total_loss += loss` chains all steps' graphs together; a fine-tuning script that
        freezes `layers.1` with `name.startswith("layers.1")` also freezes `layers.10` to `layers.19`; an
        accumulation loop that calls `zero_grad()` inside the loop trains on its last micro-batch only. And the EMA
        of the weights (kept by Stable Diffusion, by many RL and distillation setups, and by TRL's `SyncRefModelCallback`
        for its reference model) is an in-place update that autograd must not see.

        **You will implement** `predict` (eval mode plus `torch.inference_mode`, the training flag restored),
        `freeze_for_finetuning` (module-boundary prefixes), `accumulate_and_step` (micro-batches that add up to
        exactly one full-batch step) and `ema_update`. **Graded against** the same model in `eval()` mode,
        `Tensor.is_inference()`, `named_parameters`, a full-batch step of the same `torch.optim` optimizer on a copy
        of the model, and `torch.optim.swa_utils.AveragedModel` with `get_ema_multi_avg_fn`.

        **本节要点**
        - `torch.no_grad()`：不记录计算图，结果 `requires_grad=False`；`torch.inference_mode()` 更彻底（无版本计数），得到的推理张量不能再进入 autograd。
        - `x.detach()` 返回共享存储、脱离计算图的张量；记录损失用 `loss.item()` 或 `loss.detach()`，否则会把每一步的计算图串起来导致内存泄漏。
        - 评估时同时需要 `model.eval()`（关闭 dropout 等）和 `no_grad/inference_mode`，两者作用不同；结束后恢复原来的 `training` 状态。
        - 冻结参数：`p.requires_grad_(False)`，其 `.grad` 保持 `None`；按模块边界匹配名字（`name == p or name.startswith(p + ".")`），否则 `layers.1` 会误配 `layers.10`。
        - `.grad` 会累加：先 `zero_grad()`，每个微批 (micro-batch) 的损失除以微批数再 `backward()`，最后只 `step()` 一次；在循环内清零梯度是典型错误。
        - EMA：`ema ← decay·ema + (1−decay)·θ`，在 `torch.no_grad()` 下原地更新（否则对需要梯度的叶子张量原地修改会报错）。
        {易错点}
        """
    )
    lesson.md(r"""
        ## 1. Four switches and what each one does

        | tool | what it changes | the result | use it for |
        | --- | --- | --- | --- |
        | `model.eval()` / `model.train()` | the module flag `training`: dropout off, BatchNorm uses running stats | nothing about gradients | evaluation, generation |
        | `with torch.no_grad():` | no graph is recorded inside | tensors with `requires_grad=False` | evaluation, in-place weight updates (optimizers, EMA) |
        | `with torch.inference_mode():` | no graph **and** no version counters or views tracking | *inference tensors*, which autograd refuses later | serving, generation: a little faster than `no_grad` |
        | `x.detach()` | a new tensor sharing `x`'s storage, cut from the graph | `requires_grad=False` | logging, targets that must not receive gradients (DPO's reference log-probs) |
        | `p.requires_grad_(False)` | `p` is no longer a trainable leaf | `p.grad` stays `None` | frozen weights in fine-tuning (LoRA freezes the whole base model) |

        `eval()` and `no_grad()` are independent: `no_grad` alone leaves dropout on (a noisy evaluation), `eval()` alone
        records the whole graph (for a 7B model at 4k tokens, gigabytes of activations kept for nothing). Evaluation
        needs both, and must put the flag back as it found it: `model.train(was_training)`.

        The cost of the graph is concrete: during a forward pass with gradients on, every layer saves the inputs its
        backward needs. The demo below measures the bytes saved for the backward of a small MLP with
        `torch.autograd.graph.saved_tensors_hooks`.
    """)
    lesson.setup(r"""
        import copy

        import matplotlib.pyplot as plt
        import torch
        import torch.nn as nn
        import torch.nn.functional as F


        class TinyLM(nn.Module):
            # An embedding, `num_layers` residual MLP layers with dropout, an output head: names like layers.10.fc.weight.

            def __init__(self, vocab_size=32, dim=16, num_layers=12, dropout=0.1):
                super().__init__()
                self.embed = nn.Embedding(vocab_size, dim)
                self.layers = nn.ModuleList(nn.ModuleDict({"fc": nn.Linear(dim, dim)}) for _ in range(num_layers))
                self.dropout = nn.Dropout(dropout)
                self.lm_head = nn.Linear(dim, vocab_size, bias=False)

            def forward(self, ids):                      # ids (B, T) int64 -> logits (B, T, V)
                h = self.embed(ids)                      # (B, T, D)
                for layer in self.layers:
                    h = h + self.dropout(torch.tanh(layer["fc"](h)))
                return self.lm_head(h)
    """)
    lesson.code(r"""
        def saved_bytes(fn):
            total = 0
            def pack(t):
                nonlocal total
                total += t.numel() * t.element_size()
                return t
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                fn()
            return total

        model = TinyLM(vocab_size=1000, dim=256, num_layers=12)
        ids = torch.randint(0, 1000, (8, 128))
        rows = {"grad on (training)": saved_bytes(lambda: model(ids))}
        with torch.no_grad():
            rows["torch.no_grad()"] = saved_bytes(lambda: model(ids))
        with torch.inference_mode():
            rows["torch.inference_mode()"] = saved_bytes(lambda: model(ids))
        fig, ax = plt.subplots(figsize=(7, 2.6))
        ax.barh(list(rows), [v / 2**20 for v in rows.values()], color=["tab:red", "tab:green", "tab:green"])
        ax.set_xlabel("MiB saved for backward (B=8, T=128, 12 layers of 256)")
        for i, v in enumerate(rows.values()):
            ax.text(v / 2**20, i, f" {v / 2**20:.1f} MiB", va="center")
        ax.set_xlim(0, 1.3 * max(rows.values()) / 2**20)
        plt.tight_layout(); plt.show()
    """)
    lesson.md(r"""
        ## 2. Exercise `freeze_and_predict`

        `predict(model, *inputs)` runs `model(*inputs)` in eval mode under `torch.inference_mode()` and returns its
        output; the model's `training` flag is restored afterwards, **also when the model raises**
        (`try`/`finally`).

        `freeze_for_finetuning(model, train_prefixes)` makes trainable exactly the parameters whose name is one of the
        prefixes or starts with a prefix followed by a dot (`"layers.1"` selects `layers.1.fc.weight`, never
        `layers.10.fc.weight`), freezes all others, and returns the trainable names in `named_parameters()` order. A
        prefix that selects nothing is a typo that would freeze the whole model: refuse it with `ValueError` naming
        it, before changing anything. The likely mistakes: `name.startswith(prefix)`, and setting only
        `requires_grad=False` (a second call with other prefixes must unfreeze too).
    """)
    lesson.exercise(
        "freeze_and_predict",
        r'''
        def predict(model: nn.Module, *inputs):
            """model(*inputs) in eval mode under torch.inference_mode(); model.training restored, even on an error."""
            # TODO: remember model.training, switch to eval, run under inference_mode, restore in a finally block
            ### BEGIN SOLUTION
            was_training = model.training
            model.eval()
            try:
                with torch.inference_mode():
                    return model(*inputs)
            finally:
                model.train(was_training)
            ### END SOLUTION


        def freeze_for_finetuning(model: nn.Module, train_prefixes: list[str]) -> list[str]:
            """Trainable: names equal to a prefix or starting with prefix + '.'; frozen: the rest. Returns trainable names."""
            # TODO: decide per name; refuse (ValueError) any prefix that selects no parameter, before changing anything
            # TODO: set requires_grad on every parameter (True or False)
            ### BEGIN SOLUTION
            def selected(name, prefix):
                return name == prefix or name.startswith(prefix + ".")

            names = [name for name, _ in model.named_parameters()]
            unused = [prefix for prefix in train_prefixes if not any(selected(name, prefix) for name in names)]
            if unused:
                raise ValueError(f"prefixes {unused} select no parameter of the model")
            trainable = []
            for name, parameter in model.named_parameters():
                keep = any(selected(name, prefix) for prefix in train_prefixes)
                parameter.requires_grad_(keep)
                if keep:
                    trainable.append(name)
            return trainable
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 3. Gradient accumulation: one step from several micro-batches

        A batch of $B$ sequences may not fit in memory; $k$ micro-batches of $B/k$ do. Since `.grad` adds, running
        `backward()` on each micro-batch's loss **divided by $k$** leaves in `.grad` the gradient of the full batch's
        mean loss (for micro-batches of equal size; when they hold different numbers of tokens the weights differ,
        the subject of [p02.grad_accum_clip](../02_PyTorch_Algorithms/16_Grad_Accum_Clip.ipynb)):

        $$
        \nabla_\theta \frac{1}{B}\sum_{i=1}^{B} \ell_i = \sum_{j=1}^{k} \nabla_\theta \Big(\frac{1}{k} \cdot
        \frac{1}{B/k} \sum_{i \in \text{micro}_j} \ell_i \Big) .
        $$

        The order is fixed: `zero_grad()` **once**, then forward/backward per micro-batch, then one `step()`. Each
        `backward()` frees its micro-batch's graph, which is where the memory saving comes from. The usual mistakes:
        `zero_grad()` inside the loop (only the last micro-batch survives), no division by $k$ (a $k$ times larger
        step), `step()` inside the loop ($k$ steps on partial gradients), and logging `losses.append(loss)`, which
        keeps every micro-batch's graph alive until the list dies.
    """)
    lesson.md(r"""
        ## 4. Exercise `accumulate_and_step`

        `accumulate_and_step(model, optimizer, micro_batches, loss_fn)`: `micro_batches` is a list of `(inputs,
        targets)` with the same number of rows each; `loss_fn(model(inputs), targets)` is a mean loss. Leave in `.grad`
        the gradient of the mean loss over all rows (stale gradients from before must not count), take one optimizer
        step, and return the list of the micro-batches' (undivided) losses as Python floats. Refuse an empty list, or
        micro-batches of different sizes, with `ValueError`.
    """)
    lesson.exercise(
        "accumulate_and_step",
        r'''
        def accumulate_and_step(model, optimizer, micro_batches, loss_fn) -> list[float]:
            """One optimizer step on the mean loss of all micro-batches (equal sizes); returns their losses as floats."""
            # TODO: refuse an empty list and unequal micro-batch sizes
            # TODO: clear the gradients once; per micro-batch: loss / k, backward, log loss.item(); then one step
            ### BEGIN SOLUTION
            if not micro_batches:
                raise ValueError("no micro-batches")
            sizes = {len(inputs) for inputs, _ in micro_batches}
            if len(sizes) != 1:
                raise ValueError(f"micro-batches must have equal sizes, got {sorted(sizes)}")
            k = len(micro_batches)
            optimizer.zero_grad(set_to_none=True)
            losses = []
            for inputs, targets in micro_batches:
                loss = loss_fn(model(inputs), targets)        # mean over this micro-batch
                (loss / k).backward()                         # .grad += its share; the graph is freed
                losses.append(loss.item())                    # a float: no graph kept alive
            optimizer.step()
            return losses
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 5. An exponential moving average of the weights

        An EMA model keeps, next to the trained weights $\theta_t$, a smoothed copy

        $$
        \bar\theta_t = \beta\, \bar\theta_{t-1} + (1 - \beta)\, \theta_t, \qquad \beta \in [0, 1]
        $$

        (typically $\beta = 0.999$ to $0.9999$: an average over the last $1/(1-\beta)$ steps). It is evaluated instead
        of $\theta$ because it is less noisy. Three details: the update is **in place** on the EMA model's parameters,
        so it must run under `torch.no_grad()` (an in-place write into a leaf that requires a gradient is an error,
        and outside `no_grad` it would be recorded); **buffers** (BatchNorm's running statistics, RoPE caches) are
        copied, not averaged; and the two models must have the same parameter names, which is worth checking rather
        than zipping two lists blindly. `torch.lerp(a, b, w) = a + w (b - a)` is exactly this update with
        $w = 1 - \beta$.
    """)
    lesson.md(r"""
        ## 6. Exercise `ema_update`

        `ema_update(ema_model, model, decay)`: update every parameter of `ema_model` in place (the same tensor
        objects) as above, copy every buffer of `model` into `ema_model`'s, and leave autograd out of it (the EMA
        parameters may have `requires_grad=True`). Refuse a `decay` outside `[0, 1]` and models whose parameter or
        buffer names differ with `ValueError`. The likely mistakes: no `no_grad`, the weights swapped ($\beta\theta +
        (1-\beta)\bar\theta$), and stale buffers.
    """)
    lesson.exercise(
        "ema_update",
        r'''
        def ema_update(ema_model: nn.Module, model: nn.Module, decay: float) -> None:
            """In place: ema_param = decay * ema_param + (1 - decay) * param; buffers copied."""
            # TODO: refuse decay outside [0, 1]; refuse different parameter or buffer names
            # TODO: under torch.no_grad(): lerp (or mul_/add_) every parameter, copy_ every buffer
            ### BEGIN SOLUTION
            if not 0.0 <= decay <= 1.0:
                raise ValueError(f"decay must lie in [0, 1], got {decay}")
            ema_params, params = dict(ema_model.named_parameters()), dict(model.named_parameters())
            ema_buffers, buffers = dict(ema_model.named_buffers()), dict(model.named_buffers())
            if ema_params.keys() != params.keys() or ema_buffers.keys() != buffers.keys():
                raise ValueError("ema_model and model must have the same parameter and buffer names")
            with torch.no_grad():
                for name, ema_param in ema_params.items():
                    ema_param.lerp_(params[name], 1.0 - decay)
                for name, ema_buffer in ema_buffers.items():
                    ema_buffer.copy_(buffers[name])
            ### END SOLUTION
    ''',
    )
    lesson.code(r"""
        # The EMA of a noisy trajectory: a parameter that drifts from 0 to 1 while SGD noise shakes it.
        torch.manual_seed(0)
        steps = 600
        target = torch.linspace(0, 1, steps)
        raw = target + 0.3 * torch.randn(steps)
        fig, ax = plt.subplots(figsize=(7, 3))
        ax.plot(raw, lw=0.5, color="lightgrey", label="trained weight")
        for decay in (0.9, 0.99):
            live, ema = nn.Linear(1, 1, bias=False), nn.Linear(1, 1, bias=False)
            with torch.no_grad():
                live.weight.fill_(raw[0]); ema.weight.fill_(raw[0])
            path = []
            for value in raw:
                with torch.no_grad():
                    live.weight.fill_(value)
                try:
                    ema_update(ema, live, decay)
                except NotImplementedError:
                    with torch.no_grad():
                        ema.weight.lerp_(live.weight, 1 - decay)
                path.append(ema.weight.item())
            ax.plot(path, label=f"EMA, decay {decay} (lags ~{1 / (1 - decay):.0f} steps)")
        ax.plot(target, "k--", lw=1, label="underlying trend")
        ax.set_xlabel("step"); ax.set_ylabel("weight"); ax.legend(fontsize=8)
        plt.tight_layout(); plt.show()
    """)
    lesson.stop()
    lesson.md(r"""
        ## 7. Reading the solutions

        **`predict`.** `try`/`finally` restores the flag on every exit, the `return` included. `inference_mode`
        rather than `no_grad` because nothing here will ever need autograd; its outputs are inference tensors
        (`out.is_inference()`), which autograd refuses if you later try to use them in training: clone them first.
        *Mistakes*: forgetting `eval()` (dropout noise in every
        evaluation), leaving the model in eval mode (the rest of training runs without dropout), `no_grad` where
        `inference_mode` was asked. Production: Hugging Face's `generate` is decorated with `@torch.no_grad()`; vLLM
        runs its model runner under `torch.inference_mode()`.

        **`freeze_for_finetuning`.** The prefix test at a module boundary is the whole point; validation comes first
        so a bad call changes nothing. *Mistakes*: `startswith(prefix)`, never re-enabling gradients. Production: PEFT
        freezes every base weight (`requires_grad_(False)`) and marks only adapters trainable, with the same kind of
        name matching (`target_modules`, which matches whole name components); optimizers are then built on
        `[p for p in model.parameters() if p.requires_grad]`, so that frozen weights get no Adam state either
        (8 bytes per parameter saved: 56 GB for a 7B model).

        **`accumulate_and_step`.** `loss / k` before `backward`, `loss.item()` for the log, one `zero_grad` and one
        `step`. *Mistakes*: `zero_grad` inside the loop, no `/ k`, `step` inside the loop, stale gradients from a
        previous call, tensors in the log. Production: Hugging Face `Trainer` (`gradient_accumulation_steps`) divides
        by the token count of the whole accumulated batch since transformers 4.46 (the fix of the bug that the
        unequal-sizes case causes), and under DDP it skips the gradient all-reduce of all but the last micro-batch
        (`model.no_sync()`).

        **`ema_update`.** `lerp_` is one fused read-modify-write per tensor; `copy_` keeps the buffers' tensor objects
        too. *Mistakes*: no `no_grad` (the in-place write into a leaf that requires grad raises), swapped weights,
        stale buffers, pairing tensors by position. Production: `torch.optim.swa_utils.AveragedModel` with
        `get_ema_multi_avg_fn` (the checks' reference) uses `torch._foreach_lerp_` over all tensors at once; timm's
        `ModelEmaV3` and diffusers' `EMAModel` add a warm-up of the decay. Next:
        [p00.module_basics](07_Module_Basics.ipynb) looks at parameters, buffers and `state_dict` in depth.
    """)
    lesson.mistakes()
    return lesson
