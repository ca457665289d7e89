"""Checks for p02.distillation. References: `F.kl_div(input, target, log_target=True, reduction="sum")` divided by
the number of counted positions (forward KL with input = the student's log-probs; reverse KL with the roles
swapped); `F.kl_div` against a dense teacher scattered from the top-k (zeros elsewhere, log_target=False); float64
closed forms (two-class KL values by hand, the gradient T (q_T - p_T) of T^2 KL); `F.cross_entropy` with
ignore_index; `torch.autograd.gradcheck`."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from llm_algo.check import (
    Checks,
    describe,
    expect,
    expect_close,
    expect_gradcheck,
    expect_tensor,
    expect_value_error,
    one_thread,
)

checks = Checks("p02.distillation")
checks.restrict(
    "distillation_kl",
    "topk_distillation_loss",
    forbid=[F.kl_div, torch.kl_div, nn.KLDivLoss],
    instead="write the KL from log_softmax: sum of p * (log p - log q) (F.kl_div is the checks' reference)",
)

HINT_KL = "forward: sum_v p_T (log p_T - log q_T); reverse: sum_v q_T (log q_T - log p_T); mean over positions; * T^2"


def reference_kl(student, teacher, temperature, direction, mask=None) -> torch.Tensor:
    """F.kl_div(input, target, log_target=True) = sum target.exp() * (target - input): KL(target || input)."""
    log_q = torch.log_softmax(student.double() / temperature, -1)
    log_p = torch.log_softmax(teacher.double() / temperature, -1)
    inp, target = (log_q, log_p) if direction == "forward" else (log_p, log_q)
    per_position = F.kl_div(inp, target, log_target=True, reduction="none").sum(-1)
    if mask is None:
        mask = torch.ones(per_position.shape, dtype=torch.bool)
    mask = mask.bool()
    return per_position[mask].sum() / max(int(mask.sum()), 1) * temperature**2


def baseline_kl(student, teacher, temperature, direction, mask=None) -> torch.Tensor:
    """The same in float32 (what a straightforward float32 implementation computes)."""
    log_q = torch.log_softmax(student.float() / temperature, -1)
    log_p = torch.log_softmax(teacher.float() / temperature, -1)
    inp, target = (log_q, log_p) if direction == "forward" else (log_p, log_q)
    per_position = F.kl_div(inp, target, log_target=True, reduction="none").sum(-1)
    if mask is None:
        mask = torch.ones(per_position.shape, dtype=torch.bool)
    mask = mask.bool()
    return per_position[mask].sum() / max(int(mask.sum()), 1) * temperature**2


def as_1(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(1)


# ------------------------------------------------------------------------------------------ distillation_kl


@checks("distillation_kl")
def two_class_closed_forms(ex):
    """p = (1/4, 3/4), q = (1/2, 1/2): forward KL 3/4 log(3/2) - 1/4 log 2, reverse 1/2 log(4/3) + 1/2 log(2/3)... at T"""
    teacher = torch.tensor([[0.0, math.log(3.0)]], dtype=torch.float64)
    student = torch.tensor([[1.3, 1.3]], dtype=torch.float64)  # uniform whatever the temperature
    p = (0.25, 0.75)
    forward = sum(pv * math.log(pv / 0.5) for pv in p)
    reverse = sum(0.5 * math.log(0.5 / pv) for pv in p)
    label = "teacher logits [0, log 3] (p = 1/4, 3/4), student logits [1.3, 1.3] (q uniform)"
    for direction, want in (("forward", forward), ("reverse", reverse)):
        got = ex.distillation_kl(student, teacher, direction=direction)
        expect_tensor(got, shape=(), dtype=torch.float64, input=label, what=f"{direction} KL")
        expect_close(
            as_1(got),
            torch.tensor([want], dtype=torch.float64),
            input=label + f", {direction}",
            what="KL",
            hint=HINT_KL,
        )
    # at T = 2 the teacher becomes softmax([0, log 3] / 2) = (1, sqrt 3) / (1 + sqrt 3)
    s = math.sqrt(3.0)
    p2 = (1 / (1 + s), s / (1 + s))
    want = 4 * sum(pv * math.log(pv / 0.5) for pv in p2)
    got = ex.distillation_kl(student, teacher, temperature=2.0)
    expect_close(
        as_1(got),
        torch.tensor([want], dtype=torch.float64),
        input=label + ", T = 2, forward: 4 * KL((1, sqrt 3)/(1 + sqrt 3) || uniform)",
        what="KL",
        hint="divide both logits by T before the softmax, and multiply the KL by T**2",
    )


@checks("distillation_kl")
@one_thread()
def matches_kl_div(ex):
    """random logits (B, L, V) and (N, V), T in 0.5, 1, 2, 4, both directions, masks: F.kl_div(log_target=True)"""
    cases = [((2, 5, 11), 1.0, "forward", None), ((7, 33), 2.0, "reverse", None), ((3, 4, 50), 4.0, "forward", True),
             ((1, 1, 9), 0.5, "reverse", True), ((4, 6, 17), 2.0, "reverse", True)]  # fmt: skip
    for shape, temperature, direction, use_mask in cases:
        for dtype in (torch.float64, torch.float32, torch.bfloat16):
            student = (torch.randn(shape, dtype=torch.float64) * 3).to(dtype)
            teacher = (torch.randn(shape, dtype=torch.float64) * 3).to(dtype)
            mask = (torch.rand(shape[:-1]) < 0.6) if use_mask else None
            if mask is not None:
                mask.view(-1)[0] = True
            label = (
                describe(student_logits=student)
                + f", T={temperature}, {direction}"
                + (f", mask keeps {int(mask.sum())} of {mask.numel()}" if mask is not None else "")
            )
            got = ex.distillation_kl(student, teacher, temperature, direction, mask)
            want_dtype = torch.float64 if dtype == torch.float64 else torch.float32
            expect_tensor(got, shape=(), dtype=want_dtype, input=label, what="KL", hint="compute in float32 at least")
            expect_close(
                as_1(got),
                as_1(reference_kl(student, teacher, temperature, direction, mask)),
                baseline=None
                if dtype == torch.float64
                else as_1(baseline_kl(student, teacher, temperature, direction, mask)),
                input=label,
                what="KL",
                hint=HINT_KL,
            )


@checks("distillation_kl")
@one_thread()
def gradient_is_t_times_q_minus_p(ex):
    """d(T^2 KL(p_T || q_T))/dz = T (q_T - p_T) / positions; gradcheck of both directions in float64"""
    student = torch.randn(3, 8, dtype=torch.float64)
    teacher = torch.randn(3, 8, dtype=torch.float64) * 2
    for temperature in (1.0, 3.0):
        z = student.clone().requires_grad_(True)
        (grad,) = torch.autograd.grad(ex.distillation_kl(z, teacher, temperature), z)
        want = temperature * (torch.softmax(student / temperature, -1) - torch.softmax(teacher / temperature, -1)) / 3
        expect_close(
            grad,
            want,
            input=describe(student_logits=student) + f", T={temperature}, forward",
            what="d loss / d student_logits",
            hint="the T**2 factor turns the 1/T of the chain rule into T (q_T - p_T); mean over the 3 positions",
        )
    for direction in ("forward", "reverse"):
        expect_gradcheck(
            lambda z, t, direction=direction: ex.distillation_kl(z, t, 2.0, direction),
            (student.clone().requires_grad_(True), teacher.clone().requires_grad_(True)),
            input=describe(student_logits=student) + f", T=2, {direction}",
            hint="build the KL from differentiable ops on both logits",
        )


@checks("distillation_kl")
def properties_and_nan_padding(ex):
    """KL(p||p) = 0, invariant to per-row logit shifts, forward != reverse; NaN logits at masked positions ignored"""
    student = torch.randn(4, 6, 10, dtype=torch.float64) * 2
    teacher = torch.randn(4, 6, 10, dtype=torch.float64) * 2
    label = describe(student_logits=student)
    same = ex.distillation_kl(teacher, teacher + 5.0, 2.0)
    expect(
        abs(float(same)) < 1e-12,
        "KL of a distribution with itself is not 0",
        input=label + ", student = teacher + 5 (the same distribution)",
        expected="0",
        got=f"{float(same):.3g}",
        hint="use log_softmax on both: adding a constant to logits does not change the distribution",
    )
    forward = float(ex.distillation_kl(student, teacher, direction="forward"))
    reverse = float(ex.distillation_kl(student, teacher, direction="reverse"))
    expect(
        forward > 0 and reverse > 0 and abs(forward - reverse) > 1e-3,
        "forward and reverse KL should be positive and differ",
        input=label,
        expected=f"forward {float(reference_kl(student, teacher, 1.0, 'forward')):.4f}, "
        f"reverse {float(reference_kl(student, teacher, 1.0, 'reverse')):.4f}",
        got=f"forward {forward:.4f}, reverse {reverse:.4f}",
        hint="forward weights by the teacher's probabilities, reverse by the student's",
    )
    mask = torch.rand(4, 6) < 0.5
    mask[0, 0] = True
    poisoned_s, poisoned_t = student.clone(), teacher.clone()
    poisoned_s[~mask] = float("nan")
    poisoned_t[~mask] = float("inf")
    got = ex.distillation_kl(poisoned_s, poisoned_t, 2.0, "reverse", mask)
    expect_close(
        as_1(got),
        as_1(reference_kl(student, teacher, 2.0, "reverse", mask)),
        input=label + f", NaN/inf logits at the {int((~mask).sum())} masked positions, T=2, reverse",
        what="KL",
        hint="select the counted positions with torch.where (0 * NaN is NaN); divide by their number",
    )
    empty = ex.distillation_kl(student, teacher, 1.0, "forward", torch.zeros(4, 6, dtype=torch.bool))
    expect(
        float(empty) == 0.0,
        "no counted position does not give 0",
        input=label + ", mask all False",
        expected="0.0",
        got=f"{float(empty)}",
        hint="divide by the number of counted positions clamped to at least 1",
    )


@checks("distillation_kl")
def refuses_bad_arguments(ex):
    """temperature <= 0, an unknown direction, mismatched logits or mask: ValueError"""
    s, t = torch.randn(2, 3, 5), torch.randn(2, 3, 5)
    for call, what in (
        (lambda: ex.distillation_kl(s, t, 0.0), "temperature=0"),
        (lambda: ex.distillation_kl(s, t, -1.0), "temperature=-1"),
        (lambda: ex.distillation_kl(s, t, 1.0, "backward"), "direction='backward'"),
        (lambda: ex.distillation_kl(s, torch.randn(2, 3, 6)), "teacher (2, 3, 6) for student (2, 3, 5)"),
        (lambda: ex.distillation_kl(s, t, 1.0, "forward", torch.ones(2, 5)), "mask (2, 5) for logits (2, 3, 5)"),
    ):
        expect_value_error(call, input=what, hint="validate direction, temperature > 0 and the shapes first")


# ------------------------------------------------------------------------------------------ topk_distillation_loss


def topk_of(teacher_logits, k, shuffle=True):
    """(ids, full-vocabulary log-probs) of the teacher's top k, in a random order per position."""
    logprobs = torch.log_softmax(teacher_logits.double(), -1)
    values, ids = logprobs.topk(k, dim=-1)
    if shuffle:
        order = torch.argsort(torch.rand(ids.shape), dim=-1)
        values, ids = values.gather(-1, order), ids.gather(-1, order)
    return ids, values


