"""Checks for p04.offload. References: `torch.optim.AdamW` (parameters and moments after several steps, float64 step
for step, float32 with torch's float32 run as the baseline); the order of `_prefetch`/`_update` calls, recorded
around the learner's methods, and the bytes the step holds on the device, measured (every allocation on the device
during the step, weak references in a `LiveTensors`) and compared with closed forms from the parameter counts, then
`memory()` compared with the measurement; the copies seen by a TorchFunctionMode recorder; the order of the side
stream's calls (copies inside `with side:`, `record`, `wait`, `hand_over`, `synchronize`) against the copies and the
update of every group, recorded around the learner's `self.side` on every device (on a GPU around real streams and
events); on a GPU, pinned host memory. No check times a step: a speed is measured in a benchmark, never asserted."""

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from llm_algo.check import Checks, expect, expect_close, expect_refused, one_thread, reference_only
from llm_algo.check.ledger import LiveTensors, tensors_in
from llm_algo.check.restrictions import ADAM

checks = Checks("p04.offload")
checks.restrict(
    "offloaded_adamw",
    forbid=ADAM,
    instead="stream the moments and call adamw_step yourself (torch.optim.AdamW is the reference)",
)

HP = dict(lr=3e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
SHAPES = [(7, 5), (3,), (4, 4), (1,), (2, 3, 4), (9,)]


def make_params(dtype, device="cpu", seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=generator, dtype=dtype).to(device).requires_grad_() for shape in SHAPES]


def gradients(steps, dtype, device="cpu", seed=1):
    generator = torch.Generator().manual_seed(seed)
    return [[torch.randn(shape, generator=generator, dtype=dtype).to(device) for shape in SHAPES] for _ in range(steps)]


def run_torch(dtype, grads, device="cpu"):
    """The reference: torch.optim.AdamW (single-tensor loop) fed the same gradients; params and moments."""
    with reference_only():
        params = make_params(dtype, device)
        optimizer = torch.optim.AdamW(params, **HP, foreach=False)
        for step_grads in grads:
            for p, g in zip(params, step_grads, strict=True):
                p.grad = g.clone()
            optimizer.step()
        return [p.detach() for p in params], [
            (optimizer.state[p]["exp_avg"], optimizer.state[p]["exp_avg_sq"]) for p in params
        ]


def run_learner(ex, dtype, grads, group_numel, device="cpu"):
    params = make_params(dtype, device)
    optimizer = ex.OffloadedAdamW(params, **HP, group_numel=group_numel)
    for step_grads in grads:
        for p, g in zip(params, step_grads, strict=True):
            p.grad = g.clone()
        optimizer.step()
    return [p.detach() for p in params], optimizer


def expect_matches_torch(ex, dtype, group_numel, steps, device="cpu"):
    grads = gradients(steps, dtype, device)
    got, optimizer = run_learner(ex, dtype, grads, group_numel, device)
    label = f"{len(SHAPES)} parameters {SHAPES}, {dtype}, group_numel={group_numel}, {steps} steps, {HP}"
    want, want_state = run_torch(torch.float64, [[g.double() for g in s] for s in grads], device)
    baseline, baseline_state = (None, None) if dtype == torch.float64 else run_torch(dtype, grads, device)
    for i, (p, expected) in enumerate(zip(got, want, strict=True)):
        expect_close(
            p,
            expected,
            baseline=None if baseline is None else baseline[i],
            input=label,
            what=f"parameter {i} {tuple(p.shape)}",
            hint="each step: t += 1 once, then every group: moments to the device, adamw_step, moments back",
        )
        for name, host, ref, base in zip(
            ("exp_avg", "exp_avg_sq"),
            optimizer.host_state[i],
            want_state[i],
            (None, None) if baseline_state is None else baseline_state[i],
            strict=True,
        ):
            expect(
                host.device.type == "cpu",
                "a moment is not kept in host memory",
                input=label,
                expected="host_state tensors on the CPU",
                got=str(host.device),
                hint="allocate the moments with device='cpu' (pinned when CUDA exists)",
            )
            expect_close(
                host,
                ref,
                baseline=base,
                input=label,
                what=f"host {name} of parameter {i}",
                hint="copy the updated staged moments back into host_state (copy_(..., non_blocking=True))",
            )


