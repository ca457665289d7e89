"""Checks for p02.zero. The learner's ZeRO runs in real 2-rank gloo worlds (`llm_algo.distributed`). References:
unsharded `torch.optim` optimizers (AdamW, SGD with Nesterov momentum and weight decay, Adam with AMSGrad) fed the
mean of the ranks' gradients, compared with `torch.equal` step for step (with 2 ranks the sum of two gradients has
one rounding and / 2 is exact, so sharding changes no bit); `torch.distributed.optim.ZeroRedundancyOptimizer` in the
same ranks (a second oracle, forbidden to the learner); the optimizer-state tensors counted on each rank; the ZeRO
paper's Figure 1 for the memory model (Rajbhandari et al., 2020: 7.5B parameters, 64 GPUs)."""

import functools

import torch
import torch.distributed as dist
import torch.nn as nn

from llm_algo.check import Checks, expect, expect_close, expect_refused
from llm_algo.distributed import attempted, expect_ranks_ok, run_ranks, run_subgroup
from llm_algo.distributed.subgroup import GROUP_HINT

checks = Checks("p02.zero")

WORLD = 2
DEADLINE = 20.0  # a rank left waiting in a collective ends the check here
FORBID = (
    "torch.distributed.optim.ZeroRedundancyOptimizer",
    "torch.distributed.fsdp.FullyShardedDataParallel",
    "torch.distributed.fsdp.fully_shard",
)
INSTEAD = "shard the flat parameters yourself (ZeroRedundancyOptimizer and FSDP are the checks' references)"
SHAPES = [(5, 3), (7,), (2, 2, 3), (1,)]  # 35 elements: odd, so the shards are padded and (7,) is split
OPTIMIZERS = {
    "AdamW": dict(lr=0.05, betas=(0.9, 0.95), weight_decay=0.1),
    "SGD": dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01),
    "Adam": dict(lr=0.02, amsgrad=True),
}


def ranks(fn, **options):
    """run_ranks in the lesson's world; the first optimizer (or DDP) of a process imports torch._dynamo, seconds of
    CPU that are preloaded before the learner's deadline starts."""
    return run_ranks(fn, WORLD, deadline=DEADLINE, preload=("torch._dynamo",), **options)


def state_bytes(optimizer) -> int:
    """Bytes of the optimizer's per-element state: every tensor in optimizer.state with at least one dimension."""
    return sum(
        t.numel() * t.element_size()
        for state in optimizer.state.values()
        for t in state.values()
        if torch.is_tensor(t) and t.dim() > 0
    )


# A model's parameters with the ones torch.optim skips: frozen (requires_grad=False) and unused by the forward (no
# .grad on any rank), and one that only group rank 0 used (averaged with zeros, as in DDP). 49 elements, padded; on 2
# ranks the frozen one is in rank 0's shard, the unused and the rank-0-only ones in rank 1's.
MIXED = [((5, 3), "used"), ((6,), "frozen"), ((7,), "used"), ((4,), "unused"), ((2, 2, 3), "used")]
MIXED += [((3,), "used on group rank 0 only"), ((2,), "used")]
# For SGD also one the forward uses from the second step on: torch.optim creates its momentum then, from that step's
# gradient alone (AdamW would start its own step count there, which one flat shard cannot: see the lesson).
LATE = [*MIXED, ((3,), "used from step 2 on")]


def make_problem(steps, scale=1.0, shapes=SHAPES, roles=None):
    """Initial parameters (equal on every rank) and per-rank gradients for each step (None: no gradient)."""
    roles = roles or ["used"] * len(shapes)
    init = [torch.randn(shape) for shape in shapes]

    def grad(rank, step, shape, role):
        has = role == "used" or (role == "used on group rank 0 only" and rank == 0)
        has = has or (role == "used from step 2 on" and step >= 1)
        return torch.randn(shape) * scale if has else None

    grads = [
        [[grad(r, step, shape, role) for shape, role in zip(shapes, roles, strict=True)] for step in range(steps)]
        for r in range(WORLD)
    ]
    return init, grads


