"""Checks for p02.mixed_precision. References: torch.amp.GradScaler("cpu") step for step (its scale, growth tracker,
skipped steps, and the parameters and AdamW state it leaves), with injected inf/NaN losses and a real fp16 overflow;
a hand-derived scale sequence with SGD's closed-form parameter; torch.optim.AdamW / SGD on float32 parameters fed the
upcast gradients (bit for bit) and a float64 closed form for accumulated small updates."""

import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

from llm_algo.check import Checks, describe, expect, expect_close, expect_refused

checks = Checks("p02.mixed_precision")
checks.restrict(
    "DynamicLossScaler",
    forbid=[
        "torch.amp.grad_scaler",
        "torch.cuda.amp",
        torch._amp_update_scale_,
        torch._amp_foreach_non_finite_check_and_unscale_,
    ],
    instead="unscale, check with torch.isfinite and update the scale yourself (torch.amp.GradScaler is the reference)",
)

# ------------------------------------------------------------------------------------------ DynamicLossScaler


def small_mlp():
    return nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 2))


def loss_of(model, x, y, multiplier):
    return F.mse_loss(model(x), y) * multiplier


def run_pair(ex, multipliers, *, init_scale, growth_interval, model=None, lr=1e-2):
    """The learner's scaler and GradScaler on twin models with AdamW, the same batches and loss multipliers (inf/NaN
    inject an overflow). Returns per-step records of (scale, tracker, stepped) for both, and the two models and
    optimizers."""
    model = model or small_mlp()
    twin = copy.deepcopy(model)
    mine_opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1)
    their_opt = torch.optim.AdamW(twin.parameters(), lr=lr, weight_decay=0.1)
    scaler = ex.DynamicLossScaler(init_scale=init_scale, growth_interval=growth_interval)
    reference = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_interval=growth_interval)
    mine, theirs = [], []
    for multiplier in multipliers:
        x, y = torch.randn(6, 5), torch.randn(6, 2)
        mine_opt.zero_grad()
        scaler.scale_loss(loss_of(model, x, y, multiplier)).backward()
        stepped = scaler.step(mine_opt)
        mine.append((float(scaler.scale), int(scaler.growth_tracker), bool(stepped)))
        their_opt.zero_grad()
        before = reference.get_scale()
        reference.scale(loss_of(twin, x, y, multiplier)).backward()
        reference.step(their_opt)
        reference.update()
        theirs.append((reference.get_scale(), reference._get_growth_tracker(), reference.get_scale() >= before))
    return mine, theirs, (model, mine_opt), (twin, their_opt)


def expect_same_records(mine, theirs, *, input):
    for step, (got, want) in enumerate(zip(mine, theirs, strict=True)):
        expect(
            got == want,
            f"after iteration {step} the scaler differs from torch.amp.GradScaler",
            input=input,
            expected=f"(scale, growth_tracker, stepped) = {want}",
            got=str(got),
            hint="overflow: skip optimizer.step(), scale *= backoff, tracker = 0; clean: step, tracker += 1, and at "
            "growth_interval: scale *= growth, tracker = 0",
        )


@checks("DynamicLossScaler")
def matches_grad_scaler_step_for_step(ex):
    """40 AdamW iterations with inf and NaN losses injected: scale, tracker, skipped steps and weights equal GradScaler's"""
    inf, nan = float("inf"), float("nan")
    multipliers = [1.0] * 40
    for step in (3, 4, 17):
        multipliers[step] = inf
    multipliers[25] = nan
    mine, theirs, (model, opt), (twin, twin_opt) = run_pair(ex, multipliers, init_scale=2.0**10, growth_interval=5)
    label = "MLP 5-8-2 fp32, AdamW(wd=0.1), init_scale=2**10, growth_interval=5, inf loss at 3, 4, 17, NaN at 25"
    expect_same_records(mine, theirs, input=label)
    for (name, p), q in zip(model.named_parameters(), twin.parameters(), strict=True):
        expect_close(
            p.detach(),
            q.detach().double(),
            input=label,
            what=name,
            hint="a skipped step must not call optimizer.step() (AdamW would still decay and count the step)",
        )
        got_steps, want_steps = float(opt.state[p]["step"]), float(twin_opt.state[q]["step"])
        expect(
            got_steps == want_steps,
            f"AdamW took {got_steps:g} steps on {name}, GradScaler's run took {want_steps:g}",
            input=label,
            expected=f"{want_steps:g} (40 iterations, 4 skipped)",
            got=f"{got_steps:g}",
            hint="on inf/NaN return before optimizer.step()",
        )


