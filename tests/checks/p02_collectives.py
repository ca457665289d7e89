"""Checks for p02.collectives. References: `dist.broadcast`, `dist.reduce_scatter_single`, `dist.all_gather_single`
and `dist.all_reduce` of gloo, run by the checks in the same ranks on the same data (a world of 4 real processes,
`llm_algo.distributed`, and a sub-group of global ranks [1, 2, 3]); float64 sums for the low-precision cases (gloo's
result is the baseline of the tolerance policy); and the message log of every rank (each `send`/`isend`/`recv`
wrapped by the checks' rank function) against the alpha-beta model's counts: messages and bytes per rank, and the
number of rounds of the broadcast tree."""

import math

import torch
import torch.distributed as dist

from llm_algo.check import CheckFailed, Checks, describe, expect, expect_close
from llm_algo.distributed import expect_ranks_ok, expect_ranks_refuse, run_ranks
from llm_algo.distributed.collectives import all_gather_single, reduce_scatter_single
from llm_algo.distributed.traffic import Traffic, expect_balanced, make_group

checks = Checks("p02.collectives")

P = 4  # one world for the whole lesson
BALANCE_HINT = "each step: one isend to the next rank and one recv from the previous, on the same chunk index"
SUBGROUP = [1, 2, 3]  # a sub-group whose group ranks differ from its global ranks, of a size that is not 2**k
DEADLINE_S = 8.0  # a ring or a tree that waits for a message nobody sends is reported within this
COLLECTIVES = tuple(
    f"torch.distributed.{name}"
    for name in (
        "all_reduce",
        "all_gather",
        "all_gather_into_tensor",
        "all_gather_single",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "reduce_scatter_single",
        "broadcast",
        "reduce",
        "all_to_all",
        "all_to_all_single",
        "gather",
        "scatter",
        "broadcast_object_list",
        "all_gather_object",
    )
)
INSTEAD = "build it from dist.send / dist.isend / dist.recv (the collectives are the checks' references)"


# ------------------------------------------------------------------------------------------ in the ranks


def rank_broadcast(learner, src, ranks, data):
    group, member = make_group(ranks)
    if not member:
        return None
    mine, reference = data.clone(), data.clone()
    with Traffic() as traffic:
        learner(mine, src, group)
    dist.broadcast(reference, src, group=group)
    return mine, reference, traffic.events


def rank_reduce_scatter(learner, ranks, data, garbage):
    group, member = make_group(ranks)
    if not member:
        return None
    inp, mine, reference = data.clone(), garbage.clone(), garbage.clone()
    with Traffic() as traffic:
        learner(mine, inp, group)
    reduce_scatter_single(reference.view(-1), data.clone().view(-1), group=group)
    return mine, reference, traffic.events, inp


def rank_all_gather(learner, ranks, data, garbage):
    group, member = make_group(ranks)
    if not member:
        return None
    inp, mine, reference = data.clone(), garbage.clone(), garbage.clone()
    with Traffic() as traffic:
        learner(mine, inp, group)
    all_gather_single(reference.view(-1), data.clone().view(-1), group=group)
    return mine, reference, traffic.events, inp


def rank_all_reduce(learner, ranks, data):
    group, member = make_group(ranks)
    if not member:
        return None
    mine, reference = data.clone(), data.clone()
    with Traffic() as traffic:
        learner(mine, group)
    dist.all_reduce(reference, group=group)
    return mine, reference, traffic.events


def rank_refuse(learner, args, ranks):
    """Only the call: every member must raise before sending anything."""
    group, member = make_group(ranks)
    if not member:
        return None
    with Traffic() as traffic:
        try:
            learner(*args, group=group)
        except (ValueError, TypeError):
            if traffic.events:
                raise RuntimeError(f"refused only after {len(traffic.events)} message(s): validate first") from None
            raise


# ------------------------------------------------------------------------------------------ in the grader


