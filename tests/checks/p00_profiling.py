"""Checks for p00.profiling. No timing is ever asserted. `benchmark` runs against a simulated asynchronous device
with a fake clock (work is queued by `fn` and only done when `sync` waits), whose exact answer is a closed form;
on the real clock only the structure of the result is checked. `top_ops` reads a real `torch.profiler` profile of
a small MLP and a hand-made table; the reference summary is computed here from the same rows."""

import heapq
import math
import statistics
from types import SimpleNamespace

import torch
import torch.nn as nn

from llm_algo.check import Checks, expect, expect_value_error, one_thread, reference_only

checks = Checks("p00.profiling")


class FakeDevice:
    """A GPU in miniature: fn() queues `durations[i]` ticks of work and costs `launch` ticks on the host; sync()
    advances the clock by the queued work; timer() reads the clock. Integer ticks keep the arithmetic exact."""

    def __init__(self, durations, launch=1.0):
        self.durations, self.launch = list(durations), launch
        self.now, self.queued, self.calls = 0.0, 0.0, 0

    def fn(self):
        if self.calls >= len(self.durations):
            raise RuntimeError("fn was called more often than warmup + repeats")
        self.queued += self.durations[self.calls]
        self.calls += 1
        self.now += self.launch

    def sync(self):
        self.now += self.queued
        self.queued = 0.0

    def timer(self):
        return self.now


HINT_SYNC = (
    "warm up; then for each run: sync(), t0 = timer(), fn(), sync(), t1 = timer(); "
    "without the sync after fn you time the launch, without the one before t0 the first run pays for the warm-up"
)


def expect_result(got, expected_times, label):
    expect(
        isinstance(got, dict) and {"times", "median", "min"} <= set(got),
        "wrong result type",
        input=label,
        expected='a dict with "times", "median" and "min"',
        got=repr(got)[:200],
    )
    times = [float(t) for t in got["times"]]
    expect(
        times == expected_times,
        "the measured times are wrong",
        input=label,
        expected=str(expected_times),
        got=str(times),
        hint=HINT_SYNC,
    )
    for key, value in (("median", statistics.median(expected_times)), ("min", min(expected_times))):
        expect(
            math.isclose(float(got[key]), value),
            f"wrong {key}",
            input=label,
            expected=str(value),
            got=str(got[key]),
            hint="the median of the times (the mean of the two middle ones for an even count), not their mean",
        )


@checks("benchmark")
def benchmark_on_a_fake_async_device(ex):
    """simulated GPU: times = launch + queued work of each run; a 50x outlier; odd and even repeats"""
    for warmup, repeats in [(3, 7), (2, 6), (0, 5), (1, 1)]:
        durations = [100.0 * (i + 2) for i in range(warmup)]  # slow first calls (initialisation)
        durations += [10.0 + (i % 3) for i in range(repeats)]
        if repeats > 2:
            durations[warmup + 1] = 500.0  # an outlier in the timed runs
        device = FakeDevice(durations)
        got = ex.benchmark(device.fn, warmup=warmup, repeats=repeats, sync=device.sync, timer=device.timer)
        expected = [1.0 + d for d in durations[warmup:]]  # launch + the run's own work
        label = f"fake async device, warmup={warmup}, repeats={repeats}, work per run {durations}"
        expect_result(got, expected, label)
        expect(
            device.calls == warmup + repeats,
            "fn called the wrong number of times",
            input=label,
            expected=str(warmup + repeats),
            got=str(device.calls),
            hint="warmup untimed calls, then exactly one call per timed run",
        )


@checks("benchmark")
def benchmark_without_sync_is_synchronous(ex):
    """sync=None (a CPU): no synchronisation needed; fn's cost is on the clock; default warmup 3 and repeats 10"""
    clock = SimpleNamespace(now=0.0, calls=0)
    costs = [7.0, 3.0, 3.0] + [2.0, 4.0, 2.0, 9.0, 2.0, 3.0, 2.0, 2.0, 5.0, 2.0]

    def fn():
        clock.now += costs[clock.calls]
        clock.calls += 1

    got = ex.benchmark(fn, timer=lambda: clock.now)
    expect_result(got, costs[3:], "a synchronous fn on a fake clock, default warmup=3 and repeats=10")


@checks("benchmark")
def benchmark_on_the_real_clock(ex):
    """a real matmul with time.perf_counter: 5 positive times, min <= median <= max (no speed is asserted)"""
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    got = ex.benchmark(lambda: a @ b, warmup=1, repeats=5)
    times = got["times"]
    expect(
        len(times) == 5 and all(t > 0 for t in times) and min(times) <= got["median"] <= max(times),
        "implausible timings",
        input="a @ b, (64, 64) float32, warmup=1, repeats=5, timer=time.perf_counter",
        expected="5 positive times, min <= median <= max",
        got=str(got)[:200],
        hint="return the list of per-run times in seconds and their median",
    )
    expect(
        got["median"] == statistics.median(times) and got["min"] == min(times),
        "median or min do not match the times",
        input="a @ b, (64, 64) float32",
        expected=f"median {statistics.median(times)}, min {min(times)}",
        got=f"median {got['median']}, min {got['min']}",
    )


