"""Checks for p02.quant_w8a16. References: a float64 specification of round-to-nearest quantisation written here
(group statistics by a loop over rows and groups), the round-trip bound |w - w_hat| <= s/2 derived in
the lesson, a plain-Python-integer packing spec, `torch.nn.functional.linear` in float64 on the spec's weights, and
the bytes of the module's state_dict. `torch.ao` and `torch._int_mm` are forbidden."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from llm_algo.check import Checks, describe, expect, expect_close, expect_refused, expect_tensor, expect_value_error

checks = Checks("p02.quant_w8a16")
checks.restrict(
    "quantize",
    "pack_int4",
    "quant_linear",
    forbid=[
        "torch.ao",
        torch._int_mm,
        torch.quantize_per_tensor,
        torch.quantize_per_channel,
        torch.fake_quantize_per_tensor_affine,
        torch.fake_quantize_per_channel_affine,
    ],
    instead="compute scales, rounding and clamping with plain tensor ops (torch.ao's quantisers do it for you)",
)

HINT_SYM = "symmetric: qmax = 2**(bits-1) - 1, scale = max|group| / qmax, q = clamp(round(w / scale), -qmax, qmax)"
HINT_ASYM = (
    "asymmetric: lo = min(min(group), 0), hi = max(max(group), 0), scale = (hi - lo) / (2**bits - 1), "
    "zero = round(-lo / scale), q = clamp(round(w / scale) + zero, 0, 2**bits - 1)"
)


def spec_scale_zero(w: torch.Tensor, bits: int, group_size: int | None, symmetric: bool):
    """float64 spec, one group at a time: (scale (N, K/G) float64, zero (N, K/G) float64 or None)."""
    w = w.double()
    N, K = w.shape
    G = K if group_size is None else group_size
    scale = torch.empty(N, K // G, dtype=torch.float64)
    zero = None if symmetric else torch.empty(N, K // G, dtype=torch.float64)
    for row in range(N):
        for j in range(K // G):
            group = w[row, j * G : (j + 1) * G]
            if symmetric:
                top = float(group.abs().max())
                scale[row, j] = top / (2 ** (bits - 1) - 1) if top > 0 else 1.0
            else:
                lo, hi = min(float(group.min()), 0.0), max(float(group.max()), 0.0)
                scale[row, j] = (hi - lo) / (2**bits - 1) if hi > lo else 1.0
    if not symmetric:
        zero = torch.round(-torch.minimum(w.reshape(N, K // G, G).amin(-1), torch.zeros(())) / scale)
        zero = zero.clamp(0, 2**bits - 1)
    return scale, zero


def spread(per_group: torch.Tensor, G: int) -> torch.Tensor:
    """(N, K/G) -> (N, K), each value repeated over its group's G consecutive columns."""
    return per_group.repeat_interleave(G, dim=1)


def spec_codes(w: torch.Tensor, scale: torch.Tensor, zero, bits: int, G: int, symmetric: bool) -> torch.Tensor:
    """The codes the spec assigns given the scales (w / scale in float32 as the lesson says, then float64)."""
    ratio = (w.float() / spread(scale.float(), G)).double()
    if symmetric:
        qmax = 2 ** (bits - 1) - 1
        return torch.round(ratio).clamp(-qmax, qmax)
    return (torch.round(ratio) + spread(zero.double(), G)).clamp(0, 2**bits - 1)


def near_tie(w: torch.Tensor, scale: torch.Tensor, G: int) -> torch.Tensor:
    ratio = (w.float() / spread(scale.float(), G)).double()
    return ((ratio - ratio.floor()) - 0.5).abs() < 1e-4


def test_weight(N: int, K: int, dtype=torch.float32, outliers: bool = True) -> torch.Tensor:
    w = torch.randn(N, K, dtype=torch.float64) * 0.05
    if outliers:
        w[:, torch.randint(0, K, (2,))] *= 8.0
    if K > 3:  # one lopsided row: all positive, so asymmetric zero points are exercised
        w[0] = w[0].abs()
    return w.to(dtype)


