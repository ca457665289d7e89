"""Checks for p03.fused_elementwise. References: a byte counter on PyTorch's dispatcher (every aten kernel eager
PyTorch runs, its tensor operands and results), `F.silu` and `F.gelu(approximate=...)` in float64, float64
autograd of `F.silu(gate) * up`, closed forms (silu(1) = 1 / (1 + e^-1), gelu(1) = Phi(1)), and guard elements
around the outputs that catch writes a missing mask lets through (the gate checks)."""

import math

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from llm_algo.bench import bandwidth_row, baseline_rows, copy_row
from llm_algo.check import (
    Checks,
    describe,
    expect,
    expect_close,
    expect_refused,
    expect_refused_or_correct,
    expect_tensor,
)
from llm_algo.check.restrictions import AUTOGRAD
from llm_algo.device import triton_compiled, triton_device, triton_dtypes
from llm_algo.references.kernels import expect_guard_untouched, guarded, random_window
from llm_algo.references.layouts import distinct_layouts, expect_own_layouts

checks = Checks("p03.fused_elementwise", triton=True)
checks.restrict(
    "swiglu",
    kernel=True,
    forbid=[F.silu, torch.nn.SiLU],
    instead="compute silu(gate) * up in your @triton.jit kernel (F.silu is the checks' reference)",
)
checks.restrict(
    "swiglu_backward",
    kernel=True,
    forbid=[F.silu, torch.nn.SiLU, *AUTOGRAD],
    instead="compute the gradients you derived in your @triton.jit kernel (autograd is the checks' reference)",
)
checks.restrict(
    "bias_gelu",
    kernel=True,
    forbid=[F.gelu, torch.nn.GELU],
    instead="compute gelu(x + bias) in your @triton.jit kernel (F.gelu is the checks' reference)",
)

HINT_STRIDES = "address row r at ptr + r * row_stride (each tensor its own stride), not r * n_cols"
HINT_SILU = "out = gate * sigmoid(gate) * up, computed in float32"
HINT_BACKWARD = "d_up = d_out * gate * s; d_gate = d_out * up * s * (1 + gate * (1 - s)), s = sigmoid(gate)"
HINT_GELU = "exact: 0.5 x (1 + erf(x / sqrt 2)); tanh: x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3)"


def random_shapes():
    """(rows, cols): a single element, odd widths that are not block multiples, a batch of one; larger compiled."""
    return [(1, 1), (37, 129), (1, 1000), (4, 64)] + ([(1024, 14336), (3, 20000)] if triton_compiled() else [])


def random_matrix(shape, dtype, scale=3.0):
    return (torch.randn(shape, device=triton_device()) * scale).to(dtype)


# ------------------------------------------------------------------------------------------------ traffic


class KernelTraffic(TorchDispatchMode):
    """Adds up, for every aten kernel that runs, the bytes of its tensor operands and of its results.
    Views (detach, alias) move no data and are skipped."""

    def __init__(self):
        super().__init__()
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not func.is_view:
            tensors = [t for t in tree_flatten((args, kwargs, out))[0] if isinstance(t, torch.Tensor)]
            self.bytes += sum(t.numel() * t.element_size() for t in tensors)
        return out


def measured_eager_traffic(n_rows: int, n_cols: int, dtype) -> dict[str, int]:
    """What eager PyTorch actually moves for the three computations (forward, autograd backward, bias + GeLU)."""
    gate = torch.randn(n_rows, n_cols, dtype=dtype, requires_grad=True)
    up = torch.randn(n_rows, n_cols, dtype=dtype, requires_grad=True)
    x, bias = torch.randn(n_rows, n_cols, dtype=dtype), torch.randn(n_cols, dtype=dtype)
    d_out = torch.randn(n_rows, n_cols, dtype=dtype)
    counts = {}
    with KernelTraffic() as counter:
        out = F.silu(gate) * up
    counts["eager_swiglu_forward"] = counter.bytes
    with KernelTraffic() as counter:
        out.backward(d_out)
    counts["eager_swiglu_backward"] = counter.bytes
    with KernelTraffic() as counter:
        F.gelu(x + bias)
    counts["eager_bias_gelu"] = counter.bytes
    return counts


def one_pass(*tensors) -> int:
    """A fused kernel reads each input once and writes each output once."""
    return sum(t.numel() * t.element_size() for t in tensors)


