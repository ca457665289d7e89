"""Checks for p01.optimization_geometry. References: the closed form x_k = x* + Q (1 - lr Lambda)^k Q^T (x0 - x*)
through `torch.linalg.eigh`; runs of gradient descent (written here) that must diverge above and converge below the
learner's step limit, and the contraction per step measured along the slowest and fastest eigenvectors; closed forms
for diagonal matrices; a null-space solution of the constrained problem (`torch.linalg.qr`), and the KKT conditions
checked on the learner's answer."""

import math

import torch

from llm_algo.check import Checks, describe, expect, expect_close, expect_value_error
from llm_algo.check.restrictions import AUTOGRAD

checks = Checks("p01.optimization_geometry")
checks.restrict(
    "gradient_descent",
    forbid=[*AUTOGRAD, "torch.optim"],
    instead="write the gradient A x - b and the update yourself",
)


def spd(n: int, kappa: float, dtype=torch.float64) -> torch.Tensor:
    """A random symmetric positive definite (n, n) matrix with eigenvalues from 1 to kappa."""
    q, _ = torch.linalg.qr(torch.randn(n, n, dtype=torch.float64))
    eigenvalues = torch.logspace(0, math.log10(kappa), n, dtype=torch.float64) if n > 1 else torch.ones(1)
    return ((q * eigenvalues) @ q.T).to(dtype)


# ------------------------------------------------------------------------------------------ gradient_descent

HINT_GD = "x_{k+1} = x_k - lr * (A @ x_k - b); return torch.stack([x0, x1, ..., x_steps])"


def closed_form_iterates(A, b, x0, lr, steps):
    eigenvalues, q = torch.linalg.eigh(A.double())
    x_star = torch.linalg.solve(A.double(), b.double())
    error = q.T @ (x0.double() - x_star)  # in the eigenbasis
    return torch.stack([x_star + q @ ((1 - lr * eigenvalues) ** k * error) for k in range(steps + 1)])


@checks("gradient_descent")
def matches_closed_form(ex):
    """random SPD matrices (n = 1, 2, 5, 8; kappa up to 50), several step sizes: equal to x* + (I - lr A)^k (x0 - x*)"""
    for n, kappa, fraction, steps in ((2, 10.0, 0.5, 12), (5, 50.0, 0.9, 30), (8, 3.0, 0.3, 7), (1, 1.0, 0.7, 5)):
        A = spd(n, kappa)
        b, x0 = torch.randn(n, dtype=torch.float64), torch.randn(n, dtype=torch.float64)
        lr = fraction * 2 / torch.linalg.eigvalsh(A)[-1].item()
        got = ex.gradient_descent(A.clone(), b.clone(), x0.clone(), lr, steps)
        label = f"{describe(A=A)}, kappa={kappa:g}, lr={lr:.4g}, steps={steps}"
        expect_close(got, closed_form_iterates(A, b, x0, lr, steps), input=label, hint=HINT_GD)


@checks("gradient_descent")
def by_hand_and_float32(ex):
    """A = diag(1, 4), b = (1, 2), x0 = 0, lr = 0.25: x1 = (0.25, 0.5), x2 = (0.4375, 0.5); float32 keeps its dtype"""
    A = torch.diag(torch.tensor([1.0, 4.0]))
    got = ex.gradient_descent(A, torch.tensor([1.0, 2.0]), torch.zeros(2), 0.25, 2)
    want = torch.tensor([[0.0, 0.0], [0.25, 0.5], [0.4375, 0.5]], dtype=torch.float64)
    expect_close(got, want, input="A = diag(1, 4), b = (1, 2), x0 = 0, lr = 0.25, steps = 2 (float32)", hint=HINT_GD)
    A = spd(6, 20.0, torch.float32)
    b, x0 = torch.randn(6), torch.randn(6)
    got = ex.gradient_descent(A, b, x0, 0.05, 25)
    want = closed_form_iterates(A.double(), b.double(), x0.double(), 0.05, 25)
    baseline = closed_form_iterates(A, b, x0, 0.05, 25).float()
    expect_close(got, want, baseline=baseline, input=f"{describe(A=A)}, lr=0.05, 25 steps", hint=HINT_GD)


