"""Checks for p04.streams. References: the flow-shop closed form and the checks' own model of a GPU (one H2D
engine, one compute engine, one D2H engine, in-order streams, events): a happens-before analysis of a plan
(independent of durations) and a list-scheduled timeline; for the prefetcher, a recorder of the stream operations
it calls (a model of stream positions and event waits) and of every copy it issues (a TorchFunctionMode), and on a
GPU the same recorder around real CUDA streams, with pinned memory checked on the tensors themselves."""

import contextlib
import itertools
import math
import random

import torch
from torch.overrides import TorchFunctionMode

from llm_algo.bench import bandwidth_row, copy_row
from llm_algo.check import Checks, expect, expect_refused

checks = Checks("p04.streams")
checks.restrict(
    "prefetcher",
    forbid=[torch.cuda.synchronize, torch.cuda.Stream.synchronize, torch.cuda.Event.synchronize],
    instead="it blocks the CPU until the GPU catches up; make the current stream wait for the copy's event "
    "(streams.wait) and let the CPU run ahead",
)

# ----------------------------------------------------------------------------------------------------------------
# The checks' model of the engines


ENGINE_OF = {"h2d": "H2D", "compute": "compute", "d2h": "D2H"}
DURATIONS = [
    (1.0, 1.0, 1.0),
    (1.3, 1.0, 1.3),
    (3.0, 1.0, 1.0),
    (1.0, 5.0, 1.0),
    (1.0, 1.0, 4.0),
    (2.0, 0.0, 3.0),
    (0.5, 2.0, 0.25),
]


def reference_makespan_plan(n_chunks):
    """A plan known to be race-free and fully pipelined (one stream per engine, three buffers), used only to give
    overlapped_time's check a timeline to compare against."""
    plan = []
    for c in range(n_chunks):
        if c >= 3:
            plan.append((1, ("wait", ("free", c - 3))))
        plan += [
            (1, ("h2d", c, c % 3)),
            (1, ("record", ("in", c))),
            (0, ("wait", ("in", c))),
            (0, ("compute", c, c % 3)),
        ]
        plan += [
            (0, ("record", ("k", c))),
            (2, ("wait", ("k", c))),
            (2, ("d2h", c, c % 3)),
            (2, ("record", ("free", c))),
        ]
    return plan


def dependencies(plan):
    """For every op, the ops it directly waits for: the op before it on its stream, and (a wait) the latest record of
    its event issued before it (none if the event was never recorded before: CUDA's no-op wait)."""
    deps, last_on_stream, last_record = [], {}, {}
    for i, (stream, op) in enumerate(plan):
        d = [last_on_stream[stream]] if stream in last_on_stream else []
        if op[0] == "wait" and op[1] in last_record:
            d.append(last_record[op[1]])
        if op[0] == "record":
            last_record[op[1]] = i
        last_on_stream[stream] = i
        deps.append(d)
    return deps


def model_timeline(plan, durations):
    """List scheduling on the three engines: repeatedly start, among the ops whose dependencies have finished, the one
    that can start earliest (its engine free), lowest issue index first. Returns the end time of every op."""
    duration = dict(zip(("h2d", "compute", "d2h"), durations, strict=True))
    deps = dependencies(plan)
    end = [None] * len(plan)
    engine_free = dict.fromkeys(ENGINE_OF.values(), 0.0)
    left = set(range(len(plan)))
    while left:
        best = None
        for i in sorted(left):
            if any(end[j] is None for j in deps[i]):
                continue
            kind = plan[i][1][0]
            start = max([end[j] for j in deps[i]] + [engine_free[ENGINE_OF[kind]] if kind in ENGINE_OF else 0.0])
            if best is None or start < best[0]:
                best = (start, i)
        start, i = best
        kind = plan[i][1][0]
        end[i] = start + duration.get(kind, 0.0)
        if kind in ENGINE_OF:
            engine_free[ENGINE_OF[kind]] = end[i]
        left.remove(i)
    return end


def makespan(plan, durations):
    return max(model_timeline(plan, durations), default=0.0)


def close(a, b):
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


# ----------------------------------------------------------------------------------------------------------------
# overlapped_time


def closed_form(n, t1, t2, t3):
    return 0.0 if n == 0 else n * max(t1, t2, t3) + (t1 + t2 + t3 - max(t1, t2, t3))