def collective(fn, rank_fn, *, input, hint, args=(), rank_args=None):
    """Run `rank_fn(fn, ...)` in the world of P ranks; the members' values (None for non-members)."""
    results = run_ranks(
        rank_fn, P, args=(fn, *args), rank_args=rank_args, forbid=COLLECTIVES, instead=INSTEAD, deadline=DEADLINE_S
    )
    return expect_ranks_ok(results, input=input, hint=hint)


def members_of(ranks):
    return list(range(P)) if ranks is None else list(ranks)


def expect_equal(got, want, *, input, hint, what="output"):
    expect(
        isinstance(got, torch.Tensor) and got.dtype == want.dtype and got.shape == want.shape,
        f"{what}: wrong dtype or shape",
        input=input,
        expected=f"{tuple(want.shape)} {want.dtype}",
        got=f"{tuple(got.shape)} {got.dtype}" if isinstance(got, torch.Tensor) else type(got).__name__,
        hint=hint,
    )
    wrong = (got != want).reshape(-1).nonzero()
    expect(
        wrong.numel() == 0,
        f"{what}: {wrong.numel()} of {want.numel()} elements differ from the torch collective",
        input=input,
        expected=str(want.reshape(-1)[:8].tolist()),
        got=str(got.reshape(-1)[:8].tolist()),
        hint=hint,
    )


def integers(*shape, dtype=torch.float32):
    """Random small integers in a float dtype: every sum is exact, whatever the order of the additions."""
    return torch.randint(-60, 60, shape).to(dtype)


def sent_by(events) -> tuple[int, int, int]:
    """(messages, bytes, largest message in bytes) sent by one rank."""
    sizes = [nbytes for kind, _, nbytes in events if kind == "send"]
    return len(sizes), sum(sizes), max(sizes, default=0)


# ------------------------------------------------------------------------------------------ tree_broadcast

HINT_BROADCAST = (
    "v = (group rank - root's group rank) % p; for d = 1, 2, 4, ... < p: v < d sends to v + d (if < p), "
    "d <= v < 2d receives from v - d; address peers with group_dst= / group_src="
)


def broadcast_case(fn, shape, dtype, src, ranks):
    members = members_of(ranks)
    data = [(integers(*shape, dtype=torch.float64) * 1.37).to(dtype) for _ in range(P)]  # a different one per rank
    label = describe(tensor=data[0]) + f", src={src}, " + ("world of 4" if ranks is None else f"sub-group {ranks}")
    values = collective(
        fn, rank_broadcast, args=(src, ranks), rank_args=[(d,) for d in data], input=label, hint=HINT_BROADCAST
    )
    logs = {r: values[r][2] for r in members}
    expect_balanced(logs, P, input=label, hint=BALANCE_HINT)
    for r in members:
        expect_equal(values[r][0], values[r][1], input=f"{label}, rank {r}", hint=HINT_BROADCAST, what="tensor")
    return logs, data, label


@checks("tree_broadcast")
def copies_the_source_everywhere(ex):
    """world of 4, src 0, 3 and 1; float32, int64, bf16, shapes (5,), (3, 4), (1,): every rank = dist.broadcast"""
    for shape, dtype, src in (((5,), torch.float32, 0), ((3, 4), torch.int64, 3), ((1,), torch.bfloat16, 1)):
        broadcast_case(ex.tree_broadcast, shape, dtype, src, None)


def tree_rounds(logs: dict, root: int, label: str) -> int:
    """Rounds of the broadcast when a rank sends one message at a time (one port): a rank's k-th send after it got
    the data arrives k rounds after it did. The largest arrival is the alpha term of the model."""
    arrival, todo = {root: 0}, [root]
    while todo:
        rank = todo.pop()
        sends = [peer for kind, peer, _ in logs[rank] if kind == "send"]
        for k, peer in enumerate(sends, start=1):
            if peer in arrival:
                raise CheckFailed(
                    f"rank {peer} receives the tensor twice",
                    input=label,
                    expected="each rank receives exactly once",
                    got=f"rank {rank} sends to rank {peer}, which already had it",
                    hint=HINT_BROADCAST,
                )
            arrival[peer] = arrival[rank] + k
            todo.append(peer)
    return max(arrival.values())