def reference_topk(student, ids, logprobs, mask=None) -> torch.Tensor:
    """F.kl_div against a dense target: the renormalised top-k scattered into zeros (0 log 0 = 0 in kl_div)."""
    p = torch.softmax(logprobs.double(), -1)
    dense = torch.zeros(student.shape, dtype=torch.float64).scatter(-1, ids, p)
    log_q = torch.log_softmax(student.double(), -1)
    per_position = F.kl_div(log_q, dense, reduction="none").sum(-1)
    if mask is None:
        mask = torch.ones(per_position.shape, dtype=torch.bool)
    mask = mask.bool()
    return per_position[mask].sum() / max(int(mask.sum()), 1)


@checks("topk_distillation_loss")
def full_vocabulary_equals_forward_kl(ex):
    """k = V (shuffled): the top-k loss equals the dense forward KL at T = 1"""
    student = torch.randn(3, 4, 12, dtype=torch.float64) * 2
    teacher = torch.randn(3, 4, 12, dtype=torch.float64) * 2
    ids, logprobs = topk_of(teacher, 12)
    label = describe(student_logits=student) + ", k = V = 12, ids in a random order"
    got = ex.topk_distillation_loss(student, ids, logprobs)
    expect_tensor(got, shape=(), dtype=torch.float64, input=label, what="loss")
    expect_close(
        as_1(got),
        as_1(reference_kl(student, teacher, 1.0, "forward")),
        input=label,
        what="loss",
        hint="gather the student's full-vocabulary log-probs at the k ids (along the last axis)",
    )


