"""Checks for p02.fsdp. References: single-process training of the same model on the full batch (gradients and
trained weights; float64 is the oracle, float32 and single-process bf16/fp16 mixed precision are the baselines),
torch's own `fully_shard` (FSDP2, with `MixedPrecisionPolicy`) on the same gloo world, and a flat layout written here
with `F.pad` and `view(p, S)`. In the ranks, a `TorchDispatchMode` sees every `c10d` operation: it counts the
collectives and, by weak references to the all-gather outputs, the gathered bytes alive at each of them."""

import copy
import inspect
import math

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from llm_algo.check import Checks, describe, expect, expect_close, expect_value_error, one_thread
from llm_algo.check.ledger import CommLedger
from llm_algo.distributed import attempted, expect_ranks_ok, expect_ranks_refuse, run_ranks, run_subgroup, world
from llm_algo.distributed.collectives import all_gather_single, reduce_scatter_single
from llm_algo.distributed.subgroup import GROUP_HINT

checks = Checks("p02.fsdp")

P = 2  # one world for the whole lesson
DEADLINE_S = 20.0  # a missing collective on one rank hangs the other: fail in seconds, not minutes
SUBGROUP_DEADLINE_S = 10.0  # on [1, 2] of 3 (warmed up first): a collective on the default group ends here
FORBID = (
    "torch.distributed.all_reduce",
    "torch.distributed.all_gather",
    "torch.distributed.reduce_scatter",
    "torch.distributed.fsdp.fully_shard",
    "torch.distributed.fsdp.FullyShardedDataParallel",
)
INSTEAD = "gather into one flat buffer (all_gather_single) and reduce-scatter (reduce_scatter_single) yourself"
LOW = (torch.bfloat16, torch.float16)


# ------------------------------------------------------------------------------------------ helpers


_WARM: set = set()


def warm_up(size=P):
    """What every rank does once, with a generous deadline: the first autograd pass, dispatch mode and collectives
    of a fresh process (lazy imports and initialisation) take many seconds on a loaded machine, and must not be
    mistaken for a hang by the checks' short deadline."""
    current = world(size)
    key = tuple(process.pid for process in current.processes)
    if key not in _WARM:
        expect_ranks_ok(current.run(_first_steps, deadline=120.0), input=f"starting {size} ranks")
        _WARM.add(key)


def _first_steps():
    layer = nn.Linear(4, 4)
    with CommLedger():
        F.gelu(layer(torch.randn(2, 4))).sum().backward()
        full = torch.empty(4 * dist.get_world_size())
        all_gather_single(full, torch.ones(4))
        reduce_scatter_single(torch.empty(4), full)
        dist.all_reduce(full)


def ranks(ex, fn, *, input, hint, args=(), kwargs=None, rank_args=None):
    """Run `fn` in every rank of the lesson's world; the skeleton's NotImplementedError means not attempted."""
    warm_up()
    results = run_ranks(
        fn, P, args=args, kwargs=kwargs, rank_args=rank_args, forbid=FORBID, instead=INSTEAD, deadline=DEADLINE_S
    )
    not_attempted(ex, results)
    return expect_ranks_ok(results, input=input, hint=hint)


def refused(ex, fn, *, input, hint, args=()):
    warm_up()
    results = run_ranks(fn, P, args=args, forbid=FORBID, instead=INSTEAD, deadline=DEADLINE_S)
    not_attempted(ex, results)
    expect_ranks_refuse(results, (ValueError, TypeError), input=input, hint=hint)


def not_attempted(ex, results) -> None:
    """A NotImplementedError raised in the ranks by the notebook's own code (its last frame is neither torch's nor
    these checks'; a grader names notebook cells `<notebook ...>`, a live kernel `/tmp/ipykernel_*/*.py`): raise it
    again from the notebook's namespace, where the grader recognises the skeleton (the package decides 'not
    attempted' by the raising frame)."""
    for result in results:
        if result.error_type != "NotImplementedError" or not result.traceback:
            continue
        last = result.traceback.strip().split('File "')[-1].split('"')[0]
        if not any(part in last for part in ("site-packages", "/lib/python3", "<frozen", __file__)):
            namespace = inspect.unwrap(ex.flatten_shard).__globals__  # the notebook's, not a checks wrapper's
            exec("raise NotImplementedError(message)", namespace, {"message": result.message})  # noqa: S102


def reference_shards(tensors, world_size):
    """The layout, written independently: flatten, F.pad to p*S, view (p, S): row r is rank r's shard."""
    flat = torch.cat([t.detach().flatten() for t in tensors])
    shard = math.ceil(flat.numel() / world_size)
    return F.pad(flat, (0, world_size * shard - flat.numel())).view(world_size, shard)


class Block(nn.Module):
    """A pre-norm residual MLP: LayerNorm (weight and bias are saved for backward), two linears, GELU."""

    def __init__(self, dim):
        super().__init__()
        self.norm, self.fc1, self.fc2 = nn.LayerNorm(dim), nn.Linear(dim, 2 * dim), nn.Linear(2 * dim, dim)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


