"""Realistic wrong versions of the p02.ppo solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "gae",
        "bootstraps_across_episode_end",
        "keeps gamma * V_{t+1} in delta at an episode end",
        [
            (
                "deltas = rewards + gamma * values[..., 1:] * not_done - values[..., :-1]",
                "deltas = rewards + gamma * values[..., 1:] - values[..., :-1]",
            )
        ],
        mistake_zh="回合结束处的 delta 里仍保留 gamma * V_{t+1}",
    ),
    Mutant(
        "gae",
        "advantage_leaks_across_episode_end",
        "carries A_{t+1} across an episode end (no (1 - d_t) in the recursion)",
        [
            (
                "running = deltas[..., t] + gamma * lam * not_done[..., t] * running",
                "running = deltas[..., t] + gamma * lam * running",
            )
        ],
        mistake_zh="让 A_{t+1} 越过回合结束传递（递推里没有 (1 - d_t)）",
    ),
    Mutant(
        "gae",
        "gamma_without_lambda",
        "discounts the carried advantage by gamma only",
        [
            (
                "running = deltas[..., t] + gamma * lam * not_done[..., t] * running",
                "running = deltas[..., t] + gamma * not_done[..., t] * running",
            )
        ],
        mistake_zh="传递的优势只按 gamma 折扣",
    ),
    Mutant(
        "gae",
        "advantages_keep_gradient",
        "does not detach the values: gradients flow back through the advantages",
        [
            (
                "rewards, values = rewards.detach(), values.detach().to(rewards.dtype)",
                "values = values.to(rewards.dtype)",
            )
        ],
        mistake_zh="不 detach 价值：梯度经由优势回传",
    ),
    Mutant(
        "gae",
        "left_to_right",
        "runs the recursion forwards in time",
        [("for t in reversed(range(steps)):", "for t in range(steps):")],
        mistake_zh="递推按时间正向进行",
    ),
    Mutant(
        "ppo_policy_loss",
        "ratio_of_exps",
        "computes the ratio as exp(logprobs) / exp(old_logprobs) (0/0 once log-probs fall below about -104 in float32)",
        [("ratio = torch.exp(log_ratio)", "ratio = torch.exp(logprobs) / torch.exp(old_logprobs.detach())")],
        mistake_zh="把比率写成 exp(logprobs) / exp(old_logprobs)（float32 中对数概率低于约 -104 时变成 0/0）",
    ),
    Mutant(
        "ppo_policy_loss",
        "max_instead_of_min",
        "takes the optimistic max of the two surrogates",
        [("per_token = -torch.min(unclipped, clipped)", "per_token = -torch.max(unclipped, clipped)")],
        mistake_zh="取两个代理目标中乐观的 max",
    ),
    Mutant(
        "ppo_policy_loss",
        "clips_the_advantage",
        "clips the advantage instead of the ratio",
        [
            (
                "clipped = torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps) * advantages",
                "clipped = ratio * torch.clamp(advantages, -clip_eps, clip_eps)",
            )
        ],
        mistake_zh="截断的是优势而不是比率",
    ),
    Mutant(
        "ppo_policy_loss",
        "padding_in_mean",
        "averages the token losses over every position, padding included",
        [("loss = (per_token * valid).sum() / valid.sum()", "loss = (per_token * valid).mean()")],
        mistake_zh="对所有位置（含 padding）的 token 损失取平均",
    ),
    Mutant(
        "ppo_policy_loss",
        "sequence_as_token",
        "returns the token mean for reduction='sequence'",
        [
            (
                "loss = ((per_token * valid).sum(dim=1)[rows] / counts[rows]).mean()",
                "loss = (per_token * valid).sum() / valid.sum()",
            )
        ],
        mistake_zh="reduction='sequence' 时返回 token 平均",
    ),
    Mutant(
        "ppo_policy_loss",
        "clip_fraction_over_padding",
        "counts clipped tokens over all positions",
        [
            (
                "clip_fraction = (((ratio - 1).abs() > clip_eps).to(valid.dtype) * valid).sum() / valid.sum()",
                "clip_fraction = ((ratio - 1).abs() > clip_eps).to(valid.dtype).mean()",
            )
        ],
        mistake_zh="被截断 token 的比例按所有位置统计",
    ),
    Mutant(
        "ppo_value_loss",
        "clip_around_new_value",
        "clips around the new value (a no-op) instead of the old one",
        [
            (
                "clipped_values = old_values + torch.clamp(values - old_values, -clip_eps, clip_eps)",
                "clipped_values = values + torch.clamp(values - old_values, -clip_eps, clip_eps) * 0",
            )
        ],
        mistake_zh="围绕新的价值截断（等于没做），而不是旧的价值",
    ),
    Mutant(
        "ppo_value_loss",
        "min_instead_of_max",
        "takes the smaller of the two squared errors",
        [
            (
                "squared = torch.max((values - returns) ** 2, (clipped_values - returns) ** 2)",
                "squared = torch.min((values - returns) ** 2, (clipped_values - returns) ** 2)",
            )
        ],
        mistake_zh="取两个平方误差中较小的那个",
    ),
    Mutant(
        "ppo_value_loss",
        "no_half",
        "forgets the factor 1/2",
        [("return 0.5 * (squared * valid).sum() / valid.sum()", "return (squared * valid).sum() / valid.sum()")],
        mistake_zh="忘了因子 1/2",
    ),
    Mutant(
        "kl",
        "k1_sign_flipped",
        "uses log r itself as k1 (the reverse sign)",
        [("k1 = -log_ratio", "k1 = log_ratio")],
        mistake_zh="直接用 log r 作为 k1（符号反了）",
    ),
    Mutant(
        "kl",
        "k3_without_log_term",
        "writes k3 as r - 1 (unbiased for 0, not for KL)",
        [("k3 = torch.expm1(log_ratio) - log_ratio", "k3 = torch.expm1(log_ratio)")],
        mistake_zh="把 k3 写成 r - 1（对 0 无偏，对 KL 不是）",
    ),
    Mutant(
        "kl",
        "ratio_inverted",
        "takes log r = logp - ref (the KL in the other direction for k3)",
        [("log_ratio = ref_logprobs - logprobs", "log_ratio = logprobs - ref_logprobs")],
        mistake_zh="取 log r = logp - ref（k3 成了另一个方向的 KL）",
    ),
    Mutant(
        "kl",
        "score_on_last_column",
        "adds the score at the last column, a padding token on right-padded rows",
        [
            (
                "last = (torch.arange(real.shape[1]) * real).argmax(dim=1)",
                "last = torch.full((real.shape[0],), real.shape[1] - 1)",
            )
        ],
        mistake_zh="把分数加在最后一列，右填充的行那是 padding token",
    ),
    Mutant(
        "kl",
        "penalty_on_padding",
        "puts the KL penalty on padding tokens too",
        [("rewards = torch.where(real, -beta * k1, torch.zeros_like(k1))", "rewards = -beta * k1")],
        mistake_zh="padding token 上也加了 KL 惩罚",
    ),
]