def mean_gradients(grads, step):
    """The mean over ranks of each tensor's gradient: (g_0 + g_1) / 2, exact in float32 up to one rounding; zeros
    for a rank without one, None where no rank has one (torch.optim skips that parameter)."""
    out = []
    for i in range(len(grads[0][step])):
        per_rank = [grads[r][step][i] for r in range(len(grads))]
        present = [g for g in per_rank if g is not None]
        out.append(functools.reduce(torch.add, present) / len(grads) if present else None)
    return out


def sharded_run(zero_class, optimizer_name, init, grads, with_zro=False, frozen=(), group=None):
    """In every rank: the learner's ZeRO stepped with this rank's gradients; the unsharded optimizer (and, if asked,
    ZeroRedundancyOptimizer) stepped with the mean gradients. Parameters after every step, and state bytes."""
    rank = dist.get_rank(group)
    optimizer_class, kwargs = getattr(torch.optim, optimizer_name), OPTIMIZERS[optimizer_name]
    params = [nn.Parameter(t.clone(), requires_grad=i not in frozen) for i, t in enumerate(init)]
    zero = zero_class(params, optimizer_class, group=group, **kwargs)
    mine, grads_after = [], []
    for step in range(len(grads[rank])):
        for p, g in zip(params, grads[rank][step], strict=True):
            p.grad = None if g is None else g.clone()
        zero.step()
        mine.append([p.detach().clone() for p in params])
        grads_after.append([p.grad is None for p in params])
        zero.zero_grad()
    reference = [nn.Parameter(t.clone(), requires_grad=i not in frozen) for i, t in enumerate(init)]
    unsharded = optimizer_class(reference, **kwargs)
    want = []
    for step in range(len(grads[rank])):
        for p, g in zip(reference, mean_gradients(grads, step), strict=True):
            p.grad = g
        unsharded.step()
        want.append([p.detach().clone() for p in reference])
    zro, zro_bytes = None, None
    if with_zro:
        from torch.distributed.optim import ZeroRedundancyOptimizer

        zro_params = [nn.Parameter(t.clone()) for t in init]
        zro_optimizer = ZeroRedundancyOptimizer(zro_params, optimizer_class=optimizer_class, **kwargs)
        for step in range(len(grads[rank])):
            for p, g in zip(zro_params, mean_gradients(grads, step), strict=True):
                p.grad = g
            zro_optimizer.step()
        zro = [p.detach().clone() for p in zro_params]
        zro_bytes = state_bytes(zro_optimizer.optim)
    local = getattr(zero, "optimizer", None)
    return {
        "mine": mine,
        "want": want,
        "grads_freed": grads_after,
        "state_bytes": state_bytes(local) if isinstance(local, torch.optim.Optimizer) else None,
        "unsharded_bytes": state_bytes(unsharded),
        "shard_grad": getattr(getattr(zero, "shard", None), "grad", None),
        "zro": zro,
        "zro_bytes": zro_bytes,
    }


def sharded_runs(zero_class, optimizer_names, init, grads, with_zro=False, frozen=(), group=None):
    """In every rank: sharded_run for each optimizer in one call (each call of a world costs a round trip)."""
    return {name: sharded_run(zero_class, name, init, grads, with_zro, frozen, group) for name in optimizer_names}


def sharded_problems(zero_class, problems, frozen, group=None):
    """In every rank: sharded_run for each {optimizer name: (init, grads)} in one call."""
    return {name: sharded_run(zero_class, name, *problem, False, frozen, group) for name, problem in problems.items()}


