"""Checks for p02.cross_entropy. References: `torch.logsumexp` and `F.cross_entropy` in float64 (with
`ignore_index`, `label_smoothing` and `reduction="none"`), the PaLM z-loss written from those builtins, closed forms
for two classes, and float64 autograd through `F.cross_entropy` for the gradient."""

import math

import torch
import torch.nn.functional as F

from llm_algo.check import Checks, describe, expect, expect_close, expect_gradcheck, expect_tensor
from llm_algo.check.restrictions import AUTOGRAD, CROSS_ENTROPY, LOGSUMEXP, SOFTMAX

checks = Checks("p02.cross_entropy")
checks.restrict(
    "logsumexp",
    forbid=[*LOGSUMEXP, *SOFTMAX],
    instead="m + log(sum(exp(x - m))) with the row max m, from amax, exp, sum and log (torch.logsumexp is the reference)",
)
checks.restrict(
    "cross_entropy",
    forbid=[*CROSS_ENTROPY, *LOGSUMEXP, *SOFTMAX],
    instead="build the loss from your logsumexp and a gather of the target logits (F.cross_entropy is the reference)",
)
checks.restrict(
    "cross_entropy_grad",
    forbid=[*CROSS_ENTROPY, *LOGSUMEXP, *AUTOGRAD],
    instead="write softmax - target distribution (+ the z-loss term) by hand, from your logsumexp",
)

LOW_PRECISION = [torch.float16, torch.bfloat16]
SHAPES = [((1, 7), 7), ((3, 5), 64), ((37,), 129), ((2, 1), 11)]  # (target shape, V): (B, S, V) and (N, V)
HINT_LSE = "subtract the row max before exp and add it back: m + log(sum(exp(x - m)))"


def random_logits(target_shape, vocab, dtype=torch.float32, scale=3.0):
    return (torch.randn(*target_shape, vocab, dtype=torch.float64) * scale).to(dtype)


def random_targets(target_shape, vocab, ignore_index=-100, ignored_fraction=0.3):
    targets = torch.randint(0, vocab, target_shape)
    ignored = torch.rand(target_shape) < ignored_fraction
    ignored.view(-1)[0] = False  # at least one token counts
    return torch.where(ignored, torch.full_like(targets, ignore_index), targets)


def reference_loss(logits, targets, ignore_index=-100, label_smoothing=0.0, z_loss_weight=0.0, reduction="mean"):
    """F.cross_entropy plus the PaLM z-loss, averaged over the valid tokens (in logits' dtype)."""
    V = logits.shape[-1]
    per_token = F.cross_entropy(
        logits.reshape(-1, V),
        targets.reshape(-1),
        ignore_index=ignore_index,
        label_smoothing=label_smoothing,
        reduction="none",
    )
    valid = targets.reshape(-1) != ignore_index
    z = torch.logsumexp(logits.reshape(-1, V), dim=-1).pow(2) * valid
    per_token = per_token + z_loss_weight * z
    if reduction == "none":
        return per_token.reshape(targets.shape)
    return per_token.sum() / valid.sum()


def loss_oracle_and_baseline(logits, targets, **options):
    """float64 oracle on the same (rounded) logits, and the float32 computation a framework does."""
    return reference_loss(logits.double(), targets, **options), reference_loss(logits.float(), targets, **options)


def loss_dtype(logits):
    return torch.promote_types(logits.dtype, torch.float32)


# ------------------------------------------------------------------------------------------ logsumexp


@checks("logsumexp")
def hand_checkable_rows(ex):
    """logsumexp([0, ln 2, ln 3]) = ln 6; logsumexp([5, 5]) = 5 + ln 2"""
    x = torch.tensor([[0.0, math.log(2.0), math.log(3.0)], [5.0, 5.0, float("-inf")]], dtype=torch.float64)
    expect_close(
        ex.logsumexp(x),
        torch.tensor([math.log(6.0), 5.0 + math.log(2.0)], dtype=torch.float64),
        input="x=[[0, ln 2, ln 3], [5, 5, -inf]]",
        hint=HINT_LSE,
    )