@checks("tree_broadcast")
def binomial_tree_traffic(ex):
    """p = 4 and p = 3: p - 1 messages in all, one received per rank, ceil(log2 p) rounds and sends by the root"""
    for ranks, src in ((None, 2), (SUBGROUP, 1)):
        members = members_of(ranks)
        p = len(members)
        logs, data, label = broadcast_case(ex.tree_broadcast, (6,), torch.float32, src, ranks)
        nbytes = data[0].numel() * data[0].element_size()
        received = {r: [b for kind, _, b in logs[r] if kind == "recv"] for r in members}
        for r in members:
            want = [] if r == src else [nbytes]
            expect(
                received[r] == want,
                f"rank {r} receives the wrong messages",
                input=label,
                expected=f"{len(want)} message(s) of {nbytes} B",
                got=f"{len(received[r])} message(s): {received[r]} B",
                hint="in a tree broadcast every rank but the source receives the whole tensor exactly once",
            )
        rounds, root_sends = tree_rounds(logs, src, label), sent_by(logs[src])[0]
        levels = math.ceil(math.log2(p))
        expect(
            rounds == levels and root_sends == levels,
            "not a binomial tree: wrong number of rounds",
            input=label,
            expected=f"ceil(log2 {p}) = {levels} rounds, {levels} sends by the source",
            got=f"{rounds} rounds, {root_sends} sends by the source",
            hint="every rank that has the data forwards it in the next rounds (the holders double each round); "
            "a source that sends to every rank itself costs p - 1 latencies",
        )


@checks("tree_broadcast")
def sub_group_with_a_global_src(ex):
    """sub-group of global ranks [1, 2, 3], src 3 and 2 (global ranks): the members get src's tensor"""
    for src, dtype in ((3, torch.float64), (2, torch.int32)):
        broadcast_case(ex.tree_broadcast, (2, 3), dtype, src, SUBGROUP)


@checks("tree_broadcast")
def broadcast_refuses_bad_input(ex):
    """src outside the sub-group, src out of range, a non-contiguous tensor: ValueError on every rank, before sending"""
    cases = [
        ((torch.zeros(4), 0), SUBGROUP, "src=0 in the sub-group [1, 2, 3]"),
        ((torch.zeros(4), 7), None, "src=7 in a world of 4"),
        ((torch.zeros(4, 3).T, 0), None, "a transposed (non-contiguous) tensor (3, 4)"),
    ]
    for args, ranks, label in cases:
        results = run_ranks(
            rank_refuse, P, args=(ex.tree_broadcast, args, ranks), forbid=COLLECTIVES, deadline=DEADLINE_S
        )
        expect_ranks_refuse(
            [results[r] for r in members_of(ranks)],
            (ValueError,),
            input=label,
            hint="check the tensor and src (dist.get_process_group_ranks(group)) before the first message",
        )


# ------------------------------------------------------------------------------------------ ring_reduce_scatter

HINT_RS = (
    "partial = input.reshape(p, -1).clone(); step s: isend row (r - s - 1) % p right, recv from the left, "
    "add into row (r - s - 2) % p; output = row r"
)


def reduce_scatter_case(fn, out_shape, dtype, ranks, values=integers):
    members = members_of(ranks)
    p = len(members)
    m = math.prod(out_shape)
    data = [values(p * m, dtype=dtype) for _ in range(P)]
    garbage = [torch.randn(out_shape).to(dtype) for _ in range(P)]
    label = describe(input=data[0], output=garbage[0]) + (", world of 4" if ranks is None else f", sub-group {ranks}")
    out = collective(
        fn,
        rank_reduce_scatter,
        args=(ranks,),
        rank_args=list(zip(data, garbage, strict=True)),
        input=label,
        hint=HINT_RS,
    )
    logs = {r: out[r][2] for r in members}
    expect_balanced(logs, P, input=label, hint=BALANCE_HINT)
    for r in members:
        expect_equal(out[r][3], data[r], input=f"{label}, rank {r}", hint="work on a copy", what="input after the call")
    return out, data, logs, label


