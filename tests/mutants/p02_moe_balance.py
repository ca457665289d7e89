"""Realistic wrong versions of the p02.moe_balance solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    # load_balancing_loss
    Mutant(
        "load_balancing_loss",
        "f_not_divided_by_k",
        "divides the counts by T only (Hugging Face's normalisation): a balanced router scores k, not 1",
        [("counts / (real_probs.shape[0] * top_k)", "counts / real_probs.shape[0]")],
        mistake_zh="计数只除以 T（Hugging Face 的归一化）：均衡的路由器得 k 而不是 1",
    ),
    Mutant(
        "load_balancing_loss",
        "P_from_chosen_gates",
        "averages only the probabilities of the chosen experts instead of the full softmax",
        [
            (
                "P = real_probs.mean(dim=0)",
                "P = torch.zeros_like(real_probs).scatter(-1, chosen, real_probs.gather(-1, chosen)).mean(dim=0)",
            )
        ],
        mistake_zh="只平均被选中专家的概率，而不是完整的 softmax",
    ),
    Mutant(
        "load_balancing_loss",
        "padding_in_P",
        "applies the token mask to the counts but averages P over every token, padding included",
        [("P = real_probs.mean(dim=0)", "P = probs.mean(dim=0)")],
        mistake_zh="计数用了 token 掩码，P 却对所有 token（含 padding）取平均",
    ),
    Mutant(
        "load_balancing_loss",
        "missing_factor_N",
        "returns sum(f * P) without the factor N",
        [("return N * (f * P).sum()", "return (f * P).sum()")],
        mistake_zh="返回 sum(f * P)，漏了因子 N",
    ),
    # router_z_loss
    Mutant(
        "router_z_loss",
        "naive_logsumexp",
        "log(exp(l).sum()): overflows to inf for large logits",
        [
            (
                "torch.logsumexp(router_logits.to(compute_dtype), dim=-1)",
                "router_logits.to(compute_dtype).exp().sum(dim=-1).log()",
            )
        ],
        mistake_zh="log(exp(l).sum())：logits 大时溢出为 inf",
    ),
    Mutant(
        "router_z_loss",
        "square_of_mean",
        "squares the mean log-partition instead of averaging the squares",
        [("lse.pow(2).mean()", "lse.mean().pow(2)")],
        mistake_zh="对平均的对数配分函数取平方，而不是对平方取平均",
    ),
    Mutant(
        "router_z_loss",
        "sum_over_tokens",
        "sums over the tokens instead of averaging",
        [("lse.pow(2).mean()", "lse.pow(2).sum()")],
        mistake_zh="对 token 求和而不是求平均",
    ),
    # biased_routing
    Mutant(
        "biased_routing",
        "gates_from_biased_scores",
        "weights the experts by score + bias: the bias changes the output",
        [("gates = scores.gather(-1, experts)", "gates = (scores + bias.to(compute_dtype)).gather(-1, experts)")],
        mistake_zh="按 score + bias 给专家加权：bias 改变了输出",
    ),
    Mutant(
        "biased_routing",
        "bias_on_logits",
        "adds the bias to the logits before the sigmoid (a different selection)",
        [
            (
                "torch.topk(scores + bias.to(compute_dtype), top_k, dim=-1)",
                "torch.topk((router_logits.to(compute_dtype) + bias.to(compute_dtype)).sigmoid(), top_k, dim=-1)",
            )
        ],
        mistake_zh="在 sigmoid 之前把 bias 加到 logits 上（选择变了）",
    ),
    Mutant(
        "biased_routing",
        "no_renormalisation",
        "returns the raw sigmoid scores of the chosen experts",
        [("return gates / gates.sum(dim=-1, keepdim=True), experts", "return gates, experts")],
        mistake_zh="返回被选专家的原始 sigmoid 分数",
    ),
    # update_bias
    Mutant(
        "update_bias",
        "sign_reversed",
        "raises the bias of overloaded experts (load - mean instead of mean - load)",
        [("torch.sign(mean_load - load)", "torch.sign(load - mean_load)")],
        mistake_zh="提高了过载专家的 bias（load - mean 而不是 mean - load）",
    ),
    Mutant(
        "update_bias",
        "proportional_update",
        "steps by gamma times the load error instead of its sign",
        [("torch.sign(mean_load - load)", "(mean_load - load)")],
        mistake_zh="按 gamma 乘负载误差更新，而不是按它的符号",
    ),
    Mutant(
        "update_bias",
        "first_choices_only",
        "counts only each token's first choice as load",
        [
            ("torch.bincount(experts.flatten(), minlength=N)", "torch.bincount(experts[:, 0], minlength=N)"),
            ("experts.numel() / N", "experts.shape[0] / N"),
        ],
        mistake_zh="只把每个 token 的第一选择计入负载",
    ),
    # moe_with_shared_experts
    Mutant(
        "moe_with_shared_experts",
        "shared_experts_forgotten",
        "leaves out the shared experts",
        [("for s in range(shared_gate.shape[0]):", "for s in range(0):")],
        mistake_zh="漏掉了共享专家",
    ),
    Mutant(
        "moe_with_shared_experts",
        "shared_experts_averaged",
        "averages the shared experts instead of summing them",
        [("@ shared_down[s].T", "@ shared_down[s].T / shared_gate.shape[0]")],
        mistake_zh="对共享专家取平均而不是求和",
    ),
    Mutant(
        "moe_with_shared_experts",
        "routed_without_bias",
        "chooses the routed experts without the bias",
        [("biased_routing(logits, bias, top_k)", "biased_routing(logits, torch.zeros_like(bias), top_k)")],
        mistake_zh="选择路由专家时没有加 bias",
    ),
    Mutant(
        "moe_with_shared_experts",
        "gates_detached",
        "detaches the gates: the router receives no gradient",
        [("gates[token_ids, choice, None].to(x.dtype)", "gates[token_ids, choice, None].detach().to(x.dtype)")],
        mistake_zh="把门控 detach 了：路由器收不到梯度",
    ),
    Mutant(
        "update_bias",
        "mean_load_without_k",
        "takes the mean load as T / N, forgetting that every token makes k choices",
        [("experts.numel() / N", "experts.shape[0] / N")],
        mistake_zh="平均负载取 T / N，忘了每个 token 做 k 次选择",
    ),
]
