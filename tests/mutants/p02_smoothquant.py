"""Realistic wrong versions of the p02.smoothquant solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "act_stats",
        "last_batch_only",
        "keeps the maximum of the last batch instead of a running maximum",
        [("running = torch.maximum(running, batch_max)", "running = batch_max")],
        mistake_zh="只保留最后一批的最大值，而不是运行中的最大值",
    ),
    Mutant(
        "act_stats",
        "signed_max",
        "takes the maximum of x instead of |x| (negative outliers missed)",
        [
            (
                "batch_max = x.detach().abs().reshape(-1, x.shape[-1]).amax(dim=0).float()  # (K,)",
                "batch_max = x.detach().reshape(-1, x.shape[-1]).amax(dim=0).float()",
            )
        ],
        mistake_zh="取 x 而不是 |x| 的最大值（漏了负的离群值）",
    ),
    Mutant(
        "smoothing",
        "alpha_swapped",
        "puts alpha on the weights: a**(1 - alpha) / b**alpha",
        [("return a.pow(alpha) / b.pow(1 - alpha)", "return a.pow(1 - alpha) / b.pow(alpha)")],
        mistake_zh="把 alpha 放在权重上：a**(1 - alpha) / b**alpha",
    ),
    Mutant(
        "smoothing",
        "weight_max_over_rows",
        "takes the weight maximum over each row's input channels (amax(dim=1)) and broadcasts it wrongly",
        [
            (
                "b = torch.stack([w.detach().float().abs().amax(dim=0) for w in weights]).amax(dim=0).clamp(min=1e-5)",
                "b = torch.stack([w.detach().float().abs().amax() * torch.ones(K) for w in weights]).amax(dim=0)",
            )
        ],
        mistake_zh="权重最大值沿每一行的输入通道取（amax(dim=1)），广播方向错了",
    ),
    Mutant(
        "smoothing",
        "no_clamp",
        "does not clamp the activation maxima (a dead channel gets s = 0)",
        [("a = act_absmax.float().clamp(min=1e-5)  # (K,)", "a = act_absmax.float()")],
        mistake_zh="不截断激活最大值（死通道得到 s = 0）",
    ),
    Mutant(
        "smoothing",
        "norm_multiplied",
        "multiplies the norm by s instead of dividing",
        [("norm.weight.div_(s.to(norm.weight.dtype))", "norm.weight.mul_(s.to(norm.weight.dtype))")],
        mistake_zh="norm 乘以 s 而不是除以 s",
    ),
    Mutant(
        "smoothing",
        "bias_forgotten",
        "scales the norm's weight but not its bias",
        [("norm.bias.div_(s.to(norm.bias.dtype))", "pass")],
        mistake_zh="缩放了 norm 的权重，却没缩放它的 bias",
    ),
    Mutant(
        "smoothing",
        "rows_scaled",
        "multiplies the weight's rows (output channels) instead of its columns",
        [
            (
                "linear.weight.mul_(s.to(linear.weight.dtype)[None, :])  # (N, K) * (1, K): column j times s_j",
                "linear.weight.mul_(s.to(linear.weight.dtype)[: linear.weight.shape[0], None])",
            )
        ],
        mistake_zh="乘的是权重的行（输出通道）而不是列",
    ),
    Mutant(
        "w8a8",
        "per_tensor_scale",
        "quantises all tokens with one scale (max over the whole tensor)",
        [
            (
                "scale = x.abs().amax(dim=-1, keepdim=True) / 127  # (..., 1)",
                "scale = (x.abs().amax() / 127).expand(*x.shape[:-1], 1)",
            )
        ],
        mistake_zh="所有 token 用同一个 scale 量化（整个张量的最大值）",
    ),
    Mutant(
        "w8a8",
        "truncates",
        "truncates x / scale instead of rounding",
        [
            (
                "return torch.clamp(torch.round(x / scale), -127, 127).to(torch.int8), scale",
                "return torch.clamp(x / scale, -127, 127).to(torch.int8), scale",
            )
        ],
        mistake_zh="x / scale 截断而不是舍入",
    ),
    Mutant(
        "w8a8",
        "scales_wrong_axis",
        "applies the channel scales along the tokens (w_scale as a column) and the token scales per channel",
        [
            (
                "y = acc.float() * x_scale * w_scale.float().reshape(-1)  # (..., N): per-token and per-channel scales",
                "y = acc.float() * x_scale.mean() * w_scale.float().reshape(-1).mean()",
            )
        ],
        mistake_zh="通道 scale 沿 token 施加（w_scale 当作列），token scale 按通道施加",
    ),
    Mutant(
        "w8a8",
        "float_accumulation",
        "multiplies the int8 codes in float32 (inexact once a sum passes 2**24, i.e. K of about 1,000 at codes of 127)",
        [
            (
                "acc = q_x.to(torch.int32) @ q_w.to(torch.int32).T  # (..., N) int32, exact",
                "acc = q_x.float() @ q_w.float().T",
            )
        ],
        mistake_zh="用 float32 做 int8 码的矩阵乘（和超过 2**24 即不精确：码为 127 时 K 约 1000 就会超过）",
    ),
    Mutant(
        "w8a8",
        "bias_before_scales",
        "adds the bias to the integer accumulator, then scales it too",
        [
            (
                "y = acc.float() * x_scale * w_scale.float().reshape(-1)  # (..., N): per-token and per-channel scales",
                "y = (acc.float() + (0 if bias is None else bias.float())) * x_scale * w_scale.float().reshape(-1)",
            ),
            ("y = y + bias.float()", "y = y"),
        ],
        mistake_zh="把 bias 加到整数累加器上，然后连它一起缩放",
    ),
    Mutant(
        "w8a8",
        "returns_float32",
        "returns float32 for bfloat16 activations",
        [("return y.to(x.dtype)", "return y")],
        mistake_zh="bfloat16 激活却返回 float32",
    ),
]
