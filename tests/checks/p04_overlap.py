"""Checks for p04.overlap. `overlap_schedule` against an event-by-event simulation written without the recurrence
(a clock that jumps from one completion to the next) and hand-computed schedules; `BucketReducer` in real 2- and
3-rank gloo worlds (`llm_algo.distributed`) against single-process training on the full batch (float64),
`torch.nn.parallel.DistributedDataParallel` (forbidden to the learner), torch's bucket assignment
`dist._compute_bucket_assignment_by_size`, and a recorder of gradient hooks, all-reduce launches and waits."""

import inspect

import torch
import torch.distributed as dist
import torch.nn as nn

from llm_algo.check import Checks, expect, expect_close, expect_refused, one_thread
from llm_algo.distributed import attempted as distributed_attempted
from llm_algo.distributed import expect_ranks_ok, run_ranks

checks = Checks("p04.overlap")

DEADLINE = 20.0  # a mistake that leaves one rank waiting in a collective ends here, not at the 30 s default
FORBID = ("torch.nn.parallel.DistributedDataParallel", "torch.distributed._compute_bucket_assignment_by_size")
INSTEAD = "register the hooks and launch the all-reduces yourself (torch's DDP is the checks' reference)"


# ------------------------------------------------------------------------------------------ overlap_schedule


def simulate(backward_ms, buckets, comm_ms):
    """Event by event: one compute engine differentiating layers L-1..0, one link running buckets in order. The clock
    jumps to the next completion; after each, whatever can start starts. Returns (finish, intervals)."""
    layers = list(reversed(range(len(backward_ms))))
    finished, intervals = set(), [None] * len(buckets)
    clock, computing, on_link, next_bucket = 0.0, None, None, 0
    while True:
        if computing is None and layers:
            layer = layers.pop(0)
            computing = (layer, clock + backward_ms[layer])
        if on_link is None and next_bucket < len(buckets) and set(buckets[next_bucket]) <= finished:
            on_link = (next_bucket, clock, clock + comm_ms[next_bucket])
            next_bucket += 1
        pending = [t for t in (computing and computing[1], on_link and on_link[2]) if t is not None]
        if not pending:
            return clock, intervals
        clock = min(pending)
        if computing is not None and computing[1] == clock:
            finished.add(computing[0])
            computing = None
        elif on_link is not None and on_link[2] == clock:
            intervals[on_link[0]] = (on_link[1], on_link[2])
            on_link = None


def expect_schedule(ex, backward_ms, buckets, comm_ms, *, label, hint, want=None):
    got = ex.overlap_schedule(list(backward_ms), [list(b) for b in buckets], list(comm_ms))
    want_finish, want_intervals = want if want is not None else simulate(backward_ms, buckets, comm_ms)
    expect(
        isinstance(got, tuple) and len(got) == 2,
        "overlap_schedule must return (finish_ms, intervals)",
        input=label,
        expected="a tuple (float, list of (start, end))",
        got=repr(got)[:200],
    )
    finish, intervals = got
    expect(
        len(intervals) == len(buckets),
        "one (start, end) per bucket",
        input=label,
        expected=f"{len(buckets)} intervals",
        got=f"{len(intervals)}",
    )
    expect_close(
        torch.tensor([[float(s), float(e)] for s, e in intervals], dtype=torch.float64).reshape(-1, 2),
        torch.tensor(want_intervals, dtype=torch.float64).reshape(-1, 2),
        input=label,
        what="bucket (start, end) intervals",
        hint=hint,
    )
    expect_close(
        torch.tensor(float(finish), dtype=torch.float64),
        torch.tensor(want_finish, dtype=torch.float64),
        input=label,
        what="finish time",
        hint=hint,
    )


