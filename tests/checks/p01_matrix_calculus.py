"""Checks for p01.matrix_calculus. References: `torch.autograd.grad` through `Tensor.expand`, `sum`/`mean`/`amax`,
`torch.matmul` and `torch.softmax` in float64 (the same ops in float32/float16 as the low-precision baseline);
closed-form Jacobians (W diag(1 - tanh^2), diag(y) - y y^T, a triangular cumsum); and properties of any correct
gradient (softmax's gradient does not change when a constant is added to grad_out)."""

import types

import torch

from llm_algo.check import Checks, describe, expect, expect_close, expect_value_error
from llm_algo.check.restrictions import AUTOGRAD, SOFTMAX

checks = Checks("p01.matrix_calculus")
checks.restrict(
    "unbroadcast",
    "reduction_vjp",
    "matmul_vjp",
    forbid=[*AUTOGRAD, torch.Tensor.sum_to_size],
    instead="write the backward rule with tensor ops (autograd is the checks' reference)",
)
checks.restrict(
    "softmax_vjp",
    forbid=[*AUTOGRAD, *SOFTMAX, torch._softmax_backward_data],
    instead="write y * (grad_out - <grad_out, y>) yourself (autograd through torch.softmax is the reference)",
)


class _InnerCode:
    """A forbidden entry for the function that a transform such as torch.func.jacrev returns: `jacrev(f)` runs no
    torch op itself, its nested `wrapper_fn` does, so the restriction must know that code too (should move into
    llm_algo.check.restrictions: forbid a function together with the functions nested in it)."""

    def __init__(self, function, code):
        self.__code__, self.__module__, self.__qualname__ = code, "torch.func", function.__name__


def _with_inner_functions(*functions):
    entries = []
    for function in functions:
        entries.append(function)
        stack = [function.__code__]
        while stack:
            code = stack.pop()
            for inner in (c for c in code.co_consts if isinstance(c, types.CodeType)):
                entries.append(_InnerCode(function, inner))
                stack.append(inner)
    return entries


checks.restrict(
    "jacobian",
    forbid=_with_inner_functions(
        torch.func.jacrev, torch.func.jacfwd, torch.func.hessian, torch.autograd.functional.jacobian
    ),
    instead="loop over basis vectors with torch.func.jvp / torch.func.vjp",
)


def autograd_vjp(fn, inputs, grad_out):
    """Gradients of every input of fn by torch.autograd.grad, in the inputs' dtype."""
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    out = fn(*leaves)
    return torch.autograd.grad(out, leaves, grad_out)


# ------------------------------------------------------------------------------------------ unbroadcast

HINT_UNBROADCAST = "sum over the leading dims the input lacks, then sum(dim=..., keepdim=True) over its size-1 dims"
BROADCASTS = [
    ((3, 1), (2, 3, 4)),
    ((4,), (2, 3, 4)),
    ((2, 1, 4), (2, 3, 4)),
    ((1, 1), (5, 7)),
    ((), (3, 2)),
    ((5, 7), (5, 7)),
    ((1,), (1,)),
    ((6, 1, 1), (2, 6, 5, 3)),
    ((1, 5, 1), (1, 5, 3)),
    ((1, 3), (2, 3)),
    ((2, 1), (2, 2)),
]


@checks("unbroadcast")
def small_case_by_hand(ex):
    """grad = arange over (2, 3), shape (3,) -> column sums [3, 5, 7]; shape (2, 1) -> row sums [[3], [12]]"""
    grad = torch.arange(6.0).reshape(2, 3)
    for shape, want in (((3,), torch.tensor([3.0, 5.0, 7.0])), ((2, 1), torch.tensor([[3.0], [12.0]]))):
        got = ex.unbroadcast(grad.clone(), shape)
        expect_close(got, want.double(), input=f"grad = arange(6).reshape(2, 3), shape {shape}", hint=HINT_UNBROADCAST)


