"""Realistic wrong versions of the p01.number_formats solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "float_format_limits",
        "fn_treated_as_ieee",
        "reserves the top exponent for inf/NaN in every format, so E4M3FN stops at 240 instead of 448",
        [('elif special == "fn":', 'elif special == "fn" and False:')],
    ),
    Mutant(
        "float_format_limits",
        "bias_without_minus_one",
        "uses a bias of 2**(E-1) instead of 2**(E-1) - 1",
        [("bias = 2 ** (exponent_bits - 1) - 1", "bias = 2 ** (exponent_bits - 1)")],
    ),
    Mutant(
        "float_format_limits",
        "unit_roundoff_as_eps",
        "reports the unit roundoff 2**-(M+1) as machine epsilon",
        [('"eps": ulp_of_one,', '"eps": ulp_of_one / 2,')],
    ),
    Mutant(
        "float_format_limits",
        "subnormal_off_by_one",
        "puts the smallest subnormal at 2**(-bias - M) instead of 2**(1 - bias - M)",
        [("2.0 ** (1 - bias - mantissa_bits)", "2.0 ** (-bias - mantissa_bits)")],
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
    ),
    Mutant(
        "bf16_codec",
        "truncates",
        "keeps the top 16 bits without rounding (round towards zero)",
        [("rounded = (bits + 0x7FFF + last_kept_bit) >> 16", "rounded = bits >> 16")],
    ),
    Mutant(
        "bf16_codec",
        "ties_away_from_zero",
        "adds 0x8000 (round half away from zero in magnitude) instead of ties to even",
        [("rounded = (bits + 0x7FFF + last_kept_bit) >> 16", "rounded = (bits + 0x8000) >> 16")],
    ),
    Mutant(
        "bf16_codec",
        "no_nan_case",
        "no special case for NaN: a NaN whose payload is in the low 16 bits rounds to infinity",
        [("return torch.where(is_nan, quiet_nan, rounded).to(torch.int16)", "return rounded.to(torch.int16)")],
    ),
    Mutant(
        "bf16_codec",
        "casts_with_torch",
        "lets torch do the rounding: x.to(torch.bfloat16).view(torch.int16)",
        [("bits = x.view(torch.int32)  # (...,)", "return x.to(torch.bfloat16).view(torch.int16)  #")],
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
    ),
    Mutant(
        "bf16_codec",
        "decode_with_torch",
        "decodes by viewing the bits as bfloat16 and casting: bits.view(torch.bfloat16).float()",
        [("return (bits.to(torch.int32) << 16).view(torch.float32)", "return bits.view(torch.bfloat16).float()")],
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
    ),
    Mutant(
        "fp8_decode",
        "e4m3fn_top_exponent_as_ieee",
        "treats e4m3fn like an IEEE format: the whole top exponent is inf/NaN",
        [('if fmt == "e4m3fn":  # the top exponent', "if False:  # the top exponent")],
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
    ),
    Mutant(
        "fp8_encode",
        "truncates",
        "drops the shifted-out bits without rounding",
        [("kept = (significand + round_bias) >> shift", "kept = significand >> shift")],
    ),
    Mutant(
        "fp8_encode",
        "ties_away_from_zero",
        "rounds ties up in magnitude (no last-kept-bit term)",
        [("round_bias = (1 << (shift - 1)) - 1 + ((significand >> shift) & 1)", "round_bias = 1 << (shift - 1)")],
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
    ),
    Mutant(
        "fp8_encode",
        "ignores_saturate",
        "always saturates, whatever saturate says",
        [("overflow = largest if saturate else", "overflow = largest if True else")],
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
    ),
]
