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
    ),
    Mutant(
        "nf4_code_book",
        "not_normalised",
        "leaves the levels in standard deviations (from -1.848 to 1.848) instead of dividing by the largest",
        [("return (levels / levels.max()).to(torch.float32)", "return levels.to(torch.float32)")],
    ),
    Mutant(
        "nf4_code_book",
        "no_validation",
        "accepts offset = 1 (an infinite outermost quantile)",
        [("if not 0.5 < offset < 1:", "if not 0.5 < offset <= 1:")],
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
    ),
    Mutant(
        "quantize_nf4",
        "zero_block_divides_by_zero",
        "divides an all-zero block by its absmax of 0",
        [("scale = torch.where(absmax > 0, absmax, torch.ones_like(absmax))", "scale = absmax")],
    ),
    Mutant(
        "quantize_nf4",
        "nibbles_swapped",
        "puts the first code of each pair in the low nibble",
        [("packed = (codes[0::2] << 4 | codes[1::2])", "packed = (codes[1::2] << 4 | codes[0::2])")],
    ),
    Mutant(
        "quantize_nf4",
        "finite_not_checked",
        "quantises inf/NaN weights instead of refusing them",
        [("if not bool(torch.isfinite(flat).all()):", "if False:")],
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
    ),
    Mutant(
        "dequantize_nf4",
        "wrong_block_index",
        "maps value i to block i % num_blocks instead of i // block_size",
        [("block_of = torch.arange(n) // block_size", "block_of = torch.arange(n) % absmax.numel()")],
    ),
    Mutant(
        "dequantize_nf4",
        "codes_as_values",
        "scales the code index instead of the NF4 level (a uniform grid)",
        [("return (NF4[codes] * absmax", "return ((codes.float() - 7) / 8 * absmax")],
    ),
    Mutant(
        "double_quant",
        "no_centring",
        "quantises the absmax values without subtracting their mean",
        [("offset = values.mean()", "offset = values.mean() * 0")],
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
    ),
    Mutant(
        "bytes_per_parameter",
        "a_byte_per_code",
        "counts one byte per 4-bit code",
        [("codes = 0.5  # 4 bits", "codes = 1.0  # 4 bits")],
    ),
    Mutant(
        "bytes_per_parameter",
        "absmax_as_one_byte",
        "counts the fp32 absmax as one byte per block without double quantisation",
        [("return codes + 4 / block_size", "return codes + 1 / block_size")],
    ),
]
