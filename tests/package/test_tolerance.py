"""The one tolerance policy (llm_algo.check.tolerance.mismatch): dtype defaults, baseline widening, NaN, inf, and
exact integers."""

from __future__ import annotations

import math

import pytest
import torch

from llm_algo.check.tolerance import BASELINE_FACTOR, DEFAULT_TOLERANCES, mismatch


def oracle(n: int = 1000, scale: float = 1.0) -> torch.Tensor:
    """Values in [1, 2] * scale, float64, seeded: never zeros or ones alone."""
    generator = torch.Generator().manual_seed(0)
    return (1 + torch.rand(n, dtype=torch.float64, generator=generator)) * scale


def allowance(reference: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    rtol, atol = DEFAULT_TOLERANCES[dtype]
    return atol + rtol * reference.abs()


@pytest.mark.parametrize("scale", [1e-3, 1.0, 1e3])
def test_fp32_rounding_of_the_oracle_passes(scale: float) -> None:
    want = oracle(scale=scale)
    assert mismatch(want.float(), want) is None


def test_fp32_within_the_default_tolerance_passes_and_just_outside_fails() -> None:
    want = oracle(scale=100.0)
    step = allowance(want, torch.float32)
    assert mismatch((want + 0.5 * step).float(), want) is None
    off = want.clone()
    off[123] += 3 * step[123]  # one element, three allowances away
    found = mismatch(off.float(), want)
    assert found is not None
    assert found.summary.startswith("1 of 1000 elements off")
    assert "worst at index [123]" in found.summary and "rtol=1.3e-06, atol=1e-05 for float32" in found.summary
    assert float(found.expected.split()[0]) == pytest.approx(float(want[123]), rel=1e-5)
    assert found.expected.endswith("allowed)") and "(off by " in found.got  # the error against the allowance
    assert float(found.got.split()[0]) == pytest.approx(float(off[123]), rel=1e-5)


def test_the_dtype_argument_picks_the_tolerance() -> None:
    """A float32 result checked as fp16 work (e.g. a kernel that loads fp16) gets fp16's tolerance."""
    want = oracle()
    got = (want * (1 + 5e-4)).float()  # 5e-4 relative: too far for float32, fine for float16
    assert mismatch(got, want) is not None
    assert mismatch(got, want, dtype=torch.float16) is None


def fp16_case(error_factor: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(got, oracle, baseline) in fp16: the baseline is 4 allowances off everywhere (PyTorch's own error in this
    dtype), and got makes `error_factor` times the baseline's error."""
    want = oracle()
    baseline_error = 4 * allowance(want, torch.float16)
    baseline = (want + baseline_error).half()
    got = (want + error_factor * baseline_error).half()
    return got, want, baseline


def test_baseline_widens_the_fp16_tolerance() -> None:
    got, want, baseline = fp16_case(error_factor=2.0)
    assert mismatch(baseline, want) is not None  # PyTorch itself misses the dtype's default tolerance here
    assert mismatch(got, want) is not None
    assert mismatch(got, want, baseline=baseline) is None  # but twice PyTorch's error is accepted


def test_ten_times_the_baseline_error_fails() -> None:
    got, want, baseline = fp16_case(error_factor=10.0)
    found = mismatch(got, want, baseline=baseline)
    assert found is not None
    assert f"to {BASELINE_FACTOR:g}x PyTorch's own error in this dtype" in found.summary
    assert "for float16" in found.summary


def test_a_better_than_default_baseline_never_tightens_the_tolerance() -> None:
    want = oracle()
    got = (want + 0.9 * allowance(want, torch.float32)).float()
    assert mismatch(got, want, baseline=want.float()) is None  # an exact baseline: the defaults still hold


def test_nan_where_the_oracle_has_nan_passes() -> None:
    want = torch.tensor([1.5, math.nan, -2.25, math.nan], dtype=torch.float64)
    assert mismatch(want.float(), want) is None


def test_nan_in_different_places_fails() -> None:
    want = torch.tensor([1.5, math.nan, -2.25, 4.0], dtype=torch.float64)
    got = torch.tensor([1.5, 7.0, math.nan, 4.0])
    found = mismatch(got, want)
    assert found is not None and found.summary.startswith("2 of 4 elements off")


def test_nan_where_the_oracle_is_finite_fails_even_with_a_baseline() -> None:
    want = oracle(8)
    got = want.float().clone()
    got[3] = math.nan
    assert mismatch(got, want) is not None
    assert mismatch(got, want, baseline=want.float()) is not None


def test_infinities_must_match_in_place_and_sign() -> None:
    want = torch.tensor([1.0, math.inf, -math.inf, 3.0], dtype=torch.float64)
    assert mismatch(want.half(), want) is None
    flipped = torch.tensor([1.0, -math.inf, -math.inf, 3.0])
    assert mismatch(flipped, want) is not None
    finite = torch.tensor([1.0, 65504.0, -math.inf, 3.0])
    assert mismatch(finite, want) is not None
    overflowed = torch.tensor([1.0, math.inf, -math.inf, math.inf])
    found = mismatch(overflowed, want)
    assert found is not None and "worst at index [3]" in found.summary and found.got == "inf"
    assert "max abs error inf" in found.summary


def test_a_baseline_that_overflows_excuses_nothing() -> None:
    """A naive fp16 baseline that overflows somewhere has an infinite error there; that must not widen the
    tolerance to infinity, or any output (even NaN) would pass."""
    want = oracle(16)
    baseline = want.half()
    baseline[0] = math.inf
    garbage = torch.full((16,), math.nan, dtype=torch.float16)
    assert mismatch(garbage, want, baseline=baseline) is not None
    assert mismatch(want.half() + 1, want, baseline=baseline) is not None
    assert mismatch(want.half(), want, baseline=baseline) is None


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8, torch.bool])
def test_integer_and_bool_results_must_be_exact(dtype: torch.dtype) -> None:
    want = torch.tensor([0, 1, 1, 0, 1], dtype=torch.float64)
    assert mismatch(want.to(dtype), want) is None
    off = want.clone()
    off[2] = 0
    found = mismatch(off.to(dtype), want)
    assert found is not None and found.summary.startswith("1 of 5 elements off") and "rtol=0, atol=0" in found.summary


def test_an_off_by_one_integer_fails_even_for_large_values() -> None:
    want = torch.tensor([1_000_000_000, 7], dtype=torch.int64)
    assert mismatch(want + torch.tensor([1, 0]), want.double()) is not None


def test_integer_results_are_not_excused_by_a_wrong_baseline() -> None:
    want = torch.tensor([3, 4, 5], dtype=torch.int64)
    wrong_baseline = torch.tensor([3, 4, 6])
    assert mismatch(torch.tensor([3, 5, 5]), want.double(), baseline=wrong_baseline) is not None


def test_empty_tensors_match() -> None:
    assert mismatch(torch.empty(0, 3), torch.empty(0, 3, dtype=torch.float64)) is None