@checks("overlap_schedule")
def hand_computed_schedules(ex):
    """backward [4, 2, 3] ms, buckets [[2], [1, 0]]: ready at 3 and 9; comm [5, 1] -> 10 ms, [7, 1] -> 11 ms"""
    for comm, want in (
        ([5.0, 1.0], (10.0, [(3.0, 8.0), (9.0, 10.0)])),
        ([7.0, 1.0], (11.0, [(3.0, 10.0), (10.0, 11.0)])),
        ([0.0, 0.0], (9.0, [(3.0, 3.0), (9.0, 9.0)])),
    ):
        expect_schedule(
            ex,
            [4.0, 2.0, 3.0],
            [[2], [1, 0]],
            comm,
            label=f"backward_ms=[4, 2, 3], buckets=[[2], [1, 0]], comm_ms={comm}",
            hint="layer 2 is differentiated first (ready at 3), layer 0 last (at 9); a bucket waits for its last "
            "gradient and for the previous all-reduce to end",
            want=want,
        )
    expect_schedule(
        ex,
        [2.0, 0.0],
        [[1], [0]],
        [3.0, 1.0],
        label="backward_ms=[2, 0], buckets=[[1], [0]], comm_ms=[3, 1]: bucket 0 is ready at time 0",
        hint="the link is free from time 0: bucket 0 runs 0 -> 3, bucket 1 (ready at 2) waits for it, 3 -> 4",
        want=(4.0, [(0.0, 3.0), (3.0, 4.0)]),
    )
    expect_schedule(
        ex,
        [1.0, 1.0, 1.0, 1.0],
        [[0, 1, 2, 3]],
        [6.0],
        label="one bucket with every layer: no overlap at all",
        hint="a single bucket is ready only when backward ends: the step is backward + its all-reduce",
        want=(10.0, [(4.0, 10.0)]),
    )


@checks("overlap_schedule")
def random_schedules_match_event_simulation(ex):
    """random layer and bucket times, buckets contiguous in reverse order or shuffled: the event simulation's answer"""
    generator = torch.Generator().manual_seed(4)
    for case in range(40):
        layers = int(torch.randint(1, 12, (), generator=generator))
        backward = torch.randint(0, 9, (layers,), generator=generator).double().tolist()
        order = list(reversed(range(layers)))
        if case % 3 == 2:  # buckets that are not in readiness order: a late bucket holds up the ones behind it
            order = [order[i] for i in torch.randperm(layers, generator=generator).tolist()]
        cuts = sorted(set(torch.randint(1, layers + 1, (3,), generator=generator).tolist()) | {layers})
        buckets, start = [], 0
        for cut in cuts:
            if cut > start:
                buckets.append(order[start:cut])
                start = cut
        scale = [0.3, 1.0, 4.0][case % 3]  # fast, balanced and slow links
        comm = (scale * torch.randint(0, 9, (len(buckets),), generator=generator).double()).tolist()
        expect_schedule(
            ex,
            backward,
            buckets,
            comm,
            label=f"backward_ms={backward}, buckets={buckets}, comm_ms={comm}",
            hint="ready time of a bucket = when its LAST layer finishes (backward runs from layer L-1 down to 0); "
            "start = max(ready, end of the previous bucket)",
        )


@checks("overlap_schedule")
def bounds_of_overlap(ex):
    """the step is at least backward and at least the link's total work, at most backward + all communication"""
    generator = torch.Generator().manual_seed(9)
    for _ in range(20):
        layers = int(torch.randint(2, 16, (), generator=generator))
        backward = (torch.rand(layers, generator=generator, dtype=torch.float64) * 5).tolist()
        size = int(torch.randint(1, 4, (), generator=generator))
        order = list(reversed(range(layers)))
        buckets = [order[i : i + size] for i in range(0, layers, size)]
        comm = (torch.rand(len(buckets), generator=generator, dtype=torch.float64) * 8).tolist()
        finish, _ = ex.overlap_schedule(backward, buckets, comm)
        total_backward, total_comm = sum(backward), sum(comm)
        first_ready = sum(backward[min(buckets[0]) :])
        low = max(total_backward, first_ready + total_comm, total_backward + comm[-1])
        high = total_backward + total_comm
        expect(
            low - 1e-9 <= float(finish) <= high + 1e-9,
            "the finish time breaks the bounds of any overlapped schedule",
            input=f"{layers} layers of {size}-layer buckets, backward {total_backward:.3f} ms, comm {total_comm:.3f} ms",
            expected=f"between {low:.4f} (backward + last bucket; first ready + all comm) and {high:.4f} (no overlap)",
            got=f"{float(finish):.4f}",
            hint="the last bucket holds layer 0 and starts after backward; the link runs one all-reduce at a time",
        )


