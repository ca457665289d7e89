"""Realistic wrong versions of the p01.quantization_theory solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "absmax_fake_quantize",
        "q_max_power_of_two",
        "q_max = 2**(bits-1) (128 for INT8): the absmax maps to a code that does not exist",
        [("q_max = 2 ** (bits - 1) - 1", "q_max = 2 ** (bits - 1)")],
        mistake_zh="q_max = 2**(bits-1)（INT8 为 128）：absmax 被映射到一个不存在的码字",
    ),
    Mutant(
        "absmax_fake_quantize",
        "truncates",
        "truncates toward zero instead of rounding to nearest",
        [("torch.round(blocks / scale)", "torch.trunc(blocks / scale)")],
        mistake_zh="向零截断而不是就近舍入",
    ),
    Mutant(
        "absmax_fake_quantize",
        "channel_max_over_inputs",
        "per channel: the absmax over the output rows (one scale per input column)",
        [
            (
                "blocks = w.float()  # (out, in): one scale per output row",
                "blocks = w.float().T.contiguous()  # (in, out): wrong axis",
            ),
            (
                "w_hat = (q * scale).reshape(rows, cols).to(w.dtype)",
                "w_hat = (q * scale).T.reshape(rows, cols).to(w.dtype) if granularity == 'channel' "
                "else (q * scale).reshape(rows, cols).to(w.dtype)",
            ),
            ("return w_hat, scale  # (out, 1)", "return w_hat, scale[:rows]"),
        ],
        mistake_zh="按通道量化时沿输出行取 absmax（每个输入列一个 scale）",
    ),
    Mutant(
        "absmax_fake_quantize",
        "groups_down_columns",
        "groups of consecutive rows of a column instead of consecutive inputs of a row",
        [
            (
                "blocks = w.float().reshape(rows * (cols // group_size), group_size)",
                "blocks = w.float().T.reshape(rows * (cols // group_size), group_size)",
            ),
            (
                "w_hat = (q * scale).reshape(rows, cols).to(w.dtype)",
                "w_hat = ((q * scale).reshape(cols, rows).T if granularity == 'group' "
                "else (q * scale).reshape(rows, cols)).to(w.dtype)",
            ),
        ],
        mistake_zh="分组取一列中相邻的行，而不是一行中相邻的输入",
    ),
    Mutant(
        "absmax_fake_quantize",
        "no_zero_guard",
        "divides by a zero absmax: NaN in an all-zero group",
        [
            (
                "scale = torch.where(absmax > 0, absmax / q_max, torch.ones_like(absmax))",
                "scale = absmax / q_max",
            )
        ],
        mistake_zh="除以为零的 absmax：全零的组得到 NaN",
    ),
    Mutant(
        "absmax_fake_quantize",
        "returns_float32",
        "returns w_hat in float32 whatever w's dtype",
        [("w_hat = (q * scale).reshape(rows, cols).to(w.dtype)", "w_hat = (q * scale).reshape(rows, cols)")],
        mistake_zh="不管 w 是什么数据类型都返回 float32 的 w_hat",
    ),
    Mutant(
        "gaussian_quantizer_mse",
        "mid_tread_intervals",
        "2**bits - 1 intervals instead of 2**bits levels",
        [("step = 2 * clip / 2**bits", "step = 2 * clip / (2**bits - 1)")],
        mistake_zh="用 2**bits - 1 个区间而不是 2**bits 个量化级",
    ),
    Mutant(
        "gaussian_quantizer_mse",
        "granular_everywhere",
        "counts rounding noise for clipped samples too (no P(|X| <= clip))",
        [("granular = step**2 / 12 * inside", "granular = step**2 / 12")],
        mistake_zh="被截断的样本也计入舍入噪声（漏了 P(|X| <= clip)）",
    ),
    Mutant(
        "gaussian_quantizer_mse",
        "one_tail",
        "adds the clipping error of one tail only",
        [
            (
                "clipping = 2 * ((1 + outer**2) * tail + (clip - 2 * outer) * density)",
                "clipping = (1 + outer**2) * tail + (clip - 2 * outer) * density",
            )
        ],
        mistake_zh="只加了一侧尾部的截断误差",
    ),
    Mutant(
        "gaussian_quantizer_mse",
        "clipped_to_clip",
        "clipped samples land on clip, not on the outermost level clip - step / 2",
        [("outer = clip - step / 2", "outer = clip")],
        mistake_zh="被截断的样本落在 clip 上，而不是最外层的量化级 clip - step / 2",
    ),
    Mutant(
        "gaussian_quantizer_mse",
        "no_plus_one",
        "forgets the Q(clip) term of the second moment: outer**2 * Q instead of (1 + outer**2) * Q",
        [("(1 + outer**2) * tail", "outer**2 * tail")],
        mistake_zh="二阶矩漏了 Q(clip) 项：outer**2 * Q 而不是 (1 + outer**2) * Q",
    ),
]