@checks("topk_distillation_loss")
def matches_scattered_dense_target(ex):
    """k < V, unnormalised log-probs, masks, float32 and bf16 students: F.kl_div on the scattered renormalised teacher"""
    for shape, k, dtype, use_mask in (((2, 7, 40), 5, torch.float64, False), ((9, 25), 1, torch.float32, True),
                                      ((2, 3, 64), 16, torch.bfloat16, True)):  # fmt: skip
        student = (torch.randn(shape, dtype=torch.float64) * 3).to(dtype)
        teacher = torch.randn(shape, dtype=torch.float64) * 3
        ids, logprobs = topk_of(teacher, k)
        logprobs = logprobs - 2.5  # an offset the renormalisation must remove
        mask = (torch.rand(shape[:-1]) < 0.7) if use_mask else None
        if mask is not None:
            mask.view(-1)[0] = True
        label = (
            describe(student_logits=student)
            + f", k={k}, stored log-probs offset by -2.5"
            + (f", mask keeps {int(mask.sum())}" if mask is not None else "")
        )
        got = ex.topk_distillation_loss(student, ids, logprobs, mask)
        expect_tensor(
            got, shape=(), dtype=torch.float64 if dtype == torch.float64 else torch.float32, input=label, what="loss"
        )
        baseline = None
        if dtype != torch.float64:
            p = torch.softmax(logprobs.float(), -1)
            log_q = torch.log_softmax(student.float(), -1).gather(-1, ids)
            per = (p * (p.log() - log_q)).sum(-1)
            m = mask if mask is not None else torch.ones(per.shape, dtype=torch.bool)
            baseline = as_1(per[m].sum() / m.sum())
        expect_close(
            as_1(got),
            as_1(reference_topk(student, ids, logprobs, mask)),
            baseline=baseline,
            input=label,
            what="loss",
            hint="renormalise the teacher: log_softmax over its k log-probs; the student stays normalised over all V",
        )


