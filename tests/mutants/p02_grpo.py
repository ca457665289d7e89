"""Realistic wrong versions of the p02.grpo solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "group_advantages",
        "population_std",
        "divides by the population std (G) instead of TRL's unbiased one (G - 1)",
        [
            (
                "centred = centred / (grouped.std(dim=1, keepdim=True) + 1e-4)",
                "centred = centred / (grouped.std(dim=1, keepdim=True, unbiased=False) + 1e-4)",
            )
        ],
        mistake_zh="除以总体标准差（G），而不是 TRL 用的无偏标准差（G - 1）",
    ),
    Mutant(
        "group_advantages",
        "no_epsilon",
        "divides by the bare std: an all-equal group gives 0/0 = NaN",
        [
            (
                "centred = centred / (grouped.std(dim=1, keepdim=True) + 1e-4)",
                "centred = centred / grouped.std(dim=1, keepdim=True)",
            )
        ],
        mistake_zh="直接除以标准差：全部相等的组得到 0/0 = NaN",
    ),
    Mutant(
        "group_advantages",
        "batch_mean",
        "subtracts the batch mean instead of each group's",
        [("centred = grouped - grouped.mean(dim=1, keepdim=True)", "centred = grouped - grouped.mean()")],
        mistake_zh="减去整个批的均值，而不是各组的均值",
    ),
    Mutant(
        "group_advantages",
        "interleaved_groups",
        "groups strided completions (view(G, -1)) instead of contiguous ones",
        [
            ("grouped = rewards.view(-1, group_size)", "grouped = rewards.view(group_size, -1).T"),
            ("return centred.reshape(-1)", "return centred.T.reshape(-1)"),
        ],
        mistake_zh="按步长交错分组（view(G, -1)），而不是连续分组",
    ),
    Mutant(
        "group_advantages",
        "none_still_scales",
        "divides by the group std for scale='none' too",
        [('if scale == "group":', 'if scale in ("group", "none"):')],
        mistake_zh="scale='none' 时也除以组标准差",
    ),
    Mutant(
        "clipped_token_loss",
        "ratio_of_exps",
        "computes the ratio as exp(logps) / exp(old_logps) (0/0 once log-probs fall below about -104 in float32)",
        [("ratio = torch.exp(logps - old_logps)", "ratio = torch.exp(logps) / torch.exp(old_logps)")],
        mistake_zh="把比率写成 exp(logps) / exp(old_logps)（float32 中对数概率低于约 -104 时变成 0/0）",
    ),
    Mutant(
        "clipped_token_loss",
        "k3_ratio_of_exps",
        "computes k3's ratio as exp(ref_logps) / exp(logps) (0/0 at very negative log-probs in float32)",
        [("torch.exp(log_u) - log_u - 1", "torch.exp(ref_logps) / torch.exp(logps) - log_u - 1")],
        mistake_zh="把 k3 中的比率写成 exp(ref_logps) / exp(logps)（float32 中对数概率很小时变成 0/0）",
    ),
    Mutant(
        "clipped_token_loss",
        "max_not_min",
        "takes the optimistic branch: -max(rho A, clip(rho) A)",
        [("loss = -torch.min(unclipped, clipped)", "loss = -torch.max(unclipped, clipped)")],
        mistake_zh="取了乐观的分支：-max(rho A, clip(rho) A)",
    ),
    Mutant(
        "clipped_token_loss",
        "clip_without_min",
        "uses the clipped branch alone: no gradient outside the range on either side",
        [("loss = -torch.min(unclipped, clipped)", "loss = -clipped")],
        mistake_zh="只用截断分支：范围两侧之外都没有梯度",
    ),
    Mutant(
        "clipped_token_loss",
        "symmetric_clip",
        "ignores epsilon_high (DAPO's clip-higher)",
        [
            (
                "clipped = torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high) * adv",
                "clipped = torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_low) * adv",
            )
        ],
        mistake_zh="忽略 epsilon_high（DAPO 的 clip-higher）",
    ),
    Mutant(
        "clipped_token_loss",
        "k3_inverted_ratio",
        "uses log(pi_theta / pi_ref) in k3: biased, its mean is not KL(pi || pi_ref)",
        [("log_u = ref_logps - logps", "log_u = logps - ref_logps")],
        mistake_zh="k3 里用 log(pi_theta / pi_ref)：有偏，其均值不是 KL(pi ‖ pi_ref)",
    ),
    Mutant(
        "clipped_token_loss",
        "k3_without_minus_one",
        "drops the -1 of k3 (then it is neither >= 0 nor zero at pi = pi_ref)",
        [("loss = loss + beta * (torch.exp(log_u) - log_u - 1)", "loss = loss + beta * (torch.exp(log_u) - log_u)")],
        mistake_zh="丢了 k3 的 -1（于是它既不 >= 0，在 pi = pi_ref 时也不为零）",
    ),
    Mutant(
        "clipped_token_loss",
        "kl_subtracted",
        "subtracts the KL term from the loss (rewards drifting away from the reference)",
        [
            (
                "loss = loss + beta * (torch.exp(log_u) - log_u - 1)",
                "loss = loss - beta * (torch.exp(log_u) - log_u - 1)",
            )
        ],
        mistake_zh="从损失中减去 KL 项（奖励偏离参考模型）",
    ),
    Mutant(
        "aggregate_loss",
        "grpo_as_token_mean",
        "averages over all tokens for GRPO (DAPO's mean)",
        [
            (
                "return (masked.sum(dim=1) / lengths.clamp(min=1)).mean()",
                "return masked.sum() / lengths.sum().clamp(min=1)",
            )
        ],
        mistake_zh="GRPO 对所有 token 取平均（DAPO 的平均方式）",
    ),
    Mutant(
        "aggregate_loss",
        "dr_grpo_over_tokens",
        "divides Dr. GRPO's sum by the token count instead of the constant N * L_max",
        [
            (
                "return masked.sum() / (per_token_loss.shape[0] * max_completion_length)",
                "return masked.sum() / lengths.sum().clamp(min=1)",
            )
        ],
        mistake_zh="Dr. GRPO 的和除以 token 数，而不是常数 N * L_max",
    ),
    Mutant(
        "aggregate_loss",
        "mask_multiplied",
        "multiplies by the mask: NaN or inf in the padding leaks into the loss",
        [
            (
                "masked = torch.where(mask, per_token_loss, torch.zeros_like(per_token_loss))",
                "masked = per_token_loss * mask",
            )
        ],
        mistake_zh="乘以掩码：padding 中的 NaN 或 inf 漏进了损失",
    ),
    Mutant(
        "aggregate_loss",
        "grpo_over_padded_length",
        "divides each completion by the padded length T instead of its own length",
        [
            (
                "return (masked.sum(dim=1) / lengths.clamp(min=1)).mean()",
                "return (masked.sum(dim=1) / per_token_loss.shape[1]).mean()",
            )
        ],
        mistake_zh="每个补全除以填充后的长度 T，而不是它自己的长度",
    ),
]
