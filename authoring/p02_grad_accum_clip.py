"""Source of 02_PyTorch_Algorithms/16_Grad_Accum_Clip.ipynb (build with `python -m llm_algo build p02.grad_accum_clip`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p02.grad_accum_clip",
        path="02_PyTorch_Algorithms/16_Grad_Accum_Clip.ipynb",
        title_en="Gradient accumulation and global-norm clipping",
        title_zh="梯度累积与全局范数裁剪",
        difficulty="medium",
        device="cpu",
        minutes=60,
        prerequisites=["p02.cross_entropy", "p02.adamw"],
    )
    lesson.title(
        intro=r"""
        **本节要点**
        - 梯度累积（gradient accumulation）：显存放不下大批次时，把一个全局批次拆成若干微批次（micro-batch），逐个前向、反向，梯度在 `.grad` 里相加，最后只做一次优化器更新。
        - 目标是与一次性处理整个大批次**完全相同**的梯度：损失要按全局批次的**有效 token 数**归一化，而不是“每个微批次取平均再除以微批次数”。
        - 当各微批次的有效 token 数不同（填充 padding、被屏蔽的提示词）时，后一种做法会给短序列过大的权重——这正是 2024 年 Hugging Face Trainer 的梯度累积 bug。
        - 全局范数裁剪（global-norm clipping）：把所有有梯度的参数看成一个向量，求其 $p$ 范数 $\|g\|$；若超过阈值 $c$，整体乘以 $c/(\|g\|+10^{-6})$，方向不变。
        - 没有梯度（`.grad is None`）的参数不参与范数、也不被修改；`inf` 范数是所有元素绝对值的最大值。
        {易错点}

        Llama 2 70B was trained with a global batch of 4M tokens (Touvron et al., 2023, §2.2): about 1000 sequences of
        4096 tokens. One H100 holds the activations of a handful of those sequences, so each data-parallel rank runs
        several **micro-batches** forward and backward, adds their gradients in `.grad`, and steps the optimizer once.
        The result must be the gradient of the *global* batch, or changing the number of micro-batches changes the
        training run. In October 2024 Unsloth showed that Hugging Face `Trainer` did not get this right: with padded
        sequences of different lengths, the loss with 16 accumulation steps was visibly higher than with one big batch,
        because each micro-batch's loss was a mean over its own tokens. Transformers v4.46 fixed it (PR #34191, with
        follow-up fixes in later releases) by passing the global token count (`num_items_in_batch`) into the loss.

        The same run clips the global gradient norm at 1.0 (Llama 2, GPT-3: Brown et al., 2020, Appendix B): a single
        batch with an outlier gradient would otherwise take over AdamW's moments, with $m$ pushing the weights in the
        outlier's direction for tens of steps and the inflated $v$ shrinking every useful step after it, a common
        start of loss spikes.

        **You will implement** gradient accumulation over padded micro-batches that equals one big batch, and
        `clip_grad_norm`, global-norm clipping of the parameters that have a gradient (any $p$, and $\infty$).
        **Graded against** one big batch through `F.cross_entropy` in float64 (gradients and loss),
        `torch.nn.utils.clip_grad_norm_` (norms 1, 2, 3 and inf, a frozen and an unused parameter, tiny gradients,
        float32 and bfloat16), and closed forms.
    """
    )
    lesson.md(r"""
        ## 1. The gradient of a big batch, a micro-batch at a time

        A language-model batch is $N$ sequences; the labels $y_{n,t}$ are the next tokens, or `ignore_index` (-100)
        where there is nothing to predict: padding, and in fine-tuning the prompt. With $\ell_{n,t}$ the cross-entropy of
        position $t$ of sequence $n$ and $\mathcal T$ the set of real (not ignored) positions, the loss that the
        optimizer sees is the **token mean**

        $$
        L = \frac{1}{|\mathcal T|} \sum_{(n,t) \in \mathcal T} \ell_{n,t},
        \qquad \nabla L = \sum_{k=1}^{K} \nabla\Bigl(\frac{1}{|\mathcal T|} \sum_{(n,t) \in \mathcal T_k} \ell_{n,t}\Bigr),
        $$

        where the batch is split into $K$ micro-batches with real positions $\mathcal T_k$. Gradients are linear, so
        running `backward()` on each micro-batch's **sum** divided by the **global** count $|\mathcal T|$ leaves exactly
        $\nabla L$ in `.grad` (backward adds into `.grad`). Each micro-batch's graph is freed after its backward, which is
        the whole point: the activation memory is that of one micro-batch.

        The tempting version divides each micro-batch's *mean* by $K$:
        $\frac1K \sum_k \frac{1}{|\mathcal T_k|} \sum_{\mathcal T_k} \ell$. It equals $L$ only when every
        $|\mathcal T_k|$ is the same. With one micro-batch of 10 real tokens and one of 990, a token of the first
        weighs 50 times its fair share, and how much each token counts then depends on how the batch was cut into
        micro-batches.

        Shapes: `input_ids (b, t)` long, `labels (b, t)` long (already shifted: `labels[:, i]` is the target of
        position `i`), `logits (b, t, V)`; micro-batches may have different `b` and `t`. Data parallelism adds one more
        level: the count $|\mathcal T|$ must be summed over all ranks (an all-reduce of one integer) before any
        backward, because DDP *averages* the ranks' gradients.

        ## 2. Global-norm clipping

        Treat all gradients as one vector $g$ (the concatenation of every parameter's `.grad`). Its $p$-norm is the
        $p$-norm of the per-tensor $p$-norms, $\|g\|_p = \bigl\|(\|g_1\|_p, \dots, \|g_m\|_p)\bigr\|_p$, and for
        $p = \infty$ the largest $|g_i|$. With a threshold $c$:

        $$
        g \leftarrow g \cdot \min\Bigl(1,\ \frac{c}{\|g\|_p + 10^{-6}}\Bigr)
        $$

        One coefficient for every parameter, so the direction of the update is kept and only its length is capped.
        Clipping each tensor on its own would change the direction. The $10^{-6}$ keeps the division finite at
        $\|g\| = 0$, and PyTorch adds it even when the norm is large. Parameters with `.grad is None` (frozen, or unused
        in this forward) are left out of the norm and left alone. Clipping comes after the last micro-batch's
        backward and before `optimizer.step()`. `clip_grad_norm_` returns the norm *before* clipping; training
        scripts log it, because spikes in it come before loss spikes.
    """)
    lesson.setup(r"""
        import copy

        import matplotlib.pyplot as plt
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
    """)
    lesson.md(r"""
        ## 3. Exercise `accumulate_gradients`

        Leave in every parameter's `.grad` the gradient of the global token mean, starting from zero (a previous call
        must not leak in), with one forward and one backward per micro-batch, and return the global loss, detached. An
        empty list or a batch without a single real label has no defined mean: raise `ValueError`.
    """)
    lesson.exercise(
        "accumulate_gradients",
        r'''
        def accumulate_gradients(
            model: nn.Module,
            micro_batches: list[tuple[torch.Tensor, torch.Tensor]],
            ignore_index: int = -100,
        ) -> torch.Tensor:
            """model(input_ids (b, t) long) -> logits (b, t, V). Each micro-batch is (input_ids, labels), labels (b, t)
            long with ignore_index where there is no target; b and t may differ between micro-batches.
            Leaves in .grad the gradient of the token-mean cross-entropy over ALL micro-batches; returns that mean as a
            detached 0-d tensor in the logits' dtype."""
            # TODO: refuse an empty list; count the real labels of the whole batch first (refuse a count of 0)
            # TODO: clear the gradients; for each micro-batch: forward, summed cross-entropy / global count, backward
            ### BEGIN SOLUTION
            if not micro_batches:
                raise ValueError("no micro-batches")
            num_tokens = sum(int((labels != ignore_index).sum()) for _, labels in micro_batches)  # global count
            if num_tokens == 0:
                raise ValueError("no label in the batch differs from ignore_index: the token mean is undefined")
            model.zero_grad(set_to_none=True)
            total = None
            for input_ids, labels in micro_batches:
                logits = model(input_ids)                                              # (b, t, V)
                loss_sum = F.cross_entropy(
                    logits.flatten(0, 1), labels.flatten(), ignore_index=ignore_index, reduction="sum"
                )
                (loss_sum / num_tokens).backward()            # adds this micro-batch's share; frees its graph
                total = loss_sum.detach() if total is None else total + loss_sum.detach()
            return total / num_tokens
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 4. Exercise `clip_grad_norm`

        Same contract as `torch.nn.utils.clip_grad_norm_` (which is forbidden here): `parameters` is a tensor or any
        iterable of tensors (a generator such as `model.parameters()` can be read only once), the gradients are scaled
        in place, and the total norm before clipping comes back as a 0-d tensor (`torch.tensor(0.0)` when no parameter
        has a gradient). With `error_if_nonfinite=True` a NaN or infinite norm raises `RuntimeError` and nothing is
        scaled. `max_norm` and `norm_type` must be positive: raise `ValueError` otherwise (a negative `max_norm` would
        flip every gradient's sign). `torch.linalg.vector_norm(x, ord)` computes one tensor's norm, and
        `float("inf")` is the $\infty$-norm.
    """)
    lesson.exercise(
        "clip_grad_norm",
        r'''
        @torch.no_grad()
        def clip_grad_norm(parameters, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False):
            """Scale the gradients of `parameters` (a tensor or an iterable) in place so that their global
            norm_type-norm is at most max_norm; parameters whose .grad is None are ignored. Returns the total norm
            before clipping (0-d tensor)."""
            # TODO: validate max_norm and norm_type; collect the gradients that exist (read the iterable once)
            # TODO: total norm = norm of the per-tensor norms; refuse a non-finite one if asked
            # TODO: one coefficient min(1, max_norm / (total + 1e-6)) for every gradient
            ### BEGIN SOLUTION
            if not max_norm > 0 or not norm_type > 0:
                raise ValueError(f"max_norm and norm_type must be > 0, got {max_norm=}, {norm_type=}")
            if isinstance(parameters, torch.Tensor):
                parameters = [parameters]
            grads = [p.grad for p in parameters if p.grad is not None]    # one pass: generators are read once
            if not grads:
                return torch.tensor(0.0)
            norm_type = float(norm_type)
            per_tensor = torch.stack([torch.linalg.vector_norm(g, norm_type) for g in grads])  # (m,)
            total_norm = torch.linalg.vector_norm(per_tensor, norm_type)   # max of maxima for inf
            if error_if_nonfinite and not torch.isfinite(total_norm):
                raise RuntimeError(f"the total gradient norm is {total_norm.item()}: refusing to clip")
            coefficient = torch.clamp(max_norm / (total_norm + 1e-6), max=1.0)  # never scales up
            for g in grads:
                g.mul_(coefficient.to(g.dtype))
            return total_norm
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### How wrong is "mean per micro-batch, divided by K"?

        A batch of 32 sequences whose real lengths range from 8 to 256 tokens (the rest padding), cut into $K$
        micro-batches. The plot shows the relative error of the gradient against the big batch, for your
        accumulation and for the per-micro-batch mean. The naive error grows with $K$: at $K = 32$ every sequence is
        its own micro-batch and a short one weighs as much as a long one.
    """)
    lesson.code(r"""
        torch.manual_seed(0)
        vocab, width, seq_len, num_seqs = 50, 16, 256, 32
        model = nn.Sequential(nn.Embedding(vocab, width), nn.Tanh(), nn.Linear(width, vocab)).double()
        input_ids = torch.randint(vocab, (num_seqs, seq_len))
        labels = torch.randint(vocab, (num_seqs, seq_len))
        lengths = torch.randint(8, seq_len + 1, (num_seqs,))
        labels[torch.arange(seq_len)[None, :] >= lengths[:, None]] = -100        # right padding

        def flat_grad(m):
            return torch.cat([p.grad.flatten() for p in m.parameters()])

        big = copy.deepcopy(model)
        F.cross_entropy(big(input_ids).flatten(0, 1), labels.flatten(), ignore_index=-100).backward()
        reference = flat_grad(big)

        ks = [1, 2, 4, 8, 16, 32]
        naive_errors, your_errors = [], []
        for k in ks:
            parts = list(zip(input_ids.chunk(k), labels.chunk(k)))
            model.zero_grad(set_to_none=True)
            for x, y in parts:
                (F.cross_entropy(model(x).flatten(0, 1), y.flatten(), ignore_index=-100) / k).backward()
            naive_errors.append(float((flat_grad(model) - reference).norm() / reference.norm()))
            try:
                accumulate_gradients(model, parts)
                your_errors.append(float((flat_grad(model) - reference).norm() / reference.norm()))
            except NotImplementedError:
                your_errors.append(float("nan"))  # not attempted yet

        plt.figure(figsize=(6, 3.4))
        plt.plot(ks, [max(e, 1e-17) for e in naive_errors], "o-", label="mean per micro-batch / K")
        plt.plot(ks, [max(e, 1e-17) for e in your_errors], "s-", label="yours: sum / global token count")
        plt.xscale("log", base=2); plt.yscale("log")
        plt.xlabel("micro-batches K (32 sequences of 8-256 real tokens)"); plt.ylabel("relative gradient error")
        plt.title("gradient accumulation against one big batch (float64)"); plt.legend(fontsize=8)
        plt.tight_layout(); plt.show()
    """)
    lesson.md(r"""
        ### What clipping does to a gradient spike

        A toy regression trained with AdamW at the LLM setting $\beta = (0.9, 0.95)$, twice on the same data: three
        batches (steps 100, 180, 181) have targets scaled by 50, the kind of outlier batch that comes before a loss
        spike. Without clipping, the outliers' gradients (norms near $10^3$, left panel) enter Adam's $m$, which keeps
        pushing the weights in the outliers' direction for several steps, so the loss on clean data jumps; they also
        inflate $v$, which keeps the following steps small, so the recovery is slow. With your
        `clip_grad_norm(max_norm=1)` the outliers reach $m$ and $v$ at norm 1 and leave hardly a trace. The right panel
        is the loss on a fixed clean batch.
    """)
    lesson.code(r"""
        def run(clip):
            torch.manual_seed(1)
            net = nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 1))
            optimizer = torch.optim.AdamW(net.parameters(), lr=3e-3, betas=(0.9, 0.95))
            w_true = torch.randn(8, 1)
            x_val = torch.randn(256, 8)
            norms, val_losses = [], []
            for step in range(300):
                x = torch.randn(64, 8)
                y = x @ w_true * (50.0 if step in (100, 180, 181) else 1.0)
                optimizer.zero_grad()
                F.mse_loss(net(x), y).backward()
                if clip:
                    norms.append(float(clip_grad_norm(net.parameters(), max_norm=1.0)))
                optimizer.step()
                with torch.no_grad():
                    val_losses.append(F.mse_loss(net(x_val), x_val @ w_true).item())
            return norms, val_losses

        try:
            norms, clipped = run(clip=True)
            _, unclipped = run(clip=False)
            fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.4))
            left.semilogy(norms, lw=0.8, label="total norm returned by clip_grad_norm")
            left.axhline(1.0, color="k", ls=":", label="max_norm = 1")
            left.set_xlabel("step"); left.set_ylabel("global L2 norm before clipping"); left.legend(fontsize=8)
            right.semilogy(unclipped, lw=0.9, label="no clipping")
            right.semilogy(clipped, lw=0.9, label="clip_grad_norm(max_norm=1)")
            right.set_xlabel("step"); right.set_ylabel("loss on a clean batch"); right.legend(fontsize=8)
            right.set_title("outlier batches at steps 100, 180, 181")
            fig.tight_layout(); plt.show()
        except NotImplementedError:
            print("clip_grad_norm is not attempted yet")
    """)
    lesson.stop()
    lesson.md(r"""
        ## 5. Reading the solutions

        **`accumulate_gradients`.** The count comes first, over the whole batch, because every micro-batch's backward
        needs it; in a real data loader it is one extra pass over the labels (cheap: integers, no model), and under DDP
        an all-reduce. `reduction="sum"` with `ignore_index` drops the padded positions from the numerator, the global
        count drops them from the denominator. `model.zero_grad(set_to_none=True)` frees the old gradients rather than
        filling them with zeros; the first backward then allocates `.grad`, and later ones add to it. One backward per
        micro-batch keeps only one micro-batch's activations alive; summing the losses and calling backward once gives
        the same numbers and the memory of the whole batch. The returned loss is the same token mean, for logging.

        **`clip_grad_norm`.** The gradients are collected in one pass (a generator cannot be read twice; a second
        loop over it would silently clip nothing). Norm of norms: for $p = 2$, $\sqrt{\sum_i \|g_i\|^2}$, and for
        $p = \infty$, `vector_norm` of the per-tensor maxima is their maximum. The coefficient is a 0-d tensor and the
        scaling happens unconditionally (PyTorch does the same: an `if coefficient < 1` would force a GPU-to-CPU sync
        every step). The $+10^{-6}$ matters only for tiny norms; a check uses norms of $10^{-4}$ so that it shows.

        **The usual mistakes, and why they are wrong**:
        - *Mean per micro-batch divided by K* (Hugging Face's pre-4.46 behaviour), and *padding counted in the
          denominator* (`labels.numel()`).
        - *Gradients not cleared first* (the previous batch leaks in), *the loss of the last micro-batch returned*,
          and *one backward at the end* (correct numbers, the whole batch's memory: a check watches the order).
        - *Each tensor clipped on its own*, *the coefficient not clamped at 1* (small gradients scaled up to
          `max_norm`), *the 2-norm whatever `norm_type` says*, *the $10^{-6}$ left out*, *the generator read twice*,
          *zeros created for parameters without a gradient*, *no refusal of a non-finite norm*.

        **Cost.** Accumulation costs nothing extra in FLOPs; it trades memory for sequential time. Clipping reads every
        gradient twice and writes it once (norm, then scale): for the 16 GB of bf16 gradients of an 8B model that is
        48 GB of memory traffic, about 15 ms per step at an H100's 3.35 TB/s. PyTorch uses `torch._foreach_norm` and
        `_foreach_mul_` so that it is one kernel per dtype and device rather than one per tensor, and fused optimizers
        can fold the scaling into the update.

        **What production code does.** Transformers' `Trainer` counts `num_items_in_batch` over all micro-batches of
        an accumulation step (and across processes) and passes it to the model's loss. Megatron-LM and TRL can
        compute per-token loss sums and divide by the global count (Megatron's `--calculate-per-token-loss`). When
        gradients are sharded (ZeRO, FSDP), no rank has the whole vector, so `FSDP.clip_grad_norm_` and Megatron's
        `clip_grad_norm_fp32` compute local sums of $|g|^p$ (or local maxima), all-reduce them, and take the root;
        Megatron also skips parameters that are duplicated across tensor-parallel ranks so they are not counted twice.
        With fp16 loss scaling, DeepSpeed and Megatron skip the optimizer step entirely when the gradients overflow
        (a non-finite norm), which is the story of `p02.mixed_precision`.
    """)
    lesson.mistakes()
    return lesson
