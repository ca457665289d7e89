"""Checks for p02.grad_accum_clip. References: one big padded batch through F.cross_entropy (token mean with
ignore_index) and autograd, in float64 (float32 runs against it with the float32 big batch as the baseline);
torch.nn.utils.clip_grad_norm_ on identical gradients (norms 1, 2, 3, inf; frozen and unused parameters; tiny norms;
float32 and bfloat16); closed forms for a hand-sized example."""

import copy
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from llm_algo.check import Checks, describe, expect, expect_close, expect_refused

checks = Checks("p02.grad_accum_clip")
checks.restrict(
    "clip_grad_norm",
    forbid=["torch.nn.utils.clip_grad"],  # clip_grad_norm_, clip_grad_norm, get_total_norm, clip_grads_with_norm_
    instead="compute the per-tensor norms with torch.linalg.vector_norm, their norm, and scale the grads yourself "
    "(torch.nn.utils.clip_grad_norm_ is the reference)",
)

# ------------------------------------------------------------------------------------------ accumulate_gradients

VOCAB = 13


class TokenModel(nn.Module):
    """Per-token logits (an embedding, a nonlinearity, a head) and a frozen bias that must keep .grad None."""

    def __init__(self, width=6):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, width)
        self.head = nn.Linear(width, VOCAB)
        self.frozen = nn.Parameter(torch.randn(VOCAB), requires_grad=False)

    def forward(self, input_ids):
        return self.head(torch.tanh(self.embed(input_ids))) + self.frozen  # (b, t, V)


def micro_batches(shapes, ignore_index=-100, pad_fraction=0.4):
    """Random (input_ids, labels) pairs of the given (b, t) shapes, with random positions ignored."""
    batches = []
    for b, t in shapes:
        input_ids = torch.randint(VOCAB, (b, t))
        labels = torch.randint(VOCAB, (b, t))
        labels[torch.rand(b, t) < pad_fraction] = ignore_index
        batches.append((input_ids, labels))
    return batches


def big_batch_reference(model, batches, ignore_index=-100):
    """Pad every micro-batch to the longest t (padding ignored), concatenate, one mean cross-entropy, one backward:
    (loss, {name: grad})."""
    width = max(x.shape[1] for x, _ in batches)
    xs, ys = [], []
    for x, y in batches:
        xs.append(F.pad(x, (0, width - x.shape[1]), value=0))
        ys.append(F.pad(y, (0, width - y.shape[1]), value=ignore_index))
    model.zero_grad(set_to_none=True)
    loss = F.cross_entropy(
        model(torch.cat(xs)).flatten(0, 1), torch.cat(ys).flatten(), ignore_index=ignore_index, reduction="mean"
    )
    loss.backward()
    return loss.detach(), {name: p.grad for name, p in model.named_parameters() if p.grad is not None}


def compare_grads(model, want, *, input, hint, baseline=None):
    for name, p in model.named_parameters():
        if name not in want:
            expect(
                p.grad is None,
                f"{name} has a gradient although it is frozen",
                input=input,
                expected="grad None",
                got="None" if p.grad is None else f"grad {tuple(p.grad.shape)}",
                hint="only backward() writes .grad; do not create gradients for frozen parameters",
            )
            continue
        expect(
            p.grad is not None,
            f"{name} has no gradient",
            input=input,
            expected=f"grad {tuple(p.shape)}",
            got="None",
            hint="call backward on every micro-batch's loss",
        )
        expect_close(
            p.grad,
            want[name],
            input=input,
            what=f"{name}.grad",
            hint=hint,
            baseline=None if baseline is None else baseline[name],
        )


ACCUM_HINT = (
    "count the real labels of ALL micro-batches first; backward each micro-batch's summed cross-entropy divided by "
    "that global count (not its own mean divided by the number of micro-batches)"
)