@checks("logsumexp")
def matches_torch_logsumexp(ex):
    """random (..., V) inputs, several shapes, fp32/fp16/bf16/fp64 vs torch.logsumexp (float64 oracle)"""
    for shape in [(1, 1), (4, 129), (2, 3, 50), (7, 1000)]:
        for dtype in [torch.float32, torch.float64, *LOW_PRECISION]:
            x = (torch.randn(shape, dtype=torch.float64) * 4).to(dtype)
            got = ex.logsumexp(x)
            label = describe(x=x)
            expect_tensor(got, shape=shape[:-1], dtype=dtype, input=label, hint="reduce the last dimension only")
            expect_close(
                got,
                torch.logsumexp(x.double(), dim=-1),
                baseline=torch.logsumexp(x, dim=-1),
                input=label,
                hint=HINT_LSE,
            )


@checks("logsumexp")
def huge_logits_do_not_overflow(ex):
    """logits up to ±1e4 in float32 and ±6e4 in float16 and bfloat16 (exp overflows at 88, 11 and 88)"""
    for dtype, scale in ((torch.float32, 1e4), (torch.float16, 2e4), (torch.bfloat16, 1e5)):
        x = (torch.randn(6, 300, dtype=torch.float64) * scale).clamp(-6e4, 6e4).to(dtype)
        x[0, 3] = 6e4  # one dominating logit
        got = ex.logsumexp(x)
        label = describe(x=x) + f", |x| up to {float(x.abs().max()):.3g}"
        expect(
            bool(torch.isfinite(got).all()),
            "inf or nan for large logits",
            input=label,
            expected="finite values (about the row max)",
            got=str(got[:4].tolist()),
            hint=HINT_LSE,
        )
        expect_close(
            got, torch.logsumexp(x.double(), dim=-1), baseline=torch.logsumexp(x, dim=-1), input=label, hint=HINT_LSE
        )


@checks("logsumexp")
def low_precision_log_probabilities(ex):
    """fp16/bf16 log-probabilities (logsumexp about 0): computed in float32, rounded once (no baseline)"""
    for dtype in LOW_PRECISION:
        x = torch.log_softmax(torch.randn(6, 200, dtype=torch.float64) * 2, dim=-1).to(dtype)
        expect_close(
            ex.logsumexp(x),
            torch.logsumexp(x.double(), dim=-1),
            input=describe(x=x) + " = log_softmax of random logits, compared without a low-precision baseline",
            hint="xc = x.to(torch.promote_types(x.dtype, torch.float32)): in fp16 every exp and the log are rounded, "
            "and a result near 0 shows it",
        )


@checks("logsumexp")
def fully_masked_rows(ex):
    """a row of all -inf gives -inf (not nan); a row with one finite entry gives that entry"""
    x = torch.randn(3, 17, dtype=torch.float64)
    x[0] = float("-inf")
    x[1, 1:] = float("-inf")
    got = ex.logsumexp(x)
    label = describe(x=x) + ", row 0 all -inf, row 1 one finite entry"
    expect(
        not bool(got.isnan().any()),
        "nan for a fully masked row",
        input=label,
        expected=str(torch.logsumexp(x, dim=-1).tolist()),
        got=str(got.tolist()),
        hint="when the row max is -inf, subtract 0 instead: -inf - (-inf) is nan",
    )
    expect_close(got, torch.logsumexp(x, dim=-1), input=label, hint=HINT_LSE)


# ------------------------------------------------------------------------------------------ cross_entropy


@checks("cross_entropy")
def two_classes_closed_form(ex):
    """logits [[0, 1]], target 0: loss = ln(1 + e); with smoothing 0.2: 0.9 ln(1 + e) + 0.1 ln(1 + e^-1)"""
    logits = torch.tensor([[0.0, 1.0]], dtype=torch.float64)
    targets = torch.tensor([0])
    a, b = math.log(1 + math.e), math.log(1 + math.exp(-1))
    expect_close(
        ex.cross_entropy(logits, targets),
        torch.tensor(a, dtype=torch.float64),
        input="logits=[[0, 1]], targets=[0]",
        hint="loss = logsumexp(x) - x[target]",
    )
    expect_close(
        ex.cross_entropy(logits, targets, label_smoothing=0.2),
        torch.tensor(0.9 * a + 0.1 * b, dtype=torch.float64),
        input="logits=[[0, 1]], targets=[0], label_smoothing=0.2",
        hint="q = (1 - eps) one_hot + eps / V, with the uniform part over all V classes (target included)",
    )


