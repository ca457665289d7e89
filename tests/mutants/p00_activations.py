"""Realistic wrong versions of the p00.activations solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "gelu",
        "erf_without_sqrt2",
        "erf(x) instead of erf(x / sqrt 2)",
        [("out = 0.5 * xc * (1.0 + torch.erf(xc / math.sqrt(2.0)))", "out = 0.5 * xc * (1.0 + torch.erf(xc))")],
        mistake_zh="用 erf(x) 而不是 erf(x / √2)",
    ),
    Mutant(
        "gelu",
        "tanh_without_scale",
        "forgets sqrt(2/pi) in the tanh form",
        [("inner = SQRT_2_OVER_PI * (xc + 0.044715 * xc**3)", "inner = xc + 0.044715 * xc**3")],
        mistake_zh="tanh 形式里漏掉 √(2/π)",
    ),
    Mutant(
        "gelu",
        "modes_swapped",
        "returns the exact form for 'tanh' and the tanh form otherwise",
        [('    if approximate == "tanh":\n        inner', '    if approximate != "tanh":\n        inner')],
        mistake_zh="'tanh' 模式返回精确形式，其他情况反而返回 tanh 近似",
    ),
    Mutant(
        "gelu",
        "calls_f_gelu",
        "calls F.gelu (the reference)",
        [("    return out.to(x.dtype)", "    return F.gelu(x, approximate=approximate)")],
        mistake_zh="直接调用 F.gelu（即参考实现）",
    ),
    Mutant(
        "gelu",
        "sigmoid_approximation",
        "uses the sigmoid approximation x * sigmoid(1.702 x) for the exact form",
        [("out = 0.5 * xc * (1.0 + torch.erf(xc / math.sqrt(2.0)))", "out = xc * torch.sigmoid(1.702 * xc)")],
        mistake_zh="精确形式用了 sigmoid 近似 x·sigmoid(1.702x)",
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
        mistake_zh="tanh 形式中把 x³ 的导数写成 x²",
    ),
    Mutant(
        "derivatives",
        "pdf_unnormalised",
        "the normal density without its 1 / sqrt(2 pi)",
        [("pdf = torch.exp(-0.5 * xc * xc) / math.sqrt(2.0 * math.pi)", "pdf = torch.exp(-0.5 * xc * xc)")],
        mistake_zh="正态密度漏掉系数 1/√(2π)",
    ),
    Mutant(
        "derivatives",
        "sigmoid_derivative",
        "returns the sigmoid's derivative s (1 - s) for SiLU's",
        [("return (s * (1.0 + xc * (1.0 - s))).to(x.dtype)", "return (s * (1.0 - s)).to(x.dtype)")],
        mistake_zh="把 sigmoid 的导数 s(1 − s) 当成 SiLU 的导数",
    ),
    Mutant(
        "derivatives",
        "product_rule_half",
        "forgets the x phi(x) term of the product rule",
        [("grad = cdf + xc * pdf", "grad = cdf")],
        mistake_zh="乘积法则漏掉 x·φ(x) 这一项",
    ),
    Mutant(
        "derivatives",
        "sigmoid_as_exp_ratio",
        "writes the sigmoid as exp(x) / (1 + exp(x)): inf / inf = nan for x above 88 in float32",
        [("    s = torch.sigmoid(xc)", "    s = torch.exp(xc) / (1.0 + torch.exp(xc))")],
        mistake_zh="把 sigmoid 写成 exp(x) / (1 + exp(x))：float32 下 x 超过 88 时 inf / inf = nan",
    ),
    Mutant(
        "silu_function",
        "no_chain_rule",
        "backward returns silu_grad(x) without multiplying by grad_out",
        [("return (grad_out.to(compute) * silu_grad(x).to(compute)).to(x.dtype)", "return silu_grad(x)")],
        mistake_zh="backward 返回 silu_grad(x)，没有乘上 grad_out",
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
        mistake_zh="除了输入还保存了输出",
    ),
    Mutant(
        "silu_function",
        "plain_autograd",
        "skips the Function: x * sigmoid(x) through autograd",
        [("    return SiLUFunction.apply(x)", "    return x * torch.sigmoid(x)")],
        mistake_zh="绕过 Function，直接让 autograd 对 x·sigmoid(x) 求导",
    ),
    Mutant(
        "silu_function",
        "sigmoid_only_forward",
        "forward returns sigmoid(x) (the gate) instead of x * sigmoid(x)",
        [("        return (xc * torch.sigmoid(xc)).to(x.dtype)", "        return torch.sigmoid(xc).to(x.dtype)")],
        mistake_zh="forward 返回 sigmoid(x)（门控）而不是 x·sigmoid(x)",
    ),
]