@checks("gradient_descent")
def zero_steps_and_refusals(ex):
    """steps=0 returns x0 alone, shape (1, n); non-square A, mismatched b, lr <= 0 or steps < 0: ValueError"""
    A, b, x0 = spd(3, 5.0), torch.randn(3, dtype=torch.float64), torch.randn(3, dtype=torch.float64)
    expect_close(ex.gradient_descent(A, b, x0, 0.1, 0), x0[None], input="steps=0", hint="the first row is x0")
    bad = [
        (torch.randn(3, 4, dtype=torch.float64), b, x0, 0.1, 3, "A (3, 4)"),
        (A, torch.randn(4, dtype=torch.float64), x0, 0.1, 3, "b (4,)"),
        (A, b, x0, 0.0, 3, "lr=0"),
        (A, b, x0, -0.1, 3, "lr=-0.1"),
        (A, b, x0, 0.1, -1, "steps=-1"),
    ]
    for A_, b_, x_, lr, steps, label in bad:
        expect_value_error(
            lambda A_=A_, b_=b_, x_=x_, lr=lr, steps=steps: ex.gradient_descent(A_, b_, x_, lr, steps),
            label,
            "check the shapes, lr > 0 and steps >= 0 first",
        )


# ------------------------------------------------------------------------------------------ step_size_limits

HINT_LIMITS = (
    "kappa = l_max / l_min; lr_max = 2 / l_max; lr_best = 2 / (l_min + l_max); rate = (kappa - 1) / (kappa + 1)"
)
KEYS = ("condition_number", "lr_max", "lr_best", "rate")


def expect_limits(got, label):
    expect(
        isinstance(got, dict) and set(got) == set(KEYS),
        "the result is not a dict with the four keys",
        input=label,
        expected=str(list(KEYS)),
        got=repr(got)[:160],
        hint="return {'condition_number': ..., 'lr_max': ..., 'lr_best': ..., 'rate': ...}",
    )
    for key in KEYS:
        expect(
            isinstance(got[key], float),
            f"{key} is not a Python float",
            input=label,
            expected="float",
            got=type(got[key]).__name__,
            hint="use .item() on tensors",
        )


def gd_error(A, lr, start, steps):
    e = start.clone()
    for _ in range(steps):
        e = e - lr * (A @ e)  # error recurrence of gradient descent (b drops out)
    return e


@checks("step_size_limits")
def diagonal_closed_forms(ex):
    """diag(1, 100): kappa 100, lr_max 0.02, lr_best 2/101, rate 99/101; diag(3, 3, 3): kappa 1, rate 0"""
    cases = [((1.0, 100.0), 100.0, 0.02, 2 / 101, 99 / 101), ((3.0, 3.0, 3.0), 1.0, 2 / 3, 1 / 3, 0.0)]
    cases.append(((0.5, 2.0, 8.0, 1.0), 16.0, 0.25, 2 / 8.5, 15 / 17))
    for diagonal, kappa, lr_max, lr_best, rate in cases:
        A = torch.diag(torch.tensor(diagonal, dtype=torch.float64))
        got = ex.step_size_limits(A)
        label = f"A = diag{diagonal}"
        expect_limits(got, label)
        for key, want in zip(KEYS, (kappa, lr_max, lr_best, rate), strict=True):
            expect(
                math.isclose(got[key], want, rel_tol=1e-9, abs_tol=1e-12),
                f"wrong {key}",
                input=label,
                expected=f"{want:.6g}",
                got=f"{got[key]:.6g}",
                hint=HINT_LIMITS,
            )


@checks("step_size_limits")
def divergence_and_contraction_measured(ex):
    """random SPD (kappa 10, 300): GD diverges at 1.01 lr_max, converges at 0.99 lr_max; measured rate at lr_best"""
    for n, kappa in ((4, 10.0), (7, 300.0)):
        A = spd(n, kappa)
        got = ex.step_size_limits(A.clone())
        label = f"{describe(A=A)} with kappa={kappa:g}"
        expect_limits(got, label)
        eigenvalues, q = torch.linalg.eigh(A)
        start = q.sum(dim=1)  # every eigen-direction present
        steps = 400
        above = gd_error(A, 1.01 * got["lr_max"], start, steps).norm().item()
        below = gd_error(A, 0.99 * got["lr_max"], start, steps).norm().item()
        expect(
            above > start.norm().item() > below,
            "gradient descent does not switch from converging to diverging at lr_max",
            input=label,
            expected="error grows at 1.01 lr_max and shrinks at 0.99 lr_max",
            got=f"|e_400| = {above:.3g} at 1.01 lr_max, {below:.3g} at 0.99 lr_max (|e_0| = {start.norm():.3g})",
            hint="the limit is 2 / largest eigenvalue",
        )
        for direction in (q[:, 0], q[:, -1]):  # the slowest and the fastest: both contract by `rate` at lr_best
            one_step = gd_error(A, got["lr_best"], direction, 1).norm().item()
            expect(
                math.isclose(one_step, got["rate"], rel_tol=1e-6),
                "the contraction per step at lr_best is not `rate`",
                input=f"{label}, start on an extreme eigenvector",
                expected=f"|e_1| / |e_0| = {one_step:.6g} (measured)",
                got=f"rate = {got['rate']:.6g}",
                hint=HINT_LIMITS,
            )
        expect(
            math.isclose(got["condition_number"], (eigenvalues[-1] / eigenvalues[0]).item(), rel_tol=1e-6),
            "wrong condition number",
            input=label,
            expected=f"{(eigenvalues[-1] / eigenvalues[0]).item():.6g}",
            got=f"{got['condition_number']:.6g}",
            hint=HINT_LIMITS,
        )


