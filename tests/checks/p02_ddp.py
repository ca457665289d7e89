"""Checks for p02.ddp. The learner's code runs in real 2-rank gloo worlds (`llm_algo.distributed`). References:
single-process training of the same model on the full batch in float64 (5 steps; only the order of the sums
differs), `torch.nn.parallel.DistributedDataParallel` on gloo in the same ranks (a second oracle, forbidden to the
learner), torch's own bucket assignment `dist._compute_bucket_assignment_by_size`, and the order of events in
backward (gradient hooks of the checks' own, a recording `dist.all_reduce`)."""

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from llm_algo.check import Checks, expect, expect_close, expect_refused, one_thread
from llm_algo.distributed import attempted, expect_ranks_ok, run_ranks, run_subgroup, world
from llm_algo.distributed.subgroup import GROUP_HINT

checks = Checks("p02.ddp")
checks.restrict(
    "assign_buckets",
    forbid=(dist._compute_bucket_assignment_by_size,),
    instead="walk the parameters yourself (torch's bucket assignment is the checks' reference)",
)

WORLD = 2
DEADLINE = 20.0  # a mistake that leaves one rank waiting in a collective ends here, not at the 30 s default
SUBGROUP_DEADLINE = 10.0  # on [1, 2] of 3: a collective on the default group is reported after this (a few steps)
FORBID = ("torch.nn.parallel.DistributedDataParallel", "torch.distributed._compute_bucket_assignment_by_size")
INSTEAD = "register the gradient hooks and launch the all-reduces yourself (torch's DDP is the checks' reference)"


_WARM: set = set()


def on_subgroup(fn, **options):
    """run_subgroup on [1, 2] of a world of 3 with the short SUBGROUP_DEADLINE, after a first backward and collective
    in each of those rank processes (lazy initialisation: seconds on a loaded machine, not the learner's)."""
    current = world(3)
    key = tuple(process.pid for process in current.processes)
    if key not in _WARM:
        expect_ranks_ok(current.run(_first_steps, deadline=120.0), input="starting 3 ranks")
        _WARM.add(key)
    return run_subgroup(fn, forbid=FORBID, instead=INSTEAD, deadline=SUBGROUP_DEADLINE, **options)


def _first_steps():
    lm_loss(TiedLM()(torch.randint(13, (2, 3))), torch.randint(13, (2, 3))).backward()
    dist.all_reduce(torch.ones(3))


def ranks(fn, **options):
    """run_ranks in the lesson's world; the first optimizer (or DDP) of a process imports torch._dynamo, seconds of
    CPU that are preloaded before the learner's deadline starts."""
    return run_ranks(fn, WORLD, deadline=DEADLINE, preload=("torch._dynamo",), **options)


class TiedLM(nn.Module):
    """Embedding -> residual MLP -> head tied to the embedding (HF style), a frozen logit bias and a buffer."""

    def __init__(self, vocab=13, dim=8, hidden=16):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.embed.weight  # tied: one Parameter, two uses
        self.logit_bias = nn.Parameter(torch.randn(vocab), requires_grad=False)  # frozen: no gradient, no hook
        self.register_buffer("scale", torch.rand(dim) + 0.5)

    def forward(self, tokens, use_mlp=True):
        h = self.embed(tokens) * self.scale  # (B, T, dim)
        if use_mlp:
            h = h + self.down(torch.tanh(self.up(h)))
        return self.head(h) + self.logit_bias  # (B, T, vocab)


class TiedLMWithUnused(TiedLM):
    """TiedLM with a parameter the forward never uses (torch.optim skips it: its .grad stays None)."""

    def __init__(self):
        super().__init__()
        self.unused = nn.Parameter(torch.randn(5))


def bucket_cap(dtype) -> int:
    """Three buckets for TiedLM: [down.bias, down.weight], [up.bias, up.weight], [embed] (the last one partial)."""
    return 136 * torch.tensor([], dtype=dtype).element_size()  # 136 elements = down.bias (8) + down.weight (128)


def make_batches(steps, batch, seq=5, vocab=13):
    return [(torch.randint(vocab, (batch, seq)), torch.randint(vocab, (batch, seq))) for _ in range(steps)]


class SGD:
    """SGD with momentum, written here rather than taken from torch.optim: the first torch.optim optimizer in a
    process imports torch._dynamo (seconds per rank on a busy CPU). momentum=0: plain SGD, where a zero gradient and
    no gradient give the same (no) step."""

    def __init__(self, params, lr=0.5, momentum=0.9):
        self.params, self.lr, self.momentum = list(params), lr, momentum
        self.buffers = {}

    def zero_grad(self):
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self):
        for p in self.params:
            if p.grad is None:
                continue
            if p in self.buffers:
                self.buffers[p].mul_(self.momentum).add_(p.grad)
            else:
                self.buffers[p] = p.grad.clone()
            p.sub_(self.lr * self.buffers[p])