@checks("accumulate_gradients")
def equals_one_big_batch_float64(ex):
    """micro-batches of different shapes and padding: float64 gradients and loss equal one big batch's"""
    for shapes in (((2, 5), (1, 9), (3, 4)), ((1, 7),), ((4, 3), (1, 1), (2, 8), (1, 6))):
        model = TokenModel().double()
        twin = copy.deepcopy(model)
        batches = micro_batches(shapes)
        batches[0][1][0, :] = -100  # one sequence without a single target
        batches[-1][1][-1, 0] = 3  # and at least one real label
        loss = ex.accumulate_gradients(model, batches)
        want_loss, want = big_batch_reference(twin, batches)
        label = f"TokenModel float64, micro-batch shapes {list(shapes)}, ~40% labels = -100"
        expect_close(loss, want_loss, input=label, what="returned loss", hint="return the global token mean")
        compare_grads(model, want, input=label, hint=ACCUM_HINT)


@checks("accumulate_gradients")
def uneven_token_counts_closed_form(ex):
    """1 real token in one micro-batch, 9 in the other: the loss is the mean of the 10 per-token losses"""
    model = TokenModel().double()
    x1, y1 = torch.randint(VOCAB, (1, 4)), torch.full((1, 4), -100)
    y1[0, 2] = 5
    x2, y2 = torch.randint(VOCAB, (3, 3)), torch.randint(VOCAB, (3, 3))
    with torch.no_grad():
        logp = [torch.log_softmax(model(x), -1) for x in (x1, x2)]
        per_token = torch.cat([-logp[0][0, 2, 5].reshape(1), -logp[1].gather(-1, y2[..., None]).flatten()])
    loss = ex.accumulate_gradients(model, [(x1, y1), (x2, y2)])
    naive = (per_token[0] + per_token[1:].mean()) / 2
    expect_close(
        loss,
        per_token.mean(),
        input="micro-batch 1: (1, 4) with 1 real label; micro-batch 2: (3, 3) with 9 real labels",
        what="returned loss",
        hint=f"the mean over all 10 tokens, not the mean of the two micro-batch means ({float(naive):.6f}); "
        + ACCUM_HINT,
    )
    expect(
        loss.dim() == 0 and not loss.requires_grad and loss.dtype == torch.float64,
        "the returned loss is not a detached 0-d tensor in the logits' dtype",
        input="float64 TokenModel",
        expected="0-d float64 tensor, requires_grad=False",
        got=f"shape {tuple(loss.shape)}, {loss.dtype}, requires_grad={loss.requires_grad}",
        hint="accumulate loss_sum.detach() and divide by the global count",
    )


@checks("accumulate_gradients")
def clears_old_gradients_and_keeps_frozen_none(ex):
    """two calls in a row: the second leaves only its own batch's gradient; the frozen parameter keeps grad None"""
    model = TokenModel().double()
    twin = copy.deepcopy(model)
    ex.accumulate_gradients(model, micro_batches(((2, 4), (2, 4))))
    second = micro_batches(((1, 6), (3, 2)), ignore_index=-1)
    second[0][1][0, 0] = 1
    ex.accumulate_gradients(model, second, ignore_index=-1)
    _, want = big_batch_reference(twin, second, ignore_index=-1)
    compare_grads(
        model,
        want,
        input="two calls on different batches (the second with ignore_index=-1): grads after the second",
        hint="clear the gradients at the start (model.zero_grad(set_to_none=True)); use the ignore_index argument",
    )


@checks("accumulate_gradients")
def one_backward_per_micro_batch(ex):
    """each micro-batch is backpropagated before the next forward (only one micro-batch's activations alive)"""
    model = TokenModel().double()
    seen = []

    def record(module, args):
        grad = module.head.weight.grad
        seen.append(0.0 if grad is None else float(grad.abs().sum()))

    handle = model.register_forward_pre_hook(record)
    try:
        ex.accumulate_gradients(model, micro_batches(((2, 3), (2, 3), (1, 5)), pad_fraction=0.0))
    finally:
        handle.remove()
    expect(
        len(seen) == 3 and seen[0] == 0 and seen[1] > 0 and seen[2] > 0,
        "the micro-batches were not backpropagated one at a time",
        input="3 micro-batches; |head.weight.grad| recorded at each model(...) call",
        expected="3 forward calls: no gradient before the first, a gradient before the second and the third",
        got=f"{len(seen)} forward calls, |grad| = {[round(v, 4) for v in seen]}",
        hint="forward and backward each micro-batch in turn: summing the losses and calling backward once keeps every "
        "micro-batch's graph in memory, which is what accumulation exists to avoid",
    )