@checks("step_size_limits")
def float32_matrix_in_float64(ex):
    """a float32 A with kappa = 1e4: the limits of that matrix computed in float64 (float32 eigenvalues are off ~1e-3)"""
    A = spd(12, 1e4, torch.float32)
    A = (A + A.T) / 2
    eigenvalues = torch.linalg.eigvalsh(A.double())
    smallest, largest = eigenvalues[0].item(), eigenvalues[-1].item()
    want = {
        "condition_number": largest / smallest,
        "lr_max": 2 / largest,
        "lr_best": 2 / (smallest + largest),
        "rate": (largest - smallest) / (largest + smallest),
    }
    got = ex.step_size_limits(A)
    label = f"{describe(A=A)}, kappa about 1e4"
    expect_limits(got, label)
    for key in KEYS:
        expect(
            math.isclose(got[key], want[key], rel_tol=1e-7),
            f"wrong {key}",
            input=label,
            expected=f"{want[key]:.9g} (eigenvalues of A.double())",
            got=f"{got[key]:.9g}",
            hint="compute the eigenvalues in float64: float32 loses about 1e-3 of the smallest one at kappa 1e4",
        )


@checks("step_size_limits")
def refuses_what_is_not_positive_definite(ex):
    """not square, not symmetric, singular or indefinite: ValueError"""
    ex.step_size_limits(spd(3, 4.0))  # first: it works at all
    bad = [
        (torch.randn(3, 4, dtype=torch.float64), "A (3, 4)"),
        (torch.tensor([[2.0, 1.0], [0.0, 2.0]], dtype=torch.float64), "not symmetric [[2, 1], [0, 2]]"),
        (torch.diag(torch.tensor([1.0, 0.0], dtype=torch.float64)), "singular diag(1, 0)"),
        (torch.diag(torch.tensor([2.0, -1.0], dtype=torch.float64)), "indefinite diag(2, -1)"),
    ]
    for A, label in bad:
        expect_value_error(
            lambda A=A: ex.step_size_limits(A), label, "check symmetry and the smallest eigenvalue > 0 first"
        )


# ------------------------------------------------------------------------------------------ constrained_minimum

HINT_KKT = "solve [[A, C^T], [C, 0]] [x; lam] = [b; d] and split the solution into x (n,) and lam (m,)"


def null_space_solution(A, b, C, d):
    """x = x_p + N z with C x_p = d (least norm) and N a basis of null(C); z minimises the reduced quadratic."""
    m, n = C.shape
    x_p = torch.linalg.lstsq(C, d[:, None]).solution[:, 0]
    q, _ = torch.linalg.qr(C.T, mode="complete")
    N = q[:, m:]  # (n, n - m), orthonormal, C N = 0
    z = torch.linalg.solve(N.T @ A @ N, N.T @ (b - A @ x_p))
    x = x_p + N @ z
    lam = torch.linalg.lstsq(C.T, (b - A @ x)[:, None]).solution[:, 0]  # A x - b = -C^T lam
    return x, lam