def build_model(seed=0, dim=16):
    """Four units of different sizes: 208, 1104, 1104 and 85 parameters (the last one needs padding on 2 ranks)."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(12, dim), Block(dim), Block(dim), nn.Linear(dim, 5))


class Outer(nn.Module):
    """The units one level down, so that state-dict keys carry a prefix: `body.1.fc1.weight`."""

    def __init__(self, body):
        super().__init__()
        self.body = body

    def forward(self, x):
        return self.body(x)


UNIT_NUMELS = [sum(p.numel() for p in child.parameters()) for child in build_model()]
MODEL = "Linear(12,16) | Block(16) | Block(16) | Linear(16,5): 4 units of 208, 1104, 1104, 85 parameters"


def padded_bytes(numel, dtype, world_size=P):
    return world_size * math.ceil(numel / world_size) * torch.empty((), dtype=dtype).element_size()


def gather_full(units, names_shapes, group=None):
    """The checks' own gather of the learner's shards (dist.all_gather is allowed here): {name: full fp32 tensor}."""
    full = {}
    for prefix, (unit, named) in enumerate(zip(units, names_shapes, strict=True)):
        pieces = [torch.empty_like(unit.shard) for _ in range(dist.get_world_size(group))]
        dist.all_gather(pieces, unit.shard.detach().contiguous(), group=group)
        flat = torch.cat(pieces)
        start = 0
        for name, shape in named:
            full[f"{prefix}.{name}"] = flat[start : start + math.prod(shape)].view(shape).clone()
            start += math.prod(shape)
    return full


def wrap(FSDPUnit, compute_dtype, seed=0):
    """The learner's units around the children of the checks' model: (units, [(name, shape), ...] per unit)."""
    children = list(build_model(seed))
    names_shapes = [[(n, p.shape) for n, p in child.named_parameters()] for child in children]
    units = [FSDPUnit(child, compute_dtype=compute_dtype) for child in children]
    return units, names_shapes


def my_rows(x):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    n = x.shape[0] // world_size
    return x[rank * n : (rank + 1) * n]


class Optimizer:
    """SGD with momentum 0.9 (lr 0.1) or AdamW (lr 1e-2, betas 0.9/0.999, weight decay 0.1), elementwise, the same
    code in the ranks and in the single-process references. Written here because torch.optim's first step imports
    Dynamo: seconds of CPU in every fresh rank process."""

    def __init__(self, kind, params):
        self.kind, self.params, self.state, self.steps = kind, list(params), {}, 0

    @torch.no_grad()
    def step(self):
        self.steps += 1
        for p in self.params:
            if p.grad is None:
                continue
            if self.kind == "sgd":
                buffer = self.state.get(p)
                buffer = p.grad.clone() if buffer is None else buffer.mul_(0.9).add_(p.grad)
                self.state[p] = buffer
                p.add_(buffer, alpha=-0.1)
            else:
                m, v = self.state.setdefault(p, (torch.zeros_like(p), torch.zeros_like(p)))
                m.mul_(0.9).add_(p.grad, alpha=0.1)
                v.mul_(0.999).addcmul_(p.grad, p.grad, value=0.001)
                p.mul_(1 - 1e-2 * 0.1)
                denominator = (v / (1 - 0.999**self.steps)).sqrt().add_(1e-8)
                p.addcdiv_(m, denominator, value=-1e-2 / (1 - 0.9**self.steps))

    def zero_grad(self):
        for p in self.params:
            p.grad = None


def make_optimizer(name, params):
    return Optimizer(name, params)


def data(batch=8):
    return torch.randn(batch, 12), torch.randn(batch, 5)


# ------------------------------------------------------------------------------------------ single-process references


def single_process_grads(x, y, dtype, mixed=None):
    """Full-batch gradients, per unit in named_parameters order: float64/float32, or bf16/fp16 compute with fp32
    master weights (mixed=dtype: what one process with autocast-like casting computes)."""
    model = build_model().to(dtype)
    compute = copy.deepcopy(model).to(mixed) if mixed else model
    loss = F.mse_loss(compute(x.to(mixed or dtype)).to(dtype), y.to(dtype))
    loss.backward()
    return loss.detach(), [[p.grad.to(dtype) for p in child.parameters()] for child in compute]


def single_process_training(x, y, dtype, optimizer, steps, mixed=None):
    """{name: parameter} after `steps` steps on the full batch, and the losses."""
    master = build_model().to(dtype)
    opt = make_optimizer(optimizer, master.parameters())
    losses = []
    for _ in range(steps):
        compute = copy.deepcopy(master).to(mixed) if mixed else master
        loss = F.mse_loss(compute(x.to(mixed or dtype)).to(dtype), y.to(dtype))
        loss.backward()
        if mixed:
            for p, q in zip(master.parameters(), compute.parameters(), strict=True):
                p.grad = q.grad.to(dtype)
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach())
    return dict(master.named_parameters()), torch.stack(losses)


# ------------------------------------------------------------------------------------------ flat_shard


@checks("flat_shard")
def hand_checked_layout(ex):
    """a (2, 2) and a (3,) tensor, 7 elements, on 2, 3 and 4 ranks: the shards written out by hand"""
    tensors = [torch.tensor([[1.0, 2.0], [3.0, 4.0]]), torch.tensor([5.0, 6.0, 7.0])]
    expected = {
        2: [[1, 2, 3, 4], [5, 6, 7, 0]],
        3: [[1, 2, 3], [4, 5, 6], [7, 0, 0]],
        4: [[1, 2], [3, 4], [5, 6], [7, 0]],
    }
    for world_size, shards in expected.items():
        for rank, want in enumerate(shards):
            got = ex.flatten_shard(tensors, rank, world_size)
            expect(
                isinstance(got, torch.Tensor) and got.tolist() == [float(v) for v in want],
                "wrong shard",
                input=f"[[1, 2], [3, 4]] and [5, 6, 7], rank {rank} of {world_size}",
                expected=str([float(v) for v in want]),
                got=str(got.tolist() if isinstance(got, torch.Tensor) else got),
                hint="S = ceil(N / p); pad with zeros at the end to p*S; rank r holds [r*S, (r+1)*S)",
            )


@checks("flat_shard")
def random_shapes_dtypes_and_world_sizes(ex):
    """shapes with a 0-d and a size-1 axis, world sizes 1 to 5, float32/bfloat16/float64: the shards of every rank
    put together are the flat parameters, zero-padded to p * ceil(N / p)"""
    cases = [
        ([(5,), (3, 7), ()], torch.float32),
        ([(2, 1, 3), (4,)], torch.bfloat16),
        ([(11,)], torch.float64),
        ([(16, 12), (16,)], torch.float32),
    ]
    for shapes, dtype in cases:
        tensors = [torch.randn(shape).to(dtype) for shape in shapes]
        for world_size in range(1, 6):
            want = reference_shards(tensors, world_size)
            label = f"shapes {shapes}, {str(dtype)[6:]}, world size {world_size}"
            for rank in range(world_size):
                got = ex.flatten_shard(tensors, rank, world_size)
                expect(
                    isinstance(got, torch.Tensor) and got.dtype == dtype and tuple(got.shape) == (want.shape[1],),
                    "wrong shard size or dtype",
                    input=f"{label}, rank {rank}",
                    expected=f"({want.shape[1]},) {dtype}",
                    got=f"{tuple(got.shape)} {got.dtype}" if isinstance(got, torch.Tensor) else repr(got),
                    hint="every rank holds S = ceil(N / p) elements, in the parameters' dtype",
                )
                expect(
                    torch.equal(got, want[rank]),
                    "wrong elements in the shard",
                    input=f"{label}, rank {rank}",
                    expected=str(want[rank][:6].tolist()) + " ...",
                    got=str(got[:6].tolist()) + " ...",
                    hint="flatten in order, zeros only at the very end; rank r starts at r*S (not r*N/p)",
                )


@checks("flat_shard")
def shard_owns_its_memory(ex):
    """the shard is a new, detached tensor of S elements: not a view that keeps the whole padded buffer alive"""
    weight = nn.Parameter(torch.randn(37, 5))
    bias = nn.Parameter(torch.randn(5))
    before = [weight.detach().clone(), bias.detach().clone()]
    for world_size in (2, 3):
        for rank in range(world_size):
            shard = ex.flatten_shard([weight, bias], rank, world_size)
            label = describe(weight=weight, bias=bias) + f", rank {rank} of {world_size}"
            size = shard.numel() * shard.element_size()
            expect(
                shard.untyped_storage().nbytes() == size,
                "the shard is a view into a larger buffer",
                input=label,
                expected=f"a storage of {size} bytes (S elements)",
                got=f"a storage of {shard.untyped_storage().nbytes()} bytes",
                hint="slice the padded buffer, then .clone(): a view keeps all p*S elements alive on every rank",
            )
            expect(
                shard.grad_fn is None and not shard.requires_grad,
                "the shard is attached to autograd",
                input=label,
                expected="a detached tensor (it becomes the unit's nn.Parameter)",
                got=f"requires_grad={shard.requires_grad}, grad_fn={type(shard.grad_fn).__name__}",
                hint="flatten t.detach()",
            )
            shard.add_(1.0)
    expect(
        torch.equal(weight.detach(), before[0]) and torch.equal(bias.detach(), before[1]),
        "writing into a shard changed the parameters",
        input="flatten_shard of (37, 5) and (5,) parameters, shard += 1",
        expected="the parameters untouched",
        got="they changed",
        hint="the shard must be a copy",
    )


@checks("flat_shard")
def unflatten_gives_views_and_gradients(ex):
    """unflatten returns views of the flat buffer (shared storage, no copy) with the shapes in order; the padding is
    ignored; the gradient of every view flows back into one gradient of the buffer (zero on the padding)"""
    shapes = [torch.Size([3, 4]), torch.Size([]), torch.Size([5]), torch.Size([2, 1, 3])]
    numel = sum(math.prod(s) for s in shapes)
    flat = torch.randn(numel + 3, dtype=torch.float64, requires_grad=True)  # 3 elements of padding
    views = ex.unflatten(flat, shapes)
    label = f"flat ({numel + 3},) float64 (3 padding), shapes {[tuple(s) for s in shapes]}"
    expect(
        len(views) == len(shapes) and all(v.shape == s for v, s in zip(views, shapes, strict=True)),
        "wrong number or shapes of tensors",
        input=label,
        expected=str([tuple(s) for s in shapes]),
        got=str([tuple(v.shape) for v in views]),
        hint="split the first N elements at prod(shape) each, then .view(shape)",
    )
    start = 0
    for view, shape in zip(views, shapes, strict=True):
        want = flat.detach()[start : start + math.prod(shape)].view(shape)
        expect(
            torch.equal(view.detach(), want),
            "wrong elements",
            input=f"{label}: the tensor of shape {tuple(shape)} at offset {start}",
            expected=str(want.flatten()[:4].tolist()),
            got=str(view.detach().flatten()[:4].tolist()),
            hint="the parameters are the flat buffer's first N elements, in order",
        )
        expect(
            view.untyped_storage().data_ptr() == flat.untyped_storage().data_ptr(),
            "a copy, not a view",
            input=f"{label}: the tensor of shape {tuple(shape)}",
            expected="a view sharing the flat buffer's storage",
            got="a tensor with its own storage",
            hint="split() and view() make views; cat, clone, reshape of a non-contiguous tensor copy",
        )
        start += math.prod(shape)
    exact = torch.randn(numel)  # no padding at all: exactly N elements
    expect(
        torch.equal(torch.cat([v.flatten() for v in ex.unflatten(exact, shapes)]), exact),
        "a buffer of exactly N elements was not split into the parameters",
        input=f"flat ({numel},) float32 without padding, shapes {[tuple(s) for s in shapes]}",
        expected="the N elements, in order",
        got="something else",
        hint="a buffer may hold exactly N elements (no padding): refuse only fewer than N",
    )
    weights = [torch.randn(s, dtype=torch.float64) for s in shapes]
    sum((v * w).sum() for v, w in zip(views, weights, strict=True)).backward()
    want = torch.cat([w.flatten() for w in weights] + [torch.zeros(3, dtype=torch.float64)])
    expect_close(
        flat.grad,
        want,
        input=label + ", loss = sum(view_i * w_i)",
        what="gradient of the flat buffer",
        hint="the views must be differentiable views of flat (no .detach(), no .data)",
    )


@checks("flat_shard")
def bad_input_refused(ex):
    """an empty list, a rank outside [0, p), p = 0, mixed dtypes, a flat buffer that is too short or not 1-D"""
    a, b = torch.randn(3), torch.randn(2, 2)
    expect_value_error(lambda: ex.flatten_shard([], 0, 2), "no tensors", "an empty unit has nothing to shard")
    expect_value_error(lambda: ex.flatten_shard([a, b], 2, 2), "rank 2 of 2", "a rank must be in [0, world_size)")
    expect_value_error(lambda: ex.flatten_shard([a, b], -1, 2), "rank -1 of 2", "a rank must be in [0, world_size)")
    expect_value_error(lambda: ex.flatten_shard([a, b], 0, 0), "world size 0", "a world has at least one rank")
    try:
        ex.flatten_shard([a, b.double()], 0, 2)
    except TypeError:
        pass
    except NotImplementedError:
        raise
    except Exception as exc:  # noqa: BLE001
        expect(
            False,
            "raised the wrong error",
            input="float32 and float64 tensors",
            expected="TypeError",
            got=repr(exc)[:120],
            hint="one flat buffer has one dtype: raise TypeError",
        )
    else:
        expect(
            False,
            "accepted mixed dtypes",
            input="float32 and float64 tensors",
            expected="TypeError",
            got="a shard",
            hint="one flat buffer has one dtype: raise TypeError",
        )
    shapes = [torch.Size([3]), torch.Size([2, 2])]
    expect_value_error(
        lambda: ex.unflatten(torch.randn(6), shapes), "flat (6,) for 7 elements", "refuse a short buffer"
    )
    expect_value_error(lambda: ex.unflatten(torch.randn(2, 4), shapes), "flat (2, 4)", "the flat buffer is 1-D")


# ------------------------------------------------------------------------------------------ all_gather_shard


def rank_all_gather(AllGatherShard, shards, compute_dtype, grads):
    """Gather this rank's shard, backward with this rank's upstream gradient: (output, shard grad, events)."""
    rank = dist.get_rank()
    shard = nn.Parameter(shards[rank].clone())
    with CommLedger() as forward_ledger:
        full = AllGatherShard.apply(shard, compute_dtype)
    with CommLedger() as backward_ledger:
        full.backward(grads[rank])
    return full.detach(), shard.grad, forward_ledger.events, backward_ledger.events


def rank_all_gather_strided(AllGatherShard, shards, grads):
    """A shard that is a column of a (S, 2) tensor and an upstream gradient that is a column of a (p*S, 3) one:
    neither is contiguous (as a slice of a larger buffer is not)."""
    rank = dist.get_rank()
    storage = torch.zeros(shards[rank].numel(), 2)
    storage[:, 0] = shards[rank]
    storage.requires_grad_()
    full = AllGatherShard.apply(storage[:, 0], torch.float32)
    upstream = torch.zeros(full.numel(), 3)
    upstream[:, 1] = grads[rank]
    full.backward(upstream[:, 1])
    return full.detach(), storage.grad[:, 0]


def rank_all_gather_own_group(AllGatherShard, shards, grads):
    """Every rank alone in a group of its own: gather and reduce-scatter over that group only."""
    rank = dist.get_rank()
    groups = [dist.new_group([r]) for r in range(dist.get_world_size())]
    shard = nn.Parameter(shards[rank].clone())
    full = AllGatherShard.apply(shard, torch.float32, groups[rank])
    full.backward(grads[rank])
    return full.detach(), shard.grad


def rank_all_gather_on_group(AllGatherShard, shards, grads, group=None):
    """A member of `group`: gather the members' shards, backward with this member's upstream gradient."""
    rank = dist.get_rank(group)
    shard = nn.Parameter(shards[rank].clone())
    full = AllGatherShard.apply(shard, torch.float32, group)
    full.backward(grads[rank])
    return full.detach(), shard.grad


def rank_all_gather_bad(AllGatherShard, case):
    shard = {"2-D": torch.randn(3, 4), "int64": torch.arange(6), "int dtype": torch.randn(6)}[case]
    dtype = torch.int32 if case == "int dtype" else torch.float32
    AllGatherShard.apply(nn.Parameter(shard) if shard.is_floating_point() else shard, dtype)


@checks("all_gather_shard")
def forward_gathers_every_shard(ex):
    """7-element shards, different on each rank: the output is every shard in rank order, in the compute dtype
    (float32, bfloat16, float16)"""
    shards = [torch.randn(7) for _ in range(P)]
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        grads = [torch.randn(7 * P).to(dtype) for _ in range(P)]
        per_rank = ranks(
            ex,
            rank_all_gather,
            args=(ex.AllGatherShard, shards, dtype, grads),
            input=f"{P} ranks, shards (7,) float32, compute {str(dtype)[6:]}",
            hint="cast the shard to compute_dtype, then all_gather_single into a (p*S,) buffer",
        )
        want = torch.cat(shards).to(dtype)
        for rank, (full, *_rest) in enumerate(per_rank):
            label = f"rank {rank} of {P}, shards (7,) float32, compute {str(dtype)[6:]}"
            expect(
                full.dtype == dtype and full.shape == want.shape,
                "wrong dtype or shape",
                input=label,
                expected=f"{tuple(want.shape)} {dtype}",
                got=f"{tuple(full.shape)} {full.dtype}",
                hint="one flat buffer of world_size * S elements in the compute dtype",
            )
            expect(
                torch.equal(full, want),
                "the gathered buffer is not every rank's shard in rank order",
                input=label,
                expected=str(want[:9].tolist()),
                got=str(full[:9].tolist()),
                hint="all_gather_single(out, shard) puts rank r's shard at [r*S, (r+1)*S)",
            )


@checks("all_gather_shard")
def backward_is_a_mean_reduce_scatter_in_fp32(ex):
    """backward: each rank gets (1/p) * sum over ranks of the upstream gradients' slice of its own shard, computed in
    float32 even when they are bfloat16 or float16, returned in the shard's dtype"""
    shards = [torch.randn(9) for _ in range(P)]
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        grads = [(torch.randn(9 * P) * 3).to(dtype) for _ in range(P)]
        per_rank = ranks(
            ex,
            rank_all_gather,
            args=(ex.AllGatherShard, shards, dtype, grads),
            input=f"{P} ranks, shards (9,) float32, compute {str(dtype)[6:]}",
            hint="upcast to float32, reduce_scatter_single, divide by the world size",
        )
        total = sum(g.double() for g in grads) / P  # float64: the sum of the low-precision values, exactly
        for rank, (_, grad, *_rest) in enumerate(per_rank):
            label = f"rank {rank} of {P}, upstream gradients (18,) {str(dtype)[6:]}"
            expect(
                grad is not None and grad.dtype == torch.float32 and grad.shape == (9,),
                "the shard's gradient has the wrong dtype or shape",
                input=label,
                expected="(9,) torch.float32",
                got="None" if grad is None else f"{tuple(grad.shape)} {grad.dtype}",
                hint="return the gradient of the shard: S elements, in the shard's dtype",
            )
            expect_close(
                grad,
                total[rank * 9 : (rank + 1) * 9],
                input=label,
                what="gradient of the shard",
                hint="sum over ranks (reduce-scatter) in float32, then divide by world_size: the loss is the mean",
            )


