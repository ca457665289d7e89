"""Realistic wrong versions of the p02.dpo solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "sequence_logprobs",
        "no_shift",
        "scores each position's own token instead of the next one",
        [("targets = input_ids[:, 1:].unsqueeze(-1)", "targets = input_ids[:, :-1].unsqueeze(-1)")],
        mistake_zh="给每个位置自己的 token 打分，而不是下一个 token",
    ),
    Mutant(
        "sequence_logprobs",
        "mask_not_shifted",
        "shifts the tokens but not the completion mask (the first completion token is lost, one padding token scored)",
        [("mask = completion_mask[:, 1:].bool()", "mask = completion_mask[:, :-1].bool()")],
        mistake_zh="错开了 token 却没错开补全掩码（丢了第一个补全 token，多算了一个 padding token）",
    ),
    Mutant(
        "sequence_logprobs",
        "prompt_scored",
        "sums over every token, prompt and padding included",
        [("mask = completion_mask[:, 1:].bool()", "mask = torch.ones_like(completion_mask[:, 1:]).bool()")],
        mistake_zh="对每个 token 求和，包括提示和 padding",
    ),
    Mutant(
        "sequence_logprobs",
        "mean_over_all_positions",
        "takes the mean over all T-1 positions instead of the sum",
        [("total = token_logps.sum(dim=-1)", "total = token_logps.mean(dim=-1)")],
        mistake_zh="对全部 T-1 个位置取平均而不是求和",
    ),
    Mutant(
        "sequence_logprobs",
        "log_of_softmax",
        "takes log(softmax(x)), which underflows to -inf for improbable tokens",
        [
            (
                "logprobs = torch.log_softmax(logits[:, :-1].to(compute_dtype), dim=-1)",
                "logprobs = torch.softmax(logits[:, :-1].to(compute_dtype), dim=-1).log()",
            )
        ],
        mistake_zh="计算 log(softmax(x))，对不太可能的 token 下溢为 -inf",
    ),
    Mutant(
        "sequence_logprobs",
        "mask_multiplied",
        "multiplies by the mask instead of selecting: NaN logits at padding give NaN",
        [
            (
                "token_logps = torch.where(mask, token_logps, torch.zeros_like(token_logps))",
                "token_logps = token_logps * mask",
            )
        ],
        mistake_zh="乘以掩码而不是选择：padding 处的 NaN logits 得到 NaN",
    ),
    Mutant(
        "sequence_logprobs",
        "no_upcast",
        "computes in the logits' dtype (bf16/fp16 log-probs)",
        [
            (
                "compute_dtype = torch.promote_types(logits.dtype, torch.float32)",
                "compute_dtype = logits.dtype",
            )
        ],
        mistake_zh="在 logits 的数据类型下计算（bf16/fp16 的对数概率）",
    ),
    Mutant(
        "sequence_logprobs",
        "calls_the_builtin",
        "uses F.cross_entropy(reduction='none'), the reference the lesson forbids",
        [
            (
                "token_logps = logprobs.gather(-1, targets).squeeze(-1)",
                "token_logps = -F.cross_entropy(logprobs.transpose(1, 2), targets.squeeze(-1), reduction='none')",
            )
        ],
        mistake_zh="用了本课禁止的参考实现 F.cross_entropy(reduction='none')",
    ),
    Mutant(
        "preference_loss",
        "margin_flipped",
        "takes rejected minus chosen: trains towards the rejected answers",
        [("delta = chosen_logratios - rejected_logratios", "delta = rejected_logratios - chosen_logratios")],
        mistake_zh="取 rejected 减 chosen：朝被拒绝的答案训练",
    ),
    Mutant(
        "preference_loss",
        "no_beta",
        "forgets beta inside the sigmoid",
        [("-(1 - label_smoothing) * F.logsigmoid(beta * delta)", "-(1 - label_smoothing) * F.logsigmoid(delta)")],
        mistake_zh="sigmoid 里忘了 beta",
    ),
    Mutant(
        "preference_loss",
        "log_of_sigmoid",
        "computes -log(sigmoid(z)), which is inf once sigmoid underflows",
        [
            (
                "-(1 - label_smoothing) * F.logsigmoid(beta * delta)",
                "-(1 - label_smoothing) * torch.log(torch.sigmoid(beta * delta))",
            )
        ],
        mistake_zh="计算 -log(sigmoid(z))，sigmoid 下溢后就是 inf",
    ),
    Mutant(
        "preference_loss",
        "smoothing_sign",
        "adds the flipped-label term with the wrong sign",
        [
            (
                "- label_smoothing * F.logsigmoid(-beta * delta)",
                "+ label_smoothing * F.logsigmoid(-beta * delta)",
            )
        ],
        mistake_zh="翻转标签那一项的符号写反了",
    ),
    Mutant(
        "preference_loss",
        "ipo_target_one_over_beta",
        "regresses IPO's margin to 1/beta instead of 1/(2 beta)",
        [("losses = (delta - 1 / (2 * beta)) ** 2", "losses = (delta - 1 / beta) ** 2")],
        mistake_zh="IPO 的间隔回归到 1/beta 而不是 1/(2 beta)",
    ),
    Mutant(
        "preference_loss",
        "rewards_attached",
        "returns the rewards with their graph",
        [
            ("chosen_rewards = beta * chosen_logratios.detach()", "chosen_rewards = beta * chosen_logratios"),
            ("rejected_rewards = beta * rejected_logratios.detach()", "rejected_rewards = beta * rejected_logratios"),
        ],
        mistake_zh="返回的奖励带着计算图",
    ),
    Mutant(
        "preference_loss",
        "rewards_without_beta",
        "reports the raw log-ratios as rewards",
        [
            ("chosen_rewards = beta * chosen_logratios.detach()", "chosen_rewards = chosen_logratios.detach()"),
            ("rejected_rewards = beta * rejected_logratios.detach()", "rejected_rewards = rejected_logratios.detach()"),
        ],
        mistake_zh="把原始的对数比值当作奖励报告",
    ),
    Mutant(
        "dpo_batch_loss",
        "reference_with_grad",
        "runs the reference model with autograd on",
        [("with torch.no_grad():", "if True:")],
        mistake_zh="参考模型在开启 autograd 的情况下运行",
    ),
    Mutant(
        "dpo_batch_loss",
        "reference_detached_after",
        "runs the reference model with autograd on and detaches its log-probabilities afterwards (same numbers, "
        "but the reference's graph and activations are built and kept)",
        [
            ("with torch.no_grad():", "if True:"),
            (
                "ref_logps = sequence_logprobs(ref_logits, input_ids, completion_mask, average)",
                "ref_logps = sequence_logprobs(ref_logits, input_ids, completion_mask, average).detach()",
            ),
        ],
        mistake_zh="在开启 autograd 的情况下运行参考模型，事后再对其对数概率调用 .detach()（数值相同，但白白构建并保留了参考模型的计算图和激活）",
    ),
    Mutant(
        "dpo_batch_loss",
        "policy_halves_swapped",
        "splits the policy's rows as [rejected; chosen] but the reference's as [chosen; rejected]",
        [
            (
                "policy_chosen, policy_rejected = policy_logps.chunk(2)",
                "policy_rejected, policy_chosen = policy_logps.chunk(2)",
            )
        ],
        mistake_zh="策略的行按 [rejected; chosen] 切分，参考模型的却按 [chosen; rejected]",
    ),
    Mutant(
        "dpo_batch_loss",
        "ipo_on_sums",
        "feeds IPO summed log-probs instead of TRL's per-token means",
        [('average = loss_type == "ipo"', "average = False")],
        mistake_zh="给 IPO 喂求和的对数概率，而不是 TRL 的逐 token 平均",
    ),
    Mutant(
        "dpo_batch_loss",
        "accuracy_counts_ties",
        "counts a tie as a correct preference",
        [
            (
                '"rewards/accuracies": (chosen_rewards > rejected_rewards).float().mean().item()',
                '"rewards/accuracies": (chosen_rewards >= rejected_rewards).float().mean().item()',
            )
        ],
        mistake_zh="把平局算作偏好正确",
    ),
    Mutant(
        "dpo_batch_loss",
        "sum_over_pairs",
        "returns the sum of the per-pair losses instead of the mean",
        [("return losses.mean(), metrics", "return losses.sum(), metrics")],
        mistake_zh="返回各对损失之和而不是平均",
    ),
]