@checks("benchmark")
def benchmark_refuses_bad_counts(ex):
    """warmup < 0 or repeats < 1: ValueError, before fn is ever called"""
    for warmup, repeats in [(-1, 5), (2, 0), (0, -3)]:
        calls = []
        expect_value_error(
            lambda w=warmup, r=repeats, calls=calls: ex.benchmark(lambda: calls.append(1), warmup=w, repeats=r),
            f"warmup={warmup}, repeats={repeats}",
            "check warmup >= 0 and repeats >= 1 before timing",
        )
        expect(
            not calls,
            "fn was called before the arguments were checked",
            input=f"warmup={warmup}, repeats={repeats}",
            expected="ValueError before any call of fn",
            got=f"{len(calls)} calls of fn",
            hint="validate warmup and repeats first: a benchmark of a slow fn should not run before failing",
        )


# ------------------------------------------------------------------------------------------ top_ops


def reference_top(averages, k):
    aten = [row for row in averages if row.key[:6] == "aten::"]
    total = math.fsum(row.self_cpu_time_total for row in aten)
    best = heapq.nlargest(k, aten, key=lambda row: row.self_cpu_time_total)
    return [(row.key, row.count, row.self_cpu_time_total * 1e-3, row.self_cpu_time_total / total) for row in best]


def expect_rows(got, expected, label):
    expect(
        isinstance(got, list) and len(got) == len(expected),
        "wrong number of rows",
        input=label,
        expected=f"a list of {len(expected)} tuples",
        got=repr(got)[:200],
        hint="k rows (or all aten:: rows when there are fewer)",
    )
    for position, (mine, ref) in enumerate(zip(got, expected, strict=True)):
        name, calls, self_ms, share = mine
        ok = (
            name == ref[0]
            and calls == ref[1]
            and math.isclose(self_ms, ref[2], rel_tol=1e-9)
            and math.isclose(share, ref[3], rel_tol=1e-9)
        )
        expect(
            ok,
            f"row {position} is wrong",
            input=label,
            expected=str(ref),
            got=str(mine),
            hint="aten:: rows only, sorted by self_cpu_time_total (not cpu_time_total), self time in ms (µs / 1000), "
            "share of the self time of all aten:: rows",
        )


def row(key, count, self_us, total_us):
    return SimpleNamespace(key=key, count=count, self_cpu_time_total=self_us, cpu_time_total=total_us)


@checks("top_ops")
def top_ops_hand_made_table(ex):
    """a table where total time and self time disagree, with non-aten rows (ProfilerStep, record_function)"""
    table = [
        row("ProfilerStep#3", 1, 900.0, 2000.0),
        row("aten::linear", 3, 30.0, 1500.0),
        row("aten::addmm", 3, 1200.0, 1250.0),
        row("## attention ##", 1, 5.0, 600.0),
        row("aten::silu", 1, 150.0, 150.0),
        row("aten::t", 3, 12.0, 20.0),
        row("aten::mul", 1, 108.0, 108.0),
    ]
    for k in (1, 3, 10):
        expect_rows(ex.top_ops(table, k), reference_top(table, k), f"hand-made table of 7 rows, k={k}")


@checks("top_ops")
@one_thread()
def top_ops_real_profile(ex):
    """a real profile of an MLP forward and backward: the top 4, and all rows with shares summing to 1"""
    with reference_only():
        mlp = nn.Sequential(nn.Linear(32, 96), nn.SiLU(), nn.Linear(96, 32))
        x = torch.randn(16, 32)
        mlp(x).sum().backward()  # warm-up
        # the same rows as torch.profiler.profile(activities=[CPU]) gives, without Kineto's start-up (seconds here)
        with torch.autograd.profiler.profile(use_kineto=False) as prof:
            mlp(x).sum().backward()
        averages = prof.key_averages()
    expect_rows(ex.top_ops(averages, 4), reference_top(averages, 4), "profile of an MLP forward+backward, k=4")
    every = ex.top_ops(averages, 1000)
    expect_rows(every, reference_top(averages, 1000), "the same profile, k=1000 (all rows)")
    expect(
        math.isclose(sum(r[3] for r in every), 1.0, rel_tol=1e-9),
        "the shares of all rows do not sum to 1",
        input="the same profile, k=1000",
        expected="1.0",
        got=str(sum(r[3] for r in every)),
        hint="divide by the self time of all aten:: rows, not of the k returned ones",
    )


@checks("top_ops")
def top_ops_refuses_bad_k(ex):
    """k < 1: ValueError"""
    table = [row("aten::mm", 1, 10.0, 10.0)]
    for k in (0, -2):
        expect_value_error(lambda k=k: ex.top_ops(table, k), f"k={k}", "check k >= 1")