TRAFFIC_KEYS = {
    "eager_swiglu_forward",
    "fused_swiglu_forward",
    "eager_swiglu_backward",
    "fused_swiglu_backward",
    "eager_bias_gelu",
    "fused_bias_gelu",
}


def expect_counts(got, want: dict[str, int], label: str, hint: str) -> None:
    expect(
        isinstance(got, dict) and set(got) >= set(want),
        "missing keys in the returned dict",
        input=label,
        expected=str(sorted(want)),
        got=str(sorted(got) if isinstance(got, dict) else type(got).__name__),
    )
    for key, value in want.items():
        expect(
            isinstance(got[key], int) and got[key] == value,
            f"wrong byte count for {key}",
            input=label,
            expected=f"{value} bytes",
            got=repr(got[key]),
            hint=hint,
        )


@checks("traffic")
def hand_checkable_counts(ex):
    """a (2, 3) fp16 case worked by hand: tensors of 12 bytes, a bias of 6"""
    want = dict(
        eager_swiglu_forward=60,
        fused_swiglu_forward=36,
        eager_swiglu_backward=108,
        fused_swiglu_backward=60,
        eager_bias_gelu=54,
        fused_bias_gelu=30,
    )
    expect_counts(
        ex.elementwise_traffic(2, 3, 2),
        want,
        "n_rows=2, n_cols=3, element_size=2",
        "each kernel reads every operand once and writes its result once; intermediates cost a write and a read",
    )


@checks("traffic")
def eager_counts_match_the_dispatcher(ex):
    """eager counts equal the bytes of every kernel PyTorch dispatches (forward, autograd backward, bias + GeLU)"""
    for n_rows, n_cols in ((1, 1), (3, 5), (7, 129)):
        for dtype in (torch.float32, torch.float16):
            want = measured_eager_traffic(n_rows, n_cols, dtype)
            got = ex.elementwise_traffic(n_rows, n_cols, torch.empty(0, dtype=dtype).element_size())
            expect_counts(
                got,
                want,
                f"n_rows={n_rows}, n_cols={n_cols}, {str(dtype).removeprefix('torch.')}, measured by intercepting aten ops",
                "eager runs silu then mul (forward); mul, mul, silu_backward (backward); add then gelu",
            )


@checks("traffic")
def fused_counts_read_and_write_once(ex):
    """fused counts are one read of each input and one write of each output, at several shapes"""
    for n_rows, n_cols, element_size in ((1, 1, 4), (8, 14, 2), (129, 37, 2), (5, 4096, 4)):
        tensor = torch.empty(n_rows, n_cols, dtype={2: torch.float16, 4: torch.float32}[element_size])
        bias = torch.empty(n_cols, dtype=tensor.dtype)
        want = {
            "fused_swiglu_forward": one_pass(tensor, tensor, tensor),  # gate, up -> out
            "fused_swiglu_backward": one_pass(
                tensor, tensor, tensor, tensor, tensor
            ),  # gate, up, d_out -> d_gate, d_up
            "fused_bias_gelu": one_pass(tensor, bias, tensor),  # x, bias -> out
        }
        expect_counts(
            ex.elementwise_traffic(n_rows, n_cols, element_size),
            want,
            f"n_rows={n_rows}, n_cols={n_cols}, element_size={element_size}",
            "the fused backward reads gate, up and d_out and writes d_gate and d_up: 5 tensors",
        )


# ------------------------------------------------------------------------------------------------ swiglu


def swiglu_oracle(gate, up):
    return F.silu(gate.double().cpu()) * up.double().cpu()


@checks("swiglu", gate=True)
def forward_kernel_stays_inside_strided_rows(ex):
    """calls swiglu_forward_kernel on 5x100 windows with row strides 150/130/120 and BLOCK_SIZE 64; guards survive"""
    n_rows, n_cols = 5, 100
    gate = random_window((n_rows, n_cols), (0, 50), device=triton_device())
    up = random_window((n_rows, n_cols), (0, 30), device=triton_device())
    buffer, out = guarded((n_rows, n_cols), (2, 20), device=triton_device())
    grid = (n_rows, 2)
    ex.swiglu_forward_kernel[grid](out, gate, up, gate.stride(0), up.stride(0), out.stride(0), n_cols, BLOCK_SIZE=64)
    label = f"(5, 100) windows, row strides gate {gate.stride(0)}, up {up.stride(0)}, out {out.stride(0)}, grid (5, 2)"
    expect_guard_untouched(buffer, (n_rows, n_cols), input=label, hint="mask the store with cols < n_cols")
    expect_close(out, swiglu_oracle(gate, up), input=label, hint=HINT_STRIDES)