@checks("topk_distillation_loss")
@one_thread()
def gradients_and_padding(ex):
    """gradcheck in float64; NaN student logits at masked positions do not leak"""
    student = torch.randn(2, 3, 9, dtype=torch.float64)
    ids, logprobs = topk_of(torch.randn(2, 3, 9, dtype=torch.float64), 4)
    expect_gradcheck(
        lambda z, lp: ex.topk_distillation_loss(z, ids, lp),
        (student.clone().requires_grad_(True), logprobs.clone().requires_grad_(True)),
        input=describe(student_logits=student) + ", k=4",
        hint="build the loss from differentiable ops (log_softmax, gather, exp, sum)",
    )
    mask = torch.tensor([[True, False, True], [False, True, False]])
    poisoned = student.clone()
    poisoned[~mask] = float("nan")
    got = ex.topk_distillation_loss(poisoned, ids, logprobs, mask)
    expect_close(
        as_1(got),
        as_1(reference_topk(student, ids, logprobs, mask)),
        input=describe(student_logits=student) + ", k=4, NaN logits at the 3 masked positions",
        what="loss",
        hint="torch.where(mask, per_position, 0), then divide by the number of counted positions",
    )
    one = torch.zeros(2, 3, dtype=torch.bool)
    one[1, 1] = True
    for m, what in ((one, "a single counted position"), (torch.zeros(2, 3, dtype=torch.bool), "no counted position")):
        expect_close(
            as_1(ex.topk_distillation_loss(student, ids, logprobs, m)),
            as_1(reference_topk(student, ids, logprobs, m)) if bool(m.any()) else torch.zeros(1, dtype=torch.float64),
            input=describe(student_logits=student) + f", k=4, {what}",
            what="loss",
            hint="divide by the number of counted positions clamped to at least 1 (0 when none counts)",
        )


