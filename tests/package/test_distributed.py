"""The multi-process worlds the parallelism lessons' checks run in: results, deadlines, no orphans, forbidden calls."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import torch
import torch.distributed as dist

from llm_algo.check.failure import CheckFailed
from llm_algo.distributed import World, expect_ranks_ok, expect_ranks_refuse
from llm_algo.grading.execute import fresh_namespace

pytestmark = pytest.mark.skipif(not dist.is_available() or os.name != "posix", reason="needs torch.distributed")


def gone(pids: list[int], within: float = 5.0) -> bool:
    end = time.monotonic() + within
    while time.monotonic() < end:
        alive = []
        for pid in pids:
            try:
                os.kill(pid, 0)
                with open(f"/proc/{pid}/stat") as stat:  # a zombie counts as gone
                    if stat.read().split(") ")[-1].startswith("Z"):
                        continue
                alive.append(pid)
            except (ProcessLookupError, FileNotFoundError):
                pass
        if not alive:
            return True
        time.sleep(0.1)
    return False


def learner(source: str, lesson_id: str = "p99.distributed_test") -> dict:
    """Functions defined the way the grader runs a notebook cell: a `__lesson_*` module nobody else can import."""
    namespace = fresh_namespace(lesson_id)
    exec(compile(textwrap.dedent(source), "<notebook 99_Test.ipynb, cell 3>", "exec"), namespace)
    return namespace


LEARNER = learner(
    """
    import torch
    import torch.distributed as dist

    def ring_sum(x):
        rank, size = dist.get_rank(), dist.get_world_size()
        total, chunk = x.clone(), x.clone()
        for _ in range(size - 1):
            request = dist.isend(chunk, (rank + 1) % size)
            incoming = torch.empty_like(chunk)
            dist.recv(incoming, (rank - 1) % size)
            request.wait()
            total += incoming
            chunk = incoming
        return total

    def cheat(x):
        dist.all_reduce(x)
        return x

    def refuse(x):
        if x.numel() % dist.get_world_size():
            raise ValueError(f"{x.numel()} elements do not split over {dist.get_world_size()} ranks")
        return x

    def wait_forever(x):
        if dist.get_rank() == 0:
            dist.recv(x, 1)
        return x

    def spin(x):
        while True:
            x = x + 1
    """
)


def reference_all_reduce(fn, x):
    """A checks-side helper: its own `dist.all_reduce` is allowed while the learner's `fn` is forbidden to use it."""
    y = x.clone()
    dist.all_reduce(y)
    return fn(x), y


@pytest.fixture(scope="module")
def pair():
    world = World(2)
    yield world
    world.close()
    assert gone([p.pid for p in world.processes])


def test_learner_function_runs_in_every_rank(pair):
    data = [torch.arange(4.0) * (r + 1) for r in range(2)]
    results = pair.run(LEARNER["ring_sum"], rank_args=[(d,) for d in data])
    values = expect_ranks_ok(results, input="2 ranks")
    for value in values:
        torch.testing.assert_close(value, data[0] + data[1])


def test_forbidden_in_the_learner_code_allowed_in_the_checks(pair):
    x = torch.ones(3)
    results = pair.run(reference_all_reduce, args=(LEARNER["ring_sum"], x), forbid=("torch.distributed.all_reduce",))
    for mine, reference in expect_ranks_ok(results, input="2 ranks"):
        torch.testing.assert_close(mine, reference)
    results = pair.run(LEARNER["cheat"], args=(x,), forbid=("torch.distributed.all_reduce",), instead="use send/recv")
    assert [r.forbidden for r in results] == [["dist.all_reduce"], ["dist.all_reduce"]]
    with pytest.raises(CheckFailed, match="forbids"):
        expect_ranks_ok(results, input="2 ranks")
    assert pair.healthy  # every rank returned: the world is kept for the next check


def test_bad_input_refused_with_the_learners_traceback(pair):
    results = pair.run(LEARNER["refuse"], args=(torch.ones(3),))
    expect_ranks_refuse(results, input="3 elements, 2 ranks")
    assert "99_Test.ipynb, cell 3" in results[0].traceback and "do not split" in results[0].traceback
    with pytest.raises(CheckFailed, match="not refused"):
        expect_ranks_refuse(pair.run(LEARNER["refuse"], args=(torch.ones(4),)), input="4 elements")


def test_a_hung_peer_ends_at_the_deadline_and_leaves_no_process():
    world = World(2)
    pids = [p.pid for p in world.processes]
    started = time.monotonic()
    results = world.run(LEARNER["wait_forever"], args=(torch.ones(2),), deadline=2.0)
    assert time.monotonic() - started < 6.0
    assert [r.status for r in results] == ["hung", "ok"]
    with pytest.raises(CheckFailed, match="still running at the deadline"):
        expect_ranks_ok(results, input="recv without a send")
    assert gone(pids)


def test_a_rank_killed_mid_step_is_reported_and_nothing_is_left():
    world = World(2)
    pids = [p.pid for p in world.processes]
    threading.Timer(1.0, lambda: os.kill(pids[1], signal.SIGKILL)).start()
    started = time.monotonic()
    results = world.run(LEARNER["spin"], args=(torch.ones(2),), deadline=20.0)
    assert time.monotonic() - started < 10.0  # the death ends the call early (grace), not the deadline
    assert results[1].status == "died" and results[1].exitcode == -signal.SIGKILL
    assert results[0].status == "hung"
    assert gone(pids)


def test_ranks_die_with_their_grader():
    """The grader itself killed (a time limit, a crash): its ranks notice and exit."""
    script = textwrap.dedent(
        """
        import sys, time
        from llm_algo.distributed import World
        world = World(2)
        print(*[p.pid for p in world.processes], flush=True)
        time.sleep(60)
        """
    )
    grader = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(pid) for pid in grader.stdout.readline().split()]
        assert len(pids) == 2
        grader.kill()
        grader.wait()
        assert gone(pids)
    finally:
        grader.kill()


SKELETON = learner(
    """
    def not_yet(x):
        raise NotImplementedError  # your code here
    """,
    "p99.skeleton_test",
)


def test_a_skeleton_in_a_rank_is_not_attempted(pair):
    from llm_algo.check.failure import NotAttempted

    results = pair.run(SKELETON["not_yet"], args=(torch.ones(2),))
    assert all(r.not_attempted for r in results)
    with pytest.raises(NotAttempted):
        expect_ranks_ok(results, input="2 ranks")
    with pytest.raises(NotAttempted):  # a refusal check of a skeleton: not attempted either, not "not refused"
        expect_ranks_refuse(results, input="2 ranks")
    results = pair.run(LEARNER["refuse"], args=(torch.ones(3),))  # a NotImplementedError of torch's would not be
    assert not any(r.not_attempted for r in results)


def test_preloaded_modules_are_imported_before_the_first_task():
    world = World(2, preload=("json",))
    try:
        results = world.run(_imported, args=("json",))
        assert [r.value for r in results] == [True, True]
    finally:
        world.close()


def _imported(name: str) -> bool:
    import sys

    return name in sys.modules