@checks("offloaded_adamw")
@one_thread()
def matches_torch_adamw(ex):
    """float64 and float32, group sizes from one parameter per group to one group: the same parameters and
    moments as torch.optim.AdamW after 4 steps"""
    for dtype in (torch.float64, torch.float32):
        for group_numel in (1, 40, 10**6):
            expect_matches_torch(ex, dtype, group_numel, 4)


def expected_groups(numels, group_numel):
    """Closed form of the grouping rule, by running totals: a new group starts where the next parameter would take
    the group's total past group_numel."""
    starts, total = [0], numels[0]
    for i in range(1, len(numels)):
        if total + numels[i] > group_numel:
            starts.append(i)
            total = 0
        total += numels[i]
    ends = starts[1:] + [len(numels)]
    return [list(range(s, e)) for s, e in zip(starts, ends, strict=True)]


class StagedWatch(TorchDispatchMode):
    """While active (one step): every tensor an operation allocates on the optimizer's device (on the CPU path the
    device is the CPU) enters `live`, a `LiveTensors` (weak references), weighed by its own bytes. Views and in-place
    results share an input's storage and are not allocations; the host moments, the parameters and their gradients
    are not the step's. So `live.alive_bytes()` is what the step has allocated on the device and still holds (staged
    moments, buffers, anything the learner keeps), measured by the package, whatever `memory()` says."""

    def __init__(self, optimizer, live):
        super().__init__()
        self.device, self.live = torch.device(optimizer.device), live
        owned = [t for host in optimizer.host_state for t in host] + list(optimizer.params)
        owned += [p.grad for p in optimizer.params if p.grad is not None]
        self.excluded = {t.untyped_storage().data_ptr() for t in owned}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        inputs = {t.untyped_storage().data_ptr() for t in tensors_in([list(args), kwargs])}
        for t in tensors_in(out if isinstance(out, (list, tuple)) else [out]):
            storage = t.untyped_storage()
            key = storage.data_ptr()
            if t.device == self.device and key and key not in inputs and key not in self.excluded:
                self.live.add(t, size=storage.nbytes(), sample=False)
        return out


def record_step(optimizer, live):
    """Wrap the optimizer's _prefetch and _update: the call order and, at each _update's start, the bytes the step
    holds on the device as measured by `live` (see StagedWatch), what memory() reports, and whether a staged tensor
    is a host tensor itself."""
    events = []
    prefetch, update = optimizer._prefetch, optimizer._update

    def recorded_prefetch(g):
        events.append(("prefetch", g, None))
        return prefetch(g)

    def recorded_update(g):
        measured = (live.alive_bytes(), live.alive())
        staged = optimizer.staged.get(g, [])
        host = optimizer.host_state
        aliased = any(
            s.untyped_storage().data_ptr() == h.untyped_storage().data_ptr()
            for i, pair in zip(optimizer.groups[g], staged, strict=False)
            for s, h in zip(pair, host[i], strict=True)
        )
        events.append(("update", g, (measured, optimizer.memory(), aliased)))
        return update(g)

    optimizer._prefetch, optimizer._update = recorded_prefetch, recorded_update
    return events


def host_bytes_of(optimizer):
    """The bytes of the host tensors, counted by the checks (each storage once)."""
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for ts in optimizer.host_state for t in ts}
    return sum(storages.values())