class AdamW:
    """torch.optim.AdamW's update, elementwise, for the ranks (the same reason as SGD). It is given every parameter,
    frozen ones included, and skips a .grad that is None, as torch.optim does; the single-process reference of
    `frozen_and_unused_parameters_on_a_subgroup` is torch.optim.AdamW itself."""

    def __init__(self, params, lr=0.05, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1):
        self.params, self.lr, self.betas, self.eps, self.weight_decay = list(params), lr, betas, eps, weight_decay
        self.state = {}

    def zero_grad(self):
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self):
        beta1, beta2 = self.betas
        for p in self.params:
            if p.grad is None:
                continue
            step, m, v = self.state.get(p, (0, torch.zeros_like(p), torch.zeros_like(p)))
            step += 1
            self.state[p] = (step, m, v)
            p.mul_(1 - self.lr * self.weight_decay)
            m.lerp_(p.grad, 1 - beta1)
            v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
            denom = (v.sqrt() / (1 - beta2**step) ** 0.5).add_(self.eps)
            p.addcdiv_(m, denom, value=-self.lr / (1 - beta1**step))


def make_optimizer(kind, params, reference=False):
    if kind == "adamw":  # every parameter, frozen and unused ones included: the optimizer skips those without .grad
        return torch.optim.AdamW(params, lr=0.05, weight_decay=0.1) if reference else AdamW(params)
    params = [p for p in params if p.requires_grad]
    return SGD(params, lr=0.5, momentum=0.0 if kind == "plain sgd" else 0.9)


def lm_loss(logits, targets):
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def shard(tensor, rank, world):
    size = tensor.shape[0] // world
    return tensor[rank * size : (rank + 1) * size]


def single_process(seed, dtype, optimizer, batches, use_mlp=None, model_class=TiedLM):
    """The reference: rank 0's initial model trained on the full batches in one process."""
    torch.manual_seed(seed)
    model = model_class().to(dtype)
    opt = make_optimizer(optimizer, model.parameters(), reference=True)
    losses = []
    for step, (tokens, targets) in enumerate(batches):
        opt.zero_grad()
        loss = lm_loss(model(tokens, use_mlp=use_mlp is None or use_mlp[step]), targets)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return [p.detach() for p in model.parameters()], torch.stack(losses)


def trained_parameters(ddp_class, seed, dtype, optimizer, batches, use_mlp=None, model_class=TiedLM, group=None):
    """In every rank of `group`: a replica initialised from its own seed, wrapped, trained on this rank's shards."""
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    torch.manual_seed(seed + 1000 * rank)  # the replicas start apart: only the broadcast brings them together
    model = model_class().to(dtype)
    if rank != 0:  # make the difference certain, whatever the seeds give
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1.0)
    ddp = ddp_class(model, bucket_cap_bytes=bucket_cap(dtype), group=group)
    opt = make_optimizer(optimizer, model.parameters())
    local_losses = []
    for step, (tokens, targets) in enumerate(batches):
        opt.zero_grad()
        logits = ddp(shard(tokens, rank, world), use_mlp=use_mlp is None or use_mlp[step])
        loss = lm_loss(logits, shard(targets, rank, world))
        loss.backward()
        opt.step()
        local_losses.append(loss.detach())
    return [p.detach().clone() for p in model.parameters()], torch.stack(local_losses)


def compare_replicas(per_rank, want, *, input, hint, model_class=TiedLM):
    names = [name for name, _ in model_class().named_parameters()]
    for rank, (params, _) in enumerate(per_rank):
        for name, got, expected in zip(names, params, want, strict=True):
            expect_close(got, expected, input=f"{input}, rank {rank}", what=name, hint=hint)
    for name, a, b in zip(names, per_rank[0][0], per_rank[1][0], strict=True):
        expect(
            torch.equal(a, b),
            f"the replicas differ after training ({name})",
            input=input,
            expected="bit-identical parameters on every rank (every rank applies the same averaged gradient)",
            got=f"max |rank 0 - rank 1| = {float((a - b).abs().max()):.3g}",
            hint="every rank must end backward with the same .grad: the all-reduced mean of every bucket",
        )