@checks("accumulate_gradients")
def float32_against_float64(ex):
    """a float32 model stays as close to the float64 big batch as the float32 big batch does"""
    model = TokenModel(width=16)
    oracle_model, baseline_model = copy.deepcopy(model).double(), copy.deepcopy(model)
    batches = micro_batches(((3, 17), (2, 31), (5, 9)))
    loss = ex.accumulate_gradients(model, batches)
    want_loss, want = big_batch_reference(oracle_model, batches)
    base_loss, base = big_batch_reference(baseline_model, batches)
    label = "TokenModel float32 width 16, micro-batches (3, 17), (2, 31), (5, 9)"
    expect_close(loss, want_loss, baseline=base_loss, input=label, what="returned loss", hint=ACCUM_HINT)
    compare_grads(model, want, input=label, hint=ACCUM_HINT, baseline=base)


@checks("accumulate_gradients")
def refuses_empty_batches(ex):
    """no micro-batches, or no real label anywhere: ValueError (the token mean is undefined)"""
    model = TokenModel().double()
    expect_refused(lambda: ex.accumulate_gradients(model, []), input="micro_batches=[]", hint="raise ValueError")
    all_padding = [(torch.randint(VOCAB, (2, 3)), torch.full((2, 3), -100)) for _ in range(2)]
    expect_refused(
        lambda: ex.accumulate_gradients(model, all_padding),
        input="2 micro-batches whose labels are all -100",
        hint="raise ValueError when the global count of real labels is 0 (0 / 0 would give NaN gradients)",
    )


# ------------------------------------------------------------------------------------------ clip_grad_norm


def gradient_set(dtype=torch.float64, scale=1.0):
    """Parameters of mixed shapes with random gradients, one frozen (no grad) and one unused (grad None)."""
    params = []
    for shape in ((7, 5), (5,), (3, 4, 2), (1,), (11,)):
        p = nn.Parameter(torch.randn(shape, dtype=dtype))
        p.grad = (torch.randn(shape, dtype=torch.float64) * scale).to(dtype)
        params.append(p)
    frozen = nn.Parameter(torch.randn(4, dtype=dtype), requires_grad=False)
    unused = nn.Parameter(torch.randn(6, dtype=dtype))
    return params[:2] + [frozen] + params[2:4] + [unused] + params[4:]


def cloned(params):
    out = []
    for p in params:
        q = nn.Parameter(p.detach().clone(), requires_grad=p.requires_grad)
        q.grad = None if p.grad is None else p.grad.clone()
        out.append(q)
    return out


def compare_clipped(got_params, want_params, *, input, hint, baseline_params=None):
    for i, (p, q) in enumerate(zip(got_params, want_params, strict=True)):
        if q.grad is None:
            expect(
                p.grad is None,
                f"parameter {i} had no gradient but has one now",
                input=input,
                expected="grad None",
                got="None" if p.grad is None else f"grad {tuple(p.grad.shape)}",
                hint="skip parameters whose .grad is None: do not create zeros for them",
            )
            continue
        base = None if baseline_params is None else baseline_params[i].grad
        expect_close(p.grad, q.grad, baseline=base, input=input, what=f"parameter {i}'s clipped grad", hint=hint)


CLIP_HINT = "one coefficient for all: grad *= min(1, max_norm / (total_norm + 1e-6)), total = norm of per-tensor norms"