@checks("unbroadcast")
def matches_autograd_of_expand(ex):
    """leading dims, size-1 dims, a scalar, no broadcast at all: equal to autograd through x.expand(out_shape)"""
    for shape, out_shape in BROADCASTS:
        grad = torch.randn(out_shape, dtype=torch.float64)
        (want,) = autograd_vjp(lambda x, s=out_shape: x.expand(s), [torch.randn(shape, dtype=torch.float64)], grad)
        got = ex.unbroadcast(grad.clone(), shape)
        expect_close(got, want, input=f"grad {out_shape}, shape {shape}", hint=HINT_UNBROADCAST)


@checks("unbroadcast")
def unbroadcast_low_precision(ex):
    """float32 and float16 gradients keep their dtype and stay within the policy's tolerance of autograd"""
    for dtype in (torch.float32, torch.float16):
        for shape, out_shape in BROADCASTS[:4]:
            grad = torch.randn(out_shape, dtype=torch.float64)
            (want,) = autograd_vjp(lambda x, s=out_shape: x.expand(s), [torch.randn(shape, dtype=torch.float64)], grad)
            (baseline,) = autograd_vjp(
                lambda x, s=out_shape: x.expand(s), [torch.randn(shape, dtype=dtype)], grad.to(dtype)
            )
            got = ex.unbroadcast(grad.to(dtype), shape)
            expect(
                isinstance(got, torch.Tensor) and got.dtype == dtype,
                "the gradient changed dtype",
                input=f"grad {out_shape} {dtype}, shape {shape}",
                expected=str(dtype),
                got=str(getattr(got, "dtype", type(got).__name__)),
                hint="sum in the gradient's dtype; do not convert",
            )
            expect_close(
                got, want, baseline=baseline, input=f"grad {out_shape} {dtype}, shape {shape}", hint=HINT_UNBROADCAST
            )


@checks("unbroadcast")
def refuses_shapes_that_do_not_broadcast(ex):
    """a shape with more dims than the gradient, or a size that is neither 1 nor the gradient's: ValueError"""
    ex.unbroadcast(torch.randn(2, 3), (3,))  # first: it works at all
    for shape, out_shape in (((2, 3, 4), (3, 4)), ((2,), (2, 3)), ((2, 4), (3, 4)), ((4, 1), (3, 2))):
        expect_value_error(
            lambda shape=shape, out_shape=out_shape: ex.unbroadcast(torch.randn(out_shape), shape),
            f"grad {out_shape}, shape {shape}",
            "check from the right that each size of shape is 1 or the gradient's, and that shape has no more dims",
        )


# ------------------------------------------------------------------------------------------ reduction_vjp

HINT_REDUCTION = (
    "unsqueeze the reduced dims back when keepdim=False; sum: expand; mean: expand / count; "
    "amax: grad to the maxima, divided by the number of ties"
)
REDUCTIONS = [
    ((4, 5), 1, False),
    ((4, 5), -1, True),
    ((3, 4, 5), (0, 2), False),
    ((3, 4, 5), (2, 0), True),
    ((2, 3, 4, 5), (-1, 1), False),
    ((7,), 0, False),
    ((3, 1, 4), 1, False),
]


def reference_reduction(op, x, grad_out, dim, keepdim):
    dims = dim if isinstance(dim, tuple) else (dim,)
    return autograd_vjp(lambda t: getattr(t, op)(dim=dims, keepdim=keepdim), [x], grad_out)[0]


@checks("reduction_vjp")
def reduction_matches_autograd(ex):
    """sum, mean and amax over one or several dims (negative, unordered), with and without keepdim: float64 autograd"""
    for op in ("sum", "mean", "amax"):
        for shape, dim, keepdim in REDUCTIONS:
            x = torch.randn(shape, dtype=torch.float64)
            out_shape = getattr(x, op)(dim=dim, keepdim=keepdim).shape
            grad_out = torch.randn(out_shape, dtype=torch.float64)
            want = reference_reduction(op, x, grad_out, dim, keepdim)
            got = ex.reduction_vjp(x.clone(), grad_out.clone(), op, dim, keepdim)
            label = f"{op} over dim={dim}, keepdim={keepdim}; {describe(x=x)}"
            expect_close(got, want, input=label, hint=HINT_REDUCTION)


