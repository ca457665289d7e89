"""Guard-buffer helpers: a write outside the window fails, a write inside passes, whatever the guard kind."""

from __future__ import annotations

import pytest
import torch

from llm_algo.check import CheckFailed
from llm_algo.references.kernels import expect_guard_untouched, guarded


def check(buffer: torch.Tensor, window_shape: tuple[int, ...], **kwargs) -> None:
    expect_guard_untouched(buffer, window_shape, input="test buffer", hint="mask the store", **kwargs)


def test_nan_guards_catch_a_write_past_the_leading_window() -> None:
    buffer, window = guarded((3, 4), (1, 2), device="cpu")
    window.fill_(1.0)
    check(buffer, (3, 4))
    buffer[0, 4] = 0.0
    with pytest.raises(CheckFailed, match="outside its output"):
        check(buffer, (3, 4))


def test_a_snapshot_guards_integers_at_an_offset() -> None:
    buffer = torch.full((10,), -7, dtype=torch.int32)
    snapshot = buffer.clone()
    buffer[3:7] = 1  # the window: 4 elements from offset 3
    check(buffer, (4,), offset=(3,), snapshot=snapshot)
    buffer[2] = 0
    with pytest.raises(CheckFailed) as failed:
        check(buffer, (4,), offset=(3,), snapshot=snapshot)
    assert failed.value.got == "1 of 6 guard elements overwritten"


def test_a_snapshot_catches_an_in_place_kernel_that_rewrites_a_random_guard() -> None:
    buffer = torch.randn(5, 6)
    snapshot = buffer.clone()
    buffer[:4, :4] *= 2.0  # the window
    check(buffer, (4, 4), snapshot=snapshot)
    buffer[4, 0] = -buffer[4, 0]
    with pytest.raises(CheckFailed):
        check(buffer, (4, 4), snapshot=snapshot)