@checks("topk_distillation_loss")
def refuses_bad_ids_and_shapes(ex):
    """ids >= V or < 0, ids and log-probs of different shapes, positions that do not match: ValueError"""
    student = torch.randn(2, 3, 10)
    ids, logprobs = topk_of(torch.randn(2, 3, 10), 4)
    bad_high, bad_low = ids.clone(), ids.clone()
    bad_high[1, 2, 0] = 10
    bad_low[0, 0, 1] = -1
    for call, what in (
        (lambda: ex.topk_distillation_loss(student, bad_high, logprobs), "a top-k id equal to V = 10"),
        (lambda: ex.topk_distillation_loss(student, bad_low, logprobs), "a top-k id of -1"),
        (lambda: ex.topk_distillation_loss(student, ids, logprobs[..., :3]), "ids (2, 3, 4) with log-probs (2, 3, 3)"),
        (lambda: ex.topk_distillation_loss(student[:, :2], ids, logprobs), "logits for 2 positions, top-k for 3"),
        (
            lambda: ex.topk_distillation_loss(student, ids, logprobs, torch.ones(3, 2, dtype=torch.bool)),
            "mask (3, 2) for positions (2, 3)",
        ),
    ):
        expect_value_error(call, input=what, hint="check 0 <= ids < V and the shapes before gathering")


# ------------------------------------------------------------------------------------------ distillation_loss


def reference_mixture(student, teacher, labels, alpha, temperature, ignore_index=-100):
    counted = labels != ignore_index
    soft = reference_kl(student, teacher, temperature, "forward", counted)
    no_label = int(counted.sum()) == 0
    hard = (
        torch.tensor(0.0, dtype=torch.float64)
        if no_label
        else F.cross_entropy(student.double()[counted], labels[counted])
    )
    return alpha * soft + (1 - alpha) * hard


@checks("distillation_loss")
def matches_kl_div_plus_cross_entropy(ex):
    """alpha * T^2 KL + (1 - alpha) * CE over labelled positions: F.kl_div and F.cross_entropy, several alpha and T"""
    for alpha, temperature, ignore_index in ((0.5, 2.0, -100), (0.9, 4.0, -100), (0.2, 1.0, 0)):
        student = torch.randn(3, 7, 20, dtype=torch.float64) * 2
        teacher = torch.randn(3, 7, 20, dtype=torch.float64) * 2
        labels = torch.randint(1, 20, (3, 7))
        labels[0, :2] = ignore_index
        labels[2, 5:] = ignore_index
        label = (
            describe(student_logits=student)
            + f", alpha={alpha}, T={temperature}, ignore_index={ignore_index} (5 ignored)"
        )
        got = ex.distillation_loss(student, teacher, labels, alpha, temperature, ignore_index)
        expect_tensor(got, shape=(), dtype=torch.float64, input=label, what="loss")
        expect_close(
            as_1(got),
            as_1(reference_mixture(student, teacher, labels, alpha, temperature, ignore_index)),
            input=label,
            what="loss",
            hint="alpha weights the distillation term (with T**2), 1 - alpha the cross-entropy; both over labelled positions",
        )


