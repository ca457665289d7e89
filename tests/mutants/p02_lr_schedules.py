"""Realistic wrong versions of the p02.lr_schedules solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "warmup_cosine_lr",
        "decay_end_as_duration",
        "treats decay_end as the length of the decay after the warmup, not as an absolute step",
        [
            (
                "progress = (step - warmup_steps) / (decay_end - warmup_steps)",
                "progress = (step - warmup_steps) / decay_end",
            )
        ],
        mistake_zh="把 decay_end 当作预热之后衰减的长度，而不是绝对步数",
    ),
    Mutant(
        "warmup_cosine_lr",
        "no_floor_past_end",
        "keeps evaluating the cosine after decay_end, so the lr climbs back towards the peak",
        [("if step >= decay_end:\n        return min_lr", "if step >= 2 * decay_end:\n        return min_lr")],
        mistake_zh="decay_end 之后仍继续计算余弦，学习率又爬回峰值",
    ),
    Mutant(
        "warmup_cosine_lr",
        "decays_to_zero",
        "ignores the floor: a cosine from peak_lr to 0 (then min_lr only past the end)",
        [
            (
                "return min_lr + (peak_lr - min_lr) * 0.5 * (1 + math.cos(math.pi * progress))",
                "return peak_lr * 0.5 * (1 + math.cos(math.pi * progress))",
            )
        ],
        mistake_zh="忽略下限：余弦从 peak_lr 降到 0（过了终点才用 min_lr）",
    ),
    Mutant(
        "warmup_cosine_lr",
        "warmup_off_by_one",
        "warms up with (step + 1) / warmup_steps: the first step is not 0 and the peak comes a step early",
        [("return peak_lr * step / warmup_steps", "return peak_lr * (step + 1) / warmup_steps")],
        mistake_zh="预热用 (step + 1) / warmup_steps：第一步不是 0，峰值提前一步到来",
    ),
    Mutant(
        "warmup_cosine_lr",
        "no_validation",
        "accepts a decay_end before the warmup's end (negative progress, lr above the peak)",
        [("if warmup_steps < 0 or decay_end <= warmup_steps:", "if warmup_steps < 0:")],
        mistake_zh="接受早于预热结束的 decay_end（进度为负，学习率超过峰值）",
    ),
    Mutant(
        "wsd_lr",
        "warmup_from_zero",
        "warms up from 0 instead of from the floor (transformers starts WSD's warmup at min_lr_ratio * peak)",
        [
            (
                "return min_lr + (peak_lr - min_lr) * step / warmup_steps",
                "return peak_lr * step / warmup_steps",
            )
        ],
        mistake_zh="预热从 0 而不是从下限开始（transformers 的 WSD 预热从 min_lr_ratio * peak 开始）",
    ),
    Mutant(
        "wsd_lr",
        "one_minus_sqrt_swapped",
        "writes the 1-sqrt cool-down as sqrt(1 - p)",
        [("shape = 1 - math.sqrt(progress)", "shape = math.sqrt(1 - progress)")],
        mistake_zh="把 1-sqrt 冷却写成 sqrt(1 - p)",
    ),
    Mutant(
        "wsd_lr",
        "unknown_shape_is_linear",
        "treats any unknown decay_type as linear instead of refusing it",
        [
            (
                'if decay_type not in ("linear", "cosine", "1-sqrt"):',
                'if decay_type not in ("linear", "cosine", "1-sqrt") and False:',
            ),
            ('if decay_type == "linear":', 'if decay_type not in ("cosine", "1-sqrt"):'),
        ],
        mistake_zh="把未知的 decay_type 当作线性处理，而不是拒绝",
    ),
    Mutant(
        "wsd_lr",
        "decay_from_warmup_end",
        "starts the decay right after the warmup, forgetting the stable phase in the decay's progress",
        [
            (
                "progress = (step - decay_start) / decay_steps",
                "progress = min(1.0, (step - warmup_steps) / decay_steps)",
            )
        ],
        mistake_zh="预热一结束就开始衰减，衰减进度里忘了稳定阶段",
    ),
    Mutant(
        "inverse_sqrt_lr",
        "inverse_not_sqrt",
        "decays as W / step (1/t) instead of sqrt(W / step)",
        [("return peak_lr * math.sqrt(warmup_steps / step)", "return peak_lr * warmup_steps / step")],
        mistake_zh="按 W / step（1/t）衰减，而不是 sqrt(W / step)",
    ),
    Mutant(
        "inverse_sqrt_lr",
        "sqrt_of_step",
        "decays as 1 / sqrt(step) without the warmup's timescale, so the peak is not reached at W",
        [("return peak_lr * math.sqrt(warmup_steps / step)", "return peak_lr / math.sqrt(step)")],
        mistake_zh="按 1 / sqrt(step) 衰减，没有预热的时间尺度，在 W 处达不到峰值",
    ),
    Mutant(
        "inverse_sqrt_lr",
        "warmup_zero_accepted",
        "accepts warmup_steps = 0 and silently returns 0 for every step",
        [
            (
                "if step < 0 or warmup_steps < 1:",
                "if step < 0:",
            ),
            (
                "return peak_lr * math.sqrt(warmup_steps / step)",
                "return peak_lr * math.sqrt(warmup_steps / max(step, 1))",
            ),
        ],
        mistake_zh="接受 warmup_steps = 0，每一步都默默返回 0",
    ),
    Mutant(
        "make_lambda_lr",
        "absolute_lr_as_factor",
        "returns the learning rate itself as the factor, so every group gets base_lr * lr",
        [("return schedule(step) / peak_lr", "return schedule(step)")],
        mistake_zh="把学习率本身当作因子返回，每个组得到 base_lr * lr",
    ),
    Mutant(
        "make_lambda_lr",
        "divides_by_current_lr",
        "divides by the group's current lr, which the scheduler itself keeps changing",
        [("return schedule(step) / peak_lr", 'return schedule(step) / optimizer.param_groups[0]["lr"]')],
        mistake_zh="除以组当前的 lr，而调度器自己一直在改它",
    ),
    Mutant(
        "make_lambda_lr",
        "step_plus_one",
        "evaluates the schedule one step ahead (as if scheduler.step() ran before optimizer.step())",
        [("return schedule(step) / peak_lr", "return schedule(step + 1) / peak_lr")],
        mistake_zh="提前一步计算调度（好像 scheduler.step() 在 optimizer.step() 之前运行）",
    ),
    Mutant(
        "make_lambda_lr",
        "no_validation",
        "accepts a negative peak_lr (every lr flips sign)",
        [("if not peak_lr > 0:", "if peak_lr == 0:")],
        mistake_zh="接受负的 peak_lr（每个学习率都变号）",
    ),
    Mutant(
        "wsd_lr",
        "calls_the_builtin",
        "returns transformers' own WSD lambda times the peak",
        [
            (
                "min_lr = min_lr_ratio * peak_lr",
                "from transformers.optimization import _get_wsd_scheduler_lambda\n"
                "    return peak_lr * _get_wsd_scheduler_lambda(step, num_warmup_steps=warmup_steps, "
                "num_stable_steps=stable_steps, num_decay_steps=decay_steps, warmup_type='linear', "
                "decay_type=decay_type, min_lr_ratio=min_lr_ratio, num_cycles=0.5)",
            )
        ],
        mistake_zh="返回 transformers 自己的 WSD lambda 乘以峰值",
    ),
    Mutant(
        "warmup_cosine_lr",
        "calls_the_builtin",
        "drives a torch CosineAnnealingLR to the step and reads its lr",
        [
            (
                "progress = (step - warmup_steps) / (decay_end - warmup_steps)  # decay_end is absolute, not a duration",
                "optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=peak_lr)\n"
                "    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, decay_end - warmup_steps, min_lr)\n"
                "    for _ in range(step - warmup_steps):\n"
                "        optimizer.step()\n"
                "        scheduler.step()\n"
                "    return optimizer.param_groups[0]['lr']",
            )
        ],
        mistake_zh="把 torch 的 CosineAnnealingLR 推进到该步再读它的 lr",
    ),
]