@checks("offloaded_adamw")
def prefetch_order_and_device_memory(ex):
    """the groups of the rule; prefetch 0, prefetch 1, update 0, prefetch 2, ...; during update g exactly groups g
    and g+1 on the device, measured (the step's allocations on the device still alive, weak references; closed form:
    2 moments x numel x bytes) and then memory() compared with the measurement; nothing held between steps"""
    cases = (
        (torch.float32, 40, False),
        (torch.float64, 1, False),
        (torch.float32, 10**6, False),
        (torch.float64, 25, False),
        (torch.float32, 38, False),  # 38 = 35 + 3: a group that reaches group_numel exactly stays one group
        (torch.bfloat16, 40, True),  # master weights: 4 + 4 + 4 bytes per element
    )
    for dtype, group_numel, master in cases:
        params = make_params(dtype)
        numels = [p.numel() for p in params]
        label = f"parameters of {numels} elements, {dtype}, group_numel={group_numel}, master_weights={master}"
        optimizer = ex.OffloadedAdamW(params, **HP, group_numel=group_numel, master_weights=master)
        groups = expected_groups(numels, group_numel)
        expect(
            [list(map(int, g)) for g in optimizer.groups] == groups,
            "the groups do not follow the rule",
            input=label,
            expected=str(groups),
            got=str(optimizer.groups),
            hint="in order; start a new group when the next parameter would take the group past group_numel",
        )
        per_element = 12 if master else 2 * torch.tensor([], dtype=dtype).element_size()
        state_bytes = [per_element * sum(numels[i] for i in g) for g in groups]
        host_bytes = per_element * sum(numels)
        expect(
            host_bytes_of(optimizer) == host_bytes,
            "the host tensors do not hold the optimizer state",
            input=label,
            expected=f"{host_bytes} bytes in host_state ({per_element} per element)",
            got=f"{host_bytes_of(optimizer)} bytes",
            hint="host_state[i]: (exp_avg, exp_avg_sq), with master weights (exp_avg, exp_avg_sq, master) in fp32",
        )
        for step in range(2):
            for p in params:
                p.grad = torch.ones_like(p)
            live = LiveTensors()
            events = record_step(optimizer, live)
            with StagedWatch(optimizer, live):
                optimizer.step()
            del optimizer._prefetch, optimizer._update  # the class's methods again
            want_order = [("prefetch", 0)]
            for g in range(len(groups)):
                want_order += [("prefetch", g + 1)] if g + 1 < len(groups) else []
                want_order += [("update", g)]
            got_order = [(kind, g) for kind, g, _ in events]
            expect(
                got_order == want_order,
                "the prefetches are not one group ahead of the updates",
                input=f"{label}, step {step + 1}",
                expected=str(want_order),
                got=str(got_order),
                hint="prefetch group 0; then for each g: prefetch g + 1 (if any) BEFORE update g",
            )
            for kind, g, info in events:
                if kind != "update":
                    continue
                (measured, tensors), memory, aliased = info
                where = f"{label}, step {step + 1}, at the start of update {g}"
                expect(
                    not aliased,
                    "a staged moment is the host tensor itself",
                    input=f"{label}, update {g}",
                    expected="staged tensors with their own memory (a copy on the device)",
                    got="a staged tensor shares its storage with host_state",
                    hint="torch.empty_like(t, device=self.device).copy_(t, non_blocking=True): t.to('cpu') returns t",
                )
                want_device = state_bytes[g] + (state_bytes[g + 1] if g + 1 < len(groups) else 0)
                expect(
                    measured == want_device,
                    "the bytes the step holds on the device are not the groups in flight",
                    input=where,
                    expected=f"{want_device} bytes alive (groups {g} and {g + 1} staged: {per_element} bytes per "
                    "element)",
                    got=f"{measured} bytes in {tensors} tensors that this step allocated on {optimizer.device} "
                    "and still holds (measured by the checks, weak references)",
                    hint="stage a group in _prefetch and drop every reference to it at the end of _update (del "
                    "self.staged[g]; no other list or attribute may keep the tensors)"
                    if measured > want_device
                    else "_prefetch(g) allocates each of the group's host tensors on the device (empty_like + copy_)",
                )
                expect(
                    memory == {"device": measured, "host": host_bytes},
                    "memory() does not report what the optimizer holds",
                    input=where,
                    expected=f"{{'device': {measured}, 'host': {host_bytes}}} (device: measured by the checks)",
                    got=str(memory),
                    hint="memory() sums numel * element_size over self.staged and over self.host_state",
                )
            measured, tensors = live.alive_bytes(), live.alive()
            expect(
                measured == 0,
                "moments left on the device after the step",
                input=f"{label}, after step {step + 1}",
                expected="0 bytes of the step's device tensors alive",
                got=f"{measured} bytes in {tensors} tensors still alive (measured by the checks, weak references)",
                hint="every _update drops its group: nothing the step staged may outlive it",
            )
            after = optimizer.memory()
            expect(
                after == {"device": 0, "host": host_bytes},
                "memory() after the step does not report what the optimizer holds",
                input=f"{label}, after step {step + 1}",
                expected=f"{{'device': 0, 'host': {host_bytes}}} (0 bytes measured on the device)",
                got=str(after),
                hint="every _update drops its group from self.staged",
            )


