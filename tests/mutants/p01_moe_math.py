"""Realistic wrong versions of the p01.moe_math solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "route_with_capacity",
        "first_choice_only",
        "counts only each token's first choice (loads sum to T, not T*k)",
        [("torch.bincount(chosen.reshape(-1), minlength", "torch.bincount(chosen[:, 0], minlength")],
        mistake_zh="只统计每个 token 的第一选择（负载之和为 T，而不是 T·k）",
    ),
    Mutant(
        "route_with_capacity",
        "no_minlength",
        "bincount without minlength: idle experts at the end disappear",
        [
            (
                "torch.bincount(chosen.reshape(-1), minlength=num_experts)",
                "torch.bincount(chosen.reshape(-1))",
            )
        ],
        mistake_zh="bincount 不带 minlength：排在末尾的空闲专家消失了",
    ),
    Mutant(
        "route_with_capacity",
        "switch_capacity_without_k",
        "uses the top-1 (Switch) capacity ceil(c * T / E) for a top-k router",
        [
            (
                "math.ceil(capacity_factor * num_tokens * top_k / num_experts)",
                "math.ceil(capacity_factor * num_tokens / num_experts)",
            )
        ],
        mistake_zh="top-k 路由器用了 top-1（Switch）的容量 ceil(c·T / E)",
    ),
    Mutant(
        "route_with_capacity",
        "capacity_floor",
        "rounds the capacity down",
        [
            (
                "math.ceil(capacity_factor * num_tokens * top_k / num_experts)",
                "math.floor(capacity_factor * num_tokens * top_k / num_experts)",
            )
        ],
        mistake_zh="容量向下取整",
    ),
    Mutant(
        "route_with_capacity",
        "counts_overloaded_experts",
        "counts the experts over capacity instead of the assignments dropped",
        [
            (
                "int((tokens_per_expert - capacity).clamp(min=0).sum())",
                "int((tokens_per_expert > capacity).sum())",
            )
        ],
        mistake_zh="统计超容量的专家个数，而不是被丢弃的分配数",
    ),
    Mutant(
        "route_with_capacity",
        "lowest_logits",
        "picks the k smallest logits",
        [("router_logits.topk(top_k, dim=-1)", "router_logits.topk(top_k, dim=-1, largest=False)")],
        mistake_zh="选了最小的 k 个 logits",
    ),
    Mutant(
        "expected_drop_fraction",
        "with_replacement",
        "models the load as Binomial(T*k, 1/E): picks with replacement",
        [
            ("p = top_k / num_experts  #", "p = 1 / num_experts  #"),
            ("for n in range(capacity + 1, num_tokens + 1):", "for n in range(capacity + 1, num_tokens * top_k + 1):"),
            (
                "log_pmf = (math.lgamma(num_tokens + 1) - math.lgamma(n + 1) - math.lgamma(num_tokens - n + 1)\n"
                "                       + n * math.log(p) + (num_tokens - n) * math.log1p(-p))",
                "log_pmf = (math.lgamma(num_tokens * top_k + 1) - math.lgamma(n + 1)\n"
                "                       - math.lgamma(num_tokens * top_k - n + 1)\n"
                "                       + n * math.log(p) + (num_tokens * top_k - n) * math.log1p(-p))",
            ),
        ],
        mistake_zh="把负载建模为 Binomial(T·k, 1/E)：有放回地选择",
    ),
    Mutant(
        "expected_drop_fraction",
        "overflow_probability",
        "sums P(load > C) instead of the expected excess E[max(0, load - C)]",
        [("overflow += (n - capacity) * math.exp(log_pmf)", "overflow += math.exp(log_pmf)")],
        mistake_zh="累加 P(load > C)，而不是期望超出量 E[max(0, load - C)]",
    ),
    Mutant(
        "expected_drop_fraction",
        "divides_by_tokens",
        "divides by T instead of the T*k assignments",
        [
            (
                "return num_experts * overflow / (num_tokens * top_k)",
                "return num_experts * overflow / num_tokens",
            )
        ],
        mistake_zh="除以 T 而不是 T·k 个分配",
    ),
    Mutant(
        "expected_drop_fraction",
        "float_comb",
        "uses math.comb and powers in floats (overflows at thousands of tokens)",
        [
            (
                "overflow += (n - capacity) * math.exp(log_pmf)",
                "overflow += (n - capacity) * math.comb(num_tokens, n) * p**n * (1 - p) ** (num_tokens - n)",
            )
        ],
        mistake_zh="用浮点数计算 math.comb 和幂（上千个 token 时溢出）",
    ),
    Mutant(
        "decode_weight_bytes",
        "routed_is_total_minus_active",
        "takes R = total - active (the experts one token skips, not all routed experts)",
        [
            (
                "routed = (total_params - active_params) * num_experts / (num_experts - top_k)",
                "routed = total_params - active_params",
            )
        ],
        mistake_zh="取 R = total - active（一个 token 跳过的专家，而不是全部路由专家）",
    ),
    Mutant(
        "decode_weight_bytes",
        "no_shared_experts_between_tokens",
        "reads min(E, k*B) experts: as if no two tokens ever picked the same expert",
        [
            (
                "read_fraction = 1 - (1 - top_k / num_experts) ** num_tokens",
                "read_fraction = min(num_experts, top_k * num_tokens) / num_experts",
            )
        ],
        mistake_zh="读取 min(E, k·B) 个专家：好像任何两个 token 都不会选到同一个专家",
    ),
    Mutant(
        "decode_weight_bytes",
        "with_replacement",
        "an expert missed with probability (1 - 1/E)^(k*B): picks with replacement",
        [
            (
                "read_fraction = 1 - (1 - top_k / num_experts) ** num_tokens",
                "read_fraction = 1 - (1 - 1 / num_experts) ** (top_k * num_tokens)",
            )
        ],
        mistake_zh="专家未被选中的概率取 (1 - 1/E)^(k·B)：有放回地选择",
    ),
]
