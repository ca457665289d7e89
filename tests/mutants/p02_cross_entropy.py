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
    ),
    Mutant(
        "logsumexp",
        "max_not_added_back",
        "subtracts the max inside the exp but forgets to add it back",
        [("lse = m.squeeze(-1) + torch.log(", "lse = torch.log(")],
    ),
    Mutant(
        "logsumexp",
        "no_inf_guard",
        "subtracts a -inf max: a fully masked row gives nan",
        [("m = torch.where(m.isfinite(), m, torch.zeros_like(m))", "m = m")],
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
    ),
    Mutant(
        "cross_entropy",
        "mean_over_all_tokens",
        "averages over every token, ignored ones included",
        [("return loss.sum() / valid.sum()", "return loss.mean()")],
    ),
    Mutant(
        "cross_entropy",
        "ignored_not_masked",
        "does not zero the ignored tokens, which are then trained towards class 0",
        [("loss = torch.where(valid, loss, torch.zeros_like(loss))", "loss = loss")],
    ),
    Mutant(
        "cross_entropy",
        "smoothing_over_other_classes",
        "spreads eps over the V - 1 non-target classes (an older convention), not over all V",
        [("smooth = lse - x.mean(dim=-1)", "smooth = (V * lse - x.sum(dim=-1) - nll) / (V - 1)")],
    ),
    Mutant(
        "cross_entropy",
        "z_loss_not_squared",
        "adds w * logsumexp instead of w * logsumexp**2",
        [("z_loss_weight * lse.pow(2)", "z_loss_weight * lse")],
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
    ),
    Mutant(
        "cross_entropy_grad",
        "sum_not_mean",
        "forgets to divide by the number of valid tokens",
        [("grad = grad / valid.sum().clamp(min=1)", "grad = grad")],
    ),
    Mutant(
        "cross_entropy_grad",
        "divides_by_all_tokens",
        "divides by every token, ignored ones included",
        [("grad / valid.sum().clamp(min=1)", "grad / t.numel()")],
    ),
    Mutant(
        "cross_entropy_grad",
        "one_hot_without_smoothing",
        "uses softmax - one_hot even when label smoothing is on",
        [
            ("torch.full_like(x, label_smoothing / V)", "torch.zeros_like(x)"),
            ("torch.full_like(lse[:, None], 1 - label_smoothing)", "torch.ones_like(lse[:, None])"),
        ],
    ),
    Mutant(
        "cross_entropy_grad",
        "z_loss_grad_without_2",
        "differentiates w * lse**2 as w * lse * p (drops the factor 2)",
        [("(2 * z_loss_weight * lse)", "(z_loss_weight * lse)")],
    ),
    Mutant(
        "cross_entropy_grad",
        "ignored_rows_not_zeroed",
        "lets ignored tokens keep their gradient row",
        [("grad = torch.where(valid[:, None], grad, torch.zeros_like(grad))", "grad = grad")],
    ),
    Mutant(
        "cross_entropy",
        "nll_not_scaled_by_one_minus_eps",
        "adds eps times the smoothing term to the full NLL instead of mixing (1 - eps) * NLL + eps * smooth",
        [("(1 - label_smoothing) * nll", "nll")],
    ),
    Mutant(
        "logsumexp",
        "calls_the_builtin",
        "torch.logsumexp, the reference the lesson says not to use",
        [("m = xc.amax(dim=-1, keepdim=True)", "return torch.logsumexp(xc, dim=-1).to(x.dtype)")],
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
    ),
]