@checks("reduction_vjp")
def amax_ties_share_the_gradient(ex):
    """amax of rows with tied maxima (integers): each tied maximum gets grad / number of ties, as autograd does"""
    x = torch.tensor([[3.0, 1.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0], [-1.0, 5.0, 4.0, 5.0]], dtype=torch.float64)
    x = x[:, torch.randperm(4)]
    grad_out = torch.randn(3, dtype=torch.float64)
    want = reference_reduction("amax", x, grad_out, 1, False)
    got = ex.reduction_vjp(x.clone(), grad_out.clone(), "amax", 1, False)
    expect_close(got, want, input=f"x = {x.tolist()}, amax over dim=1", hint="ties share the gradient equally")
    x3 = torch.randint(0, 3, (2, 3, 4)).double()
    grad_out = torch.randn(3, dtype=torch.float64)
    want = reference_reduction("amax", x3, grad_out, (0, 2), False)
    got = ex.reduction_vjp(x3.clone(), grad_out.clone(), "amax", (0, 2), False)
    expect_close(
        got,
        want,
        input="integer x (2, 3, 4) in [0, 3), amax over dims (0, 2)",
        hint="count ties over all reduced dims",
    )


@checks("reduction_vjp")
def reduction_float32_and_refusal(ex):
    """float32 inputs keep their dtype within tolerance; an unknown op ("max", "prod") raises ValueError"""
    x = torch.randn(6, 9)
    grad_out = torch.randn(6)
    for op in ("sum", "mean", "amax"):
        want = reference_reduction(op, x.double(), grad_out.double(), 1, False)
        baseline = reference_reduction(op, x, grad_out, 1, False)
        got = ex.reduction_vjp(x.clone(), grad_out.clone(), op, 1, False)
        expect_close(got, want, baseline=baseline, input=f"{op} over dim=1; {describe(x=x)}", hint=HINT_REDUCTION)
    for op in ("max", "prod"):
        expect_value_error(
            lambda op=op: ex.reduction_vjp(x, grad_out, op, 1, False), f"op={op!r}", "accept only sum, mean, amax"
        )


# ------------------------------------------------------------------------------------------ matmul_vjp

HINT_MATMUL = "grad_a = grad_out @ b^T, grad_b = a^T @ grad_out (transpose the last two dims), then unbroadcast each"
MATMULS = [
    ((3, 4), (4, 5)),
    ((1, 7), (7, 1)),
    ((2, 3, 4), (4, 5)),
    ((3, 4), (2, 4, 5)),
    ((2, 1, 3, 4), (5, 4, 6)),
    ((1, 3, 4), (6, 4, 2)),
]


def reference_matmul(a, b, grad_out):
    return autograd_vjp(torch.matmul, [a, b], grad_out)


@checks("matmul_vjp")
def two_d_matches_autograd(ex):
    """2-D products (square, row times column, rectangular): grad_a and grad_b equal float64 autograd"""
    for a_shape, b_shape in [((4, 4), (4, 4)), *MATMULS[:2], ((5, 3), (3, 2))]:
        a, b = torch.randn(a_shape, dtype=torch.float64), torch.randn(b_shape, dtype=torch.float64)
        grad_out = torch.randn((a @ b).shape, dtype=torch.float64)
        want_a, want_b = reference_matmul(a, b, grad_out)
        got_a, got_b = ex.matmul_vjp(a.clone(), b.clone(), grad_out.clone())
        label = describe(a=a, b=b)
        expect_close(got_a, want_a, input=label, hint=HINT_MATMUL, what="grad_a")
        expect_close(got_b, want_b, input=label, hint=HINT_MATMUL, what="grad_b")