@checks("swiglu")
def hand_checkable_silu_values(ex):
    """silu(0) = 0, silu(1) = 1 / (1 + e^-1), silu(-1) = -1 / (1 + e), times up"""
    gate = torch.tensor([[0.0, 1.0, -1.0, 2.0]], device=triton_device())
    up = torch.tensor([[3.0, 2.0, 1.0, 0.5]], device=triton_device())
    expected = torch.tensor(
        [[0.0, 2.0 / (1 + math.exp(-1)), -1.0 / (1 + math.e), 0.5 * 2.0 / (1 + math.exp(-2))]], dtype=torch.float64
    )
    expect_close(ex.swiglu(gate, up), expected, input="gate=[[0, 1, -1, 2]], up=[[3, 2, 1, 0.5]]", hint=HINT_SILU)


@checks("swiglu")
def random_shapes_and_dtypes(ex):
    """random rows of odd widths, fp32 and fp16 (bf16 too when compiled), blocks of 128 and 1024, vs F.silu"""
    for dtype in triton_dtypes():
        for shape in random_shapes():
            for block_size in (128, 1024):
                gate, up = random_matrix(shape, dtype), random_matrix(shape, dtype, scale=1.0)
                got = ex.swiglu(gate, up, block_size=block_size)
                label = describe(gate=gate, up=up, block_size=block_size)
                expect_tensor(got, shape=shape, dtype=dtype, device=gate.device.type, input=label)
                expect_close(got, swiglu_oracle(gate, up), baseline=F.silu(gate) * up, input=label, hint=HINT_SILU)


@checks("swiglu")
def halves_of_a_fused_projection(ex):
    """gate, up = h.chunk(2, -1): row-strided views; gates up to +-40 in fp16 stay finite and exact"""
    for dtype in (torch.float32, torch.float16):
        h = random_matrix((9, 2 * 300), dtype, scale=15.0)
        h[0, :300] = torch.linspace(-40, 40, 300)
        gate, up = h.chunk(2, dim=-1)
        got = ex.swiglu(gate, up, block_size=128)
        label = describe(h=h) + ", gate, up = h.chunk(2, dim=-1) (row stride 600)"
        expect(
            bool(torch.isfinite(got).all()),
            "inf or nan in the output",
            input=label,
            expected="finite values",
            got=f"{int((~torch.isfinite(got)).sum())} non-finite",
            hint="upcast to float32 before sigmoid; use tl.sigmoid",
        )
        expect_close(got, swiglu_oracle(gate, up), baseline=F.silu(gate) * up, input=label, hint=HINT_STRIDES)


@checks("swiglu")
def rejects_inputs_it_cannot_handle(ex):
    """different shapes, a 1-D input and a transposed input raise with a message"""
    a = torch.randn(6, 8, device=triton_device())
    for label, gate, up in (
        ("gate (6, 8), up (6, 7)", a, torch.randn(6, 7, device=triton_device())),
        ("gate (8,), up (8,)", a[0], a[1]),
        ("gate = t.T (column stride 8)", a.T, a.T.contiguous()),
    ):
        expect_refused(
            lambda g=gate, u=up: ex.swiglu(g, u),
            input=label,
            hint="check 2-D, equal shapes and stride(1) == 1 first",
        )


def rows_with_stride(n_rows, n_cols, row_stride):
    """(n_rows, n_cols) with unit column stride and the given row stride (0 = one row repeated, < n_cols = rows that
    overlap), over a buffer of n_rows * n_cols elements: read with another tensor's row stride, it stays in memory
    the check owns."""
    base = torch.randn(n_rows * n_cols, device=triton_device())
    return base.as_strided((n_rows, n_cols), (row_stride, 1))


@checks("swiglu")
def each_input_through_its_own_row_stride(ex):
    """gate one row repeated (row stride 0) and up with overlapping rows (row stride 64): each read with its own stride"""
    gate, up = rows_with_stride(5, 100, 0), rows_with_stride(5, 100, 64)
    label = f"(5, 100): gate strides {gate.stride()}, up strides {up.stride()}"
    expect_close(ex.swiglu(gate, up, block_size=64), swiglu_oracle(gate, up), input=label, hint=HINT_STRIDES)


