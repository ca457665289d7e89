"""Checks for p01.number_formats. References: `torch.finfo`; an enumeration of every code of small formats decoded
by a float64 loop spec written here; PyTorch's dtype casts (`torch.bfloat16`, `torch.float8_e4m3fn`,
`torch.float8_e5m2`, with `torch.clamp` before the cast for saturation), compared bit for bit over every 8- and
16-bit pattern, the neighbours and midpoints of every representable value, and random float32 bit patterns.

The encoders and decoders must do the rounding themselves: while the learner's function runs, a
`TorchFunctionMode` (`NarrowFloatWatch`) refuses every torch call that takes or returns a BF16, FP16 or FP8 tensor
(or asks for such a dtype), so no spelling of a cast (`.to`, `.view`, `.type`, `copy_`, an in-place op on a
narrow buffer) gets through."""

import math
from contextlib import contextmanager

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from llm_algo.check import Checks, describe, expect, expect_close, expect_tensor

checks = Checks("p01.number_formats")
checks.restrict(
    "bf16_codec",
    "fp8_decode",
    "fp8_encode",
    forbid=(torch.Tensor.bfloat16, torch.Tensor.half),
    instead="round with integer operations on x.view(torch.int32) (torch's casts are the checks' reference)",
)

NARROW = (torch.bfloat16, torch.float16, torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz)
FP8_DTYPES = {"e4m3fn": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
FP8_MAX = {"e4m3fn": 448.0, "e5m2": 57344.0}


# ------------------------------------------------------------------------------------------ the narrow-dtype watch


class NarrowFloatWatch(TorchFunctionMode):
    """Records the first torch call that touches a BF16/FP16/FP8 tensor or dtype, and refuses it."""

    def __init__(self):
        super().__init__()
        self.found = ""

    def _narrow(self, values) -> str:
        for value in tree_flatten(values)[0]:
            if isinstance(value, torch.Tensor) and value.dtype in NARROW:
                return str(value.dtype)
            if isinstance(value, torch.dtype) and value in NARROW:
                return str(value)
        return ""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        seen = self._narrow((args, kwargs))
        result = func(*args, **kwargs)
        seen = seen or self._narrow(result)
        if seen and not self.found:
            self.found = f"{getattr(func, '__qualname__', getattr(func, '__name__', str(func)))} with {seen}"
        if seen:
            raise TypeError(f"this exercise does the rounding itself: no {seen} tensor may appear ({self.found})")
        return result


@contextmanager
def no_narrow_floats(label: str):
    """Run the learner's code with casts to narrow float dtypes refused; fail the check if one was tried."""
    watch = NarrowFloatWatch()
    try:
        with watch:
            yield
    except TypeError:
        if not watch.found:
            raise
    expect(
        not watch.found,
        "your code made a BF16/FP16/FP8 tensor: the exercise is to round with integer operations",
        input=label,
        expected="only float32/int tensors while your function runs",
        got=f"a call to {watch.found}",
        hint="take x.view(torch.int32) and work on the bits; build outputs with integer ops and .to(torch.uint8/int16)",
    )


def call(label: str, fn, *args, **kwargs):
    with no_narrow_floats(label):
        return fn(*args, **kwargs)


# ------------------------------------------------------------------------------------------ bit helpers


def float32_from_bits(bits: torch.Tensor) -> torch.Tensor:
    return bits.to(torch.int32).view(torch.float32)


def all_int16_patterns() -> torch.Tensor:
    return torch.arange(-(1 << 15), 1 << 15, dtype=torch.int32).to(torch.int16)


def all_uint8_codes() -> torch.Tensor:
    return torch.arange(256, dtype=torch.int32).to(torch.uint8)


def hex_of(value: int, width: int) -> str:
    return f"0x{value & ((1 << (4 * width)) - 1):0{width}X}"


def first_difference(x: torch.Tensor, got: torch.Tensor, want: torch.Tensor, width: int) -> str:
    """One line for the first input where two code tensors differ (and how many differ)."""
    wrong = (got.to(torch.int32) != want.to(torch.int32)).reshape(-1)
    index = int(wrong.nonzero()[0])
    value = x.reshape(-1)[index]
    bits = int(value.view(torch.int32)) if value.dtype == torch.float32 else int(value)
    return (
        f"{int(wrong.sum())} of {wrong.numel()} differ; first: x = {float(value):.9g} (bits {hex_of(bits, 8)}) -> "
        f"expected {hex_of(int(want.reshape(-1)[index]), width)}, got {hex_of(int(got.reshape(-1)[index]), width)}"
    )


def expect_codes(x, got, want, *, width: int, dtype, label: str, hint: str, allow_any_nan=None):
    """`got` has `want`'s shape and dtype and equals it bit for bit; where `allow_any_nan` (a mask) is set, any NaN
    code of the format is accepted instead."""
    expect_tensor(got, shape=want.shape, dtype=want.dtype, input=label, what="codes")
    same = got == want
    if allow_any_nan is not None:
        same = same | (allow_any_nan & got.view(dtype).float().isnan())
    if not bool(same.all()):
        mismatch = torch.where(same, want, got)  # differs exactly where `same` is False
        expect(
            False,
            "the codes differ from PyTorch's cast",
            input=label,
            expected="bit-for-bit equal codes",
            got=first_difference(x, mismatch, want, width),
            hint=hint,
        )


def midpoints_and_neighbours(values: torch.Tensor) -> torch.Tensor:
    """float32 inputs around a sorted set of finite values: each value, the midpoints between neighbours (ties), and
    one float32 ulp either side of every value and midpoint."""
    values = values.to(torch.float64)
    mids = (values[:-1] + values[1:]) / 2  # exact in float64, and in float32 for these formats
    points = torch.cat((values, mids)).to(torch.float32)
    bits = points.view(torch.int32)
    return torch.cat((points, float32_from_bits(bits + 1), float32_from_bits(bits - 1)))


def random_float32(n: int) -> torch.Tensor:
    """Uniformly random 32-bit patterns (every exponent, NaN and inf included) as float32."""
    return float32_from_bits(torch.randint(-(1 << 31), (1 << 31) - 1, (n,), dtype=torch.int64))


# ------------------------------------------------------------------------------------------ float_format_limits

LIMIT_KEYS = ("max", "smallest_normal", "smallest_subnormal", "eps")
HINT_LIMITS = (
    "bias = 2**(E-1) - 1; ieee: max = 2**(top-1) * (2 - 2**-M); fn: 2**top * (2 - 2**(1-M)); none: 2**top * (2 - 2**-M)"
    " with top = 2**E - 1 - bias; eps = 2**-M (the gap after 1)"
)


def expect_limits(got, want: dict, label: str) -> None:
    expect(
        isinstance(got, dict) and all(k in got for k in LIMIT_KEYS),
        "expected a dict with keys max, smallest_normal, smallest_subnormal, eps",
        input=label,
        expected=str(list(LIMIT_KEYS)),
        got=repr(got)[:200],
        hint="return {'max': ..., 'smallest_normal': ..., 'smallest_subnormal': ..., 'eps': ...}",
    )
    for key in LIMIT_KEYS:
        expect_close(
            torch.tensor(float(got[key]), dtype=torch.float64),
            torch.tensor(want[key], dtype=torch.float64),
            input=label,
            what=key,
            hint=HINT_LIMITS,
        )


def decode_by_loop(code: int, exponent_bits: int, mantissa_bits: int, special: str) -> float:
    """The value of one code, from the definition (a float64 spec, one code at a time)."""
    sign = -1.0 if code >> (exponent_bits + mantissa_bits) else 1.0
    e = (code >> mantissa_bits) % (1 << exponent_bits)
    m = code % (1 << mantissa_bits)
    bias = (1 << (exponent_bits - 1)) - 1
    if e == (1 << exponent_bits) - 1:
        if special == "ieee":
            return sign * math.inf if m == 0 else math.nan
        if special == "fn" and m == (1 << mantissa_bits) - 1:
            return math.nan
    if e == 0:
        return sign * math.ldexp(m, 1 - bias - mantissa_bits)
    return sign * math.ldexp((1 << mantissa_bits) + m, e - bias - mantissa_bits)


def limits_by_enumeration(exponent_bits: int, mantissa_bits: int, special: str) -> dict:
    positive = sorted(
        v
        for code in range(1 << (exponent_bits + mantissa_bits))
        if math.isfinite(v := decode_by_loop(code, exponent_bits, mantissa_bits, special)) and v > 0
    )
    smallest_normal = decode_by_loop(1 << mantissa_bits, exponent_bits, mantissa_bits, special)
    above_one = min(v for v in positive if v > 1.0)
    return {
        "max": positive[-1],
        "smallest_normal": smallest_normal,
        "smallest_subnormal": positive[0],
        "eps": above_one - 1,
    }


@checks("float_format_limits")
def published_formats_hand_checked(ex):
    """E4M3FN 448, E5M2 57344 (Micikevicius et al. 2022), OCP MX FP6/FP4 maxima 7.5, 28, 6"""
    cases = [
        ((4, 3, "fn"), {"max": 448.0, "smallest_normal": 2.0**-6, "smallest_subnormal": 2.0**-9, "eps": 0.125}),
        ((5, 2, "ieee"), {"max": 57344.0, "smallest_normal": 2.0**-14, "smallest_subnormal": 2.0**-16, "eps": 0.25}),
        ((2, 3, "none"), {"max": 7.5, "smallest_normal": 1.0, "smallest_subnormal": 0.125, "eps": 0.125}),
        ((3, 2, "none"), {"max": 28.0, "smallest_normal": 0.25, "smallest_subnormal": 0.0625, "eps": 0.25}),
        ((2, 1, "none"), {"max": 6.0, "smallest_normal": 1.0, "smallest_subnormal": 0.5, "eps": 0.5}),
    ]
    for args, want in cases:
        expect_limits(ex.float_format_limits(*args), want, f"float_format_limits{args}")


@checks("float_format_limits")
def matches_torch_finfo(ex):
    """float64, float32, float16, bfloat16, float8_e4m3fn, float8_e5m2 against torch.finfo and their bit patterns"""
    layouts = {
        torch.float64: (11, 52, "ieee", torch.int64),
        torch.float32: (8, 23, "ieee", torch.int32),
        torch.float16: (5, 10, "ieee", torch.int16),
        torch.bfloat16: (8, 7, "ieee", torch.int16),
        torch.float8_e4m3fn: (4, 3, "fn", torch.uint8),
        torch.float8_e5m2: (5, 2, "ieee", torch.uint8),
    }
    for dtype, (exponent_bits, mantissa_bits, special, int_dtype) in layouts.items():
        info = torch.finfo(dtype)
        tiniest = torch.ones(1, dtype=int_dtype).view(dtype).to(torch.float64).item()  # bit pattern 0...01
        want = {
            "max": info.max,
            "smallest_normal": info.smallest_normal,
            "smallest_subnormal": tiniest,
            "eps": info.eps,
        }
        got = ex.float_format_limits(exponent_bits, mantissa_bits, special)
        expect_limits(got, want, f"{dtype}: float_format_limits({exponent_bits}, {mantissa_bits}, {special!r})")


@checks("float_format_limits")
def matches_enumeration_of_every_code(ex):
    """formats up to 12 bits, all three conventions: equal to decoding every code one by one"""
    for exponent_bits, mantissa_bits in ((2, 1), (2, 4), (3, 3), (4, 2), (5, 5), (6, 1), (3, 8)):
        for special in ("ieee", "fn", "none"):
            want = limits_by_enumeration(exponent_bits, mantissa_bits, special)
            got = ex.float_format_limits(exponent_bits, mantissa_bits, special)
            expect_limits(got, want, f"float_format_limits({exponent_bits}, {mantissa_bits}, {special!r})")


@checks("float_format_limits")
def refuses_impossible_formats(ex):
    """an unknown convention, exponent_bits < 2 or mantissa_bits < 1 raise ValueError"""
    for args in ((4, 3, "ocp"), (1, 3, "ieee"), (4, 0, "fn"), (0, 0, "none"), (5, -1, "ieee")):
        try:
            result = ex.float_format_limits(*args)
        except ValueError:
            continue
        expect(
            False,
            "an impossible format was accepted",
            input=f"float_format_limits{args}",
            expected="ValueError",
            got=repr(result)[:120],
            hint="check special in ('ieee', 'fn', 'none'), exponent_bits >= 2 and mantissa_bits >= 1 first",
        )


# ------------------------------------------------------------------------------------------ bf16_codec

HINT_RNE = "bits + 0x7FFF + ((bits >> 16) & 1), then >> 16: ties go to the even neighbour, not away from zero"


@checks("bf16_codec")
def decode_every_bf16_pattern(ex):
    """bf16_decode of all 65536 patterns equals torch's bfloat16 -> float32 conversion, bit for bit (NaNs: a NaN)"""
    patterns = all_int16_patterns()
    label = "all 65536 int16 patterns"
    got = call(label, ex.bf16_decode, patterns)
    want = patterns.view(torch.bfloat16).float()
    expect_tensor(got, shape=want.shape, dtype=torch.float32, input=label)
    nan = want.isnan()
    same = (got.view(torch.int32) == want.view(torch.int32)) | (nan & got.isnan())
    if not bool(same.all()):
        index = int((~same).nonzero()[0])
        expect(
            False,
            "decoded values differ from torch's",
            input=label,
            expected=f"pattern {hex_of(int(patterns[index]), 4)} -> {float(want[index])!r}",
            got=f"{float(got[index])!r} ({int((~same).sum())} patterns differ)",
            hint="(bits.to(torch.int32) << 16).view(torch.float32): bf16 is the top half of a float32",
        )
    shaped = patterns[: 2 * 3 * 5].reshape(2, 3, 5)
    got = call("int16 (2, 3, 5)", ex.bf16_decode, shaped)
    expect_tensor(got, shape=(2, 3, 5), dtype=torch.float32, input="int16 (2, 3, 5)")


@checks("bf16_codec")
def encode_ties_and_neighbours(ex):
    """bf16_encode of every bf16 value, the exact ties between neighbours and one float32 ulp around them"""
    hand = torch.tensor(
        [1.0, 1 + 2**-8, 1 + 3 * 2**-8, 257.0, -257.0, 3.4028235e38, -0.0, 2**-133, math.inf, -math.inf]
    )
    want = hand.to(torch.bfloat16).view(torch.int16)
    label = "1, 1+2^-8, 1+3*2^-8, 257, -257, max float, -0, 2^-133, inf, -inf"
    got = call(label, ex.bf16_encode, hand)
    expect_codes(
        hand, got, want, width=4, dtype=torch.bfloat16, label=label, hint=HINT_RNE + "; inf stays inf (not NaN)"
    )
    finite = all_int16_patterns().view(torch.bfloat16).float()
    finite = finite[torch.isfinite(finite)].unique().sort().values  # every finite bf16 value, ascending
    x = midpoints_and_neighbours(finite)
    got = call("ties", ex.bf16_encode, x)
    want = x.to(torch.bfloat16).view(torch.int16)
    expect_codes(
        x,
        got,
        want,
        width=4,
        dtype=torch.bfloat16,
        label=f"{x.numel()} values: every bf16 value, midpoints, +-1 ulp",
        hint=HINT_RNE,
    )


@checks("bf16_codec")
def encode_random_bit_patterns(ex):
    """one million random float32 bit patterns (subnormals, inf, NaN included) and a (37, 129) normal tensor"""
    x = random_float32(1 << 20)
    label = describe(x=x) + " from random bit patterns"
    got = call(label, ex.bf16_encode, x)
    want = x.to(torch.bfloat16).view(torch.int16)
    expect_codes(x, got, want, width=4, dtype=torch.bfloat16, label=label, hint=HINT_RNE, allow_any_nan=x.isnan())
    y = torch.randn(37, 129) * 100
    got = call(describe(y=y), ex.bf16_encode, y)
    expect_codes(
        y,
        got,
        y.to(torch.bfloat16).view(torch.int16),
        width=4,
        dtype=torch.bfloat16,
        label=describe(x=y),
        hint=HINT_RNE,
    )


@checks("bf16_codec")
def encode_keeps_every_nan(ex):
    """every NaN (quiet, signalling, payload only in the low 16 bits, negative) encodes to a NaN pattern"""
    patterns = torch.tensor([0x7FC00000, 0x7F800001, 0x7F80FFFF, 0x7F808000, 0xFF800001, 0xFFFFFFFF, 0x7FFFFFFF])
    x = float32_from_bits(patterns)
    got = call("NaN patterns", ex.bf16_encode, x)
    expect_tensor(got, shape=x.shape, dtype=torch.int16, input="7 NaN patterns")
    decoded = got.view(torch.bfloat16).float()
    bad = ~decoded.isnan()
    expect(
        not bool(bad.any()),
        "a NaN input did not give a NaN pattern",
        input="float32 NaN patterns " + ", ".join(hex_of(int(p), 8) for p in patterns.tolist()),
        expected="exponent all ones, fraction non-zero",
        got=", ".join(
            f"{hex_of(int(p), 8)} -> {hex_of(int(g), 4)}" for p, g in zip(patterns[bad], got[bad], strict=True)
        ),
        hint="test (bits & 0x7FFFFFFF) > 0x7F800000 first: the rounding addition turns 0x7F800001 into inf",
    )


@checks("bf16_codec")
def refuses_wrong_dtypes(ex):
    """bf16_encode refuses float64/float16 input, bf16_decode refuses int32/uint8 codes"""
    good = torch.randn(3)
    call(describe(x=good), ex.bf16_decode, call(describe(x=good), ex.bf16_encode, good))  # first: it works at all
    for name, bad in (
        ("bf16_encode", torch.randn(4, dtype=torch.float64)),
        ("bf16_encode", torch.arange(4.0).half()),
        ("bf16_decode", torch.arange(4, dtype=torch.int32)),
        ("bf16_decode", torch.arange(4, dtype=torch.uint8)),
    ):
        try:
            getattr(ex, name)(bad)
        except (TypeError, ValueError):
            continue
        expect(
            False,
            f"{name} accepted a tensor of the wrong dtype",
            input=describe(x=bad),
            expected="TypeError (or ValueError)",
            got="no error",
            hint="check the dtype first: x.view(torch.int32) of a float64 tensor silently reinterprets other bits",
        )


# ------------------------------------------------------------------------------------------ fp8_decode


@checks("fp8_decode")
def decode_every_code(ex):
    """all 256 codes of e4m3fn and e5m2 decode exactly as torch's float8 -> float32 conversion (NaNs: a NaN)"""
    codes = all_uint8_codes()
    for fmt, dtype in FP8_DTYPES.items():
        label = f"all 256 codes, fmt={fmt!r}"
        got = call(label, ex.fp8_decode, codes, fmt)
        want = codes.view(dtype).float()
        expect_tensor(got, shape=(256,), dtype=torch.float32, input=label)
        same = (got.view(torch.int32) == want.view(torch.int32)) | (want.isnan() & got.isnan())
        if not bool(same.all()):
            index = int((~same).nonzero()[0])
            expect(
                False,
                f"decoded {fmt} values differ from torch's",
                input=label,
                expected=f"code {hex_of(index, 2)} ({int((~same).sum())} codes differ) -> {float(want[index])!r}",
                got=repr(float(got[index])),
                hint="subnormals (exponent 0) have no implicit 1 and the scale 2**(1 - bias); the sign applies last",
            )


@checks("fp8_decode")
def special_codes_hand_checked(ex):
    """448, 256, 2^-9, -0.0 and NaN in e4m3fn; 57344, inf, -inf, 2^-16 and NaN in e5m2"""
    cases = {
        "e4m3fn": [
            (0x7E, 448.0),
            (0x78, 256.0),
            (0x01, 2.0**-9),
            (0x08, 2.0**-6),
            (0x80, -0.0),
            (0x7F, math.nan),
            (0xFF, math.nan),
            (0xC4, -3.0),
        ],
        "e5m2": [
            (0x7B, 57344.0),
            (0x7C, math.inf),
            (0xFC, -math.inf),
            (0x01, 2.0**-16),
            (0x7D, math.nan),
            (0x80, -0.0),
            (0x3C, 1.0),
        ],
    }
    for fmt, pairs in cases.items():
        codes = torch.tensor([c for c, _ in pairs], dtype=torch.int32).to(torch.uint8)
        label = f"fmt={fmt!r}, codes " + ", ".join(hex_of(c, 2) for c, _ in pairs)
        got = call(label, ex.fp8_decode, codes, fmt)
        expect_tensor(got, shape=codes.shape, dtype=torch.float32, input=label)
        for (code, want), value in zip(pairs, got.tolist(), strict=True):
            ok = (
                math.isnan(value)
                if math.isnan(want)
                else (value == want and math.copysign(1, value) == math.copysign(1, want))
            )
            expect(
                ok,
                f"code {hex_of(code, 2)} decodes wrongly",
                input=label,
                expected=repr(want),
                got=repr(value),
                hint="e4m3fn's top exponent 1111 is finite except fraction 111 (NaN); e5m2's 11111 is inf (00) or NaN",
            )


@checks("fp8_decode")
def shapes_and_bad_input(ex):
    """any shape in, float32 of that shape out; int32 codes or an unknown format are refused"""
    codes = torch.randint(0, 256, (3, 7, 5), dtype=torch.int32).to(torch.uint8)
    for fmt, dtype in FP8_DTYPES.items():
        label = describe(codes=codes) + f", fmt={fmt!r}"
        got = call(label, ex.fp8_decode, codes, fmt)
        expect_tensor(got, shape=codes.shape, dtype=torch.float32, input=label)
        want = codes.view(dtype).float()
        expect(
            bool(((got == want) | (got.isnan() & want.isnan())).all()),
            "a (3, 7, 5) tensor of codes decodes wrongly",
            input=label,
            expected="the same values as decoding the codes one by one",
            got=f"{int((got != want).sum())} values differ",
            hint="use elementwise tensor ops only: no loops over elements or flattening without reshaping back",
        )
    for bad, fmt in ((torch.arange(4, dtype=torch.int32), "e4m3fn"), (codes, "e4m3"), (codes, "e3m4")):
        try:
            ex.fp8_decode(bad, fmt)
        except (TypeError, ValueError):
            continue
        expect(
            False,
            "fp8_decode accepted a bad input",
            input=describe(codes=bad) + f", fmt={fmt!r}",
            expected="TypeError or ValueError",
            got="no error",
            hint="codes must be uint8; fmt one of FP8_FORMATS",
        )


# ------------------------------------------------------------------------------------------ fp8_encode

HINT_ENCODE = (
    "shift the 24-bit significand right by 23 - M (more for subnormal results), round to nearest even, "
    "code = (max(e, 1) - 1) * 2**M + rounded"
)


def torch_fp8(x: torch.Tensor, fmt: str, saturate: bool) -> torch.Tensor:
    """The reference codes: a clamp then torch's cast (saturating), or torch's cast (e4m3fn: NaN beyond 464)."""
    dtype, largest = FP8_DTYPES[fmt], FP8_MAX[fmt]
    if saturate:
        return x.clamp(-largest, largest).to(dtype).view(torch.uint8)
    codes = x.to(dtype).view(torch.uint8)
    if fmt == "e4m3fn":  # no inf: non-saturating overflow is NaN (recent torch saturates this cast itself)
        beyond = x.abs() > 464.0  # 464 is the tie between 448 and 480: it rounds to even, 448
        codes = torch.where(beyond & ~x.isnan(), (codes & 0x80) | 0x7F, codes)
    return codes


@checks("fp8_encode")
def round_trips_every_code(ex):
    """every finite fp8 value encodes to its own code, both formats, both saturation modes"""
    for fmt, dtype in FP8_DTYPES.items():
        codes = all_uint8_codes()
        values = codes.view(dtype).float()
        finite = torch.isfinite(values)
        for saturate in (True, False):
            label = f"the {int(finite.sum())} finite {fmt} values, saturate={saturate}"
            got = call(label, ex.fp8_encode, values[finite], fmt, saturate)
            expect_codes(values[finite], got, codes[finite], width=2, dtype=dtype, label=label, hint=HINT_ENCODE)


@checks("fp8_encode")
def ties_subnormals_and_neighbours(ex):
    """the midpoints between neighbouring fp8 values (ties) and one float32 ulp around them, against torch"""
    for fmt, dtype in FP8_DTYPES.items():
        values = all_uint8_codes().view(dtype).float()
        values = values[torch.isfinite(values)].unique().sort().values
        x = midpoints_and_neighbours(values)
        x = x[x.abs() <= FP8_MAX[fmt]]  # overflow has its own check
        label = f"{x.numel()} {fmt} ties and neighbours (subnormal range included)"
        got = call(label, ex.fp8_encode, x, fmt, True)
        expect_codes(
            x,
            got,
            torch_fp8(x, fmt, True),
            width=2,
            dtype=dtype,
            label=label,
            hint=HINT_ENCODE + "; ties go to the even code",
        )


@checks("fp8_encode")
def random_bit_patterns_both_modes(ex):
    """random float32 bit patterns and scaled normal tensors (odd shapes), saturate=True and False, against torch"""
    for fmt, dtype in FP8_DTYPES.items():
        scale = FP8_MAX[fmt] / 4
        inputs = [random_float32(1 << 16), torch.randn(37, 129) * scale, torch.randn(1, 5, 3) * 2**-10]
        for x in inputs:
            for saturate in (True, False):
                label = describe(x=x) + f", fmt={fmt!r}, saturate={saturate}"
                got = call(label, ex.fp8_encode, x, fmt, saturate)
                expect_codes(
                    x,
                    got,
                    torch_fp8(x, fmt, saturate),
                    width=2,
                    dtype=dtype,
                    label=label,
                    hint=HINT_ENCODE + "; overflow: saturate -> max code, else inf (e5m2) / NaN (e4m3fn)",
                    allow_any_nan=x.isnan(),
                )


@checks("fp8_encode")
def saturation_nan_and_signs(ex):
    """overflow, inf, NaN and signed zeros, hand-checked: 1e6 -> 448 or NaN (e4m3fn), 57344 or inf (e5m2)"""
    x = torch.tensor([1e6, -1e6, math.inf, -math.inf, 464.0, 465.0, 61439.0, 61440.0, math.nan, -0.0, -(2.0**-30)])
    signalling = float32_from_bits(torch.tensor([0x7F800001, 0xFF800001, 0x7FBFFFFF]))  # NaNs with a small payload
    x = torch.cat((x, signalling))
    want = {
        ("e4m3fn", True): [0x7E, 0xFE, 0x7E, 0xFE, 0x7E, 0x7E, 0x7E, 0x7E, None, 0x80, 0x80, None, None, None],
        ("e4m3fn", False): [0x7F, 0xFF, 0x7F, 0xFF, 0x7E, 0x7F, 0x7F, 0x7F, None, 0x80, 0x80, None, None, None],
        ("e5m2", True): [0x7B, 0xFB, 0x7B, 0xFB, 0x5F, 0x5F, 0x7B, 0x7B, None, 0x80, 0x80, None, None, None],
        ("e5m2", False): [0x7C, 0xFC, 0x7C, 0xFC, 0x5F, 0x5F, 0x7B, 0x7C, None, 0x80, 0x80, None, None, None],
    }
    for (fmt, saturate), codes in want.items():
        label = f"x = {x.tolist()} (the last three: NaN bits 0x7F800001, 0xFF800001, 0x7FBFFFFF), fmt={fmt!r}, saturate={saturate}"
        got = call(label, ex.fp8_encode, x, fmt, saturate)
        expect_tensor(got, shape=x.shape, dtype=torch.uint8, input=label, what="codes")
        decoded = got.view(FP8_DTYPES[fmt]).float()
        for value, expected, code, back in zip(x.tolist(), codes, got.tolist(), decoded.tolist(), strict=True):
            ok = math.isnan(back) if expected is None else code == expected
            expect(
                ok,
                f"{value!r} encodes wrongly",
                input=label,
                expected="a NaN code" if expected is None else hex_of(expected, 2),
                got=hex_of(code, 2),
                hint="saturate clamps overflow and inf to the max code (0x7E / 0x7B); NaN stays NaN in both modes; "
                "OR the sign in last",
            )


@checks("fp8_encode")
def refuses_bad_input(ex):
    """float64 or bfloat16 input, or an unknown format name, are refused"""
    good = torch.randn(3)
    call(describe(x=good), ex.fp8_encode, good, "e4m3fn")  # first: it works at all
    for bad, fmt in (
        (torch.randn(4, dtype=torch.float64), "e4m3fn"),
        (torch.randn(4).bfloat16(), "e5m2"),
        (torch.randn(4), "e4m3"),
        (torch.randn(4), "fp8"),
    ):
        try:
            ex.fp8_encode(bad, fmt)
        except (TypeError, ValueError):
            continue
        expect(
            False,
            "fp8_encode accepted a bad input",
            input=describe(x=bad) + f", fmt={fmt!r}",
            expected="TypeError or ValueError",
            got="no error",
            hint="x must be float32 (its bits are read as int32); fmt one of FP8_FORMATS",
        )