@checks("ring_reduce_scatter")
def sums_like_reduce_scatter_single(ex):
    """integer-valued float32, float64, int64 (exact), output (1,), (3,), (2, 3), a group of one: reduce_scatter_single"""
    for out_shape, dtype, ranks in (
        ((3,), torch.float32, None),
        ((1,), torch.int64, None),
        ((2, 3), torch.float64, None),
        ((4,), torch.float32, [2]),  # a group of one rank: nothing to send, output = input
    ):
        out, _, _, label = reduce_scatter_case(ex.ring_reduce_scatter, out_shape, dtype, ranks)
        for r in members_of(ranks):
            expect_equal(out[r][0], out[r][1], input=f"{label}, rank {r}", hint=HINT_RS)


@checks("ring_reduce_scatter")
def reduce_scatter_traffic(ex):
    """p = 4 and the sub-group p = 3: p - 1 messages of one chunk (m elements) per rank"""
    for ranks in (None, SUBGROUP):
        out, data, logs, label = reduce_scatter_case(ex.ring_reduce_scatter, (5,), torch.float32, ranks)
        p = len(members_of(ranks))
        chunk = 5 * data[0].element_size()
        for r in members_of(ranks):
            messages, nbytes, largest = sent_by(logs[r])
            expect(
                messages == p - 1 and nbytes == (p - 1) * chunk,
                f"rank {r} sends the wrong traffic",
                input=label,
                expected=f"p - 1 = {p - 1} messages of {chunk} B (one chunk each)",
                got=f"{messages} messages, {nbytes} B in all, the largest {largest} B",
                hint="one chunk per step, p - 1 steps: the ring's bandwidth term is (p-1)/p n beta",
            )
            expect_equal(out[r][0], out[r][1], input=f"{label}, rank {r}", hint=HINT_RS)


@checks("ring_reduce_scatter")
def reduce_scatter_low_precision_and_sub_group(ex):
    """random positive fp16 / bf16 / fp32 values, world and sub-group: the float64 sum, within 4x gloo's rounding error"""
    for dtype, ranks in ((torch.float16, None), (torch.bfloat16, SUBGROUP), (torch.float32, SUBGROUP)):
        out, data, _, label = reduce_scatter_case(
            ex.ring_reduce_scatter, (7,), dtype, ranks, values=lambda n, dtype: (torch.rand(n) + 0.5).to(dtype)
        )
        members = members_of(ranks)
        p = len(members)
        exact = torch.stack([data[r].double().reshape(p, -1) for r in members]).sum(dim=0)  # (p, m)
        for i, r in enumerate(members):
            expect_close(
                out[r][0], exact[i], baseline=out[r][1], input=f"{label}, rank {r}", hint=HINT_RS + " (in its dtype)"
            )


@checks("ring_reduce_scatter")
def reduce_scatter_refuses_bad_input(ex):
    """input not p chunks of output's size (ValueError), dtypes that differ or bool (TypeError): every rank, at once"""
    cases = [
        ((torch.zeros(3), torch.zeros(13)), (ValueError,), "output (3,), input (13,) in a world of 4"),
        ((torch.zeros(3), torch.zeros(12, dtype=torch.float64)), (TypeError,), "output float32, input float64"),
        ((torch.zeros(3, dtype=torch.bool), torch.zeros(12, dtype=torch.bool)), (TypeError,), "bool tensors"),
    ]
    for args, errors, label in cases:
        results = run_ranks(
            rank_refuse, P, args=(ex.ring_reduce_scatter, args, None), forbid=COLLECTIVES, deadline=DEADLINE_S
        )
        expect_ranks_refuse(results, errors, input=label, hint="validate sizes and dtypes before the first message")


# ------------------------------------------------------------------------------------------ ring_all_gather

HINT_AG = (
    "blocks = output.view(p, -1); blocks[r] = input; step s: isend blocks[(r - s) % p] right, "
    "recv blocks[(r - s - 1) % p] from the left"
)


