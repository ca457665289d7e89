"""Checks for p01.quantization_theory. References: PyTorch's `torch.fake_quantize_per_tensor_affine` and
`torch.fake_quantize_per_channel_affine` with absmax scales (fp32, bf16, fp16; 2 to 8 bits); numerical integrals in
float64 of the clipping error and of the exact error of the mid-rise quantizer; and the error measured on a million
Gaussian samples."""

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

checks = Checks("p01.quantization_theory")
checks.restrict(
    "absmax_fake_quantize",
    forbid=(
        torch.fake_quantize_per_tensor_affine,
        torch.fake_quantize_per_channel_affine,
        torch.quantize_per_tensor,
        torch.quantize_per_channel,
    ),
    instead="round and clamp x / scale yourself (the fake_quantize builtins are the checks' reference)",
)

# ------------------------------------------------------------------------------------------ absmax_fake_quantize


def builtin_fake_quantize(w: torch.Tensor, bits: int, granularity: str, group_size: int):
    """PyTorch's fake quantization with absmax scales: (w_hat in w.dtype, scales float32 in the lesson's shapes)."""
    rows, cols = w.shape
    q_max = 2 ** (bits - 1) - 1
    full = w.float()
    if granularity == "tensor":
        absmax = full.abs().max()
        scale = absmax / q_max if absmax > 0 else torch.tensor(1.0)
        w_hat = torch.fake_quantize_per_tensor_affine(full, float(scale), 0, -q_max, q_max)
        return w_hat.to(w.dtype), scale.reshape(())
    view = full if granularity == "channel" else full.reshape(-1, group_size)
    absmax = view.abs().max(dim=1).values
    scale = torch.where(absmax > 0, absmax / q_max, torch.ones_like(absmax))
    zero = torch.zeros(view.shape[0], dtype=torch.int32)
    w_hat = torch.fake_quantize_per_channel_affine(view, scale, zero, 0, -q_max, q_max).reshape(rows, cols)
    shape = (rows, 1) if granularity == "channel" else (rows, cols // group_size)
    return w_hat.to(w.dtype), scale.reshape(shape)


def expand(scales: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """Scales of any of the three shapes, one per element of the (rows, cols) weight."""
    if scales.dim() == 0:
        return scales.expand(rows, cols)
    return scales.repeat_interleave(cols // scales.shape[1], dim=1)


HINT_QUANT = {
    "tensor": "one scale max|w| / (2**(bits-1) - 1); w_hat = clamp(round(w / s), -q_max, q_max) * s",
    "channel": "one scale per output row: amax of |w| over dim 1, divided by 2**(bits-1) - 1",
    "group": "one scale per group_size consecutive inputs of a row: reshape to (out*in/g, g), amax over the group",
}


def expect_like_builtin(ex, w: torch.Tensor, bits: int, granularity: str, group_size: int = 128) -> None:
    label = describe(w=w, bits=bits, granularity=granularity, group_size=group_size)
    got = ex.absmax_fake_quantize(w.clone(), bits, granularity, group_size)
    expect(
        isinstance(got, tuple) and len(got) == 2,
        "expected (w_hat, scales)",
        input=label,
        expected="a tuple of two tensors",
        got=repr(type(got)),
        hint="return w_hat, scales",
    )
    w_hat, scales = got
    want_hat, want_scales = builtin_fake_quantize(w, bits, granularity, group_size)
    expect_tensor(w_hat, shape=tuple(w.shape), dtype=w.dtype, input=label, what="w_hat", hint="w_hat in w's dtype")
    expect_tensor(
        scales,
        shape=tuple(want_scales.shape),
        dtype=torch.float32,
        input=label,
        what="scales",
        hint=HINT_QUANT[granularity],
    )
    expect_close(scales, want_scales.double(), input=label, what="scales", hint=HINT_QUANT[granularity])
    # w / s and w * (1 / s), as the builtin computes it, may round differently on an exact tie: allow one step there
    step = expand(want_scales, *w.shape).double()
    ratio = w.double() / step
    near_tie = (ratio - ratio.floor() - 0.5).abs() < 1e-4
    differs = (w_hat.double() - want_hat.double()).abs() > 1e-6 * step
    off_tie = differs & ~near_tie
    worst = int(off_tie.flatten().nonzero()[0]) if off_tie.any() else None
    expect(
        worst is None,
        f"w_hat differs from torch.fake_quantize_per_*_affine at {int(off_tie.sum())} of {w.numel()} elements",
        input=label,
        expected=f"w[{divmod(worst or 0, w.shape[1])}] -> {want_hat.flatten()[worst or 0].item():.6g}",
        got=f"{w_hat.flatten()[worst or 0].item():.6g} (w = {w.flatten()[worst or 0].item():.6g})",
        hint=HINT_QUANT[granularity] + "; torch.round, not trunc or floor",
    )
    one_step = (w_hat.double() - want_hat.double()).abs() <= step * (1 + 1e-3) + 1e-6
    expect(bool(one_step.all()), "w_hat is more than one step away near a tie", input=label, hint="round, then clamp")


@checks("absmax_fake_quantize")
def per_tensor_like_pytorch(ex):
    """per tensor, 2 to 8 bits, fp32/bf16/fp16, odd shapes and a single row: equal to fake_quantize_per_tensor"""
    for shape, bits, dtype in (
        ((7, 13), 8, torch.float32),
        ((1, 33), 4, torch.float32),
        ((16, 64), 2, torch.bfloat16),
        ((5, 40), 3, torch.float16),
        ((64, 17), 6, torch.float32),
    ):
        expect_like_builtin(ex, (torch.randn(shape) * 3).to(dtype), bits, "tensor")


@checks("absmax_fake_quantize")
def per_channel_and_group_like_pytorch(ex):
    """per channel and per group (g = 1, 4, 8, 16, 128), fp32/bf16/fp16, an outlier row: equal to fake_quantize_per_channel"""
    outlier = torch.randn(6, 256)
    outlier[2] *= 50
    cases = [
        (torch.randn(9, 31), 8, "channel", 128),
        (outlier, 4, "channel", 128),
        (torch.randn(3, 20).bfloat16(), 3, "channel", 128),
        (outlier, 4, "group", 128),
        (torch.randn(5, 48).half(), 4, "group", 16),
        (torch.randn(2, 12) * torch.logspace(-3, 3, 12), 8, "group", 4),
        (torch.randn(1, 8), 2, "group", 8),
        (torch.randn(3, 5), 4, "group", 1),  # a scale per element: valid, if wasteful
    ]
    for w, bits, granularity, group_size in cases:
        expect_like_builtin(ex, w, bits, granularity, group_size)


@checks("absmax_fake_quantize")
def error_bounds_and_zero_groups(ex):
    """|w - w_hat| <= scale / 2 everywhere, the absmax of each group is exact, all-zero rows and groups stay zero"""
    w = torch.randn(8, 64, dtype=torch.float32)
    w[3] = 0.0  # a row of zeros
    w[5, 16:32] = 0.0  # a group of zeros
    for granularity in ("channel", "group"):
        label = f"{describe(w=w)} with row 3 and w[5, 16:32] all zero, 4 bits, {granularity}, group_size 16"
        w_hat, scales = ex.absmax_fake_quantize(w.clone(), 4, granularity, 16)
        expect(
            bool(torch.isfinite(w_hat).all()) and bool(torch.isfinite(scales).all()),
            "NaN or inf in w_hat or scales",
            input=label,
            expected="finite values (an all-zero group keeps scale 1 and stays 0)",
            got=f"{int((~torch.isfinite(w_hat)).sum())} non-finite values in w_hat",
            hint="guard the division: scale = 1 where the absmax is 0",
        )
        expect(bool((w_hat[3] == 0).all()), "a zero row was not kept at zero", input=label, hint="0 / 1 rounds to 0")
        error = (w - w_hat).abs()
        bound = expand(scales, 8, 64) / 2 * (1 + 1e-5)
        expect(
            bool((error <= bound).all()),
            "an element is more than half a step from its quantized value",
            input=label,
            expected="|w - w_hat| <= scale / 2",
            got=f"max |w - w_hat| / scale = {float((error / expand(scales, 8, 64)).max()):.3f}",
            hint="round to nearest (torch.round), not trunc or floor",
        )
    blocks = w.reshape(-1, 16)
    w_hat = ex.absmax_fake_quantize(w.clone(), 4, "group", 16)[0].reshape(-1, 16)
    where = blocks.abs().argmax(dim=1, keepdim=True)
    expect_close(
        w_hat.gather(1, where),
        blocks.gather(1, where).double(),
        input=f"{describe(w=w)}, 4 bits, group 16: the largest magnitude of each group",
        what="w_hat at each group's absmax",
        hint="the absmax lands exactly on the code ±(2**(bits-1) - 1): q_max is 2**(bits-1) - 1, not 2**(bits-1)",
    )


@checks("absmax_fake_quantize")
def refuses_bad_arguments(ex):
    """a 1-D or 3-D weight, 1 or 9 bits, an unknown granularity, a group size that does not divide: ValueError"""
    ex.absmax_fake_quantize(torch.randn(4, 8), 4, "group", 4)  # first: it works at all
    bad = [
        ((torch.randn(16), 4, "tensor", 128), "1-D w"),
        ((torch.randn(2, 3, 4), 4, "tensor", 128), "3-D w"),
        ((torch.randn(4, 8), 1, "tensor", 128), "bits=1"),
        ((torch.randn(4, 8), 9, "channel", 128), "bits=9"),
        ((torch.randn(4, 8), 4, "row", 128), "granularity='row'"),
        ((torch.randn(4, 12), 4, "group", 8), "group_size=8 with 12 columns"),
        ((torch.randn(4, 12), 4, "group", 0), "group_size=0"),
    ]
    for args, label in bad:
        expect_value_error(lambda args=args: ex.absmax_fake_quantize(*args), label, "validate the arguments first")


# ------------------------------------------------------------------------------------------ gaussian_quantizer_mse

GRID = 100_001  # points of each numerical integral


def gaussian_density(x: torch.Tensor) -> torch.Tensor:
    return torch.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


def clipping_integral(bits: int, clip: float) -> float:
    """2 * integral over x > clip of (x - outer)^2 phi(x), outer = clip - step / 2, by Simpson's rule in float64."""
    outer = clip - clip / 2**bits
    x = torch.linspace(clip, clip + 14, GRID, dtype=torch.float64)
    f = (x - outer) ** 2 * gaussian_density(x)
    h = float(x[1] - x[0])
    return 2 * h / 3 * float(f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum())


def exact_quantizer_mse(bits: int, clip: float) -> float:
    """E[(Q(x) - x)^2] of the mid-rise quantizer (2**bits levels on [-clip, clip]) for N(0, 1), integrated on a grid."""
    step = 2 * clip / 2**bits
    x = torch.linspace(-clip - 14, clip + 14, 2 * GRID, dtype=torch.float64)
    level = torch.clamp(torch.floor(x / step), -(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    f = ((level + 0.5) * step - x) ** 2 * gaussian_density(x)
    return float(torch.trapezoid(f, x))


def expect_pair(got, label: str) -> tuple[float, float]:
    expect(
        isinstance(got, tuple) and len(got) == 2 and all(isinstance(v, float) for v in got),
        "expected (granular, clipping) as two Python floats",
        input=label,
        expected="tuple of two floats",
        got=repr(got)[:120],
        hint="return granular, clipping",
    )
    return got


HINT_CLIP = "clipping = 2 * ((1 + b**2) * Q(clip) + (clip - 2 * b) * phi(clip)), b = clip - step / 2 (both tails)"
HINT_GRAN = "granular = step**2 / 12 * P(|X| <= clip), step = 2 * clip / 2**bits"


@checks("gaussian_quantizer_mse")
def clipping_term_against_an_integral(ex):
    """the clipping term equals a float64 Simpson integral of both tails (1 to 8 bits, clip 0.5 to 5)"""
    for bits, clip in ((1, 0.5), (2, 1.0), (3, 1.7), (4, 2.0), (4, 3.0), (6, 2.5), (8, 4.0), (5, 5.0)):
        label = f"bits={bits}, clip={clip}"
        _, clipping = expect_pair(ex.gaussian_quantizer_mse(bits, clip), label)
        expect_close(
            torch.tensor(clipping, dtype=torch.float64),
            torch.tensor(clipping_integral(bits, clip), dtype=torch.float64),
            input=label,
            what="clipping MSE",
            hint=HINT_CLIP,
        )


@checks("gaussian_quantizer_mse")
def total_against_the_exact_quantizer(ex):
    """granular + clipping within 1% of the exact error of the quantizer (integrated), 2 to 8 bits"""
    for bits, clip in ((2, 1.0), (3, 1.5), (4, 2.0), (4, 3.0), (5, 1.5), (6, 2.0), (8, 4.0), (3, 3.0)):
        label = f"bits={bits}, clip={clip}"
        granular, clipping = expect_pair(ex.gaussian_quantizer_mse(bits, clip), label)
        exact = exact_quantizer_mse(bits, clip)
        expect(
            abs(granular + clipping - exact) <= 0.01 * exact,
            "the modelled MSE is more than 1% from the quantizer's exact error (Bennett's model is within 0.5%)",
            input=label,
            expected=f"{exact:.6g} (integrated over the levels)",
            got=f"{granular + clipping:.6g} = {granular:.4g} rounding + {clipping:.4g} clipping",
            hint=HINT_GRAN + "; " + HINT_CLIP,
        )


@checks("gaussian_quantizer_mse")
def against_measured_error_and_six_db(ex):
    """a million Gaussian samples quantized for real (4 standard errors + 1%); the rounding term falls 4x per bit"""
    samples = torch.randn(1_000_000, dtype=torch.float64)
    for bits, clip in ((4, 2.5), (3, 1.2), (6, 3.5)):
        step = 2 * clip / 2**bits
        level = torch.clamp(torch.floor(samples / step), -(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
        errors = ((level + 0.5) * step - samples) ** 2
        mean, stderr = float(errors.mean()), float(errors.std()) / 1000
        granular, clipping = expect_pair(ex.gaussian_quantizer_mse(bits, clip), f"bits={bits}, clip={clip}")
        expect(
            abs(granular + clipping - mean) <= 4 * stderr + 0.01 * mean,
            "the modelled MSE disagrees with the measured error",
            input=f"bits={bits}, clip={clip}; 10^6 N(0, 1) samples through a {2**bits}-level quantizer",
            expected=f"{mean:.6g} ± {4 * stderr + 0.01 * mean:.2g}",
            got=f"{granular + clipping:.6g}",
            hint=HINT_GRAN + "; " + HINT_CLIP,
        )
    for bits in (2, 5, 7):
        this, following = ex.gaussian_quantizer_mse(bits, 2.0)[0], ex.gaussian_quantizer_mse(bits + 1, 2.0)[0]
        expect_close(
            torch.tensor(following / this, dtype=torch.float64),
            torch.tensor(0.25, dtype=torch.float64),
            input=f"granular(bits={bits + 1}) / granular(bits={bits}), clip=2",
            what="ratio",
            hint="one more bit halves the step (2**bits levels, not 2**bits - 1): the rounding error falls by 4",
        )
    granular, clipping = ex.gaussian_quantizer_mse(1, 1.0)
    expect_close(
        torch.tensor(granular, dtype=torch.float64),
        torch.tensor(math.erf(1 / math.sqrt(2)) / 12, dtype=torch.float64),
        input="bits=1, clip=1: step 1, P(|X| <= 1) = 0.6827",
        what="granular MSE",
        hint=HINT_GRAN,
    )


@checks("gaussian_quantizer_mse")
def refuses_bad_mse_arguments(ex):
    """bits < 1 or clip <= 0: ValueError"""
    ex.gaussian_quantizer_mse(4, 2.0)  # first: it works at all
    for args in ((0, 2.0), (-1, 2.0), (4, 0.0), (4, -1.0)):
        expect_value_error(lambda args=args: ex.gaussian_quantizer_mse(*args), f"{args}", "validate bits and clip")