def run_sharded(ex_class, optimizer_names, steps, *, forbid=FORBID, instead=INSTEAD, with_zro=False, hint=""):
    """{optimizer name: (the ranks' outputs, the input label)}, and the gradients used."""
    init, grads = make_problem(steps)
    labels = {
        name: f"{WORLD} ranks, parameters {SHAPES} (35 elements: padded, one tensor split across ranks), "
        f"torch.optim.{name}({', '.join(f'{k}={v}' for k, v in OPTIMIZERS[name].items())}), "
        f"{steps} steps, a different gradient on each rank"
        for name in optimizer_names
    }
    results = ranks(
        sharded_runs, args=(ex_class, tuple(optimizer_names), init, grads, with_zro), forbid=forbid, instead=instead
    )
    per_rank = expect_ranks_ok(results, input=" / ".join(labels.values()), hint=hint)
    return {name: ([out[name] for out in per_rank], labels[name]) for name in optimizer_names}, grads


def expect_step_for_step_equal(per_rank, label, hint, names=None):
    names = names or [f"param {i} {shape}" for i, shape in enumerate(SHAPES)]
    for rank, out in enumerate(per_rank):
        for step, (mine, want) in enumerate(zip(out["mine"], out["want"], strict=True)):
            for name, got, expected in zip(names, mine, want, strict=True):
                if not torch.equal(got, expected):
                    expect_close(got, expected, input=f"{label}; rank {rank}, step {step + 1}", what=name, hint=hint)
                    expect(
                        False,
                        f"{name} is close to the unsharded optimizer's but not bit-identical",
                        input=f"{label}; rank {rank}, step {step + 1}",
                        expected="torch.equal: with 2 ranks the mean gradient and the elementwise update are exact",
                        got=f"max difference {float((got - expected).abs().max()):.3g}",
                        hint=hint,
                    )


def on_a_subgroup(ex_class, steps, *, forbid=FORBID, instead=INSTEAD, hint=""):
    """The learner's ZeRO on the group [1, 2] of a world of 3 (rank 0 stands by and must receive nothing), AdamW on
    the MIXED parameters and SGD on the LATE ones (a frozen one, an unused one, one used on group rank 0 only; for
    SGD one used from step 2 on), both with weight decay: every parameter bit-identical to the unsharded torch.optim
    optimizer at every step; those that no rank has a gradient for unchanged."""
    problems, cases = {}, {}
    for name, layout in (("AdamW", MIXED), ("SGD", LATE)):
        shapes, roles = [shape for shape, _ in layout], [role for _, role in layout]
        problems[name] = make_problem(steps, shapes=shapes, roles=roles)
        numel = sum(torch.Size(shape).numel() for shape in shapes)
        described = "; ".join(f"#{i} {role}" for i, role in enumerate(roles) if role != "used")
        settings = ", ".join(f"{k}={v}" for k, v in OPTIMIZERS[name].items())
        cases[name] = (
            roles,
            [f"param {i} {shape} ({role})" for i, (shape, role) in enumerate(layout)],
            f"parameters {shapes} ({numel} elements; {described}), torch.optim.{name}({settings}), {steps} steps, a "
            "different gradient on each member, the group [1, 2] of a world of 3",
        )
    frozen = (1,)  # MIXED[1] and LATE[1]
    label = " / ".join(case[2] for case in cases.values())
    results = run_subgroup(
        sharded_problems,
        input=label,
        hint=hint,
        args=(ex_class, problems, frozen),
        forbid=forbid,
        instead=instead,
        deadline=DEADLINE,
        preload=("torch._dynamo",),
    )
    per_rank = expect_ranks_ok(results, input=label, hint=hint or GROUP_HINT)
    for name, (roles, names, where) in cases.items():
        init = problems[name][0]
        outs = [out[name] for out in per_rank]
        for group_rank, out in enumerate(outs):
            for i, role in enumerate(roles):
                if role not in ("frozen", "unused"):
                    continue
                got = out["mine"][-1][i]
                expect(
                    torch.equal(got, init[i]),
                    f"{names[i]} changed although no rank ever had a gradient for it",
                    input=f"{where}; group rank {group_rank}, after step {steps}",
                    expected="the initial values: torch.optim skips a parameter whose .grad is None",
                    got=f"max |change| {float((got - init[i]).abs().max()):.3g}",
                    hint="a zero gradient is not no gradient: AdamW's weight decay (and SGD's momentum) still move "
                    "it; keep the elements that self._with_gradient() marks False out of the step",
                )
        expect_step_for_step_equal(
            outs,
            where,
            hint
            or "the same as the unsharded optimizer, element by element; a state tensor the step creates is "
            "zero where the step was skipped (torch.optim creates it when the parameter first has a gradient)",
            names,
        )


