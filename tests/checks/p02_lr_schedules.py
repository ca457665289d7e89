"""Checks for p02.lr_schedules. References: torch.optim.lr_scheduler (SequentialLR of a LambdaLR warmup and
CosineAnnealingLR, stepped like a training loop), transformers' get_cosine_with_min_lr_schedule_with_warmup,
get_wsd_schedule and get_inverse_sqrt_schedule (LambdaLRs on a one-parameter SGD), the Transformer paper's Noam
formula, and closed forms at the boundaries (step 0, end of warmup, midpoint, end of decay, past it)."""

import functools
import math
import warnings

import torch

from llm_algo.check import Checks, expect, expect_close, expect_refused

checks = Checks("p02.lr_schedules")
checks.restrict(
    "warmup_cosine_lr",
    "wsd_lr",
    "inverse_sqrt_lr",
    forbid=["torch.optim.lr_scheduler", "transformers"],
    instead="compute the learning rate from the step with math.cos / math.sqrt (the schedulers are the reference)",
)
checks.restrict(
    "make_lambda_lr",
    forbid=[
        "transformers",
        torch.optim.lr_scheduler.CosineAnnealingLR,
        torch.optim.lr_scheduler.SequentialLR,
        torch.optim.lr_scheduler.LinearLR,
        torch.optim.lr_scheduler.MultiplicativeLR,
    ],
    instead="build a torch.optim.lr_scheduler.LambdaLR whose factor is schedule(step) / peak_lr",
)


def as_tensor(values) -> torch.Tensor:
    return torch.tensor([float(v) for v in values], dtype=torch.float64)


def driven(scheduler, optimizer, steps: int) -> list[list[float]]:
    """The lr of every group before each optimizer.step(), in a training loop's order (step, then schedule)."""
    lrs = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "optimizer.step() before lr_scheduler.step()": no real step is taken
        for _ in range(steps):
            lrs.append([group["lr"] for group in optimizer.param_groups])
            optimizer.step()
            scheduler.step()
    return lrs


def sgd(*lrs: float) -> torch.optim.SGD:
    return torch.optim.SGD([{"params": [torch.nn.Parameter(torch.zeros(1))], "lr": lr} for lr in lrs])


def transformers_optimization():
    from transformers import optimization  # ~2 s: imported inside the checks that need it

    return optimization


# ------------------------------------------------------------------------------------------ warmup_cosine_lr

COSINE_HINT = (
    "step < W: peak * step / W; W <= step < E: min + (peak - min) * 0.5 * (1 + cos(pi * (step - W) / (E - W))); "
    "step >= E: min (E is an absolute step)"
)


@checks("warmup_cosine_lr")
def cosine_boundaries_closed_form(ex):
    """closed forms: 0 at step 0, peak at the end of warmup, (peak+min)/2 midway, min at the decay end and past it"""
    peak, floor, warmup, end = 3e-4, 3e-5, 100, 1100
    points = {0: 0.0, 1: peak / 100, 99: peak * 99 / 100, 100: peak, 600: (peak + floor) / 2, 1100: floor}
    points.update({1101: floor, 2000: floor, 10_000: floor})
    got = as_tensor(
        ex.warmup_cosine_lr(s, peak_lr=peak, min_lr=floor, warmup_steps=warmup, decay_end=end) for s in points
    )
    expect_close(
        got,
        as_tensor(points.values()),
        input=f"peak_lr={peak}, min_lr={floor}, warmup_steps={warmup}, decay_end={end}, steps {list(points)}",
        what="lr at those steps",
        hint=COSINE_HINT + "; past decay_end the cosine climbs back unless you return min_lr",
    )


@checks("warmup_cosine_lr")
def cosine_matches_transformers(ex):
    """every step up to the decay end equals transformers' get_cosine_with_min_lr_schedule_with_warmup"""
    optimization = transformers_optimization()
    for peak, floor, warmup, end in ((1e-3, 1e-4, 7, 40), (6e-4, 0.0, 0, 23), (2.0, 1.5, 13, 14), (5e-5, 5e-6, 1, 31)):
        optimizer = sgd(peak)
        scheduler = optimization.get_cosine_with_min_lr_schedule_with_warmup(
            optimizer, num_warmup_steps=warmup, num_training_steps=end, min_lr_rate=floor / peak
        )
        want = as_tensor(lr for (lr,) in driven(scheduler, optimizer, end + 1))
        got = as_tensor(
            ex.warmup_cosine_lr(s, peak_lr=peak, min_lr=floor, warmup_steps=warmup, decay_end=end)
            for s in range(end + 1)
        )
        expect_close(
            got,
            want,
            input=f"peak_lr={peak}, min_lr={floor}, warmup_steps={warmup}, decay_end={end}, steps 0..{end}",
            what="lr per step",
            hint=COSINE_HINT,
        )


