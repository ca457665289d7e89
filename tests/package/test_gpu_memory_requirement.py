"""A check of more than 2^31 elements declares the GPU memory it needs: on a smaller GPU it reads *needs a GPU* with
the memory it wants and the memory found, never passed or failed; on a large enough one it runs."""

from __future__ import annotations

import dataclasses
import types

import pytest
import torch

from llm_algo import device
from llm_algo.check import Checks
from llm_algo.grading.run import run_check
from llm_algo.outcome import Outcome


@pytest.mark.parametrize(("total_gib", "outcome"), [(16, Outcome.NEEDS_GPU), (80, Outcome.PASSED)])
def test_a_check_that_needs_gpu_memory_reads_needs_a_gpu_on_a_smaller_one(monkeypatch, total_gib, outcome):
    checks = Checks("p99.fake")
    ran = []

    @checks("huge", requires_cuda=True, requires_gpu_memory_gib=40)
    def more_than_2_31_elements(ex):
        ran.append(True)

    [spec] = checks.specs
    assert spec.requires_gpu_memory_gib == 40
    machine = dataclasses.replace(device.policy(), device="cuda", capability=(9, 0))
    monkeypatch.setattr(device, "policy", lambda: machine)
    monkeypatch.setattr(
        torch.cuda, "get_device_properties", lambda index: types.SimpleNamespace(total_memory=total_gib * 2**30)
    )

    result = run_check(spec, {}, "p99_fake")

    assert result.outcome is outcome
    assert ran == ([True] if outcome is Outcome.PASSED else [])
    if outcome is Outcome.NEEDS_GPU:
        assert "40 GiB" in result.summary and "16 GiB" in result.summary


def test_without_a_gpu_it_reads_needs_cuda(monkeypatch):
    checks = Checks("p99.fake")

    @checks("huge", requires_cuda=True, requires_gpu_memory_gib=40)
    def more_than_2_31_elements(ex):
        raise AssertionError("must not run")

    machine = dataclasses.replace(device.policy(), device="cpu", capability=None)
    monkeypatch.setattr(device, "policy", lambda: machine)
    assert run_check(checks.specs[0], {}, "p99_fake").outcome is Outcome.NEEDS_GPU
