"""Checks for p02.qlora_nf4. References: the published NF4 table (bitsandbytes `functional.py`, get_4bit_type("nf4");
QLoRA, Dettmers et al. 2023, appendix E); the normal quantile function written as sqrt(2) * erfinv(2p - 1) in float64
for other offsets; a float64 spec of the quantiser that compares against the midpoints between levels (as
bitsandbytes' dQuantizeNF4 does) and packs with integer arithmetic; torch's float8_e4m3fn cast for the double
quantisation, with the e4m3 rounding bound; and the paper's bit counts (4.5 and 4.127 bits per parameter)."""

import math

import torch

from llm_algo.check import (
    Checks,
    describe,
    expect,
    expect_close,
    expect_tensor,
    expect_value_error,
)

checks = Checks("p02.qlora_nf4")
checks.restrict(
    "nf4_code_book",
    forbid=["scipy", "bitsandbytes"],
    instead="use torch.special.ndtri (or erfinv) for the normal quantile",
)
checks.restrict(
    "quantize_nf4",
    "dequantize_nf4",
    "double_quant",
    forbid=["bitsandbytes"],
    instead="write the blockwise quantiser yourself (bitsandbytes is what it reproduces)",
)

PUBLISHED_NF4 = torch.tensor(
    [
        -1.0,
        -0.6961928009986877,
        -0.5250730514526367,
        -0.39491748809814453,
        -0.28444138169288635,
        -0.18477343022823334,
        -0.09105003625154495,
        0.0,
        0.07958029955625534,
        0.16093020141124725,
        0.24611230194568634,
        0.33791524171829224,
        0.44070982933044434,
        0.5626170039176941,
        0.7229568362236023,
        1.0,
    ],
    dtype=torch.float64,
)


def quantile_code_book(offset: float) -> torch.Tensor:
    """NF4's construction with Phi^-1(p) = sqrt(2) erfinv(2p - 1), float64."""

    def phi_inverse(p: torch.Tensor) -> torch.Tensor:
        return math.sqrt(2) * torch.erfinv(2 * p - 1)

    positive = [phi_inverse(torch.tensor(offset + i * (0.5 - offset) / 8, dtype=torch.float64)) for i in range(8)]
    negative = [-phi_inverse(torch.tensor(offset + j * (0.5 - offset) / 7, dtype=torch.float64)) for j in range(7)]
    levels = sorted(float(v) for v in positive + negative + [torch.tensor(0.0)])
    top = max(levels)
    return torch.tensor([v / top for v in levels], dtype=torch.float64)


def spec_codes(values: torch.Tensor, block_size: int) -> tuple[list[int], list[float]]:
    """Nearest NF4 index per value by midpoint thresholds, per block, float64; returns (codes, absmax)."""
    flat = values.reshape(-1).double()
    levels = PUBLISHED_NF4.float().double()  # the table the exercise uses (float32 values)
    midpoints = (levels[1:] + levels[:-1]) / 2
    codes, absmaxes = [], []
    for start in range(0, flat.numel(), block_size):
        block = flat[start : start + block_size]
        absmax = float(block.abs().max().float())
        absmaxes.append(absmax)
        for value in block.tolist():
            x = value / absmax if absmax > 0 else 0.0
            codes.append(int((midpoints < x).sum()))
    return codes, absmaxes


def spec_pack(codes: list[int]) -> list[int]:
    padded = codes + [0] * (len(codes) % 2)
    return [16 * padded[i] + padded[i + 1] for i in range(0, len(padded), 2)]


