"""Checks for p04.ring_allreduce. References: for the cost model, an event simulation of the sliced schedule (slice k
arrives at k t, is added after it has arrived and slice k - 1 is added; all-gather slices back to back), the α-β
closed form 2(p-1)α + 2(p-1)/p n/B, nccl-tests' bus bandwidth definition (doc/PERFORMANCE.md) and a scan for the
best slice count; for the ring, `dist.all_reduce` of gloo on the same data in the same ranks (a world of 4 real
processes, `llm_algo.distributed`, and its sub-groups of 2 and 3 ranks), exact on integer-valued data, a float64 sum
as the oracle for random floats, and the message log of every rank (each `isend`/`irecv`/`send`/`recv` wrapped in the
rank by `llm_algo.distributed.traffic.Traffic`) against the sliced schedule's message count and bytes."""

import math
import random

import torch
import torch.distributed as dist

from llm_algo.check import Checks, describe, expect, expect_close, expect_value_error
from llm_algo.distributed import expect_ranks_ok, expect_ranks_refuse, run_ranks
from llm_algo.distributed.traffic import Traffic, expect_balanced, make_group

checks = Checks("p04.ring_allreduce")

P = 4  # one world of 4 processes; groups of 2 and 3 of its ranks give the other world sizes
BALANCE_HINT = "both ends cut the same chunk index with the same tensor_split(slices)"
DEADLINE_S = 8.0
COLLECTIVES = tuple(
    f"torch.distributed.{name}"
    for name in (
        "all_reduce",
        "all_reduce_coalesced",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "reduce_scatter_single",
        "all_gather",
        "all_gather_into_tensor",
        "all_gather_single",
        "all_gather_coalesced",
        "broadcast",
        "reduce",
        "all_to_all",
        "all_to_all_single",
    )
)
INSTEAD = "build the ring from dist.isend / dist.irecv (the collectives are the checks' reference)"


# ------------------------------------------------------------------------------------------ ring_model

HINT_MODEL = (
    "slice bytes n/(pS); t = alpha + slice/B, c = slice/R; (p - 1) reduce-scatter steps of S max(t, c) + min(t, c) "
    "and (p - 1) all-gather steps of S t; 0 for one rank"
)


def simulated_seconds(nbytes, p, alpha, bandwidth, reduce_bandwidth, slices):
    """The schedule, event by event: when each slice arrives and when its addition ends."""
    if p == 1:
        return 0.0
    size = nbytes / (p * slices)
    wire, add = alpha + size / bandwidth, size / reduce_bandwidth
    clock = 0.0
    for _ in range(p - 1):  # reduce-scatter steps
        added = 0.0
        for k in range(1, slices + 1):
            added = max(k * wire, added) + add
        clock += added
    for _ in range(p - 1):  # all-gather steps: slices back to back, nothing to add
        for _ in range(slices):
            clock += wire
    return clock


def expect_seconds(got, want, label, hint=HINT_MODEL):
    expect(
        isinstance(got, (int, float)) and not isinstance(got, bool),
        "the result is not a number",
        input=label,
        expected="float",
        got=f"{type(got).__name__} {got!r}"[:120],
        hint="return a Python float",
    )
    expect(
        math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-18),
        "wrong value",
        input=label,
        expected=f"{want:.6g}",
        got=f"{got:.6g} (ratio {got / want if want else float('inf'):.4g})",
        hint=hint,
    )


@checks("ring_model")
def matches_event_simulation(ex):
    """p from 1 to 64, sizes 0 to 250 MB, NVLink- and Ethernet-like links, additions free or slow, S from 1 to 64"""
    rng = random.Random(torch.initial_seed())
    for p in (1, 2, 3, 8, 17, 64):
        for _ in range(6):
            n = rng.choice([0.0, 4096.0, 1e6, 2.5e8, float(rng.randrange(1, 10**9))])
            alpha = rng.choice([0.0, 5e-6, 3e-5])
            bandwidth = rng.choice([12.5e9, 450e9])
            reduce_bandwidth = rng.choice([math.inf, 5e9, 1.6e12])
            slices = rng.choice([1, 2, 3, 8, 64])
            want = simulated_seconds(n, p, alpha, bandwidth, reduce_bandwidth, slices)
            got = ex.ring_allreduce_seconds(n, p, alpha, bandwidth, reduce_bandwidth, slices)
            label = f"n={n:g} B, p={p}, alpha={alpha:g}, B={bandwidth:g}, R={reduce_bandwidth:g}, S={slices}"
            expect_seconds(got, want, label)