@checks("distillation_loss")
def bfloat16_logits_and_one_label(ex):
    """bf16 logits: a float32 loss as close as a float32 computation; a single labelled position is its own mean"""
    student = (torch.randn(2, 9, 30, dtype=torch.float64) * 4).to(torch.bfloat16)
    teacher = (torch.randn(2, 9, 30, dtype=torch.float64) * 4).to(torch.bfloat16)
    labels = torch.randint(0, 30, (2, 9))
    label = describe(student_logits=student) + ", alpha=0.4, T=2"
    got = ex.distillation_loss(student, teacher, labels, 0.4, 2.0)
    expect_tensor(got, shape=(), dtype=torch.float32, input=label, what="loss", hint="compute both terms in float32")
    counted = labels != -100
    baseline = 0.4 * baseline_kl(student, teacher, 2.0, "forward", counted) + 0.6 * F.cross_entropy(
        student.float().reshape(-1, 30), labels.reshape(-1)
    )
    expect_close(
        as_1(got),
        as_1(reference_mixture(student, teacher, labels, 0.4, 2.0)),
        baseline=as_1(baseline),
        input=label,
        what="loss",
        hint="upcast the logits to float32 for the cross-entropy as well as for the KL",
    )
    single = torch.full((2, 9), -100)
    single[1, 4] = 7
    student64, teacher64 = student.double(), teacher.double()
    expect_close(
        as_1(ex.distillation_loss(student64, teacher64, single, 0.4, 2.0)),
        as_1(reference_mixture(student64, teacher64, single, 0.4, 2.0)),
        input=describe(student_logits=student64) + ", one labelled position, alpha=0.4, T=2",
        what="loss",
        hint="divide the summed cross-entropy by the number of labelled positions (here 1)",
    )


@checks("distillation_loss")
def extremes_of_alpha(ex):
    """alpha = 0 is the cross-entropy alone, alpha = 1 the distillation term alone; no labelled position gives 0"""
    student = torch.randn(2, 5, 13, dtype=torch.float64)
    teacher = torch.randn(2, 5, 13, dtype=torch.float64)
    labels = torch.randint(0, 13, (2, 5))
    labels[1, 3:] = -100
    label = describe(student_logits=student) + ", T=3"
    hard = F.cross_entropy(student[labels != -100], labels[labels != -100])
    expect_close(
        as_1(ex.distillation_loss(student, teacher, labels, 0.0, 3.0)),
        as_1(hard),
        input=label + ", alpha=0",
        what="loss",
        hint="alpha = 0: only the cross-entropy on the labelled positions",
    )
    expect_close(
        as_1(ex.distillation_loss(student, teacher, labels, 1.0, 3.0)),
        as_1(reference_kl(student, teacher, 3.0, "forward", labels != -100)),
        input=label + ", alpha=1",
        what="loss",
        hint="alpha = 1: only T**2 * forward KL over the labelled positions",
    )
    none = ex.distillation_loss(student, teacher, torch.full((2, 5), -100), 0.5, 3.0)
    expect(
        bool(torch.isfinite(none)) and float(none) == 0.0,
        "a batch without labelled positions does not give 0",
        input=label + ", every label -100",
        expected="0.0",
        got=f"{float(none)}",
        hint="sum the cross-entropy (reduction='sum') and divide by the count clamped to 1; 'mean' gives NaN here",
    )


@checks("distillation_loss")
@one_thread()
def gradients_and_refusals(ex):
    """gradcheck in float64 over the student's logits; alpha outside [0, 1] is refused"""
    student = torch.randn(2, 3, 7, dtype=torch.float64)
    teacher = torch.randn(2, 3, 7, dtype=torch.float64)
    labels = torch.tensor([[1, -100, 4], [6, 0, -100]])
    expect_gradcheck(
        lambda z: ex.distillation_loss(z, teacher, labels, 0.3, 2.0),
        (student.clone().requires_grad_(True),),
        input=describe(student_logits=student) + ", alpha=0.3, T=2",
        hint="both terms must be differentiable in the student's logits",
    )
    for alpha in (-0.1, 1.5):
        expect_value_error(
            lambda alpha=alpha: ex.distillation_loss(student, teacher, labels, alpha, 2.0),
            input=f"alpha={alpha}",
            hint="refuse alpha outside [0, 1]",
        )