@checks("overlap_schedule")
def refuses_bad_schedules(ex):
    """negative times, wrong comm length, an empty bucket, a layer missing or twice or out of range, no layers"""
    cases = [
        (([1.0, -1.0], [[1, 0]], [1.0]), "a negative backward time"),
        (([1.0, 1.0], [[1, 0]], [-0.5]), "a negative communication time"),
        (([1.0, 1.0], [[1], [0]], [1.0]), "2 buckets, 1 communication time"),
        (([1.0, 1.0], [[1, 0], []], [1.0, 1.0]), "an empty bucket"),
        (([1.0, 1.0, 1.0], [[2], [1]], [1.0, 1.0]), "layer 0 in no bucket"),
        (([1.0, 1.0], [[1, 0], [0]], [1.0, 1.0]), "layer 0 in two buckets"),
        (([1.0, 1.0], [[2, 1, 0]], [1.0]), "layer 2 of a 2-layer model"),
        (([], [], []), "no layers"),
    ]
    for args, label in cases:
        expect_refused(
            lambda args=args: ex.overlap_schedule(*args),
            input=f"{label}: overlap_schedule{args}",
            hint="validate before computing: times >= 0, one comm time per bucket, the buckets partition the layers",
            errors=(ValueError,),
        )


# ------------------------------------------------------------------------------------------ BucketReducer


def ranks(fn, world, **options):
    """run_ranks with torch._dynamo preloaded (torch's DDP imports it on first use: seconds of CPU that must not count
    against the learner's deadline)."""
    return run_ranks(
        fn, world, deadline=DEADLINE, preload=("torch._dynamo",), forbid=FORBID, instead=INSTEAD, **options
    )


def attempted(ex) -> None:
    """In the grader, before starting ranks: the skeleton raises NotImplementedError (not attempted)."""
    distributed_attempted(lambda: ex.BucketReducer("not a list"))


class Net(nn.Module):
    """Layers of different widths (buckets of different sizes), one weight used twice (its hook fires once)."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(6, 10)
        self.mid = nn.Linear(10, 10)
        self.out = nn.Linear(10, 3, bias=False)

    def forward(self, x):
        h = torch.tanh(self.inp(x))
        h = torch.tanh(self.mid(h)) + torch.tanh(self.mid(h * 0.5))  # mid used twice in one forward
        return self.out(h)


def params_of(model):
    return list(model.parameters())


def torch_buckets(params, cap):
    """torch's DDP assignment, mapped back to indices of `params` (it walks the tensors in reverse)."""
    walk = list(reversed(params))
    buckets, _ = dist._compute_bucket_assignment_by_size(walk, [cap], [False] * len(walk))
    return [[len(params) - 1 - j for j in bucket] for bucket in buckets]


def make_batches(steps, batch):
    generator = torch.Generator().manual_seed(steps * 100 + batch)
    return [
        (torch.randn(batch, 6, generator=generator), torch.randn(batch, 3, generator=generator)) for _ in range(steps)
    ]


def shard(tensor, rank, world):
    size = tensor.shape[0] // world
    return tensor[rank * size : (rank + 1) * size]


def loss_of(model, x, y):
    return (model(x) - y).pow(2).mean()


@torch.no_grad()
def sgd_step(params, lr=0.3):
    for p in params:
        p.sub_(lr * p.grad)