@checks("all_gather_shard")
def one_gather_and_one_reduce_scatter(ex):
    """forward is one all-gather of p*S elements in the compute dtype; backward is one reduce-scatter of p*S float32
    elements; nothing else (an all-reduce would move twice the bytes)"""
    shards = [torch.randn(5) for _ in range(P)]
    grads = [torch.randn(5 * P).to(torch.bfloat16) for _ in range(P)]
    per_rank = ranks(
        ex,
        rank_all_gather,
        args=(ex.AllGatherShard, shards, torch.bfloat16, grads),
        input=f"{P} ranks, shards (5,) float32, compute bfloat16",
        hint="one all_gather_single in forward, one reduce_scatter_single in backward",
    )
    for rank, (_, _, forward_events, backward_events) in enumerate(per_rank):
        label = f"rank {rank} of {P}, shards (5,) float32, compute bfloat16"
        expect(
            forward_events == [("allgather", 5 * P, "bfloat16")],
            "forward should be one all-gather of the bfloat16 buffer",
            input=label,
            expected=f"[('allgather', {5 * P} elements, 'bfloat16')]",
            got=str(forward_events),
            hint="cast the shard to the compute dtype before gathering: half the bytes of a float32 gather",
        )
        expect(
            backward_events == [("reduce_scatter", 5 * P, "float32")],
            "backward should be one reduce-scatter of the float32 gradient",
            input=label,
            expected=f"[('reduce_scatter', {5 * P} elements, 'float32')]",
            got=str(backward_events),
            hint="upcast the gradient to float32, then one reduce_scatter_single (not an all-reduce and a slice)",
        )


