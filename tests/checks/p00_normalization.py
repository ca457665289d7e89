"""Checks for p00.normalization. References: `F.layer_norm` (float64 oracle, the builtin in the tested dtype as the
baseline), `nn.BatchNorm1d` step for step through training and eval (outputs, buffers, state_dict), and
`torch.autograd.gradcheck`."""

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
from llm_algo.check.restrictions import LAYER_NORM

checks = Checks("p00.normalization")
checks.restrict(
    "layer_norm",
    forbid=LAYER_NORM,
    instead="compute the mean, the biased variance and rsqrt(var + eps) yourself (F.layer_norm is the reference)",
)
checks.restrict(
    "batch_norm",
    forbid=(F.batch_norm, torch.batch_norm, torch.native_batch_norm, nn.BatchNorm1d),
    instead="compute the per-channel statistics and the running averages yourself (nn.BatchNorm1d is the reference)",
)

DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
HINT_LN = "mean and biased variance over the last dim (keepdim=True), rsqrt(var + eps), then * weight + bias"


# ------------------------------------------------------------------------------------------ layer_norm


def affine(d, dtype):
    weight = (1 + 0.5 * torch.randn(d, dtype=torch.float64)).to(dtype)
    bias = (0.3 * torch.randn(d, dtype=torch.float64)).to(dtype)
    return weight, bias


@checks("layer_norm")
@one_thread()
def layer_norm_matches_f_layer_norm(ex):
    """layer_norm equals F.layer_norm on hidden states (B, T, d) and (N, d), four dtypes, with and without affine"""
    for shape, with_affine, eps in [
        ((2, 5, 16), True, 1e-5),
        ((1, 1, 7), True, 1e-6),
        ((3, 33), False, 1e-5),
        ((4, 64), True, 1e-3),
    ]:
        x64 = 1.5 + 2.0 * torch.randn(shape, dtype=torch.float64)
        d = shape[-1]
        for dtype in DTYPES:
            x = x64.to(dtype)
            weight, bias = affine(d, dtype) if with_affine else (None, None)
            got = ex.layer_norm(x, weight, bias, eps)
            label = describe(x=x, eps=eps) + (", weight and bias" if with_affine else ", no affine")
            expect_tensor(got, shape=shape, dtype=dtype, input=label, hint="return x's dtype")
            oracle = F.layer_norm(
                x.double(),
                (d,),
                None if weight is None else weight.double(),
                None if bias is None else bias.double(),
                eps,
            )
            expect_close(got, oracle, baseline=F.layer_norm(x, (d,), weight, bias, eps), input=label, hint=HINT_LN)


@checks("layer_norm")
@one_thread()
def layer_norm_offset_and_flat_rows(ex):
    """float32 rows with an offset of 3000, nearly constant rows and a constant row: accurate and finite"""
    d = 32
    x64 = torch.cat(
        [
            3000.0 + torch.randn(3, d, dtype=torch.float64),  # a massive-activation offset
            1e-3 * torch.randn(2, d, dtype=torch.float64),  # variance 1e-6, below eps = 1e-5
            torch.full((1, d), 7.0, dtype=torch.float64),  # a constant token: y = bias
        ]
    )
    weight, bias = affine(d, torch.float64)
    for dtype in (torch.float32, torch.float64):
        x = x64.to(dtype)
        w, b = weight.to(dtype), bias.to(dtype)
        got = ex.layer_norm(x, w, b, 1e-5)
        label = describe(x=x) + ": rows ~ 3000 + N(0, 1), rows ~ 1e-3 N(0, 1), a constant row"
        expect(
            bool(torch.isfinite(got).all()),
            "the output has nan or inf",
            input=label,
            expected="finite values",
            got=f"{int((~torch.isfinite(got)).sum())} non-finite values",
            hint="eps inside the square root; a one-pass variance E[x^2] - E[x]^2 can come out negative",
        )
        expect_close(
            got,
            F.layer_norm(x64, (d,), weight, bias, 1e-5),
            baseline=F.layer_norm(x, (d,), w, b, 1e-5),
            input=label,
            hint="subtract the mean before squaring (two passes): E[x^2] - E[x]^2 cancels catastrophically in float32;"
            " eps goes under the root: rsqrt(var + eps), not 1 / (std + eps)",
        )


@checks("layer_norm")
@one_thread()
def layer_norm_tokens_are_independent(ex):
    """each token is normalised on its own: changing token (0, 0) leaves every other token's output unchanged"""
    x = torch.randn(3, 6, 10, dtype=torch.float64)
    weight, bias = affine(10, torch.float64)
    before = ex.layer_norm(x, weight, bias, 1e-5)
    changed = x.clone()
    changed[0, 0] = 50 * torch.randn(10, dtype=torch.float64)
    after = ex.layer_norm(changed, weight, bias, 1e-5)
    moved = (after - before).abs().amax(dim=-1)  # (3, 6)
    moved[0, 0] = 0.0
    expect(
        float(moved.max()) == 0.0,
        "other tokens' outputs changed",
        input=describe(x=x) + ", token (0, 0) replaced",
        expected="only token (0, 0) changes",
        got=f"{int((moved > 0).sum())} other tokens changed",
        hint="reduce over the last dim (features) only, never over the batch or sequence dims",
    )