@checks("ring_model")
def alpha_beta_and_bus_bandwidth(ex):
    """S = 1 without addition cost is 2(p-1)alpha + 2(p-1)/p n/B; busbw = B at alpha = 0; busbw(n_1/2) = B/2"""
    got = ex.ring_allreduce_seconds(16e9, 8, 0.0, 450e9)
    expect_seconds(got, 2 * 7 / 8 * 16e9 / 450e9, "16 GB of gradients, p=8, 450 GB/s, alpha=0 (62.2 ms)")
    for p in (2, 3, 8, 16):
        n, alpha, bandwidth = 3e8, 5e-6, 100e9
        want = 2 * (p - 1) * alpha + 2 * (p - 1) / p * n / bandwidth
        expect_seconds(ex.ring_allreduce_seconds(n, p, alpha, bandwidth), want, f"n=3e8, p={p}, alpha=5us, 100 GB/s")
        seconds = ex.ring_allreduce_seconds(1e9, p, 0.0, bandwidth)
        expect_seconds(
            ex.bus_bandwidth(1e9, p, seconds),
            bandwidth,
            f"bus_bandwidth of an ideal ring (alpha=0), p={p}, 100 GB/s",
            hint="busbw = n / T * 2(p - 1) / p (nccl-tests): the link bandwidth for an ideal ring",
        )
        half = ex.half_bandwidth_bytes(p, alpha, bandwidth)
        expect_seconds(
            half,
            p * alpha * bandwidth,
            f"half_bandwidth_bytes(p={p}, alpha=5us, 100 GB/s)",
            hint="busbw = B n / (n + p alpha B): half of B at n = p alpha B",
        )
        expect_seconds(
            ex.bus_bandwidth(half, p, ex.ring_allreduce_seconds(half, p, alpha, bandwidth)),
            bandwidth / 2,
            f"bus bandwidth at n_1/2, p={p}",
            hint="busbw = n / T * 2(p - 1) / p",
        )
    expect_seconds(
        ex.bus_bandwidth(1e9, 4, 0.1),
        1.5e10,
        "bus_bandwidth(1 GB, p=4, 0.1 s)",
        hint="algbw 10 GB/s times 2(p - 1)/p = 1.5",
    )


def scanned_best(n, p, alpha, bandwidth, reduce_bandwidth, max_slices):
    best, best_time = None, math.inf
    for s in range(1, max_slices + 1):
        seconds = simulated_seconds(n, p, alpha, bandwidth, reduce_bandwidth, s)
        if seconds < best_time * (1 - 1e-12):
            best, best_time = s, seconds
    return best


@checks("ring_model")
def best_slices_by_scan(ex):
    """slow additions (best S > 1), fast ones (S = 1), ties (alpha = 0, free additions: the smallest S), max_slices"""
    cases = [
        (64e6, 8, 30e-6, 12.5e9, 5e9, 64),
        (1e9, 8, 30e-6, 12.5e9, 5e9, 64),
        (1e9, 4, 30e-6, 12.5e9, 5e9, 5),
        (1e6, 8, 5e-6, 450e9, 1.6e12, 64),
        (2.5e8, 3, 0.0, 100e9, math.inf, 16),
        (2.5e8, 3, 0.0, 100e9, 20e9, 16),
        (0.0, 2, 5e-6, 100e9, 5e9, 8),
    ]
    for n, p, alpha, bandwidth, reduce_bandwidth, max_slices in cases:
        want = scanned_best(n, p, alpha, bandwidth, reduce_bandwidth, max_slices)
        got = ex.best_slices(n, p, alpha, bandwidth, reduce_bandwidth, max_slices)
        expect(
            got == want and isinstance(got, int) and not isinstance(got, bool),
            "best_slices is not the fastest slice count",
            input=f"n={n:g}, p={p}, alpha={alpha:g}, B={bandwidth:g}, R={reduce_bandwidth:g}, max_slices={max_slices}",
            expected=f"S = {want} ({simulated_seconds(n, p, alpha, bandwidth, reduce_bandwidth, want):.6g} s)",
            got=repr(got),
            hint="scan S = 1 .. max_slices with ring_allreduce_seconds; on a tie keep the smallest S",
        )