@checks("overlapped_time")
def hand_checkable_cases(ex):
    """small cases by hand: 4 chunks of (2, 3, 1) ms take 6 + 3 x 3 = 15 ms; one chunk takes its three stages; no
    chunks take 0"""
    for args, want in (((4, 2, 3, 1), 15.0), ((1, 2, 3, 1), 6.0), ((0, 2, 3, 1), 0.0), ((5, 1, 1, 1), 7.0)):
        got = ex.overlapped_time(*args)
        expect(
            isinstance(got, int | float) and close(float(got), want),
            "wrong pipelined time",
            input=f"overlapped_time{args}",
            expected=f"{want:g}",
            got=repr(got),
            hint="the first chunk's three stages (fill), then one bottleneck stage, max(t), per further chunk",
        )


@checks("overlapped_time")
def matches_the_engine_model(ex):
    """random chunk counts and durations (each stage the bottleneck in turn, zeros, fractions): the makespan of a
    fully pipelined plan on the checks' engine model"""
    rng = random.Random(4)
    cases = [(n, *d) for n in (1, 2, 7) for d in DURATIONS]
    cases += [(rng.randint(1, 12), *(round(rng.uniform(0, 4), 3) for _ in range(3))) for _ in range(12)]
    for n, t1, t2, t3 in cases:
        want = makespan(reference_makespan_plan(n), (t1, t2, t3))
        got = ex.overlapped_time(n, t1, t2, t3)
        expect(
            close(float(got), want),
            "the closed form disagrees with the engine model",
            input=f"overlapped_time({n}, {t1}, {t2}, {t3})",
            expected=f"{want:.6g} (serial would be {n * (t1 + t2 + t3):.6g})",
            got=f"{float(got):.6g}",
            hint="S + (n - 1) * max(t_h2d, t_compute, t_d2h), S = t_h2d + t_compute + t_d2h",
        )


@checks("overlapped_time")
def overlapped_time_refuses_bad_input(ex):
    """a negative chunk count or duration: ValueError; zero durations accepted"""
    for args in ((-1, 1.0, 1.0, 1.0), (3, -0.5, 1.0, 1.0), (3, 1.0, -1.0, 1.0), (3, 1.0, 1.0, -2.0)):
        expect_refused(
            lambda args=args: ex.overlapped_time(*args),
            input=f"overlapped_time{args}",
            hint="raise ValueError for n_chunks < 0 or any duration < 0",
            errors=(ValueError,),
        )
    got = ex.overlapped_time(3, 0.0, 0.0, 0.0)
    expect(close(float(got), 0.0), "zero durations", input="overlapped_time(3, 0, 0, 0)", expected="0", got=repr(got))


# ----------------------------------------------------------------------------------------------------------------
# plan_pipeline


def read_plan(plan, n_chunks, n_buffers, label):
    """The plan's shape: a list of (stream, op); per chunk one h2d, compute, d2h in one buffer; compute on stream 0.
    Returns {(kind, chunk): index}."""
    expect(
        isinstance(plan, list),
        "the plan is not a list",
        input=label,
        expected="[(stream, op), ...]",
        got=type(plan).__name__,
    )
    where = {}
    for i, entry in enumerate(plan):
        ok = (
            isinstance(entry, tuple)
            and len(entry) == 2
            and isinstance(entry[0], int)
            and entry[0] >= 0
            and isinstance(entry[1], tuple)
            and len(entry[1]) >= 2
            and (
                (entry[1][0] in ENGINE_OF and len(entry[1]) == 3)
                or (entry[1][0] in ("record", "wait") and len(entry[1]) == 2)
            )
        )
        expect(
            ok,
            "an entry is not (stream, op)",
            input=label,
            expected="(stream >= 0, h2d(c, b) | compute(c, b) | d2h(c, b) | record(e) | wait(e))",
            got=f"entry {i}: {entry!r}",
            hint="build ops with the setup cell's h2d, compute, d2h, record, wait",
        )
        stream, op = entry
        if op[0] in ENGINE_OF:
            kind, chunk, buffer = op
            expect(
                isinstance(chunk, int)
                and 0 <= chunk < n_chunks
                and isinstance(buffer, int)
                and 0 <= buffer < n_buffers,
                "a chunk or buffer out of range",
                input=label,
                expected=f"chunks 0..{n_chunks - 1}, buffers 0..{n_buffers - 1}",
                got=f"entry {i}: {entry!r}",
            )
            expect(
                (kind, chunk) not in where,
                "a chunk is copied or computed twice",
                input=label,
                expected=f"one {kind} for chunk {chunk}",
                got=f"a second one at entry {i}",
            )
            expect(
                kind != "compute" or stream == 0,
                "a kernel on a side stream",
                input=label,
                expected="every compute on stream 0 (the current stream, where the model runs)",
                got=f"entry {i}: {entry!r}",
                hint="put the copies on side streams, not the kernels",
            )
            where[(kind, chunk)] = i
    for c in range(n_chunks):
        missing = [k for k in ENGINE_OF if (k, c) not in where]
        expect(
            not missing,
            "a chunk is not processed",
            input=label,
            expected=f"h2d, compute and d2h of chunk {c}",
            got=f"missing {missing}",
        )
        buffers = {plan[where[(k, c)]][1][2] for k in ENGINE_OF}
        expect(
            len(buffers) == 1,
            "a chunk moves between buffers",
            input=label,
            expected=f"h2d, compute and d2h of chunk {c} in one buffer",
            got=f"buffers {sorted(buffers)}",
        )
    return where


