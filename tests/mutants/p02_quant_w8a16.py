"""Realistic wrong versions of the p02.quant_w8a16 solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "quantize",
        "unsigned_qmax_for_signed",
        "uses qmax = 2**bits - 1 for signed symmetric codes (half the scale, the top half clamped)",
        [("qmax = 2 ** (bits - 1) - 1", "qmax = 2**bits - 1")],
        mistake_zh="有符号对称码用了 qmax = 2**bits - 1（scale 减半，上半部分被截断）",
    ),
    Mutant(
        "quantize",
        "truncates",
        "truncates w / scale towards zero instead of rounding to nearest",
        [("torch.clamp(torch.round(groups / scale), -qmax, qmax)", "torch.clamp(groups / scale, -qmax, qmax)")],
        mistake_zh="w / scale 向零截断，而不是就近舍入",
    ),
    Mutant(
        "quantize",
        "range_without_zero",
        "asymmetric range [min, max] that does not contain 0 (w = 0 no longer exact, zero point clamped)",
        [
            ("lo = groups.amin(dim=-1, keepdim=True).clamp(max=0.0)", "lo = groups.amin(dim=-1, keepdim=True)"),
            ("hi = groups.amax(dim=-1, keepdim=True).clamp(min=0.0)", "hi = groups.amax(dim=-1, keepdim=True)"),
        ],
        mistake_zh="非对称范围 [min, max] 不包含 0（w = 0 不再精确，零点被截断）",
    ),
    Mutant(
        "quantize",
        "groups_down_columns",
        "forms groups from the transposed weight (G consecutive rows of one column)",
        [
            ("groups = w.float().reshape(N, K // G, G)  # (N, K/G, G)", "groups = w.float().T.reshape(N, K // G, G)"),
        ],
        mistake_zh="从转置的权重分组（同一列中相邻的 G 行）",
    ),
    Mutant(
        "quantize",
        "calls_the_builtin",
        "rounds the symmetric codes with torch.fake_quantize_per_channel_affine",
        [
            (
                "q = torch.clamp(torch.round(groups / scale), -qmax, qmax).to(torch.int8)  # (N, K/G, G)",
                "flat_scale = scale.reshape(-1)\n"
                "        no_zero = torch.zeros(flat_scale.numel(), dtype=torch.int32)\n"
                "        fake = torch.fake_quantize_per_channel_affine(groups.reshape(-1, G), flat_scale, no_zero, 0, -qmax, qmax)\n"
                "        q = torch.round(fake / flat_scale[:, None]).reshape(groups.shape).to(torch.int8)",
            )
        ],
        mistake_zh="用 torch.fake_quantize_per_channel_affine 舍入对称码",
    ),
    Mutant(
        "quantize",
        "dequantize_forgets_zero",
        "dequantize_weight multiplies the unsigned codes by the scale without subtracting the zero point",
        [("groups = groups - zero.float().unsqueeze(-1)", "groups = groups")],
        mistake_zh="dequantize_weight 把无符号码乘以 scale，没有减去零点",
    ),
    Mutant(
        "quantize",
        "dequantize_repeat_not_interleave",
        "spreads the group scales with repeat (s0 s1 s0 s1 ...) instead of repeat_interleave",
        [
            (
                "return (groups * scale.float().unsqueeze(-1)).reshape(N, K)",
                "return groups.reshape(N, K) * scale.float().repeat(1, G)",
            )
        ],
        mistake_zh="用 repeat（s0 s1 s0 s1 ...）而不是 repeat_interleave 展开组 scale",
    ),
    Mutant(
        "pack_int4",
        "nibbles_swapped",
        "puts the even column in the high nibble and the odd one in the low nibble",
        [("return low | (high << 4)", "return high | (low << 4)")],
        mistake_zh="偶数列放在高 4 位，奇数列放在低 4 位",
    ),
    Mutant(
        "pack_int4",
        "no_sign_extension",
        "unpacks nibbles as unsigned 0..15 (-1 comes back as 15)",
        [("return torch.where(nibbles >= 8, nibbles - 16, nibbles)  # sign extension", "return nibbles")],
        mistake_zh="把 4 位按无符号的 0..15 解包（-1 回来变成 15）",
    ),
    Mutant(
        "pack_int4",
        "unmasked_low_nibble",
        "packs the raw int8 bits without keeping the low 4 bits (negative codes spill into the high nibble)",
        [
            (
                "nibbles = (q.to(torch.int16) & 0xF).to(torch.uint8)",
                "nibbles = q.to(torch.uint8)",
            )
        ],
        mistake_zh="打包原始的 int8 比特却没有只保留低 4 位（负码溢出到高 4 位）",
    ),
    Mutant(
        "pack_int4",
        "no_range_check",
        "accepts codes outside [-8, 7] and silently wraps them",
        [("if q.numel() and (int(q.min()) < -8 or int(q.max()) > 7):", "if False:")],
        mistake_zh="接受 [-8, 7] 之外的码并默默回绕",
    ),
    Mutant(
        "quant_linear",
        "keeps_float_weight",
        "keeps the float weight as a buffer next to the codes (no memory saved)",
        [
            (
                'self.register_buffer("scales", scale)  # (N, K/G) float32',
                'self.register_buffer("scales", scale)\n'
                '        self.register_buffer("weight", linear.weight.detach().clone())',
            )
        ],
        mistake_zh="在码旁边还把浮点权重存成 buffer（没有省下显存）",
    ),
    Mutant(
        "quant_linear",
        "drops_bias",
        "forgets the bias in forward",
        [
            (
                "return F.linear(x, self.dequantized_weight(x.dtype), bias)  # (..., N)",
                "return F.linear(x, self.dequantized_weight(x.dtype))",
            )
        ],
        mistake_zh="forward 里忘了 bias",
    ),
    Mutant(
        "quant_linear",
        "computes_in_float32",
        "dequantises to float32 and returns float32 for half-precision activations",
        [
            (
                "return F.linear(x, self.dequantized_weight(x.dtype), bias)  # (..., N)",
                "return F.linear(x.float(), self.dequantized_weight(torch.float32), None if bias is None else bias.float())",
            )
        ],
        mistake_zh="反量化到 float32，并对半精度激活返回 float32",
    ),
    Mutant(
        "quant_linear",
        "int4_unpacked",
        "stores 4-bit codes one per int8 byte instead of packing them",
        [
            ('self.register_buffer("qweight", pack_int4(q) if bits == 4 else q)', 'self.register_buffer("qweight", q)'),
            ("q = unpack_int4(self.qweight) if self.bits == 4 else self.qweight", "q = self.qweight"),
        ],
        mistake_zh="4 位码每个占一个 int8 字节存放，而不是打包",
    ),
]