@checks("all_gather_shard")
def strided_shard_and_gradient(ex):
    """a shard and an upstream gradient that are strided views (columns of larger tensors), compute float32: the
    collectives need contiguous buffers, and .to(float32) of a float32 tensor is the tensor itself"""
    shards = [torch.randn(6) for _ in range(P)]
    grads = [torch.randn(6 * P) for _ in range(P)]
    per_rank = ranks(
        ex,
        rank_all_gather_strided,
        args=(ex.AllGatherShard, shards, grads),
        input=f"{P} ranks, shard = column of a (6, 2) tensor, gradient = column of a (12, 3) tensor, float32",
        hint="make the collectives' inputs contiguous (.contiguous()): a cast to the same dtype copies nothing",
    )
    want_full = torch.cat(shards)
    for rank, (full, grad) in enumerate(per_rank):
        label = f"rank {rank} of {P}, strided (6,) shard and (12,) gradient, float32"
        expect_close(full, want_full, input=label, what="gathered buffer")
        expect_close(
            grad,
            (sum(g.double() for g in grads) / P)[rank * 6 : (rank + 1) * 6],
            input=label,
            what="gradient of the shard",
        )


@checks("all_gather_shard")
def group_of_one(ex):
    """group= a process group holding only this rank: the gathered buffer is this rank's shard alone and the
    gradient is its own upstream gradient (a world of one has nothing to add or average)"""
    shards = [torch.randn(5) for _ in range(P)]
    grads = [torch.randn(5) for _ in range(P)]
    per_rank = ranks(
        ex,
        rank_all_gather_own_group,
        args=(ex.AllGatherShard, shards, grads),
        input=f"{P} ranks, each in its own group of 1, shards (5,) float32",
        hint="pass group= to both collectives and take the world size from the group",
    )
    for rank, (full, grad) in enumerate(per_rank):
        label = f"rank {rank} alone in its group, shard (5,) float32"
        expect_close(
            full, shards[rank], input=label, what="gathered buffer", hint="all_gather_single(..., group=group)"
        )
        expect_close(
            grad,
            grads[rank],
            input=label,
            what="gradient of the shard",
            hint="reduce_scatter_single(..., group=ctx.group)",
        )


@checks("all_gather_shard")
def all_gather_bad_input_refused(ex):
    """a 2-D shard (ValueError), an integer shard or an integer compute dtype (TypeError), on every rank, before
    any collective"""
    for case in ("2-D", "int64", "int dtype"):
        refused(
            ex,
            rank_all_gather_bad,
            args=(ex.AllGatherShard, case),
            input=f"{P} ranks, {case} shard" if case != "int dtype" else f"{P} ranks, compute dtype int32",
            hint="validate in forward before the all-gather: a shard is 1-D and floating, so is the compute dtype",
        )


# ------------------------------------------------------------------------------------------ fsdp_unit


def rank_gradients(FSDPUnit, x, y, compute_dtype):
    units, _ = wrap(FSDPUnit, compute_dtype)
    out = nn.Sequential(*units)(my_rows(x))
    loss = F.mse_loss(out.float(), my_rows(y))
    loss.backward()
    return loss.detach(), out.dtype, [(u.shard.dtype, u.shard.grad) for u in units]


def rank_own_group(FSDPUnit, x, y):
    """Every rank alone in a process group of its own: the units must take rank and size from `group`."""
    groups = [dist.new_group([r]) for r in range(dist.get_world_size())]  # every rank creates every group
    children = list(build_model())
    units = [FSDPUnit(child, group=groups[dist.get_rank()]) for child in children]
    loss = F.mse_loss(nn.Sequential(*units)(my_rows(x)), my_rows(y))
    loss.backward()
    return [(u.shard.numel(), u.shard.grad) for u in units]