@checks("warmup_cosine_lr")
def cosine_matches_torch_sequential(ex):
    """torch SequentialLR(LambdaLR warmup, CosineAnnealingLR) step by step to the end; the floor holds after it"""
    peak, floor, warmup, end, total = 2e-3, 2e-4, 9, 47, 90
    optimizer = sgd(peak)
    ramp = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: s / warmup)
    cosine = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=end - warmup, eta_min=floor)
    scheduler = torch.optim.lr_scheduler.SequentialLR(optimizer, [ramp, cosine], milestones=[warmup])
    torch_lrs = [lr for (lr,) in driven(scheduler, optimizer, total)]
    want = as_tensor(torch_lrs[: end + 1] + [floor] * (total - end - 1))  # CosineAnnealingLR is periodic: clamp it
    got = as_tensor(
        ex.warmup_cosine_lr(s, peak_lr=peak, min_lr=floor, warmup_steps=warmup, decay_end=end) for s in range(total)
    )
    expect_close(
        got,
        want,
        input=f"peak_lr={peak}, min_lr={floor}, warmup_steps={warmup}, decay_end={end}, steps 0..{total - 1}",
        what="lr per step",
        hint=COSINE_HINT,
    )


@checks("warmup_cosine_lr")
def cosine_refuses_bad_arguments(ex):
    """a decay end not after the warmup, a floor above the peak or below 0, a negative step: ValueError"""
    good = dict(peak_lr=1e-3, min_lr=1e-4, warmup_steps=10, decay_end=100)
    bad_cases = [
        (5, dict(good, decay_end=10), "decay_end == warmup_steps"),
        (5, dict(good, decay_end=4), "decay_end < warmup_steps"),
        (5, dict(good, warmup_steps=-1), "warmup_steps < 0"),
        (5, dict(good, min_lr=2e-3), "min_lr > peak_lr"),
        (5, dict(good, min_lr=-1e-5), "min_lr < 0"),
        (-1, good, "step < 0"),
    ]
    for step, kwargs, why in bad_cases:
        expect_refused(
            lambda step=step, kwargs=kwargs: ex.warmup_cosine_lr(step, **kwargs),
            input=f"step={step}, {kwargs} ({why})",
            hint="validate first: raise ValueError unless step >= 0, 0 <= warmup_steps < decay_end and "
            "0 <= min_lr <= peak_lr",
        )
    for step, kwargs in ((0, dict(good, min_lr=1e-3)), (3, dict(good, warmup_steps=0, decay_end=1))):
        got = ex.warmup_cosine_lr(step, **kwargs)
        expect(
            isinstance(got, (int, float)),
            "valid edge arguments were refused or gave no number",
            input=f"step={step}, {kwargs}",
            expected="a float",
            got=repr(got),
            hint="min_lr == peak_lr and warmup_steps == 0 are valid",
        )


# ------------------------------------------------------------------------------------------ wsd_lr

WSD_HINT = (
    "min = ratio * peak; warmup from min to peak; stable at peak; decay min + (peak - min) * s(p), "
    "p = (step - W - S) / D, s = 1 - p | 0.5 (1 + cos pi p) | 1 - sqrt(p); then min"
)


@checks("wsd_lr")
def wsd_matches_transformers(ex):
    """each decay shape, step by step past the end, equals transformers' get_wsd_schedule"""
    optimization = transformers_optimization()
    configs = [(4e-4, 5, 11, 9, 0.1), (1.0, 0, 3, 7, 0.0), (2e-3, 3, 0, 6, 0.25)]
    for decay_type in ("linear", "cosine", "1-sqrt"):
        for peak, warmup, stable, decay, ratio in configs:
            optimizer = sgd(peak)
            scheduler = optimization.get_wsd_schedule(
                optimizer,
                num_warmup_steps=warmup,
                num_stable_steps=stable,
                num_decay_steps=decay,
                min_lr_ratio=ratio,
                decay_type=decay_type,
            )
            total = warmup + stable + decay + 4
            want = as_tensor(lr for (lr,) in driven(scheduler, optimizer, total))
            kwargs = dict(
                peak_lr=peak,
                warmup_steps=warmup,
                stable_steps=stable,
                decay_steps=decay,
                min_lr_ratio=ratio,
                decay_type=decay_type,
            )
            got = as_tensor(ex.wsd_lr(s, **kwargs) for s in range(total))
            expect_close(got, want, input=f"{kwargs}, steps 0..{total - 1}", what="lr per step", hint=WSD_HINT)


