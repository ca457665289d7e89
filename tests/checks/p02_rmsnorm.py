"""Checks for p02.rmsnorm. References: `F.rms_norm` (float64 oracle and low-precision baseline),
Hugging Face `LlamaRMSNorm` built locally, a hand-derived closed form, and float64 autograd."""

import torch
import torch.nn.functional as F

from llm_algo.check import Checks, describe, expect, expect_close, expect_gradcheck, expect_tensor
from llm_algo.check.restrictions import AUTOGRAD, RMS_NORM

checks = Checks("p02.rmsnorm")
checks.restrict(
    "rms_norm",
    "rmsnorm_module",
    forbid=RMS_NORM,
    instead="compute mean(x**2), rsqrt(... + eps) and the scale yourself (F.rms_norm is the checks' reference)",
)
checks.restrict(
    "rms_norm_backward",
    forbid=[*RMS_NORM, *AUTOGRAD],
    instead="write the gradient you derived in section 5 with tensor ops (autograd is the checks' reference)",
)

SHAPES = [(1, 1, 7), (3, 5, 64), (2, 129), (4, 3, 2, 33)]  # odd hidden sizes, a batch of one, 4-D
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]


def reference(x, weight, eps):
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


def random_case(shape, dtype, scale=1.0):
    x = (torch.randn(shape, dtype=torch.float64) * scale + 0.3).to(dtype)  # a non-zero mean, as real activations have
    weight = (1 + 0.5 * torch.randn(shape[-1], dtype=torch.float64)).to(dtype)
    return x, weight


# ------------------------------------------------------------------------------------------ rms_norm


@checks("rms_norm")
def hand_checkable_row(ex):
    """x = [3, 4], weight = [2, 0.5], eps = 0: rms = sqrt(12.5)"""
    x = torch.tensor([[3.0, 4.0]])
    weight = torch.tensor([2.0, 0.5])
    rms = (12.5) ** 0.5
    expected = torch.tensor([[2 * 3 / rms, 0.5 * 4 / rms]], dtype=torch.float64)
    expect_close(
        ex.rms_norm(x, weight, eps=0.0),
        expected,
        input="x=[[3, 4]], weight=[2, 0.5], eps=0",
        hint="divide by sqrt(mean(x**2) + eps) over the last dimension, then scale by weight",
    )


@checks("rms_norm")
def matches_torch_over_shapes_and_dtypes(ex):
    """random inputs over several shapes and fp32/fp16/bf16/fp64 match F.rms_norm (float64 oracle)"""
    for shape in SHAPES:
        for dtype in DTYPES:
            x, weight = random_case(shape, dtype)
            got = ex.rms_norm(x, weight, eps=1e-6)
            label = describe(x=x, weight=weight)
            expect_tensor(
                got,
                shape=x.shape,
                dtype=dtype,
                input=label,
                hint="return x's dtype; compute in promote_types(x.dtype, float32), which keeps float64",
            )
            oracle = reference(x.double(), weight.double(), 1e-6)
            expect_close(
                got,
                oracle,
                baseline=reference(x, weight, 1e-6),
                input=label,
                hint="normalise over the last dimension only; the statistic is mean(x**2), not the variance",
            )


@checks("rms_norm")
def eps_inside_the_square_root(ex):
    """tiny activations: eps sits inside the square root"""
    x = torch.randn(4, 16, dtype=torch.float64) * 1e-3
    weight = torch.ones(16, dtype=torch.float64)
    for eps in (1e-2, 1e-5):
        expect_close(
            ex.rms_norm(x, weight, eps=eps),
            reference(x, weight, eps),
            input=describe(x=x, eps=eps),
            hint="rsqrt(mean(x**2) + eps), not 1 / (sqrt(mean(x**2)) + eps); and use the eps argument",
        )


@checks("rms_norm")
def fp16_large_activations_do_not_overflow(ex):
    """fp16 activations of size ~1000: x**2 exceeds fp16's maximum 65504 unless you upcast"""
    x, weight = random_case((8, 96), torch.float16, scale=1000.0)
    got = ex.rms_norm(x, weight, eps=1e-6)
    label = describe(x=x) + ", |x| up to ~4000"
    expect(
        bool(torch.isfinite(got).all()) and bool(got.abs().amax() > 0),
        "output has inf, nan or collapsed to zero",
        input=label,
        expected="finite, non-zero values",
        got=f"{got.flatten()[:4].tolist()} ...",
        hint="compute mean(x**2) in float32: x.to(torch.promote_types(x.dtype, torch.float32)) before squaring "
        "(float64 stays float64), cast back at the end",
    )
    expect_close(
        got,
        reference(x.double(), weight.double(), 1e-6),
        baseline=reference(x, weight, 1e-6),
        input=label,
        hint="compute in float32 and cast back to float16 only at the end",
    )