def try_each(fn, calls):
    """In every rank: fn(*args) for each args in calls; per call (the error's type name or "accepted", how many
    collectives it issued: a refusal must come before any)."""
    originals = {name: getattr(dist, name) for name in ("broadcast", "all_reduce")}
    counted = []

    def counting(name):
        def call(*args, **kwargs):
            counted.append(name)
            return originals[name](*args, **kwargs)

        return call

    outcomes = []
    for name in originals:
        setattr(dist, name, counting(name))
    try:
        for args in calls:
            counted.clear()
            try:
                fn(*args)
                outcomes.append(("accepted", len(counted)))
            except Exception as error:  # noqa: BLE001 (reported to the grader, which judges the type)
                outcomes.append((type(error).__name__, len(counted)))
    finally:
        for name, original in originals.items():
            setattr(dist, name, original)
    return outcomes


def expect_refusals(results, labels, wants, hint):
    """`wants`: "ValueError" (refused before any collective) or "accepted", per call of try_each."""
    for rank, outcomes in enumerate(expect_ranks_ok(results, input="; ".join(labels))):
        for label, want, (outcome, collectives) in zip(labels, wants, outcomes, strict=True):
            expect(
                outcome == want,
                "bad input accepted" if outcome == "accepted" else f"raised {outcome}, not {want}",
                input=f"{label}, rank {rank}",
                expected=want if want != "accepted" else "accepted (valid input)",
                got=outcome,
                hint=hint,
            )
            expect(
                want == "accepted" or collectives == 0,
                "the refusal came after communicating",
                input=f"{label}, rank {rank}",
                expected=f"{want} before any collective",
                got=f"{collectives} collective call(s) before the error",
                hint="validate the arguments first: a rank that raises mid-collective leaves the others waiting",
            )


# ------------------------------------------------------------------------------------------ broadcast_parameters


def broadcast_and_report(broadcast, src, group=None):
    """Every rank: a model and buffers that differ per rank; after the broadcast, what each rank holds."""
    rank = dist.get_rank(group)
    torch.manual_seed(100 + rank)
    model = nn.Sequential(TiedLM(), nn.BatchNorm1d(13)).to(torch.float64)
    model[1].num_batches_tracked.fill_(7 + rank)  # an int64 buffer
    model[0].scale.mul_(rank + 1)
    storage = {name: t.data_ptr() for name, t in model.state_dict(keep_vars=True).items()}
    before = {name: t.detach().clone() for name, t in model.state_dict(keep_vars=True).items()}
    broadcast(model, src=src, group=group)
    state = {name: t.detach().clone() for name, t in model.state_dict(keep_vars=True).items()}
    in_place = all(storage[name] == t.data_ptr() for name, t in model.state_dict(keep_vars=True).items())
    tied = model[0].head.weight is model[0].embed.weight
    return state, in_place, tied, before


def check_broadcast(ex, src, subgroup=False):
    attempted(lambda: ex.broadcast_parameters("not a module"))
    label = f"{WORLD} ranks, TiedLM + BatchNorm1d (float64 parameters, int64 buffer) different on each rank, src={src}"
    hint = "every rank calls dist.broadcast(tensor, group_src=src)"
    if subgroup:
        label = f"the group [1, 2] of a world of 3 ({label}; src is a rank of the group: global rank {src + 1})"
        results = on_subgroup(
            broadcast_and_report, input=label, hint=hint + ", group=group", args=(ex.broadcast_parameters, src)
        )
        hint += f", group=group; {GROUP_HINT}"
    else:
        results = ranks(broadcast_and_report, args=(ex.broadcast_parameters, src), forbid=FORBID, instead=INSTEAD)
    per_rank = expect_ranks_ok(results, input=label, hint=hint)
    source_state = per_rank[src][3]  # what rank src held before the broadcast
    for rank, (state, in_place, tied, _) in enumerate(per_rank):
        for name, tensor in state.items():
            expect(
                torch.equal(tensor, source_state[name]),
                f"rank {rank}'s {name} is not rank {src}'s after the broadcast",
                input=label,
                expected=f"rank {src}'s values everywhere",
                got=f"max difference {float((tensor.double() - source_state[name].double()).abs().max()):.3g}",
                hint="broadcast every parameter AND every buffer (module.buffers()), from src, not from your own rank",
            )
        expect(
            in_place and tied,
            "the broadcast replaced the module's tensors instead of writing into them",
            input=label,
            expected="the same tensors (data_ptr) before and after, the tied weight still shared",
            got=f"same storage: {in_place}, head still tied to the embedding: {tied}",
            hint="dist.broadcast writes into the tensor you pass: pass the parameter itself, do not assign new ones",
        )


