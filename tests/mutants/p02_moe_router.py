"""Realistic wrong versions of the p02.moe_router solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    # route_topk
    Mutant(
        "route_topk",
        "always_renormalises",
        "ignores normalize=False and always divides the k gates by their sum",
        [("if normalize:", "if True:")],
        mistake_zh="忽略 normalize=False，总是把 k 个门控除以它们的和",
    ),
    Mutant(
        "route_topk",
        "softmax_over_tokens",
        "softmax over dim=0 (the tokens) instead of over the experts of each token",
        [("logits.softmax(dim=-1)", "logits.softmax(dim=0)")],
        mistake_zh="softmax 沿 dim=0（token 维）做，而不是沿每个 token 的专家维",
    ),
    Mutant(
        "route_topk",
        "sigmoid_normalised_over_all_experts",
        "divides the kept sigmoid scores by the sum over all E experts, as if they were a softmax",
        [("gates / gates.sum(dim=-1, keepdim=True)", "gates / scores.sum(dim=-1, keepdim=True)")],
        mistake_zh="把保留的 sigmoid 分数除以全部 E 个专家的和，好像它们是 softmax",
    ),
    Mutant(
        "route_topk",
        "scores_in_low_precision",
        "computes the softmax in the logits' bf16/fp16 dtype and upcasts only the result",
        [
            ("logits = router_logits.to(compute_dtype)", "logits = router_logits"),
            (
                "gates, experts = torch.topk(scores, top_k, dim=-1)",
                "gates, experts = torch.topk(scores.to(compute_dtype), top_k, dim=-1)",
            ),
        ],
        mistake_zh="在 logits 的 bf16/fp16 下计算 softmax，只把结果升精度",
    ),
    # assign_capacity_slots
    Mutant(
        "assign_capacity_slots",
        "token_major_priority",
        "serves token 0's choices, then token 1's, ... (a token's 2nd choice beats later tokens' 1st choices)",
        [("experts.T.reshape(-1)", "experts.reshape(-1)"), ("slots.reshape(k, T).T", "slots.reshape(T, k)")],
        mistake_zh="按 token 优先分配：先 token 0 的所有选择，再 token 1 的……（某个 token 的第二选择抢在后面 token 的第一选择之前）",
    ),
    Mutant(
        "assign_capacity_slots",
        "slots_start_at_one",
        "forgets the - 1: slots run 1..C and the C-th token is dropped",
        [("(one_hot.cumsum(dim=0) * one_hot).sum(dim=-1) - 1", "(one_hot.cumsum(dim=0) * one_hot).sum(dim=-1)")],
        mistake_zh="忘了 - 1：槽位从 1 到 C，第 C 个 token 被丢弃",
    ),
    Mutant(
        "assign_capacity_slots",
        "keeps_one_too_many",
        "position <= capacity: an expert keeps C + 1 tokens",
        [("position < capacity", "position <= capacity")],
        mistake_zh="position <= capacity：一个专家保留了 C + 1 个 token",
    ),
    # moe_layer
    Mutant(
        "moe_layer",
        "capacity_floor",
        "rounds the capacity down: one slot short when c * T * k / E is not an integer",
        [("math.ceil(capacity_factor * T * top_k / E)", "int(capacity_factor * T * top_k / E)")],
        mistake_zh="容量向下取整：c * T * k / E 不是整数时少一个槽位",
    ),
    Mutant(
        "moe_layer",
        "capacity_without_top_k",
        "C = ceil(c * T / E): forgets that every token makes k choices",
        [("math.ceil(capacity_factor * T * top_k / E)", "math.ceil(capacity_factor * T / E)")],
        mistake_zh="C = ceil(c * T / E)：忘了每个 token 做 k 次选择",
    ),
    Mutant(
        "moe_layer",
        "dropped_choices_not_filtered",
        "dispatches the dropped choices too: slot -1 overwrites each expert's last slot",
        [("kept = slots >= 0", "kept = slots >= -1")],
        mistake_zh="被丢弃的选择也被分发了：槽位 -1 覆盖了每个专家的最后一个槽位",
    ),
    Mutant(
        "moe_layer",
        "gates_detached",
        "detaches the gates: the forward pass is right, the router gets no gradient",
        [("gates[kept].unsqueeze(1)", "gates[kept].detach().unsqueeze(1)")],
        mistake_zh="把门控 detach 了：前向正确，路由器却收不到梯度",
    ),
    Mutant(
        "moe_layer",
        "combine_without_gates",
        "adds the expert outputs without multiplying by the gates",
        [(" * gates[kept].unsqueeze(1).to(x.dtype)", "")],
        mistake_zh="把专家输出直接相加，没有乘门控",
    ),
    Mutant(
        "moe_layer",
        "dropless_as_factor_one",
        "capacity_factor=None treated as a factor of 1 (C = ceil(T * k / E)) instead of the busiest expert's load",
        [
            (
                "capacity = int(torch.bincount(experts.flatten(), minlength=E).max())",
                "capacity = math.ceil(T * top_k / E)",
            )
        ],
        mistake_zh="把 capacity_factor=None 当作系数 1（C = ceil(T * k / E)），而不是最忙专家的负载",
    ),
]