# ------------------------------------------------------------------------------------------ zero_memory_per_rank

GB = 1e9


@checks("zero_memory_per_rank")
def paper_figure_one(ex):
    """7.5B parameters on 64 GPUs, Adam in mixed precision: 120, 31.4, 16.6 and 1.9 GB (ZeRO paper, Figure 1)"""
    psi, n = 7.5e9, 64
    closed_forms = {0: 16 * psi, 1: 4 * psi + 12 * psi / n, 2: 2 * psi + 14 * psi / n, 3: 16 * psi / n}
    rounded = {0: 120, 1: 31.4, 2: 16.6, 3: 1.9}
    for stage, want in closed_forms.items():
        got = ex.zero_memory_per_rank(psi, n, stage)
        expect(
            isinstance(got, int | float) and abs(got - want) <= 1e-9 * want and round(got / GB, 1) == rounded[stage],
            f"stage {stage}: wrong bytes per rank",
            input=f"num_params=7.5e9, world_size=64, stage={stage}, optimizer_bytes=12",
            expected=f"{want / GB:.4g} GB (the paper's {rounded[stage]} GB)",
            got=f"{got / GB:.4g} GB" if isinstance(got, int | float) else repr(got),
            hint="weights 2, gradients 2, optimizer 12 bytes per parameter; stage s divides the first s of "
            "(optimizer, gradients, weights) by world_size",
        )


@checks("zero_memory_per_rank")
def other_sizes_and_optimizer_bytes(ex):
    """random sizes, ranks and optimizer bytes (K = 4 for SGD with momentum, 16 with an extra fp32 buffer)"""
    for _ in range(6):
        psi = float(torch.randint(1, 10**6, ()).item()) * 1e3
        n = int(torch.randint(1, 300, ()).item())
        k = int(torch.randint(2, 20, ()).item())
        want = [(4 + k) * psi, 4 * psi + k * psi / n, 2 * psi + (2 + k) * psi / n, (4 + k) * psi / n]
        for stage in range(4):
            got = ex.zero_memory_per_rank(psi, n, stage, optimizer_bytes=k)
            expect(
                isinstance(got, int | float) and abs(got - want[stage]) <= 1e-9 * want[stage],
                f"stage {stage}: wrong bytes per rank",
                input=f"num_params={psi:g}, world_size={n}, stage={stage}, optimizer_bytes={k}",
                expected=f"{want[stage]:.6g}",
                got=repr(got),
                hint="use optimizer_bytes for the optimizer term, not a fixed 12",
            )


@checks("zero_memory_per_rank")
def one_rank_changes_nothing(ex):
    """world_size 1: every stage costs the full 16 bytes per parameter; stages never increase the memory"""
    psi = 1.3e8
    values = [ex.zero_memory_per_rank(psi, 1, stage) for stage in range(4)]
    expect(
        all(abs(v - 16 * psi) <= 1e-9 * 16 * psi for v in values),
        "with one rank, sharding must change nothing",
        input="num_params=1.3e8, world_size=1, stages 0..3",
        expected=f"{16 * psi:.4g} for every stage",
        got=str(values),
        hint="dividing by world_size = 1 is the identity",
    )
    values = [ex.zero_memory_per_rank(psi, 8, stage) for stage in range(4)]
    expect(
        values == sorted(values, reverse=True) and len(set(values)) == 4,
        "each stage must save memory over the previous one",
        input="num_params=1.3e8, world_size=8",
        expected="strictly decreasing from stage 0 to 3",
        got=str(values),
        hint="stage 2 shards the optimizer state AND the gradients; stage 3 also the weights",
    )