@checks("swiglu")
def swiglu_operands_in_their_own_layouts(ex):
    """gate a slice of a fused projection and up with padded rows must be right; gate transposed (column stride != 1)
    refused with a ValueError, or right"""
    gate, up = random_matrix((7, 40), torch.float32), random_matrix((7, 40), torch.float32, 1.0)
    lg, lu = distinct_layouts(gate, up)
    expect_own_layouts(lg, lu)
    label = f"(7, 40): strides gate {lg.stride()}, up {lu.stride()}"
    expect_close(ex.swiglu(lg, lu, block_size=32), swiglu_oracle(gate, up), input=label, hint=HINT_STRIDES)
    lg, lu = distinct_layouts(gate, up, order=("transposed", "fused_slice"))
    label = f"(7, 40): strides gate {lg.stride()}, up {lu.stride()}"
    expect_refused_or_correct(
        lambda: ex.swiglu(lg, lu, block_size=32),
        lambda got: expect_close(got, swiglu_oracle(gate, up), input=label + " (accepted: must be right)"),
        input=label,
        hint="refuse a column stride != 1 with a ValueError before launching, or read it correctly",
    )


# --------------------------------------------------------------------------------------- swiglu_backward


def swiglu_autograd(d_out, gate, up, dtype=None):
    """(d_gate, d_up) by autograd of F.silu(gate) * up, in float64 (the oracle) or in `dtype` (the baseline)."""
    dtype = dtype or torch.float64
    g = gate.detach().cpu().to(dtype).requires_grad_()
    u = up.detach().cpu().to(dtype).requires_grad_()
    (F.silu(g) * u).backward(d_out.detach().cpu().to(dtype))
    return g.grad, u.grad


def expect_gradients(got, d_out, gate, up, label, hint=HINT_BACKWARD):
    expect(
        isinstance(got, tuple) and len(got) == 2,
        "swiglu_backward must return (d_gate, d_up)",
        input=label,
        got=type(got).__name__,
    )
    want_gate, want_up = swiglu_autograd(d_out, gate, up)
    base_gate, base_up = swiglu_autograd(d_out, gate, up, gate.dtype)
    for name, tensor, want, base in (("d_gate", got[0], want_gate, base_gate), ("d_up", got[1], want_up, base_up)):
        expect_tensor(tensor, shape=gate.shape, dtype=gate.dtype, input=label, what=name)
        expect_close(tensor, want, baseline=base, dtype=gate.dtype, input=label, what=name, hint=hint)


@checks("swiglu_backward", gate=True)
def backward_kernel_stays_inside_strided_rows(ex):
    """calls swiglu_backward_kernel on 4x100 windows with BLOCK_SIZE 64; the guards of d_gate and d_up survive"""
    n_rows, n_cols = 4, 100
    d_out = random_window((n_rows, n_cols), (0, 10), device=triton_device())
    gate = random_window((n_rows, n_cols), (0, 50), device=triton_device())
    up = random_window((n_rows, n_cols), (0, 30), device=triton_device())
    gate_buffer, d_gate = guarded((n_rows, n_cols), (1, 28), device=triton_device())
    up_buffer, d_up = guarded((n_rows, n_cols), (1, 40), device=triton_device())
    strides = (d_gate.stride(0), d_up.stride(0), d_out.stride(0), gate.stride(0), up.stride(0))
    ex.swiglu_backward_kernel[(n_rows, 2)](d_gate, d_up, d_out, gate, up, *strides, n_cols, BLOCK_SIZE=64)
    label = f"(4, 100) windows, row strides (d_gate, d_up, d_out, gate, up) = {strides}, grid (4, 2)"
    for name, buffer in (("d_gate", gate_buffer), ("d_up", up_buffer)):
        expect_guard_untouched(buffer, (n_rows, n_cols), input=f"{label}; {name}", hint="mask both stores")
    expect_gradients((d_gate, d_up), d_out, gate, up, label, hint=HINT_STRIDES)


