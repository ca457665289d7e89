"""Realistic wrong versions of the p02.distillation solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "distillation_kl",
        "directions_swapped",
        "computes KL(q || p) for 'forward' and KL(p || q) for 'reverse'",
        [('if direction == "forward":', 'if direction == "reverse":')],
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
    ),
    Mutant(
        "distillation_kl",
        "no_t_squared",
        "forgets Hinton's T^2 factor",
        [("return total / mask.sum().clamp(min=1) * temperature**2", "return total / mask.sum().clamp(min=1)")],
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
    ),
    Mutant(
        "topk_distillation_loss",
        "no_id_check",
        "does not validate the ids (an id >= V fails deep inside gather, or wraps on some devices)",
        [('raise ValueError(f"top-k ids must lie in [0, {vocab})")', "pass")],
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
    ),
    Mutant(
        "distillation_loss",
        "alpha_swapped",
        "weights the cross-entropy by alpha and the distillation term by 1 - alpha",
        [("return alpha * soft + (1 - alpha) * hard", "return (1 - alpha) * soft + alpha * hard")],
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
    ),
    Mutant(
        "distillation_loss",
        "cross_entropy_mean",
        "uses F.cross_entropy's mean: NaN when no position is labelled",
        [
            ('reduction="sum",', 'reduction="mean",'),
            ("hard = hard_sum / counted.sum().clamp(min=1)", "hard = hard_sum"),
        ],
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
    ),
]