@checks("DynamicLossScaler")
def scale_sequence_closed_form(ex):
    """hand-derived scales and a closed-form SGD weight for a pattern of clean and overflowing steps"""
    inf = float("inf")
    pattern = [1] * 7 + [inf] + [1] * 3 + [inf, inf] + [1] * 6
    want_scales = [256, 256, 512, 512, 512, 1024, 1024, 512, 512, 512, 1024, 512, 256, 256, 256, 512, 512, 512, 1024]
    want_trackers = [1, 2, 0, 1, 2, 0, 1, 0, 1, 2, 0, 0, 0, 1, 2, 0, 1, 2, 0]
    w = nn.Parameter(torch.tensor([0.5, -1.5], dtype=torch.float64))
    x = torch.tensor([0.25, -2.0], dtype=torch.float64)
    unused = nn.Parameter(torch.tensor([3.0], dtype=torch.float64))  # never in the loss: its grad stays None
    optimizer = torch.optim.SGD([w, unused], lr=0.125)
    scaler = ex.DynamicLossScaler(init_scale=256.0, growth_interval=3)
    scales, trackers, stepped = [], [], []
    for multiplier in pattern:
        optimizer.zero_grad()
        scaler.scale_loss((w * x).sum() * multiplier).backward()
        stepped.append(bool(scaler.step(optimizer)))
        scales.append(float(scaler.scale))
        trackers.append(int(scaler.growth_tracker))
    label = "init_scale=256, growth_interval=3, steps: 7 clean, inf, 3 clean, inf, inf, 6 clean"
    expect(
        scales == [float(s) for s in want_scales] and trackers == want_trackers,
        "the scale or the growth tracker follows the wrong sequence",
        input=label,
        expected=f"scales {want_scales}, trackers {want_trackers}",
        got=f"scales {[int(s) for s in scales]}, trackers {trackers}",
        hint="grow only after growth_interval CONSECUTIVE clean steps; an overflow halves the scale and resets the count",
    )
    expect(
        unused.grad is None and float(unused.detach()) == 3.0,
        "a parameter without a gradient was given one or changed",
        input=label + ", plus a parameter that is never used",
        expected="grad None, value 3.0",
        got=f"grad {unused.grad}, value {float(unused.detach())}",
        hint="skip parameters whose .grad is None when unscaling",
    )
    clean = sum(1 for m in pattern if m == 1)
    expect(
        stepped == [m == 1 for m in pattern],
        "step() did not report the skipped steps",
        input=label,
        expected=str([m == 1 for m in pattern]),
        got=str(stepped),
        hint="return True when the optimizer stepped, False on inf/NaN",
    )
    expect_close(
        w.detach(),
        torch.tensor([0.5, -1.5], dtype=torch.float64) - 0.125 * clean * x,
        input=label + f" ({clean} clean steps of SGD lr=0.125 on (w * x).sum())",
        what="w after the run",
        hint="divide each grad by the scale before the step: the optimizer must see the true gradient x",
    )


@checks("DynamicLossScaler")
def leaves_unscaled_gradients(ex):
    """after a clean step the grads are exactly the unscaled ones (clipping and logging read them next)"""
    model = small_mlp()
    twin = copy.deepcopy(model)
    x, y = torch.randn(7, 5), torch.randn(7, 2)
    F.mse_loss(twin(x), y).backward()
    scaler = ex.DynamicLossScaler(init_scale=2.0**20)
    scaled = scaler.scale_loss(F.mse_loss(model(x), y))
    expect_close(
        scaled.detach().double(),
        F.mse_loss(twin(x), y).detach().double() * 2**20,
        input="MLP fp32, init_scale=2**20",
        what="scaled loss",
        hint="scale_loss returns loss * scale",
    )
    scaled.backward()
    scaler.step(torch.optim.SGD(model.parameters(), lr=0.0))
    for (name, p), q in zip(model.named_parameters(), twin.parameters(), strict=True):
        expect_close(
            p.grad,
            q.grad.double(),
            baseline=q.grad,
            input="MLP fp32, init_scale=2**20, SGD(lr=0)",
            what=f"{name}.grad after step",
            hint="unscale in place: grad /= scale (multiplying by the scale, or not unscaling, leaves it 2**20 off)",
        )