@checks("ring_model")
def model_edge_values(ex):
    """valid edge values: one rank, zero bytes or latency, tiny bandwidths, max_slices=1, n_1/2 without latency"""
    cases = [
        ("ring_allreduce_seconds(1000, 1, 5e-6, 1e10)", lambda: ex.ring_allreduce_seconds(1000.0, 1, 5e-6, 1e10), 0.0),
        (
            "ring_allreduce_seconds(1000, 3, 0, 0.5, 0.5, 2)",
            lambda: ex.ring_allreduce_seconds(1000.0, 3, 0.0, 0.5, 0.5, 2),
            simulated_seconds(1000.0, 3, 0.0, 0.5, 0.5, 2),
        ),
        ("ring_allreduce_seconds(0, 4, 0, 1e10)", lambda: ex.ring_allreduce_seconds(0.0, 4, 0.0, 1e10), 0.0),
        ("bus_bandwidth(0, 4, 1.0)", lambda: ex.bus_bandwidth(0.0, 4, 1.0), 0.0),
        ("bus_bandwidth(0.5, 4, 1.0)", lambda: ex.bus_bandwidth(0.5, 4, 1.0), 0.75),
        ("bus_bandwidth(1e9, 1, 1.0)", lambda: ex.bus_bandwidth(1e9, 1, 1.0), 0.0),
        ("half_bandwidth_bytes(4, 0.0, 1e10)", lambda: ex.half_bandwidth_bytes(4, 0.0, 1e10), 0.0),
    ]
    for label, call, want in cases:
        expect_seconds(call(), want, label, hint="these inputs are valid: compute, do not refuse")
    got = ex.best_slices(1e9, 8, 30e-6, 12.5e9, 5e9, 1)
    expect(
        got == 1,
        "best_slices with max_slices=1 must be 1",
        input="best_slices(1e9, 8, 30e-6, 12.5e9, 5e9, max_slices=1)",
        expected="1",
        got=repr(got),
        hint="scan S = 1 .. max_slices inclusive; max_slices = 1 is valid",
    )


@checks("ring_model")
def model_refuses_bad_input(ex):
    """world_size 0 or 2.0, slices 0, max_slices 0, negative bytes or alpha, zero bandwidths, seconds 0: ValueError"""
    ex.ring_allreduce_seconds(1e6, 4, 1e-6, 1e10)  # it works at all first
    for call, label in [
        (lambda: ex.ring_allreduce_seconds(1e6, 0, 1e-6, 1e10), "world_size=0"),
        (lambda: ex.ring_allreduce_seconds(1e6, 2.0, 1e-6, 1e10), "world_size=2.0"),
        (lambda: ex.ring_allreduce_seconds(-1.0, 4, 1e-6, 1e10), "nbytes=-1"),
        (lambda: ex.ring_allreduce_seconds(1e6, 4, -1e-6, 1e10), "alpha=-1e-6"),
        (lambda: ex.ring_allreduce_seconds(1e6, 4, 1e-6, 0.0), "bandwidth=0"),
        (lambda: ex.ring_allreduce_seconds(1e6, 4, 1e-6, 1e10, 0.0), "reduce_bandwidth=0"),
        (lambda: ex.ring_allreduce_seconds(1e6, 4, 1e-6, 1e10, 5e9, 0), "slices=0"),
        (lambda: ex.ring_allreduce_seconds(1e6, 4, 1e-6, 1e10, 5e9, 2.5), "slices=2.5"),
        (lambda: ex.best_slices(1e6, 4, 1e-6, 1e10, 5e9, 0), "best_slices(max_slices=0)"),
        (lambda: ex.best_slices(1e6, 4, 1e-6, 1e10, 5e9, 2.5), "best_slices(max_slices=2.5)"),
        (lambda: ex.bus_bandwidth(1e6, 4, 0.0), "bus_bandwidth(seconds=0)"),
        (lambda: ex.bus_bandwidth(1e6, 0, 1.0), "bus_bandwidth(world_size=0)"),
        (lambda: ex.half_bandwidth_bytes(0, 1e-6, 1e10), "half_bandwidth_bytes(world_size=0)"),
        (lambda: ex.half_bandwidth_bytes(4, 1e-6, -1.0), "half_bandwidth_bytes(bandwidth=-1)"),
    ]:
        expect_value_error(call, label, "refuse inputs outside the model with ValueError")