class CopyRecorder(TorchFunctionMode):
    """While active: every copy_ into or out of a host tensor (by data pointer), and every device transfer
    (to/cuda/cpu with a device), with its non_blocking flag."""

    def __init__(self, host_tensors):
        super().__init__()
        self.host = {t.data_ptr() for t in host_tensors}
        self.calls = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if (
            name == "copy_"
            and {args[0].data_ptr(), kwargs.get("src", args[1] if len(args) > 1 else None).data_ptr()} & self.host
        ):
            self.calls.append(("copy_", bool(kwargs.get("non_blocking", args[2] if len(args) > 2 else False))))
        elif name in ("to", "cuda", "cpu"):
            moves = name != "to" or "device" in kwargs or any(isinstance(a, torch.device | str) for a in args[1:])
            if moves:
                self.calls.append((name, bool(kwargs.get("non_blocking", False))))
        return func(*args, **kwargs)


@checks("offloaded_adamw")
def copies_are_non_blocking(ex):
    """one step: every copy to or from host memory non_blocking=True; each host tensor up and back (2 moments, and
    the master with master weights)"""
    for group_numel, dtype, master in (
        (1, torch.float32, False),
        (40, torch.float32, False),
        (40, torch.bfloat16, True),
    ):
        params = make_params(dtype)
        optimizer = ex.OffloadedAdamW(params, **HP, group_numel=group_numel, master_weights=master)
        for p in params:
            p.grad = torch.ones_like(p)
        per_param = 3 if master else 2
        recorder = CopyRecorder([t for host in optimizer.host_state for t in host])
        with recorder:
            optimizer.step()
        label = f"{len(params)} {dtype} parameters, group_numel={group_numel}, master_weights={master}, one step"
        blocking = [name for name, non_blocking in recorder.calls if not non_blocking]
        expect(
            not blocking,
            "a blocking copy in the step",
            input=label,
            expected="every copy_ to or from host_state, and every to(device), with non_blocking=True",
            got=f"blocking: {blocking}; all: {recorder.calls[:12]}",
            hint="copy_(src, non_blocking=True) both ways: a blocking copy stalls the CPU until the GPU catches up",
        )
        expect(
            len(recorder.calls) >= 2 * per_param * len(params),
            "too few copies: the optimizer state does not travel",
            input=label,
            expected=f"at least {2 * per_param * len(params)} non-blocking copies ({per_param} host tensors up and "
            "back per parameter)",
            got=f"{len(recorder.calls)}",
            hint="_prefetch copies each moment to the device; _update copies each back into host_state",
        )


