"""Realistic wrong versions of the p02.rope solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    # rope_cache
    Mutant(
        "rope_cache",
        "angles_in_low_dtype",
        "computes positions, theta and m * theta in the table's bf16/fp16 dtype",
        [("compute_dtype = torch.promote_types(dtype, torch.float32)", "compute_dtype = dtype")],
        mistake_zh="位置、theta 和 m * theta 都在表的 bf16/fp16 下计算",
    ),
    Mutant(
        "rope_cache",
        "exponent_without_step_two",
        "theta_i = base ** (-i / D) from arange(D // 2) / D: right shape, wrong frequencies",
        [
            (
                "torch.arange(0, head_dim, 2, dtype=compute_dtype) / head_dim",
                "torch.arange(head_dim // 2, dtype=compute_dtype) / head_dim",
            )
        ],
        mistake_zh="theta_i = base ** (-i / D)，i 取 arange(D // 2)：形状对，频率错",
    ),
    Mutant(
        "rope_cache",
        "interleaved_layout",
        "repeats each angle twice in a row (the GPT-J layout) instead of [angles, angles]",
        [("torch.cat((angles, angles), dim=-1)", "angles.repeat_interleave(2, dim=-1)")],
        mistake_zh="每个角度连续重复两次（GPT-J 的布局），而不是 [angles, angles]",
    ),
    Mutant(
        "rope_cache",
        "downcasts_float64",
        "always computes in float32, so a float64 table has float32 angles",
        [("compute_dtype = torch.promote_types(dtype, torch.float32)", "compute_dtype = torch.float32")],
        mistake_zh="总是用 float32 计算，float64 的表得到的是 float32 的角度",
    ),
    # apply_rope_rotate_half
    Mutant(
        "apply_rope_rotate_half",
        "rotate_half_missing_minus",
        "rotate_half returns cat(x2, x1): no longer a rotation",
        [("torch.cat((-x2, x1), dim=-1)", "torch.cat((x2, x1), dim=-1)")],
        mistake_zh="rotate_half 返回 cat(x2, x1)：不再是旋转",
    ),
    Mutant(
        "apply_rope_rotate_half",
        "cos_sin_swapped",
        "multiplies x by sin and rotate_half(x) by cos",
        [("xc * cos_t + rotated * sin_t", "xc * sin_t + rotated * cos_t")],
        mistake_zh="x 乘 sin，rotate_half(x) 乘 cos",
    ),
    Mutant(
        "apply_rope_rotate_half",
        "ignores_position_ids",
        "assumes positions 0 .. T-1 (breaks KV-cache decoding and left padding)",
        [
            ("cos[position_ids].unsqueeze(1)", "cos[:T][None].unsqueeze(1)"),
            ("sin[position_ids].unsqueeze(1)", "sin[:T][None].unsqueeze(1)"),
        ],
        mistake_zh="假定位置是 0 .. T-1（KV 缓存解码和左填充都会出错）",
    ),
    Mutant(
        "apply_rope_rotate_half",
        "rotate_every_two_pairing",
        "GPT-J's interleaved rotate_every_two used with rotate-half tables",
        [
            ("x1, x2 = xc[..., : D // 2], xc[..., D // 2 :]", "x1, x2 = xc[..., 0::2], xc[..., 1::2]"),
            ("torch.cat((-x2, x1), dim=-1)", "torch.stack((-x2, x1), dim=-1).flatten(-2)"),
        ],
        mistake_zh="配 rotate-half 的表却用了 GPT-J 交错的 rotate_every_two",
    ),
    Mutant(
        "apply_rope_rotate_half",
        "returns_float32",
        "forgets to cast the float32 result back to x's dtype",
        [("(xc * cos_t + rotated * sin_t).to(x.dtype)", "(xc * cos_t + rotated * sin_t)")],
        mistake_zh="忘了把 float32 的结果转回 x 的数据类型",
    ),
    # apply_rope_interleaved
    Mutant(
        "apply_rope_interleaved",
        "halves_pairing",
        "pairs (i, i + D/2) as in rotate-half where Meta's (2i, 2i + 1) is required",
        [
            ("x_even, x_odd = xc[..., 0::2], xc[..., 1::2]", "x_even, x_odd = xc[..., :half], xc[..., half:]"),
            ("torch.stack((out_even, out_odd), dim=-1).flatten(-2)", "torch.cat((out_even, out_odd), dim=-1)"),
        ],
        mistake_zh="像 rotate-half 那样配对 (i, i + D/2)，而这里要求 Meta 的 (2i, 2i + 1)",
    ),
    Mutant(
        "apply_rope_interleaved",
        "strided_table_columns",
        "takes every other table column, as if the table were interleaved",
        [
            ("cos[position_ids][..., :half]", "cos[position_ids][..., ::2]"),
            ("sin[position_ids][..., :half]", "sin[position_ids][..., ::2]"),
        ],
        mistake_zh="隔列取表，好像表是交错的",
    ),
    Mutant(
        "apply_rope_interleaved",
        "not_interleaved_back",
        "returns [rotated evens, rotated odds] instead of interleaving them back",
        [("torch.stack((out_even, out_odd), dim=-1).flatten(-2)", "torch.cat((out_even, out_odd), dim=-1)")],
        mistake_zh="返回 [旋转后的偶数位, 旋转后的奇数位]，没有交错回去",
    ),
    Mutant(
        "apply_rope_interleaved",
        "rotates_backwards",
        "multiplies by e^{-i m theta} (the conjugate rotation)",
        [
            ("x_even * cos_t - x_odd * sin_t", "x_even * cos_t + x_odd * sin_t"),
            ("x_even * sin_t + x_odd * cos_t", "-x_even * sin_t + x_odd * cos_t"),
        ],
        mistake_zh="乘以 e^{-i m theta}（共轭旋转）",
    ),
    # scaled_inv_freq
    Mutant(
        "scaled_inv_freq",
        "llama3_bands_swapped",
        "Llama 3.1's blend the wrong way round: the fast pairs interpolated, the slow ones kept",
        [
            (
                "return (1 - keep) * inv_freq / factor + keep * inv_freq, 1.0",
                "return keep * inv_freq / factor + (1 - keep) * inv_freq, 1.0",
            )
        ],
        mistake_zh="Llama 3.1 的混合方向反了：插值了快的维度对，保留了慢的",
    ),
    Mutant(
        "scaled_inv_freq",
        "llama3_no_clamp",
        "uses Llama 3.1's smoothing weight outside its band, without the clamp to [0, 1]",
        [(".clamp(0, 1)  # 1: short waves, 0: long waves", "  # 1: short waves, 0: long waves")],
        mistake_zh="在频带之外也用 Llama 3.1 的平滑权重，没有截断到 [0, 1]",
    ),
    Mutant(
        "scaled_inv_freq",
        "yarn_ramp_reversed",
        "YaRN's ramp the wrong way round: the fast pairs interpolated",
        [
            (
                "inv_freq = ramp * inv_freq / factor + (1 - ramp) * inv_freq",
                "inv_freq = (1 - ramp) * inv_freq / factor + ramp * inv_freq",
            )
        ],
        mistake_zh="YaRN 的斜坡方向反了：插值了快的维度对",
    ),
    Mutant(
        "scaled_inv_freq",
        "yarn_interpolates_everything",
        "plain position interpolation under the name yarn: every pair divided by the factor",
        [
            (
                "inv_freq = ramp * inv_freq / factor + (1 - ramp) * inv_freq",
                "inv_freq = inv_freq / factor",
            )
        ],
        mistake_zh="名为 yarn 的其实是普通的位置插值：每个维度对都除以 factor",
    ),
    Mutant(
        "scaled_inv_freq",
        "yarn_no_attention_factor",
        "forgets YaRN's attention temperature: the factor stays 1",
        [('attention_factor = rope_parameters.get("attention_factor")', "attention_factor = 1.0")],
        mistake_zh="忘了 YaRN 的注意力温度：因子一直是 1",
    ),
    Mutant(
        "scaled_inv_freq",
        "yarn_never_truncates",
        "ignores truncate: the correction range is never rounded to whole pairs",
        [('if rope_parameters.get("truncate", True):', "if False:")],
        mistake_zh="忽略 truncate：修正范围从不取整到完整的维度对",
    ),
    Mutant(
        "scaled_inv_freq",
        "tables_without_attention_factor",
        "builds the tables from the scaled frequencies but drops the attention factor",
        [
            (
                "return (angles.cos() * attention_factor).to(dtype), (angles.sin() * attention_factor).to(dtype)",
                "return angles.cos().to(dtype), angles.sin().to(dtype)",
            )
        ],
        mistake_zh="用缩放后的频率建表，却丢了注意力因子",
    ),
]