# ------------------------------------------------------------------------------------------ in the ranks


def rank_ring(learner, ranks, slices, data):
    group, member = make_group(ranks)
    if not member:
        return None
    mine, reference = data.clone(), data.clone()
    with Traffic() as traffic:
        returned = learner(mine, group, slices=slices)
    dist.all_reduce(reference, group=group)
    same = isinstance(returned, torch.Tensor) and returned.data_ptr() == mine.data_ptr()
    return mine, reference, traffic.events, same


def rank_refuse(learner, tensor, slices, ranks):
    group, member = make_group(ranks)
    if not member:
        return None
    with Traffic() as traffic:
        try:
            learner(tensor, group, slices=slices)
        except (ValueError, TypeError):
            if traffic.events:
                raise RuntimeError(f"refused only after {len(traffic.events)} message(s): validate first") from None
            raise


# ------------------------------------------------------------------------------------------ ring_allreduce

HINT_RING = (
    "step s of 2(p - 1): send chunk (r - s) % p, receive chunk (r - s - 1) % p, both cut with tensor_split(slices); "
    "add the received slices in the first p - 1 steps, copy them in the last p - 1"
)


def members_of(ranks):
    return list(range(P)) if ranks is None else list(ranks)


def ring_case(ex, data, ranks, slices):
    """Run the learner's ring on `data` (one tensor per global rank); the members' results and message logs."""
    label = (
        describe(tensor=data[0])
        + f", slices={slices}, "
        + ("world of 4" if ranks is None else f"group of global ranks {ranks}")
    )
    results = run_ranks(
        rank_ring,
        P,
        args=(ex.ring_allreduce, ranks, slices),
        rank_args=[(d,) for d in data],
        forbid=COLLECTIVES,
        instead=INSTEAD,
        deadline=DEADLINE_S,
    )
    values = expect_ranks_ok(results, input=label, hint=HINT_RING)
    members = members_of(ranks)
    logs = {r: values[r][2] for r in members}
    expect_balanced(logs, P, input=label, hint=BALANCE_HINT)
    for r in members:
        expect(
            values[r][3],
            "ring_allreduce does not return the tensor it reduced in place",
            input=f"{label}, rank {r}",
            expected="the same tensor object (its storage)",
            got="another object",
            hint="reduce into `tensor` itself and return it",
        )
    return {r: values[r] for r in members}, logs, label


def integers(*shape, dtype=torch.float32):
    """Small random integers in any dtype: every sum is exact, whatever the order of the additions."""
    return torch.randint(-50, 50, shape).to(dtype)


@checks("ring_allreduce")
def sums_like_all_reduce(ex):
    """groups of 4, 3 and 2 ranks; lengths 7, 15, 11, 2 (< p), 9; float32, float64, int64, int32; 1 to 4 slices"""
    for shape, dtype, ranks, slices in (
        ((7,), torch.float32, None, 1),
        ((3, 5), torch.float64, [1, 2, 3], 2),
        ((11,), torch.int64, [0, 2], 3),
        ((2,), torch.float32, None, 4),
        ((1, 9), torch.int32, [1, 2, 3], 2),
    ):
        data = [integers(*shape, dtype=dtype) for _ in range(P)]
        values, _, label = ring_case(ex, data, ranks, slices)
        for r, (mine, reference, _, _) in values.items():
            wrong = (mine != reference).reshape(-1).nonzero()
            expect(
                mine.dtype == reference.dtype and mine.shape == reference.shape and wrong.numel() == 0,
                f"rank {r}: {wrong.numel()} of {reference.numel()} elements differ from dist.all_reduce",
                input=label,
                expected=str(reference.reshape(-1)[:8].tolist()),
                got=str(mine.reshape(-1)[:8].tolist()),
                hint=HINT_RING,
            )