@checks("zero_memory_per_rank")
def refuses_bad_stage_or_world(ex):
    """stage 4 or -1, world_size 0: ValueError"""
    for stage, world in ((4, 8), (-1, 8), (1, 0)):
        expect_refused(
            lambda stage=stage, world=world: ex.zero_memory_per_rank(1e9, world, stage),
            input=f"stage={stage}, world_size={world}",
            hint="stages are 0..3 and a world has at least one rank",
            errors=(ValueError,),
        )


# ------------------------------------------------------------------------------------------ ZeRO1


@checks("zero1")
def adamw_bit_identical_to_unsharded(ex):
    """AdamW, 5 steps, 35 parameters over 2 ranks: every parameter bit-identical to unsharded AdamW at every step"""
    attempted(lambda: ex.ZeRO1([], "not an optimizer class"))
    runs, _ = run_sharded(ex.ZeRO1, ["AdamW"], 5, hint="reduce: all-reduce, / world size")
    per_rank, label = runs["AdamW"]
    expect_step_for_step_equal(
        per_rank,
        label,
        "average the gradients (sum / world_size), step your shard, all-gather ALL shards, copy back in order",
    )


@checks("zero1")
def any_optimizer_class(ex):
    """SGD (Nesterov, weight decay) and Adam (AMSGrad) wrapped the same way: bit-identical to unsharded"""
    attempted(lambda: ex.ZeRO1([], "not an optimizer class"))
    runs, _ = run_sharded(ex.ZeRO1, ["SGD", "Adam"], 4)
    for name in ("SGD", "Adam"):
        per_rank, label = runs[name]
        expect_step_for_step_equal(
            per_rank, label, "build optimizer_class([self.shard], **optimizer_kwargs): nothing AdamW-specific"
        )


