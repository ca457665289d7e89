"""Checks for p00.activations. References: `F.gelu` (exact and `approximate="tanh"`) and `F.silu` in float64 (the
oracles) and in the tested dtype (the baselines); their derivatives through `torch.autograd.grad` in float64;
`torch.autograd.gradcheck` through the learner's `SiLUFunction`; hand-checkable values (GELU(0) = 0, GELU(1) = Phi(1),
the minima of both functions)."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from llm_algo.check import Checks, describe, expect, expect_close, expect_gradcheck, expect_tensor, expect_value_error
from llm_algo.check.restrictions import AUTOGRAD

checks = Checks("p00.activations")
ACTIVATIONS = (F.gelu, nn.GELU, torch._C._nn.gelu, F.silu, nn.SiLU, torch._C._nn.silu, torch._C._nn.silu_)
checks.restrict(
    "gelu",
    forbid=ACTIVATIONS,
    instead="write 0.5 x (1 + erf(x / sqrt 2)) and the tanh form yourself (F.gelu is the checks' reference)",
)
checks.restrict(
    "derivatives",
    forbid=(*ACTIVATIONS, *AUTOGRAD),
    instead="evaluate the closed-form derivatives of section 2 (autograd through F.gelu is the checks' reference)",
)
checks.restrict(
    "silu_function",
    forbid=ACTIVATIONS,
    instead="compute x * sigmoid(x) and its derivative yourself (F.silu is the checks' reference)",
)

DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
MODES = ("none", "tanh")


def inputs(dtype):
    """A grid over [-12, 12] (the saturated tails included) plus random activations of a d_ff = 37 MLP."""
    grid = torch.linspace(-12, 12, 481, dtype=torch.float64)
    mlp = 3 * torch.randn(5, 37, dtype=torch.float64)
    return torch.cat([grid, mlp.flatten()]).to(dtype), (grid.numel(),), mlp.shape


def autograd_derivative(fn, x64):
    x = x64.detach().clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(fn(x).sum(), x)
    return grad


# ------------------------------------------------------------------------------------------ gelu


@checks("gelu")
def gelu_matches_f_gelu(ex):
    """gelu(x) and gelu(x, 'tanh') equal F.gelu over [-12, 12] and MLP-like inputs in fp32/fp64/fp16/bf16"""
    for mode in MODES:
        for dtype in DTYPES:
            x, _, _ = inputs(dtype)
            x = x.reshape(18, 37)  # 481 grid points + 185 MLP activations
            got = ex.gelu(x, approximate=mode)
            label = describe(x=x) + f", approximate={mode!r}"
            expect_tensor(got, shape=tuple(x.shape), dtype=dtype, input=label, hint="same shape and dtype as x")
            expect_close(
                got,
                F.gelu(x.double(), approximate=mode),
                baseline=F.gelu(x, approximate=mode),
                input=label,
                hint="exact: 0.5 x (1 + erf(x / sqrt 2)); tanh: sqrt(2/pi) (x + 0.044715 x^3) inside tanh; "
                "compute in float32 for fp16/bf16",
            )


@checks("gelu")
def gelu_known_values(ex):
    """GELU(0) = 0, GELU(1) = Phi(1) = 0.8413..., GELU(-1) = -0.1587..., minimum about -0.17 near x = -0.75"""
    x = torch.tensor([0.0, 1.0, -1.0, -0.7518], dtype=torch.float64)
    phi1 = 0.5 * (1 + math.erf(1 / math.sqrt(2)))
    expected = torch.tensor(
        [0.0, phi1, -(1 - phi1), -0.7518 * 0.5 * (1 + math.erf(-0.7518 / math.sqrt(2)))], dtype=torch.float64
    )
    got = ex.gelu(x)
    expect_close(
        got,
        expected,
        input="x = [0, 1, -1, -0.7518] float64",
        hint="GELU(x) = x Phi(x) with Phi(x) = 0.5 (1 + erf(x / sqrt 2)): divide by sqrt 2 inside erf",
    )
    tanh_gap = float((ex.gelu(x, "tanh") - got).abs().max())
    expect(
        0 < tanh_gap < 1e-3,
        "the tanh form must differ slightly from the exact one",
        input="the same x",
        expected="0 < |gelu_tanh - gelu| < 1e-3",
        got=f"{tanh_gap:.3g}",
        hint="approximate='tanh' selects the tanh formula, 'none' the erf one",
    )


@checks("gelu")
def gelu_gradients_and_refusals(ex):
    """gradcheck through both forms (float64); approximate='exact' or 'gelu_new' refused with ValueError"""
    x = torch.randn(3, 7, dtype=torch.float64, requires_grad=True)
    for mode in MODES:
        expect_gradcheck(
            lambda t, m=mode: ex.gelu(t, approximate=m),
            (x,),
            input=describe(x=x) + f", {mode!r}",
            hint="tensor ops only: no .item(), no detach, no in-place writes on x",
        )
    for mode in ("exact", "gelu_new", "Tanh"):
        expect_value_error(
            lambda m=mode: ex.gelu(torch.randn(4), approximate=m),
            f"approximate={mode!r}",
            "accept exactly 'none' and 'tanh', like F.gelu",
        )


# ------------------------------------------------------------------------------------------ derivatives


@checks("derivatives")
def gelu_grad_matches_autograd(ex):
    """gelu_grad equals the derivative of F.gelu (autograd, float64) for both forms and four dtypes"""
    for mode in MODES:
        x64, _, _ = inputs(torch.float64)
        oracle = autograd_derivative(lambda t, m=mode: F.gelu(t, approximate=m), x64)
        for dtype in DTYPES:
            x = x64.to(dtype)
            got = ex.gelu_grad(x, approximate=mode)
            label = describe(x=x) + f", approximate={mode!r}"
            expect_tensor(got, shape=tuple(x.shape), dtype=dtype, input=label, hint="same shape and dtype as x")
            baseline = autograd_derivative(lambda t, m=mode: F.gelu(t, approximate=m), x.float()).to(dtype)
            expect_close(
                got,
                oracle,
                baseline=baseline,
                input=label,
                hint="exact: Phi(x) + x phi(x); tanh: 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)",
            )


@checks("derivatives")
def silu_grad_matches_autograd(ex):
    """silu_grad equals the derivative of F.silu (autograd, float64) in four dtypes, tails included"""
    x64, _, _ = inputs(torch.float64)
    x64 = torch.cat([x64, torch.tensor([-200.0, -90.0, 90.0, 200.0], dtype=torch.float64)])
    oracle = autograd_derivative(F.silu, x64)
    for dtype in DTYPES:
        x = x64.to(dtype)
        got = ex.silu_grad(x)
        label = describe(x=x) + ", values in [-200, 200]"
        expect_tensor(got, shape=tuple(x.shape), dtype=dtype, input=label, hint="same shape and dtype as x")
        expect(
            bool(torch.isfinite(got).all()),
            "silu_grad is not finite everywhere",
            input=label,
            got=str(got[~torch.isfinite(got)][:4].tolist()),
            hint="use torch.sigmoid, not 1 / (1 + exp(-x))",
        )
        expect_close(
            got,
            oracle,
            baseline=autograd_derivative(F.silu, x.float()).to(dtype),
            input=label,
            hint="sigmoid(x) (1 + x (1 - sigmoid(x))): not the sigmoid's own derivative s (1 - s)",
        )


@checks("derivatives")
def derivative_shapes_and_zeros(ex):
    """the derivatives vanish at the minima (GELU near -0.7518, SiLU near -1.2785) and equal 0.5 at 0"""
    x = torch.tensor([0.0, -0.7517915, -1.2784645], dtype=torch.float64)
    g, s = ex.gelu_grad(x), ex.silu_grad(x)
    expect(
        abs(float(g[0]) - 0.5) < 1e-12 and abs(float(s[0]) - 0.5) < 1e-12,
        "the slope at 0 must be 1/2",
        input="x = 0",
        expected="0.5 and 0.5",
        got=f"{float(g[0])} and {float(s[0])}",
    )
    expect(
        abs(float(g[1])) < 1e-6 and abs(float(s[2])) < 1e-6,
        "the derivative must vanish at each minimum",
        input="GELU at -0.7517915, SiLU at -1.2784645",
        expected="about 0",
        got=f"{float(g[1]):.3g} and {float(s[2]):.3g}",
        hint="the closed forms of section 2",
    )
    expect_value_error(
        lambda: ex.gelu_grad(torch.randn(3), approximate="erf"), "approximate='erf'", "accept exactly 'none' and 'tanh'"
    )


# ------------------------------------------------------------------------------------------ silu_function


@checks("silu_function")
def forward_matches_f_silu(ex):
    """silu(x) equals F.silu in four dtypes, shapes (481+185,), (5, 37), (2, 3, 4)"""
    for dtype in DTYPES:
        base, _, _ = inputs(torch.float64)
        for x64 in (base, 3 * torch.randn(5, 37, dtype=torch.float64), torch.randn(2, 3, 4, dtype=torch.float64)):
            x = x64.to(dtype)
            got = ex.silu(x)
            label = describe(x=x)
            expect_tensor(got, shape=tuple(x.shape), dtype=dtype, input=label, hint="same shape and dtype as x")
            expect_close(got, F.silu(x.double()), baseline=F.silu(x), input=label, hint="x * sigmoid(x)")


@checks("silu_function")
def backward_is_yours_and_right(ex):
    """gradcheck (float64) through SiLUFunction; its gradient equals F.silu's in fp32/bf16/fp16 with a random grad_out"""
    x = torch.randn(4, 9, dtype=torch.float64, requires_grad=True)
    expect_gradcheck(ex.silu, (x,), input=describe(x=x), hint="backward returns grad_out * silu_grad(x)")
    out = ex.silu(x)
    expect(
        out.grad_fn is not None and "SiLUFunction" in type(out.grad_fn).__name__,
        "silu does not go through SiLUFunction",
        input=describe(x=x),
        got=type(out.grad_fn).__name__ if out.grad_fn is not None else "no grad_fn",
        hint="return SiLUFunction.apply(x)",
    )
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        x64 = 3 * torch.randn(6, 37, dtype=torch.float64)
        grad_out = torch.randn(6, 37, dtype=torch.float64)
        xd = x64.to(dtype).requires_grad_(True)
        ex.silu(xd).backward(grad_out.to(dtype))
        oracle = autograd_derivative(F.silu, x64.to(dtype).double()) * grad_out.to(dtype).double()
        xb = x64.to(dtype).requires_grad_(True)
        F.silu(xb).backward(grad_out.to(dtype))
        label = describe(x=xd) + ", random grad_out"
        expect(
            xd.grad is not None and xd.grad.dtype == dtype,
            "x.grad missing or in another dtype",
            input=label,
            expected=str(dtype),
            got=str(None if xd.grad is None else xd.grad.dtype),
            hint="return the gradient in x's dtype",
        )
        expect_close(xd.grad, oracle, baseline=xb.grad, input=label, hint="multiply by grad_out (chain rule)")


@checks("silu_function")
def saves_only_the_input(ex):
    """forward saves exactly one tensor, x itself (not the output): checked with saved_tensors_hooks"""
    saved = []
    x = torch.randn(3, 5, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        out = ex.silu(x)
    expect(
        len(saved) == 1 and torch.equal(saved[0], x),
        "SiLUFunction must save x and nothing else",
        input=describe(x=x),
        expected="one saved tensor equal to x",
        got=f"{len(saved)} saved tensor(s)",
        hint="ctx.save_for_backward(x) in forward; recompute sigmoid in backward",
    )
    out.sum().backward()
    expect_close(x.grad.double(), autograd_derivative(F.silu, x.double()), input=describe(x=x) + ", grad of sum")