@checks("rms_norm")
def differentiable_gradcheck(ex):
    """torch.autograd.gradcheck in float64 through x and weight"""
    x = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(5, dtype=torch.float64, requires_grad=True)
    expect_gradcheck(
        lambda a, b: ex.rms_norm(a, b, eps=1e-6),
        (x, weight),
        input=describe(x=x, weight=weight),
        hint="no .detach(), .item() or in-place writes into the input; use torch ops end to end",
    )


@checks("rms_norm")
def input_left_untouched(ex):
    """does not modify its input in place"""
    x, weight = random_case((2, 9), torch.float32)
    before = x.clone()
    ex.rms_norm(x, weight, eps=1e-6)
    expect(
        torch.equal(x, before),
        "the input tensor was modified",
        input=describe(x=x),
        expected="x unchanged",
        got="x changed",
        hint="use out-of-place ops (x * r, not x.mul_(r))",
    )


# ------------------------------------------------------------------------------------------ RMSNorm module


@checks("rmsnorm_module")
def parameters_and_state_dict(ex):
    """weight is a learnable nn.Parameter of ones, and the state_dict is {'weight'} like Hugging Face's"""
    module = ex.RMSNorm(37, eps=1e-5)
    params = dict(module.named_parameters())
    expect(
        list(params) == ["weight"],
        "the module's parameters are wrong",
        input="RMSNorm(37, eps=1e-5)",
        expected="['weight']",
        got=str(list(params)),
        hint="self.weight = nn.Parameter(torch.ones(hidden_size))",
    )
    expect_tensor(params["weight"], shape=(37,), dtype=torch.float32, input="RMSNorm(37)", what="weight")
    expect(
        bool((params["weight"] == 1).all()),
        "weight must start at ones (an identity scale)",
        input="RMSNorm(37)",
        expected="all ones",
        got=str(params["weight"][:4].tolist()),
        hint="torch.ones, not zeros or randn",
    )
    expect(
        list(module.state_dict()) == ["weight"],
        "state_dict keys differ from LlamaRMSNorm's",
        input="RMSNorm(37)",
        expected="['weight']",
        got=str(list(module.state_dict())),
        hint="keep eps a plain attribute, not a buffer",
    )


@checks("rmsnorm_module")
def matches_hugging_face_llama_rmsnorm(ex):
    """loads LlamaRMSNorm's weights and matches its output in fp32 and bf16"""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    cases = [
        (64, torch.float32, 1e-5, 3.0),
        (33, torch.bfloat16, 1e-5, 3.0),
        (96, torch.float16, 1e-5, 3.0),
        (16, torch.float32, 1e-2, 1e-2),
    ]  # the last one: tiny activations, where eps matters
    for hidden, dtype, eps, scale in cases:
        hf = LlamaRMSNorm(hidden, eps=eps)
        with torch.no_grad():
            hf.weight.copy_(1 + 0.5 * torch.randn(hidden))
        mine = ex.RMSNorm(hidden, eps=eps)
        mine.load_state_dict(hf.state_dict())
        x = torch.randn(2, 3, hidden) * scale
        label = describe(x=x.to(dtype)) + f", LlamaRMSNorm({hidden}, eps={eps:g}) weights"
        with torch.no_grad():
            got = mine.to(dtype)(x.to(dtype))
            oracle = reference(
                x.to(dtype).double(), hf.weight.to(dtype).double(), eps
            )  # LlamaRMSNorm itself stops at fp32
            baseline = hf.to(dtype)(x.to(dtype))
        expect_tensor(got, shape=x.shape, dtype=dtype, input=label)
        expect_close(
            got,
            oracle,
            baseline=baseline,
            input=label,
            hint="forward must call rms_norm(x, self.weight, self.eps) with the module's own eps and weight",
        )


@checks("rmsnorm_module")
def weight_receives_gradient(ex):
    """backward reaches the weight with the float64 autograd gradient"""
    module = ex.RMSNorm(11, eps=1e-6).double()
    with torch.no_grad():
        module.weight.copy_(torch.randn(11, dtype=torch.float64))
    x = torch.randn(4, 11, dtype=torch.float64)
    grad_out = torch.randn(4, 11, dtype=torch.float64)
    module(x).backward(grad_out)
    weight = module.weight.detach().clone().requires_grad_(True)
    reference(x, weight, 1e-6).backward(grad_out)
    expect(
        module.weight.grad is not None,
        "the weight got no gradient",
        input=describe(x=x),
        expected="module.weight.grad set",
        got="None",
        hint="the weight must be an nn.Parameter used in forward",
    )
    expect_close(
        module.weight.grad,
        weight.grad,
        input=describe(x=x),
        what="weight.grad",
        hint="forward must scale by self.weight (the learnable parameter), not a copy of it",
    )


# ------------------------------------------------------------------------------------------ backward by hand


def autograd_reference(x, weight, grad_out, eps):
    x64 = x.detach().double().requires_grad_(True)
    w64 = weight.detach().double().requires_grad_(True)
    reference(x64, w64, eps).backward(grad_out.double())
    return x64.grad, w64.grad