def spec_unpack(packed: torch.Tensor, n: int) -> list[int]:
    codes = []
    for byte in packed.tolist():
        codes += [byte // 16, byte % 16]
    return codes[:n]


# ------------------------------------------------------------------------------------------ nf4_code_book


@checks("nf4_code_book")
def equals_the_published_table(ex):
    """the default offset gives bitsandbytes' / QLoRA's published NF4 table"""
    got = ex.nf4_code_book()
    expect_tensor(got, shape=(16,), dtype=torch.float32, input="nf4_code_book()", hint="16 float32 values")
    expect_close(
        got,
        PUBLISHED_NF4,
        input="nf4_code_book() (offset 0.9677083)",
        dtype=torch.float32,
        what="code book",
        hint="8 quantiles at linspace(offset, 0.5, 9)[:-1], 7 negated at linspace(offset, 0.5, 8)[:-1], 0; sort; "
        "divide by the max",
    )


@checks("nf4_code_book")
def follows_the_quantile_construction(ex):
    """other offsets (0.99, 0.95, 0.9) against the construction with erfinv, float64"""
    for offset in (0.99, 0.95, 0.9):
        expect_close(
            ex.nf4_code_book(offset),
            quantile_code_book(offset),
            input=f"nf4_code_book({offset})",
            dtype=torch.float32,
            what="code book",
            hint="build it from the normal quantile function (torch.special.ndtri), not from a copied table",
        )


@checks("nf4_code_book")
def structure_of_the_code_book(ex):
    """sorted, from -1 to 1, exactly one zero at index 7, 7 negative and 8 positive values"""
    book = ex.nf4_code_book(0.97)
    case = "nf4_code_book(0.97)"
    expect(
        bool((book[1:] > book[:-1]).all()) and float(book[0]) == -1.0 and float(book[-1]) == 1.0,
        "the code book is not sorted from -1 to 1",
        input=case,
        expected="strictly increasing, book[0] = -1, book[15] = 1",
        got=str(book.tolist()),
        hint="sort the 16 levels and divide by the largest (the first positive quantile)",
    )
    expect(
        int((book == 0).sum()) == 1 and float(book[7]) == 0.0 and int((book < 0).sum()) == 7,
        "zero must be a level (index 7) with 7 negative and 8 positive levels",
        input=case,
        expected="book[7] == 0 exactly; 7 below, 8 above",
        got=str(book.tolist()),
        hint="NF4 is asymmetric so that 0 is exact: 8 positive quantiles, 7 negative, and 0",
    )


@checks("nf4_code_book")
def refuses_bad_offsets(ex):
    """offsets 0.5, 1.0 and 0.3: ValueError"""
    for offset in (0.5, 1.0, 0.3):
        expect_value_error(
            lambda offset=offset: ex.nf4_code_book(offset),
            input=f"nf4_code_book({offset})",
            hint="the outermost quantile needs 0.5 < offset < 1 (Phi^-1(1) is infinite)",
        )


# ------------------------------------------------------------------------------------------ quantize_nf4

QUANT_HINT = (
    "per block: absmax = max |w|; code = index of the NF4 level nearest to w / absmax (7 in an all-zero block); "
    "byte = 16 * first code + second code"
)


def expect_quantized(ex, weight: torch.Tensor, block_size: int, case: str) -> None:
    got = ex.quantize_nf4(weight, block_size)
    expect(
        isinstance(got, tuple) and len(got) == 2,
        "quantize_nf4 must return (packed, absmax)",
        input=case,
        expected="a tuple of 2 tensors",
        got=type(got).__name__,
    )
    packed, absmax = got
    codes, want_absmax = spec_codes(weight, block_size)
    n = weight.numel()
    expect_tensor(absmax, shape=(math.ceil(n / block_size),), dtype=torch.float32, input=case, what="absmax")
    expect_close(absmax, torch.tensor(want_absmax, dtype=torch.float64), input=case, what="absmax", hint=QUANT_HINT)
    expect_tensor(packed, shape=(math.ceil(n / 2),), dtype=torch.uint8, input=case, what="packed", hint=QUANT_HINT)
    got_codes = spec_unpack(packed, n)
    wrong = [i for i, (a, b) in enumerate(zip(got_codes, codes, strict=True)) if a != b]
    expect(
        not wrong and packed.tolist() == spec_pack(codes),
        f"{len(wrong)} codes differ from the nearest NF4 level" if wrong else "the packed bytes are wrong",
        input=case,
        expected=f"codes {codes[:16]}... bytes {spec_pack(codes)[:8]}...",
        got=f"codes {got_codes[:16]}... bytes {packed.tolist()[:8]}... (first wrong code at {wrong[:5]})",
        hint=QUANT_HINT,
    )


@checks("quantize_nf4")
def quantizes_like_the_threshold_spec(ex):
    """random weights (float32, bfloat16, float16), sizes that are not block multiples, odd n, blocks of 64 and 16"""
    cases = [
        (torch.randn(4, 64) * 0.02, 64),
        (torch.randn(3, 45).to(torch.bfloat16), 64),
        (torch.randn(129).to(torch.float16) * 3, 64),
        (torch.randn(5, 7), 16),
        (torch.randn(9), 1),  # every value its own block: codes 0, 15 (or 7 for a zero)
    ]
    for weight, block_size in cases:
        expect_quantized(ex, weight, block_size, f"quantize_nf4(weight {describe(weight=weight)}, {block_size})")


@checks("quantize_nf4")
def zero_blocks_and_exact_levels(ex):
    """an all-zero block stores code 7 and absmax 0; values on the levels themselves round-trip to their index"""
    levels = PUBLISHED_NF4.float()
    block = torch.cat([levels[torch.randperm(16)] * 2.5 for _ in range(4)])  # 64 values on the levels, absmax 2.5
    weight = torch.cat([torch.zeros(64), block, torch.randn(10)])
    case = "weight: 64 zeros, then 64 values on NF4 levels times 2.5, then 10 random values (block 64)"
    expect_quantized(ex, weight, 64, case)
    packed, absmax = ex.quantize_nf4(weight, 64)
    expect(
        bool(torch.isfinite(absmax).all()) and float(absmax[0]) == 0.0 and set(spec_unpack(packed, 64)) == {7},
        "an all-zero block must store absmax 0 and code 7 (zero)",
        input=case,
        expected="absmax[0] = 0, codes 7",
        got=f"absmax[0] = {float(absmax[0])}, codes {sorted(set(spec_unpack(packed, 64)))}",
        hint="guard the division: an all-zero block has absmax 0",
    )


@checks("quantize_nf4")
def quantize_nf4_refuses_bad_input(ex):
    """an integer or empty weight, inf or NaN values, block_size 0: ValueError"""
    cases = [
        ((torch.arange(10),), "an int64 weight"),
        ((torch.zeros(0),), "an empty weight"),
        ((torch.tensor([1.0, float("inf")]),), "an inf"),
        ((torch.tensor([1.0, float("nan"), 2.0]),), "a NaN"),
        ((torch.randn(8), 0), "block_size=0"),
    ]
    for args, why in cases:
        expect_value_error(
            lambda args=args: ex.quantize_nf4(*args),
            input=f"quantize_nf4 with {why}",
            hint="validate: non-empty finite floating weights, block_size >= 1",
        )


# ------------------------------------------------------------------------------------------ dequantize_nf4

DEQUANT_HINT = "codes: high nibble (byte >> 4) first, then byte & 0xF; value = NF4[code] * absmax[i // block_size]"


def spec_dequantize(packed: torch.Tensor, absmax: torch.Tensor, n: int, block_size: int) -> torch.Tensor:
    codes = spec_unpack(packed, n)
    levels = PUBLISHED_NF4.float().double()
    return torch.tensor([float(levels[c]) * float(absmax[i // block_size]) for i, c in enumerate(codes)])


@checks("dequantize_nf4")
def dequantizes_like_the_spec(ex):
    """random bytes and scales (float32, float64, float16), shapes (3, 45), (129,) (odd), (5, 7), blocks 64, 16, 1"""
    for shape, block_size, dtype in (
        ((3, 45), 64, torch.float32),
        ((129,), 64, torch.float64),
        ((5, 7), 16, torch.float16),
        ((3, 3), 1, torch.float32),
    ):
        n = math.prod(shape)
        packed = torch.randint(0, 256, (math.ceil(n / 2),), dtype=torch.uint8)
        absmax = (torch.rand(math.ceil(n / block_size)) * 3).to(dtype)
        got = ex.dequantize_nf4(packed, absmax, shape, block_size)
        case = (
            f"dequantize_nf4(packed {describe(packed=packed)}, absmax {describe(absmax=absmax)}, {shape}, {block_size})"
        )
        expect_tensor(got, shape=shape, dtype=torch.float32, input=case, hint=DEQUANT_HINT)
        expect_close(got.reshape(-1), spec_dequantize(packed, absmax, n, block_size), input=case, hint=DEQUANT_HINT)


@checks("dequantize_nf4")
def round_trip_error_is_bounded(ex):
    """dequantised weights lie within 0.1519 * absmax of the originals, and exact levels come back exactly"""
    weight = torch.randn(6, 50) * 0.05
    codes, absmax = spec_codes(weight, 64)
    packed = torch.tensor(spec_pack(codes), dtype=torch.uint8)
    absmax_t = torch.tensor(absmax, dtype=torch.float32)
    got = ex.dequantize_nf4(packed, absmax_t, weight.shape, 64)
    bound = 0.5 * (1 - 0.6961928009986877) * absmax_t[torch.arange(300) // 64].view(6, 50)
    worst = float(((got - weight).abs() - bound).max())
    expect(
        worst <= 1e-6,
        "the round trip error exceeds half the widest NF4 gap times absmax",
        input=f"weight {describe(weight=weight)} quantised by the checks' spec, block 64",
        expected="|w - w_hat| <= 0.1519 * absmax (half the gap from -1 to -0.6962)",
        got=f"exceeded by {worst:.3g}",
        hint=DEQUANT_HINT,
    )


@checks("dequantize_nf4")
def dequantize_nf4_refuses_bad_input(ex):
    """packed of the wrong size or dtype, absmax of the wrong size: ValueError"""
    packed = torch.randint(0, 256, (50,), dtype=torch.uint8)
    absmax = torch.rand(2)
    cases = [
        ((packed[:49], absmax, (100,)), "49 bytes for 100 values"),
        ((packed.to(torch.int32), absmax, (100,)), "int32 packed"),
        ((packed, torch.rand(3), (100,)), "3 absmax values for 2 blocks of 64"),
        ((packed, absmax, (100,), 0), "block_size=0"),
    ]
    for args, why in cases:
        expect_value_error(
            lambda args=args: ex.dequantize_nf4(*args),
            input=f"dequantize_nf4 with {why}",
            hint="check the sizes that the shape implies: ceil(n / 2) bytes, ceil(n / block_size) scales",
        )


# ------------------------------------------------------------------------------------------ double_quant

DQ_HINT = (
    "offset = mean(absmax); per block of 256 centred values: scale = max|c| / 448 (1 if all zero), codes = "
    "(c / scale).to(float8_e4m3fn).view(uint8); back: codes.view(float8_e4m3fn).float() * scale + offset"
)


def unpack_dq(got, case: str):
    expect(
        isinstance(got, tuple) and len(got) == 3,
        "double_quantize must return (codes, scales, offset)",
        input=case,
        expected="a tuple of 3 tensors",
        got=type(got).__name__,
    )
    return got


@checks("double_quant")
def scales_offset_and_codes(ex):
    """600 absmax values (3 blocks, the last partial): offset, scales and the fp8 codes of the centred values"""
    absmax = torch.rand(600) * 0.1 + 0.01
    absmax[256:512] *= 4  # one block with a wider spread: each block needs its own scale
    case = f"double_quantize(absmax {describe(absmax=absmax)}, 256), the second block 4x wider"
    codes, scales, offset = unpack_dq(ex.double_quantize(absmax.double(), 256), case + " given in float64")
    expect_tensor(offset, shape=(), dtype=torch.float32, input=case, what="offset", hint="a 0-d float32 offset")
    mean = absmax.double().mean()
    expect_close(offset, mean, input=case, dtype=torch.float32, what="offset", hint=DQ_HINT)
    centred = absmax.double() - mean
    want_scales = torch.stack([centred[i : i + 256].abs().max() / 448 for i in range(0, 600, 256)])
    expect_tensor(scales, shape=(3,), dtype=torch.float32, input=case, what="scales", hint=DQ_HINT)
    expect_close(scales, want_scales, input=case, dtype=torch.float32, what="scales", hint=DQ_HINT)
    expect_tensor(codes, shape=(600,), dtype=torch.uint8, input=case, what="codes", hint=DQ_HINT)
    want_codes = (
        ((absmax - offset) / scales[torch.arange(600) // 256]).to(torch.float8_e4m3fn).view(torch.uint8)
    )  # from the learner's own offset and scales: exact
    mismatched = int((codes != want_codes).sum())
    expect(
        mismatched == 0,
        f"{mismatched} codes are not the fp8 rounding of (absmax - offset) / scale",
        input=case,
        expected=str(want_codes[:12].tolist()),
        got=str(codes[:12].tolist()),
        hint=DQ_HINT,
    )


@checks("double_quant")
def round_trip_within_fp8_rounding(ex):
    """double_dequantize(double_quantize(a)) is within e4m3's rounding of a; a constant block comes back exactly"""
    absmax = torch.cat([torch.rand(300).pow(3) * 0.5, torch.full((256,), 0.25)])  # skewed, then a block of ties
    case = f"absmax {describe(absmax=absmax)}: 300 skewed values, then 256 equal ones"
    codes, scales, offset = unpack_dq(ex.double_quantize(absmax, 256), case)
    got = ex.double_dequantize(codes, scales, offset, 256)
    expect_tensor(got, shape=(556,), dtype=torch.float32, input=case, hint=DQ_HINT)
    centred = (absmax - absmax.mean()).double()
    scale_of = scales.double()[torch.arange(556) // 256]
    bound = centred.abs() / 16 + scale_of / 1024 + 1e-6  # e4m3: 3 mantissa bits; subnormal step 2^-9
    worst = float(((got.double() - absmax.double()).abs() - bound).max())
    constant = torch.full((300,), 0.5)
    c_codes, c_scales, c_offset = unpack_dq(ex.double_quantize(constant, 256), "300 equal absmax values")
    back = ex.double_dequantize(c_codes, c_scales, c_offset, 256)
    expect(
        bool(torch.isfinite(c_scales).all()) and torch.equal(back, constant),
        "equal absmax values (every centred value 0) do not come back exactly",
        input="double_quantize(torch.full((300,), 0.5), 256)",
        expected="scales 1 (nothing to scale), codes 0, the values back exactly",
        got=f"scales {c_scales.tolist()}, back {back[:4].tolist()}...",
        hint="an all-zero block has max 0: use a scale of 1 instead of dividing by zero",
    )
    one = ex.double_dequantize(*ex.double_quantize(absmax[:5], 1), 1)
    expect_close(
        one,
        absmax[:5].double(),
        input="double_quantize(absmax[:5], block_size=1) and back",
        dtype=torch.float32,
        hint="block_size 1 is valid: each centred value is its block's max, so it maps to +-448 exactly",
    )
    expect(
        worst <= 0,
        "the round trip error exceeds fp8 e4m3's rounding",
        input=case,
        expected="|a_hat - a| <= |a - mean| / 16 + scale / 1024",
        got=f"exceeded by {worst:.3g}",
        hint=DQ_HINT + " (subtract the mean first: the 8-bit range is symmetric)",
    )


@checks("double_quant")
def double_dequantize_like_the_spec(ex):
    """random fp8 codes (finite), scales and offset, against codes.view(float8_e4m3fn) * scale + offset"""
    m = 300
    values = torch.randn(m) * 100
    codes = values.to(torch.float8_e4m3fn).view(torch.uint8)
    scales = torch.rand(2) * 0.01
    offset = torch.tensor(0.37)
    got = ex.double_dequantize(codes, scales, offset, 256)
    want = codes.view(torch.float8_e4m3fn).double() * scales.double()[torch.arange(m) // 256] + 0.37
    case = f"codes {describe(codes=codes)}, scales (2,), offset 0.37, block 256"
    expect_close(got, want, input=case, dtype=torch.float32, hint=DQ_HINT)


@checks("double_quant")
def double_quant_refuses_bad_input(ex):
    """an empty or 2-D absmax, block_size 0; codes of the wrong dtype or scales of the wrong size: ValueError"""
    cases = [
        (lambda: ex.double_quantize(torch.zeros(0)), "double_quantize of an empty absmax"),
        (lambda: ex.double_quantize(torch.rand(4, 4)), "double_quantize of a (4, 4) absmax"),
        (lambda: ex.double_quantize(torch.rand(10), 0), "double_quantize with block_size=0"),
        (
            lambda: ex.double_dequantize(torch.zeros(10, dtype=torch.int8), torch.ones(1), torch.tensor(0.0)),
            "double_dequantize of int8 codes",
        ),
        (
            lambda: ex.double_dequantize(torch.zeros(300, dtype=torch.uint8), torch.ones(1), torch.tensor(0.0)),
            "300 codes with 1 scale (block 256)",
        ),
        (
            lambda: ex.double_dequantize(torch.zeros(3, dtype=torch.uint8), torch.ones(1), torch.tensor(0.0), 0),
            "double_dequantize with block_size=0",
        ),
    ]
    for call, why in cases:
        expect_value_error(call, input=why, hint="validate the shapes, the dtype of the codes and the block size")


# ------------------------------------------------------------------------------------------ bytes_per_parameter


@checks("bytes_per_parameter")
def paper_bit_counts(ex):
    """QLoRA's numbers: 4.5 bits per parameter with fp32 absmax over 64, 4.127 bits with double quantisation"""
    for kwargs, want, words in (
        ({}, 0.5 + 4 / 64, "4 + 32/64 = 4.5 bits"),
        ({"double_quant": True}, 0.5 + 1 / 64 + 4 / (64 * 256), "4 + 8/64 + 32/(64*256) = 4.127 bits"),
        ({"block_size": 128}, 0.5 + 4 / 128, "4 + 32/128 bits"),
        ({"block_size": 32, "double_quant": True, "dq_block_size": 128}, 0.5 + 1 / 32 + 4 / (32 * 128), "block 32/128"),
        ({"block_size": 1}, 4.5, "a scale per weight: 4 + 32 bits"),
        ({"block_size": 1, "double_quant": True, "dq_block_size": 1}, 5.5, "4 + 8 + 32 bits"),
    ):
        got = ex.bytes_per_parameter(**kwargs)
        expect_close(
            torch.tensor(float(got), dtype=torch.float64),
            torch.tensor(want, dtype=torch.float64),
            input=f"bytes_per_parameter({kwargs})",
            what="bytes per parameter",
            hint=f"{words}; divide bits by 8",
        )


@checks("bytes_per_parameter")
def matches_the_bytes_quantize_stores(ex):
    """for 64 x 4096 weights, the formula equals the bytes of packed codes + fp32 absmax (no double quant)"""
    n = 64 * 4096
    stored = math.ceil(n / 2) + 4 * math.ceil(n / 64)  # what quantize_nf4 returns, in bytes
    got = ex.bytes_per_parameter(64)
    expect(
        abs(got * n - stored) < 1e-6 * n,
        "the bytes per parameter disagree with the stored tensors",
        input=f"{n} weights, block 64",
        expected=f"{stored / n} (= ({math.ceil(n / 2)} code bytes + {4 * math.ceil(n / 64)} absmax bytes) / {n})",
        got=str(got),
        hint="two codes per byte; one float32 (4 bytes) per block",
    )


@checks("bytes_per_parameter")
def refuses_bad_block_sizes(ex):
    """block sizes of 0 or below: ValueError"""
    for kwargs in ({"block_size": 0}, {"double_quant": True, "dq_block_size": 0}, {"block_size": -64}):
        expect_value_error(
            lambda kwargs=kwargs: ex.bytes_per_parameter(**kwargs),
            input=f"bytes_per_parameter({kwargs})",
            hint="block sizes must be >= 1",
        )
