"""`expect_refused_or_correct(..., errors=(RuntimeError,))`: the CUDA C++ layout checks of Part 04 (issue 27, guard 3)
accept a host function's TORCH_CHECK refusal (a RuntimeError with a message) or a correct result, and nothing else."""

from __future__ import annotations

import pytest
import torch

from llm_algo.check import CheckFailed, expect_close, expect_refused_or_correct


def _refuse():
    raise RuntimeError("async_matmul: A, B and out must be contiguous")


def _right():
    return torch.ones(3)


def _wrong():
    return torch.zeros(3)


def _check(got):
    expect_close(got, torch.ones(3, dtype=torch.float64), input="x (3,)")


def test_a_torch_check_refusal_passes_only_when_runtime_error_is_allowed():
    expect_refused_or_correct(_refuse, _check, input="x strided", errors=(RuntimeError,))
    with pytest.raises(CheckFailed, match="neither refused"):  # the default stays ValueError/TypeError
        expect_refused_or_correct(_refuse, _check, input="x strided")


def test_a_wrong_result_or_another_exception_still_fails():
    expect_refused_or_correct(_right, _check, input="x strided", errors=(RuntimeError,))
    with pytest.raises(CheckFailed):
        expect_refused_or_correct(_wrong, _check, input="x strided", errors=(RuntimeError,))

    def crash():
        raise KeyError("row")

    with pytest.raises(CheckFailed, match="neither refused"):
        expect_refused_or_correct(crash, _check, input="x strided", errors=(RuntimeError,))

    def silent():
        raise RuntimeError("")

    with pytest.raises(CheckFailed, match="without saying why"):
        expect_refused_or_correct(silent, _check, input="x strided", errors=(RuntimeError,))


def test_not_attempted_goes_through():
    def todo():
        raise NotImplementedError  # a subclass of RuntimeError: "not attempted", never a refusal

    with pytest.raises(NotImplementedError):
        expect_refused_or_correct(todo, _check, errors=(RuntimeError,))