@checks("rms_norm_backward")
def one_feature_closed_form(ex):
    """d = 1, eps = 0: y = weight * sign(x), so grad_x = 0 and grad_weight = sum(grad_out * sign(x))"""
    x = torch.tensor([[2.0], [-0.5], [3.0]])
    weight = torch.tensor([3.0])
    grad_out = torch.tensor([[1.0], [2.0], [0.5]])
    grad_x, grad_weight = ex.rms_norm_backward(x, weight, grad_out, eps=0.0)
    label = "x=[[2], [-0.5], [3]], weight=[3], grad_out=[[1], [2], [0.5]], eps=0"
    expect_close(
        grad_x,
        torch.zeros(3, 1, dtype=torch.float64),
        input=label,
        what="grad_x",
        hint="grad_x = r * (u - x_hat * mean(u * x_hat)) with u = grad_out * weight; the second term matters",
    )
    expect_close(
        grad_weight,
        torch.tensor([1.0 - 2.0 + 0.5], dtype=torch.float64),
        input=label,
        what="grad_weight",
        hint="grad_weight = sum over every leading dimension of grad_out * x_hat",
    )


@checks("rms_norm_backward")
def matches_autograd_over_shapes(ex):
    """random shapes (2-D, 3-D, batch of one, odd sizes) match float64 autograd"""
    for shape in [(1, 7), (5, 64), (2, 3, 33), (4, 2, 3, 17)]:
        x, weight = random_case(shape, torch.float32)
        grad_out = torch.randn(shape)
        grad_x, grad_weight = ex.rms_norm_backward(x, weight, grad_out, eps=1e-6)
        want_x, want_w = autograd_reference(x, weight, grad_out, 1e-6)
        label = describe(x=x, grad_out=grad_out)
        expect_tensor(grad_x, shape=x.shape, dtype=x.dtype, input=label, what="grad_x")
        expect_tensor(grad_weight, shape=weight.shape, dtype=weight.dtype, input=label, what="grad_weight")
        expect_close(
            grad_x,
            want_x,
            input=label,
            what="grad_x",
            dtype=torch.float32,
            hint="u = grad_out * weight; grad_x = r * (u - x_hat * mean(u * x_hat, last dim))",
        )
        expect_close(
            grad_weight,
            want_w,
            input=label,
            what="grad_weight",
            hint="sum grad_out * x_hat over all leading dimensions (reshape to (-1, d) first)",
        )


@checks("rms_norm_backward")
def low_precision_inputs(ex):
    """fp16 and bf16 inputs: gradients computed in float32 and returned in the input dtype"""
    for dtype in (torch.float16, torch.bfloat16):
        x, weight = random_case((6, 40), dtype, scale=300.0)
        grad_out = torch.randn(6, 40).to(dtype)
        grad_x, grad_weight = ex.rms_norm_backward(x, weight, grad_out, eps=1e-6)
        want_x, want_w = autograd_reference(x, weight, grad_out, 1e-6)
        label = describe(x=x, grad_out=grad_out) + ", |x| up to ~1000"
        expect_tensor(grad_x, shape=x.shape, dtype=dtype, input=label, what="grad_x")
        expect_close(
            grad_x,
            want_x,
            input=label,
            what="grad_x",
            dtype=dtype,
            hint="upcast x, weight and grad_out to float32 before any arithmetic",
        )
        expect_close(
            grad_weight,
            want_w,
            input=label,
            what="grad_weight",
            dtype=dtype,
            hint="accumulate grad_weight in float32 and cast once at the end",
        )


@checks("rms_norm_backward")
def tiny_activations_and_half_precision_weights(ex):
    """tiny activations (eps inside the square root matters) and fp16/bf16 weights: grad_weight in weight's dtype"""
    x = torch.randn(5, 24, dtype=torch.float64) * 1e-3
    weight = 1 + 0.5 * torch.randn(24, dtype=torch.float64)
    grad_out = torch.randn(5, 24, dtype=torch.float64)
    for eps in (1e-2, 1e-5):
        grad_x, grad_weight = ex.rms_norm_backward(x, weight, grad_out, eps=eps)
        want_x, want_w = autograd_reference(x, weight, grad_out, eps)
        label = describe(x=x, eps=eps) + ", |x| ~ 1e-3"
        hint = "r = rsqrt(mean(x**2) + eps) with the eps argument: for tiny x the eps dominates"
        expect_close(grad_x, want_x, input=label, what="grad_x", hint=hint)
        expect_close(grad_weight, want_w, input=label, what="grad_weight", hint=hint)
    for dtype in (torch.float16, torch.bfloat16):
        x, weight = random_case((4, 16), dtype)
        grad_x, grad_weight = ex.rms_norm_backward(x, weight, torch.randn(4, 16).to(dtype), eps=1e-6)
        label = describe(x=x, weight=weight)
        expect_tensor(grad_x, shape=x.shape, dtype=dtype, input=label, what="grad_x")
        expect_tensor(
            grad_weight,
            shape=weight.shape,
            dtype=dtype,
            input=label,
            what="grad_weight",
            hint="cast grad_weight back to weight's dtype at the end",
        )