@checks("constrained_minimum")
def matches_null_space_method(ex):
    """random problems (n = 2..7, m = 1..n-1): x and lam equal the null-space solution"""
    for n, m in ((2, 1), (5, 2), (7, 6), (4, 1)):
        A, b = spd(n, 20.0), torch.randn(n, dtype=torch.float64)
        C, d = torch.randn(m, n, dtype=torch.float64), torch.randn(m, dtype=torch.float64)
        want_x, want_lam = null_space_solution(A, b, C, d)
        got = ex.constrained_minimum(A.clone(), b.clone(), C.clone(), d.clone())
        expect(
            isinstance(got, tuple) and len(got) == 2,
            "the result is not a pair (x, lam)",
            input=describe(A=A, C=C),
            expected="(x, lam)",
            got=type(got).__name__,
            hint="return x, lam",
        )
        label = f"{describe(A=A, C=C)}"
        expect_close(got[0], want_x, input=label, hint=HINT_KKT, what="x")
        expect_close(got[1], want_lam, input=label, hint=HINT_KKT + " (grad f(x) = A x - b = -C^T lam)", what="lam")


@checks("constrained_minimum")
def kkt_conditions_hold(ex):
    """on the answer: C x = d, A x - b + C^T lam = 0, and any feasible step raises f (a minimum, not a saddle)"""
    n, m = 6, 2
    A, b = spd(n, 8.0), torch.randn(n, dtype=torch.float64)
    C, d = torch.randn(m, n, dtype=torch.float64), torch.randn(m, dtype=torch.float64)
    x, lam = ex.constrained_minimum(A, b, C, d)
    label = describe(A=A, C=C)
    expect_close(C @ x, d, input=label, hint="x must satisfy the constraints", what="C x")
    expect_close(
        A @ x - b + C.T @ lam, torch.zeros(n, dtype=torch.float64), input=label, hint=HINT_KKT, what="stationarity"
    )
    f = lambda v: 0.5 * v @ A @ v - b @ v  # noqa: E731
    q, _ = torch.linalg.qr(C.T, mode="complete")
    for column in range(m, n):
        step = 0.1 * q[:, column]  # feasible direction: C step = 0
        expect(
            f(x + step) > f(x) and f(x - step) > f(x),
            "a feasible step lowers f: x is not the constrained minimum",
            input=label,
            expected=f"f(x +- step) > f(x) = {f(x):.6g}",
            got=f"{f(x + step):.6g}, {f(x - step):.6g}",
            hint=HINT_KKT,
        )


@checks("constrained_minimum")
def sensitivity_and_refusal(ex):
    """lam is the price of the constraint: f* moves by -lam * delta when d moves by delta; bad shapes: ValueError"""
    A = torch.diag(torch.tensor([2.0, 4.0], dtype=torch.float64))
    b = torch.tensor([1.0, -1.0], dtype=torch.float64)
    C = torch.tensor([[1.0, 1.0]], dtype=torch.float64)
    f = lambda v: 0.5 * v @ A @ v - b @ v  # noqa: E731
    x, lam = ex.constrained_minimum(A, b, C, torch.tensor([1.0], dtype=torch.float64))
    # by hand: 2 x1 - 1 + l = 0, 4 x2 + 1 + l = 0, x1 + x2 = 1  ->  x = (1, 0), l = -1
    expect_close(
        x,
        torch.tensor([1.0, 0.0], dtype=torch.float64),
        input="A = diag(2, 4), b = (1, -1), x1 + x2 = 1",
        hint=HINT_KKT,
        what="x",
    )
    expect_close(
        lam,
        torch.tensor([-1.0], dtype=torch.float64),
        input="A = diag(2, 4), b = (1, -1), x1 + x2 = 1",
        hint=HINT_KKT,
        what="lam",
    )
    delta = 1e-6
    x2, _ = ex.constrained_minimum(A, b, C, torch.tensor([1.0 + delta], dtype=torch.float64))
    slope = (f(x2) - f(x)).item() / delta
    expect(
        math.isclose(slope, -lam.item(), rel_tol=1e-4),
        "f* does not change by -lam per unit of d",
        input="x1 + x2 = 1 + delta",
        expected=f"df*/dd = -lam = {-lam.item():.6g}",
        got=f"{slope:.6g}",
        hint="the multiplier's sign: grad f(x) = -C^T lam",
    )
    for args, label in (
        ((A, b, torch.randn(1, 3, dtype=torch.float64), torch.ones(1, dtype=torch.float64)), "C (1, 3) for n = 2"),
        ((A, b, C, torch.ones(2, dtype=torch.float64)), "d (2,) for m = 1"),
        ((A, torch.ones(3, dtype=torch.float64), C, torch.ones(1, dtype=torch.float64)), "b (3,)"),
    ):
        expect_value_error(lambda args=args: ex.constrained_minimum(*args), label, "check every shape first")