def single_process(seed, dtype, batches):
    """The reference: one process, the full batches, the same seed."""
    torch.manual_seed(seed)
    model = Net().to(dtype)
    for x, y in batches:
        model.zero_grad()
        loss_of(model, x.to(dtype), y.to(dtype)).backward()
        sgd_step(model.parameters())
    return [p.detach().clone() for p in model.parameters()]


def train_with_reducer(reducer_class, seed, dtype, batches, cap, groups=None):
    """In every rank: the same initial model (same seed), this rank's shards; zero_grad alternates between the
    reducer's (in place) and torch's default (.grad = None, which the hook must bring back into the buffer). With
    `groups` (lists of ranks that partition the world), each rank's reducer gets its group, and the batch is sharded
    over the group's members only."""
    rank, world = dist.get_rank(), dist.get_world_size()
    options, index, size = {}, rank, world
    if groups is not None:
        handles = [dist.new_group(members) for members in groups]  # every rank creates every group, in order
        members = next(members for members in groups if rank in members)
        options["group"] = handles[groups.index(members)]
        index, size = members.index(rank), len(members)
    torch.manual_seed(seed)
    model = Net().to(dtype)
    reducer = reducer_class(params_of(model), bucket_cap_bytes=cap, **options)
    for step, (x, y) in enumerate(batches):
        if step % 2 == 0:
            reducer.zero_grad()
        else:
            model.zero_grad(set_to_none=True)
        loss_of(model, shard(x, index, size).to(dtype), shard(y, index, size).to(dtype)).backward()
        reducer.wait()
        sgd_step(model.parameters())
    return [p.detach().clone() for p in model.parameters()]


def expect_replicas(per_rank, want, *, label, hint):
    names = [name for name, _ in Net().named_parameters()]
    for rank, params in enumerate(per_rank):
        for name, got, expected in zip(names, params, want, strict=True):
            expect_close(got, expected, input=f"{label}, rank {rank}", what=name, hint=hint)


@checks("bucket_reducer")
@one_thread()
def matches_single_process_training(ex):
    """2 and 3 ranks, float64, 4 SGD steps, two bucket caps: every rank equals one process on the full batch"""
    attempted(ex)
    batches = make_batches(4, 12)
    want = single_process(3, torch.float64, batches)
    for world, cap in ((2, 88 * 8), (3, 1), (3, 10**6)):
        label = f"{world} ranks, Net float64, batch 12 = {world} x {12 // world}, 4 SGD steps, bucket cap {cap} bytes"
        results = ranks(train_with_reducer, world, args=(ex.BucketReducer, 3, torch.float64, batches, cap))
        per_rank = expect_ranks_ok(results, input=label, hint="divide each bucket by the world size, all-reduce it")
        expect_replicas(
            per_rank,
            want,
            label=label,
            hint="every p.grad must be its bucket's view, averaged after wait(); after zero_grad(set_to_none=True) "
            "the hook must copy the fresh .grad into the view",
        )


def with_torch_ddp(reducer_class, seed, batches, cap):
    """In every rank: the learner's reducer and torch's DDP (gradient_as_bucket_view) trained alike, float32."""
    rank, world = dist.get_rank(), dist.get_world_size()
    out = []
    for kind in ("yours", "torch"):
        torch.manual_seed(seed)
        model = Net()
        if kind == "torch":
            wrapped = torch.nn.parallel.DistributedDataParallel(
                model, bucket_cap_mb=cap / 2**20, gradient_as_bucket_view=True
            )
        else:
            wrapped, reducer = model, reducer_class(params_of(model), bucket_cap_bytes=cap)
        for x, y in batches:
            model.zero_grad(set_to_none=False)
            loss_of(wrapped, shard(x, rank, world), shard(y, rank, world)).backward()
            if kind == "yours":
                reducer.wait()
            sgd_step(model.parameters())
        out.append([p.detach().clone() for p in model.parameters()])
    return out