@checks("matmul_vjp")
def broadcast_batches_match_autograd(ex):
    """batched a or b, a shared (K, N) weight, broadcast size-1 batch dims: gradients summed back to each shape"""
    for a_shape, b_shape in MATMULS[2:]:
        a, b = torch.randn(a_shape, dtype=torch.float64), torch.randn(b_shape, dtype=torch.float64)
        grad_out = torch.randn((a @ b).shape, dtype=torch.float64)
        want_a, want_b = reference_matmul(a, b, grad_out)
        got_a, got_b = ex.matmul_vjp(a.clone(), b.clone(), grad_out.clone())
        label = describe(a=a, b=b)
        expect_close(got_a, want_a, input=label, hint=HINT_MATMUL, what="grad_a")
        expect_close(got_b, want_b, input=label, hint=HINT_MATMUL, what="grad_b")


@checks("matmul_vjp")
def matmul_float32_and_refusal(ex):
    """float32 within the policy's tolerance of autograd; a 1-D operand or mismatched inner sizes raise ValueError"""
    a, b = torch.randn(3, 17, 33), torch.randn(33, 9)
    grad_out = torch.randn(3, 17, 9)
    want_a, want_b = reference_matmul(a.double(), b.double(), grad_out.double())
    base_a, base_b = reference_matmul(a, b, grad_out)
    got_a, got_b = ex.matmul_vjp(a.clone(), b.clone(), grad_out.clone())
    expect_close(got_a, want_a, baseline=base_a, input=describe(a=a, b=b), hint=HINT_MATMUL, what="grad_a")
    expect_close(got_b, want_b, baseline=base_b, input=describe(a=a, b=b), hint=HINT_MATMUL, what="grad_b")
    for a_shape, b_shape in (((4,), (4, 3)), ((3, 4), (4,)), ((3, 4), (5, 2))):
        expect_value_error(
            lambda a_shape=a_shape, b_shape=b_shape: ex.matmul_vjp(
                torch.randn(a_shape), torch.randn(b_shape), torch.randn(3, 3)
            ),
            f"a {a_shape}, b {b_shape}",
            "check that both are at least 2-D and a.shape[-1] == b.shape[-2]",
        )


# ------------------------------------------------------------------------------------------ softmax_vjp

HINT_SOFTMAX = "y * (grad_out - (grad_out * y).sum(dim, keepdim=True))"


def reference_softmax(x, grad_out, dim):
    return autograd_vjp(lambda t: torch.softmax(t, dim=dim), [x], grad_out)[0]


@checks("softmax_vjp")
def softmax_matches_autograd(ex):
    """several shapes and dims (last, first, middle), float64: equal to autograd through torch.softmax"""
    for shape, dim in (((5,), 0), ((4, 7), -1), ((4, 7), 0), ((2, 3, 6), 1), ((1, 1, 9), -1)):
        x = torch.randn(shape, dtype=torch.float64) * 2
        grad_out = torch.randn(shape, dtype=torch.float64)
        y = torch.softmax(x, dim=dim)
        got = ex.softmax_vjp(y.clone(), grad_out.clone(), dim)
        expect_close(got, reference_softmax(x, grad_out, dim), input=f"{describe(x=x)}, dim={dim}", hint=HINT_SOFTMAX)


@checks("softmax_vjp")
def shift_of_grad_out_changes_nothing(ex):
    """adding a constant per row to grad_out leaves the gradient unchanged (rows of J sum to zero); y one-hot-like"""
    x = torch.randn(6, 10, dtype=torch.float64) * 30  # large logits: y is nearly one-hot
    y = torch.softmax(x, dim=-1)
    grad_out = torch.randn(6, 10, dtype=torch.float64)
    shift = torch.randn(6, 1, dtype=torch.float64) * 5
    want = reference_softmax(x, grad_out, -1)
    first = ex.softmax_vjp(y.clone(), grad_out.clone(), -1)
    expect_close(first, want, input=f"{describe(x=x)} (logits x30)", hint=HINT_SOFTMAX)
    shifted = ex.softmax_vjp(y.clone(), (grad_out + shift).clone(), -1)
    expect_close(shifted, want, input="grad_out + a random constant per row", hint="subtract <grad_out, y> per row")