@checks("ring_allreduce")
def random_floats_close(ex):
    """random normal float32, 1001 elements, 5 slices, groups of 4 and 3: within the tolerance of a float64 sum"""
    for ranks in (None, [0, 1, 3]):
        data = [torch.randn(1001) for _ in range(P)]
        values, _, label = ring_case(ex, data, ranks, 5)
        oracle = sum(data[r].double() for r in members_of(ranks))
        for r, (mine, reference, _, _) in values.items():
            expect_close(
                mine, oracle, input=f"{label}, rank {r}", baseline=reference, dtype=torch.float32, hint=HINT_RING
            )


@checks("ring_allreduce")
def sliced_traffic(ex):
    """2(p - 1) S messages per rank, each a slice of at most ceil(chunk / S) elements; 2(p - 1) n elements in all"""
    for ranks, numel, slices in ((None, 40, 3), ([1, 2, 3], 40, 3), ([0, 3], 30, 4)):
        data = [integers(numel) for _ in range(P)]
        _, logs, label = ring_case(ex, data, ranks, slices)
        p = len(members_of(ranks))
        chunk = math.ceil(numel / p)
        largest_allowed = math.ceil(chunk / slices) * 4
        total = 0
        for r, events in logs.items():
            sizes = [nbytes for kind, _, nbytes in events if kind == "send"]
            total += sum(sizes)
            right = members_of(ranks)[(members_of(ranks).index(r) + 1) % p]
            expect(
                len(sizes) == 2 * (p - 1) * slices
                and max(sizes) <= largest_allowed
                and all(peer == right for kind, peer, _ in events if kind == "send"),
                f"rank {r} does not send the sliced schedule",
                input=label,
                expected=f"2(p - 1) S = {2 * (p - 1) * slices} messages of at most {largest_allowed} B, all to "
                f"global rank {right}",
                got=f"{len(sizes)} messages, the largest {max(sizes, default=0)} B, to ranks "
                f"{sorted({peer for kind, peer, _ in events if kind == 'send'})}",
                hint="cut each chunk with tensor_split(slices) and send every non-empty slice on its own",
            )
        expect(
            total == 2 * (p - 1) * numel * 4,
            "the ranks together send the wrong number of bytes",
            input=label,
            expected=f"2(p - 1) n = {2 * (p - 1) * numel * 4} B",
            got=f"{total} B",
            hint="each chunk travels p - 1 times in the reduce-scatter and p - 1 times in the all-gather",
        )


@checks("ring_allreduce")
def ring_refuses_bad_input(ex):
    """a bool tensor (TypeError), a transposed tensor, slices 0, 2.5 or True (ValueError): on every rank, before sending"""
    cases = [
        (torch.zeros(6, dtype=torch.bool), 1, (TypeError,), "a bool tensor"),
        (torch.zeros(4, 3).T, 1, (ValueError,), "a transposed (non-contiguous) tensor (3, 4)"),
        (torch.zeros(8), 0, (ValueError,), "slices=0"),
        (torch.zeros(8), 2.5, (ValueError,), "slices=2.5"),
        (torch.zeros(8), True, (ValueError,), "slices=True"),
    ]
    for tensor, slices, errors, label in cases:
        results = run_ranks(
            rank_refuse,
            P,
            args=(ex.ring_allreduce, tensor, slices, None),
            forbid=COLLECTIVES,
            instead=INSTEAD,
            deadline=DEADLINE_S,
        )
        expect_ranks_refuse(results, errors, input=label, hint="validate dtype, layout and slices before any message")
