"""Realistic wrong versions of the p02.grad_accum_clip solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "accumulate_gradients",
        "mean_per_micro_batch",
        "each micro-batch's own token mean divided by the number of micro-batches (HF Trainer before v4.46)",
        [
            (
                "(loss_sum / num_tokens).backward()",
                "(loss_sum / (labels != ignore_index).sum() / len(micro_batches)).backward()",
            )
        ],
        mistake_zh="每个微批次先按自己的 token 取平均，再除以微批次数（v4.46 之前的 HF Trainer）",
    ),
    Mutant(
        "accumulate_gradients",
        "padding_counted",
        "counts every label position, padding included, in the denominator",
        [("int((labels != ignore_index).sum())", "labels.numel()")],
        mistake_zh="分母里计入了每个标签位置，包括 padding",
    ),
    Mutant(
        "accumulate_gradients",
        "no_zero_grad",
        "does not clear the gradients first, so the previous batch's gradients leak in",
        [("model.zero_grad(set_to_none=True)", "pass")],
        mistake_zh="没有先清零梯度，上一批的梯度混了进来",
    ),
    Mutant(
        "accumulate_gradients",
        "returns_last_loss",
        "returns the last micro-batch's share instead of the global mean",
        [("return total / num_tokens", "return loss_sum.detach() / num_tokens")],
        mistake_zh="返回最后一个微批次的那一份，而不是全局平均",
    ),
    Mutant(
        "accumulate_gradients",
        "one_backward_at_the_end",
        "sums the micro-batch losses and calls backward once: right numbers, the whole batch's activations in memory",
        [
            ("(loss_sum / num_tokens).backward()", "pending = loss_sum if total is None else pending + loss_sum"),
            ("return total / num_tokens", "(pending / num_tokens).backward()\n    return total / num_tokens"),
        ],
        mistake_zh="把各微批次的损失加起来只调用一次 backward：数值对，但整批的激活都留在显存里",
    ),
    Mutant(
        "accumulate_gradients",
        "hard_coded_ignore_index",
        "ignores -100 whatever ignore_index says",
        [("ignore_index=ignore_index, reduction", "ignore_index=-100, reduction")],
        mistake_zh="不管 ignore_index 是多少都忽略 -100",
    ),
    Mutant(
        "clip_grad_norm",
        "per_tensor_clipping",
        "clips every tensor to max_norm on its own (changes the update's direction)",
        [
            (
                "g.mul_(coefficient.to(g.dtype))",
                "g.mul_(torch.clamp(max_norm / (torch.linalg.vector_norm(g, norm_type) + 1e-6), max=1.0).to(g.dtype))",
            )
        ],
        mistake_zh="每个张量各自裁剪到 max_norm（改变了更新的方向）",
    ),
    Mutant(
        "clip_grad_norm",
        "no_clamp",
        "does not clamp the coefficient at 1, so small gradients are scaled up to max_norm",
        [
            (
                "coefficient = torch.clamp(max_norm / (total_norm + 1e-6), max=1.0)",
                "coefficient = max_norm / (total_norm + 1e-6)",
            )
        ],
        mistake_zh="系数没有截断到 1，小梯度被放大到 max_norm",
    ),
    Mutant(
        "clip_grad_norm",
        "always_l2",
        "computes the 2-norm whatever norm_type says",
        [
            (
                "torch.linalg.vector_norm(g, norm_type) for g in grads",
                "torch.linalg.vector_norm(g, 2.0) for g in grads",
            ),
            ("torch.linalg.vector_norm(per_tensor, norm_type)", "torch.linalg.vector_norm(per_tensor, 2.0)"),
        ],
        mistake_zh="不管 norm_type 是什么都算 2-范数",
    ),
    Mutant(
        "clip_grad_norm",
        "no_epsilon",
        "divides by the total norm without PyTorch's + 1e-6",
        [("max_norm / (total_norm + 1e-6)", "max_norm / total_norm")],
        mistake_zh="除以总范数时没有 PyTorch 的 + 1e-6",
    ),
    Mutant(
        "clip_grad_norm",
        "generator_read_twice",
        "computes the norm from one pass over `parameters` and scales in a second pass (a generator is empty by then)",
        [
            (
                "for g in grads:\n        g.mul_(coefficient.to(g.dtype))",
                "for p in parameters:\n        if p.grad is not None:\n            p.grad.mul_(coefficient.to(p.grad.dtype))",
            )
        ],
        mistake_zh="第一次遍历 parameters 求范数，第二次遍历再缩放（这时生成器已经空了）",
    ),
    Mutant(
        "clip_grad_norm",
        "zeros_for_missing_grads",
        "gives parameters without a gradient a zero gradient instead of skipping them",
        [
            (
                "grads = [p.grad for p in parameters if p.grad is not None]",
                "parameters = list(parameters)\n    for p in parameters:\n        if p.grad is None:\n"
                "            p.grad = torch.zeros_like(p)\n    grads = [p.grad for p in parameters]",
            )
        ],
        mistake_zh="给没有梯度的参数一个零梯度，而不是跳过它们",
    ),
    Mutant(
        "clip_grad_norm",
        "nonfinite_never_refused",
        "ignores error_if_nonfinite",
        [("if error_if_nonfinite and not torch.isfinite(total_norm):", "if False:")],
        mistake_zh="忽略 error_if_nonfinite",
    ),
    Mutant(
        "clip_grad_norm",
        "calls_the_builtin",
        "delegates to torch.nn.utils.clip_grad_norm_",
        [
            (
                "grads = [p.grad for p in parameters if p.grad is not None]",
                "return torch.nn.utils.clip_grad_norm_(parameters, max_norm, norm_type, error_if_nonfinite)",
            )
        ],
        mistake_zh="交给 torch.nn.utils.clip_grad_norm_ 去做",
    ),
]