@checks("swiglu_backward")
def hand_checkable_at_zero_gate(ex):
    """gate = 0: silu = 0 and silu' = 1/2, so d_up = 0 and d_gate = d_out * up / 2"""
    up = torch.tensor([[1.0, -2.0, 3.0]], device=triton_device())
    d_out = torch.tensor([[0.5, 1.0, -1.0]], device=triton_device())
    d_gate, d_up = ex.swiglu_backward(d_out, torch.zeros_like(up), up)
    label = "gate=[[0, 0, 0]], up=[[1, -2, 3]], d_out=[[0.5, 1, -1]]"
    expect_close(
        d_up, torch.zeros(1, 3, dtype=torch.float64), input=label, what="d_up", hint="d_up = d_out * silu(gate)"
    )
    expect_close(
        d_gate,
        torch.tensor([[0.25, -1.0, -1.5]], dtype=torch.float64),
        input=label,
        what="d_gate",
        hint="silu'(0) = sigmoid(0) + 0 = 1/2",
    )


@checks("swiglu_backward")
def matches_float64_autograd(ex):
    """random shapes, fp32 and fp16 (bf16 too when compiled), vs float64 autograd of F.silu(gate) * up"""
    for dtype in triton_dtypes():
        for shape in random_shapes():
            gate, up, d_out = (
                random_matrix(shape, dtype),
                random_matrix(shape, dtype, 1.0),
                random_matrix(shape, dtype, 1.0),
            )
            got = ex.swiglu_backward(d_out, gate, up, block_size=128)
            expect_gradients(got, d_out, gate, up, describe(d_out=d_out, gate=gate, up=up))


@checks("swiglu_backward")
def autograd_function_through_a_fused_projection(ex):
    """SwiGLU.apply on the halves of h (row-strided): h.grad matches float64 autograd, forward matches F.silu"""
    for dtype in (torch.float32, torch.float16):
        h = random_matrix((6, 2 * 77), dtype).requires_grad_()
        weight = random_matrix((6, 77), dtype, 1.0)
        gate, up = h.chunk(2, dim=-1)
        out = ex.SwiGLU.apply(gate, up)
        label = describe(h=h) + ", gate, up = h.chunk(2, -1); loss = (SwiGLU.apply(gate, up) * w).sum()"
        expect_close(out, swiglu_oracle(gate, up), baseline=F.silu(gate.detach()) * up.detach(), input=label)
        (out * weight).sum().backward()
        h64 = h.detach().cpu().double().requires_grad_()
        gate64, up64 = h64.chunk(2, dim=-1)
        (F.silu(gate64) * up64 * weight.cpu().double()).sum().backward()
        expect_close(
            h.grad,
            h64.grad,
            dtype=dtype,
            input=label,
            what="h.grad",
            hint="backward returns (d_gate, d_up) in the order of forward's inputs; save gate and up in forward",
        )


@checks("swiglu_backward")
def strided_inputs_and_refused_ones(ex):
    """gate, up and d_out with row strides 0, 100 and 64 (each read with its own); a transposed gate and a dtype mix
    are refused; SwiGLU.backward gets a transposed upstream gradient and makes it contiguous"""
    gate, up, d_out = rows_with_stride(5, 100, 0), rows_with_stride(5, 100, 100), rows_with_stride(5, 100, 64)
    label = f"(5, 100): row strides gate {gate.stride(0)}, up {up.stride(0)}, d_out {d_out.stride(0)}"
    expect_gradients(ex.swiglu_backward(d_out, gate, up, block_size=64), d_out, gate, up, label, hint=HINT_STRIDES)
    a = torch.randn(8, 8, device=triton_device())
    for label, call in (
        ("gate = t.T (column stride 8)", lambda: ex.swiglu_backward(a.clone(), a.T, a.clone())),
        ("d_out float16, gate and up float32", lambda: ex.swiglu_backward(a.half(), a.clone(), a.clone())),
    ):
        expect_refused(call, input=label, hint="check 2-D, one shape and dtype, and stride(1) == 1 for all three")
    gate = random_matrix((6, 9), torch.float32).requires_grad_()
    up = random_matrix((6, 9), torch.float32, 1.0).requires_grad_()
    weight = random_matrix((9, 6), torch.float32, 1.0)
    (ex.SwiGLU.apply(gate, up).T * weight).sum().backward()  # d_out = weight.T: column stride 6
    want_gate, want_up = swiglu_autograd(weight.T, gate, up)
    label = "loss = (SwiGLU.apply(gate, up).T * w).sum(): the upstream gradient w.T has column stride 6"
    hint = "the kernel needs a unit column stride: pass d_out.contiguous() to swiglu_backward"
    expect_close(gate.grad, want_gate, input=label, what="gate.grad", hint=hint)
    expect_close(up.grad, want_up, input=label, what="up.grad", hint=hint)


