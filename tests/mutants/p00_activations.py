"""Realistic wrong versions of the p00.activations solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "gelu",
        "erf_without_sqrt2",
        "erf(x) instead of erf(x / sqrt 2)",
        [("out = 0.5 * xc * (1.0 + torch.erf(xc / math.sqrt(2.0)))", "out = 0.5 * xc * (1.0 + torch.erf(xc))")],
    ),
    Mutant(
        "gelu",
        "tanh_without_scale",
        "forgets sqrt(2/pi) in the tanh form",
        [("inner = SQRT_2_OVER_PI * (xc + 0.044715 * xc**3)", "inner = xc + 0.044715 * xc**3")],
    ),
    Mutant(
        "gelu",
        "modes_swapped",
        "returns the exact form for 'tanh' and the tanh form otherwise",
        [('    if approximate == "tanh":\n        inner', '    if approximate != "tanh":\n        inner')],
    ),
    Mutant(
        "gelu",
        "calls_f_gelu",
        "calls F.gelu (the reference)",
        [("    return out.to(x.dtype)", "    return F.gelu(x, approximate=approximate)")],
    ),
    Mutant(
        "gelu",
        "sigmoid_approximation",
        "uses the sigmoid approximation x * sigmoid(1.702 x) for the exact form",
        [("out = 0.5 * xc * (1.0 + torch.erf(xc / math.sqrt(2.0)))", "out = xc * torch.sigmoid(1.702 * xc)")],
    ),
    Mutant(
        "derivatives",
        "tanh_inner_without_3",
        "differentiates x^3 as x^2 in the tanh form",
        [
            (
                "inner_grad = SQRT_2_OVER_PI * (1.0 + 3 * 0.044715 * xc**2)",
                "inner_grad = SQRT_2_OVER_PI * (1.0 + 0.044715 * xc**2)",
            )
        ],
    ),
    Mutant(
        "derivatives",
        "pdf_unnormalised",
        "the normal density without its 1 / sqrt(2 pi)",
        [("pdf = torch.exp(-0.5 * xc * xc) / math.sqrt(2.0 * math.pi)", "pdf = torch.exp(-0.5 * xc * xc)")],
    ),
    Mutant(
        "derivatives",
        "sigmoid_derivative",
        "returns the sigmoid's derivative s (1 - s) for SiLU's",
        [("return (s * (1.0 + xc * (1.0 - s))).to(x.dtype)", "return (s * (1.0 - s)).to(x.dtype)")],
    ),
    Mutant(
        "derivatives",
        "product_rule_half",
        "forgets the x phi(x) term of the product rule",
        [("grad = cdf + xc * pdf", "grad = cdf")],
    ),
    Mutant(
        "derivatives",
        "sigmoid_as_exp_ratio",
        "writes the sigmoid as exp(x) / (1 + exp(x)): inf / inf = nan for x above 88 in float32",
        [("    s = torch.sigmoid(xc)", "    s = torch.exp(xc) / (1.0 + torch.exp(xc))")],
    ),
    Mutant(
        "silu_function",
        "no_chain_rule",
        "backward returns silu_grad(x) without multiplying by grad_out",
        [("return (grad_out.to(compute) * silu_grad(x).to(compute)).to(x.dtype)", "return silu_grad(x)")],
    ),
    Mutant(
        "silu_function",
        "saves_output",
        "saves the output as well as the input",
        [
            ("        ctx.save_for_backward(x)\n        xc", "        xc"),
            (
                "        return (xc * torch.sigmoid(xc)).to(x.dtype)",
                "        out = (xc * torch.sigmoid(xc)).to(x.dtype)\n        ctx.save_for_backward(x, out)\n        return out",
            ),
            ("        (x,) = ctx.saved_tensors", "        x, _ = ctx.saved_tensors"),
        ],
    ),
    Mutant(
        "silu_function",
        "plain_autograd",
        "skips the Function: x * sigmoid(x) through autograd",
        [("    return SiLUFunction.apply(x)", "    return x * torch.sigmoid(x)")],
    ),
    Mutant(
        "silu_function",
        "sigmoid_only_forward",
        "forward returns sigmoid(x) (the gate) instead of x * sigmoid(x)",
        [("        return (xc * torch.sigmoid(xc)).to(x.dtype)", "        return torch.sigmoid(xc).to(x.dtype)")],
    ),
]
