"""Realistic wrong versions of the p02.distillation solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "distillation_kl",
        "directions_swapped",
        "computes KL(q || p) for 'forward' and KL(p || q) for 'reverse'",
        [('if direction == "forward":', 'if direction == "reverse":')],
        mistake_zh="'forward' 算成 KL(q ‖ p)，'reverse' 算成 KL(p ‖ q)",
    ),
    Mutant(
        "distillation_kl",
        "temperature_on_teacher_only",
        "softens the teacher but not the student",
        [
            (
                "log_q = torch.log_softmax(student_logits.to(compute_dtype) / temperature, dim=-1)",
                "log_q = torch.log_softmax(student_logits.to(compute_dtype), dim=-1)",
            )
        ],
        mistake_zh="只软化了教师，没有软化学生",
    ),
    Mutant(
        "distillation_kl",
        "no_t_squared",
        "forgets Hinton's T^2 factor",
        [("return total / mask.sum().clamp(min=1) * temperature**2", "return total / mask.sum().clamp(min=1)")],
        mistake_zh="忘了 Hinton 的 T² 因子",
    ),
    Mutant(
        "distillation_kl",
        "t_not_squared",
        "multiplies by T instead of T^2",
        [
            (
                "return total / mask.sum().clamp(min=1) * temperature**2",
                "return total / mask.sum().clamp(min=1) * temperature",
            )
        ],
        mistake_zh="乘的是 T 而不是 T²",
    ),
    Mutant(
        "distillation_kl",
        "mean_over_vocabulary",
        "averages over the vocabulary as well (F.kl_div's reduction='mean')",
        [
            (
                "per_position = (log_p.exp() * (log_p - log_q)).sum(dim=-1)",
                "per_position = (log_p.exp() * (log_p - log_q)).mean(dim=-1)",
            )
        ],
        mistake_zh="还对词表取了平均（F.kl_div 的 reduction='mean'）",
    ),
    Mutant(
        "distillation_kl",
        "mask_multiplied",
        "multiplies by the mask: NaN logits at padded positions leak",
        [
            (
                "total = torch.where(mask, per_position, torch.zeros_like(per_position)).sum()",
                "total = (per_position * mask).sum()",
            )
        ],
        mistake_zh="乘以掩码：padding 位置上的 NaN logits 漏了进来",
    ),
    Mutant(
        "distillation_kl",
        "calls_the_builtin",
        "uses F.kl_div, the reference the lesson forbids",
        [
            (
                "per_position = (log_p.exp() * (log_p - log_q)).sum(dim=-1)",
                "per_position = F.kl_div(log_q, log_p, log_target=True, reduction='none').sum(dim=-1)",
            )
        ],
        mistake_zh="用了本课禁止的参考实现 F.kl_div",
    ),
    Mutant(
        "distillation_kl",
        "no_upcast",
        "computes in the logits' dtype (bf16 KL)",
        [
            (
                "compute_dtype = torch.promote_types(student_logits.dtype, torch.float32)",
                "compute_dtype = student_logits.dtype",
            )
        ],
        mistake_zh="在 logits 的数据类型下计算（bf16 的 KL）",
    ),
    Mutant(
        "topk_distillation_loss",
        "teacher_not_renormalised",
        "uses the stored log-probs as they are, without renormalising over the k tokens",
        [
            (
                "log_p = torch.log_softmax(teacher_topk_logprobs.to(compute_dtype), dim=-1)",
                "log_p = teacher_topk_logprobs.to(compute_dtype)",
            )
        ],
        mistake_zh="直接使用存下的对数概率，没有在 k 个 token 上重新归一化",
    ),
    Mutant(
        "topk_distillation_loss",
        "student_renormalised_over_topk",
        "renormalises the student over the k tokens too",
        [
            (
                "log_q = log_q_all.gather(-1, teacher_topk_ids)",
                "log_q = torch.log_softmax(student_logits.to(compute_dtype).gather(-1, teacher_topk_ids), dim=-1)",
            )
        ],
        mistake_zh="把学生也在 k 个 token 上重新归一化",
    ),
    Mutant(
        "topk_distillation_loss",
        "no_id_check",
        "does not validate the ids (an id >= V fails deep inside gather, or wraps on some devices)",
        [('raise ValueError(f"top-k ids must lie in [0, {vocab})")', "pass")],
        mistake_zh="不检查 ids（id >= V 会在 gather 深处出错，某些设备上还会回绕）",
    ),
    Mutant(
        "topk_distillation_loss",
        "mask_multiplied",
        "multiplies by the mask: NaN logits at padded positions leak",
        [
            (
                "total = torch.where(mask, per_position, torch.zeros_like(per_position)).sum()",
                "total = (per_position * mask).sum()",
            )
        ],
        mistake_zh="乘以掩码：padding 位置上的 NaN logits 漏了进来",
    ),
    Mutant(
        "distillation_loss",
        "alpha_swapped",
        "weights the cross-entropy by alpha and the distillation term by 1 - alpha",
        [("return alpha * soft + (1 - alpha) * hard", "return (1 - alpha) * soft + alpha * hard")],
        mistake_zh="交叉熵乘 alpha，蒸馏项乘 1 - alpha",
    ),
    Mutant(
        "distillation_loss",
        "kd_over_all_positions",
        "distils at every position, ignored labels included",
        [
            (
                'soft = distillation_kl(student_logits, teacher_logits, temperature, "forward", counted)',
                'soft = distillation_kl(student_logits, teacher_logits, temperature, "forward")',
            )
        ],
        mistake_zh="在每个位置都做蒸馏，包括被忽略的标签",
    ),
    Mutant(
        "distillation_loss",
        "cross_entropy_mean",
        "uses F.cross_entropy's mean: NaN when no position is labelled",
        [
            ('reduction="sum",', 'reduction="mean",'),
            ("hard = hard_sum / counted.sum().clamp(min=1)", "hard = hard_sum"),
        ],
        mistake_zh="用 F.cross_entropy 的 mean：没有任何位置带标签时得到 NaN",
    ),
    Mutant(
        "distillation_loss",
        "reverse_kl",
        "distils with the reverse KL in Hinton's mixture",
        [
            (
                'soft = distillation_kl(student_logits, teacher_logits, temperature, "forward", counted)',
                'soft = distillation_kl(student_logits, teacher_logits, temperature, "reverse", counted)',
            )
        ],
        mistake_zh="Hinton 的混合损失里用了反向 KL",
    ),
]