@checks("clip_grad_norm")
def matches_torch_for_every_norm(ex):
    """norm_type 2, 1, 3 and inf, clipping and not: returned norm and grads equal torch.nn.utils.clip_grad_norm_"""
    for norm_type in (2.0, 1.0, 3.0, float("inf")):
        for max_norm in (0.5, 1e3):
            params = gradient_set()
            twin = cloned(params)
            got = ex.clip_grad_norm(iter(params), max_norm, norm_type=norm_type)  # an iterator, read once
            want = torch.nn.utils.clip_grad_norm_(twin, max_norm, norm_type=norm_type)
            label = (
                f"5 grads (7,5) (5,) (3,4,2) (1,) (11,) + a frozen and an unused parameter, {max_norm=}, {norm_type=}"
            )
            expect_close(
                torch.as_tensor(got),
                want,
                input=label,
                what="returned total norm",
                hint="the norm of all gradients as one vector (inf: the largest |g|), before clipping",
            )
            compare_clipped(params, twin, input=label, hint=CLIP_HINT)


@checks("clip_grad_norm")
def closed_form_three_four_five(ex):
    """grads (3, 4) and (0,): L2 norm 5, clipped to 1 gives (3, 4) / (5 + 1e-6); the inf norm is 4"""
    a = nn.Parameter(torch.zeros(2, dtype=torch.float64))
    b = nn.Parameter(torch.zeros(1, dtype=torch.float64))
    a.grad, b.grad = torch.tensor([3.0, -4.0], dtype=torch.float64), torch.zeros(1, dtype=torch.float64)
    total = ex.clip_grad_norm([a, b], 1.0)
    expect_close(
        torch.as_tensor(total),
        torch.tensor(5.0, dtype=torch.float64),
        input="grads [3, -4], [0]",
        what="returned norm",
        hint=CLIP_HINT,
    )
    expect_close(
        a.grad,
        torch.tensor([3.0, -4.0], dtype=torch.float64) / (5 + 1e-6),
        input="grads [3, -4], [0], max_norm=1",
        what="clipped grad",
        hint="coefficient max_norm / (total_norm + 1e-6): keep PyTorch's 1e-6",
    )
    a.grad = torch.tensor([3.0, -4.0], dtype=torch.float64)
    total = ex.clip_grad_norm(a, 2.0, norm_type=float("inf"))
    expect_close(
        torch.as_tensor(total),
        torch.tensor(4.0, dtype=torch.float64),
        input="one tensor [3, -4], norm_type=inf",
        what="returned norm",
        hint="the inf-norm is max |g|",
    )
    expect_close(
        a.grad,
        torch.tensor([3.0, -4.0], dtype=torch.float64) * 2 / (4 + 1e-6),
        input="one tensor [3, -4] (not in a list), max_norm=2, norm_type=inf",
        what="clipped grad",
        hint="accept a single tensor as well as an iterable",
    )


@checks("clip_grad_norm")
def tiny_gradients_and_no_scaling_up(ex):
    """norms of 1e-4 (where the 1e-6 shows) and norms below max_norm (left exactly as they were)"""
    for scale, max_norm in ((3e-5, 1e-4), (1e-5, 1.0)):
        params = gradient_set(scale=scale)
        twin = cloned(params)
        before = [None if p.grad is None else p.grad.clone() for p in params]
        got = ex.clip_grad_norm(params, max_norm)
        want = torch.nn.utils.clip_grad_norm_(twin, max_norm)
        label = f"gradients of scale {scale:g}, total norm {float(want):.3g}, max_norm={max_norm:g}"
        expect_close(torch.as_tensor(got), want, input=label, what="returned total norm", hint=CLIP_HINT)
        compare_clipped(params, twin, input=label, hint=CLIP_HINT + "; clamp the coefficient at 1 (never scale up)")
        if float(want) < max_norm:
            unchanged = all(b is None or torch.equal(p.grad, b) for p, b in zip(params, before, strict=True))
            expect(
                unchanged,
                "gradients below max_norm were changed",
                input=label,
                expected="every grad bit-identical",
                got="some grad changed",
                hint="min(1, max_norm / (total + 1e-6)) is exactly 1 here: clamp, do not scale up",
            )