def rank_training(FSDPUnit, x, y, compute_dtype, optimizer, steps):
    units, names_shapes = wrap(FSDPUnit, compute_dtype)
    model = nn.Sequential(*units)
    opt = make_optimizer(optimizer, model.parameters())
    losses = []
    for _ in range(steps):
        loss = F.mse_loss(model(my_rows(x)).float(), my_rows(y))
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach())
    losses = torch.stack(losses)
    dist.all_reduce(losses)  # the checks' own: the mean over ranks is the full-batch loss
    full = gather_full(units, names_shapes)
    return (losses / dist.get_world_size(), full) if dist.get_rank() == 0 else None


def rank_fully_shard(x, y, compute_dtype, optimizer, steps):
    """The same run with torch's FSDP2: a unit per child, the root too, bf16/fp16 params and fp32 reduction."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    # the world's own device: on a machine with a GPU, fully_shard's default mesh would move a CPU model to cuda:0
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))

    model = build_model()
    policy = MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32)
    for child in model:
        fully_shard(child, mp_policy=policy, mesh=mesh)
    fully_shard(model, mp_policy=policy, mesh=mesh)
    opt = make_optimizer(optimizer, model.parameters())
    losses = []
    for _ in range(steps):
        loss = F.mse_loss(model(my_rows(x)).float(), my_rows(y))
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach())
    losses = torch.stack(losses)
    dist.all_reduce(losses)
    full = {k: v.full_tensor() for k, v in model.state_dict().items()}
    return (losses / dist.get_world_size(), full) if dist.get_rank() == 0 else None


def rank_memory(FSDPUnit, x, y, compute_dtype, steps):
    units, _ = wrap(FSDPUnit, compute_dtype)
    model = nn.Sequential(*units)
    opt = make_optimizer("adamw", model.parameters())
    held = [[(tuple(p.shape), p.dtype, isinstance(p, nn.Parameter)) for p in u.parameters()] for u in units]
    per_step = []
    for _ in range(steps):
        with CommLedger() as forward_ledger:
            out = model(my_rows(x))
        with CommLedger() as backward_ledger:
            F.mse_loss(out.float(), my_rows(y)).backward()
        del out
        peak = max(forward_ledger.peak, backward_ledger.peak)
        opt.step()
        opt.zero_grad()
        per_step.append(
            (
                forward_ledger.count("allgather"),
                backward_ledger.count("allgather"),
                backward_ledger.count("reduce_scatter"),
                forward_ledger.count("reduce_scatter") + backward_ledger.count("allreduce"),
                peak,
                backward_ledger.alive(),
            )
        )
    return held, per_step


def rank_inference(FSDPUnit, x):
    units, _ = wrap(FSDPUnit, torch.float32)
    with torch.no_grad(), CommLedger() as ledger:
        out = nn.Sequential(*units)(x)
    return out, ledger.count("allgather"), ledger.peak, ledger.alive()


def rank_unit_bad(FSDPUnit, case):
    if case == "int compute dtype":
        FSDPUnit(nn.Linear(4, 4), compute_dtype=torch.int8)
    elif case == "no parameters":
        FSDPUnit(nn.GELU())
    elif case == "nested unit":
        inner = FSDPUnit(nn.Linear(4, 4))
        FSDPUnit(nn.Sequential(inner, nn.Linear(4, 4)))
    elif case == "float64 parameters":
        FSDPUnit(nn.Linear(4, 4).double())


class BlockWithUnused(Block):
    """Block with a parameter its forward never uses: no gradient reaches it."""

    def __init__(self, dim):
        super().__init__(dim)
        self.unused = nn.Parameter(torch.randn(3))


class ScaledHead(nn.Module):
    """Linear(dim, 5) times a frozen (5,) scale: a frozen parameter inside a unit, after the trainable ones."""

    def __init__(self, dim):
        super().__init__()
        self.linear = nn.Linear(dim, 5)
        self.scale = nn.Parameter(torch.rand(5) + 0.5, requires_grad=False)

    def forward(self, x):
        return self.linear(x) * self.scale


def build_model_with_unused(seed=0, dim=16):
    """Three units: 208 parameters, 1107 (a Block and its unused (3,)), 85 trainable and a frozen (5,) scale."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(12, dim), BlockWithUnused(dim), ScaledHead(dim))


def trainable(module):
    return [(name, p) for name, p in module.named_parameters() if p.requires_grad]


