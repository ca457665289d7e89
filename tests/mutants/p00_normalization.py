"""Realistic wrong versions of the p00.normalization solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "layer_norm",
        "unbiased_variance",
        "divides the squared deviations by d - 1 (x.var's default) instead of d",
        [("var = (centred * centred).mean(dim=-1, keepdim=True)", "var = xf.var(dim=-1, keepdim=True)")],
        mistake_zh="偏差平方和除以 d - 1（x.var 的默认值）而不是 d",
    ),
    Mutant(
        "layer_norm",
        "eps_outside_sqrt",
        "divides by std + eps instead of sqrt(var + eps)",
        [("y = centred * torch.rsqrt(var + eps)", "y = centred / (var.sqrt() + eps)")],
        mistake_zh="除以 std + eps 而不是 sqrt(var + eps)",
    ),
    Mutant(
        "layer_norm",
        "one_pass_variance",
        "computes the variance as E[x^2] - E[x]^2, which cancels catastrophically in float32",
        [
            (
                "var = (centred * centred).mean(dim=-1, keepdim=True)",
                "var = (xf * xf).mean(dim=-1, keepdim=True) - mean * mean",
            )
        ],
        mistake_zh="用 E[x²] - E[x]² 计算方差，在 float32 下发生灾难性抵消",
    ),
    Mutant(
        "layer_norm",
        "batch_axis",
        "takes the mean over the first axis (the batch), as BatchNorm does",
        [
            ("mean = xf.mean(dim=-1, keepdim=True)", "mean = xf.mean(dim=0, keepdim=True)"),
            (
                "var = (centred * centred).mean(dim=-1, keepdim=True)",
                "var = (centred * centred).mean(dim=0, keepdim=True)",
            ),
        ],
        mistake_zh="像 BatchNorm 那样沿第一维（批维）取均值",
    ),
    Mutant(
        "layer_norm",
        "no_upcast",
        "computes in the input's dtype (fp16/bf16 sums lose digits)",
        [("xf = x.to(torch.promote_types(x.dtype, torch.float32))", "xf = x")],
        mistake_zh="在输入的数据类型下计算（fp16/bf16 求和丢精度）",
    ),
    Mutant(
        "layer_norm",
        "calls_f_layer_norm",
        "calls F.layer_norm",
        [
            (
                "    y = centred * torch.rsqrt(var + eps)  #",
                "    y = torch.nn.functional.layer_norm(xf, (d,), eps=eps)  #",
            )
        ],
        mistake_zh="调用 F.layer_norm",
    ),
    Mutant(
        "layer_norm",
        "no_shape_check",
        "trusts the weight's shape (a (1, d) weight broadcasts silently)",
        [("if param is not None and param.shape != (d,):", "if param is not None and param.shape[-1] != d:")],
        mistake_zh="不检查 weight 的形状（(1, d) 的 weight 会被静默广播）",
    ),
    Mutant(
        "batch_norm",
        "running_var_biased",
        "updates running_var with the biased batch variance",
        [("add_(m * var * n / (n - 1))", "add_(m * var)")],
        mistake_zh="用有偏的批方差更新 running_var",
    ),
    Mutant(
        "batch_norm",
        "normalise_with_unbiased",
        "normalises the batch with the unbiased variance",
        [
            (
                "var = ((x - mean.view(shape)) ** 2).mean(dim=dims)",
                "var = x.var(dim=dims)",
            ),
            ("add_(m * var * n / (n - 1))", "add_(m * var)"),
        ],
        mistake_zh="用无偏方差归一化当前批",
    ),
    Mutant(
        "batch_norm",
        "momentum_reversed",
        "keeps momentum of the new value and 1 - momentum of the old (the Keras convention)",
        [
            ("self.running_mean.mul_(1 - m).add_(m * mean)", "self.running_mean.mul_(m).add_((1 - m) * mean)"),
            (
                "self.running_var.mul_(1 - m).add_(m * var * n / (n - 1))",
                "self.running_var.mul_(m).add_((1 - m) * var * n / (n - 1))",
            ),
        ],
        mistake_zh="新值乘 momentum、旧值乘 1 - momentum 的写法反了（Keras 的约定）",
    ),
    Mutant(
        "batch_norm",
        "ignores_eval_mode",
        "always uses (and updates) the batch statistics, in eval mode too",
        [("        if self.training:\n            n =", "        if True:\n            n =")],
        mistake_zh="总是使用（并更新）批统计量，eval 模式下也一样",
    ),
    Mutant(
        "batch_norm",
        "update_records_graph",
        "updates the running statistics outside torch.no_grad(), so the buffers carry the autograd graph",
        [("with torch.no_grad():\n                m = self.momentum", "if True:\n                m = self.momentum")],
        mistake_zh="在 torch.no_grad() 之外更新运行统计量，buffer 带上了 autograd 计算图",
    ),
    Mutant(
        "batch_norm",
        "forgets_length_axis",
        "reduces over the batch axis only for (N, C, L) input, with per-(C, L) statistics",
        [
            ("dims = (0,) if x.dim() == 2 else (0, 2)", "dims = (0,)"),
            ("shape = (1, -1) if x.dim() == 2 else (1, -1, 1)", "shape = (1, *x.shape[1:])"),
            ("n = x.numel() // self.num_features", "n = x.shape[0]"),
        ],
        mistake_zh="对 (N, C, L) 输入只沿批维归约，得到按 (C, L) 的统计量",
    ),
    Mutant(
        "batch_norm",
        "no_counter",
        "never counts num_batches_tracked",
        [("self.num_batches_tracked += 1", "pass")],
        mistake_zh="从不累计 num_batches_tracked",
    ),
    Mutant(
        "batch_norm",
        "running_stats_as_parameters",
        "stores the running statistics as parameters instead of buffers",
        [
            (
                'self.register_buffer("running_mean", torch.zeros(num_features))',
                "self.running_mean = nn.Parameter(torch.zeros(num_features), requires_grad=False)",
            )
        ],
        mistake_zh="把运行统计量存成参数而不是 buffer",
    ),
]