def all_gather_case(fn, in_shape, dtype, ranks):
    members = members_of(ranks)
    p = len(members)
    m = math.prod(in_shape)
    data = [(torch.randn(in_shape) * 10).to(dtype) for _ in range(P)]
    garbage = [(torch.randn(p * m) * 10).to(dtype) for _ in range(P)]
    label = describe(input=data[0], output=garbage[0]) + (", world of 4" if ranks is None else f", sub-group {ranks}")
    out = collective(
        fn, rank_all_gather, args=(ranks,), rank_args=list(zip(data, garbage, strict=True)), input=label, hint=HINT_AG
    )
    logs = {r: out[r][2] for r in members}
    expect_balanced(logs, P, input=label, hint=BALANCE_HINT)
    for r in members:
        expect_equal(out[r][0], out[r][1], input=f"{label}, rank {r}", hint=HINT_AG)
        expect_equal(out[r][3], data[r], input=f"{label}, rank {r}", hint="leave the input alone", what="input")
    return logs, data, label


@checks("ring_all_gather")
def gathers_like_all_gather_single(ex):
    """world of 4: float32 (3,), int64 (1,), bf16 (2, 2) inputs gathered in rank order, as dist.all_gather_single"""
    for in_shape, dtype in (((3,), torch.float32), ((1,), torch.int64), ((2, 2), torch.bfloat16)):
        all_gather_case(ex.ring_all_gather, in_shape, dtype, None)


@checks("ring_all_gather")
def all_gather_traffic(ex):
    """p = 4 and the sub-group p = 3: p - 1 messages of one chunk per rank"""
    for ranks in (None, SUBGROUP):
        logs, data, label = all_gather_case(ex.ring_all_gather, (6,), torch.float32, ranks)
        p = len(members_of(ranks))
        chunk = data[0].numel() * data[0].element_size()
        for r in members_of(ranks):
            messages, nbytes, largest = sent_by(logs[r])
            expect(
                messages == p - 1 and nbytes == (p - 1) * chunk,
                f"rank {r} sends the wrong traffic",
                input=label,
                expected=f"p - 1 = {p - 1} messages of {chunk} B",
                got=f"{messages} messages, {nbytes} B in all, the largest {largest} B",
                hint="one chunk per step, p - 1 steps (not the whole output)",
            )


@checks("ring_all_gather")
def sub_group_in_group_rank_order(ex):
    """sub-group [1, 2, 3]: output chunk j holds the input of group rank j (global rank j + 1), float64 and int32"""
    for dtype in (torch.float64, torch.int32):
        all_gather_case(ex.ring_all_gather, (4,), dtype, SUBGROUP)


@checks("ring_all_gather")
def all_gather_refuses_bad_input(ex):
    """output not p x input (ValueError), a non-contiguous output (ValueError), dtypes that differ (TypeError)"""
    cases = [
        ((torch.zeros(10), torch.zeros(3)), (ValueError,), "output (10,), input (3,) in a world of 4"),
        ((torch.zeros(3, 4).T, torch.zeros(3)), (ValueError,), "output (4, 3) transposed (non-contiguous)"),
        ((torch.zeros(12, dtype=torch.int64), torch.zeros(3)), (TypeError,), "output int64, input float32"),
    ]
    for args, errors, label in cases:
        results = run_ranks(
            rank_refuse, P, args=(ex.ring_all_gather, args, None), forbid=COLLECTIVES, deadline=DEADLINE_S
        )
        expect_ranks_refuse(results, errors, input=label, hint="validate sizes, layout and dtypes first")


# ------------------------------------------------------------------------------------------ ring_all_reduce

HINT_AR = (
    "chunks = tensor.view(-1).tensor_split(p); reduce-scatter: isend chunk (r - s) % p, add the received one "
    "into (r - s - 1) % p; all-gather: isend chunk (r - s + 1) % p, recv into (r - s) % p"
)


def all_reduce_case(fn, shape, dtype, ranks, values=integers):
    members = members_of(ranks)
    data = [values(*shape, dtype=dtype) for _ in range(P)]
    label = describe(tensor=data[0]) + (", world of 4" if ranks is None else f", sub-group {ranks}")
    out = collective(fn, rank_all_reduce, args=(ranks,), rank_args=[(d,) for d in data], input=label, hint=HINT_AR)
    logs = {r: out[r][2] for r in members}
    expect_balanced(logs, P, input=label, hint=BALANCE_HINT)
    return out, data, logs, label


