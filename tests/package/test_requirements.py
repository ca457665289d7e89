"""A check that needs more of the machine than it has reads *needs a GPU*, never passed or failed."""

from __future__ import annotations

import dataclasses

import pytest

from llm_algo import device
from llm_algo.check import Checks
from llm_algo.grading.run import run_check
from llm_algo.outcome import Outcome


@pytest.mark.parametrize(
    ("capability", "outcome"),
    [(None, Outcome.PASSED), ((8, 0), Outcome.NEEDS_GPU), ((8, 9), Outcome.PASSED), ((9, 0), Outcome.PASSED)],
)
def test_a_check_that_needs_a_compute_capability_reads_needs_a_gpu_on_an_older_one(monkeypatch, capability, outcome):
    checks = Checks("p99.fake")
    ran = []

    @checks("fp8", requires_capability=(8, 9))
    def scaled_mm(ex):
        ran.append(True)

    [spec] = checks.specs
    assert not spec.requires_cuda and spec.requires_capability == (8, 9)  # a CPU runs it (Triton's interpreter)
    machine = dataclasses.replace(device.policy(), device="cuda" if capability else "cpu", capability=capability)
    monkeypatch.setattr(device, "policy", lambda: machine)

    result = run_check(spec, {}, "p99_fake")

    assert result.outcome is outcome
    assert ran == ([True] if outcome is Outcome.PASSED else [])
    if outcome is Outcome.NEEDS_GPU:
        assert "compute capability 8.9+" in result.summary and "8.0" in result.summary


def test_a_malformed_capability_is_refused_when_the_check_is_declared():
    checks = Checks("p99.fake")
    with pytest.raises(TypeError, match="major, minor"):
        checks("fp8", requires_capability=(8.9,))