class RecordedSide:
    """Stands in for the learner's `self.side` and forwards every call to it (on a GPU: real streams and events),
    logging enter/exit of `with side:`, record, wait, hand_over and synchronize into the shared event log."""

    def __init__(self, inner, log):
        self.inner, self.log, self.depth = inner, log, 0

    def __enter__(self):
        self.depth += 1
        return self.inner.__enter__()

    def __exit__(self, *exc):
        self.depth -= 1
        return self.inner.__exit__(*exc)

    def record(self, key):
        self.log.append(("record", key))
        return self.inner.record(key)

    def wait(self, key):
        self.log.append(("wait", key))
        return self.inner.wait(key)

    def hand_over(self, tensors):
        tensors = list(tensors)
        self.log.append(("hand_over", {t.untyped_storage().data_ptr() for t in tensors}))
        return self.inner.hand_over(tensors)

    def synchronize(self):
        self.log.append(("synchronize",))
        return self.inner.synchronize()

    def __getattr__(self, name):
        return getattr(self.inner, name)


# Calls that read a tensor's metadata or make a view of it, not its values: they do not use the staged moments (a
# view of a staged buffer is staged itself: the recorder follows storages). record_stream marks, it does not read.
METADATA = {
    *("__get__", "size", "dim", "numel", "element_size", "data_ptr", "untyped_storage", "stride", "is_pinned"),
    *("__getitem__", "view", "view_as", "reshape", "narrow", "split", "chunk", "unbind", "flatten", "unflatten"),
    *("as_strided", "select", "t", "transpose", "permute", "expand", "squeeze", "unsqueeze", "detach", "__iter__"),
    "record_stream",
}


def _tensors(values):
    for value in values:
        if isinstance(value, torch.Tensor):
            yield value
        elif isinstance(value, list | tuple):
            yield from _tensors(value)


