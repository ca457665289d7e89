"""Realistic wrong versions of the p00.autograd solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "mlp_forward_backward",
        "no_mean_division",
        "forgets the 1/N of the mean loss in the gradient (gradients N times too large)",
        [("    d_logits /= N ", "    pass  ")],
        mistake_zh="梯度里漏掉平均损失的 1/N（梯度大了 N 倍）",
    ),
    Mutant(
        "mlp_forward_backward",
        "bias_grad_mean",
        "averages the bias gradient over the batch instead of summing it",
        [("grad_b2 = d_logits.sum(dim=0)", "grad_b2 = d_logits.mean(dim=0)")],
        mistake_zh="bias 的梯度对批维取平均而不是求和",
    ),
    Mutant(
        "mlp_forward_backward",
        "relu_mask_dropped",
        "passes the gradient through the ReLU everywhere, as if it were the identity",
        [("d_pre = d_act * (pre > 0)", "d_pre = d_act")],
        mistake_zh="让梯度处处穿过 ReLU，仿佛它是恒等函数",
    ),
    Mutant(
        "mlp_forward_backward",
        "one_hot_not_subtracted",
        "uses softmax as the gradient of the logits, forgetting to subtract the one-hot target",
        [("    d_logits[rows, targets] -= 1.0 ", "    pass ")],
        mistake_zh="把 softmax 直接当作 logits 的梯度，忘了减去目标的 one-hot",
    ),
    Mutant(
        "mlp_forward_backward",
        "no_max_subtraction",
        "computes log-sum-exp without subtracting the row max (overflows at logits above 88 in float32)",
        [("shifted = logits - row_max ", "shifted = logits; row_max = 0 * row_max ")],
        mistake_zh="计算 log-sum-exp 时不减行最大值（float32 下 logits 超过 88 就溢出）",
    ),
    Mutant(
        "mlp_forward_backward",
        "input_grad_before_relu",
        "propagates to the input with the gradient from before the ReLU mask (d_act instead of d_pre)",
        [("grad_x = d_pre @ w1 ", "grad_x = d_act @ w1 ")],
        mistake_zh="用 ReLU 掩码之前的梯度传回输入（d_act 而不是 d_pre）",
    ),
    Mutant(
        "mlp_forward_backward",
        "weight_grad_divided_again",
        "divides the first weight gradient by N a second time (the 1/N is already in d_logits)",
        [("grad_w1 = d_pre.T @ x ", "grad_w1 = d_pre.T @ x / N ")],
        mistake_zh="第一层权重梯度又除了一次 N（1/N 已经在 d_logits 里）",
    ),
    Mutant(
        "mlp_forward_backward",
        "no_target_validation",
        "indexes with the targets without checking them",
        [
            (
                "if targets.shape != (N,) or bool((targets < 0).any()) or bool((targets >= V).any()):",
                "if targets.shape != (N,):",
            )
        ],
        mistake_zh="不检查 targets 就直接拿来索引",
    ),
    Mutant(
        "mlp_forward_backward",
        "uses_autograd",
        "builds the graph and calls torch.autograd.grad instead of writing the backward",
        [
            (
                "    pre = x @ w1.T + b1 ",
                "    leaves = [t.detach().requires_grad_() for t in (x, w1, b1, w2, b2)]\n"
                "    with torch.enable_grad():\n"
                "        l = torch.nn.functional.cross_entropy(torch.relu(leaves[0] @ leaves[1].T + leaves[2])"
                " @ leaves[3].T + leaves[4], targets)\n"
                "        g = torch.autograd.grad(l, leaves)\n"
                '    return l.detach(), dict(zip(["x", "w1", "b1", "w2", "b2"], g))\n'
                "    pre = x @ w1.T + b1 ",
            )
        ],
        mistake_zh="建图后调用 torch.autograd.grad，而不是手写反向",
    ),
    Mutant(
        "softmax_function",
        "diagonal_jacobian_only",
        "multiplies the upstream gradient by y only (the diagonal of the Jacobian), dropping the -y_i y_j terms",
        [("return (y * (g - dot)).to(grad_probs.dtype)", "return (y * g).to(grad_probs.dtype)")],
        mistake_zh="上游梯度只乘 y（雅可比矩阵的对角线），丢掉了 −y_i·y_j 项",
    ),
    Mutant(
        "softmax_function",
        "dot_over_wrong_axis",
        "sums grad * y over the first dimension instead of the last",
        [("dot = (g * y).sum(dim=-1, keepdim=True)", "dot = (g * y).sum(dim=0, keepdim=True)")],
        mistake_zh="grad * y 沿第一维而不是最后一维求和",
    ),
    Mutant(
        "softmax_function",
        "saved_as_attribute",
        "keeps the output as a ctx attribute instead of save_for_backward (autograd cannot check its version)",
        [
            ("ctx.save_for_backward(probs)", "ctx.probs = probs"),
            ("(probs,) = ctx.saved_tensors", "probs = ctx.probs"),
        ],
        mistake_zh="把输出存成 ctx 的属性而不用 save_for_backward（autograd 无法检查其版本）",
    ),
    Mutant(
        "softmax_function",
        "no_max_subtraction",
        "exponentiates the raw scores (overflow at large scores)",
        [("e = (s - s.amax(dim=-1, keepdim=True)).exp()", "e = s.exp()")],
        mistake_zh="直接对原始分数取 exp（分数大时溢出）",
    ),
    Mutant(
        "softmax_function",
        "no_upcast",
        "computes in the input dtype (fp16/bf16 sums lose precision)",
        [("compute_dtype = torch.promote_types(scores.dtype, torch.float32)", "compute_dtype = scores.dtype")],
        mistake_zh="在输入的数据类型下计算（fp16/bf16 求和丢精度）",
    ),
    Mutant(
        "softmax_function",
        "calls_the_builtin",
        "calls torch.softmax in the forward",
        [
            (
                "probs = (e / e.sum(dim=-1, keepdim=True)).to(scores.dtype)",
                "probs = torch.softmax(scores, dim=-1)",
            )
        ],
        mistake_zh="forward 里调用 torch.softmax",
    ),
]
MUTANTS += [
    Mutant(
        "per_loss_grad_norms",
        "uses_backward",
        "calls loss.backward() and reads .grad, which accumulates into the leaves",
        [
            (
                "grads = torch.autograd.grad(loss, params, retain_graph=not last, allow_unused=True)",
                "loss.backward(retain_graph=not last)\n        grads = [p.grad for p in params]",
            )
        ],
        mistake_zh="调用 loss.backward() 再读 .grad，梯度会累加到叶子张量上",
    ),
    Mutant(
        "per_loss_grad_norms",
        "no_retain_graph",
        "never retains the graph: the second loss cannot go back through the shared part",
        [("retain_graph=not last", "retain_graph=False")],
        mistake_zh="从不保留计算图：第二个损失无法再反向穿过共享部分",
    ),
    Mutant(
        "per_loss_grad_norms",
        "retain_everywhere",
        "retains the graph on every call, also the last: the activations outlive the function",
        [("retain_graph=not last", "retain_graph=True")],
        mistake_zh="每次调用都保留计算图，最后一次也不例外：激活活得比函数还久",
    ),
    Mutant(
        "per_loss_grad_norms",
        "sum_of_norms",
        "adds the per-parameter norms instead of taking the global norm",
        [
            (
                "squares = [g.pow(2).sum() for g in grads if g is not None]",
                "squares = [g.norm() ** 2 for g in grads if g is not None]",
            ),
            (
                "norms.append(total.sqrt().detach())",
                "norms.append(torch.stack([g.norm() for g in grads if g is not None]).sum().detach())",
            ),
        ],
        mistake_zh="把各参数的范数相加，而不是求全局范数",
    ),
    Mutant(
        "per_loss_grad_norms",
        "unused_not_allowed",
        "leaves allow_unused out: a loss that does not reach every parameter raises",
        [("retain_graph=not last, allow_unused=True)", "retain_graph=not last)")],
        mistake_zh="不传 allow_unused：某个损失没有连到全部参数时会报错",
    ),
]
