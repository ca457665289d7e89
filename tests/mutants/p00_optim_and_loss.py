"""Realistic wrong versions of the p00.optim_and_loss solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "linear_and_embedding",
        "weight_not_transposed",
        "multiplies by the weight as stored, (d_out, d_in), reshaped to fit: x @ W.reshape(d_in, d_out)",
        [
            ("    if weight.dim() != 2 or weight.shape[1] != x.shape[-1]:", "    if weight.dim() != 2:"),
            ("y = x @ weight.T ", "y = x @ weight.reshape(weight.shape[1], weight.shape[0]) "),
        ],
        mistake_zh="按存储形状 (d_out, d_in) 的权重相乘，再硬 reshape 对齐：x @ W.reshape(d_in, d_out)",
    ),
    Mutant(
        "linear_and_embedding",
        "calls_f_linear",
        "calls F.linear",
        [("y = x @ weight.T ", "y = torch.nn.functional.linear(x, weight) ")],
        mistake_zh="调用 F.linear",
    ),
    Mutant(
        "linear_and_embedding",
        "ids_not_checked",
        "looks rows up without checking the ids",
        [("    if ids.numel() and (", "    if False and (")],
        mistake_zh="不检查 ids 就查表取行",
    ),
    Mutant(
        "linear_and_embedding",
        "embedding_through_one_hot",
        "builds the embedding as a one-hot matmul in float32, losing float64 precision and the int check",
        [
            (
                "    return weight[ids]  ",
                "    return (torch.nn.functional.one_hot(ids, weight.shape[0]).float() @ weight.float()).to(weight.dtype)  ",
            )
        ],
        mistake_zh="用 float32 的 one-hot 矩阵乘实现嵌入，丢了 float64 精度和整数类型检查",
    ),
    Mutant(
        "softmax_and_silu",
        "global_max",
        "subtracts the maximum of the whole tensor instead of each slice along dim",
        [("xc - xc.amax(dim=dim, keepdim=True)", "xc - xc.max()")],
        mistake_zh="减去整个张量的最大值，而不是沿 dim 每个切片各自的最大值",
    ),
    Mutant(
        "softmax_and_silu",
        "sum_over_last_dim",
        "normalises over the last dimension whatever dim says",
        [("e / e.sum(dim=dim, keepdim=True)", "e / e.sum(dim=-1, keepdim=True)")],
        mistake_zh="不管 dim 是多少都沿最后一维归一化",
    ),
    Mutant(
        "softmax_and_silu",
        "no_upcast",
        "computes softmax in the input's dtype (fp16/bf16 sums lose digits)",
        [("    xc = x.to(torch.promote_types(x.dtype, torch.float32))\n    e =", "    xc = x\n    e =")],
        mistake_zh="在输入的数据类型下计算 softmax（fp16/bf16 求和丢精度）",
    ),
    Mutant(
        "softmax_and_silu",
        "silu_is_sigmoid",
        "returns sigmoid(x) instead of x * sigmoid(x)",
        [("return (xc * torch.sigmoid(xc)).to(x.dtype)", "return torch.sigmoid(xc).to(x.dtype)")],
        mistake_zh="返回 sigmoid(x) 而不是 x·sigmoid(x)",
    ),
    Mutant(
        "softmax_and_silu",
        "silu_calls_builtin",
        "calls F.silu",
        [("return (xc * torch.sigmoid(xc)).to(x.dtype)", "return torch.nn.functional.silu(x)")],
        mistake_zh="调用 F.silu",
    ),
    Mutant(
        "cross_entropy",
        "mean_over_all_rows",
        "divides by N instead of the number of kept rows",
        [("return losses.sum() / keep.sum()", "return losses.sum() / targets.numel()")],
        mistake_zh="除以 N 而不是保留的行数",
    ),
    Mutant(
        "cross_entropy",
        "ignored_rows_counted",
        "ignores ignore_index: -100 wraps around to column V - 100 through advanced indexing",
        [
            ("    keep = targets != ignore_index ", "    keep = targets == targets "),
            (
                "safe_targets = torch.where(keep, targets, torch.zeros_like(targets))",
                "safe_targets = targets % z.shape[1]",
            ),
        ],
        mistake_zh="忽略了 ignore_index：-100 经高级索引绕回到第 V - 100 列",
    ),
    Mutant(
        "cross_entropy",
        "no_max_subtraction",
        "computes log(sum(exp(z))) directly (overflow at large logits)",
        [
            (
                "log_norm = row_max.squeeze(-1) + (z - row_max).exp().sum(dim=-1).log()",
                "log_norm = z.exp().sum(dim=-1).log()",
            )
        ],
        mistake_zh="直接计算 log(sum(exp(z)))（logits 大时溢出）",
    ),
    Mutant(
        "cross_entropy",
        "hard_coded_minus_100",
        "compares with -100 instead of the ignore_index argument",
        [("keep = targets != ignore_index", "keep = targets != -100")],
        mistake_zh="与写死的 -100 比较，而不是 ignore_index 参数",
    ),
    Mutant(
        "cross_entropy",
        "all_ignored_returns_zero",
        "guards the division so an all-ignored batch gives 0 instead of nan",
        [("return losses.sum() / keep.sum()", "return losses.sum() / keep.sum().clamp_min(1)")],
        mistake_zh="给除法加保护，全部被忽略的批返回 0 而不是 nan",
    ),
    Mutant(
        "sgd_optimizer",
        "first_step_dampened",
        "dampens the first step too: buf = (1 - dampening) * g",
        [
            (
                'buf = state["momentum_buffer"] = g.clone()',
                'buf = state["momentum_buffer"] = g.clone() * (1 - tau)',
            )
        ],
        mistake_zh="第一步也做了阻尼：buf = (1 - dampening) * g",
    ),
    Mutant(
        "sgd_optimizer",
        "nesterov_as_plain",
        "ignores Nesterov: uses the buffer as the update",
        [('g = g.add(buf, alpha=mu) if group["nesterov"] else buf', "g = buf")],
        mistake_zh="忽略 Nesterov：直接用动量缓冲作为更新量",
    ),
    Mutant(
        "sgd_optimizer",
        "decay_after_momentum",
        "adds the weight decay after the momentum update (it no longer passes through the buffer)",
        [
            ('g = g.add(p, alpha=group["weight_decay"])', "pass"),
            ("p.add_(g, alpha=-lr)", 'p.add_(g.add(p, alpha=group["weight_decay"]), alpha=-lr)'),
        ],
        mistake_zh="在动量更新之后才加权重衰减（它不再经过缓冲）",
    ),
    Mutant(
        "sgd_optimizer",
        "defaults_not_group",
        "reads lr and momentum from self.defaults instead of the parameter's group",
        [
            (
                'lr, mu, tau = group["lr"], group["momentum"], group["dampening"]',
                'lr, mu, tau = self.defaults["lr"], self.defaults["momentum"], group["dampening"]',
            )
        ],
        mistake_zh="从 self.defaults 而不是参数所在的组读取 lr 和 momentum",
    ),
    Mutant(
        "sgd_optimizer",
        "buffer_not_in_state",
        "keeps the momentum buffer in a private dict, so state_dict() and load_state_dict() do not carry it",
        [
            (
                "                state = self.state[p]\n",
                "                state = self.__dict__.setdefault('_buffers', {}).setdefault(p, {})\n",
            ),
        ],
        mistake_zh="把动量缓冲放在私有 dict 里，state_dict() 和 load_state_dict() 都带不上它",
    ),
    Mutant(
        "sgd_optimizer",
        "buffer_aliases_grad",
        "starts the momentum buffer as p.grad itself instead of a copy (zero_grad(set_to_none=False) then zeroes it, "
        "and the next backward accumulates into it)",
        [('buf = state["momentum_buffer"] = g.clone()', 'buf = state["momentum_buffer"] = g')],
        mistake_zh="把动量缓冲直接设为 p.grad 本身而不是它的副本（zero_grad(set_to_none=False) 会把缓冲清零，下一次反向传播又累加进去）",
    ),
    Mutant(
        "sgd_optimizer",
        "decay_into_grad",
        "adds the weight decay into p.grad in place, so the caller's gradient changes after step()",
        [('g = g.add(p, alpha=group["weight_decay"])', 'g = g.add_(p, alpha=group["weight_decay"])')],
        mistake_zh="把权重衰减原地加进 p.grad，step() 之后调用方的梯度被改掉了",
    ),
    Mutant(
        "sgd_optimizer",
        "no_nesterov_validation",
        "accepts Nesterov without momentum",
        [("        if nesterov and (momentum <= 0 or dampening != 0):", "        if False:")],
        mistake_zh="接受没有动量的 Nesterov",
    ),
    Mutant(
        "sgd_optimizer",
        "closure_loss_dropped",
        "calls the closure but returns None from step(closure) instead of the closure's loss",
        [("loss = closure()", "closure()")],
        mistake_zh="调用了 closure，但 step(closure) 返回 None 而不是 closure 的损失",
    ),
    Mutant(
        "sgd_optimizer",
        "closure_without_grad",
        "calls the closure inside step's torch.no_grad(), so its backward has no graph",
        [("with torch.enable_grad():", "if True:")],
        mistake_zh="在 step 的 torch.no_grad() 里直接调用 closure，其中的反向传播没有计算图",
    ),
]