@checks("swiglu_backward")
def backward_operands_in_their_own_layouts(ex):
    """d_out a slice of a fused tensor, gate with padded rows, up a window of a bigger buffer: each read through its
    own row stride"""
    gate, up = random_matrix((7, 40), torch.float32), random_matrix((7, 40), torch.float32, 1.0)
    d_out = torch.randn(7, 40, device=triton_device())
    ld, lg, lu = distinct_layouts(d_out, gate, up, order=("fused_slice", "padded", "outer_padded"))
    expect_own_layouts(ld, lg, lu)
    label = f"(7, 40): strides d_out {ld.stride()}, gate {lg.stride()}, up {lu.stride()}"
    expect_gradients(ex.swiglu_backward(ld, lg, lu, block_size=32), d_out, gate, up, label, hint=HINT_STRIDES)


# ------------------------------------------------------------------------------------------------ bias_gelu


def gelu_oracle(x, bias, approximate):
    return F.gelu(x.double().cpu() + bias.double().cpu(), approximate=approximate)


@checks("bias_gelu", gate=True)
def gelu_kernel_stays_inside_strided_rows(ex):
    """calls bias_gelu_kernel (both variants) on a 5x100 window with BLOCK_SIZE 64; the guard elements survive"""
    n_rows, n_cols = 5, 100
    x = random_window((n_rows, n_cols), (0, 36), device=triton_device())
    bias = torch.randn(n_cols, device=triton_device())
    for approximate in ("none", "tanh"):
        buffer, out = guarded((n_rows, n_cols), (2, 12), device=triton_device())
        ex.bias_gelu_kernel[(n_rows, 2)](
            out, x, bias, x.stride(0), out.stride(0), n_cols, BLOCK_SIZE=64, APPROXIMATE_TANH=approximate == "tanh"
        )
        label = f"(5, 100) windows, row strides x {x.stride(0)}, out {out.stride(0)}, APPROXIMATE_TANH={approximate == 'tanh'}"
        expect_guard_untouched(buffer, (n_rows, n_cols), input=label, hint="mask the store with cols < n_cols")
        expect_close(out, gelu_oracle(x, bias, approximate), input=label, hint=HINT_STRIDES)


@checks("bias_gelu")
def hand_checkable_gelu_values(ex):
    """x + bias = [1, -1, 0, 2]: exact gelu = x Phi(x) with Phi from math.erf; tanh form from math.tanh"""
    x = torch.tensor([[0.5, -2.0, 1.0, 1.5]], device=triton_device())
    bias = torch.tensor([0.5, 1.0, -1.0, 0.5], device=triton_device())
    z = [1.0, -1.0, 0.0, 2.0]
    exact = [v * 0.5 * (1 + math.erf(v / math.sqrt(2))) for v in z]
    tanh_form = [0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3))) for v in z]
    for approximate, values in (("none", exact), ("tanh", tanh_form)):
        expect_close(
            ex.bias_gelu(x, bias, approximate=approximate),
            torch.tensor([values], dtype=torch.float64),
            input=f"x=[[0.5, -2, 1, 1.5]], bias=[0.5, 1, -1, 0.5], approximate={approximate!r}",
            hint=HINT_GELU,
        )


@checks("bias_gelu")
def random_shapes_dtypes_and_both_forms(ex):
    """random rows of odd widths, fp32 and fp16 (bf16 when compiled), exact and tanh, vs F.gelu in float64"""
    for dtype in triton_dtypes():
        for shape in random_shapes():
            x, bias = random_matrix(shape, dtype, 2.0), random_matrix((shape[1],), dtype, 1.0)
            for approximate in ("none", "tanh"):
                got = ex.bias_gelu(x, bias, approximate=approximate, block_size=128)
                label = describe(x=x, bias=bias, approximate=approximate)
                expect_tensor(got, shape=shape, dtype=dtype, device=x.device.type, input=label)
                expect_close(
                    got,
                    gelu_oracle(x, bias, approximate),
                    baseline=F.gelu(x + bias, approximate=approximate),
                    input=label,
                    hint=HINT_GELU + "; the bias is indexed by the column",
                )


