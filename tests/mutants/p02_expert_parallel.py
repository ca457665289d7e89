"""Realistic wrong versions of the p02.expert_parallel solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    # exchange_counts
    Mutant(
        "exchange_counts",
        "no_exchange",
        "returns its own counts as if they were what it receives (the counts are never exchanged)",
        [("return received.view(size, -1)", "return tokens_per_expert.view(size, -1)")],
        mistake_zh="把自己的计数当作收到的计数返回（计数从未交换）",
    ),
    Mutant(
        "exchange_counts",
        "expert_major_view",
        "views the received counts as (E_local, p) and transposes: rows no longer match source ranks",
        [("return received.view(size, -1)", "return received.view(-1, size).T")],
        mistake_zh="把收到的计数 view 成 (E_local, p) 再转置：行不再对应来源 rank",
    ),
    Mutant(
        "exchange_counts",
        "counts_as_int32",
        "casts the counts to int32 before sending (large counts wrap; the dtype contract breaks)",
        [
            ("received = torch.empty_like(tokens_per_expert)", "received = torch.empty_like(tokens_per_expert.int())"),
            ("tokens_per_expert.contiguous()", "tokens_per_expert.int()"),
        ],
        mistake_zh="发送前把计数转成 int32（大计数会回绕，违反了数据类型约定）",
    ),
    Mutant(
        "exchange_counts",
        "assumes_contiguous_counts",
        "sends the counts as they come: a strided view (a column of a bigger tensor) is not contiguous",
        [("tokens_per_expert.contiguous()", "tokens_per_expert")],
        mistake_zh="计数原样发送：带步长的视图（大张量的一列）不是连续的",
    ),
    # all_to_all
    Mutant(
        "all_to_all",
        "backward_same_splits",
        "sends the gradient back with the forward's split sizes instead of swapping them",
        [
            (
                "grad_in = grad_out.new_empty((sum(ctx.input_splits)",
                "grad_in = grad_out.new_empty((sum(ctx.output_splits)",
            ),
            (
                "grad_in, grad_out.contiguous(), ctx.input_splits, ctx.output_splits, group=ctx.group",
                "grad_in, grad_out.contiguous(), ctx.output_splits, ctx.input_splits, group=ctx.group",
            ),
        ],
        mistake_zh="反向发回梯度时用前向的切分大小，而不是把它们对调",
    ),
    Mutant(
        "all_to_all",
        "no_backward_communication",
        "the backward keeps the gradient on the rank that computed it (rows cut to the input's length)",
        [
            (
                """    grad_in = grad_out.new_empty((sum(ctx.input_splits), *grad_out.shape[1:]))  # (N_in, ...)
        dist.all_to_all_single(
            grad_in, grad_out.contiguous(), ctx.input_splits, ctx.output_splits, group=ctx.group
        )""",
                """    grad_in = torch.zeros((sum(ctx.input_splits), *grad_out.shape[1:]), dtype=grad_out.dtype)
        rows = min(grad_in.shape[0], grad_out.shape[0])
        grad_in[:rows] = grad_out[:rows]""",
            )
        ],
        mistake_zh="反向把梯度留在算出它的 rank 上（按输入长度截断行）",
    ),
    Mutant(
        "all_to_all",
        "backward_assumes_contiguous_grad",
        "sends grad_out as it comes: the gradient of y.sum() is an expanded, non-contiguous tensor",
        [("grad_in, grad_out.contiguous(), ctx.input_splits", "grad_in, grad_out, ctx.input_splits")],
        mistake_zh="grad_out 原样发送：y.sum() 的梯度是 expand 出来的非连续张量",
    ),
    Mutant(
        "all_to_all",
        "splits_swapped_in_forward",
        "passes input_splits where output_splits belong (the argument order of all_to_all_single)",
        [
            (
                "dist.all_to_all_single(out, x.contiguous(), output_splits, input_splits, group=group)",
                "dist.all_to_all_single(out, x.contiguous(), input_splits, output_splits, group=group)",
            )
        ],
        mistake_zh="在该传 output_splits 的位置传了 input_splits（all_to_all_single 的参数顺序）",
    ),
    Mutant(
        "all_to_all",
        "no_validation",
        "does not check that input_splits sums to the rows of x",
        [("or sum(input_splits) != x.shape[0]:", ":")],
        mistake_zh="不检查 input_splits 之和是否等于 x 的行数",
    ),
    # ep_moe_layer
    Mutant(
        "ep_moe_layer",
        "gates_in_token_order",
        "multiplies the sorted results by the gates in the original (token, choice) order",
        [("gates.reshape(-1)[order]", "gates.reshape(-1)")],
        mistake_zh="排序后的结果按原始的（token, 选择）顺序乘门控",
    ),
    Mutant(
        "ep_moe_layer",
        "local_experts_grouped_by_expert_first",
        "labels the received rows expert-major (repeat_interleave then repeat): rows run through the wrong expert",
        [
            (
                "torch.arange(E_local, device=x.device).repeat(size).repeat_interleave(received.reshape(-1))",
                "torch.arange(E_local, device=x.device).repeat_interleave(size).repeat_interleave(received.T.reshape(-1))",
            )
        ],
        mistake_zh="收到的行按专家优先标号（先 repeat_interleave 再 repeat）：行被送进了错误的专家",
    ),
    Mutant(
        "ep_moe_layer",
        "equal_splits_assumed",
        "assumes every rank sends and receives the same number of rows (no use of the exchanged counts)",
        [
            ("recv_splits = received.sum(dim=1).tolist()", "recv_splits = send_splits"),
        ],
        mistake_zh="假定每个 rank 发送和接收的行数相同（没用交换来的计数）",
    ),
    Mutant(
        "ep_moe_layer",
        "combine_with_dispatch_splits",
        "combines with the dispatch's split sizes instead of swapping them",
        [
            (
                "all_to_all(expert_out, send_splits, recv_splits, group)",
                "all_to_all(expert_out, recv_splits, send_splits, group)",
            )
        ],
        mistake_zh="合并时用分发时的切分大小，而不是把它们对调",
    ),
    Mutant(
        "ep_moe_layer",
        "gates_detached",
        "detaches the gates: the forward pass is exact, the router gets no gradient",
        [("gates.reshape(-1)[order].unsqueeze(1)", "gates.detach().reshape(-1)[order].unsqueeze(1)")],
        mistake_zh="把门控 detach 了：前向完全正确，路由器却收不到梯度",
    ),
    Mutant(
        "ep_moe_layer",
        "gates_not_cast",
        "multiplies by the float32 gates without casting them to x's dtype (bf16 results become float32)",
        [(".unsqueeze(1).to(x.dtype)", ".unsqueeze(1)")],
        mistake_zh="乘 float32 的门控前没有转成 x 的数据类型（bf16 的结果变成 float32）",
    ),
    Mutant(
        "ep_moe_layer",
        "choice_index_as_token_index",
        "uses the sorted row index itself as the token index (forgets // top_k)",
        [("token_of = order // top_k", "token_of = order")],
        mistake_zh="把排序后的行下标直接当作 token 下标（忘了 // top_k）",
    ),
    Mutant(
        "exchange_counts",
        "ignores_group",
        "takes the world size of the whole world and exchanges the counts on the default group, ignoring `group`",
        [
            ("size = dist.get_world_size(group)", "size = dist.get_world_size()"),
            (
                "dist.all_to_all_single(received, tokens_per_expert.contiguous(), group=group)",
                "dist.all_to_all_single(received, tokens_per_expert.contiguous())",
            ),
        ],
        mistake_zh="用整个 world 的大小，并在默认进程组上交换计数，忽略了 `group`",
    ),
    Mutant(
        "all_to_all",
        "ignores_group",
        "checks the splits against the world size and runs the all-to-all on the default group, ignoring `group`",
        [
            ("size = dist.get_world_size(group)", "size = dist.get_world_size()"),
            (
                "return AllToAll.apply(x, output_splits, input_splits, group)",
                "return AllToAll.apply(x, output_splits, input_splits, None)",
            ),
        ],
        mistake_zh="按整个 world 的大小检查切分，并在默认进程组上做 all-to-all，忽略了 `group`",
    ),
    Mutant(
        "ep_moe_layer",
        "ignores_group",
        "does not pass `group` on to exchange_counts and all_to_all: the exchanges run on the default group",
        [
            (
                "received = exchange_counts(tokens_per_expert, group)",
                "received = exchange_counts(tokens_per_expert)",
            ),
            (
                "dispatched = all_to_all(x[token_of], recv_splits, send_splits, group)",
                "dispatched = all_to_all(x[token_of], recv_splits, send_splits)",
            ),
            (
                "combined = all_to_all(expert_out, send_splits, recv_splits, group)",
                "combined = all_to_all(expert_out, send_splits, recv_splits)",
            ),
        ],
        mistake_zh="没有把 `group` 传给 exchange_counts 和 all_to_all：交换在默认进程组上进行",
    ),
]