@checks("broadcast_parameters")
def replicas_get_rank_zero_weights(ex):
    """2 ranks with different weights and buffers: after the broadcast all hold rank 0's, in place, tie kept"""
    check_broadcast(ex, 0)


@checks("broadcast_parameters")
def broadcast_from_rank_one(ex):
    """src=1: every rank ends with rank 1's parameters and buffers"""
    check_broadcast(ex, 1)


@checks("broadcast_parameters")
def broadcast_on_a_subgroup(ex):
    """the group [1, 2] of a world of 3, src=1 (global rank 2): both members end with its tensors; rank 0, outside
    the group, receives nothing"""
    check_broadcast(ex, 1, subgroup=True)


@checks("broadcast_parameters")
def refuses_bad_src(ex):
    """a src that is not a rank (2, -1 in a world of 2) is a ValueError on every rank; a non-module a TypeError"""
    expect_refused(
        lambda: ex.broadcast_parameters([torch.zeros(3)]),
        input="broadcast_parameters([tensor]) (a list, not an nn.Module), in the grader process",
        hint="check isinstance(module, nn.Module) first, before anything that needs the process group",
        errors=(TypeError,),
    )
    sources = (WORLD, -1)
    results = ranks(try_each, args=(ex.broadcast_parameters, [(nn.Linear(3, 2), src) for src in sources]))
    expect_refusals(
        results,
        [f"broadcast_parameters(nn.Linear(3, 2), src={src}) in a world of {WORLD}" for src in sources],
        ["ValueError"] * len(sources),
        "compare src with dist.get_world_size(group) and raise ValueError before any dist.broadcast",
    )


# ------------------------------------------------------------------------------------------ assign_buckets


def torch_buckets(params, cap):
    """torch's DDP assignment, mapped back to indices of `params` (it takes the tensors in reverse order)."""
    walk = list(reversed(params))
    buckets, _ = dist._compute_bucket_assignment_by_size(walk, [cap], [False] * len(walk))
    return [[len(params) - 1 - j for j in bucket] for bucket in buckets]


def expect_buckets(ex, params, cap, label, hint):
    got = ex.assign_buckets(params, cap)
    want = torch_buckets(params, cap)
    got_plain = [list(map(int, bucket)) for bucket in got] if isinstance(got, list | tuple) else got
    expect(
        got_plain == want,
        "the buckets differ from DDP's",
        input=label,
        expected=str(want),
        got=str(got_plain)[:300],
        hint=hint,
    )


@checks("assign_buckets")
def hand_checked_example(ex):
    """sizes [400, 100, 100, 300] bytes, cap 400: [[3, 2], [1, 0]]; a cap reached exactly closes the bucket"""
    params = [torch.zeros(100), torch.zeros(25), torch.zeros(25), torch.zeros(75)]
    expect_buckets(
        ex,
        params,
        400,
        "float32 tensors of 400, 100, 100, 300 bytes, cap 400",
        "walk from the last parameter; close the bucket when its bytes reach (>=) the cap",
    )
    for cap, want in ((400, [[3, 2], [1, 0]]), (401, [[3, 2, 1], [0]])):
        got = ex.assign_buckets(params, cap)
        expect(
            [list(map(int, b)) for b in got] == want,
            "wrong buckets for the section's example",
            input=f"sizes [400, 100, 100, 300] bytes, cap {cap}",
            expected=str(want),
            got=str(got),
            hint="count bytes from 0: 300 + 100 = 400 reaches a cap of 400 exactly but not one of 401",
        )


@checks("assign_buckets")
def random_sizes_match_torch(ex):
    """random tensor sizes and caps from 'one bucket per tensor' to 'everything in one bucket', as torch assigns"""
    for count in (1, 2, 7, 23):
        params = [torch.zeros(*torch.randint(1, 40, (int(torch.randint(1, 3, ())),)).tolist()) for _ in range(count)]
        total = sum(p.numel() * 4 for p in params)
        for cap in (1, 64, 300, int(torch.randint(50, 2000, ())), total, total + 1):
            expect_buckets(
                ex,
                params,
                cap,
                f"{count} float32 tensors of {[p.numel() * 4 for p in params]} bytes, cap {cap}",
                "a tensor larger than the cap gets a bucket of its own; the last open bucket is kept",
            )