@checks("bias_gelu")
def bias_gelu_operands_in_their_own_layouts(ex):
    """x a slice of a fused projection and bias every other element of a buffer: refused with a ValueError (the
    lesson asks for a contiguous bias), or gelu(x + bias)"""
    x, bias = random_matrix((7, 40), torch.float32, 2.0), random_matrix((40,), torch.float32, 1.0)
    lx, lb = distinct_layouts(x, bias)
    expect_own_layouts(lx, lb)
    label = f"(7, 40): strides x {lx.stride()}, bias {lb.stride()}"
    expect_refused_or_correct(
        lambda: ex.bias_gelu(lx, lb, approximate="tanh", block_size=32),
        lambda got: expect_close(got, gelu_oracle(x, bias, "tanh"), input=label + " (accepted: must be right)"),
        input=label,
        hint="refuse a strided bias with a ValueError before launching, or read it correctly",
    )


@checks("bias_gelu")
def large_inputs_and_strided_rows(ex):
    """x + bias from -60 to 60 on a row-strided view: finite, gelu(x) = x for large x and 0 for very negative x"""
    base = torch.randn(3, 400, device=triton_device())
    base[:, :300] = torch.linspace(-60, 60, 300)
    x = base[:, :300]
    bias = torch.randn(300, device=triton_device()) * 0.1
    for approximate in ("none", "tanh"):
        got = ex.bias_gelu(x, bias, approximate=approximate)
        label = describe(x=x, bias=bias, approximate=approximate) + " with x from -60 to 60, row stride 400"
        expect(
            bool(torch.isfinite(got).all()),
            "inf or nan in the output",
            input=label,
            expected="finite values",
            got=f"{int((~torch.isfinite(got)).sum())} non-finite",
            hint="tanh through exp(2u) overflows: use 0.5 (1 + tanh u) = sigmoid(2u)",
        )
        expect_close(got, gelu_oracle(x, bias, approximate), input=label, hint=HINT_GELU)


@checks("bias_gelu")
def gelu_rejects_inputs_it_cannot_handle(ex):
    """an unknown approximation, a bias of the wrong length and a transposed x raise with a message"""
    x = torch.randn(4, 6, device=triton_device())
    bias = torch.randn(6, device=triton_device())
    for label, call in (
        ("approximate='sigmoid'", lambda: ex.bias_gelu(x, bias, approximate="sigmoid")),
        ("x (4, 6), bias (4,)", lambda: ex.bias_gelu(x, bias[:4])),
        ("x = t.T (column stride 6)", lambda: ex.bias_gelu(torch.randn(6, 6, device=triton_device()).T, bias)),
    ):
        expect_refused(call, input=label, hint="check approximate, shapes and strides first")


# ------------------------------------------------------------------------------------------------ benchmark


def _eager_swiglu(gate, up):
    return F.silu(gate) * up


def _eager_swiglu_backward(d_out, gate, up):
    sigmoid = torch.sigmoid(gate)
    return d_out * up * sigmoid * (1 + gate * (1 - sigmoid)), d_out * gate * sigmoid


def _eager_bias_gelu(x, bias):
    return F.gelu(x + bias, approximate="tanh")


def benchmark(ex):
    """Llama-3-8B's MLP activation at 8192 tokens: gate and up 8192 x 14336 bf16 (halves of one projection)."""
    n_rows, n_cols = 8192, 14336
    gate_up = torch.randn(n_rows, 2 * n_cols, device="cuda", dtype=torch.bfloat16)
    gate, up = gate_up.chunk(2, dim=-1)
    d_out = torch.randn(n_rows, n_cols, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(n_rows, n_cols, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(n_cols, device="cuda", dtype=torch.bfloat16)
    tensor = n_rows * n_cols * 2
    shape = f"{n_rows}x{n_cols} bf16"
    rows = [bandwidth_row("swiglu forward (fused)", shape, lambda: ex.swiglu(gate, up), 3 * tensor)]
    rows += baseline_rows("F.silu(g) * u", shape, _eager_swiglu, (gate, up), bytes_moved=3 * tensor)
    rows.append(
        bandwidth_row("swiglu backward (fused)", shape, lambda: ex.swiglu_backward(d_out, gate, up), 5 * tensor)
    )
    rows += baseline_rows("swiglu backward", shape, _eager_swiglu_backward, (d_out, gate, up), bytes_moved=5 * tensor)
    rows.append(bandwidth_row("bias_gelu tanh (fused)", shape, lambda: ex.bias_gelu(x, bias, "tanh"), 2 * tensor))
    rows += baseline_rows("F.gelu(x + b)", shape, _eager_bias_gelu, (x, bias), bytes_moved=2 * tensor)
    rows.append(copy_row(tensor))
    return rows
