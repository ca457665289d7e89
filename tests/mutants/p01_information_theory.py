"""Realistic wrong versions of the p01.information_theory solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "entropy",
        "no_zero_guard",
        "computes p * log p everywhere: masked tokens give 0 * (-inf) = NaN",
        [("terms = torch.where(p > 0, p * log_p, torch.zeros_like(p))", "terms = p * log_p")],
        mistake_zh="处处计算 p·log p：被屏蔽的 token 得到 0·(-inf) = NaN",
    ),
    Mutant(
        "entropy",
        "no_upcast",
        "computes in the input dtype (bf16/fp16 log-probabilities)",
        [("compute = torch.promote_types(logits.dtype, torch.float32)", "compute = logits.dtype")],
        mistake_zh="在输入的数据类型下计算（bf16/fp16 的对数概率）",
    ),
    Mutant(
        "entropy",
        "wrong_sign",
        "returns sum p log p (negative) instead of its negation",
        [("return (-terms.sum(dim=-1)).to(logits.dtype)", "return terms.sum(dim=-1).to(logits.dtype)")],
        mistake_zh="返回 Σ p log p（负数），而不是它的相反数",
    ),
    Mutant(
        "entropy",
        "naive_softmax",
        "normalises exp(logits) by hand without subtracting the max: overflows for large logits",
        [
            (
                "log_p = torch.log_softmax(logits.to(compute), dim=-1)",
                "log_p = (logits.to(compute).exp() / logits.to(compute).exp().sum(-1, keepdim=True)).log()",
            )
        ],
        mistake_zh="手写 exp(logits) 归一化却不减最大值：logits 大时溢出",
    ),
    Mutant(
        "kl_divergence",
        "swapped_direction",
        "computes KL(q || p) instead of KL(p || q)",
        [
            (
                "log_p = torch.log_softmax(p_logits.to(compute), dim=-1)\n    log_q = torch.log_softmax(q_logits.to(compute), dim=-1)",
                "log_p = torch.log_softmax(q_logits.to(compute), dim=-1)\n    log_q = torch.log_softmax(p_logits.to(compute), dim=-1)",
            )
        ],
        mistake_zh="算成 KL(q ‖ p) 而不是 KL(p ‖ q)",
    ),
    Mutant(
        "kl_divergence",
        "no_zero_guard",
        "keeps the terms with p = 0: masked tokens give 0 * (-inf - log q) = NaN",
        [("terms = torch.where(p > 0, p * (log_p - log_q), torch.zeros_like(p))", "terms = p * (log_p - log_q)")],
        mistake_zh="保留 p = 0 的项：被屏蔽的 token 得到 0·(-inf - log q) = NaN",
    ),
    Mutant(
        "kl_divergence",
        "probability_difference",
        "uses p * (p - q) instead of p * (log p - log q)",
        [("p * (log_p - log_q)", "p * (p - log_q.exp())")],
        mistake_zh="用 p·(p - q) 代替 p·(log p - log q)",
    ),
    Mutant(
        "kl_divergence",
        "calls_f_kl_div",
        "calls F.kl_div (with PyTorch's reversed argument order)",
        [
            (
                "terms = torch.where(p > 0, p * (log_p - log_q), torch.zeros_like(p))",
                "terms = torch.nn.functional.kl_div(log_q, log_p, log_target=True, reduction='none')",
            )
        ],
        mistake_zh="调用 F.kl_div（PyTorch 的参数顺序是反的）",
    ),
    Mutant(
        "perplexity",
        "no_shift",
        "scores the logits at position t against the label at position t",
        [
            (
                "log_q = torch.log_softmax(logits[:, :-1].float(), dim=-1)",
                "log_q = torch.log_softmax(logits.float(), dim=-1)",
            ),
            ("targets = labels[:, 1:]  # (B, T-1)", "targets = labels  # (B, T)"),
        ],
        mistake_zh="位置 t 的 logits 与位置 t 的标签比较",
    ),
    Mutant(
        "perplexity",
        "ignored_labels_counted",
        "divides by every predicted position, ignored labels included",
        [("/ valid.sum()", "/ valid.numel()")],
        mistake_zh="除以所有被预测的位置，被忽略的标签也算在内",
    ),
    Mutant(
        "perplexity",
        "mean_of_sequence_means",
        "averages each sequence, then the sequences",
        [
            (
                "nll = -torch.where(valid, picked, 0.0).sum() / valid.sum()",
                "nll = (-torch.where(valid, picked, 0.0).sum(-1) / valid.sum(-1)).mean()",
            )
        ],
        mistake_zh="先对每个序列求平均，再对序列求平均",
    ),
    Mutant(
        "perplexity",
        "calls_cross_entropy",
        "lets F.cross_entropy do the work",
        [
            (
                "nll = -torch.where(valid, picked, 0.0).sum() / valid.sum()",
                "nll = torch.nn.functional.cross_entropy(logits[:, :-1].float().flatten(0, 1), targets.flatten(), "
                "ignore_index=ignore_index)",
            )
        ],
        mistake_zh="让 F.cross_entropy 代劳",
    ),
    Mutant(
        "gaussian_kl",
        "variances_for_sigmas",
        "treats sigma as a variance: no square on the ratio",
        [("variance_ratio = (sigma_p / sigma_q) ** 2", "variance_ratio = sigma_p / sigma_q")],
        mistake_zh="把 sigma 当作方差：比值没有平方",
    ),
    Mutant(
        "gaussian_kl",
        "mean_over_dims",
        "averages over the dimensions instead of summing",
        [("- variance_ratio.log()).sum(dim=-1)", "- variance_ratio.log()).mean(dim=-1)")],
        mistake_zh="沿各维取平均而不是求和",
    ),
    Mutant(
        "gaussian_kl",
        "mean_term_over_sigma_p",
        "divides the squared mean difference by sigma_p^2 instead of sigma_q^2",
        [("mean_term = ((mu_p - mu_q) / sigma_q) ** 2", "mean_term = ((mu_p - mu_q) / sigma_p) ** 2")],
        mistake_zh="均值差的平方除以 sigma_p² 而不是 sigma_q²",
    ),
    Mutant(
        "gaussian_kl",
        "detached",
        "computes from detached tensors, so no gradient flows",
        [("mean_term = ((mu_p - mu_q) / sigma_q) ** 2", "mean_term = ((mu_p - mu_q) / sigma_q).detach() ** 2")],
        mistake_zh="用 detach 过的张量计算，梯度传不回去",
    ),
]