@checks("assign_buckets")
def one_bucket_per_dtype(ex):
    """float32, float64 and bfloat16 parameters interleaved: each dtype fills its own buckets"""
    dtypes = [torch.float32, torch.float64, torch.bfloat16]
    params = [torch.zeros(int(torch.randint(3, 30, ())), dtype=dtypes[i % 3]) for i in range(11)]
    for cap in (80, 200, 10**6):
        expect_buckets(
            ex,
            params,
            cap,
            f"11 tensors cycling float32/float64/bfloat16, cap {cap} bytes",
            "a bucket is one flat tensor: keep one open bucket per (dtype, device); order buckets by first index",
        )


@checks("assign_buckets")
def refuses_bad_cap(ex):
    """bucket_cap_bytes of 0 or below is a ValueError"""
    for cap in (0, -5):
        expect_refused(
            lambda cap=cap: ex.assign_buckets([torch.zeros(4)], cap),
            input=f"bucket_cap_bytes={cap}",
            hint="raise ValueError when bucket_cap_bytes <= 0",
            errors=(ValueError,),
        )


# ------------------------------------------------------------------------------------------ DDP


@checks("ddp")
def refuses_bad_wrapping(ex):
    """DDP(list): TypeError; bucket_cap_bytes 0 or -1: ValueError on every rank before any collective; 1 is fine"""
    expect_refused(
        lambda: ex.DDP([nn.Linear(2, 2)]),
        input="DDP([nn.Linear(2, 2)]) (a list), in the grader process",
        hint="check isinstance(module, nn.Module) before anything else",
        errors=(TypeError,),
    )
    caps, wants = (0, -1, 1), ("ValueError", "ValueError", "accepted")
    results = ranks(try_each, args=(ex.DDP, [(TiedLM(), cap) for cap in caps]), forbid=FORBID, instead=INSTEAD)
    expect_refusals(
        results,
        [f"DDP(TiedLM(), bucket_cap_bytes={cap}) on {WORLD} ranks" for cap in caps],
        wants,
        "raise ValueError when bucket_cap_bytes <= 0; any positive cap is valid (1 byte: one bucket per parameter)",
    )


@checks("ddp")
@one_thread()
def matches_single_process_training(ex):
    """5 steps of SGD with momentum, float64: every rank equals one process trained on the full batch"""
    attempted(lambda: ex.DDP("not a module"))
    batches = make_batches(5, 8)
    label = f"{WORLD} ranks, TiedLM float64 (tied head, frozen bias, buffer), batch 8 = 2 x 4, SGD momentum, 5 steps"
    results = ranks(trained_parameters, args=(ex.DDP, 7, torch.float64, "sgd", batches), forbid=FORBID, instead=INSTEAD)
    per_rank = expect_ranks_ok(results, input=label, hint="average the gradients: all-reduce the sum, divide by p")
    want, want_losses = single_process(7, torch.float64, "sgd", batches)
    compare_replicas(
        per_rank,
        want,
        input=label,
        hint="broadcast rank 0's weights at wrap time, then average every bucket (sum / world size) into .grad",
    )
    mean_loss = (per_rank[0][1] + per_rank[1][1]) / 2
    expect_close(mean_loss, want_losses, input=label, what="mean of the ranks' losses per step", hint="")


def expect_same_parameters(names, mine, theirs, *, input, hint):
    """The learner's DDP against torch's, parameter by parameter."""
    for name, got, want in zip(names, mine, theirs, strict=True):
        expect_close(got, want, input=input, what=name, hint=hint)