@checks("clip_grad_norm")
def low_precision_against_float64(ex):
    """float32 and bfloat16 gradients: as close to float64 clipping as torch's own run in that dtype"""
    for dtype in (torch.float32, torch.bfloat16):
        params = gradient_set(dtype=dtype, scale=3.0)
        oracle = [nn.Parameter(p.detach().double(), requires_grad=p.requires_grad) for p in params]
        for p, q in zip(params, oracle, strict=True):
            q.grad = None if p.grad is None else p.grad.double()
        baseline = cloned(params)
        got = ex.clip_grad_norm(params, 1.0)
        want = torch.nn.utils.clip_grad_norm_(oracle, 1.0)
        base = torch.nn.utils.clip_grad_norm_(baseline, 1.0)
        label = f"gradients in {str(dtype).removeprefix('torch.')}, scale 3, max_norm=1"
        expect_close(
            torch.as_tensor(got),
            want,
            baseline=base,
            dtype=dtype,
            input=label,
            what="returned total norm",
            hint=CLIP_HINT,
        )
        compare_clipped(params, oracle, baseline_params=baseline, input=label, hint=CLIP_HINT)
        for i, p in enumerate(params):
            expect(
                p.grad is None or p.grad.dtype == dtype,
                f"parameter {i}'s grad changed dtype",
                input=label,
                expected=str(dtype),
                got="None" if p.grad is None else str(p.grad.dtype),
                hint="scale in place (g.mul_), with the coefficient cast to the grad's dtype",
            )


@checks("clip_grad_norm")
def nonfinite_empty_and_bad_arguments(ex):
    """NaN norm: RuntimeError when asked, else returned; no grads: tensor(0.); max_norm/norm_type <= 0: ValueError"""
    params = gradient_set()
    params[0].grad[1, 2] = float("nan")
    saved = params[1].grad.clone()
    expect_refused(
        lambda: ex.clip_grad_norm(params, 1.0, error_if_nonfinite=True),
        input="a NaN in one gradient, error_if_nonfinite=True",
        hint="raise RuntimeError when the total norm is NaN or inf and error_if_nonfinite is set",
    )
    expect(
        torch.equal(params[1].grad, saved),
        "gradients were scaled before the non-finite norm was refused",
        input="a NaN in one gradient, error_if_nonfinite=True",
        expected="grads untouched",
        got="grads changed",
        hint="check the norm before scaling",
    )
    total = ex.clip_grad_norm(params, 1.0)
    expect(
        bool(torch.as_tensor(total).isnan()),
        "a NaN gradient did not give a NaN total norm",
        input="a NaN in one gradient, error_if_nonfinite=False",
        expected="nan (as torch.nn.utils.clip_grad_norm_ returns)",
        got=repr(total),
        hint="do not drop non-finite values from the norm: the caller must see them",
    )
    frozen = [nn.Parameter(torch.randn(3)), nn.Parameter(torch.randn(2))]
    total = ex.clip_grad_norm(frozen, 1.0)
    expect(
        isinstance(total, torch.Tensor) and total.dim() == 0 and float(total) == 0.0,
        "no parameter has a gradient: expected tensor(0.)",
        input="2 parameters, both with grad None",
        expected="tensor(0.)",
        got=repr(total),
        hint="return torch.tensor(0.0) when there is nothing to clip",
    )
    for max_norm, norm_type in ((-1.0, 2.0), (0.0, 2.0), (1.0, 0.0), (1.0, -2.0)):
        expect_refused(
            lambda max_norm=max_norm, norm_type=norm_type: ex.clip_grad_norm(gradient_set(), max_norm, norm_type),
            input=describe(max_norm=max_norm, norm_type=norm_type),
            hint="raise ValueError unless max_norm > 0 and norm_type > 0 (a negative max_norm flips every gradient)",
        )
    expect(
        math.isfinite(float(ex.clip_grad_norm(gradient_set(), 1.0))),
        "a finite set of gradients gave a non-finite norm",
        input="random gradients",
        expected="finite",
        got="non-finite",
        hint=CLIP_HINT,
    )