def rank_training_on_group(FSDPUnit, x, y, steps, group=None):
    """A member of `group`: units around the model's children, SGD with momentum on this member's rows; the trained
    trainable weights (the checks' own gather over the group), the frozen scale as the last unit's forward applies it
    (least squares of its output on its linear part's) and the size of each unit's shard."""
    rank, size = dist.get_rank(group), dist.get_world_size(group)
    children = list(build_model_with_unused())
    names_shapes = [[(n, p.shape) for n, p in trainable(child)] for child in children]
    units = [FSDPUnit(child, group=group) for child in children]
    model = nn.Sequential(*units)
    opt = make_optimizer("sgd", model.parameters())  # every parameter: the optimizer skips those without .grad
    rows = slice(rank * (x.shape[0] // size), (rank + 1) * (x.shape[0] // size))
    for _ in range(steps):
        F.mse_loss(model(x[rows]), y[rows]).backward()
        opt.step()
        opt.zero_grad()
    full = gather_full(units, names_shapes, group)
    with torch.no_grad():
        h = torch.randn(64, 16)
        out, linear = units[2](h), F.linear(h, full["2.linear.weight"], full["2.linear.bias"])
        scale = (out * linear).sum(0) / (linear * linear).sum(0)  # least squares per output: out = linear * scale
    frozen_weight, h = linear_with_frozen_weight()
    bf16 = FSDPUnit(frozen_weight, compute_dtype=torch.bfloat16, group=group)(h)
    return full, scale, [unit.shard.numel() for unit in units], bf16


def linear_with_frozen_weight():
    """Linear(16, 4) whose weight is frozen (its bias trains), and an input (8, 16)."""
    torch.manual_seed(5)
    linear = nn.Linear(16, 4)
    linear.weight.requires_grad_(False)
    return linear, torch.randn(8, 16)


def single_process_training_with_unused(x, y, dtype, steps):
    model = build_model_with_unused().to(dtype)
    opt = make_optimizer("sgd", model.parameters())
    for _ in range(steps):
        F.mse_loss(model(x.to(dtype)), y.to(dtype)).backward()
        opt.step()
        opt.zero_grad()
    return {name: p.detach() for name, p in trainable(model)}


def shard_of(tensors, rank):
    return reference_shards(tensors, P)[rank]


@checks("fsdp_unit")
@one_thread()
def gradients_match_single_process(ex):
    """one forward/backward, each rank on half of a batch of 8: every shard's .grad is its slice of the full-batch
    gradient (float32, and bf16/fp16 compute within 4x single-process mixed precision's error)"""
    x, y = data()
    loss64, grads64 = single_process_grads(x, y, torch.float64)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        per_rank = ranks(
            ex,
            rank_gradients,
            args=(ex.FSDPUnit, x, y, dtype),
            input=f"{P} ranks, {MODEL}, compute {str(dtype)[6:]}",
            hint="forward: all-gather, views, functional_call; backward: reduce-scatter of the mean gradient",
        )
        if dtype == torch.float32:
            _, baseline = single_process_grads(x, y, torch.float32)
        else:
            _, baseline = single_process_grads(x, y, torch.float32, mixed=dtype)
        for rank, (_loss, out_dtype, shards) in enumerate(per_rank):
            label = f"rank {rank} of {P}, {MODEL}, batch 8 split in 2, compute {str(dtype)[6:]}"
            expect(
                out_dtype == dtype,
                "the unit's output is not in the compute dtype",
                input=label,
                expected=str(dtype),
                got=str(out_dtype),
                hint="cast floating-point inputs to the compute dtype; the module runs on the gathered parameters",
            )
            for unit, ((shard_dtype, grad), want, base) in enumerate(zip(shards, grads64, baseline, strict=True)):
                expect(
                    shard_dtype == torch.float32 and grad is not None and grad.dtype == torch.float32,
                    "the master shard or its gradient is not float32",
                    input=f"{label}, unit {unit}",
                    expected="shard float32 with a float32 .grad",
                    got=f"shard {shard_dtype}, grad {None if grad is None else grad.dtype}",
                    hint="the shard is an fp32 nn.Parameter; AllGatherShard returns the gradient in its dtype",
                )
                expect_close(
                    grad,
                    shard_of(want, rank),
                    baseline=shard_of(base, rank),
                    dtype=dtype,
                    input=f"{label}, unit {unit} ({UNIT_NUMELS[unit]} parameters)",
                    what="shard gradient",
                    hint="gradient = (1/p) * sum over ranks of the gathered buffer's gradient, sliced at [r*S, (r+1)*S)",
                )


@checks("fsdp_unit")
@one_thread()
def process_group_of_one(ex):
    """group= a process group holding only this rank (so each of the 2 ranks trains alone): every shard is the whole
    unit and its gradient is this rank's own half-batch gradient; rank, size and collectives all follow `group`"""
    x, y = data()
    per_rank = ranks(
        ex,
        rank_own_group,
        args=(ex.FSDPUnit, x, y),
        input=f"{P} ranks, each in its own group of 1, {MODEL}",
        hint="dist.get_rank(group), dist.get_world_size(group), and group=group in every collective",
    )
    for rank, units in enumerate(per_rank):
        rows = slice(rank * 4, (rank + 1) * 4)
        _, want = single_process_grads(x[rows], y[rows], torch.float64)
        _, base = single_process_grads(x[rows], y[rows], torch.float32)
        label = f"rank {rank} alone in its group, {MODEL}, its 4 rows of the batch"
        for unit, ((numel, grad), numel_want, w, b) in enumerate(zip(units, UNIT_NUMELS, want, base, strict=True)):
            expect(
                numel == numel_want,
                "the shard is not the whole unit in a group of one rank",
                input=f"{label}, unit {unit}",
                expected=f"{numel_want} elements (S = N / 1)",
                got=f"{numel} elements",
                hint="the world size of the unit is dist.get_world_size(group), not the size of the whole world",
            )
            expect_close(
                grad,
                reference_shards(w, 1)[0],
                baseline=reference_shards(b, 1)[0],
                input=f"{label}, unit {unit}",
                what="shard gradient",
                hint="a group of one rank has nothing to average with: pass group=group to both collectives",
            )


@checks("fsdp_unit")
@one_thread()
def training_matches_single_process(ex):
    """3 AdamW steps in float32 and 3 SGD-momentum steps with bf16 compute: the trained weights and the losses of the
    2 ranks equal full-batch training in one process (float64 oracle; float32 / single-process mixed precision
    baselines)"""
    x, y = data()
    for dtype, optimizer in ((torch.float32, "adamw"), (torch.bfloat16, "sgd")):
        losses, full = ranks(
            ex,
            rank_training,
            args=(ex.FSDPUnit, x, y, dtype, optimizer, 3),
            input=f"{P} ranks, {MODEL}, compute {str(dtype)[6:]}, 3 {optimizer} steps",
            hint="the optimizer steps the fp32 shards; forward and backward must see the current shards",
        )[0]
        want, want_losses = single_process_training(x, y, torch.float64, optimizer, 3)
        if dtype == torch.float32:
            base, base_losses = single_process_training(x, y, torch.float32, optimizer, 3)
        else:
            base, base_losses = single_process_training(x, y, torch.float32, optimizer, 3, mixed=dtype)
        label = f"{P} ranks, {MODEL}, compute {str(dtype)[6:]}, 3 {optimizer} steps"
        expect_close(losses, want_losses, baseline=base_losses, dtype=dtype, input=label, what="losses (mean of ranks)")
        for name, tensor in want.items():
            expect_close(
                full[name],
                tensor,
                baseline=base[name],
                dtype=dtype,
                input=f"{label}: {name}",
                what=f"{name} after 3 steps",
                hint="free the re-gathered buffer after backward, or the next step computes with stale weights",
            )


@checks("fsdp_unit")
@one_thread()
def matches_torch_fully_shard(ex):
    """second oracle: torch's fully_shard (FSDP2, MixedPrecisionPolicy(param_dtype, reduce_dtype=float32)) on the
    same gloo world: the same losses and weights after 3 AdamW steps (float32) and 3 SGD steps (bfloat16 compute)"""
    x, y = data()
    for dtype, optimizer in ((torch.float32, "adamw"), (torch.bfloat16, "sgd")):
        label = f"{P} ranks, {MODEL}, compute {str(dtype)[6:]}, 3 {optimizer} steps"
        mine_losses, mine = ranks(
            ex, rank_training, args=(ex.FSDPUnit, x, y, dtype, optimizer, 3), input=label, hint=""
        )[0]
        theirs_losses, theirs = expect_ranks_ok(
            run_ranks(rank_fully_shard, P, args=(x, y, dtype, optimizer, 3), deadline=60.0), input=label + " (FSDP2)"
        )[0]
        expect_close(mine_losses, theirs_losses, dtype=torch.float32, input=label, what="losses, against fully_shard")
        for name, tensor in theirs.items():
            expect_close(
                mine[name],
                tensor,
                dtype=torch.float32 if dtype == torch.float32 else dtype,
                input=f"{label}: {name}",
                what=f"{name}, against fully_shard",
                hint="fully_shard casts the shard to param_dtype before the gather and reduces in float32",
            )


@checks("fsdp_unit")
def memory_one_unit_gathered_at_a_time(ex):
    """each unit's only parameter is its fp32 shard of ceil(N/p); during a step at most one unit's gathered buffer
    is alive (counted at every collective), none after it; per step one all-gather per unit in forward, at most one
    in backward, one reduce-scatter per unit"""
    x, y = data()
    for dtype in (torch.float32, torch.bfloat16):
        per_rank = ranks(
            ex,
            rank_memory,
            args=(ex.FSDPUnit, x, y, dtype, 2),
            input=f"{P} ranks, {MODEL}, compute {str(dtype)[6:]}, 2 AdamW steps",
            hint="the shard is the unit's only parameter; the gathered buffer is freed after forward and after backward",
        )
        limit = max(padded_bytes(n, dtype) for n in UNIT_NUMELS)
        units = len(UNIT_NUMELS)
        for rank, (held, per_step) in enumerate(per_rank):
            label = f"rank {rank} of {P}, {MODEL}, compute {str(dtype)[6:]}"
            for unit, (params, numel) in enumerate(zip(held, UNIT_NUMELS, strict=True)):
                want = [((math.ceil(numel / P),), torch.float32, True)]
                expect(
                    params == want,
                    "the unit holds more than its fp32 shard",
                    input=f"{label}, unit {unit} ({numel} parameters)",
                    expected=f"one nn.Parameter of shape ({math.ceil(numel / P)},) float32",
                    got=str([(shape, str(dt)[6:]) for shape, dt, _ in params]),
                    hint="set the module's own parameters to None: only the shard may stay on this rank",
                )
            for step, (forward_ag, backward_ag, rs, other, peak, left) in enumerate(per_step, start=1):
                expect(
                    forward_ag == units and rs == units and backward_ag <= units and other == 0,
                    "wrong number of collectives",
                    input=f"{label}, step {step}",
                    expected=f"forward {units} all-gathers; backward <= {units} all-gathers and {units} reduce-scatters",
                    got=f"forward {forward_ag} all-gathers; backward {backward_ag} all-gathers, {rs} reduce-scatters"
                    + (f", {other} other reductions" if other else ""),
                    hint="re-gather at most once per unit in backward: keep the buffer until the unit's backward ends",
                )
                expect(
                    peak <= limit,
                    "more than one unit's parameters gathered at once",
                    input=f"{label}, step {step}",
                    expected=f"at most {limit} bytes of gathered buffers alive (the largest unit, padded)",
                    got=f"{peak} bytes alive at one collective",
                    hint="after forward nothing may reference the buffer: save parameters for backward as SavedParameter"
                    " (saved_tensors_hooks), keep no reference on self, free the re-gathered buffer after backward",
                )
                expect(
                    left == 0,
                    "a gathered buffer is still alive after backward",
                    input=f"{label}, step {step}",
                    expected="0 bytes",
                    got=f"{left} bytes",
                    hint="drop the re-gathered buffer in the hook on the gathered buffer's gradient",
                )


@checks("fsdp_unit")
@one_thread()
def inference_under_no_grad(ex):
    """under torch.no_grad (evaluation): the full batch gives the single-process logits, one all-gather per unit and
    nothing kept (no graph: no hook can be registered on the buffer)"""
    x, _ = data(6)
    per_rank = ranks(
        ex,
        rank_inference,
        args=(ex.FSDPUnit, x),
        input=f"{P} ranks, {MODEL}, x (6, 12), torch.no_grad()",
        hint="flat.register_hook only when flat.requires_grad",
    )
    with torch.no_grad():
        want = build_model().double()(x.double())
        base = build_model()(x)
    limit = max(padded_bytes(n, torch.float32) for n in UNIT_NUMELS)
    for rank, (out, gathers, peak, left) in enumerate(per_rank):
        label = f"rank {rank} of {P}, {MODEL}, x (6, 12) float32, no_grad"
        expect_close(out, want, baseline=base, input=label, what="logits")
        expect(
            gathers == len(UNIT_NUMELS) and peak <= limit and left == 0,
            "gathered more than one unit at a time, or kept a buffer",
            input=label,
            expected=f"{len(UNIT_NUMELS)} all-gathers, at most {limit} bytes alive, none after",
            got=f"{gathers} all-gathers, {peak} bytes at most, {left} after",
            hint="the same forward as in training: gather, compute, let the buffer go",
        )


@checks("fsdp_unit")
def unit_bad_input_refused(ex):
    """an integer compute dtype or float64 parameters (TypeError), a module without parameters or one that already
    contains an FSDPUnit (ValueError): refused on every rank before any collective"""
    for case in ("int compute dtype", "no parameters", "nested unit", "float64 parameters"):
        refused(
            ex,
            rank_unit_bad,
            args=(ex.FSDPUnit, case),
            input=f"{P} ranks, {case}",
            hint="validate in __init__ before sharding; float32 masters, a floating compute dtype, no nested units",
        )


# ------------------------------------------------------------------------------------------ full_state_dict


def rank_state_dict(FSDPUnit, full_state_dict, compute_dtype, noise, outer):
    """Wrap, move every shard by this rank's slice of `noise` (so the dict must read the current shards), then call
    full_state_dict under the ledger."""
    units, names_shapes = wrap(FSDPUnit, compute_dtype)
    rank = dist.get_rank()
    with torch.no_grad():
        for unit, extra in zip(units, noise, strict=True):
            unit.shard.add_(reference_shards([extra], dist.get_world_size())[rank])
    model = Outer(nn.Sequential(*units)) if outer else nn.Sequential(*units)
    with CommLedger() as ledger:
        state = full_state_dict(model)
    storages = {k: (v.untyped_storage().nbytes(), v.is_contiguous(), str(v.device)) for k, v in state.items()}
    return state, storages, ledger.peak, ledger.alive()


def expected_state(noise, prefix=""):
    model = build_model()
    want = {}
    for index, (child, extra) in enumerate(zip(model, noise, strict=True)):
        flat = torch.cat([p.detach().flatten() for p in child.parameters()]) + extra
        start = 0
        for name, p in child.named_parameters():
            want[f"{prefix}{index}.{name}"] = flat[start : start + p.numel()].view(p.shape)
            start += p.numel()
    return want


@checks("full_state_dict")
def rank0_gets_the_current_weights(ex):
    """every shard moved by a known amount: rank 0 returns every parameter of the model, exactly the current
    masters, under its own names; the other ranks return {}"""
    noise = [torch.randn(n) for n in UNIT_NUMELS]
    per_rank = ranks(
        ex,
        rank_state_dict,
        args=(ex.FSDPUnit, ex.full_state_dict, torch.float32, noise, False),
        input=f"{P} ranks, {MODEL}",
        hint="gather each unit's shards, cut the padding, unflatten; only rank 0 keeps the result",
    )
    want = expected_state(noise)
    state = per_rank[0][0]
    label = f"{P} ranks, {MODEL}, shards moved after wrapping"
    expect(
        isinstance(state, dict) and sorted(state) == sorted(want),
        "wrong keys on rank 0",
        input=label,
        expected=str(sorted(want)[:5]) + " ...",
        got=str(sorted(state)[:5]) + " ..." if isinstance(state, dict) else repr(state)[:100],
        hint="key = the unit's path + '.' + the parameter's name inside the unit (no wrapper name)",
    )
    for name, tensor in want.items():
        got = state[name]
        expect(
            got.shape == tensor.shape and got.dtype == torch.float32 and torch.equal(got, tensor),
            "a parameter differs from the current master weights",
            input=f"{label}: {name}",
            expected=f"{tuple(tensor.shape)} float32, {tensor.flatten()[:3].tolist()}",
            got=f"{tuple(got.shape)} {got.dtype}, {got.flatten()[:3].tolist()}",
            hint="gather the fp32 shards in rank order; the first N elements, split in order, are the parameters",
        )
    for rank, (other, *_rest) in enumerate(per_rank[1:], start=1):
        expect(
            other == {},
            "a rank other than 0 returned parameters",
            input=f"{label}, rank {rank}",
            expected="{} (only rank 0 holds the full model)",
            got=f"{len(other)} entries",
            hint="return the dict on rank 0 only: the others would each hold a copy of the whole model",
        )


@checks("full_state_dict")
def loads_into_the_unwrapped_model(ex):
    """units under a parent module, computing in bfloat16: the dict loads with strict=True into the unwrapped model,
    every tensor float32 (the master, not the bf16 copy), on the CPU, contiguous, owning its storage"""
    noise = [torch.randn(n) * 1e-3 for n in UNIT_NUMELS]  # small moves: a bf16 copy would round them away
    per_rank = ranks(
        ex,
        rank_state_dict,
        args=(ex.FSDPUnit, ex.full_state_dict, torch.bfloat16, noise, True),
        input=f"{P} ranks, Outer(body={MODEL}), compute bfloat16",
        hint="gather the fp32 master shards (unit.shard), not a compute-dtype copy",
    )
    state, storages, *_ = per_rank[0]
    want = expected_state(noise, prefix="body.")
    plain = Outer(build_model())
    try:
        plain.load_state_dict(state, strict=True)
    except (RuntimeError, KeyError) as exc:
        expect(
            False,
            "the dict does not load into the unwrapped model",
            input="Outer(build_model()).load_state_dict(state, strict=True)",
            expected="every key of the plain model, nothing else",
            got=str(exc).splitlines()[0][:200],
            hint="prefix each parameter with the unit's path (body.1.fc1.weight), without the unit's own attribute",
        )
    for name, tensor in want.items():
        nbytes, contiguous, device = storages[name]
        got = state[name]
        expect(
            got.dtype == torch.float32 and torch.equal(got, tensor),
            "not the fp32 master weights",
            input=f"compute bfloat16: {name}",
            expected=f"float32 {tensor.flatten()[:3].tolist()}",
            got=f"{got.dtype} {got.float().flatten()[:3].tolist()}",
            hint="the checkpoint holds what AdamW updates: the float32 shards, gathered as they are",
        )
        expect(
            device == "cpu" and contiguous and nbytes == tensor.numel() * 4,
            "the tensor is not a compact CPU copy",
            input=f"compute bfloat16: {name}",
            expected=f"on the CPU, contiguous, a storage of {tensor.numel() * 4} bytes",
            got=f"on {device}, contiguous={contiguous}, a storage of {nbytes} bytes",
            hint="copy each view to the CPU (.to('cpu', copy=True) or .clone().cpu()): a view drags the unit's buffer",
        )


@checks("full_state_dict")
def one_unit_at_a_time(ex):
    """while the dict is built, at most one unit's gathered fp32 buffer is alive on each rank (counted at every
    collective), and none once it is returned"""
    noise = [torch.zeros(n) for n in UNIT_NUMELS]
    per_rank = ranks(
        ex,
        rank_state_dict,
        args=(ex.FSDPUnit, ex.full_state_dict, torch.float32, noise, False),
        input=f"{P} ranks, {MODEL}",
        hint="gather, copy out, and drop the buffer before the next unit",
    )
    limit = max(padded_bytes(n, torch.float32) for n in UNIT_NUMELS)
    for rank, (_, _, peak, left) in enumerate(per_rank):
        expect(
            peak <= limit and left == 0,
            "more than one unit gathered at once, or a buffer kept",
            input=f"rank {rank} of {P}, {MODEL}",
            expected=f"at most {limit} bytes of gathered buffers alive, 0 after",
            got=f"{peak} bytes at most, {left} after",
            hint="one unit at a time: the copies on the CPU are what the dict keeps, not the gathered buffers",
        )


def rank_state_dict_bad(full_state_dict):
    full_state_dict(build_model())


@checks("full_state_dict")
def state_dict_refuses_a_model_without_units(ex):
    """a model with no FSDPUnit inside: ValueError on every rank"""
    refused(
        ex,
        rank_state_dict_bad,
        args=(ex.full_state_dict,),
        input=f"{P} ranks, a plain {MODEL}",
        hint="no FSDPUnit in the model: raise ValueError instead of returning an empty dict",
    )


def on_a_subgroup(ex, fn, *, probe, args, input, hint):
    """`fn` in the members of the group [1, 2] of a world of 3 (rank 0 stands by and must receive nothing); `probe`
    first, in the grader: an untouched skeleton reads not attempted without starting the world of 3."""
    attempted(probe)
    warm_up(3)
    results = run_subgroup(
        fn, input=input, hint=hint, args=args, forbid=FORBID, instead=INSTEAD, deadline=SUBGROUP_DEADLINE_S
    )
    not_attempted(ex, results)
    return expect_ranks_ok(results, input=input, hint=f"{hint}; {GROUP_HINT}")


@checks("all_gather_shard")
def gather_and_reduce_scatter_on_a_subgroup(ex):
    """the group [1, 2] of a world of 3: the members' shards gathered in group-rank order, the gradient the mean over
    the 2 members; rank 0, outside the group, receives nothing"""
    shards = [torch.randn(6) for _ in range(2)]
    grads = [torch.randn(12) for _ in range(2)]
    label = "the group [1, 2] of a world of 3, shards (6,) float32 (group rank 0 = global rank 1), compute float32"
    per_rank = on_a_subgroup(
        ex,
        rank_all_gather_on_group,
        probe=lambda: ex.AllGatherShard.apply(nn.Parameter(torch.randn(3)), torch.float32),
        args=(ex.AllGatherShard, shards, grads),
        input=label,
        hint="all_gather_single(..., group=group) and reduce_scatter_single(..., group=ctx.group); divide by "
        "dist.get_world_size(group)",
    )
    mean = (grads[0] + grads[1]) / 2
    for rank, (full, grad) in enumerate(per_rank):
        expect_close(
            full,
            torch.cat(shards),
            input=f"{label}, group rank {rank}",
            what="gathered buffer",
            hint="group rank order",
        )
        expect_close(
            grad,
            mean[rank * 6 : (rank + 1) * 6],
            input=f"{label}, group rank {rank}",
            what="shard gradient",
            hint="the sum over the group's 2 ranks divided by 2, not by the world's 3",
        )


@checks("fsdp_unit")
@one_thread()
def unused_parameter_on_a_subgroup(ex):
    """the group [1, 2] of a world of 3 (rank 0 receives nothing), a unit with a parameter its forward never uses
    and a unit with a frozen scale, 3 SGD-momentum steps: the weights of one process trained on the full batch; the
    frozen scale is not in the shard and does not move; a frozen weight is cast to a bf16 compute dtype"""
    x, y = data()
    label = (
        "the group [1, 2] of a world of 3, Linear(12,16) | Block(16) with an unused (3,) | Linear(16,5) times a "
        "frozen (5,) scale in the same unit, float32, 3 SGD-momentum steps, batch 8 = 2 x 4"
    )
    full, scale, shard_sizes, bf16 = on_a_subgroup(
        ex,
        rank_training_on_group,
        probe=lambda: ex.FSDPUnit(nn.Linear(2, 2)),
        args=(ex.FSDPUnit, x, y, 3),
        input=label,
        hint="rank and size from the group (dist.get_rank(group), dist.get_world_size(group)), group= in every "
        "collective",
    )[0]
    want_sizes = [math.ceil(sum(p.numel() for _, p in trainable(child)) / 2) for child in build_model_with_unused()]
    expect(
        shard_sizes == want_sizes,
        "a frozen parameter is in the trainable shard",
        input=label,
        expected=f"shards of {want_sizes} elements per member (ceil of the trainable parameters / 2: 208, 1107, 85)",
        got=f"{shard_sizes}",
        hint="flatten only the parameters with requires_grad; a frozen one stays on the module, whole, and gets no "
        "gradient (in the shard, the optimizer would train it)",
    )
    want = single_process_training_with_unused(x, y, torch.float64, 3)
    base = single_process_training_with_unused(x, y, torch.float32, 3)
    for name, tensor in want.items():
        expect_close(
            full[name],
            tensor,
            baseline=base[name],
            input=f"{label}: {name}",
            what=f"{name} after 3 steps",
            hint="the mean gradient over the group's ranks; a parameter the forward does not use gets none; a frozen "
            "one is not trained",
        )
    expect_close(
        scale,
        build_model_with_unused()[2].scale.detach(),
        input=label,
        what="the frozen scale the last unit multiplies by, after 3 steps (fitted: its output on its linear part's)",
        hint="requires_grad=False: keep the frozen parameter out of the shard and out of the optimizer's reach",
    )
    linear, h = linear_with_frozen_weight()
    want = F.linear(h.bfloat16(), linear.weight.bfloat16(), linear.bias.bfloat16())
    expect_close(
        bf16,
        want,
        input=f"the group [1, 2] of a world of 3, FSDPUnit(Linear(16, 4) with a frozen weight, compute bfloat16), "
        f"input {describe(x=h)}",
        what="output (in bfloat16: the frozen weight cast like the gathered parameters)",
        hint="cast the frozen parameters to the compute dtype too: F.linear refuses a bf16 input with an fp32 weight",
    )
