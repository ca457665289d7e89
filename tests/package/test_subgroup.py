"""run_subgroup: the learner's code on the sub-group [1, 2] of a world of 3, with rank 0 standing by. Code that
ignores `group` passes on a world of its own (the old checks) and is caught here; code that uses it passes."""

from __future__ import annotations

import os
import textwrap

import pytest
import torch
import torch.distributed as dist

from llm_algo.check.failure import CheckFailed
from llm_algo.distributed import expect_ranks_ok, expect_ranks_refuse, run_ranks, run_subgroup, world
from llm_algo.grading.execute import fresh_namespace

pytestmark = pytest.mark.skipif(not dist.is_available() or os.name != "posix", reason="needs torch.distributed")

DEADLINE = 6.0  # the hanging cases end here


def learner(source: str) -> dict:
    namespace = fresh_namespace("p99.subgroup_test")
    exec(compile(textwrap.dedent(source), "<notebook 99_Subgroup.ipynb, cell 3>", "exec"), namespace)
    return namespace


LEARNER = learner(
    """
    import torch
    import torch.distributed as dist

    def ring(x, rank, size, to_global):
        total, chunk = x.clone(), x.clone()
        for _ in range(size - 1):
            request = dist.isend(chunk, to_global((rank + 1) % size))
            incoming = torch.empty_like(chunk)
            dist.recv(incoming, to_global((rank - 1) % size))
            request.wait()
            total += incoming
            chunk = incoming
        return total

    def ring_sum(x, group=None):
        # right: group ranks, and peers translated back to global ranks for send/recv
        return ring(x, dist.get_rank(group), dist.get_world_size(group), lambda r: dist.get_global_rank(group, r))

    def ring_sum_global_ranks(x, group=None):
        # wrong: the default group's rank and size (a world of its own is all it was ever run on)
        return ring(x, dist.get_rank(), dist.get_world_size(), lambda r: r)

    def mean_all_reduce(x, group=None):
        y = x.clone()
        dist.all_reduce(y, group=group)
        return y / dist.get_world_size(group)

    def refuse(x, group=None):
        raise ValueError(f"{x.numel()} elements do not split over {dist.get_world_size(group)} ranks")

    def mean_all_reduce_default_group(x, group=None):
        # wrong: group accepted but not passed on
        y = x.clone()
        dist.all_reduce(y)
        return y / dist.get_world_size()

    all_reduce = dist.all_reduce  # bound when the cell runs: the ranks' guard does not see the calls through it

    def mean_prebound_all_reduce_default_group(x, group=None):
        y = x.clone()
        all_reduce(y)
        return y / dist.get_world_size()
    """
)


def sums(fn, x, group=None):
    """A checks-side rank function: the learner's result and the reference on the same group."""
    reference = x.clone()
    dist.all_reduce(reference, group=group)
    return fn(x, group=group), reference


def on_subgroup(name, data):
    results = run_subgroup(sums, args=(LEARNER[name],), member_args=[(d,) for d in data], input=name, deadline=DEADLINE)
    return expect_ranks_ok(results, input=name)


DATA = [torch.arange(4.0) * (r + 1) for r in range(2)]


@pytest.mark.parametrize("name", ["ring_sum", "mean_all_reduce"])
def test_code_that_uses_the_group_passes_and_keeps_the_world(name):
    values = on_subgroup(name, DATA)
    pids = world(3).alive
    for mine, reference in values:
        want = reference / 2 if name.startswith("mean") else reference
        torch.testing.assert_close(mine, want)
        torch.testing.assert_close(reference, DATA[0] + DATA[1])
    on_subgroup(name, DATA)  # the bystander's irecv was completed by the sentinel: the world is reused
    assert world(3).alive == pids


def test_global_ranks_pass_on_a_world_of_their_own_and_are_caught_on_a_subgroup():
    values = expect_ranks_ok(
        run_ranks(sums, 2, args=(LEARNER["ring_sum_global_ranks"],), rank_args=[(d,) for d in DATA]), input="world of 2"
    )
    for mine, reference in values:  # the old checks: a world of 2, group None
        torch.testing.assert_close(mine, reference)
    with pytest.raises(CheckFailed, match=r"rank 0 \(a bystander, not in the group \[1, 2\]\) received a message"):
        on_subgroup("ring_sum_global_ranks", DATA)
    on_subgroup("ring_sum", DATA)  # the next check gets a clean world


def test_default_group_collective_passes_on_a_world_of_its_own_and_is_caught_on_a_subgroup():
    values = expect_ranks_ok(
        run_ranks(sums, 2, args=(LEARNER["mean_all_reduce_default_group"],), rank_args=[(d,) for d in DATA]),
        input="world of 2",
    )
    for mine, reference in values:
        torch.testing.assert_close(mine, reference / 2)
    pids = world(3).alive
    with pytest.raises(CheckFailed, match=r"rank \d called a collective on the default group: dist.all_reduce"):
        on_subgroup("mean_all_reduce_default_group", DATA)  # at once: both members raise, and meet
    assert world(3).alive == pids
    with pytest.raises(
        CheckFailed, match="the members hung .* a collective on the default group waits for the bystander"
    ):
        on_subgroup("mean_prebound_all_reduce_default_group", DATA)  # not seen by the guard: a hang, then reported
    on_subgroup("mean_all_reduce", DATA)


def test_refuses_a_group_without_bystander():
    with pytest.raises(ValueError, match="fewer members"):
        run_subgroup(sums, input="", members=(0, 1, 2))
    with pytest.raises(ValueError, match="distinct ranks"):
        run_subgroup(sums, input="", members=(1, 3))


def test_a_refusal_on_every_member_keeps_the_world():
    on_subgroup("ring_sum", DATA)
    pids = world(3).alive
    results = run_subgroup(sums, args=(LEARNER["refuse"],), member_args=[(d,) for d in DATA], input="refuse")
    expect_ranks_refuse(results, input="refuse")
    assert "do not split over 2 ranks" in results[0].message
    assert world(3).alive == pids  # the members met and sent the sentinel: no restart
