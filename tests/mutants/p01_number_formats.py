"""Realistic wrong versions of the p01.number_formats solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "float_format_limits",
        "fn_treated_as_ieee",
        "reserves the top exponent for inf/NaN in every format, so E4M3FN stops at 240 instead of 448",
        [('elif special == "fn":', 'elif special == "fn" and False:')],
        mistake_zh="每种格式都把最高指数留给 inf/NaN，于是 E4M3FN 的最大值成了 240 而不是 448",
    ),
    Mutant(
        "float_format_limits",
        "bias_without_minus_one",
        "uses a bias of 2**(E-1) instead of 2**(E-1) - 1",
        [("bias = 2 ** (exponent_bits - 1) - 1", "bias = 2 ** (exponent_bits - 1)")],
        mistake_zh="偏置用 2**(E-1) 而不是 2**(E-1) - 1",
    ),
    Mutant(
        "float_format_limits",
        "unit_roundoff_as_eps",
        "reports the unit roundoff 2**-(M+1) as machine epsilon",
        [('"eps": ulp_of_one,', '"eps": ulp_of_one / 2,')],
        mistake_zh="把单位舍入误差 2**-(M+1) 当作机器 epsilon 报告",
    ),
    Mutant(
        "float_format_limits",
        "subnormal_off_by_one",
        "puts the smallest subnormal at 2**(-bias - M) instead of 2**(1 - bias - M)",
        [("2.0 ** (1 - bias - mantissa_bits)", "2.0 ** (-bias - mantissa_bits)")],
        mistake_zh="最小次正规数放在 2**(-bias - M) 而不是 2**(1 - bias - M)",
    ),
    Mutant(
        "float_format_limits",
        "no_validation",
        "accepts any convention name (treating it as 'none')",
        [
            (
                "raise ValueError(f\"special must be 'ieee', 'fn' or 'none', not {special!r}\")",
                "special = 'none'",
            )
        ],
        mistake_zh="接受任意约定名（当作 'none' 处理）",
    ),
    Mutant(
        "bf16_codec",
        "truncates",
        "keeps the top 16 bits without rounding (round towards zero)",
        [("rounded = (bits + 0x7FFF + last_kept_bit) >> 16", "rounded = bits >> 16")],
        mistake_zh="保留高 16 位而不舍入（向零舍入）",
    ),
    Mutant(
        "bf16_codec",
        "ties_away_from_zero",
        "adds 0x8000 (round half away from zero in magnitude) instead of ties to even",
        [("rounded = (bits + 0x7FFF + last_kept_bit) >> 16", "rounded = (bits + 0x8000) >> 16")],
        mistake_zh="加 0x8000（按绝对值四舍五入，远离零），而不是就近舍入到偶数",
    ),
    Mutant(
        "bf16_codec",
        "no_nan_case",
        "no special case for NaN: a NaN whose payload is in the low 16 bits rounds to infinity",
        [("return torch.where(is_nan, quiet_nan, rounded).to(torch.int16)", "return rounded.to(torch.int16)")],
        mistake_zh="没有特判 NaN：payload 在低 16 位的 NaN 被舍入成无穷",
    ),
    Mutant(
        "bf16_codec",
        "casts_with_torch",
        "lets torch do the rounding: x.to(torch.bfloat16).view(torch.int16)",
        [("bits = x.view(torch.int32)  # (...,)", "return x.to(torch.bfloat16).view(torch.int16)  #")],
        mistake_zh="让 torch 来舍入：x.to(torch.bfloat16).view(torch.int16)",
    ),
    Mutant(
        "bf16_codec",
        "decode_shift_by_15",
        "shifts the pattern by 15 bits instead of 16 when decoding",
        [
            (
                "return (bits.to(torch.int32) << 16).view(torch.float32)",
                "return (bits.to(torch.int32) << 15).view(torch.float32)",
            )
        ],
        mistake_zh="解码时移位 15 位而不是 16 位",
    ),
    Mutant(
        "bf16_codec",
        "decode_with_torch",
        "decodes by viewing the bits as bfloat16 and casting: bits.view(torch.bfloat16).float()",
        [("return (bits.to(torch.int32) << 16).view(torch.float32)", "return bits.view(torch.bfloat16).float()")],
        mistake_zh="把比特看作 bfloat16 再转换来解码：bits.view(torch.bfloat16).float()",
    ),
    Mutant(
        "fp8_decode",
        "subnormal_with_implicit_one",
        "gives subnormals (exponent 0) the implicit leading 1 of normal numbers",
        [
            (
                "subnormal = torch.ldexp(fraction, torch.tensor(1 - bias))",
                "subnormal = torch.ldexp(1 + fraction, torch.tensor(1 - bias))",
            )
        ],
        mistake_zh="给次正规数（指数为 0）加上正规数才有的隐含前导 1",
    ),
    Mutant(
        "fp8_decode",
        "subnormal_scale_minus_bias",
        "scales subnormals by 2**-bias instead of 2**(1 - bias)",
        [
            (
                "subnormal = torch.ldexp(fraction, torch.tensor(1 - bias))",
                "subnormal = torch.ldexp(fraction, torch.tensor(-bias))",
            )
        ],
        mistake_zh="次正规数乘以 2**-bias 而不是 2**(1 - bias)",
    ),
    Mutant(
        "fp8_decode",
        "e4m3fn_top_exponent_as_ieee",
        "treats e4m3fn like an IEEE format: the whole top exponent is inf/NaN",
        [('if fmt == "e4m3fn":  # the top exponent', "if False:  # the top exponent")],
        mistake_zh="把 e4m3fn 当作 IEEE 格式：整个最高指数都是 inf/NaN",
    ),
    Mutant(
        "fp8_decode",
        "decodes_with_torch",
        "views the codes as torch's float8 dtype and converts",
        [
            (
                "code = codes.to(torch.int32)",
                'return codes.view(torch.float8_e4m3fn if fmt == "e4m3fn" else torch.float8_e5m2).float()',
            )
        ],
        mistake_zh="把编码看作 torch 的 float8 类型再转换",
    ),
    Mutant(
        "fp8_decode",
        "sign_lost_on_zero",
        "applies the sign to non-zero magnitudes only, so code 0x80 decodes to +0.0 instead of -0.0",
        [
            (
                "return torch.where((code & 0x80) != 0, -magnitude, magnitude)",
                "return torch.where(((code & 0x80) != 0) & (magnitude != 0), -magnitude, magnitude)",
            )
        ],
        mistake_zh="只给非零的数值加符号，于是编码 0x80 解码成 +0.0 而不是 -0.0",
    ),
    Mutant(
        "fp8_encode",
        "truncates",
        "drops the shifted-out bits without rounding",
        [("kept = (significand + round_bias) >> shift", "kept = significand >> shift")],
        mistake_zh="丢掉移出的比特而不舍入",
    ),
    Mutant(
        "fp8_encode",
        "ties_away_from_zero",
        "rounds ties up in magnitude (no last-kept-bit term)",
        [("round_bias = (1 << (shift - 1)) - 1 + ((significand >> shift) & 1)", "round_bias = 1 << (shift - 1)")],
        mistake_zh="平局时按绝对值向上舍入（没有最后保留位那一项）",
    ),
    Mutant(
        "fp8_encode",
        "flush_subnormals",
        "shifts every result as a normal number: subnormal results come out wrong",
        [
            (
                "shift = (23 - mantissa_bits + (1 - exponent).clamp(min=0)).clamp(max=30)",
                "shift = torch.full_like(exponent, 23 - mantissa_bits)",
            )
        ],
        mistake_zh="把每个结果都当正规数移位：次正规的结果出错",
    ),
    Mutant(
        "fp8_encode",
        "saturates_nan",
        "handles NaN before overflow, so saturation turns NaN into the largest value",
        [
            (
                "code = torch.where(code > largest, overflow, code)\n    code = torch.where(magnitude > 0x7F800000, 0x7F, code)",
                "code = torch.where(magnitude > 0x7F800000, 0x7F, code)\n    code = torch.where(code > largest, overflow, code)",
            )
        ],
        mistake_zh="先处理 NaN 再处理溢出，饱和把 NaN 变成了最大值",
    ),
    Mutant(
        "fp8_encode",
        "ignores_saturate",
        "always saturates, whatever saturate says",
        [("overflow = largest if saturate else", "overflow = largest if True else")],
        mistake_zh="不管 saturate 怎么设都做饱和",
    ),
    Mutant(
        "fp8_encode",
        "casts_with_torch",
        "clamps and lets torch cast: x.clamp(-max, max).to(float8).view(torch.uint8)",
        [
            (
                "bits = x.view(torch.int32)",
                'return x.clamp(-448.0, 448.0).to(torch.float8_e4m3fn).view(torch.uint8) if fmt == "e4m3fn" '
                "else x.clamp(-57344.0, 57344.0).to(torch.float8_e5m2).view(torch.uint8)",
            )
        ],
        mistake_zh="先 clamp 再让 torch 转换：x.clamp(-max, max).to(float8).view(torch.uint8)",
    ),
]