@checks("bucket_reducer")
@one_thread()
def matches_torch_distributed_data_parallel(ex):
    """2 ranks, float32, 3 steps: the same parameters as torch's DistributedDataParallel(gradient_as_bucket_view)"""
    attempted(ex)
    batches = make_batches(3, 8)
    label = "2 ranks, Net float32, 3 SGD steps, the same seed and bucket cap (352 bytes) for yours and torch's DDP"
    per_rank = expect_ranks_ok(ranks(with_torch_ddp, 2, args=(ex.BucketReducer, 5, batches, 352)), input=label)
    names = [name for name, _ in Net().named_parameters()]
    for rank, (mine, theirs) in enumerate(per_rank):
        for name, got, want in zip(names, mine, theirs, strict=True):
            expect_close(
                got, want, input=f"{label}, rank {rank}", what=name, hint="torch's DDP averages every gradient"
            )


@checks("bucket_reducer")
@one_thread()
def averages_over_its_group(ex):
    """group=: a world of 3 split into groups {0, 1} and {2}: each rank equals one process on the full batch"""
    attempted(ex)
    batches = make_batches(3, 12)
    want = single_process(4, torch.float64, batches)
    label = (
        "world of 3 ranks, BucketReducer(..., group=) with groups [0, 1] (6 rows each) and [2] (12 rows), Net "
        "float64, 3 SGD steps, bucket cap 352 bytes"
    )
    groups = [[0, 1], [2]]  # a reducer that uses the world instead of its group mixes in the third rank
    results = ranks(train_with_reducer, 3, args=(ex.BucketReducer, 4, torch.float64, batches, 352, groups))
    per_rank = expect_ranks_ok(results, input=label, hint="all-reduce over `group` and divide by its size")
    expect_replicas(
        per_rank,
        want,
        label=label,
        hint="keep `group`: dist.get_world_size(group) and dist.all_reduce(..., group=group); the default group is "
        "the whole world",
    )


class RecordedWork:
    """The checks' wrapper of an all-reduce's Work handle: records when it is waited on."""

    def __init__(self, work, number, events):
        self.work, self.number, self.events = work, number, events

    def wait(self, *args, **kwargs):
        self.events.append(("wait", self.number))
        return self.work.wait(*args, **kwargs)

    def is_completed(self):
        return self.work.is_completed()


def record_step(reducer_class, cap):
    """In every rank: the events of two steps (hooks of the checks, all-reduce launches, waits), the buffers' layout."""
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1)
    model = Net()
    params = params_of(model)
    events = []
    params[0].register_post_accumulate_grad_hook(lambda p: events.append(("last gradient", 0)))  # before the reducer's
    original = dist.all_reduce
    signature = inspect.signature(original)

    def recording_all_reduce(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        number = sum(kind == "all_reduce" for kind, _ in events)
        asynchronous = bool(bound.arguments.get("async_op", False))
        events.append(("all_reduce", (number, bound.arguments["tensor"].numel(), asynchronous)))
        work = original(*args, **kwargs)
        return RecordedWork(work, number, events) if work is not None else None

    reducer = reducer_class(params, bucket_cap_bytes=cap)
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(rank))

    def current_layout(when):
        buffers = list(getattr(reducer, "buffers", []))
        views = [
            p.grad is not None
            and any(p.grad.untyped_storage().data_ptr() == b.untyped_storage().data_ptr() for b in buffers)
            for p in params
        ]
        return when, [int(b.numel()) for b in buffers], views

    layout = [current_layout("after construction")]
    dist.all_reduce = recording_all_reduce
    try:
        for step in range(2):
            events.append(("step", step))
            reducer.zero_grad() if step == 0 else model.zero_grad(set_to_none=True)
            model(x).pow(2).mean().backward()
            events.append(("backward returned", step))
            reducer.wait()
            events.append(("wait returned", step))
            layout.append(
                current_layout(f"after step {step}" + (" (zero_grad(set_to_none=True) before it)" if step else ""))
            )
    finally:
        dist.all_reduce = original
    return events, layout, world