@checks("DynamicLossScaler")
def fp16_overflow_and_loss_dtype(ex):
    """a real fp16 backward overflows at a scale of 2**30 and backs off like GradScaler; a fp16 loss is scaled in fp32"""
    loss16 = torch.tensor(4.0, dtype=torch.float16)
    scaled = ex.DynamicLossScaler(init_scale=2.0**16).scale_loss(loss16)
    expect(
        scaled.dtype == torch.float32 and float(scaled) == 262144.0,
        "a fp16 loss was scaled in fp16 (4 * 65536 overflows)",
        input="loss tensor(4., dtype=float16), scale 2**16",
        expected="tensor(262144.) float32",
        got=f"{scaled!r}",
        hint="upcast first: loss.to(torch.promote_types(loss.dtype, torch.float32)) * scale",
    )
    loss64 = torch.tensor(3.0, dtype=torch.float64)
    scaled64 = ex.DynamicLossScaler(init_scale=8.0).scale_loss(loss64)
    expect(
        scaled64.dtype == torch.float64 and float(scaled64) == 24.0,
        "a float64 loss lost its precision",
        input="loss tensor(3., dtype=float64), scale 8",
        expected="tensor(24.) float64",
        got=f"{scaled64!r}",
        hint="upcast to at least float32, never down",
    )

    class HalfCompute(nn.Module):
        """fp32 parameters, fp16 matmuls (what autocast does): the fp16 backward overflows for a large scale."""

        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(3, 5) * 4)

        def forward(self, x, y, multiplier):
            out = (x.half() @ self.weight.half().T).float()
            return F.mse_loss(out, y) * multiplier

    model = HalfCompute()
    twin = copy.deepcopy(model)
    mine_opt, their_opt = torch.optim.SGD(model.parameters(), lr=1e-3), torch.optim.SGD(twin.parameters(), lr=1e-3)
    scaler = ex.DynamicLossScaler(init_scale=2.0**30, growth_interval=2)
    reference = torch.amp.GradScaler("cpu", init_scale=2.0**30, growth_interval=2)
    mine, theirs = [], []
    for _ in range(24):
        x, y = torch.randn(4, 5) * 8, torch.randn(4, 3)
        mine_opt.zero_grad()
        scaler.scale_loss(model(x, y, 1.0)).backward()
        scaler.step(mine_opt)
        mine.append((float(scaler.scale), int(scaler.growth_tracker)))
        their_opt.zero_grad()
        reference.scale(twin(x, y, 1.0)).backward()
        reference.step(their_opt)
        reference.update()
        theirs.append((reference.get_scale(), reference._get_growth_tracker()))
    expect(
        mine == theirs,
        "the scale sequence under real fp16 overflows differs from torch.amp.GradScaler's",
        input="fp32 weight (3, 5) with fp16 matmuls, init_scale=2**30, growth_interval=2, 24 SGD steps",
        expected=str(theirs[:8]) + " ...",
        got=str(mine[:8]) + " ...",
        hint="check every gradient for inf and NaN after unscaling; back off and skip when any is non-finite",
    )
    expect_close(
        model.weight.detach(),
        twin.weight.detach().double(),
        baseline=twin.weight.detach(),
        input="fp32 weight with fp16 matmuls, 24 SGD steps under loss scaling",
        what="weight",
        hint="skip the step whenever a gradient overflowed",
    )