@checks("cross_entropy")
def matches_f_cross_entropy(ex):
    """(B, S, V) and (N, V) shapes, ~30% ignored tokens, fp32/fp64/fp16/bf16, mean and none, vs F.cross_entropy"""
    for target_shape, vocab in SHAPES:
        for dtype in [torch.float32, torch.float64, *LOW_PRECISION]:
            logits = random_logits(target_shape, vocab, dtype)
            targets = random_targets(target_shape, vocab)
            for reduction in ("mean", "none"):
                got = ex.cross_entropy(logits, targets, reduction=reduction)
                oracle, baseline = loss_oracle_and_baseline(logits, targets, reduction=reduction)
                label = describe(logits=logits, targets=targets) + f", reduction={reduction!r}"
                expect_tensor(
                    got,
                    shape=oracle.shape,
                    dtype=loss_dtype(logits),
                    input=label,
                    hint="compute and return in promote_types(logits.dtype, float32); 'none' keeps targets' shape",
                )
                expect_close(
                    got,
                    oracle,
                    baseline=baseline,
                    input=label,
                    hint="mean over tokens whose target != ignore_index only; ignored tokens contribute 0",
                )


@checks("cross_entropy")
def ignore_index_edge_cases(ex):
    """a custom ignore_index, one valid token among many ignored, and every token ignored (nan like F.cross_entropy)"""
    logits = random_logits((4, 6), 23, torch.float64)
    targets = torch.randint(0, 23, (4, 6))
    custom = targets.clone()
    custom[:, ::2] = 7  # ignore_index=7: a real class id used as the ignore marker
    expect_close(
        ex.cross_entropy(logits, custom, ignore_index=7),
        reference_loss(logits, custom, ignore_index=7),
        input=describe(logits=logits, targets=custom, ignore_index=7),
        hint="use the ignore_index argument, not a hard-coded -100",
    )
    one = torch.full_like(targets, -100)
    one[2, 3] = 5
    expect_close(
        ex.cross_entropy(logits, one),
        reference_loss(logits, one),
        input=describe(logits=logits) + ", one valid token among 24",
        hint="divide by the number of valid tokens, not by all tokens",
    )
    got = ex.cross_entropy(logits, torch.full_like(targets, -100))
    expect(
        isinstance(got, torch.Tensor) and got.numel() == 1 and bool(got.isnan()),
        "every token ignored must give nan (0 / 0), as F.cross_entropy does",
        input=describe(logits=logits) + ", all targets -100",
        expected="nan",
        got=str(got.tolist() if isinstance(got, torch.Tensor) else got),
        hint="return loss.sum() / valid.sum() without special-casing",
    )


@checks("cross_entropy")
def label_smoothing_matches_torch(ex):
    """label_smoothing 0.1 and 0.5, with ignored tokens, mean and none, vs F.cross_entropy(label_smoothing=)"""
    for eps in (0.1, 0.5):
        for target_shape, vocab in ((2, 9), 50), ((13,), 7):
            logits = random_logits(target_shape, vocab, torch.float64)
            targets = random_targets(target_shape, vocab)
            for reduction in ("mean", "none"):
                label = describe(logits=logits, targets=targets) + f", label_smoothing={eps}, reduction={reduction!r}"
                expect_close(
                    ex.cross_entropy(logits, targets, label_smoothing=eps, reduction=reduction),
                    reference_loss(logits, targets, label_smoothing=eps, reduction=reduction),
                    input=label,
                    hint="(1 - eps) * (lse - x[t]) + eps * (lse - mean(x)); the uniform part covers all V classes",
                )