def check_quantisation(ex, w, bits, group_size, symmetric):
    N, K = w.shape
    G = K if group_size is None else group_size
    label = describe(w=w) + f", bits={bits}, group_size={group_size}, symmetric={symmetric}"
    hint = HINT_SYM if symmetric else HINT_ASYM
    q, scale, zero = ex.quantize_weight(w, bits, group_size, symmetric)
    expect_tensor(q, shape=(N, K), dtype=torch.int8 if symmetric else torch.uint8, input=label, what="q")
    expect_tensor(scale, shape=(N, K // G), dtype=torch.float32, input=label, what="scale")
    want_scale, want_zero = spec_scale_zero(w, bits, group_size, symmetric)
    expect_close(scale, want_scale, input=label, what="scale", hint=hint)
    if symmetric:
        expect(
            zero is None, "zero must be None for symmetric quantisation", input=label, expected="None", got=str(zero)
        )
    else:
        expect_tensor(zero, shape=(N, K // G), dtype=torch.uint8, input=label, what="zero")
        bad = zero.double() != want_zero
        expect(
            not bool(bad.any()),
            f"{int(bad.sum())} zero point(s) differ from round(-min(lo, 0) / scale)",
            input=label,
            expected=str(want_zero[bad][:4].tolist()),
            got=str(zero.double()[bad][:4].tolist()),
            hint="lo = min(group.min(), 0); zero = round(-lo / scale), an integer in [0, 2**bits - 1]",
        )
    want_q = spec_codes(w, scale, zero if zero is not None else None, bits, G, symmetric)
    wrong = (q.double() != want_q) & ~near_tie(w, scale, G)
    where = wrong.nonzero()[:3].tolist()
    expect(
        not bool(wrong.any()),
        f"{int(wrong.sum())} of {q.numel()} codes differ from round-to-nearest with your scales",
        input=label,
        expected=str([want_q[i, j].item() for i, j in where]),
        got=str([q[i, j].item() for i, j in where]) + f" at {where}",
        hint=hint + "; use torch.round, not truncation or floor",
    )
    return q, scale, zero


# ------------------------------------------------------------------------------------------ quantize


@checks("quantize")
def hand_checkable_int4(ex):
    """one row [0.7, -0.36, 0.1, 0.0], int4: symmetric scale 0.1, codes [7, -4, 1, 0]; asymmetric zero point 5"""
    w = torch.tensor([[0.7, -0.36, 0.1, 0.0]])
    q, scale, zero = ex.quantize_weight(w, 4, None, True)
    label = "w=[[0.7, -0.36, 0.1, 0.0]], bits=4, per-channel"
    expect_close(
        scale, torch.tensor([[0.1]], dtype=torch.float64), input=label + ", symmetric", what="scale", hint=HINT_SYM
    )
    expect(
        q.tolist() == [[7, -4, 1, 0]],
        "wrong symmetric codes",
        input=label + ", symmetric",
        expected="[[7, -4, 1, 0]]",
        got=str(q.tolist()),
        hint=HINT_SYM,
    )
    q, scale, zero = ex.quantize_weight(w, 4, None, False)
    # asymmetric: range [-0.36, 0.7], scale 1.06 / 15, zero round(5.09) = 5, codes round(w / scale) + 5
    expect_close(
        scale,
        torch.tensor([[1.06 / 15]], dtype=torch.float64),
        input=label + ", asymmetric",
        what="scale",
        hint=HINT_ASYM,
    )
    expect(
        zero is not None and zero.tolist() == [[5]] and q.tolist() == [[15, 0, 6, 5]],
        "wrong asymmetric codes or zero point",
        input=label + ", asymmetric",
        expected="zero [[5]], q [[15, 0, 6, 5]]",
        got=f"zero {None if zero is None else zero.tolist()}, q {q.tolist()}",
        hint=HINT_ASYM,
    )


@checks("quantize")
def matches_spec_random(ex):
    """random weights with outlier columns: scales, zero points and codes equal the float64 spec, int8/int4/int2"""
    cases = [
        ((5, 12), 8, None, True),
        ((7, 24), 4, 8, True),
        ((3, 32), 4, 16, False),
        ((1, 10), 8, 5, False),
        ((6, 9), 2, 3, True),
        ((4, 64), 3, 32, False),
        ((3, 4), 8, 1, True),
        ((2, 6), 4, 1, False),
    ]
    for (N, K), bits, group_size, symmetric in cases:
        check_quantisation(ex, test_weight(N, K), bits, group_size, symmetric)


@checks("quantize")
def round_trip_bound(ex):
    """dequantize(quantize(w)) is within s/2 of w for every weight (the bound the lesson derives), both schemes"""
    for dtype, (N, K), bits, group_size, symmetric in [
        (torch.float32, (8, 48), 4, 16, True),
        (torch.float32, (8, 48), 4, 16, False),
        (torch.float16, (5, 20), 8, None, False),
        (torch.bfloat16, (6, 30), 3, 10, True),
        (torch.float64, (3, 256), 8, 128, True),
        (torch.float32, (2, 5), 4, 1, False),
    ]:
        w = test_weight(N, K, dtype)
        G = K if group_size is None else group_size
        label = describe(w=w) + f", bits={bits}, group_size={group_size}, symmetric={symmetric}"
        q, scale, zero = ex.quantize_weight(w, bits, group_size, symmetric)
        w_hat = ex.dequantize_weight(q, scale, zero, group_size)
        expect_tensor(w_hat, shape=(N, K), dtype=torch.float32, input=label, what="dequantized weight")
        half_step = spread(scale.double(), G) / 2
        excess = (w.double() - w_hat.double()).abs() - half_step * (1 + 1e-5) - 1e-12
        i, j = divmod(int(excess.argmax()), K)
        expect(
            bool((excess <= 0).all()),
            "a weight moved by more than half a quantisation step",
            input=label,
            expected=f"|w - w_hat| <= s/2 = {half_step[i, j].item():.4g} at ({i}, {j})",
            got=f"|w - w_hat| = {(w.double() - w_hat.double())[i, j].abs().item():.4g} (w={w[i, j].item():.4g})",
            hint="round (not truncate); spread each group's scale over its own G columns (repeat_interleave); "
            "subtract the zero point before scaling",
        )


@checks("quantize")
def dequantize_against_spec(ex):
    """dequantize_weight alone: scale * (q - zero) per group, given codes, scales and zero points made here"""
    N, K, G = 4, 12, 4
    q = torch.randint(0, 16, (N, K), dtype=torch.uint8)
    scale = torch.rand(N, K // G) + 0.1
    zero = torch.randint(0, 16, (N, K // G), dtype=torch.uint8)
    got = ex.dequantize_weight(q, scale, zero, G)
    want = torch.empty(N, K, dtype=torch.float64)
    for i in range(N):
        for k in range(K):
            want[i, k] = float(scale[i, k // G]) * (int(q[i, k]) - int(zero[i, k // G]))
    label = describe(q=q, scale=scale, zero=zero) + f", group_size={G}"
    expect_close(
        got, want, input=label, what="w_hat", hint="w_hat[i, k] = scale[i, k // G] * (q[i, k] - zero[i, k // G])"
    )
    qs = torch.randint(-127, 128, (N, K), dtype=torch.int8)
    got = ex.dequantize_weight(qs, scale, None, G)
    want = qs.double() * spread(scale.double(), G)
    expect_close(
        got,
        want,
        input=describe(q=qs, scale=scale) + f", zero=None, group_size={G}",
        what="w_hat",
        hint="w_hat[i, k] = scale[i, k // G] * q[i, k]",
    )
    half_scale = scale.half()  # production checkpoints keep fp16 scales
    got = ex.dequantize_weight(qs, half_scale, None, G)
    label = describe(q=qs, scale=half_scale) + f", zero=None, group_size={G}"
    expect_tensor(
        got,
        shape=(N, K),
        dtype=torch.float32,
        input=label,
        what="w_hat",
        hint="return float32 whatever the scales' dtype (scale.float())",
    )
    expect_close(got, qs.double() * spread(half_scale.double(), G), input=label, what="w_hat")


@checks("quantize")
def zeros_and_exact_grid(ex):
    """an all-zero group gets a finite positive scale and codes 0 (or z); weights on the grid come back exactly"""
    w = torch.zeros(2, 8)
    w[1, 4:] = torch.tensor([0.5, -0.25, 0.125, 0.0])
    for symmetric in (True, False):
        label = f"w={w.tolist()}, bits=8, group_size=4, symmetric={symmetric}"
        q, scale, zero = ex.quantize_weight(w, 8, 4, symmetric)
        expect(
            bool(torch.isfinite(scale).all() and (scale > 0).all()),
            "an all-zero group got a scale that is not finite and positive",
            input=label,
            expected="scale > 0 and finite (the lesson uses 1)",
            got=str(scale.tolist()),
            hint="guard the division: torch.where(absmax > 0, absmax / qmax, 1)",
        )
        w_hat = ex.dequantize_weight(q, scale, zero, 4)
        expect(
            bool((w_hat[0] == 0).all() and (w_hat[1, 7] == 0)),
            "zero weights did not come back as exactly 0",
            input=label,
            expected="w_hat = 0 wherever w = 0",
            got=str(w_hat.tolist()),
            hint="include 0 in the asymmetric range and round the zero point to an integer",
        )
    w = torch.tensor([[-8.0, -3.0, 0.0, 5.0, 7.0, 1.0]])  # every value on the grid of scale 1 (asymmetric int4)
    q, scale, zero = ex.quantize_weight(w, 4, None, False)
    expect_close(
        ex.dequantize_weight(q, scale, zero, None),
        w.double(),
        input=f"w={w.tolist()}, bits=4, asymmetric",
        what="w_hat",
        hint="range [-8, 7] has 15 steps of 1: every weight is on the grid",
    )


@checks("quantize")
def quantize_refuses_bad_input(ex):
    """bad input is refused with a ValueError: a group that does not divide K, bits outside 2..8, a 1-D or integer w"""
    w = torch.randn(4, 12)
    expect_value_error(lambda: ex.quantize_weight(w, 8, 5), describe(w=w) + ", group_size=5", "check K % group_size")
    expect_value_error(lambda: ex.quantize_weight(w, 8, 0), describe(w=w) + ", group_size=0", "group_size must be > 0")
    expect_value_error(lambda: ex.quantize_weight(w, 9), describe(w=w) + ", bits=9", "bits must lie in 2..8")
    expect_value_error(lambda: ex.quantize_weight(w, 1), describe(w=w) + ", bits=1", "bits must lie in 2..8")
    v = torch.randn(12)
    expect_value_error(lambda: ex.quantize_weight(v, 8), describe(w=v), "w must be 2-D (N, K)")
    wi = torch.randint(-5, 5, (4, 12))
    expect_value_error(lambda: ex.quantize_weight(wi, 8), describe(w=wi), "w must be a floating-point tensor")
    q = torch.zeros(4, 12, dtype=torch.int8)
    expect_value_error(
        lambda: ex.dequantize_weight(q, torch.ones(4, 2), None, 5),
        "q (4, 12), group_size=5",
        "check K % group_size in dequantize_weight too",
    )
    expect_value_error(
        lambda: ex.dequantize_weight(q, torch.ones(4, 2), None, 0),
        "q (4, 12), group_size=0",
        "group_size must be > 0 in dequantize_weight too",
    )
    expect_value_error(
        lambda: ex.dequantize_weight(q, torch.ones(4, 2), None, 4),
        "q (4, 12), scale (4, 2), G=4",
        "scale must have shape (N, K // G) = (4, 3)",
    )
    expect_value_error(
        lambda: ex.dequantize_weight(q, torch.ones(4, 3), torch.ones(3, 4), 4),
        "q (4, 12), zero (3, 4), G=4",
        "zero must have shape (N, K // G) = (4, 3)",
    )


# ------------------------------------------------------------------------------------------ pack_int4


def spec_pack(rows: list[list[int]]) -> list[list[int]]:
    return [[(row[2 * j] % 16) | ((row[2 * j + 1] % 16) << 4) for j in range(len(row) // 2)] for row in rows]


@checks("pack_int4")
def hand_checkable_bytes(ex):
    """[3, -2, -8, 7, -1, 0] packs to bytes [0xE3, 0x78, 0x0F] and unpacks back"""
    q = torch.tensor([3, -2, -8, 7, -1, 0], dtype=torch.int8)
    packed = ex.pack_int4(q)
    expect_tensor(packed, shape=(3,), dtype=torch.uint8, input=str(q.tolist()), what="packed")
    expect(
        packed.tolist() == [0xE3, 0x78, 0x0F],
        "wrong bytes",
        input=str(q.tolist()),
        expected="[227, 120, 15] = [0xE3, 0x78, 0x0F]",
        got=str(packed.tolist()),
        hint="byte j = (q[2j] & 0xF) | ((q[2j+1] & 0xF) << 4): even column in the low nibble",
    )
    back = ex.unpack_int4(packed)
    expect(
        back.dtype == torch.int8 and back.tolist() == q.tolist(),
        "unpack_int4 did not return the codes",
        input="bytes [0xE3, 0x78, 0x0F]",
        expected=str(q.tolist()) + " int8",
        got=f"{back.tolist()} {back.dtype}",
        hint="sign-extend: a nibble n >= 8 is n - 16",
    )


@checks("pack_int4")
def random_against_integer_spec(ex):
    """random codes over several shapes: bytes equal a plain-Python spec; unpack(pack(q)) == q"""
    for shape in [(1, 2), (5, 18), (3, 4, 10), (64,)]:
        q = torch.randint(-8, 8, shape, dtype=torch.int8)
        label = describe(q=q)
        packed = ex.pack_int4(q)
        expect_tensor(packed, shape=(*shape[:-1], shape[-1] // 2), dtype=torch.uint8, input=label, what="packed")
        rows = q.reshape(-1, shape[-1]).tolist()
        want = torch.tensor(spec_pack(rows), dtype=torch.uint8).reshape(packed.shape)
        wrong = packed != want
        expect(
            not bool(wrong.any()),
            f"{int(wrong.sum())} of {packed.numel()} bytes differ from the layout",
            input=label,
            expected=str(want.flatten()[:6].tolist()),
            got=str(packed.flatten()[:6].tolist()),
            hint="low nibble = column 2j, high nibble = column 2j+1, each code as its 4-bit two's complement",
        )
        back = ex.unpack_int4(want)
        expect_tensor(back, shape=shape, dtype=torch.int8, input="bytes of " + label, what="unpacked")
        expect(
            bool((back == q).all()),
            "unpack_int4 of the reference bytes does not give the codes back",
            input="bytes of " + label,
            expected=str(q.flatten()[:8].tolist()),
            got=str(back.flatten()[:8].tolist()),
            hint="interleave low and high nibbles (low first) and sign-extend nibbles >= 8",
        )


@checks("pack_int4")
def every_byte_round_trips(ex):
    """all 256 byte values unpack to two codes in [-8, 7] and pack back to the same byte"""
    every = torch.arange(256, dtype=torch.int32).to(torch.uint8).reshape(16, 16)
    codes = ex.unpack_int4(every)
    expect_tensor(codes, shape=(16, 32), dtype=torch.int8, input="all 256 bytes (16, 16)", what="codes")
    expect(
        int(codes.min()) == -8 and int(codes.max()) == 7,
        "unpacked codes outside [-8, 7]",
        input="all 256 bytes",
        expected="codes in [-8, 7]",
        got=f"[{int(codes.min())}, {int(codes.max())}]",
        hint="sign-extend: a nibble n >= 8 is n - 16",
    )
    again = ex.pack_int4(codes)
    expect(
        bool((again == every).all()),
        "pack_int4(unpack_int4(b)) != b",
        input="all 256 bytes",
        expected=str(every.flatten()[240:246].tolist()),
        got=str(again.flatten()[240:246].tolist()),
        hint="pack and unpack must use the same nibble order",
    )


@checks("pack_int4")
def pack_refuses_bad_input(ex):
    """an odd last dimension, a code outside [-8, 7] (ValueError) and wrong dtypes (TypeError) are refused"""
    odd = torch.randint(-8, 8, (2, 5), dtype=torch.int8)
    expect_value_error(lambda: ex.pack_int4(odd), describe(q=odd), "the last dimension must be even")
    for top in (8, 9):
        big = torch.tensor([[3, top]], dtype=torch.int8)
        expect_value_error(lambda b=big: ex.pack_int4(b), f"q=[[3, {top}]] int8", "codes must lie in [-8, 7]")
    small = torch.tensor([[-9, 0]], dtype=torch.int8)
    expect_value_error(lambda: ex.pack_int4(small), "q=[[-9, 0]] int8", "codes must lie in [-8, 7]")
    as_int32 = torch.tensor([[1, 2]], dtype=torch.int32)
    expect_refused(lambda: ex.pack_int4(as_int32), "q=[[1, 2]] int32", "accept torch.int8 only", errors=(TypeError,))
    as_int8 = torch.tensor([[1, 2]], dtype=torch.int8)
    expect_refused(
        lambda: ex.unpack_int4(as_int8), "packed=[[1, 2]] int8", "accept torch.uint8 only", errors=(TypeError,)
    )


# ------------------------------------------------------------------------------------------ quant_linear


def spec_weight(weight: torch.Tensor, bits: int, group_size: int | None) -> torch.Tensor:
    """The float64 dequantised weight of the spec (symmetric)."""
    N, K = weight.shape
    G = K if group_size is None else group_size
    scale, _ = spec_scale_zero(weight.float(), bits, group_size, True)
    scale32 = scale.float()
    q = spec_codes(weight.float(), scale32, None, bits, G, True)
    return q * spread(scale32.double(), G)


def make_linear(K: int, N: int, bias: bool = True) -> nn.Linear:
    layer = nn.Linear(K, N, bias=bias)
    with torch.no_grad():
        layer.weight[:, torch.randint(0, K, (2,))] *= 6.0  # outlier columns
        if bias:
            layer.bias.normal_()
    return layer


@checks("quant_linear")
def matches_spec_float32(ex):
    """float32 activations, int8 per-channel, int8 g16 and int4 g8: equal to F.linear with the spec's weights"""
    for (K, N), bits, group_size, bias, lead in [
        ((32, 12), 8, None, True, (5,)),
        ((48, 7), 8, 16, False, (2, 3)),
        ((40, 9), 4, 8, True, (1,)),
    ]:
        layer = make_linear(K, N, bias)
        x = torch.randn(*lead, K)
        label = describe(x=x) + f", nn.Linear({K}, {N}, bias={bias}), bits={bits}, group_size={group_size}"
        module = ex.QuantLinear(layer, bits, group_size)
        got = module(x)
        expect_tensor(got, shape=(*lead, N), dtype=torch.float32, input=label)
        w_hat = spec_weight(layer.weight.detach(), bits, group_size)
        b = None if layer.bias is None else layer.bias.detach().double()
        oracle = F.linear(x.double(), w_hat, b)
        baseline = F.linear(x, w_hat.float(), None if b is None else b.float())
        expect_close(
            got,
            oracle,
            baseline=baseline,
            input=label,
            hint="quantise symmetrically with your quantize_weight, dequantise with scales spread per group "
            "(repeat_interleave), and add the bias",
        )


@checks("quant_linear")
def half_precision_activations(ex):
    """bfloat16 and float16 activations: output in x.dtype, as close to float64 as a plain half-precision linear"""
    layer = make_linear(64, 24)
    for dtype, bits, group_size in [(torch.bfloat16, 8, None), (torch.float16, 4, 16)]:
        x = torch.randn(3, 64).to(dtype)
        label = describe(x=x) + f", nn.Linear(64, 24), bits={bits}, group_size={group_size}"
        got = ex.QuantLinear(layer, bits, group_size)(x)
        expect_tensor(got, shape=(3, 24), dtype=dtype, input=label, hint="dequantise to x.dtype and compute there")
        w_hat = spec_weight(layer.weight.detach(), bits, group_size)
        b = layer.bias.detach().double()
        oracle = F.linear(x.double(), w_hat, b)
        baseline = F.linear(x, w_hat.to(dtype), b.to(dtype))
        expect_close(got, oracle, baseline=baseline, input=label, dtype=dtype, hint="compute in x.dtype")


@checks("quant_linear")
def error_within_derived_bound(ex):
    """float64 activations: |y - y_fp| <= sum_k |x_k| * s_ik / 2 for every output, per-channel and grouped"""
    layer = make_linear(64, 16)
    x = torch.randn(4, 64, dtype=torch.float64) * torch.linspace(0.1, 5.0, 64, dtype=torch.float64)
    for bits, group_size in [(8, None), (4, 16), (4, 64)]:
        G = 64 if group_size is None else group_size
        label = describe(x=x) + f", nn.Linear(64, 16), bits={bits}, group_size={group_size}"
        got = ex.QuantLinear(layer, bits, group_size)(x)
        exact = F.linear(x, layer.weight.detach().double(), layer.bias.detach().double())
        scale, _ = spec_scale_zero(layer.weight.detach(), bits, group_size, True)
        bound = x.abs() @ (spread(scale, G) / 2).T * (1 + 1e-5) + 1e-9  # (4, 16)
        err = (got.double() - exact).abs()
        i, j = divmod(int((err - bound).argmax()), 16)
        expect(
            bool((err <= bound).all()),
            "the output error is larger than the round-trip bound allows",
            input=label,
            expected=f"|y - y_fp| <= {bound[i, j].item():.4g} at ({i}, {j})",
            got=f"{err[i, j].item():.4g}",
            hint="each weight must be within s/2 of the original: round to nearest, and the right scale per group",
        )
        expect_tensor(got, dtype=torch.float64, input=label, hint="compute in x.dtype (float64 here)")


@checks("quant_linear")
def stores_integers_only(ex):
    """buffers: int8 (N, K) or packed uint8 (N, K/2) codes, float32 (N, K/G) scales; no float weight; bytes add up"""
    N, K = 20, 64
    for bits, group_size, bias, dtype in [
        (8, None, True, torch.float32),
        (4, 16, False, torch.float32),
        (4, None, True, torch.bfloat16),  # Hugging Face models load in bf16: the module still keeps float32 bias
    ]:
        layer = make_linear(K, N, bias).to(dtype)
        module = ex.QuantLinear(layer, bits, group_size)
        G = K if group_size is None else group_size
        label = f"QuantLinear(nn.Linear({K}, {N}, bias={bias}, dtype={dtype}), bits={bits}, group_size={group_size})"
        state = module.state_dict()
        expect(
            "qweight" in state and "scales" in state,
            "missing buffers",
            input=label,
            expected="buffers qweight and scales",
            got=str(list(state)),
            hint="self.register_buffer(...)",
        )
        want_q = (N, K) if bits == 8 else (N, K // 2)
        expect_tensor(
            state["qweight"],
            shape=want_q,
            dtype=torch.int8 if bits == 8 else torch.uint8,
            input=label,
            what="qweight",
            hint="int8 codes for 8 bits; pack_int4 for 4 bits",
        )
        expect_tensor(state["scales"], shape=(N, K // G), dtype=torch.float32, input=label, what="scales")
        floats = [k for k, t in state.items() if t.is_floating_point() and t.numel() >= N * K // 2]
        expect(
            not floats,
            "the module keeps a floating-point copy of the weight",
            input=label,
            expected="no float tensor of the weight's size",
            got=str(floats),
            hint="keep only qweight, scales and bias: the float weight is the memory to save",
        )
        total = sum(t.numel() * t.element_size() for t in state.values())
        budget = N * K * bits // 8 + 4 * N * (K // G) + (4 * N if bias else 0)
        expect(
            total <= budget,
            "the module keeps more bytes than codes + scales + bias",
            input=label,
            expected=f"<= {budget} bytes",
            got=f"{total} bytes ({ {k: tuple(t.shape) for k, t in state.items()} })",
            hint="store int8 codes (or packed int4), float32 scales, a float32 bias",
        )
        if bias:
            expect_tensor(state["bias"], shape=(N,), dtype=torch.float32, input=label, what="bias")
        expect(
            module.in_features == K and module.out_features == N and module.bits == bits,
            "wrong attributes",
            input=label,
            expected=f"in_features={K}, out_features={N}, bits={bits}",
            got=f"{getattr(module, 'in_features', None)}, {getattr(module, 'out_features', None)}, "
            f"{getattr(module, 'bits', None)}",
        )


@checks("quant_linear")
def linear_refuses_bad_input(ex):
    """bits other than 4 and 8, and a group size that does not divide in_features, raise a ValueError"""
    layer = nn.Linear(24, 6)
    expect_value_error(lambda: ex.QuantLinear(layer, 3), "nn.Linear(24, 6), bits=3", "only 4 and 8 bits")
    expect_value_error(lambda: ex.QuantLinear(layer, 16), "nn.Linear(24, 6), bits=16", "only 4 and 8 bits")
    expect_value_error(
        lambda: ex.QuantLinear(layer, 8, 7),
        "nn.Linear(24, 6), group_size=7",
        "quantize_weight refuses a group that does not divide K",
    )