@checks("DynamicLossScaler")
def refuses_bad_settings(ex):
    """init_scale <= 0, growth_factor <= 1, backoff_factor outside (0, 1), growth_interval < 1: ValueError"""
    for kwargs in (
        dict(init_scale=0.0),
        dict(init_scale=-8.0),
        dict(growth_factor=1.0),
        dict(growth_factor=0.5),
        dict(backoff_factor=1.0),
        dict(backoff_factor=0.0),
        dict(backoff_factor=1.5),
        dict(growth_interval=0),
    ):
        expect_refused(
            lambda kwargs=kwargs: ex.DynamicLossScaler(**kwargs),
            input=describe(**kwargs),
            hint="raise ValueError unless init_scale > 0, growth_factor > 1, 0 < backoff_factor < 1, growth_interval >= 1",
        )
    for init_scale in (1.0, 0.5):
        tiny = ex.DynamicLossScaler(init_scale=init_scale)
        expect(
            float(tiny.scale) == init_scale,
            "a valid initial scale was refused or changed",
            input=f"init_scale={init_scale}",
            expected=str(init_scale),
            got=str(tiny.scale),
            hint="any init_scale > 0 is valid (a scale below 1 is unusual, not wrong)",
        )
    scaler = ex.DynamicLossScaler(init_scale=4.0, growth_factor=4.0, backoff_factor=0.25, growth_interval=1)
    w = nn.Parameter(torch.ones(2))
    optimizer = torch.optim.SGD([w], lr=0.1)
    history = []
    for multiplier in (1.0, 1.0, float("inf")):
        optimizer.zero_grad()
        scaler.scale_loss((w * multiplier).sum()).backward()
        scaler.step(optimizer)
        history.append(float(scaler.scale))
    expect(
        history == [16.0, 64.0, 16.0],
        "custom growth/backoff factors are not used",
        input="init_scale=4, growth_factor=4, backoff_factor=0.25, growth_interval=1: clean, clean, inf",
        expected="[16.0, 64.0, 16.0]",
        got=str(history),
        hint="use the growth_factor and backoff_factor given to __init__",
    )


# ------------------------------------------------------------------------------------------ MasterWeights


def low_precision_params(dtype):
    return [nn.Parameter(torch.randn(shape).to(dtype)) for shape in ((6, 4), (4,), (3, 2, 2))]


@checks("MasterWeights")
def bit_exact_with_fp32_adamw(ex):
    """20 AdamW steps from bf16 and fp16 grads: masters equal fp32 AdamW fed the upcast grads, the model their rounding"""
    for dtype in (torch.bfloat16, torch.float16):
        params = low_precision_params(dtype)
        reference = [nn.Parameter(p.detach().float()) for p in params]
        ref_opt = torch.optim.AdamW(reference, lr=3e-3, weight_decay=0.1)
        master = ex.MasterWeights(params, lambda ps: torch.optim.AdamW(ps, lr=3e-3, weight_decay=0.1))
        for step in range(20):
            for i, (p, r) in enumerate(zip(params, reference, strict=True)):
                grad = None if (i == 1 and step % 3 == 0) else torch.randn(p.shape).to(dtype)  # sometimes unused
                p.grad = grad
                r.grad = None if grad is None else grad.float()
            master.step()
            ref_opt.step()
        label = f"3 {str(dtype).removeprefix('torch.')} params, 20 AdamW steps (lr 3e-3, wd 0.1), param 1 unused every 3rd step"
        for i, (p, m, r) in enumerate(zip(params, master.master, reference, strict=True)):
            expect(
                m.dtype == torch.float32,
                f"master {i} is not float32",
                input=label,
                expected="torch.float32",
                got=str(m.dtype),
                hint="copy each parameter with p.detach().to(torch.float32)",
            )
            expect_close(
                m.detach(),
                r.detach().double(),
                dtype=torch.float32,
                input=label,
                what=f"master {i}",
                hint="master.grad = model grad upcast to fp32 (None stays None); step the optimizer on the masters",
            )
            expect(
                p.dtype == dtype and torch.equal(p.detach(), r.detach().to(dtype)),
                f"model parameter {i} is not its master rounded to {dtype}",
                input=label,
                expected=f"{dtype} equal to master.to({dtype})",
                got=f"{p.dtype}, max |diff| {float((p.detach().float() - r.detach()).abs().max()):.3g}",
                hint="after the step copy each master into its model parameter in place: p.copy_(master)",
            )


