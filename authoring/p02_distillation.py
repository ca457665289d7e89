"""Source of 02_PyTorch_Algorithms/23_Distillation.ipynb (build with `python -m llm_algo build p02.distillation`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p02.distillation",
        path="02_PyTorch_Algorithms/23_Distillation.ipynb",
        title_en="Knowledge distillation: forward and reverse KL, temperature, top-k",
        title_zh="知识蒸馏：前向与反向 KL、温度与 Top-k 稀疏蒸馏",
        difficulty="medium",
        device="cpu",
        minutes=70,
        prerequisites=["p02.cross_entropy"],
    )
    lesson.title(
        intro=r"""
        A one-hot next token says which token came next; a teacher's distribution also says which others were
        plausible and by how much. Training a small model on that distribution is knowledge distillation (Hinton,
        Vinyals & Dean, 2015). DistilBERT kept 97% of BERT's language-understanding score with 40% fewer parameters
        and 60% faster inference (Sanh et al., 2019); Gemma 2's 2B and 9B models were pre-trained on a larger
        teacher's distributions instead of next tokens (Gemma Team, 2024), and Meta's Llama 3.2 1B and 3B used the
        logits of Llama 3.1 8B and 70B as token-level targets during pre-training (Meta, September 2024). The
        details decide whether it works: which direction of KL, at which temperature, scaled how, and how to store a
        teacher whose full distributions are 128,256 numbers per token.

        **You will implement** the forward and reverse KL between student and teacher logits at a temperature $T$
        with Hinton's $T^2$ factor and a token mask, the KL to a teacher stored as its top-$k$ tokens and
        log-probabilities, and the classic mixture of the distillation term with cross-entropy on the hard labels.
        **Graded against** `F.kl_div(..., log_target=True)` and `F.kl_div` on a scattered dense target, closed forms in
        float64 (two-class cases, the gradient $T\,(q_T - p_T)$), `F.cross_entropy` with `ignore_index`, and
        `torch.autograd.gradcheck`.
    """
    )
    lesson.md(r"""
        ## 本节要点

        - **蒸馏目标**：学生分布 $q$ 拟合教师分布 $p$（软标签），比 one-hot 标签携带更多信息（"暗知识"）。
        - **前向 KL** $\mathrm{KL}(p\|q)$：按教师概率加权，均值寻找（mean-seeking），学生要覆盖教师的所有高概率区域；**反向 KL** $\mathrm{KL}(q\|p)$：模式寻找（mode-seeking），MiniLLM、GKD 等在线蒸馏常用。
        - **温度**：两边都用 $\mathrm{softmax}(z/T)$；梯度按 $1/T^2$ 缩小，所以损失乘以 $T^2$（Hinton 2015），对学生 logits 的梯度是 $T(q_T - p_T)$。
        - **Top-k 稀疏蒸馏**：离线只存教师前 $k$ 个 token 及其 log 概率，在这 $k$ 个上重新归一化，与学生全词表分布算 KL。
        - **组合损失**：$\alpha\,T^2\,\mathrm{KL} + (1-\alpha)\,\mathrm{CE}$，padding 用 `ignore_index` 屏蔽，按有效 token 取平均。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. What a teacher's distribution adds, and what it costs

        For one position with vocabulary size $V$, teacher logits $s \in \mathbb{R}^V$ and student logits
        $z \in \mathbb{R}^V$, at temperature $T$:

        $$
        p_T = \operatorname{softmax}(s / T), \qquad q_T = \operatorname{softmax}(z / T), \qquad
        \mathrm{KL}(p_T \,\|\, q_T) = \sum_{v=1}^{V} p_T(v)\,\big(\log p_T(v) - \log q_T(v)\big) \ \ge 0 .
        $$

        Cross-entropy on the next token is the special case $p = $ one-hot: it rewards the right token and says nothing
        about the rest. A teacher's $p$ ranks every alternative, which is why a student trained on it learns
        faster per token. Shapes in a language model: logits `(B, L, V)`, one KL per position `(B, L)`, averaged over
        the positions that count (a mask `(B, L)` drops padding and, in SFT-style distillation, the prompt).

        **Cost.** Storing full teacher distributions is out of the question: Llama 3's $V = 128{,}256$ in bf16 is
        256 KB per token, 256 TB for a billion tokens. Two ways out: run the teacher *online*, next to the student
        (what TRL's `DistillationTrainer` does, on completions the student samples itself, following GKD), or store
        only the teacher's top-$k$ tokens per position: with $k = 64$, int32 ids and fp16 log-probabilities that is
        384 bytes per token, 384 GB per billion tokens, and the top 64 tokens usually hold almost all of the mass.

        ## 2. Temperature and Hinton's $T^2$

        Dividing logits by $T > 1$ flattens both distributions, so small probabilities (the "dark knowledge": which
        wrong answers are *almost* right) contribute to the loss. The gradient of $\mathrm{KL}(p_T\|q_T)$ with
        respect to the student's logits is $\tfrac{1}{T}(q_T - p_T)$: one $1/T$ from the chain rule through $z/T$,
        and $q_T - p_T$ itself shrinks roughly like $1/T$ for large $T$ (Hinton et al. show the difference of
        softmaxes behaves like $(z - s)/(VT)$ when the logits are zero-mean). Multiplying the loss by $T^2$ keeps the
        soft term's gradient at the scale of the hard-label term when the two are mixed, and makes $T$ a knob that
        does not also change the learning rate:

        $$
        \mathcal{L}_\text{KD} = T^2\, \mathrm{KL}(p_T \,\|\, q_T), \qquad
        \frac{\partial \mathcal{L}_\text{KD}}{\partial z} = T\,(q_T - p_T).
        $$

        ## 3. Forward or reverse?

        $\mathrm{KL}(p\|q)$ (forward) weights each token by the *teacher's* probability: wherever the teacher puts
        mass, the student must too, even if it cannot represent all of it, so a small student spreads out
        (mean-seeking, and it may put mass *between* the teacher's modes). $\mathrm{KL}(q\|p)$ (reverse) weights by
        the *student's* probability: it punishes putting mass where the teacher has little, so the student picks
        one mode and stays in it (mode-seeking). For generation that is often the better failure: MiniLLM (Gu et
        al., 2024) distils with reverse KL, and GKD (Agarwal et al., 2024, *On-Policy Distillation of Language
        Models*) interpolates with a generalised Jensen–Shannon divergence; TRL's `DistillationTrainer` exposes it as
        `beta` (0 = forward KL, 1 = reverse KL; TRL 1.16.0, `trl/trainer/distillation_trainer.py`,
        `_chunked_divergence_loss`, lines 101–213: temperature on both distributions, no $T^2$ factor, the sum over
        valid completion tokens divided by their number).
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt
        import torch
        import torch.nn.functional as F
    """)
    lesson.md(r"""
        ## 4. Exercise `distillation_kl`

        Logits `(..., V)` of the same shape; `mask` (optional) has the shape without the vocabulary axis. Return the
        scalar $T^2 \cdot$ mean over the selected positions of the per-position KL, forward
        ($\mathrm{KL}(p_T\|q_T)$) or reverse ($\mathrm{KL}(q_T\|p_T)$). Compute in at least float32 and return that
        dtype; a padded position may hold NaN logits and must not leak (select, do not multiply); with no selected
        position return 0. `F.kl_div` is the checks' reference and is forbidden here. Refuse mismatched shapes, a
        temperature $\le 0$ and an unknown direction with a `ValueError`.
    """)
    lesson.exercise(
        "distillation_kl",
        r'''
        def distillation_kl(
            student_logits: torch.Tensor,
            teacher_logits: torch.Tensor,
            temperature: float = 1.0,
            direction: str = "forward",
            mask: torch.Tensor | None = None,
        ) -> torch.Tensor:
            """T^2 * mean over positions of KL(p_T || q_T) ("forward") or KL(q_T || p_T) ("reverse").

            student_logits, teacher_logits: (..., V); mask: (...) bool/0-1 or None; returns a 0-d tensor
            """
            # TODO: validate direction, temperature > 0, equal shapes, the mask's shape
            # TODO: log-softmax of both logits divided by T, in at least float32
            # TODO: per-position KL in the chosen direction: sum over V of prob * (its log-prob - the other's)
            # TODO: mean over the selected positions (0 if none), times T**2
            ### BEGIN SOLUTION
            if direction not in ("forward", "reverse"):
                raise ValueError(f"direction must be 'forward' or 'reverse', got {direction!r}")
            if temperature <= 0:
                raise ValueError(f"temperature must be positive, got {temperature}")
            if student_logits.shape != teacher_logits.shape:
                raise ValueError(f"logits differ in shape: {tuple(student_logits.shape)} vs {tuple(teacher_logits.shape)}")
            if mask is not None and mask.shape != student_logits.shape[:-1]:
                raise ValueError(f"mask must be {tuple(student_logits.shape[:-1])}, got {tuple(mask.shape)}")
            compute_dtype = torch.promote_types(student_logits.dtype, torch.float32)
            log_q = torch.log_softmax(student_logits.to(compute_dtype) / temperature, dim=-1)  # (..., V) student
            log_p = torch.log_softmax(teacher_logits.to(compute_dtype) / temperature, dim=-1)  # (..., V) teacher
            if direction == "forward":
                per_position = (log_p.exp() * (log_p - log_q)).sum(dim=-1)   # KL(p || q): weighted by the teacher
            else:
                per_position = (log_q.exp() * (log_q - log_p)).sum(dim=-1)   # KL(q || p): weighted by the student
            if mask is None:
                mask = torch.ones_like(per_position, dtype=torch.bool)
            mask = mask.bool()
            total = torch.where(mask, per_position, torch.zeros_like(per_position)).sum()
            return total / mask.sum().clamp(min=1) * temperature**2
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### Mean-seeking and mode-seeking, in a picture

        A teacher with two modes over 60 token ids and a student that can only be one bump (logits
        $-(v-\mu)^2 / (2\sigma^2)$, two parameters). Fitting $\mu, \sigma$ with your `distillation_kl` by gradient
        descent: the forward-KL student stretches over both modes, the reverse-KL student settles on one.
    """)
    lesson.code(r"""
        ids = torch.arange(60, dtype=torch.float64)
        teacher = torch.logsumexp(torch.stack([-(ids - 15) ** 2 / 18, -(ids - 42) ** 2 / 8 + 0.3]), 0)  # two bumps

        def fit(direction, steps=400):
            mu = torch.tensor(28.0, dtype=torch.float64, requires_grad=True)
            log_sigma = torch.tensor(1.0, dtype=torch.float64, requires_grad=True)
            optimizer = torch.optim.Adam([mu, log_sigma], lr=0.1)
            for _ in range(steps):
                student = -(ids - mu) ** 2 / (2 * log_sigma.exp() ** 2)
                loss = distillation_kl(student, teacher, direction=direction)
                optimizer.zero_grad(); loss.backward(); optimizer.step()
            return torch.softmax(student.detach(), 0), loss.item()

        plt.figure(figsize=(7, 3.4))
        plt.fill_between(ids, torch.softmax(teacher, 0), color="0.85", label="teacher p")
        try:
            for direction, color in (("forward", "C0"), ("reverse", "C3")):
                q, loss = fit(direction)
                plt.plot(ids, q, color=color, label=f"student q, {direction} KL (final {loss:.2f})")
        except NotImplementedError:
            print("distillation_kl not attempted yet")
        plt.xlabel("token id"); plt.ylabel("probability"); plt.legend(fontsize=8)
        plt.title("One bump fitted to two: KL(p||q) covers, KL(q||p) picks a mode"); plt.tight_layout(); plt.show()
    """)
    lesson.md(r"""
        ## 5. Exercise `topk_distillation_loss`: a teacher stored as its top-$k$

        Offline distillation stores, per position, the teacher's top-$k$ token ids `(..., k)` and their log-probabilities
        `(..., k)` under the full vocabulary (what vLLM returns with `logprobs=k`). Renormalise them over the $k$ tokens,
        $\tilde p = \operatorname{softmax}(\text{topk\_logprobs})$ (adding a constant to all $k$ log-probs changes
        nothing), and take the KL from that sparse teacher to the student's *full-vocabulary* distribution
        $q = \operatorname{softmax}(z)$: $\sum_{j=1}^{k} \tilde p_j (\log\tilde p_j - \log q(\text{id}_j))$, which is
        exactly $\mathrm{KL}(\tilde p \| q)$ because $\tilde p$ is 0 outside the $k$ ids. Mean over the selected positions
        as before (no temperature here: the teacher was stored at $T = 1$). Refuse ids outside `[0, V)` and shapes that
        do not match, with a `ValueError`.
    """)
    lesson.exercise(
        "topk_distillation_loss",
        r'''
        def topk_distillation_loss(
            student_logits: torch.Tensor,
            teacher_topk_ids: torch.Tensor,
            teacher_topk_logprobs: torch.Tensor,
            mask: torch.Tensor | None = None,
        ) -> torch.Tensor:
            """Mean over positions of KL(renormalised top-k teacher || student). student_logits (..., V);
            teacher_topk_ids (..., k) int64; teacher_topk_logprobs (..., k); mask (...) or None -> 0-d tensor."""
            # TODO: validate: ids and log-probs (..., k) matching the logits' leading shape, 0 <= ids < V, the mask
            # TODO: renormalise the teacher over its k tokens (log-softmax of the k log-probs)
            # TODO: the student's full-vocabulary log-probs, gathered at the k ids
            # TODO: sum over k of p~ * (log p~ - log q); mean over the selected positions (0 if none)
            ### BEGIN SOLUTION
            vocab = student_logits.shape[-1]
            if (
                teacher_topk_ids.shape != teacher_topk_logprobs.shape
                or teacher_topk_ids.shape[:-1] != student_logits.shape[:-1]
            ):
                raise ValueError(
                    f"expected top-k ids and log-probs (..., k) under logits {tuple(student_logits.shape)}, got "
                    f"{tuple(teacher_topk_ids.shape)} and {tuple(teacher_topk_logprobs.shape)}"
                )
            if bool((teacher_topk_ids < 0).any()) or bool((teacher_topk_ids >= vocab).any()):
                raise ValueError(f"top-k ids must lie in [0, {vocab})")
            if mask is not None and mask.shape != student_logits.shape[:-1]:
                raise ValueError(f"mask must be {tuple(student_logits.shape[:-1])}, got {tuple(mask.shape)}")
            compute_dtype = torch.promote_types(student_logits.dtype, torch.float32)
            log_p = torch.log_softmax(teacher_topk_logprobs.to(compute_dtype), dim=-1)       # (..., k) renormalised
            log_q_all = torch.log_softmax(student_logits.to(compute_dtype), dim=-1)          # (..., V) full vocab
            log_q = log_q_all.gather(-1, teacher_topk_ids)                                    # (..., k)
            per_position = (log_p.exp() * (log_p - log_q)).sum(dim=-1)                       # (...)
            if mask is None:
                mask = torch.ones_like(per_position, dtype=torch.bool)
            mask = mask.bool()
            total = torch.where(mask, per_position, torch.zeros_like(per_position)).sum()
            return total / mask.sum().clamp(min=1)
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 6. Exercise `distillation_loss`: soft and hard targets together

        Hinton's recipe mixes the distillation term with the ordinary cross-entropy on the true next tokens:
        $\mathcal{L} = \alpha\, T^2\,\mathrm{KL}(p_T\|q_T) + (1-\alpha)\, \mathrm{CE}(z, y)$, both averaged over the
        positions whose label is not `ignore_index` (padding, and the prompt in instruction data). `labels` have the
        logits' shape without the vocabulary axis and are already aligned with them (shifted by the caller). Use your
        `distillation_kl` (forward) for the first term; `F.cross_entropy` is allowed for the second, but average it
        over the counted positions yourself so that a batch with no counted position gives 0 instead of NaN. Refuse
        $\alpha \notin [0, 1]$.
    """)
    lesson.exercise(
        "distillation_loss",
        r'''
        def distillation_loss(
            student_logits: torch.Tensor,
            teacher_logits: torch.Tensor,
            labels: torch.Tensor,
            alpha: float = 0.5,
            temperature: float = 2.0,
            ignore_index: int = -100,
        ) -> torch.Tensor:
            """alpha * T^2 KL(p_T || q_T) + (1 - alpha) * CE(student, labels), over positions with a label."""
            # TODO: refuse alpha outside [0, 1]; the counted positions are labels != ignore_index
            # TODO: the distillation term with your distillation_kl (forward, with that mask)
            # TODO: the cross-entropy summed over counted positions, divided by their number (at least 1)
            ### BEGIN SOLUTION
            if not 0.0 <= alpha <= 1.0:
                raise ValueError(f"alpha must lie in [0, 1], got {alpha}")
            counted = labels != ignore_index                                             # (...)
            soft = distillation_kl(student_logits, teacher_logits, temperature, "forward", counted)
            compute_dtype = soft.dtype
            hard_sum = F.cross_entropy(
                student_logits.reshape(-1, student_logits.shape[-1]).to(compute_dtype),
                labels.reshape(-1),
                ignore_index=ignore_index,
                reduction="sum",
            )
            hard = hard_sum / counted.sum().clamp(min=1)
            return alpha * soft + (1 - alpha) * hard
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### What the temperature reveals

        One teacher distribution over 12 tokens at $T = 1, 2, 4$: the runner-up tokens, invisible at $T = 1$, carry
        a visible share of the target at $T = 4$. The printed numbers are the gradients' sizes with and without the
        $T^2$ factor, for a random student, through your `distillation_kl`: with the reference solution they stay
        between 0.60 and 0.88 with $T^2$ for $T = 1 \dots 8$, and fall from 0.60 to 0.013 without it.
    """)
    lesson.code(r"""
        torch.manual_seed(0)
        teacher_logits = torch.tensor([6.0, 3.5, 3.0, 1.0, 0.5, 0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0])
        student_logits = torch.randn(12)
        fig, ax = plt.subplots(figsize=(6.5, 3.2))
        for offset, T in zip((-0.27, 0.0, 0.27), (1, 2, 4)):
            ax.bar(torch.arange(12) + offset, torch.softmax(teacher_logits / T, 0), width=0.27, label=f"T = {T}")
        ax.set_xlabel("token"); ax.set_ylabel("teacher probability p_T"); ax.legend(); plt.tight_layout(); plt.show()
        try:
            for T in (1, 2, 4, 8):
                z = student_logits.clone().requires_grad_(True)
                (grad,) = torch.autograd.grad(distillation_kl(z, teacher_logits, temperature=T), z)
                print(f"T = {T}: |grad| with T² = {grad.norm():.4f}, without = {grad.norm() / T**2:.5f}")
        except NotImplementedError:
            print("distillation_kl not attempted yet")
    """)
    lesson.stop()
    lesson.md(r"""
        ## 7. Reading the solutions

        **`distillation_kl`.** Both log-softmaxes take the *same* temperature; dividing only the teacher (a common
        slip) compares a flattened teacher with a sharp student. The KL is written from log-probabilities, $p\,(\log p
        - \log q)$, never $p \log(p/q)$ from probabilities, which loses everything below float32's smallest normal
        number. The mean is over *positions*: `F.kl_div`'s default `reduction="mean"` divides by the number of
        elements $B \cdot L \cdot V$ (PyTorch warns about it and recommends `"batchmean"`), a mistake that scales the
        loss down by $V$ and silently changes the learning rate. $T^2$ multiplies the mean at the end.

        **`topk_distillation_loss`.** The renormalisation is a log-softmax over the $k$ stored values; the student is
        *not* renormalised over the same $k$ tokens (that would let it put arbitrary mass elsewhere for free). Two
        other conventions exist: keep the teacher unnormalised and add a "rest of the vocabulary" bucket with mass
        $1 - \sum_j p_j$, or sample tokens from the teacher instead of taking the top $k$ (an unbiased estimate of
        the full KL, noisier per token).

        **`distillation_loss`.** The hard term is the ordinary next-token cross-entropy; summing it and dividing by the
        counted positions yourself gives 0 for a batch that counts nothing (F.cross_entropy's `"mean"` gives NaN).

        **The usual mistakes, and why they are wrong**: the two directions
        swapped, the temperature on the teacher only, no $T^2$ or $T$ instead of $T^2$, a mean over the vocabulary
        too, a mask multiplied into NaNs, no float32 upcast, `F.kl_div` itself; in the top-$k$ loss, the stored
        log-probabilities used without renormalising, the student renormalised over the $k$ tokens, ids left
        unchecked, a multiplied mask; in the mixture, $\alpha$ on the wrong term, distillation at unlabelled
        positions, `F.cross_entropy`'s mean (NaN on an empty batch), the reverse KL.

        **In production.** Online distillation runs teacher and student side by side; the teacher's logits dominate
        memory ($B \cdot L \cdot V$ floats), so TRL 1.16 never materialises them: `_chunked_divergence_loss` projects
        the hidden states through both `lm_head`s tile by tile and computes the divergence per tile (a Triton kernel
        where available), and Liger-Kernel ships fused JSD and distillation losses for the same reason. Offline
        pipelines (DistillKit, many pre-training setups) store top-$k$ logits once and reuse them across student runs.
    """)
    lesson.mistakes()
    return lesson