def expect_race_free(plan, n_chunks, n_buffers, label):
    where = read_plan(plan, n_chunks, n_buffers, label)
    recorded = set()
    for i, (_, op) in enumerate(plan):
        if op[0] == "record":
            recorded.add(op[1])
        expect(
            op[0] != "wait" or op[1] in recorded,
            "a wait comes before any record of its event",
            input=label,
            expected=f"record({op[1]!r}) issued before wait({op[1]!r})" if op[0] == "wait" else "",
            got=f"entry {i}: wait({op[1]!r}) with no earlier record: in CUDA it waits for nothing",
            hint="issue each wait after the record it depends on (the CPU issues the plan in list order)",
        )
    deps = dependencies(plan)
    before = []  # before[i]: bitmask of the ops that happen before op i (stream order and record -> wait, transitively)
    for d in deps:
        mask = 0
        for j in d:
            mask |= before[j] | (1 << j)
        before.append(mask)

    def happens_before(a, b):
        return bool(before[b] >> a & 1)

    for c in range(n_chunks):
        for first, second, why in (
            ("h2d", "compute", "the kernel may read the buffer before the chunk has arrived"),
            ("compute", "d2h", "the copy out may read the buffer before the kernel has written it"),
        ):
            expect(
                happens_before(where[(first, c)], where[(second, c)]),
                f"a {second} is not ordered after its {first}",
                input=label,
                expected=f"{first}({c}) -> {second}({c}) through stream order or record -> wait",
                got=f"nothing orders entry {where[(first, c)]} before entry {where[(second, c)]}: {why}",
                hint=f"record an event after the {first} on its stream and wait for it on the {second}'s stream",
            )
    for buffer in range(n_buffers):
        users = sorted((i, c) for (kind, c), i in where.items() if kind == "h2d" and plan[i][1][2] == buffer)
        for (_, previous), (i, c) in itertools.pairwise(users):
            expect(
                happens_before(where[("d2h", previous)], i),
                "a buffer is reused before its copy out has finished",
                input=label,
                expected=f"d2h of chunk {previous} -> h2d of chunk {c} (both in buffer {buffer})",
                got=f"nothing orders entry {where[('d2h', previous)]} before entry {i}: chunk {c} may overwrite "
                f"chunk {previous}'s result before it reaches the host",
                hint="before the h2d into a reused buffer, wait for the event recorded after that buffer's last d2h",
            )


PLAN_SIZES = [(0, 3), (1, 1), (1, 3), (2, 2), (5, 1), (5, 2), (6, 3), (9, 3), (9, 4), (7, 5)]


@checks("plan_pipeline")
def race_free_for_any_durations(ex):
    """every chunk h2d -> compute -> d2h in one buffer, kernels on stream 0, a buffer reused only after its d2h, every
    wait after its record: a happens-before analysis, independent of durations, over chunk and buffer counts"""
    for n_chunks, n_buffers in PLAN_SIZES:
        expect_race_free(
            ex.plan_pipeline(n_chunks, n_buffers), n_chunks, n_buffers, f"plan_pipeline({n_chunks}, {n_buffers})"
        )