@checks("MasterWeights")
def small_updates_accumulate(ex):
    """1000 SGD steps of -1e-4 on a bf16 weight of 1.0: the master reaches 0.9 (float64 closed form), the model follows"""
    weight = nn.Parameter(torch.ones(3, dtype=torch.bfloat16))
    master = ex.MasterWeights([weight], lambda ps: torch.optim.SGD(ps, lr=1e-4))
    baseline = nn.Parameter(torch.ones(3))
    baseline_opt = torch.optim.SGD([baseline], lr=1e-4)
    for _ in range(1000):
        weight.grad = torch.ones(3, dtype=torch.bfloat16)
        master.step()
        baseline.grad = torch.ones(3)
        baseline_opt.step()
    label = "bf16 weight 1.0, SGD lr 1e-4, grad 1, 1000 steps"
    expect_close(
        master.master[0].detach(),
        torch.full((3,), 0.9, dtype=torch.float64),
        baseline=baseline.detach(),
        input=label,
        what="master after 1000 steps",
        hint="the master must accumulate every update in fp32: do not rebuild it from the rounded model weight",
    )
    expect(
        torch.equal(weight.detach(), torch.full((3,), 0.9).to(torch.bfloat16)),
        "the bf16 model weight did not follow its master",
        input=label,
        expected=f"{torch.tensor(0.9).to(torch.bfloat16).item()} (bf16 of 0.9)",
        got=str(weight.detach().tolist()),
        hint="copy the master back into the model parameter after every step",
    )


@checks("MasterWeights")
def keeps_the_model_parameters(ex):
    """the model keeps its own Parameter objects and dtype; masters are fp32 copies, not views; model grads cleared"""
    params = low_precision_params(torch.bfloat16)
    ids, pointers = [id(p) for p in params], [p.data_ptr() for p in params]
    master = ex.MasterWeights(iter(params), lambda ps: torch.optim.SGD(ps, lr=0.5))
    optimizer_params = [p for group in master.optimizer.param_groups for p in group["params"]]
    expect(
        len(master.master) == 3
        and all(m.dtype == torch.float32 and m.is_leaf for m in master.master)
        and [id(p) for p in optimizer_params] == [id(m) for m in master.master],
        "the optimizer does not hold the fp32 masters",
        input="3 bf16 parameters (passed as an iterator)",
        expected="self.master: 3 fp32 leaf tensors; self.optimizer built on exactly those",
        got=f"{len(master.master)} masters, optimizer holds {len(optimizer_params)} tensors",
        hint="self.master = [nn.Parameter(p.detach().to(torch.float32)) ...]; self.optimizer = make_optimizer(self.master)",
    )
    for p in params:
        p.grad = torch.randn(p.shape).to(torch.bfloat16)
    master.step()
    for i, p in enumerate(params):
        expect(
            id(p) == ids[i] and p.data_ptr() == pointers[i] and p.dtype == torch.bfloat16 and p.grad is None,
            f"model parameter {i} was replaced, re-allocated, changed dtype, or kept its gradient",
            input="3 bf16 parameters, one SGD step",
            expected="the same bf16 Parameter, updated in place, grad None",
            got=f"same object {id(p) == ids[i]}, same storage {p.data_ptr() == pointers[i]}, {p.dtype}, "
            f"grad {'None' if p.grad is None else 'kept'}",
            hint="update in place with p.copy_(master) and set p.grad = None after the step",
        )
        expect(
            master.master[i].data_ptr() != p.data_ptr(),
            f"master {i} shares memory with the model parameter",
            input="3 bf16 parameters",
            expected="a separate fp32 tensor",
            got="the same storage",
            hint="p.detach() alone is a view: convert it to float32",
        )


@checks("MasterWeights")
def refuses_bad_parameters(ex):
    """an empty parameter list, or fp32/fp64 parameters: ValueError"""
    make = lambda ps: torch.optim.SGD(ps, lr=0.1)  # noqa: E731
    expect_refused(
        lambda: ex.MasterWeights([], lambda ps: ps),
        input="params=[] (with a make_optimizer that accepts an empty list)",
        hint="raise ValueError for no parameters, before building the optimizer",
    )
    for dtype in (torch.float32, torch.float64):
        params = [nn.Parameter(torch.randn(3).to(torch.bfloat16)), nn.Parameter(torch.randn(2, dtype=dtype))]
        expect_refused(
            lambda params=params: ex.MasterWeights(params, make),
            input=f"a bf16 and a {str(dtype).removeprefix('torch.')} parameter",
            hint="raise ValueError for a parameter that is not float16 or bfloat16",
        )