@checks("ring_all_reduce")
def sums_lengths_that_do_not_divide(ex):
    """world of 4, integer values: n = 13, 7, 2 (< p), (3, 5), and int64: every rank = dist.all_reduce, exactly"""
    for shape, dtype in (((13,), torch.float32), ((7,), torch.int64), ((2,), torch.float64), ((3, 5), torch.float32)):
        out, _, _, label = all_reduce_case(ex.ring_all_reduce, shape, dtype, None)
        for r in range(P):
            expect_equal(out[r][0], out[r][1], input=f"{label}, rank {r}", hint=HINT_AR, what="tensor")


@checks("ring_all_reduce")
def all_reduce_traffic(ex):
    """n = 14 and 16 on 4 ranks, 10 on 3: 2(p - 1) messages per rank, 2(p - 1) n elements in all, chunks <= ceil(n/p)"""
    for n, ranks in ((14, None), (16, None), (10, SUBGROUP)):
        out, data, logs, label = all_reduce_case(ex.ring_all_reduce, (n,), torch.float32, ranks)
        members = members_of(ranks)
        p = len(members)
        counts = {r: sent_by(logs[r]) for r in members}
        total = sum(nbytes for _, nbytes, _ in counts.values())
        for r in members:
            messages, _, largest = counts[r]
            expect(
                messages == 2 * (p - 1) and largest <= math.ceil(n / p) * 4,
                f"rank {r} sends the wrong messages",
                input=label,
                expected=f"2(p - 1) = {2 * (p - 1)} messages of at most ceil(n/p) = {math.ceil(n / p)} elements",
                got=f"{messages} messages, the largest {largest // 4} elements",
                hint="one chunk per step, p - 1 reduce-scatter steps and p - 1 all-gather steps",
            )
        expect(
            total == 2 * (p - 1) * n * 4,
            "wrong number of bytes over all ranks",
            input=label,
            expected=f"2(p - 1) n x 4 B = {2 * (p - 1) * n * 4} B",
            got=f"{total} B",
            hint="every chunk travels p - 1 hops in each phase; tensor_split, no padding",
        )
        for r in members:
            expect_equal(out[r][0], out[r][1], input=f"{label}, rank {r}", hint=HINT_AR, what="tensor")


@checks("ring_all_reduce")
def all_reduce_low_precision_and_sub_group(ex):
    """random positive fp16 / bf16 / fp64 / fp32: the float64 sum, within 4x gloo's rounding error; a sub-group too"""
    for shape, dtype, ranks in (
        ((11,), torch.float16, None),
        ((9,), torch.bfloat16, SUBGROUP),
        ((5, 2), torch.float64, None),
        ((6,), torch.float32, SUBGROUP),
    ):
        out, data, _, label = all_reduce_case(
            ex.ring_all_reduce, shape, dtype, ranks, values=lambda *s, dtype: (torch.rand(*s) + 0.5).to(dtype)
        )
        members = members_of(ranks)
        exact = torch.stack([data[r].double() for r in members]).sum(dim=0)
        for r in members:
            expect_close(out[r][0], exact, baseline=out[r][1], input=f"{label}, rank {r}", hint=HINT_AR)


@checks("ring_all_reduce")
def all_reduce_refuses_bad_input(ex):
    """a bool tensor (TypeError), a non-contiguous one (ValueError): on every rank, before any message"""
    cases = [
        ((torch.zeros(8, dtype=torch.bool),), (TypeError,), "a bool tensor (8,)"),
        ((torch.zeros(4, 3).T,), (ValueError,), "a transposed (non-contiguous) tensor (3, 4)"),
    ]
    for args, errors, label in cases:
        results = run_ranks(
            rank_refuse, P, args=(ex.ring_all_reduce, args, None), forbid=COLLECTIVES, deadline=DEADLINE_S
        )
        expect_ranks_refuse(results, errors, input=label, hint="check the dtype and the layout first")