@checks("cross_entropy")
def z_loss_is_palm_squared_lse(ex):
    """z_loss_weight 1e-4 and 0.1 with smoothing and ignored tokens: adds w * logsumexp(x)**2 per valid token"""
    for weight, eps in ((1e-4, 0.0), (0.1, 0.1)):
        logits = random_logits((3, 8), 40, torch.float64) + 5.0  # an offset: logsumexp well away from 0
        targets = random_targets((3, 8), 40)
        for reduction in ("mean", "none"):
            options = dict(label_smoothing=eps, z_loss_weight=weight, reduction=reduction)
            expect_close(
                ex.cross_entropy(logits, targets, **options),
                reference_loss(logits, targets, **options),
                input=describe(logits=logits, targets=targets) + f", z_loss_weight={weight}, {reduction=}",
                hint="add z_loss_weight * lse**2 to each valid token's loss before averaging",
            )


@checks("cross_entropy")
def huge_logits_stay_finite(ex):
    """float32 logits with gaps of ~1e4 (target probabilities underflow to 0), fp16 up to ~3e4, bf16 up to ~3e4"""
    for dtype, scale in ((torch.float32, 3e3), (torch.float16, 1e4), (torch.bfloat16, 1e4)):
        logits = random_logits((4, 16), 200, torch.float64, scale=scale).clamp(-3e4, 3e4).to(dtype)
        targets = random_targets((4, 16), 200)
        got = ex.cross_entropy(logits, targets, label_smoothing=0.1)
        oracle, baseline = loss_oracle_and_baseline(logits, targets, label_smoothing=0.1)
        label = describe(logits=logits, targets=targets) + f", |logits| up to {float(logits.abs().max()):.3g}"
        expect(
            bool(torch.isfinite(got).all()),
            "the loss is inf or nan on large logits",
            input=label,
            expected=f"{float(oracle):.6g}",
            got=str(got.tolist()),
            hint="never take log(softmax): the log-probability is x[t] - logsumexp(x)",
        )
        expect_close(got, oracle, baseline=baseline, input=label, hint="upcast to float32; " + HINT_LSE)


@checks("cross_entropy")
def differentiable_gradcheck(ex):
    """torch.autograd.gradcheck in float64 through the logits, with smoothing, z-loss and an ignored token"""
    logits = torch.randn(2, 3, 5, dtype=torch.float64, requires_grad=True)
    targets = torch.tensor([[1, -100, 4], [0, 2, 2]])
    expect_gradcheck(
        lambda x: ex.cross_entropy(x, targets, label_smoothing=0.1, z_loss_weight=0.01),
        (logits,),
        input=describe(logits=logits, targets=targets),
        hint="use torch ops end to end: no .item(), .detach() or in-place writes into the logits",
    )


# ------------------------------------------------------------------------------------------ cross_entropy_grad


def autograd_grad(logits, targets, **options):
    """d(mean loss)/d(logits) by float64 autograd through F.cross_entropy (+ z-loss)."""
    x = logits.detach().double().requires_grad_(True)
    reference_loss(x, targets, **options).backward()
    return x.grad


def low_precision_autograd_grad(logits, targets, **options):
    """The same gradient by autograd in float32, on the same rounded logits: what a framework computes."""
    x = logits.detach().float().requires_grad_(True)
    reference_loss(x, targets, **options).backward()
    return x.grad


@checks("cross_entropy_grad")
def two_classes_gradient_closed_form(ex):
    """logits [[0, 0], [0, ln 3]], targets [0, 1]: grad = (p - one_hot) / 2 = [[-1/4, 1/4], [1/8, -1/8]]"""
    logits = torch.tensor([[0.0, 0.0], [0.0, math.log(3.0)]], dtype=torch.float64)
    got = ex.cross_entropy_grad(logits, torch.tensor([0, 1]))
    expect_close(
        got,
        torch.tensor([[-0.25, 0.25], [0.125, -0.125]], dtype=torch.float64),
        input="logits=[[0, 0], [0, ln 3]], targets=[0, 1]",
        hint="softmax(x) - one_hot(t), divided by the number of valid tokens",
    )


