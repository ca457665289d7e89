"""The tolerance policy, in one place.

Every numerical check compares against a float64 oracle. An element passes when its error is within
the `torch.testing.assert_close` default tolerance of the dtype under test,

    |got - oracle| <= atol + rtol * |oracle|,

and, when the check also passes a *baseline* (a straightforward PyTorch implementation run in the same
dtype), the allowance widens to BASELINE_FACTOR times the worst error the baseline itself makes on the
same input, measured in the same units. So a learner is never asked to beat PyTorch, and never allowed
to be much worse than it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

# (rtol, atol): the defaults of torch.testing.assert_close for each dtype.
DEFAULT_TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1.3e-6, 1e-5),
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
}
BASELINE_FACTOR = 4.0


def tolerance_for(dtype: torch.dtype) -> tuple[float, float]:
    return DEFAULT_TOLERANCES.get(dtype, (0.0, 0.0))  # integer and bool results must be exact


@dataclass(frozen=True)
class Mismatch:
    """Why `got` is not close to `oracle`: a one-line summary and the worst element."""

    summary: str
    expected: str
    got: str


def _error_ratio(candidate: torch.Tensor, oracle: torch.Tensor, rtol: float, atol: float) -> torch.Tensor:
    """Elementwise error in units of the allowance: <= 1 means within the dtype's default tolerance."""
    both_nan = candidate.isnan() & oracle.isnan()
    same_inf = candidate.isinf() & oracle.isinf() & (candidate == oracle)
    diff = (candidate - oracle).abs()
    ratio = diff / (atol + rtol * oracle.abs()) if (atol or rtol) else torch.where(diff == 0, 0.0, torch.inf)
    ratio = torch.where(both_nan | same_inf, torch.zeros_like(ratio), ratio)
    return torch.nan_to_num(ratio, nan=torch.inf, posinf=torch.inf)  # nan_to_num would turn inf into a finite max


def mismatch(
    got: torch.Tensor,
    oracle: torch.Tensor,
    *,
    dtype: torch.dtype | None = None,
    baseline: torch.Tensor | None = None,
) -> Mismatch | None:
    """None when `got` is close enough to the float64 `oracle` for `dtype` (default: got's dtype)."""
    dtype = dtype or got.dtype
    rtol, atol = tolerance_for(dtype)
    got64 = got.detach().to("cpu", torch.float64)
    oracle64 = oracle.detach().to("cpu", torch.float64)
    ratio = _error_ratio(got64, oracle64, rtol, atol)
    allowed = 1.0
    if baseline is not None:
        baseline_ratio = _error_ratio(baseline.detach().to("cpu", torch.float64), oracle64, rtol, atol)
        baseline_ratio = baseline_ratio[baseline_ratio.isfinite()]  # a baseline that overflows excuses nothing
        allowed = max(1.0, BASELINE_FACTOR * float(baseline_ratio.max()) if baseline_ratio.numel() else 1.0)
    if ratio.numel() == 0 or float(ratio.max()) <= allowed:
        return None
    worst = int(ratio.argmax())
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), ratio.shape)) if ratio.dim() else ()
    bad = int((ratio > allowed).sum())
    abs_err = float((got64 - oracle64).abs().nan_to_num(nan=torch.inf, posinf=torch.inf).max())
    rule = f"rtol={rtol:g}, atol={atol:g} for {str(dtype).removeprefix('torch.')}"
    if allowed > 1.0:
        rule += f", widened {allowed:.3g}x to {BASELINE_FACTOR:g}x PyTorch's own error in this dtype"
    want, have = float(oracle64.flatten()[worst]), float(got64.flatten()[worst])
    shown_want, shown_have = distinct_digits(want, have)
    allowance = allowed * (atol + rtol * abs(want))
    return Mismatch(
        summary=f"{bad} of {ratio.numel()} elements off; max abs error {abs_err:.3g}; worst at index {list(index)} ({rule})",
        expected=f"{shown_want} (± {allowance:.2g} allowed)",
        got=f"{shown_have} (off by {abs(have - want):.2g})" if math.isfinite(have - want) else shown_have,
    )


def distinct_digits(a: float, b: float, least: int = 6) -> tuple[str, str]:
    """`a` and `b` with the fewest significant digits (at least `least`) that tell them apart: 1.52239 and 1.52239
    for two values 1e-7 apart would hide the mistake the check found."""
    for digits in range(least, 18):
        left, right = f"{a:.{digits}g}", f"{b:.{digits}g}"
        if left != right:
            return left, right
    return f"{a!r}", f"{b!r}"
