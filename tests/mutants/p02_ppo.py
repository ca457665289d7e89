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
    ),
    Mutant(
        "gae",
        "left_to_right",
        "runs the recursion forwards in time",
        [("for t in reversed(range(steps)):", "for t in range(steps):")],
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
    ),
    Mutant(
        "ppo_policy_loss",
        "padding_in_mean",
        "averages the token losses over every position, padding included",
        [("loss = (per_token * valid).sum() / valid.sum()", "loss = (per_token * valid).mean()")],
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
    ),
    Mutant(
        "ppo_value_loss",
        "no_half",
        "forgets the factor 1/2",
        [("return 0.5 * (squared * valid).sum() / valid.sum()", "return (squared * valid).sum() / valid.sum()")],
    ),
    Mutant(
        "kl",
        "k1_sign_flipped",
        "uses log r itself as k1 (the reverse sign)",
        [("k1 = -log_ratio", "k1 = log_ratio")],
    ),
    Mutant(
        "kl",
        "k3_without_log_term",
        "writes k3 as r - 1 (unbiased for 0, not for KL)",
        [("k3 = torch.expm1(log_ratio) - log_ratio", "k3 = torch.expm1(log_ratio)")],
    ),
    Mutant(
        "kl",
        "ratio_inverted",
        "takes log r = logp - ref (the KL in the other direction for k3)",
        [("log_ratio = ref_logprobs - logprobs", "log_ratio = logprobs - ref_logprobs")],
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
    ),
    Mutant(
        "kl",
        "penalty_on_padding",
        "puts the KL penalty on padding tokens too",
        [("rewards = torch.where(real, -beta * k1, torch.zeros_like(k1))", "rewards = -beta * k1")],
    ),
]