@checks("zero1")
def optimizer_state_is_sharded(ex):
    """each rank's optimizer state tensors hold ceil(35 / 2) = 18 elements per state (1/2 of unsharded, + padding)"""
    attempted(lambda: ex.ZeRO1([], "not an optimizer class"))
    runs, _ = run_sharded(ex.ZeRO1, ["AdamW"], 1)
    per_rank, label = runs["AdamW"]
    total = sum(torch.Size(s).numel() for s in SHAPES)
    shard = -(-total // WORLD)
    for rank, out in enumerate(per_rank):
        expect(
            out["state_bytes"] is not None,
            "self.optimizer is not a torch.optim.Optimizer",
            input=label,
            expected="self.optimizer = optimizer_class([self.shard], ...)",
            got="missing or another type",
            hint="keep the local optimizer in self.optimizer: the check counts its state tensors",
        )
        expect(
            out["state_bytes"] == 2 * shard * 4,
            f"rank {rank} holds the wrong amount of AdamW state",
            input=label,
            expected=f"exp_avg and exp_avg_sq of {shard} float32 elements: {2 * shard * 4} bytes "
            f"(unsharded: {out['unsharded_bytes']})",
            got=f"{out['state_bytes']} bytes",
            hint="the optimizer must see only this rank's shard (an nn.Parameter of ceil(numel / world) elements)",
        )


@checks("zero1")
def matches_zero_redundancy_optimizer(ex):
    """the same 5 AdamW steps as torch.distributed.optim.ZeroRedundancyOptimizer (whole-parameter partition)"""
    attempted(lambda: ex.ZeRO1([], "not an optimizer class"))
    runs, _ = run_sharded(ex.ZeRO1, ["AdamW"], 5, with_zro=True)
    per_rank, label = runs["AdamW"]
    for rank, out in enumerate(per_rank):
        for i, (got, want) in enumerate(zip(out["mine"][-1], out["zro"], strict=True)):
            expect_close(
                got,
                want,
                input=f"{label}; rank {rank}, after step 5, against ZeroRedundancyOptimizer",
                what=f"param {i} {SHAPES[i]}",
                hint="ZeroRedundancyOptimizer steps each parameter on one rank and broadcasts it: same math, "
                "another partition",
            )


def construct_each(zero_class, cases):
    """In every rank: try each (params, optimizer_class); the error's type name, or "accepted"."""
    outcomes = []
    for params, optimizer_class in cases:
        try:
            zero_class(params, optimizer_class)
            outcomes.append("accepted")
        except Exception as error:  # noqa: BLE001 (reported to the grader, which judges the type)
            outcomes.append(type(error).__name__)
    return outcomes


@checks("zero1")
def refuses_bad_input(ex):
    """not an Optimizer class: TypeError; a param group dict or an empty list; mixed dtypes: ValueError on every rank"""
    expect_refused(
        lambda: ex.ZeRO1([nn.Parameter(torch.zeros(3))], "AdamW"),
        input="ZeRO1(params, 'AdamW') (a string, not a class), in the grader process",
        hint="check issubclass(optimizer_class, torch.optim.Optimizer) first",
        errors=(TypeError,),
    )
    cases = [
        ("optimizer_class=nn.Linear", [nn.Parameter(torch.zeros(3))], nn.Linear, ("TypeError",)),
        (
            "params=[{'params': [...]}] (a param group)",
            [{"params": [nn.Parameter(torch.zeros(3))]}],
            torch.optim.SGD,
            ("TypeError", "ValueError"),
        ),
        ("params=[]", [], torch.optim.SGD, ("TypeError", "ValueError")),
        (
            "float32 and float64 parameters",
            [nn.Parameter(torch.zeros(3)), nn.Parameter(torch.zeros(2).double())],
            torch.optim.SGD,
            ("ValueError",),
        ),
    ]
    results = ranks(construct_each, args=(ex.ZeRO1, [(params, cls) for _, params, cls, _ in cases]))
    per_rank = expect_ranks_ok(results, input=f"ZeRO1 with 4 kinds of bad input on {WORLD} ranks")
    for rank, outcomes in enumerate(per_rank):
        for (label, _, _, errors), outcome in zip(cases, outcomes, strict=True):
            expect(
                outcome in errors,
                "bad input not refused" if outcome == "accepted" else "bad input refused with the wrong error",
                input=f"ZeRO1({label}), rank {rank}",
                expected=" or ".join(errors),
                got=outcome,
                hint="validate the optimizer class and the parameters before any communication",
            )


# ------------------------------------------------------------------------------------------ ZeRO2

FORBID_STAGE_2 = (*FORBID, "torch.distributed.all_reduce")
INSTEAD_STAGE_2 = "reduce-scatter the gradients: each rank receives only its shard's sum"


@checks("zero2")
def adamw_bit_identical_with_reduce_scatter(ex):
    """AdamW, 5 steps, without dist.all_reduce: bit-identical to unsharded AdamW at every step"""
    attempted(lambda: ex.ZeRO2.reduce_gradients(None))
    runs, _ = run_sharded(
        ex.ZeRO2, ["AdamW"], 5, forbid=FORBID_STAGE_2, instead=INSTEAD_STAGE_2, hint="reduce_scatter, then / world size"
    )
    per_rank, label = runs["AdamW"]
    expect_step_for_step_equal(
        per_rank, label, "reduce_scatter(shard, padded flat gradient) gives this rank's sum; divide by world_size"
    )


@checks("zero2")
def gradient_shard_only(ex):
    """after reduce: the shard's .grad is exactly this rank's slice of the mean gradient; every full .grad freed"""
    attempted(lambda: ex.ZeRO2.reduce_gradients(None))
    runs, grads = run_sharded(ex.ZeRO2, ["SGD"], 1, forbid=FORBID_STAGE_2, instead=INSTEAD_STAGE_2)
    per_rank, label = runs["SGD"]
    total = sum(torch.Size(s).numel() for s in SHAPES)
    shard = -(-total // WORLD)
    mean = torch.zeros(WORLD * shard)
    mean[:total] = torch.cat([g.reshape(-1) for g in mean_gradients(grads, 0)])
    for rank, out in enumerate(per_rank):
        expect(
            all(all(freed) for freed in out["grads_freed"]),
            f"rank {rank} still holds full gradients after step()",
            input=label,
            expected="p.grad is None for every parameter (stage 2 keeps only the gradient shard)",
            got=f"None after each step: {out['grads_freed']}",
            hint="set p.grad = None for every parameter once the flat gradient buffer is built",
        )
        got, want = out["shard_grad"], mean[rank * shard : (rank + 1) * shard]
        expect(
            got is not None and got.shape == want.shape and torch.equal(got, want),
            f"rank {rank}: the shard's gradient is not this rank's slice of the mean gradient",
            input=label,
            expected=f"self.shard.grad = elements [{rank * shard}, {(rank + 1) * shard}) of the padded mean gradient",
            got="None"
            if got is None
            else f"shape {tuple(got.shape)}, max difference "
            f"{float((got - want).abs().max()) if got.shape == want.shape else float('nan'):.3g}",
            hint="reduce_scatter(output of shard_size, padded flat gradient), then divide by world_size",
        )


@checks("zero2")
def any_optimizer_and_state_sharded(ex):
    """SGD and Adam through ZeRO2: bit-identical to unsharded, optimizer state of 1/2 per rank"""
    attempted(lambda: ex.ZeRO2.reduce_gradients(None))
    total = sum(torch.Size(s).numel() for s in SHAPES)
    shard = -(-total // WORLD)
    runs, _ = run_sharded(ex.ZeRO2, ["SGD", "Adam"], 3, forbid=FORBID_STAGE_2, instead=INSTEAD_STAGE_2)
    for name, states in (("SGD", 1), ("Adam", 3)):  # momentum_buffer; exp_avg, exp_avg_sq, max_exp_avg_sq
        per_rank, label = runs[name]
        expect_step_for_step_equal(per_rank, label, "the same reduce_scatter for every optimizer class")
        for rank, out in enumerate(per_rank):
            expect(
                out["state_bytes"] == states * shard * 4,
                f"rank {rank}: the optimizer state is not sharded",
                input=label,
                expected=f"{states} state tensor(s) of {shard} float32 elements: {states * shard * 4} bytes",
                got=f"{out['state_bytes']} bytes",
                hint="ZeRO2 inherits ZeRO1's construction: the optimizer over the shard only",
            )


@checks("zero1")
def frozen_and_unused_parameters_on_a_subgroup(ex):
    """the group [1, 2] of a world of 3 (rank 0 receives nothing), AdamW and SGD with weight decay, a frozen and an
    unused parameter (and for SGD one used from step 2 on): bit-identical to unsharded torch.optim, which leaves the
    first two alone"""
    attempted(lambda: ex.ZeRO1([], "not an optimizer class"))
    on_a_subgroup(ex.ZeRO1, 3)


@checks("zero2")
def frozen_and_unused_parameters_on_a_subgroup_reduce_scattered(ex):
    """ZeRO2 on the group [1, 2] of a world of 3, AdamW and SGD with weight decay, a frozen and an unused parameter:
    bit-identical to unsharded torch.optim"""
    attempted(lambda: ex.ZeRO2.reduce_gradients(None))
    on_a_subgroup(ex.ZeRO2, 3, forbid=FORBID_STAGE_2, instead=INSTEAD_STAGE_2)
