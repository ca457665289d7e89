"""Realistic wrong versions of the p00.normalization solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "layer_norm",
        "unbiased_variance",
        "divides the squared deviations by d - 1 (x.var's default) instead of d",
        [("var = (centred * centred).mean(dim=-1, keepdim=True)", "var = xf.var(dim=-1, keepdim=True)")],
    ),
    Mutant(
        "layer_norm",
        "eps_outside_sqrt",
        "divides by std + eps instead of sqrt(var + eps)",
        [("y = centred * torch.rsqrt(var + eps)", "y = centred / (var.sqrt() + eps)")],
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
    ),
    Mutant(
        "layer_norm",
        "no_upcast",
        "computes in the input's dtype (fp16/bf16 sums lose digits)",
        [("xf = x.to(torch.promote_types(x.dtype, torch.float32))", "xf = x")],
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
    ),
    Mutant(
        "layer_norm",
        "no_shape_check",
        "trusts the weight's shape (a (1, d) weight broadcasts silently)",
        [("if param is not None and param.shape != (d,):", "if param is not None and param.shape[-1] != d:")],
    ),
    Mutant(
        "batch_norm",
        "running_var_biased",
        "updates running_var with the biased batch variance",
        [("add_(m * var * n / (n - 1))", "add_(m * var)")],
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
    ),
    Mutant(
        "batch_norm",
        "ignores_eval_mode",
        "always uses (and updates) the batch statistics, in eval mode too",
        [("        if self.training:\n            n =", "        if True:\n            n =")],
    ),
    Mutant(
        "batch_norm",
        "update_records_graph",
        "updates the running statistics outside torch.no_grad(), so the buffers carry the autograd graph",
        [("with torch.no_grad():\n                m = self.momentum", "if True:\n                m = self.momentum")],
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
    ),
    Mutant(
        "batch_norm",
        "no_counter",
        "never counts num_batches_tracked",
        [("self.num_batches_tracked += 1", "pass")],
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
    ),
]