@checks("cross_entropy_grad")
def matches_autograd(ex):
    """shapes (B, S, V) and (N, V), ~30% ignored, smoothing 0 / 0.1, z-loss 0 / 1e-2, vs float64 autograd"""
    for (target_shape, vocab), eps, weight in zip(SHAPES, (0.0, 0.1, 0.0, 0.3), (0.0, 0.0, 1e-2, 1e-1), strict=True):
        logits = random_logits(target_shape, vocab, torch.float64) + 2.0
        targets = random_targets(target_shape, vocab)
        options = dict(label_smoothing=eps, z_loss_weight=weight)
        got = ex.cross_entropy_grad(logits, targets, **options)
        label = describe(logits=logits, targets=targets) + f", label_smoothing={eps}, z_loss_weight={weight}"
        expect_tensor(got, shape=logits.shape, dtype=logits.dtype, input=label, what="grad")
        expect_close(
            got,
            autograd_grad(logits, targets, **options),
            input=label,
            what="grad",
            hint="(softmax - q + 2 * w * lse * softmax) / n_valid with q = (1 - eps) one_hot + eps / V",
        )


@checks("cross_entropy_grad")
def ignored_rows_and_all_ignored(ex):
    """ignored tokens get a zero gradient row; a custom ignore_index; all ignored gives zeros like autograd"""
    logits = random_logits((5,), 12, torch.float64)
    targets = torch.tensor([3, 7, 7, 0, 11])
    got = ex.cross_entropy_grad(logits, targets, ignore_index=7, label_smoothing=0.2)
    label = describe(logits=logits, targets=targets) + ", ignore_index=7, label_smoothing=0.2"
    expect(
        bool((got[1:3] == 0).all()),
        "ignored tokens received a gradient",
        input=label,
        expected="rows 1 and 2 all zero",
        got=f"row 1 starts {got[1, :3].tolist()}",
        hint="zero the rows whose target equals ignore_index (the argument, not -100)",
    )
    expect_close(
        got,
        autograd_grad(logits, targets, ignore_index=7, label_smoothing=0.2),
        input=label,
        what="grad",
        hint="divide by the number of valid tokens (3 here), not by all 5",
    )
    none_valid = ex.cross_entropy_grad(logits, torch.full((5,), -100))
    x = logits.detach().requires_grad_(True)
    F.cross_entropy(x, torch.full((5,), -100)).backward()  # nan loss, zero gradient
    expect_close(
        none_valid,
        x.grad,
        input=describe(logits=logits) + ", every target -100",
        what="grad",
        hint="with no valid token the gradient is zero: divide by max(n_valid, 1)",
    )


@checks("cross_entropy_grad")
def one_valid_token(ex):
    """a single valid token among ignored ones: the mean divides by exactly 1"""
    logits = random_logits((4,), 9, torch.float64)
    targets = torch.tensor([-100, 5, -100, -100])
    expect_close(
        ex.cross_entropy_grad(logits, targets),
        autograd_grad(logits, targets),
        input=describe(logits=logits, targets=targets) + " (one valid token)",
        what="grad",
        hint="divide by the number of valid tokens, at least 1: valid.sum().clamp(min=1)",
    )


@checks("cross_entropy_grad")
def low_precision_and_huge_logits(ex):
    """fp16 and bf16 logits (fp16 up to ~3e4), returned in the logits' dtype, vs float64 autograd"""
    for dtype, scale in ((torch.float16, 1e4), (torch.bfloat16, 3.0), (torch.float32, 3e3)):
        logits = random_logits((3, 7), 100, torch.float64, scale=scale).clamp(-3e4, 3e4).to(dtype)
        targets = random_targets((3, 7), 100)
        options = dict(label_smoothing=0.1)
        got = ex.cross_entropy_grad(logits, targets, **options)
        label = describe(logits=logits, targets=targets) + f", |logits| up to {float(logits.abs().max()):.3g}"
        expect_tensor(got, shape=logits.shape, dtype=dtype, input=label, what="grad")
        expect_close(
            got,
            autograd_grad(logits, targets, **options),
            baseline=low_precision_autograd_grad(logits, targets, **options).to(dtype),
            input=label,
            what="grad",
            hint="compute in float32 from the stable logsumexp and cast the gradient back at the end",
        )
