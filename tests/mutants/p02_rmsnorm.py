"""Realistic wrong versions of the p02.rmsnorm solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "rms_norm",
        "no_fp32_upcast",
        "squares in the input dtype: fp16 overflows once |x| > 256",
        [("torch.promote_types(x.dtype, torch.float32)  # fp16/bf16", "x.dtype  # fp16/bf16")],
        mistake_zh="在输入的数据类型下求平方：|x| > 256 时 fp16 溢出",
    ),
    Mutant(
        "rms_norm",
        "layernorm_statistic",
        "uses the variance (subtracts the mean) instead of the mean of squares",
        [
            (
                "xc.pow(2).mean(dim=-1, keepdim=True)",
                "(xc - xc.mean(dim=-1, keepdim=True)).pow(2).mean(dim=-1, keepdim=True)",
            )
        ],
        mistake_zh="用方差（减了均值）代替平方的均值",
    ),
    Mutant(
        "rms_norm",
        "eps_outside_sqrt",
        "adds eps after the square root",
        [
            (
                "torch.rsqrt(xc.pow(2).mean(dim=-1, keepdim=True) + eps)",
                "1 / (xc.pow(2).mean(dim=-1, keepdim=True).sqrt() + eps)",
            )
        ],
        mistake_zh="在开方之后才加 eps",
    ),
    Mutant(
        "rms_norm",
        "mean_over_everything",
        "reduces over all elements instead of the last dimension",
        [("xc.pow(2).mean(dim=-1, keepdim=True)", "xc.pow(2).mean()")],
        mistake_zh="对所有元素而不是最后一维归约",
    ),
    Mutant(
        "rms_norm",
        "returns_float32",
        "forgets to cast back to the input dtype",
        [("(xc * inv_rms * weight.to(compute_dtype)).to(x.dtype)", "(xc * inv_rms * weight.to(compute_dtype))")],
        mistake_zh="忘了转回输入的数据类型",
    ),
    Mutant(
        "rms_norm",
        "downcasts_float64",
        "x.float() as the upcast, which turns float64 inputs into float32",
        [
            (
                "compute_dtype = torch.promote_types(x.dtype, torch.float32)  # fp16/bf16 -> fp32, fp64 stays",
                "compute_dtype = torch.float32",
            )
        ],
        mistake_zh="用 x.float() 升精度，把 float64 输入变成了 float32",
    ),
    Mutant(
        "rmsnorm_module",
        "weight_not_a_parameter",
        "stores the gain as a plain tensor, so it is neither trained nor saved",
        [("self.weight = nn.Parameter(torch.ones(hidden_size))", "self.weight = torch.ones(hidden_size)")],
        mistake_zh="增益存成普通张量，既不训练也不保存",
    ),
    Mutant(
        "rmsnorm_module",
        "ignores_eps",
        "forward uses the default eps instead of the layer's own",
        [("return rms_norm(x, self.weight, self.eps)", "return rms_norm(x, self.weight)")],
        mistake_zh="forward 用默认的 eps，而不是该层自己的",
    ),
    Mutant(
        "rmsnorm_module",
        "zero_init",
        "initialises the gain at zeros",
        [("nn.Parameter(torch.ones(hidden_size))", "nn.Parameter(torch.zeros(hidden_size))")],
        mistake_zh="增益初始化为零",
    ),
    Mutant(
        "rms_norm_backward",
        "no_projection_term",
        "drops the component along x_hat: grad_x = r * u",
        [("grad_x = r * (u - x_hat * (u * x_hat).mean(dim=-1, keepdim=True))", "grad_x = r * u")],
        mistake_zh="丢了沿 x_hat 方向的分量：grad_x = r * u",
    ),
    Mutant(
        "rms_norm_backward",
        "weight_grad_over_first_dim_only",
        "sums grad_weight over dim 0 of the original shape",
        [
            (
                "grad_weight = (dy * x_hat).sum(dim=0)",
                "grad_weight = (dy * x_hat).reshape(grad_out.shape).sum(dim=0).reshape(-1)[:d]",
            )
        ],
        mistake_zh="grad_weight 只沿原始形状的第 0 维求和",
    ),
    Mutant(
        "rms_norm_backward",
        "weight_grad_mean",
        "averages grad_weight over rows instead of summing",
        [("(dy * x_hat).sum(dim=0)", "(dy * x_hat).mean(dim=0)")],
        mistake_zh="grad_weight 对各行取平均而不是求和",
    ),
    Mutant(
        "rms_norm_backward",
        "no_upcast",
        "computes the gradients in the input dtype",
        [("compute_dtype = torch.promote_types(x.dtype, torch.float32)\n", "compute_dtype = x.dtype\n")],
        mistake_zh="在输入的数据类型下计算梯度",
    ),
    Mutant(
        "rms_norm",
        "calls_the_builtin",
        "hands the work to F.rms_norm, the builtin the lesson teaches",
        [
            (
                "inv_rms = torch.rsqrt(xc.pow(2).mean(dim=-1, keepdim=True) + eps)  # (..., 1)",
                "return F.rms_norm(xc, (x.shape[-1],), weight.to(compute_dtype), eps).to(x.dtype)",
            )
        ],
        mistake_zh="把工作交给本课讲解的内置函数 F.rms_norm",
    ),
    Mutant(
        "rms_norm_backward",
        "uses_autograd",
        "lets autograd differentiate F.rms_norm instead of writing the gradient",
        [
            (
                "r = torch.rsqrt(xc.pow(2).mean(dim=-1, keepdim=True) + eps)     # (n, 1)",
                "leaf_x, leaf_w = xc.requires_grad_(True), weight.to(compute_dtype).requires_grad_(True)\n"
                "    with torch.enable_grad():\n"
                "        y = F.rms_norm(leaf_x, (d,), leaf_w, eps)\n"
                "        gx, gw = torch.autograd.grad(y, (leaf_x, leaf_w), dy)\n"
                "    return gx.reshape(x.shape).to(x.dtype), gw.to(weight.dtype)",
            )
        ],
        mistake_zh="让 autograd 对 F.rms_norm 求导，而不是手写梯度",
    ),
]