@checks("layer_norm")
@one_thread()
def layer_norm_gradcheck(ex):
    """gradcheck (float64) through x, weight and bias"""
    x = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(4, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(4, dtype=torch.float64, requires_grad=True)
    expect_gradcheck(
        lambda a, w, b: ex.layer_norm(a, w, b, 1e-5),
        (x, weight, bias),
        input=describe(x=x, weight=weight, bias=bias),
        hint="tensor ops end to end: no .item(), .detach() or NumPy",
    )


@checks("layer_norm")
@one_thread()
def layer_norm_refuses_bad_affine(ex):
    """a weight or bias whose shape is not (d,): ValueError"""
    x = torch.randn(2, 8)
    cases = [
        (lambda: ex.layer_norm(x, torch.ones(9), None), "x (2, 8), weight (9,)"),
        (lambda: ex.layer_norm(x, torch.ones(8), torch.zeros(2, 8)), "x (2, 8), bias (2, 8)"),
        (lambda: ex.layer_norm(x, torch.ones(1, 8), None), "x (2, 8), weight (1, 8)"),
    ]
    for call, label in cases:
        expect_value_error(call, label, "check weight.shape == (d,) and bias.shape == (d,) before computing")


# ------------------------------------------------------------------------------------------ batch_norm

HINT_BN = (
    "training: biased batch variance to normalise, running_var updated with var * n / (n - 1), "
    "running = (1 - momentum) * running + momentum * batch"
)


def paired(ex, C, dtype, momentum=0.1, eps=1e-5):
    mine = ex.BatchNorm1d(C, eps=eps, momentum=momentum)
    reference = nn.BatchNorm1d(C, eps=eps, momentum=momentum)
    with torch.no_grad():
        reference.weight.copy_(1 + 0.5 * torch.randn(C))
        reference.bias.copy_(0.3 * torch.randn(C))
    mine.load_state_dict(reference.state_dict())
    return mine.to(dtype), reference.double()


def expect_buffers_equal(mine, reference, label):
    for name in ("running_mean", "running_var"):
        expect_close(
            getattr(mine, name).detach(),
            getattr(reference, name),
            input=label,
            what=name,
            dtype=getattr(mine, name).dtype,
            hint=HINT_BN,
        )
    expect(
        int(mine.num_batches_tracked) == int(reference.num_batches_tracked),
        "num_batches_tracked is wrong",
        input=label,
        expected=str(int(reference.num_batches_tracked)),
        got=str(int(mine.num_batches_tracked)),
        hint="add 1 to num_batches_tracked on every training forward, never in eval",
    )


@checks("batch_norm")
@one_thread()
def batch_norm_matches_nn_step_by_step(ex):
    """3 training batches then eval equal nn.BatchNorm1d: outputs and buffers, (N, C) and (N, C, L), fp32 and fp64,
    down to 2 values per channel ((2, C) and (1, C, 2) are legal training batches)"""
    cases = [
        ((16, 6), 0.1, 1e-5),
        ((4, 5, 7), 0.1, 1e-5),
        ((3, 4, 2), 0.3, 0.5),
        ((2, 3), 0.1, 1e-5),
        ((1, 4, 2), 0.1, 2.0),
    ]
    for shape, momentum, eps in cases:  # a large eps (0.5, 2.0 against a variance near 9) shows where eps goes
        C = shape[1]
        for dtype in (torch.float64, torch.float32):
            mine, reference = paired(ex, C, dtype, momentum, eps)
            for step in range(3):
                x64 = 2.0 + 3.0 * torch.randn(shape, dtype=torch.float64)
                label = describe(x=x64.to(dtype), momentum=momentum, eps=eps) + f", training batch {step + 1}"
                got = mine(x64.to(dtype))
                expect_tensor(got, shape=shape, dtype=dtype, input=label)
                expect_close(
                    got.detach(),
                    reference(x64).detach(),
                    input=label,
                    hint="training mode normalises with the batch's mean and biased variance",
                )
                expect_buffers_equal(mine, reference, label)
            mine.eval()
            reference.eval()
            x64 = 2.0 + 3.0 * torch.randn(shape, dtype=torch.float64)
            label = describe(x=x64.to(dtype), momentum=momentum, eps=eps) + ", eval after 3 training batches"
            expect_close(
                mine(x64.to(dtype)).detach(),
                reference(x64).detach(),
                input=label,
                hint="eval mode normalises with running_mean and running_var, not the batch's statistics",
            )
            expect_buffers_equal(mine, reference, label + " (eval must not change the buffers)")


@checks("batch_norm")
@one_thread()
def batch_norm_state_dict_and_buffers(ex):
    """parameters are weight and bias; buffers running_mean, running_var, num_batches_tracked; loads nn's state_dict"""
    C = 5
    mine = ex.BatchNorm1d(C)
    parameters = sorted(name for name, _ in mine.named_parameters())
    buffers = sorted(name for name, _ in mine.named_buffers())
    expect(
        parameters == ["bias", "weight"] and buffers == ["num_batches_tracked", "running_mean", "running_var"],
        "wrong parameters or buffers",
        input="BatchNorm1d(5)",
        expected="parameters [bias, weight]; buffers [num_batches_tracked, running_mean, running_var]",
        got=f"parameters {parameters}; buffers {buffers}",
        hint="nn.Parameter for weight/bias, register_buffer for the running statistics and the counter",
    )
    fresh = nn.BatchNorm1d(C)
    for name, value in fresh.state_dict().items():
        mine_value = mine.state_dict().get(name)
        expect(
            mine_value is not None and mine_value.dtype == value.dtype and torch.equal(mine_value, value),
            f"initial {name} differs from nn.BatchNorm1d's",
            input="BatchNorm1d(5), freshly built",
            expected=f"{value.tolist()} ({value.dtype})",
            got="missing" if mine_value is None else f"{mine_value.tolist()} ({mine_value.dtype})",
            hint="weight ones, bias zeros, running_mean zeros, running_var ones, num_batches_tracked a 0-d int64 zero",
        )
    trained = nn.BatchNorm1d(C)
    for _ in range(4):
        trained(1.0 + 2.0 * torch.randn(8, C))
    mine.load_state_dict(trained.state_dict(), strict=True)
    mine.eval()
    trained.eval()
    x = torch.randn(3, C)
    expect_close(
        mine(x).detach(),
        trained.double()(x.double()).detach(),
        input="eval on (3, 5) after loading nn's state_dict",
        hint="eval mode uses the loaded running statistics",
    )


@checks("batch_norm")
@one_thread()
def batch_norm_eval_is_per_example(ex):
    """eval mode: an example's output does not depend on its batch, and nothing is updated"""
    mine, reference = paired(ex, 4, torch.float64)
    for _ in range(3):
        x = 1.0 + 2.0 * torch.randn(10, 4, 3, dtype=torch.float64)
        mine(x), reference(x)
    mine.eval()
    reference.eval()
    batch = 1.0 + 2.0 * torch.randn(6, 4, 3, dtype=torch.float64)
    whole = mine(batch).detach()
    alone = mine(batch[2:3]).detach()  # one example: legal in eval
    label = describe(x=batch) + ", example 2 alone vs in the batch, eval mode"
    expect_close(
        alone,
        whole[2:3],
        input=label,
        hint="in eval mode use running_mean/running_var; a batch of one must work and match",
    )
    expect_close(whole, reference(batch).detach(), input=describe(x=batch) + ", eval mode")
    expect_buffers_equal(mine, reference, label + " (eval must not change the buffers)")


@checks("batch_norm")
@one_thread()
def batch_norm_gradients_and_no_graph_in_buffers(ex):
    """gradcheck in training mode through x, weight and bias; the running buffers never require grad"""
    C = 2
    module = ex.BatchNorm1d(C).double()
    with torch.no_grad():
        module.weight.copy_(torch.randn(C))
        module.bias.copy_(torch.randn(C))
    x = torch.randn(4, C, 2, dtype=torch.float64, requires_grad=True)

    expect_gradcheck(
        lambda inputs: module(inputs),
        (x,),
        input=describe(x=x) + ", training mode",
        hint="training output must depend on the batch mean and variance through autograd (no .detach() there)",
    )
    module(x).sum().backward()
    expect(
        module.weight.grad is not None and module.bias.grad is not None,
        "weight and bias get no gradient",
        input=describe(x=x),
        expected="weight.grad and bias.grad set after backward",
        got=f"weight.grad {module.weight.grad is not None}, bias.grad {module.bias.grad is not None}",
        hint="weight and bias must be nn.Parameter and used in forward",
    )
    leaky = [name for name, buffer in module.named_buffers() if buffer.requires_grad or buffer.grad_fn is not None]
    expect(
        not leaky,
        "a running buffer carries an autograd graph",
        input=describe(x=x) + " with requires_grad=True, training mode",
        expected="running_mean and running_var do not require grad",
        got=f"{leaky} require grad",
        hint="update the running statistics inside `with torch.no_grad():` (or from detached statistics)",
    )


@checks("batch_norm")
@one_thread()
def batch_norm_refuses_bad_input(ex):
    """4-D input, the wrong channel count, and one value per channel in training: ValueError"""
    module = ex.BatchNorm1d(4)
    cases = [
        (lambda: module(torch.randn(2, 4, 3, 3)), "x (2, 4, 3, 3) (4-D)"),
        (lambda: module(torch.randn(8, 5)), "x (8, 5) for C = 4"),
        (lambda: module(torch.randn(2, 3, 4)), "x (2, 3, 4) for C = 4: channels are axis 1"),
        (lambda: module(torch.randn(1, 4)), "x (1, 4) in training: one value per channel"),
    ]
    for call, label in cases:
        expect_value_error(call, label, "check x.dim() in (2, 3), x.shape[1] == C, and n > 1 when training")