@checks("softmax_vjp")
def softmax_low_precision(ex):
    """float32 and float16 attention-like rows (T = 37): within the policy's tolerance, dtype kept"""
    for dtype in (torch.float32, torch.float16):
        x = torch.randn(2, 4, 37, dtype=torch.float64) * 3
        grad_out = torch.randn(2, 4, 37, dtype=torch.float64)
        want = reference_softmax(x, grad_out, -1)
        baseline = reference_softmax(x.to(dtype), grad_out.to(dtype), -1)
        y = torch.softmax(x, dim=-1).to(dtype)
        got = ex.softmax_vjp(y, grad_out.to(dtype), -1)
        expect(
            isinstance(got, torch.Tensor) and got.dtype == dtype,
            "the gradient changed dtype",
            input=f"y (2, 4, 37) {dtype}",
            expected=str(dtype),
            got=str(getattr(got, "dtype", type(got).__name__)),
            hint="compute in y's dtype",
        )
        expect_close(got, want, baseline=baseline, input=f"y (2, 4, 37) {dtype}", hint=HINT_SOFTMAX)


# ------------------------------------------------------------------------------------------ jacobian

HINT_JACOBIAN = "forward: column j = jvp(f, (x,), (e_j,))[1]; reverse: row i = vjp_fn(e_i)[0]; result (m, n)"


def closed_forms(n: int):
    W = torch.randn(n + 2, n, dtype=torch.float64)
    x = torch.randn(n, dtype=torch.float64)
    y = torch.softmax(x, dim=0)
    return x, [
        ("W @ tanh(x), W (n+2, n)", lambda v: W @ torch.tanh(v), W * (1 - torch.tanh(x) ** 2)),
        ("softmax(x)", lambda v: torch.softmax(v, dim=0), torch.diag(y) - torch.outer(y, y)),
        ("cumsum(x)[:3]", lambda v: torch.cumsum(v, dim=0)[:3], torch.tril(torch.ones(n, n, dtype=torch.float64))[:3]),
    ]


@checks("jacobian")
def forward_mode_matches_closed_forms(ex):
    """mode="forward": W diag(1 - tanh^2), diag(y) - y y^T, a triangular cumsum (rectangular m != n)"""
    for n in (1, 5):
        x, cases = closed_forms(n)
        for name, f, want in cases:
            got = ex.jacobian(f, x.clone(), "forward")
            expect_close(got, want, input=f"{name}, x ({n},), mode forward", hint=HINT_JACOBIAN)


@checks("jacobian")
def reverse_mode_matches_closed_forms(ex):
    """mode="reverse": the same closed forms, rows from VJPs"""
    for n in (1, 5):
        x, cases = closed_forms(n)
        for name, f, want in cases:
            got = ex.jacobian(f, x.clone(), "reverse")
            expect_close(got, want, input=f"{name}, x ({n},), mode reverse", hint=HINT_JACOBIAN)


@checks("jacobian")
def adjoint_identity_and_refusal(ex):
    """u . (J v) == (J^T u) . v for both modes on a nonlinear f: (6,) -> (4,); bad mode or 2-D x: ValueError"""
    A = torch.randn(4, 6, dtype=torch.float64)
    f = lambda v: torch.sin(A @ v) * v[:4] ** 2  # noqa: E731
    x = torch.randn(6, dtype=torch.float64)
    J_fwd = ex.jacobian(f, x.clone(), "forward")
    J_rev = ex.jacobian(f, x.clone(), "reverse")
    expect_close(J_fwd, J_rev, input="sin(A x) * x[:4]**2, forward vs reverse", hint=HINT_JACOBIAN)
    u, v = torch.randn(4, dtype=torch.float64), torch.randn(6, dtype=torch.float64)
    want = torch.func.jvp(f, (x,), (v,))[1] @ u
    expect_close(u @ J_fwd @ v, want, input="u . (J v) with u (4,), v (6,)", hint=HINT_JACOBIAN, what="u^T J v")
    for mode, xs in (("backward", x), ("forward", x.reshape(2, 3))):
        expect_value_error(
            lambda mode=mode, xs=xs: ex.jacobian(f, xs, mode),
            f"mode={mode!r}, x {tuple(xs.shape)}",
            "accept only 'forward'/'reverse' and a 1-D x",
        )