def recorded(ex, cap):
    attempted(ex)
    label = f"2 ranks, Net float32, bucket cap {cap} bytes, two steps"
    return label, expect_ranks_ok(ranks(record_step, 2, args=(ex.BucketReducer, cap)), input=label)[0]


def want_sizes(cap):
    params = params_of(Net())
    return [sum(params[i].numel() for i in bucket) for bucket in torch_buckets(params, cap)]


@checks("bucket_reducer")
@one_thread()
def launches_during_backward_waits_before_step(ex):
    """one async all-reduce per bucket (torch's buckets, in order), all but the last before backward's last
    gradient, none waited on before backward returns, every one waited on in wait(); for three bucket caps"""
    for cap in (1, 352, 10**6):
        label, (events, _, _) = recorded(ex, cap)
        sizes = want_sizes(cap)
        for step in range(2):
            begin, end = events.index(("step", step)), events.index(("wait returned", step))
            window = events[begin:end]
            launches = [value for kind, value in window if kind == "all_reduce"]
            expect(
                [n for _, n, _ in launches] == sizes,
                "the all-reduces are not one per bucket, in bucket order",
                input=f"{label}, step {step}",
                expected=f"all-reduces of {sizes} values (torch's buckets, the last parameters first)",
                got=f"{[n for _, n, _ in launches]}",
                hint="assign_buckets(params, bucket_cap_bytes); launch bucket b's whole buffer when b is complete "
                "and every bucket before it is launched; reset the state in wait()",
            )
            expect(
                all(asynchronous for _, _, asynchronous in launches),
                "an all-reduce was not asynchronous",
                input=f"{label}, step {step}",
                expected="dist.all_reduce(buffer, group=..., async_op=True) for every bucket",
                got=str(launches),
                hint="a blocking all-reduce inside a hook stops backward until the communication is done",
            )
            kinds = [kind for kind, _ in window]
            before_last = kinds[: kinds.index("last gradient")].count("all_reduce") if "last gradient" in kinds else 0
            expect(
                before_last == len(sizes) - 1,
                "the all-reduces do not overlap backward",
                input=f"{label}, step {step}; inp.weight's gradient is the last one backward produces",
                expected=f"the first {len(sizes) - 1} bucket(s) launched before inp.weight's gradient is ready",
                got=f"{before_last} launched before it; events: {kinds}",
                hint="launch a bucket from the hook of its last gradient, not in wait()",
            )
            returned = window.index(("backward returned", step))
            early = [value for kind, value in window[:returned] if kind == "wait"]
            waited = sorted(value for kind, value in window[returned:] if kind == "wait")
            numbers = sorted(number for number, _, _ in launches)
            expect(
                not early and waited == numbers,
                "the work handles are not waited on in wait()",
                input=f"{label}, step {step}",
                expected=f"handles {numbers} each waited on after backward returned, inside wait()",
                got=f"waited during backward: {early}; in wait(): {waited}",
                hint="keep the handle dist.all_reduce(..., async_op=True) returns; wait() calls .wait() on each",
            )


@checks("bucket_reducer")
@one_thread()
def gradients_are_views_of_the_buckets(ex):
    """one flat buffer per bucket, as many values as the parameters; every .grad a view into one from construction
    on, also after zero_grad(set_to_none=True)"""
    for cap in (352, 1):
        label, (_, layout, _) = recorded(ex, cap)
        sizes = want_sizes(cap)
        for when, buffer_sizes, views in layout:
            expect(
                buffer_sizes == sizes,
                "the bucket buffers are not one flat tensor per bucket",
                input=f"{label}, {when}",
                expected=f"reducer.buffers of {sizes} values",
                got=f"{buffer_sizes}",
                hint="allocate one zeroed flat tensor per bucket once, in __init__, in bucket order",
            )
            expect(
                all(views),
                "a gradient is not a view into its bucket buffer",
                input=f"{label}, {when}",
                expected="every p.grad shares its storage with one of reducer.buffers",
                got=f"views per parameter: {views}",
                hint="p.grad = buffer[offset:offset + n].view_as(p); in the hook, if p.grad is not the view any "
                "more, copy it into the view and set p.grad = view",
            )