class StreamRecorder(TorchFunctionMode):
    """While active, into the shared log: ("up", g, on_side) for each copy out of a host tensor of group g (and
    from then on its destination is staged for g), ("use", g, call) for each call that reads or writes a staged
    tensor of group g (the update), ("down", g) for each copy into a host tensor of group g (the copy back)."""

    def __init__(self, optimizer, side, log):
        super().__init__()
        group_of = {i: g for g, group in enumerate(optimizer.groups) for i in group}
        self.host = {
            t.untyped_storage().data_ptr(): group_of[i] for i, ts in enumerate(optimizer.host_state) for t in ts
        }
        self.side, self.log, self.staged = side, log, {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        result = func(*args, **kwargs)
        if name in METADATA:
            return result
        storages = [t.untyped_storage().data_ptr() for t in _tensors([*args, *kwargs.values()])]
        from_host = [self.host[s] for s in storages if s in self.host]
        target = args[0] if name == "copy_" else result
        copies = name in ("copy_", "to", "cuda", "clone") and isinstance(target, torch.Tensor)
        out = target.untyped_storage().data_ptr() if copies else None
        if copies and from_host and (name == "copy_" or out not in storages):  # `t.to("cpu")` returns t: no copy
            if out in self.host:  # into a host tensor: the copy back (it reads the staged tensor)
                self.log.append(("down", self.host[out]))
            else:
                self.log.append(("up", from_host[0], self.side.depth > 0))
                self.staged[out] = from_host[0]
            return result
        for g in sorted({self.staged[s] for s in storages if s in self.staged}):
            self.log.append(("use", g, name))
        return result


def record_stream_calls(optimizer):
    """One step of `optimizer` with its side stream and tensor calls recorded: the event log and the staged
    storages of each group."""
    log = []
    side = RecordedSide(optimizer.side, log)
    optimizer.side = side
    recorder = StreamRecorder(optimizer, side, log)
    try:
        with recorder:
            optimizer.step()
    finally:
        optimizer.side = side.inner
    staged = {}
    for storage, g in recorder.staged.items():
        staged.setdefault(g, set()).add(storage)
    return log, staged


def summarize(log):
    """The event log as a learner reads it, runs of the same event folded: `copy up 0 x2, record(0), ...`."""
    words = []
    for event in log:
        kind = event[0]
        if kind == "up":
            words.append(f"copy up {event[1]}" + ("" if event[2] else " (current stream)"))
        elif kind in ("record", "wait"):
            words.append(f"{kind}({event[1]!r})")
        elif kind in ("use", "down"):
            words.append(f"{'update' if kind == 'use' else 'copy back'} {event[1]}")
        else:
            words.append(kind)
    runs = []
    for word in words:
        if runs and runs[-1][0] == word:
            runs[-1][1] += 1
        else:
            runs.append([word, 1])
    text = ", ".join(word if count == 1 else f"{word} x{count}" for word, count in runs)
    return text if len(text) <= 600 else text[:600] + " ..."


def expect_streams_in_order(ex, dtype, group_numel, master, device="cpu"):
    params = make_params(dtype, device)
    optimizer = ex.OffloadedAdamW(params, **HP, group_numel=group_numel, master_weights=master)
    groups = len(optimizer.groups)
    label = f"{len(params)} {dtype} parameters on {device}, group_numel={group_numel} ({groups} groups), "
    label += f"master_weights={master}"
    for step in (1, 2):
        for p in params:
            p.grad = torch.randn_like(p)
        log, staged = record_stream_calls(optimizer)
        where = f"{label}, step {step}"
        got = summarize(log)

        for g in range(groups):
            ups = [i for i, e in enumerate(log) if e[0] == "up" and e[1] == g]
            expect(
                bool(ups) and all(log[i][2] for i in ups),
                f"group {g}'s moments are not copied to the device on the side stream",
                input=where,
                expected=f"every copy of group {g}'s host tensors issued inside `with self.side:`",
                got=f"{len(ups)} copies, {sum(not log[i][2] for i in ups)} of them outside `with self.side:`",
                hint="_prefetch: torch.empty_like(t, device=self.device).copy_(t, non_blocking=True) inside `with "
                "self.side:`; on the current stream a copy waits for the update before it, so nothing overlaps",
            )
            recorded = next((i for i, e in enumerate(log) if i > ups[-1] and e[0] == "record"), None)
            key = None if recorded is None else log[recorded][1]
            used = min((i for i, e in enumerate(log) if e[0] in ("use", "down") and e[1] == g), default=None)
            waited = (
                None
                if recorded is None
                else next((i for i, e in enumerate(log) if i > recorded and e[0] == "wait" and e[1] == key), None)
            )
            expect(
                recorded is not None and waited is not None and used is not None and waited < used,
                f"group {g}'s moments are used before the current stream waits for the event after their copy",
                input=where,
                expected=f"copies of group {g} on the side stream, then side.record(key), then side.wait(key) "
                f"before the update touches them",
                got=got,
                hint="_prefetch: side.record(g) after the `with self.side:` block; _update: side.wait(g) first. "
                "Without the wait the update reads moments that are still arriving",
            )
            if g + 1 < groups:
                next_ups = [i for i, e in enumerate(log) if e[0] == "up" and e[1] == g + 1]
                expect(
                    bool(next_ups) and next_ups[-1] < used,
                    f"group {g + 1} is not copied while group {g} is updated",
                    input=where,
                    expected=f"every copy of group {g + 1} issued before the update of group {g} starts",
                    got=got,
                    hint="prefetch g + 1 BEFORE update g: the side stream copies while the current stream computes",
                )
            handed = set().union(*(e[1] for e in log if e[0] == "hand_over"))
            expect(
                staged.get(g, set()) <= handed,
                f"group {g}'s staged tensors are not handed over to the current stream",
                input=where,
                expected="side.hand_over(...) of every tensor staged for the group",
                got=f"{len(staged.get(g, set()) - handed)} of {len(staged.get(g, set()))} staged tensors not handed "
                "over",
                hint="tensors made on the side stream and used on the current one need record_stream (hand_over), "
                "or the allocator may reuse their memory while the update still reads it",
            )
        downs = [i for i, e in enumerate(log) if e[0] == "down"]
        syncs = [i for i, e in enumerate(log) if e[0] == "synchronize"]
        expect(
            bool(downs) and bool(syncs) and syncs[-1] > downs[-1],
            "the step returns before its copies back to the host are known to have landed",
            input=where,
            expected="side.synchronize() after the last copy into host_state",
            got=got,
            hint="end step() with self.side.synchronize(): the next step's prefetch reads the host moments",
        )


@checks("offloaded_adamw")
@one_thread()
def streams_and_events_in_order(ex):
    """the stream calls of a step, recorded: every copy up inside `with self.side:`, then side.record(k), and
    side.wait(k) before anything reads the group; group g + 1's copies issued before group g's update; every
    staged tensor handed over; side.synchronize() after the last copy back"""
    for dtype, group_numel, master in (
        (torch.float32, 40, False),
        (torch.float64, 1, False),
        (torch.bfloat16, 40, True),
    ):
        expect_streams_in_order(ex, dtype, group_numel, master)


def bf16_run(ex, grads, group_numel):
    params = make_params(torch.bfloat16)
    optimizer = ex.OffloadedAdamW(params, **HP, group_numel=group_numel, master_weights=True)
    for step_grads in grads:
        for p, g in zip(params, step_grads, strict=True):
            p.grad = g.clone()
        optimizer.step()
    return params, optimizer


@checks("offloaded_adamw")
@one_thread()
def master_weights_match_fp32_adamw(ex):
    """bf16 parameters with master_weights=True: fp32 master and moments as torch.optim.AdamW on fp32 copies fed
    the same gradients; every parameter is its master rounded to bf16"""
    grads = gradients(4, torch.bfloat16)
    init = [p.detach().float() for p in make_params(torch.bfloat16)]
    with reference_only():
        runs = {}
        for dtype in (torch.float64, torch.float32):
            copies = [t.detach().to(dtype, copy=True).requires_grad_() for t in init]
            reference = torch.optim.AdamW(copies, **HP, foreach=False)
            for step_grads in grads:
                for p, g in zip(copies, step_grads, strict=True):
                    p.grad = g.to(dtype)
                reference.step()
            runs[dtype] = (copies, reference)
    for group_numel in (1, 40):
        params, optimizer = bf16_run(ex, grads, group_numel)
        label = f"{len(SHAPES)} bf16 parameters {SHAPES}, master_weights=True, group_numel={group_numel}, 4 steps"
        want, want_opt = runs[torch.float64]
        base, base_opt = runs[torch.float32]
        for i, p in enumerate(params):
            host = optimizer.host_state[i]
            expect(
                len(host) == 3 and all(t.dtype == torch.float32 for t in host),
                "master weights need three float32 host tensors per parameter",
                input=label,
                expected="host_state[i] = (exp_avg, exp_avg_sq, master), all float32",
                got=str([t.dtype for t in host]),
                hint="with master_weights, allocate the moments in float32 and keep a float32 copy of the parameter",
            )
            for name, got, ref, baseline in (
                ("master", host[2], want[i].detach(), base[i].detach()),
                ("exp_avg", host[0], want_opt.state[want[i]]["exp_avg"], base_opt.state[base[i]]["exp_avg"]),
                ("exp_avg_sq", host[1], want_opt.state[want[i]]["exp_avg_sq"], base_opt.state[base[i]]["exp_avg_sq"]),
            ):
                expect_close(
                    got,
                    ref,
                    baseline=baseline,
                    input=label,
                    what=f"host {name} of parameter {i}",
                    hint="adamw_step on the staged fp32 master with p.grad.float(); copy master and moments back",
                )
            expect(
                torch.equal(p.detach(), host[2].to(torch.bfloat16)),
                "the bf16 parameter is not its master rounded",
                input=label,
                expected=f"parameter {i} == master.to(bfloat16)",
                got=f"max |p - master| = {float((p.detach().float() - host[2]).abs().max()):.3g}",
                hint="after the fp32 update, p.copy_(master): the parameter only ever holds the rounded master",
            )


@checks("offloaded_adamw")
def refuses_bad_input(ex):
    """bad hyperparameters, group_numel < 1, no, duplicate or mixed-device parameters: ValueError; a non-tensor:
    TypeError; the limits themselves (lr = 0, beta = 0, weight_decay = 0, one parameter) accepted"""
    p = torch.zeros(3, requires_grad=True)
    cases = [
        (lambda: ex.OffloadedAdamW([p], lr=-1e-3), "lr=-1e-3", ValueError),
        (lambda: ex.OffloadedAdamW([p], betas=(1.0, 0.999)), "betas=(1.0, 0.999)", ValueError),
        (lambda: ex.OffloadedAdamW([p], betas=(0.9, -0.1)), "betas=(0.9, -0.1)", ValueError),
        (lambda: ex.OffloadedAdamW([p], eps=0.0), "eps=0", ValueError),
        (lambda: ex.OffloadedAdamW([p], weight_decay=-0.1), "weight_decay=-0.1", ValueError),
        (lambda: ex.OffloadedAdamW([p], group_numel=0), "group_numel=0", ValueError),
        (lambda: ex.OffloadedAdamW([]), "no parameters", ValueError),
        (lambda: ex.OffloadedAdamW([p, p]), "the same parameter twice", ValueError),
        (lambda: ex.OffloadedAdamW([p, 2.0]), "a float among the parameters", TypeError),
        (
            lambda: ex.OffloadedAdamW([p, torch.zeros(3, device="meta", requires_grad=True)]),
            "parameters on cpu and meta",
            ValueError,
        ),
    ]
    for call, label, error in cases:
        expect_refused(
            call,
            input=f"OffloadedAdamW with {label}",
            hint="validate like torch.optim.AdamW: lr >= 0, 0 <= beta < 1, eps > 0, weight_decay >= 0; "
            "group_numel >= 1; at least one parameter, each once; TypeError for a non-tensor",
            errors=(error,),
        )
    for label, options in (
        ("lr=0, betas=(0, 0), weight_decay=0", dict(lr=0.0, betas=(0.0, 0.0), weight_decay=0.0)),
        ("group_numel=1", dict(group_numel=1)),
    ):
        try:
            ex.OffloadedAdamW([p], **options)
            outcome = "accepted"
        except NotImplementedError:
            raise
        except Exception as error:  # noqa: BLE001 (reported: valid input must be accepted)
            outcome = f"{type(error).__name__}: {error}"
        expect(
            outcome == "accepted",
            "valid input refused",
            input=f"OffloadedAdamW([one parameter], {label})",
            expected="accepted (the limits are valid, as in torch.optim.AdamW)",
            got=outcome,
            hint="lr >= 0, 0 <= beta < 1 and weight_decay >= 0 include 0; one parameter is enough",
        )


@checks("offloaded_adamw", requires_cuda=True)
@one_thread()
def pinned_and_ordered_on_gpu(ex):
    """on a GPU: the same result as torch's AdamW on cuda, host moments pinned, and the stream and event calls of a
    step in the order of `streams_and_events_in_order`, with the real side stream and events"""
    expect_matches_torch(ex, torch.float32, 1 << 16, 3, device="cuda")
    params = [torch.randn(1 << 20, device="cuda", requires_grad=True) for _ in range(4)]  # 4 x 4 MB
    for p in params:
        p.grad = torch.randn_like(p)
    optimizer = ex.OffloadedAdamW(params, group_numel=1 << 20)
    unpinned = [i for i, pair in enumerate(optimizer.host_state) for t in pair if not t.is_pinned()]
    expect(
        not unpinned,
        "host moments are not pinned",
        input="4 float32 parameters of 1M elements on cuda",
        expected="every host_state tensor pinned (t.pin_memory())",
        got=f"unpinned moments of parameters {sorted(set(unpinned))}",
        hint="pin the host moments when torch.cuda.is_available(): non_blocking copies need page-locked memory",
    )
    expect_streams_in_order(ex, torch.float32, 40, False, device="cuda")