def with_torch_ddp(ddp_class, seed, batches):
    """In every rank: the learner's DDP and torch's DistributedDataParallel trained alike (SGD momentum, float32)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    out = []
    for wrapper in (ddp_class, "torch"):
        torch.manual_seed(seed + 1000 * rank)
        model = TiedLM()
        cap = bucket_cap(torch.float32)
        if wrapper == "torch":
            ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=cap / 2**20)
        else:
            ddp = wrapper(model, bucket_cap_bytes=cap)
        opt = make_optimizer("sgd", model.parameters())
        for tokens, targets in batches:
            opt.zero_grad()
            lm_loss(ddp(shard(tokens, rank, world)), shard(targets, rank, world)).backward()
            opt.step()
        out.append([p.detach().clone() for p in model.parameters()])
    return out


@checks("ddp")
@one_thread()
def matches_torch_distributed_data_parallel(ex):
    """float32, 5 steps: the same parameters as torch.nn.parallel.DistributedDataParallel on gloo"""
    attempted(lambda: ex.DDP("not a module"))
    batches = make_batches(5, 8)
    label = f"{WORLD} ranks, TiedLM float32, SGD momentum, 5 steps, same seeds and bucket cap for yours and torch's"
    results = ranks(with_torch_ddp, args=(ex.DDP, 11, batches), forbid=FORBID, instead=INSTEAD)
    per_rank = expect_ranks_ok(results, input=label, hint="")
    names = [name for name, _ in TiedLM().named_parameters()]
    for rank, (mine, theirs) in enumerate(per_rank):
        expect_same_parameters(
            names,
            mine,
            theirs,
            input=f"{label}, rank {rank}",
            hint="torch's DDP averages every gradient over the ranks after broadcasting rank 0's weights",
        )


def with_torch_ddp_unused(ddp_class, seed, batches, use_mlp):
    """In every rank: the learner's DDP and torch's DistributedDataParallel(find_unused_parameters=True), AdamW with
    weight decay, TiedLMWithUnused with the MLP unused on some steps; then one step of a model with a single
    trainable parameter. The parameters, and which .grad are None after the last backward."""
    rank, world = dist.get_rank(), dist.get_world_size()
    out = []
    for wrapper in (ddp_class, "torch"):
        torch.manual_seed(seed + 1000 * rank)
        model = TiedLMWithUnused().double()
        cap = bucket_cap(torch.float64)
        if wrapper == "torch":
            ddp = torch.nn.parallel.DistributedDataParallel(
                model, bucket_cap_mb=cap / 2**20, find_unused_parameters=True
            )
        else:
            ddp = wrapper(model, bucket_cap_bytes=cap)
        opt = torch.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.1)
        for (tokens, targets), mlp in zip(batches, use_mlp, strict=True):
            opt.zero_grad()
            lm_loss(ddp(shard(tokens, rank, world), use_mlp=mlp), shard(targets, rank, world)).backward()
            opt.step()
        none = [p.grad is None for p in model.parameters()]
        torch.manual_seed(seed + 1000 * rank)
        single = nn.Linear(3, 2, bias=False).double()  # one trainable parameter
        ddp = torch.nn.parallel.DistributedDataParallel(single) if wrapper == "torch" else wrapper(single)
        ddp(torch.randn(4, 3, dtype=torch.float64)).square().sum().backward()
        out.append(([p.detach().clone() for p in model.parameters()], none, single.weight.grad.clone()))
    return out


@checks("ddp")
@one_thread()
def matches_torch_ddp_with_unused_parameters(ex):
    """float64, AdamW with weight decay, a parameter never used and the MLP unused on steps 2 and 3: the parameters
    of torch's DistributedDataParallel(find_unused_parameters=True), and .grad None exactly where torch leaves it None;
    a model with one trainable parameter"""
    attempted(lambda: ex.DDP("not a module"))
    batches = make_batches(3, 8)
    use_mlp = [True, False, False]
    label = (
        f"{WORLD} ranks, TiedLM float64 with an unused parameter (5,), the MLP unused on steps 2 and 3, AdamW lr 0.05 "
        "weight decay 0.1, 3 steps, against DistributedDataParallel(find_unused_parameters=True)"
    )
    results = ranks(with_torch_ddp_unused, args=(ex.DDP, 17, batches, use_mlp), forbid=FORBID, instead=INSTEAD)
    per_rank = expect_ranks_ok(results, input=label, hint="")
    names = [name for name, _ in TiedLMWithUnused().named_parameters()]
    for rank, ((mine, my_none, my_single), (theirs, their_none, their_single)) in enumerate(per_rank):
        expect(
            my_none == their_none,
            "a parameter's .grad is None where torch's DDP leaves it None, or the other way round",
            input=f"{label}, rank {rank}, after the last backward",
            expected=f".grad None for {[n for n, none in zip(names, their_none, strict=True) if none]}",
            got=f".grad None for {[n for n, none in zip(names, my_none, strict=True) if none]}",
            hint="a parameter that no rank has a gradient for keeps .grad None (torch.optim skips it; AdamW decays a "
            "zero one); one that some rank used gets the mean, with zeros from the ranks that did not",
        )
        expect_same_parameters(
            names,
            mine,
            theirs,
            input=f"{label}, rank {rank}",
            hint="an unused parameter must not be shrunk by weight decay: leave its .grad None",
        )
        expect_close(
            my_single,
            their_single,
            input=f"{WORLD} ranks, Linear(3, 2, bias=False) float64 (one trainable parameter), one backward, rank {rank}",
            what="weight.grad",
            hint="",
        )


def record_backward(ddp_class, seed, tokens, targets):
    """In every rank: the order of gradient readiness and all-reduce launches in one backward, and their sizes."""
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(seed + rank)
    model = TiedLM()
    events = []
    model.embed.weight.register_post_accumulate_grad_hook(lambda p: events.append(("last gradient", p.numel())))
    original = dist.all_reduce

    def recording_all_reduce(tensor, *args, **kwargs):
        events.append(("all_reduce", tensor.numel()))
        return original(tensor, *args, **kwargs)

    ddp = ddp_class(model, bucket_cap_bytes=bucket_cap(torch.float32))
    events.clear()  # what the wrapping did is not the question
    dist.all_reduce = recording_all_reduce
    try:
        lm_loss(ddp(shard(tokens, rank, world)), shard(targets, rank, world)).backward()
        events.append(("backward returned", 0))
        lm_loss(ddp(shard(tokens, rank, world)), shard(targets, rank, world)).backward()  # the state was reset
        events.append(("backward returned", 0))
    finally:
        dist.all_reduce = original
    return events


def bucket_reductions(events, flags):
    """The sizes of the all-reduces of one backward, less one of `flags` values (one per trainable parameter: the
    all-reduce that tells which parameters some rank has a gradient for, as torch's DDP reduces its used map)."""
    sizes = sorted(n for kind, n in events if kind == "all_reduce")
    if flags in sizes:
        sizes.remove(flags)
    return sizes


@checks("ddp")
@one_thread()
def all_reduces_overlap_backward(ex):
    """one all-reduce per bucket (torch's assignment, tied weight once), launched before the last gradient is ready"""
    attempted(lambda: ex.DDP("not a module"))
    tokens, targets = make_batches(1, 8)[0]
    model = TiedLM()
    trainable = [p for p in model.parameters() if p.requires_grad]
    cap = bucket_cap(torch.float32)
    want_sizes = sorted(sum(trainable[i].numel() for i in bucket) for bucket in torch_buckets(trainable, cap))
    label = f"{WORLD} ranks, TiedLM float32, bucket cap {cap} bytes, two backward passes"
    results = ranks(record_backward, args=(ex.DDP, 3, tokens, targets), forbid=FORBID, instead=INSTEAD)
    per_rank = expect_ranks_ok(results, input=label)
    events = per_rank[0]
    first_pass = events[: events.index(("backward returned", 0))]
    sizes = bucket_reductions(first_pass, len(trainable))
    expect(
        sizes == want_sizes,
        "the all-reduces of one backward are not one per bucket",
        input=label,
        expected=f"{len(want_sizes)} all-reduces of {want_sizes} values (torch's buckets; the tied weight once)",
        got=f"{len(sizes)} all-reduces of {sizes} values",
        hint="one dist.all_reduce per bucket of assign_buckets(trainable parameters); list a tied weight once "
        "(module.parameters() does), skip requires_grad=False",
    )
    second_pass = events[len(first_pass) + 1 : -1]
    expect(
        bucket_reductions(second_pass, len(trainable)) == want_sizes,
        "the second backward did not reduce every bucket again",
        input=label,
        expected=f"{want_sizes} again",
        got=str(bucket_reductions(second_pass, len(trainable))),
        hint="reset the per-backward state (missing counts, next bucket, handles) at the end of _finish",
    )
    order = [kind for kind, _ in first_pass]
    before_last = order[: order.index("last gradient")].count("all_reduce") if "last gradient" in order else 0
    expect(
        before_last >= len(want_sizes) - 1,
        "the all-reduces do not overlap backward",
        input=label + "; the embedding's gradient (tied head + lookup) is the last one backward produces",
        expected=f"the first {len(want_sizes) - 1} buckets launched before the embedding's gradient is ready",
        got=f"{before_last} launched before it; events: {order}",
        hint="launch a bucket from the hook of its last gradient (async_op=True), not at the end of backward",
    )


def accumulate_with_no_sync(ddp_class, seed, batches):
    """In every rank: each step = 2 micro-batches, the first under no_sync; counts of all-reduces per backward."""
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(seed + 1000 * rank)
    model = TiedLM().double()
    ddp = ddp_class(model, bucket_cap_bytes=bucket_cap(torch.float64))
    opt = make_optimizer("sgd", model.parameters())
    original, calls = dist.all_reduce, []

    def counting_all_reduce(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    counts = []
    dist.all_reduce = counting_all_reduce
    try:
        for tokens, targets in batches:
            opt.zero_grad()
            mine_t, mine_y = shard(tokens, rank, world), shard(targets, rank, world)
            half = mine_t.shape[0] // 2
            with ddp.no_sync():
                (lm_loss(ddp(mine_t[:half]), mine_y[:half]) / 2).backward()
            counts.append(len(calls))
            calls.clear()
            (lm_loss(ddp(mine_t[half:]), mine_y[half:]) / 2).backward()
            counts.append(len(calls))
            calls.clear()
            opt.step()
    finally:
        dist.all_reduce = original
    return [p.detach().clone() for p in model.parameters()], counts


@checks("ddp")
@one_thread()
def no_sync_accumulates_locally(ex):
    """gradient accumulation: no all-reduce inside no_sync(), one per bucket after; equals full-batch training"""
    attempted(lambda: ex.DDP("not a module"))
    batches = make_batches(3, 8)
    label = f"{WORLD} ranks x 2 micro-batches of 2, float64, SGD momentum, 3 steps, first micro-batch under no_sync()"
    results = ranks(accumulate_with_no_sync, args=(ex.DDP, 5, batches), forbid=FORBID, instead=INSTEAD)
    per_rank = expect_ranks_ok(results, input=label)
    trainable = [p for p in TiedLM().double().parameters() if p.requires_grad]
    buckets = len(torch_buckets(trainable, bucket_cap(torch.float64)))
    counts = per_rank[0][1]
    expect(
        counts[::2] == [0] * len(batches) and all(n in (buckets, buckets + 1) for n in counts[1::2]),
        "communication inside no_sync(), or not after it",
        input=label,
        expected=f"all-reduces per backward: {[0, buckets] * len(batches)} (or {buckets + 1} after no_sync(), with "
        "the all-reduce of which parameters have a gradient)",
        got=str(counts),
        hint="no_sync() turns the hooks off for its block; the next backward reduces the accumulated .grad",
    )
    want, _ = single_process(5, torch.float64, "sgd", batches)
    compare_replicas(
        [(params, None) for params, _ in per_rank],
        want,
        input=label,
        hint="under no_sync the gradients add up in .grad; the synced backward all-reduces that sum (then / p)",
    )


@checks("ddp")
@one_thread()
def unused_parameters_flushed_at_the_end(ex):
    """steps where the MLP is not used: its buckets never fill, so the end of backward launches them; no rank hangs"""
    attempted(lambda: ex.DDP("not a module"))
    batches = make_batches(4, 8)
    use_mlp = [True, False, True, False]
    label = (
        f"{WORLD} ranks, TiedLM float64, plain SGD, 4 steps, the MLP unused on steps 2 and 4 (up/down get no gradient)"
    )
    results = ranks(
        trained_parameters,
        args=(ex.DDP, 9, torch.float64, "plain sgd", batches, use_mlp),
        forbid=FORBID,
        instead=INSTEAD,
    )
    per_rank = expect_ranks_ok(
        results, input=label, hint="at the end of backward, launch the buckets that are not complete (zeros)"
    )
    want, _ = single_process(9, torch.float64, "plain sgd", batches, use_mlp)
    compare_replicas(
        per_rank,
        want,
        input=label,
        hint="_finish must launch every bucket not launched yet, counting missing gradients as zeros",
    )


@checks("ddp")
@one_thread()
def frozen_and_unused_parameters_on_a_subgroup(ex):
    """the group [1, 2] of a world of 3 (rank 0 receives nothing), a frozen logit bias and a parameter the forward
    never uses, AdamW with weight decay 0.1, 4 steps: every member equals one process trained on the full batch with
    torch.optim.AdamW (which skips both: their .grad is None; a zero .grad would be decayed)"""
    attempted(lambda: ex.DDP("not a module"))
    batches = make_batches(4, 8)
    label = (
        "the group [1, 2] of a world of 3, TiedLM float64 with a frozen logit bias and an unused parameter (5,), "
        "batch 8 = 2 x 4, AdamW lr 0.05 weight decay 0.1, 4 steps"
    )
    hint = "take the rank and size from the group and pass group= to the broadcast and to every all-reduce"
    results = on_subgroup(
        trained_parameters,
        input=label,
        hint=hint,
        args=(ex.DDP, 13, torch.float64, "adamw", batches, None, TiedLMWithUnused),
    )
    per_rank = expect_ranks_ok(results, input=label, hint=f"{hint}; {GROUP_HINT}")
    want, want_losses = single_process(13, torch.float64, "adamw", batches, model_class=TiedLMWithUnused)
    compare_replicas(
        per_rank,
        want,
        input=label,
        hint="the mean over the group's ranks: divide by dist.get_world_size(group), not the world's; a parameter "
        "that no rank has a gradient for keeps .grad None (a zero gradient is shrunk by AdamW's weight decay)",
        model_class=TiedLMWithUnused,
    )
    mean_loss = (per_rank[0][1] + per_rank[1][1]) / 2
    expect_close(mean_loss, want_losses, input=label, what="mean of the members' losses per step", hint="")