@checks("wsd_lr")
def wsd_boundaries_closed_form(ex):
    """closed forms: floor at step 0, peak through the stable phase, s(1/4) in the decay, floor at the end and after"""
    peak, ratio, warmup, stable, decay = 1e-3, 0.1, 10, 50, 40
    floor = peak * ratio
    quarter = {"linear": 0.75, "cosine": 0.5 * (1 + math.cos(math.pi / 4)), "1-sqrt": 0.5}
    for decay_type, shape in quarter.items():
        points = {0: floor, 5: floor + (peak - floor) / 2, 10: peak, 35: peak, 59: peak, 60: peak}
        points.update({70: floor + (peak - floor) * shape, 100: floor, 101: floor, 5000: floor})
        kwargs = dict(
            peak_lr=peak,
            warmup_steps=warmup,
            stable_steps=stable,
            decay_steps=decay,
            min_lr_ratio=ratio,
            decay_type=decay_type,
        )
        got = as_tensor(ex.wsd_lr(s, **kwargs) for s in points)
        expect_close(
            got,
            as_tensor(points.values()),
            input=f"{kwargs}, steps {list(points)}",
            what="lr at those steps",
            hint=WSD_HINT + f" ({decay_type} at p = 1/4 gives {shape:.4f} of the way from min to peak)",
        )


@checks("wsd_lr")
def wsd_zero_length_phases(ex):
    """no warmup, no stable phase, or no decay (the floor right after the stable phase)"""
    peak = 5e-4
    cases = [
        (
            dict(warmup_steps=0, stable_steps=4, decay_steps=4),
            [peak] * 4 + [peak, peak * 0.75, peak * 0.5, peak * 0.25],
        ),
        (dict(warmup_steps=2, stable_steps=0, decay_steps=2), [0.0, peak / 2, peak, peak / 2, 0.0]),
        (dict(warmup_steps=2, stable_steps=3, decay_steps=0), [0.0, peak / 2, peak, peak, peak, 0.0, 0.0]),
    ]
    for lengths, want in cases:
        kwargs = dict(peak_lr=peak, min_lr_ratio=0.0, decay_type="linear", **lengths)
        got = as_tensor(ex.wsd_lr(s, **kwargs) for s in range(len(want)))
        expect_close(
            got,
            as_tensor(want),
            input=f"{kwargs}, steps 0..{len(want) - 1}",
            what="lr per step",
            hint="a phase of length 0 is simply skipped; a decay of 0 steps jumps to the floor",
        )


@checks("wsd_lr")
def wsd_refuses_bad_arguments(ex):
    """an unknown decay shape, a negative length or step, a floor ratio outside [0, 1]: ValueError"""
    good = dict(peak_lr=1e-3, warmup_steps=2, stable_steps=5, decay_steps=3, min_lr_ratio=0.1, decay_type="linear")
    bad_cases = [
        (4, dict(good, decay_type="exponential"), "unknown decay_type"),
        (4, dict(good, decay_type="sqrt"), "unknown decay_type"),
        (4, dict(good, warmup_steps=-1), "negative warmup"),
        (4, dict(good, stable_steps=-2), "negative stable phase"),
        (4, dict(good, decay_steps=-3), "negative decay"),
        (4, dict(good, min_lr_ratio=1.5), "ratio > 1"),
        (4, dict(good, min_lr_ratio=-0.1), "ratio < 0"),
        (-1, good, "negative step"),
    ]
    for step, kwargs, why in bad_cases:
        expect_refused(
            lambda step=step, kwargs=kwargs: ex.wsd_lr(step, **kwargs),
            input=f"step={step}, {kwargs} ({why})",
            hint="raise ValueError for an unknown decay_type (do not fall back to linear), negative lengths or "
            "step, and min_lr_ratio outside [0, 1]",
        )
    flat = dict(good, min_lr_ratio=1.0, decay_type="1-sqrt")
    got = as_tensor(ex.wsd_lr(s, **flat) for s in range(12))
    expect_close(
        got,
        as_tensor([1e-3] * 12),
        input=f"{flat}, steps 0..11 (a floor equal to the peak: a constant schedule)",
        what="lr per step",
        hint="min_lr_ratio = 1 is valid (0 <= ratio <= 1, both ends included) and gives a constant lr",
    )