@checks("plan_pipeline")
def reaches_the_pipelined_time(ex):
    """on the engine model: with >= 3 buffers the makespan is S + (n - 1) max(t) for every duration mix; with one
    buffer n S; with two, no slower than serial"""
    for n_chunks, n_buffers in PLAN_SIZES:
        label = f"plan_pipeline({n_chunks}, {n_buffers})"
        plan = ex.plan_pipeline(n_chunks, n_buffers)
        expect_race_free(plan, n_chunks, n_buffers, label)
        for t in DURATIONS:
            got, serial = makespan(plan, t), n_chunks * sum(t)
            want = closed_form(n_chunks, *t) if n_buffers >= 3 else serial if n_buffers == 1 else None
            expect(
                close(got, want) if want is not None else got <= serial + 1e-9,
                "the plan does not overlap the engines",
                input=f"{label}, durations (h2d, compute, d2h) = {t}",
                expected=f"makespan {want:.6g}" if want is not None else f"at most the serial {serial:.6g}",
                got=f"{got:.6g} (serial {serial:.6g})",
                hint="one stream per engine: copies in, kernels (stream 0), copies out; copies in and out on the "
                "same stream, or on stream 0, serialise them",
            )


@checks("plan_pipeline")
def plan_refuses_bad_input(ex):
    """n_chunks < 0 or n_buffers < 1: ValueError"""
    for args in ((-1, 3), (4, 0), (4, -2)):
        expect_refused(
            lambda args=args: ex.plan_pipeline(*args),
            input=f"plan_pipeline{args}",
            hint="raise ValueError for n_chunks < 0 or n_buffers < 1",
            errors=(ValueError,),
        )


# ----------------------------------------------------------------------------------------------------------------
# Prefetcher


class Handle:
    """A stream or an event as the recorder hands it out; `real` is the CUDA object on a GPU."""

    def __init__(self, name, real=None, stream=None, position=0):
        self.name, self.real, self.stream, self.position = name, real, stream, position

    def __repr__(self):
        return self.name


class RecordingStreams:
    """The stream operations of the lesson's setup cell, recorded, with a model of what they guarantee: every copy
    gets a position on the stream it was issued to; an event remembers its stream's position when it was recorded; a
    wait lets the waiting stream see everything up to that position. `inner` (CudaStreams on a GPU) does the real
    work."""

    def __init__(self, inner=None):
        self.inner = inner
        self.current = Handle("the current stream", inner.current_stream() if inner else None)
        self.sides = []
        self.active = [self.current]
        self.issued = {}  # stream name -> copies issued to it
        self.seen = {}  # (waiting stream name, stream name) -> position it waited for
        self.pinned = set()
        self.handed = set()  # (data_ptr, stream name)
        self.unknown = []

    def _known(self, handle, what):
        if not isinstance(handle, Handle):
            self.unknown.append(f"{what} got {handle!r}, not a stream or event from these stream operations")
            return False
        return True

    def new_stream(self):
        side = Handle(f"side stream {len(self.sides)}", self.inner.new_stream() if self.inner else None)
        self.sides.append(side)
        return side

    def current_stream(self):
        return self.current

    @contextlib.contextmanager
    def use(self, stream):
        if not self._known(stream, "use"):
            yield
            return
        self.active.append(stream)
        try:
            with self.inner.use(stream.real) if self.inner else contextlib.nullcontext():
                yield
        finally:
            self.active.pop()

    def record(self, stream):
        if not self._known(stream, "record"):
            return None
        real = self.inner.record(stream.real) if self.inner else None
        return Handle(f"event on {stream.name}", real, stream.name, self.issued.get(stream.name, 0))

    def wait(self, stream, event):
        if self._known(stream, "wait") and self._known(event, "wait (the event)"):
            key = (stream.name, event.stream)
            self.seen[key] = max(self.seen.get(key, 0), event.position)
            if self.inner:
                self.inner.wait(stream.real, event.real)

    def hand_over(self, tensor, stream):
        if self._known(stream, "hand_over"):
            self.handed.add((tensor.data_ptr(), stream.name))
            if self.inner:
                self.inner.hand_over(tensor, stream.real)

    def pin(self, tensor):
        pinned = self.inner.pin(tensor) if self.inner else tensor
        self.pinned.add(pinned.data_ptr())
        return pinned