def try_reducer(reducer_class, cases):
    """In every rank: each case's outcome (error type name or "accepted"), and how many all-reduces it issued."""
    original, calls = dist.all_reduce, []

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    outcomes = []
    dist.all_reduce = counting
    try:
        for make in cases:
            calls.clear()
            try:
                make(reducer_class)
                outcomes.append(("accepted", len(calls)))
            except Exception as error:  # noqa: BLE001 (reported to the grader, which judges the type)
                outcomes.append((type(error).__name__, len(calls)))
    finally:
        dist.all_reduce = original
    return outcomes


def frozen(cls):
    return cls([nn.Parameter(torch.zeros(3)), nn.Parameter(torch.zeros(2), requires_grad=False)])


def twice(cls):
    p = nn.Parameter(torch.zeros(3))
    return cls([p, p])


def wait_before_backward(cls):
    return cls([nn.Parameter(torch.zeros(3))]).wait()


def half_backward(cls):
    a, b = nn.Parameter(torch.ones(3)), nn.Parameter(torch.ones(3))
    reducer = cls([a, b], bucket_cap_bytes=1)  # two buckets; only b gets a gradient, so only bucket 0 is launched
    b.sum().backward()
    return reducer.wait()


REFUSALS = [
    (lambda cls: cls("abc"), "BucketReducer('abc')", "TypeError"),
    (lambda cls: cls([torch.zeros(3, requires_grad=True), 3.0]), "a float among the tensors", "TypeError"),
    (lambda cls: cls([]), "BucketReducer([])", "ValueError"),
    (frozen, "a parameter with requires_grad=False", "ValueError"),
    (twice, "the same parameter twice", "ValueError"),
    (lambda cls: cls([nn.Parameter(torch.zeros(3))], bucket_cap_bytes=0), "bucket_cap_bytes=0", "ValueError"),
    (lambda cls: cls([nn.Parameter(torch.zeros(3))], bucket_cap_bytes=-8), "bucket_cap_bytes=-8", "ValueError"),
    (lambda cls: cls((nn.Parameter(torch.zeros(3)),), bucket_cap_bytes=1), "a tuple, cap 1 (valid)", "accepted"),
    (wait_before_backward, "wait() before any backward", "RuntimeError"),
    (half_backward, "wait() after a backward that reached only one of two buckets", "RuntimeError"),
]


@checks("bucket_reducer")
def refuses_bad_input(ex):
    """TypeError / ValueError for bad params or cap before any all-reduce; RuntimeError from wait() when a bucket
    was never launched"""
    attempted(ex)
    expect_refused(
        lambda: ex.BucketReducer(torch.zeros(3, requires_grad=True)),
        input="BucketReducer(tensor) (a tensor, not a list), in the grader process",
        hint="check isinstance(params, list | tuple) before anything that needs the process group",
        errors=(TypeError,),
    )
    results = ranks(try_reducer, 2, args=(ex.BucketReducer, [make for make, _, _ in REFUSALS]))
    for rank, outcomes in enumerate(expect_ranks_ok(results, input="; ".join(label for _, label, _ in REFUSALS))):
        for (_, label, want), (outcome, collectives) in zip(REFUSALS, outcomes, strict=True):
            expect(
                outcome == want,
                "bad input accepted" if outcome == "accepted" else f"raised {outcome}, not {want}",
                input=f"{label}, rank {rank}",
                expected=want,
                got=outcome,
                hint="validate params (TypeError for a non-tensor, ValueError for empty/frozen/duplicate) and the "
                "cap first; wait() raises RuntimeError when fewer buckets were launched than exist",
            )
            expect(
                want != "ValueError" and want != "TypeError" or collectives == 0,
                "the refusal came after communicating",
                input=f"{label}, rank {rank}",
                expected=f"{want} before any all-reduce",
                got=f"{collectives} all-reduce(s) before the error",
                hint="validate the arguments first",
            )