# ------------------------------------------------------------------------------------------ inverse_sqrt_lr


@checks("inverse_sqrt_lr")
def inverse_sqrt_matches_transformers(ex):
    """step by step equal to transformers' get_inverse_sqrt_schedule (timescale = warmup)"""
    optimization = transformers_optimization()
    for peak, warmup in ((1e-3, 8), (7e-4, 1), (0.5, 33)):
        optimizer = sgd(peak)
        scheduler = optimization.get_inverse_sqrt_schedule(optimizer, num_warmup_steps=warmup)
        total = 4 * warmup + 25
        want = as_tensor(lr for (lr,) in driven(scheduler, optimizer, total))
        got = as_tensor(ex.inverse_sqrt_lr(s, peak_lr=peak, warmup_steps=warmup) for s in range(total))
        expect_close(
            got,
            want,
            input=f"peak_lr={peak}, warmup_steps={warmup}, steps 0..{total - 1}",
            what="lr per step",
            hint="step < W: peak * step / W; then peak * sqrt(W / step)",
        )


@checks("inverse_sqrt_lr")
def inverse_sqrt_is_the_noam_schedule(ex):
    """with peak = (d_model * W)^-1/2 it is the Transformer paper's d^-0.5 * min(t^-0.5, t * W^-1.5) for t >= 1"""
    d_model, warmup = 512, 4000
    peak = (d_model * warmup) ** -0.5
    steps = [1, 2, 999, 3999, 4000, 4001, 16_000, 100_000, 1_000_003]
    want = as_tensor(d_model**-0.5 * min(t**-0.5, t * warmup**-1.5) for t in steps)
    got = as_tensor(ex.inverse_sqrt_lr(t, peak_lr=peak, warmup_steps=warmup) for t in steps)
    expect_close(
        got,
        want,
        input=f"d_model={d_model}, warmup_steps={warmup}, peak_lr={peak:.6g}, steps {steps}",
        what="lr at those steps",
        hint="the decay is peak * sqrt(W / step): peak at W, peak / 2 at 4 W, peak / 10 at 100 W",
    )
    expect_close(
        as_tensor([ex.inverse_sqrt_lr(0, peak_lr=peak, warmup_steps=warmup)]),
        as_tensor([0.0]),
        input="step 0",
        what="lr at step 0",
        hint="the warmup starts at 0: peak * 0 / W",
    )


@checks("inverse_sqrt_lr")
def inverse_sqrt_refuses_bad_arguments(ex):
    """warmup_steps < 1 or a negative step: ValueError"""
    for step, warmup in ((5, 0), (5, -3), (-1, 10)):
        expect_refused(
            lambda step=step, warmup=warmup: ex.inverse_sqrt_lr(step, peak_lr=1e-3, warmup_steps=warmup),
            input=f"step={step}, warmup_steps={warmup}",
            hint="raise ValueError unless step >= 0 and warmup_steps >= 1 (sqrt(0 / step) would silently give 0)",
        )


# ------------------------------------------------------------------------------------------ make_lambda_lr


def reference_cosine_schedule(peak, floor, warmup, end):
    """The checks' own plain warmup + cosine, written from the formula (the schedule make_lambda_lr is given)."""

    def schedule(step):
        if step < warmup:
            return peak * step / warmup
        progress = min(1.0, (step - warmup) / (end - warmup))
        return floor + (peak - floor) * (1 + math.cos(math.pi * progress)) / 2

    return schedule


@checks("make_lambda_lr")
def lambda_lr_two_groups_match_transformers(ex):
    """two param groups (peak and peak/10): each follows transformers' cosine-with-min-lr scheduler, step by step"""
    optimization = transformers_optimization()
    peak, floor, warmup, end = 3e-4, 3e-5, 6, 30
    schedule = reference_cosine_schedule(peak, floor, warmup, end)
    optimizer = sgd(peak, peak / 10)
    scheduler = ex.make_lambda_lr(optimizer, schedule, peak)
    expect(
        isinstance(scheduler, torch.optim.lr_scheduler.LambdaLR),
        "make_lambda_lr did not return a LambdaLR",
        input="SGD with groups lr=3e-4 and 3e-5",
        expected="torch.optim.lr_scheduler.LambdaLR",
        got=type(scheduler).__name__,
        hint="return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)",
    )
    got = torch.tensor(driven(scheduler, optimizer, end + 1), dtype=torch.float64)
    twin = sgd(peak, peak / 10)
    theirs = optimization.get_cosine_with_min_lr_schedule_with_warmup(
        twin, num_warmup_steps=warmup, num_training_steps=end, min_lr_rate=floor / peak
    )
    want = torch.tensor(driven(theirs, twin, end + 1), dtype=torch.float64)
    expect_close(
        got,
        want,
        input=f"SGD groups lr=({peak}, {peak / 10}), warmup+cosine W={warmup} E={end} min={floor}, steps 0..{end}",
        what="lr of (group 0, group 1) before each optimizer.step()",
        hint="the factor is schedule(step) / peak_lr: LambdaLR multiplies it by each group's initial lr",
    )


