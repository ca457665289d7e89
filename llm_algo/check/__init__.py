"""The check author's API, as a lesson's checks module imports it: `from llm_algo.check import Checks, expect_close`."""

from .api import Checks, CheckSpec, describe, expect, expect_close, expect_gradcheck, expect_tensor, load_checks
from .failure import CheckFailed

__all__ = [
    "CheckFailed",
    "CheckSpec",
    "Checks",
    "describe",
    "expect",
    "expect_close",
    "expect_gradcheck",
    "expect_tensor",
    "load_checks",
]
