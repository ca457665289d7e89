"""The check author's API, as a lesson's checks module imports it: `from llm_algo.check import Checks, expect_close`."""

from .api import (
    Checks,
    CheckSpec,
    chi_square_p_value,
    describe,
    expect,
    expect_close,
    expect_distribution,
    expect_exact_int,
    expect_gradcheck,
    expect_refused,
    expect_refused_or_correct,
    expect_tensor,
    expect_value_error,
    load_checks,
    one_thread,
    replacing,
)
from .failure import CheckFailed
from .restrictions import reference_only

__all__ = [
    "CheckFailed",
    "CheckSpec",
    "Checks",
    "chi_square_p_value",
    "describe",
    "expect",
    "expect_close",
    "expect_distribution",
    "expect_exact_int",
    "expect_gradcheck",
    "expect_refused",
    "expect_refused_or_correct",
    "expect_tensor",
    "expect_value_error",
    "load_checks",
    "one_thread",
    "reference_only",
    "replacing",
]