@checks("make_lambda_lr")
def lambda_lr_first_step_and_wsd(ex):
    """the lr is schedule(0) right after construction and schedule(t) at step t (WSD against transformers)"""
    optimization = transformers_optimization()
    peak = 2e-3
    kwargs = dict(num_warmup_steps=3, num_stable_steps=4, num_decay_steps=5, min_lr_ratio=0.2, decay_type="cosine")
    twin = sgd(peak)
    theirs = optimization.get_wsd_schedule(twin, **kwargs)
    want = [lr for (lr,) in driven(theirs, twin, 15)]
    optimizer = sgd(peak)
    scheduler = ex.make_lambda_lr(optimizer, lambda step: want[min(step, 14)], peak)
    first = optimizer.param_groups[0]["lr"]
    expect_close(
        as_tensor([first]),
        as_tensor([want[0]]),
        input=f"SGD lr={peak}, WSD {kwargs}, right after make_lambda_lr",
        what="lr before the first step",
        hint="LambdaLR applies factor(0) in its constructor: schedule(0) / peak_lr, not 1",
    )
    got = as_tensor(lr for (lr,) in driven(scheduler, optimizer, 15))
    expect_close(
        got,
        as_tensor(want),
        input=f"SGD lr={peak}, WSD {kwargs}, steps 0..14",
        what="lr before each optimizer.step()",
        hint="factor(step) = schedule(step) / peak_lr, with the step LambdaLR passes (no +1)",
    )


@checks("make_lambda_lr")
def lambda_lr_resumes_from_state_dict(ex):
    """a run stopped after 11 steps and resumed from both state_dicts continues the same lrs as an unbroken run"""
    peak = 1e-3
    schedule = reference_cosine_schedule(peak, 1e-4, 4, 25)
    optimizer = sgd(peak, peak / 4)
    unbroken = driven(ex.make_lambda_lr(optimizer, schedule, peak), optimizer, 30)
    first = sgd(peak, peak / 4)
    first_scheduler = ex.make_lambda_lr(first, schedule, peak)
    driven(first_scheduler, first, 11)
    resumed = sgd(peak, peak / 4)
    resumed_scheduler = ex.make_lambda_lr(resumed, schedule, peak)  # build both, then load both (as HF Trainer)
    resumed.load_state_dict(first.state_dict())
    resumed_scheduler.load_state_dict(first_scheduler.state_dict())
    got = torch.tensor(driven(resumed_scheduler, resumed, 19), dtype=torch.float64)
    expect_close(
        got,
        torch.tensor(unbroken[11:], dtype=torch.float64),
        input="groups lr=(1e-3, 2.5e-4), warmup+cosine W=4 E=25; stop after 11 steps; new optimizer and scheduler, "
        "then both state_dicts loaded",
        what="lr of steps 11..29 after resuming",
        hint="the factor must depend on the step only (not on the optimizer's current lr, which the "
        "scheduler itself changes)",
    )
    want = torch.tensor([[schedule(s), schedule(s) / 4] for s in range(11, 30)], dtype=torch.float64)
    expect_close(
        got,
        want,
        input="groups lr=(1e-3, 2.5e-4), warmup+cosine W=4 E=25, resumed at step 11",
        what="lr of steps 11..29 against the schedule itself",
        hint="factor(step) = schedule(step) / peak_lr",
    )


@checks("make_lambda_lr")
def lambda_lr_refuses_bad_peak(ex):
    """peak_lr <= 0 is refused with ValueError (the factor would divide by it)"""
    for peak in (0.0, -1e-3):
        expect_refused(
            lambda peak=peak: ex.make_lambda_lr(sgd(1e-3), functools.partial(max, 0.0), peak),
            input=f"peak_lr={peak}",
            hint="raise ValueError unless peak_lr > 0",
        )
