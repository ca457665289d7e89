"""Realistic wrong versions of the p02.cross_entropy solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "logsumexp",
        "no_max_subtraction",
        "log(sum(exp(x))) directly: overflows to inf for logits above 88 (fp32) or 11 (fp16)",
        [
            (
                "lse = m.squeeze(-1) + torch.log(torch.exp(xc - m).sum(dim=-1))",
                "lse = torch.log(torch.exp(xc).sum(dim=-1))",
            )
        ],
        mistake_zh="直接计算 log(sum(exp(x)))：logits 超过 88（fp32）或 11（fp16）就溢出为 inf",
    ),
    Mutant(
        "logsumexp",
        "max_not_added_back",
        "subtracts the max inside the exp but forgets to add it back",
        [("lse = m.squeeze(-1) + torch.log(", "lse = torch.log(")],
        mistake_zh="exp 里减了最大值，却忘了最后加回来",
    ),
    Mutant(
        "logsumexp",
        "no_inf_guard",
        "subtracts a -inf max: a fully masked row gives nan",
        [("m = torch.where(m.isfinite(), m, torch.zeros_like(m))", "m = m")],
        mistake_zh="减去为 -inf 的最大值：完全被屏蔽的行得到 nan",
    ),
    Mutant(
        "cross_entropy",
        "softmax_then_log",
        "takes -log(softmax(x)[t]): inf once a target probability underflows",
        [
            (
                "nll = lse - target_logit ",
                "nll = -torch.log(torch.softmax(x, dim=-1).gather(1, safe_t[:, None]).squeeze(1)) ",
            )
        ],
        mistake_zh="计算 -log(softmax(x)[t])：目标概率一旦下溢就是 inf",
    ),
    Mutant(
        "cross_entropy",
        "mean_over_all_tokens",
        "averages over every token, ignored ones included",
        [("return loss.sum() / valid.sum()", "return loss.mean()")],
        mistake_zh="对所有 token 求平均，被忽略的也算在内",
    ),
    Mutant(
        "cross_entropy",
        "ignored_not_masked",
        "does not zero the ignored tokens, which are then trained towards class 0",
        [("loss = torch.where(valid, loss, torch.zeros_like(loss))", "loss = loss")],
        mistake_zh="没有把被忽略的 token 置零，它们被训练成类别 0",
    ),
    Mutant(
        "cross_entropy",
        "smoothing_over_other_classes",
        "spreads eps over the V - 1 non-target classes (an older convention), not over all V",
        [("smooth = lse - x.mean(dim=-1)", "smooth = (V * lse - x.sum(dim=-1) - nll) / (V - 1)")],
        mistake_zh="把 eps 分给 V - 1 个非目标类（一种旧约定），而不是全部 V 类",
    ),
    Mutant(
        "cross_entropy",
        "z_loss_not_squared",
        "adds w * logsumexp instead of w * logsumexp**2",
        [("z_loss_weight * lse.pow(2)", "z_loss_weight * lse")],
        mistake_zh="加的是 w * logsumexp 而不是 w * logsumexp**2",
    ),
    Mutant(
        "cross_entropy",
        "no_upcast",
        "computes and returns the loss in the logits' dtype (bf16 loss)",
        [
            (
                "compute_dtype = torch.promote_types(logits.dtype, torch.float32)",
                "compute_dtype = logits.dtype",
            )
        ],
        mistake_zh="在 logits 的数据类型下计算并返回损失（bf16 损失）",
    ),
    Mutant(
        "cross_entropy_grad",
        "sum_not_mean",
        "forgets to divide by the number of valid tokens",
        [("grad = grad / valid.sum().clamp(min=1)", "grad = grad")],
        mistake_zh="忘了除以有效 token 数",
    ),
    Mutant(
        "cross_entropy_grad",
        "divides_by_all_tokens",
        "divides by every token, ignored ones included",
        [("grad / valid.sum().clamp(min=1)", "grad / t.numel()")],
        mistake_zh="除以全部 token 数，被忽略的也算在内",
    ),
    Mutant(
        "cross_entropy_grad",
        "one_hot_without_smoothing",
        "uses softmax - one_hot even when label smoothing is on",
        [
            ("torch.full_like(x, label_smoothing / V)", "torch.zeros_like(x)"),
            ("torch.full_like(lse[:, None], 1 - label_smoothing)", "torch.ones_like(lse[:, None])"),
        ],
        mistake_zh="开启标签平滑时仍然用 softmax - one_hot",
    ),
    Mutant(
        "cross_entropy_grad",
        "z_loss_grad_without_2",
        "differentiates w * lse**2 as w * lse * p (drops the factor 2)",
        [("(2 * z_loss_weight * lse)", "(z_loss_weight * lse)")],
        mistake_zh="把 w * lse**2 的导数写成 w * lse * p（漏了因子 2）",
    ),
    Mutant(
        "cross_entropy_grad",
        "ignored_rows_not_zeroed",
        "lets ignored tokens keep their gradient row",
        [("grad = torch.where(valid[:, None], grad, torch.zeros_like(grad))", "grad = grad")],
        mistake_zh="被忽略的 token 保留了它的梯度行",
    ),
    Mutant(
        "cross_entropy",
        "nll_not_scaled_by_one_minus_eps",
        "adds eps times the smoothing term to the full NLL instead of mixing (1 - eps) * NLL + eps * smooth",
        [("(1 - label_smoothing) * nll", "nll")],
        mistake_zh="在完整的 NLL 上加 eps 倍的平滑项，而不是混合成 (1 - eps) * NLL + eps * smooth",
    ),
    Mutant(
        "logsumexp",
        "calls_the_builtin",
        "torch.logsumexp, the reference the lesson says not to use",
        [("m = xc.amax(dim=-1, keepdim=True)", "return torch.logsumexp(xc, dim=-1).to(x.dtype)")],
        mistake_zh="调用本课明确不让用的参考实现 torch.logsumexp",
    ),
    Mutant(
        "cross_entropy",
        "calls_the_builtin",
        "F.cross_entropy does the loss (the z-loss added on top)",
        [
            (
                "lse = logsumexp(x)                                                     # (N,)\n    target_logit",
                "lse = logsumexp(x)\n"
                '    if reduction == "mean" and not z_loss_weight:\n'
                "        return F.cross_entropy(x, t, ignore_index=ignore_index, label_smoothing=label_smoothing)\n"
                "    target_logit",
            )
        ],
        mistake_zh="用 F.cross_entropy 算损失（再在上面加 z-loss）",
    ),
]
