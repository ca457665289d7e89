"""Realistic wrong versions of the p02.qlora_nf4 solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "nf4_code_book",
        "symmetric_without_zero",
        "takes 8 quantiles on each side (symmetric) and drops the zero",
        [
            (
                "negative = -torch.special.ndtri(torch.linspace(offset, 0.5, 8, dtype=torch.float64)[:-1])",
                "negative = -torch.special.ndtri(torch.linspace(offset, 0.5, 9, dtype=torch.float64)[:-1])",
            ),
            (
                "levels = torch.cat([negative, torch.zeros(1, dtype=torch.float64), positive]).sort().values",
                "levels = torch.cat([negative, positive]).sort().values",
            ),
        ],
        mistake_zh="两侧各取 8 个分位点（对称），丢掉了零",
    ),
    Mutant(
        "nf4_code_book",
        "linspace_keeps_the_median",
        "keeps the last point of linspace (p = 0.5, a second zero) and drops the outermost quantile",
        [
            (
                "positive = torch.special.ndtri(torch.linspace(offset, 0.5, 9, dtype=torch.float64)[:-1])",
                "positive = torch.special.ndtri(torch.linspace(offset, 0.5, 9, dtype=torch.float64)[1:])",
            )
        ],
        mistake_zh="保留 linspace 的最后一个点（p = 0.5，又一个零），丢掉了最外侧的分位点",
    ),
    Mutant(
        "nf4_code_book",
        "not_normalised",
        "leaves the levels in standard deviations (from -1.848 to 1.848) instead of dividing by the largest",
        [("return (levels / levels.max()).to(torch.float32)", "return levels.to(torch.float32)")],
        mistake_zh="量化级仍以标准差为单位（从 -1.848 到 1.848），没有除以最大值",
    ),
    Mutant(
        "nf4_code_book",
        "no_validation",
        "accepts offset = 1 (an infinite outermost quantile)",
        [("if not 0.5 < offset < 1:", "if not 0.5 < offset <= 1:")],
        mistake_zh="接受 offset = 1（最外侧分位点为无穷大）",
    ),
    Mutant(
        "quantize_nf4",
        "tensor_absmax",
        "scales by the absmax of the whole tensor instead of each block",
        [
            (
                "absmax = blocks.abs().amax(dim=1)  # (blocks,)",
                "absmax = blocks.abs().amax().expand(num_blocks)  # (blocks,)",
            )
        ],
        mistake_zh="按整个张量的 absmax 而不是每个块的缩放",
    ),
    Mutant(
        "quantize_nf4",
        "truncates_to_lower_level",
        "takes the level just below the value (searchsorted) instead of the nearest one",
        [
            (
                "codes = (normalised[..., None] - NF4).abs().argmin(dim=-1).reshape(-1)[:n]",
                "codes = (torch.searchsorted(NF4, normalised.contiguous(), right=True) - 1).clamp(0, 15).reshape(-1)[:n]",
            )
        ],
        mistake_zh="取刚好低于该值的量化级（searchsorted），而不是最近的",
    ),
    Mutant(
        "quantize_nf4",
        "zero_block_divides_by_zero",
        "divides an all-zero block by its absmax of 0",
        [("scale = torch.where(absmax > 0, absmax, torch.ones_like(absmax))", "scale = absmax")],
        mistake_zh="全零的块除以它为 0 的 absmax",
    ),
    Mutant(
        "quantize_nf4",
        "nibbles_swapped",
        "puts the first code of each pair in the low nibble",
        [("packed = (codes[0::2] << 4 | codes[1::2])", "packed = (codes[1::2] << 4 | codes[0::2])")],
        mistake_zh="每对中的第一个码放在低 4 位",
    ),
    Mutant(
        "quantize_nf4",
        "finite_not_checked",
        "quantises inf/NaN weights instead of refusing them",
        [("if not bool(torch.isfinite(flat).all()):", "if False:")],
        mistake_zh="量化 inf/NaN 权重而不是拒绝它们",
    ),
    Mutant(
        "dequantize_nf4",
        "nibbles_swapped",
        "reads the low nibble first",
        [
            (
                "codes = torch.stack([packed >> 4, packed & 0xF], dim=1)",
                "codes = torch.stack([packed & 0xF, packed >> 4], dim=1)",
            )
        ],
        mistake_zh="先读低 4 位",
    ),
    Mutant(
        "dequantize_nf4",
        "wrong_block_index",
        "maps value i to block i % num_blocks instead of i // block_size",
        [("block_of = torch.arange(n) // block_size", "block_of = torch.arange(n) % absmax.numel()")],
        mistake_zh="把第 i 个值映射到块 i % num_blocks，而不是 i // block_size",
    ),
    Mutant(
        "dequantize_nf4",
        "codes_as_values",
        "scales the code index instead of the NF4 level (a uniform grid)",
        [("return (NF4[codes] * absmax", "return ((codes.float() - 7) / 8 * absmax")],
        mistake_zh="缩放的是码的下标而不是 NF4 量化级（成了均匀网格）",
    ),
    Mutant(
        "double_quant",
        "no_centring",
        "quantises the absmax values without subtracting their mean",
        [("offset = values.mean()", "offset = values.mean() * 0")],
        mistake_zh="量化 absmax 值之前没有减去它们的均值",
    ),
    Mutant(
        "double_quant",
        "int8_instead_of_fp8",
        "rounds to a uniform int8 grid (scale = max / 127) instead of fp8",
        [
            (
                "codes = (blocks / scales[:, None]).to(FP8).view(torch.uint8).reshape(-1)[:m]",
                "codes = ((blocks / scales[:, None] / FP8_MAX * 127).round() * FP8_MAX / 127).to(FP8).view(torch.uint8).reshape(-1)[:m]",
            )
        ],
        mistake_zh="舍入到均匀的 int8 网格（scale = max / 127），而不是 fp8",
    ),
    Mutant(
        "double_quant",
        "one_scale_for_all",
        "uses one scale for every block (the maximum over the whole tensor)",
        [
            (
                "block_max = blocks.abs().amax(dim=1)  # (blocks,)",
                "block_max = blocks.abs().amax().expand(num_blocks)  # (blocks,)",
            )
        ],
        mistake_zh="所有块共用一个 scale（整个张量上的最大值）",
    ),
    Mutant(
        "double_quant",
        "offset_not_added_back",
        "forgets to add the offset when dequantising",
        [
            (
                "return codes.view(FP8).to(torch.float32) * scales[block_of] + offset",
                "return codes.view(FP8).to(torch.float32) * scales[block_of]",
            )
        ],
        mistake_zh="反量化时忘了把偏移加回来",
    ),
    Mutant(
        "bytes_per_parameter",
        "a_byte_per_code",
        "counts one byte per 4-bit code",
        [("codes = 0.5  # 4 bits", "codes = 1.0  # 4 bits")],
        mistake_zh="每个 4 位码按一个字节计",
    ),
    Mutant(
        "bytes_per_parameter",
        "absmax_as_one_byte",
        "counts the fp32 absmax as one byte per block without double quantisation",
        [("return codes + 4 / block_size", "return codes + 1 / block_size")],
        mistake_zh="没有双重量化时，把 fp32 的 absmax 按每块一个字节计",
    ),
]