class CopyRecorder(TorchFunctionMode):
    """Every transfer (`to`/`cuda` with a device, `copy_`) with the stream it went to, its position there, its
    non_blocking flag, its source (pinned?) and its result; and the stream each new tensor was allocated on."""

    def __init__(self, streams):
        super().__init__()
        self.streams, self.copies, self.allocated = streams, [], {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        result = func(*args, **kwargs)
        stream = self.streams.active[-1].name
        if isinstance(result, torch.Tensor) and result.numel() and result.data_ptr() not in self.allocated:
            self.allocated[result.data_ptr()] = stream
        moves = name in ("to", "cuda") and (
            name == "cuda" or "device" in kwargs or any(isinstance(a, torch.device | str) for a in args[1:])
        )
        if moves or name == "copy_":
            source = args[0] if moves else kwargs.get("src", args[1] if len(args) > 1 else None)
            target = result if moves else args[0]
            non_blocking = kwargs.get("non_blocking", args[2] if name == "copy_" and len(args) > 2 else False)
            position = self.streams.issued.get(stream, 0) + 1
            self.streams.issued[stream] = position
            self.copies.append(
                dict(
                    stream=stream,
                    position=position,
                    non_blocking=bool(non_blocking),
                    source=source.data_ptr() if isinstance(source, torch.Tensor) else None,
                    target=target.data_ptr(),
                )
            )
        return result


def host_batches(count, dtype=torch.float32, shape=(5, 7)):
    return [(torch.randn(shape) * 10).to(dtype) for _ in range(count)]


def logged(batches, pulls):
    for b in batches:
        pulls.append(1)
        yield b


def expect_discipline(ex, device, count, inner=None, consume=None):
    """Run a Prefetcher with recording streams; at every batch check the lookahead, the copy, the event wait and the
    hand-over. Returns the batches it yielded (detached from the recorder)."""
    batches = host_batches(count)
    pulls, streams = [], RecordingStreams(inner)
    label = f"Prefetcher over {count} float32 batches (5, 7), device={device}"
    recorder = CopyRecorder(streams)
    got = []
    with recorder:
        prefetcher = ex.Prefetcher(logged(batches, pulls), device, streams=streams)
        expect(
            len(pulls) == min(1, count) and len(recorder.copies) == min(1, count),
            "the constructor does not start the first copy",
            input=label,
            expected=f"{min(1, count)} batch pulled and copied when the constructor returns",
            got=f"{len(pulls)} pulled, {len(recorder.copies)} copies",
            hint="end __init__ with self._preload(): the first copy overlaps whatever runs before the loop",
        )
        for i in range(count + 1):
            try:
                batch = next(prefetcher)
            except StopIteration:
                expect(i == count, "the prefetcher stopped early", input=label, expected=f"{count} batches", got=f"{i}")
                break
            expect(i < count, "the prefetcher yields too many batches", input=label, expected=f"{count}", got="more")
            at = f"{label}, batch {i}"
            expect(
                not streams.unknown,
                "a stream operation got something it did not hand out",
                input=at,
                expected="streams and events from self.streams (new_stream, current_stream, record)",
                got=streams.unknown[0] if streams.unknown else "",
            )
            want_ahead = min(i + 2, count)
            expect(
                len(pulls) == want_ahead and len(recorder.copies) == want_ahead,
                "the next batch is not in flight while this one is used",
                input=at,
                expected=f"{want_ahead} batches pulled and copied when batch {i} is returned (one ahead, no more)",
                got=f"{len(pulls)} pulled, {len(recorder.copies)} copies",
                hint="__next__: take the pending batch, start the next copy (_preload), then return the pending one",
            )
            copy = [c for c in recorder.copies if c["target"] == batch.data_ptr()]
            expect(
                bool(copy),
                "the returned batch is not the result of a copy",
                input=at,
                expected="the tensor that host.to(device, non_blocking=True) returned",
                got=f"{tuple(batch.shape)} {batch.dtype} on {batch.device}, not produced by any copy",
            )
            copy = copy[-1]
            expect(
                copy["stream"] != streams.current.name,
                "the copy runs on the current stream",
                input=at,
                expected="the copy issued inside `with streams.use(side):` (a stream from streams.new_stream())",
                got=f"copied on {copy['stream']}: queued behind the model's kernels, nothing overlaps",
                hint="issue the copy inside `with self.streams.use(self.side):`",
            )
            expect(
                copy["non_blocking"],
                "a blocking copy",
                input=at,
                expected="to(device, non_blocking=True)",
                got="non_blocking=False: the CPU waits for every copy",
            )
            expect(
                copy["source"] in streams.pinned,
                "the copy's source is not the pinned batch",
                input=at,
                expected="copy the tensor streams.pin(host) returns",
                got="a source that was never pinned: from pageable memory the copy is staged and synchronous",
                hint="host = self.streams.pin(host) before the copy",
            )
            expect(
                streams.seen.get((streams.current.name, copy["stream"]), 0) >= copy["position"],
                "the current stream does not wait for the copy",
                input=at,
                expected=f"streams.wait(current, event) with an event recorded on {copy['stream']} after the copy",
                got="no such wait before the batch was returned (an event recorded before the copy does not count)",
                hint="record the event after the copy, inside or after `use(side)`; wait for it in __next__",
            )
            allocated_on = recorder.allocated.get(batch.data_ptr(), copy["stream"])
            expect(
                allocated_on == streams.current.name or (batch.data_ptr(), streams.current.name) in streams.handed,
                "the batch is not handed over to the current stream",
                input=at,
                expected="streams.hand_over(batch, current) (record_stream) before returning it",
                got=f"allocated on {allocated_on}, used on the current stream without hand_over",
                hint="without record_stream the allocator may give its memory to the next prefetch while it is read",
            )
            if consume is not None:
                batch = consume(batch)
            got.append(batch)
    return batches, got


@checks("prefetcher")
def yields_every_batch(ex):
    """lists and generators of 0, 1, 3 and 6 batches, float32, float16, int64, bool, an empty (0, 3) batch: every
    batch in order, equal, same dtype and shape; on the meta device, moved there; then StopIteration"""
    for count, dtype, shape in ((6, torch.float32, (4, 3)), (1, torch.float16, (9,)), (3, torch.int64, (2, 2, 2))):
        batches = host_batches(count, dtype, shape)
        for source in (batches, (b for b in batches)):
            label = f"Prefetcher({type(source).__name__} of {count} batches {shape} {dtype}, 'cpu')"
            got = list(ex.Prefetcher(source, "cpu"))
            expect(len(got) == count, "wrong number of batches", input=label, expected=str(count), got=str(len(got)))
            for i, (g, b) in enumerate(zip(got, batches, strict=True)):
                expect(
                    isinstance(g, torch.Tensor) and g.dtype == b.dtype and g.shape == b.shape and torch.equal(g, b),
                    "a batch differs",
                    input=f"{label}, batch {i}",
                    expected=f"batch {i}: {tuple(b.shape)} {b.dtype}",
                    got=f"{tuple(g.shape)} {g.dtype}" if isinstance(g, torch.Tensor) else repr(g),
                )
    batches = host_batches(3, torch.float32, (2, 5))
    got = list(ex.Prefetcher(batches, "meta"))
    expect(
        len(got) == 3
        and all(g.device.type == "meta" and g.shape == b.shape for g, b in zip(got, batches, strict=True)),
        "the batches are not moved to the device",
        input="Prefetcher(3 float32 batches (2, 5), 'meta') (meta: a device without data, available everywhere)",
        expected="3 tensors (2, 5) on meta",
        got=str([(tuple(g.shape), str(g.device)) for g in got]),
        hint="host.to(self.device, non_blocking=True)",
    )
    for batches in ([], [torch.zeros(0, 3)], [torch.rand(3) > 0.5, torch.rand(4) > 0.5]):
        got = list(ex.Prefetcher(batches, torch.device("cpu")))
        expect(
            len(got) == len(batches) and all(torch.equal(g, b) for g, b in zip(got, batches, strict=True)),
            "edge cases",
            input=f"Prefetcher of {[tuple(b.shape) for b in batches]} ({batches[0].dtype if batches else 'none'})",
            expected=f"{len(batches)} batches, equal",
            got=f"{len(got)} batches",
        )


@checks("prefetcher")
def one_batch_ahead_with_events(ex):
    """recorded stream operations over 1, 2 and 5 batches: constructor starts copy 0; batch i returned with copy i+1
    issued (no more); each copy pinned, non_blocking, on the side stream; the current stream waits for an event
    recorded after it; the batch handed over to the current stream"""
    for count in (1, 2, 5):
        expect_discipline(ex, "cpu", count)


@checks("prefetcher")
def prefetcher_refuses_bad_input(ex):
    """a batch that is not a tensor: TypeError; a batch not in host memory (already on the device, meta): ValueError"""
    cases = [
        ([[1.0, 2.0]], "a list of floats as a batch", TypeError),
        ([torch.zeros(3), "batch"], "a string as the second batch", TypeError),
        ([torch.zeros(3, device="meta")], "a batch already on the target device (meta)", ValueError),
    ]
    for batches, label, error in cases:
        device = batches[0].device if isinstance(batches[0], torch.Tensor) else "cpu"
        expect_refused(
            lambda batches=batches, device=device: list(ex.Prefetcher(batches, device)),
            input=f"Prefetcher with {label}",
            hint="in _preload: TypeError for a non-tensor, ValueError for a tensor whose device is not the CPU",
            errors=(error,),
        )


@checks("prefetcher", requires_cuda=True)
def real_streams_on_a_gpu(ex):
    """on a GPU, around real CUDA streams: the same discipline; every copy from pinned memory; results equal after a
    kernel on each batch; default streams (streams_for) give the same batches"""
    inner = ex.CudaStreams("cuda")

    def consume(batch):  # a kernel on the current stream that reads the batch, then the batch dropped
        return (batch * 2 + 1).cpu()

    batches, got = expect_discipline(ex, "cuda", 6, inner=inner, consume=consume)
    for i, (g, b) in enumerate(zip(got, batches, strict=True)):
        expect(
            torch.equal(g, b * 2 + 1),
            "a batch differs on the GPU",
            input=f"batch {i}",
            expected="b * 2 + 1",
            got="different",
        )
    big = [torch.randn(1 << 22) for _ in range(4)]
    out = [x.sum().cpu() for x in ex.Prefetcher(big, "cuda")]
    want = [x.double().sum() for x in big]
    expect(
        all(abs(float(o) - float(w)) <= 1e-3 * (1 + abs(float(w))) for o, w in zip(out, want, strict=True)),
        "wrong values with the default streams",
        input="4 batches of 4M float32, Prefetcher(batches, 'cuda')",
        expected=str([round(float(w), 2) for w in want]),
        got=str([round(float(o), 2) for o in out]),
        hint="the current stream must wait for the copy's event before using the batch",
    )


# ----------------------------------------------------------------------------------------------------------------
# Benchmark (GPU)


def benchmark(ex):
    """32 chunks of 64 MiB through an in-place kernel: serial pageable, serial pinned, plan_pipeline (3 buffers,
    pinned) on real streams; one 2 GiB pinned H2D copy; a device-to-device copy. GB/s = host bytes in + out."""
    n, numel = 32, 64 * 2**20 // 4
    moved = 2 * n * numel * 4

    def busy(x):
        for _ in range(20):
            torch.sin(x, out=x)

    pageable_in, pageable_out = torch.ones(n, numel), torch.empty(n, numel)
    pinned_in, pinned_out = pageable_in.pin_memory(), torch.empty(n, numel).pin_memory()
    ins, outs = list(pinned_in), list(pinned_out)

    def serial_pageable():
        for c in range(n):
            buffer = pageable_in[c].to("cuda")
            busy(buffer)
            pageable_out[c].copy_(buffer)

    serial = [(0, op) for c in range(n) for op in (("h2d", c, 0), ("compute", c, 0), ("d2h", c, 0))]
    plan = ex.plan_pipeline(n, 3)
    device_in = torch.empty(n, numel, device="cuda")
    shape = f"{n} x 64 MiB float32"
    return [
        bandwidth_row("serial, pageable (one stream)", shape, serial_pageable, moved),
        bandwidth_row(
            "serial, pinned (one stream)", shape, lambda: ex.run_plan_cuda(serial, ins, outs, busy, 1), moved
        ),
        bandwidth_row(
            "plan_pipeline, pinned, 3 buffers", shape, lambda: ex.run_plan_cuda(plan, ins, outs, busy, 3), moved
        ),
        bandwidth_row(
            "H2D copy only, pinned", "2 GiB", lambda: device_in.copy_(pinned_in, non_blocking=True), moved // 2
        ),
        copy_row(2**30),
    ]
