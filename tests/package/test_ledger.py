"""The live-tensor ledger (`llm_algo.check.ledger`): a memory figure is measured, never read from the learner's code.

The fake pipeline stages below run one stage's 1F1B op list in one process (the received activations and gradients
are drawn here). With `keep_all`, `fake_stage` is right about the gradients and reports the textbook peak, but keeps every
micro-batch's activations until it returns: a check that reads the reported peak passes it, the ledger does not."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn

from llm_algo.check.ledger import CommLedger, LiveTensors, SavedTensorLedger
from llm_algo.distributed import expect_ranks_ok, run_ranks

# stage 0 of 3 under 1F1B with 5 micro-batches: min(p - s, m) = 3 in flight at most
OPS = [("F", 0), ("F", 1), ("F", 2), ("B", 0), ("F", 3), ("B", 1), ("F", 4), ("B", 2), ("B", 3), ("B", 4)]
TEXTBOOK_PEAK = 3


def make_stage() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 6), nn.Tanh(), nn.Linear(6, 6), nn.Tanh())


def fake_stage(stage, ops, microbatches, keep_all: bool) -> dict:
    """One stage's ops, the gradients right and the textbook peak reported from its own counter; with `keep_all`,
    every micro-batch's input and output also go into a second list that lives until it returns."""
    kept, peak, graveyard = {}, 0, []
    for op, i in ops:
        if op == "F":
            x = microbatches[i]
            y = stage(x)
            kept[i] = (x, y)
            peak = max(peak, len(kept))
        else:
            x, y = kept.pop(i)
            if keep_all:
                graveyard.append((x, y))
            y.backward(torch.ones_like(y))
    return {"peak_in_flight": peak}


def measured(keep_all: bool) -> tuple[int, int, int]:
    """(reported peak, measured peak of micro-batches alive, forwards seen) for one stage's run."""
    stage = make_stage()
    microbatches = [torch.randn(2, 6) for _ in range(5)]
    with SavedTensorLedger(exclude=(stage, microbatches), forwards_of=stage) as ledger:
        result = fake_stage(stage, OPS, microbatches, keep_all)
    return result["peak_in_flight"], ledger.peak_forwards, ledger.forwards


def test_a_correct_stage_measures_its_textbook_peak():
    reported, peak, forwards = measured(keep_all=False)
    assert (reported, peak, forwards) == (TEXTBOOK_PEAK, TEXTBOOK_PEAK, 5)


def test_a_stage_that_keeps_every_activation_is_caught_whatever_it_reports():
    reported, peak, _ = measured(keep_all=True)
    assert reported == TEXTBOOK_PEAK  # a check that reads the reported figure passes it
    assert peak == 5  # the ledger sees all five micro-batches alive at the last backward


def test_parameters_and_the_callers_inputs_are_not_activations():
    stage = make_stage()
    x = torch.randn(2, 6)
    with SavedTensorLedger(exclude=(stage, [x])) as ledger:
        y = stage(x)
    # saved: the first tanh's output (by that tanh and by the second linear: counted once) and the second tanh's
    # output; the weights' transposed views and x itself are excluded
    assert (ledger.alive(), ledger.saved) == (2, 2)
    assert ledger.peak_bytes == 2 * 2 * 6 * 4
    del y  # the graph goes without a backward: nothing may stay alive (no reference cycle through the ledger)
    assert ledger.alive() == 0


def test_live_tensors_counts_weakly_and_once():
    live = LiveTensors()
    a, b = torch.randn(3), torch.randn(5, dtype=torch.float64)
    live.add(a, group="a")
    live.add(a, group="a")
    live.add(b, group="b")
    assert (live.alive(), live.alive_bytes(), live.alive_groups(), live.added) == (2, 3 * 4 + 5 * 8, 2, 2)
    del a
    assert (live.alive(), live.alive_groups(), live.peak, live.peak_groups) == (1, 1, 2, 2)


def rank_measures(keep_all: bool) -> tuple[int, int, int]:
    reported, peak, _ = measured(keep_all)
    with CommLedger() as comm:
        dist.all_reduce(torch.ones(3))
    return reported, peak, comm.count("allreduce")


@pytest.mark.skipif(not dist.is_available() or os.name != "posix", reason="needs torch.distributed")
def test_the_ledgers_work_inside_a_rank():
    for keep_all, want in ((False, TEXTBOOK_PEAK), (True, 5)):
        results = run_ranks(rank_measures, 2, args=(keep_all,), deadline=30.0)
        values = expect_ranks_ok(results, input=f"2 ranks, keep_all={keep_all}")
        assert values == [(TEXTBOOK_PEAK, want, 1)] * 2
