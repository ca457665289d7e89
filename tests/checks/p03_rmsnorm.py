"""Checks for p03.rmsnorm. References: `F.rms_norm` in float64 (oracle) and in the dtype under test (baseline),
float64 autograd of `F.rms_norm` for dx and dweight, the closed form rstd = 1 / sqrt(mean(x^2) + eps), a
hand-worked row, and guard elements around y, rstd, dx and the partial-sum buffer (the gate checks)."""

import math

import torch
import torch.nn.functional as F

from llm_algo.bench import bandwidth_row, baseline_rows, copy_row
from llm_algo.check import Checks, describe, expect_close, expect_refused, expect_refused_or_correct, expect_tensor
from llm_algo.check.restrictions import AUTOGRAD, RMS_NORM
from llm_algo.device import triton_compiled, triton_device, triton_dtypes
from llm_algo.references.kernels import expect_guard_untouched, guarded, random_window
from llm_algo.references.layouts import distinct_layouts, expect_own_layouts, with_layout

checks = Checks("p03.rmsnorm", triton=True)
checks.restrict(
    "rmsnorm_forward",
    "rms_norm",
    kernel=True,
    forbid=RMS_NORM,
    instead="normalise in your @triton.jit kernel (F.rms_norm is the checks' reference)",
)
checks.restrict(
    "rmsnorm_backward",
    kernel=True,
    forbid=[*RMS_NORM, *AUTOGRAD],
    instead="compute the gradients in your @triton.jit kernel (autograd of F.rms_norm is the checks' reference)",
)

HINT_FORWARD = "rstd = rsqrt(sum(x * x) / n_cols + eps) in float32; y = x * rstd * weight"
HINT_DX = "dx = rstd * (u - x_hat * c), u = dy * weight, x_hat = x * rstd, c = sum(u * x_hat) / n_cols"
HINT_DW = "dweight = sum over all rows of dy * x_hat (dy, not dy * weight); every program stores its own partial row"


def random_shapes():
    """(rows, cols): one element, odd widths, a batch of one, more rows than programs; real sizes when compiled."""
    return [(1, 1), (37, 129), (1, 1000), (13, 64)] + ([(4096, 4096), (7, 16384)] if triton_compiled() else [])


def random_rows(shape, dtype, scale=1.0):
    """Activations with a non-zero mean (as real ones have) and a weight around 1."""
    x = (torch.randn(shape, device=triton_device()) * scale + 0.3 * scale).to(dtype)
    weight = (1 + 0.5 * torch.randn(shape[-1], device=triton_device())).to(dtype)
    return x, weight


def forward_oracle(x, weight, eps):
    return F.rms_norm(x.double().cpu(), (x.shape[-1],), weight.double().cpu(), eps)


def rstd_oracle(x, eps):
    return torch.rsqrt(x.double().cpu().pow(2).mean(dim=-1) + eps)


def autograd(x, weight, dy, eps, dtype=torch.float64):
    """(dx, dweight) by autograd of F.rms_norm in `dtype`: float64 for the oracle, x's dtype for the baseline."""
    x_ = x.detach().cpu().to(dtype).requires_grad_()
    w_ = weight.detach().cpu().to(dtype).requires_grad_()
    F.rms_norm(x_, (x.shape[-1],), w_, eps).backward(dy.detach().cpu().to(dtype))
    return x_.grad, w_.grad


def expect_gradients(dx, dweight, x, weight, dy, eps, label, hint_dx=HINT_DX):
    want_dx, want_dw = autograd(x, weight, dy, eps)
    base_dx, base_dw = autograd(x, weight, dy, eps, x.dtype)
    expect_tensor(dx, shape=x.shape, dtype=x.dtype, input=label, what="dx")
    expect_tensor(dweight, shape=weight.shape, dtype=weight.dtype, input=label, what="dweight")
    expect_close(dx, want_dx, baseline=base_dx, input=label, what="dx", hint=hint_dx)
    expect_close(dweight, want_dw, baseline=base_dw, input=label, what="dweight", hint=HINT_DW)


# ---------------------------------------------------------------------------------------- rmsnorm_forward


@checks("rmsnorm_forward", gate=True)
def forward_kernel_stays_inside_its_outputs(ex):
    """calls rmsnorm_forward_kernel on a 6x100 window (row stride 140, BLOCK_SIZE 128); guards of y and rstd survive"""
    n_rows, n_cols, eps = 6, 100, 1e-6
    x = random_window((n_rows, n_cols), (1, 40), device=triton_device())
    weight = torch.randn(n_cols, device=triton_device())
    y_buffer, y = guarded((n_rows, n_cols), (2, 20), device=triton_device())
    rstd_buffer, rstd = guarded((n_rows,), (5,), device=triton_device())
    ex.rmsnorm_forward_kernel[(n_rows,)](y, rstd, x, weight, x.stride(0), y.stride(0), n_cols, eps, BLOCK_SIZE=128)
    label = f"x = a (6, 100) window with row stride {x.stride(0)}, y row stride {y.stride(0)}, BLOCK_SIZE=128"
    expect_guard_untouched(y_buffer, (n_rows, n_cols), input=label, hint="mask the store of y with cols < n_cols")
    expect_guard_untouched(
        rstd_buffer, (n_rows,), input=label + " (rstd)", hint="store one rstd per row, at rstd_ptr + row"
    )
    expect_close(rstd, rstd_oracle(x, eps), input=label, what="rstd", hint="divide the sum of squares by n_cols")
    expect_close(
        y, forward_oracle(x, weight, eps), input=label, hint="address row r at x_ptr + r * x_row_stride, not r * n_cols"
    )


@checks("rmsnorm_forward")
def hand_checkable_row(ex):
    """x = [3, 4], weight = [2, 0.5], eps = 0: rms = sqrt(12.5), rstd = 1 / sqrt(12.5)"""
    x = torch.tensor([[3.0, 4.0]], device=triton_device())
    weight = torch.tensor([2.0, 0.5], device=triton_device())
    y, rstd = ex.rmsnorm_forward(x, weight, eps=0.0)
    r = 1 / math.sqrt(12.5)
    label = "x=[[3, 4]], weight=[2, 0.5], eps=0"
    expect_close(rstd, torch.tensor([r], dtype=torch.float64), input=label, what="rstd", hint="rstd = 1 / rms, not rms")
    expect_close(y, torch.tensor([[6 * r, 2 * r]], dtype=torch.float64), input=label, hint=HINT_FORWARD)


@checks("rmsnorm_forward")
def random_rows_and_dtypes(ex):
    """random rows of odd widths, fp32 and fp16 (bf16 when compiled), vs F.rms_norm; rstd in float32"""
    for dtype in triton_dtypes():
        for shape in random_shapes():
            x, weight = random_rows(shape, dtype)
            y, rstd = ex.rmsnorm_forward(x, weight, eps=1e-6)
            label = describe(x=x, weight=weight, eps=1e-6)
            expect_tensor(y, shape=shape, dtype=dtype, device=x.device.type, input=label, what="y")
            expect_tensor(rstd, shape=shape[:1], dtype=torch.float32, input=label, what="rstd")
            baseline = F.rms_norm(x, (shape[1],), weight, 1e-6)
            expect_close(
                y, forward_oracle(x, weight, 1e-6), baseline=baseline, input=label, what="y", hint=HINT_FORWARD
            )
            expect_close(rstd, rstd_oracle(x, 1e-6), input=label, what="rstd", hint=HINT_FORWARD)


@checks("rmsnorm_forward")
def small_activations_large_eps(ex):
    """activations of ~1e-3 with eps = 1e-2 (eps dominates: it must be inside the root), and ~1e3 in fp16"""
    for scale, eps, dtype in ((1e-3, 1e-2, torch.float32), (1e3, 1e-6, torch.float16)):
        x, weight = random_rows((5, 300), dtype, scale)
        y, rstd = ex.rmsnorm_forward(x, weight, eps=eps)
        label = describe(x=x, eps=eps) + f" with |x| ~ {scale:g}"
        expect_close(rstd, rstd_oracle(x, eps), input=label, what="rstd", hint="rsqrt(mean_square + eps), eps inside")
        expect_close(
            y,
            forward_oracle(x, weight, eps),
            baseline=F.rms_norm(x, (300,), weight, eps),
            input=label,
            hint="square in float32: x * x overflows fp16 above 256",
        )


@checks("rmsnorm_forward")
def rejects_inputs_it_cannot_handle(ex):
    """a 1-D x, a weight of the wrong length and a transposed x raise with a message"""
    x = torch.randn(4, 6, device=triton_device())
    weight = torch.randn(6, device=triton_device())
    for label, call in (
        ("x (6,)", lambda: ex.rmsnorm_forward(x[0], weight)),
        ("x (4, 6), weight (4,)", lambda: ex.rmsnorm_forward(x, weight[:4])),
        ("x = t.T (column stride 6)", lambda: ex.rmsnorm_forward(torch.randn(6, 6, device=triton_device()).T, weight)),
    ):
        expect_refused(call, input=label, hint="check x.dim() == 2, x.stride(1) == 1 and weight.shape first")


def expect_forward(y, rstd, x, weight, eps, label):
    expect_tensor(y, shape=tuple(x.shape), dtype=x.dtype, input=label, what="y")
    expect_close(y, forward_oracle(x, weight, eps), input=label, what="y", hint=HINT_FORWARD)
    expect_close(rstd, rstd_oracle(x, eps), input=label, what="rstd", dtype=torch.float32, hint=HINT_FORWARD)


@checks("rmsnorm_forward")
def forward_operands_in_their_own_layouts(ex):
    """x a slice of a fused projection (row stride 3 * n_cols) must be right; with weight every other element of a
    buffer (the lesson asks for a contiguous weight) and with x transposed: refused with a ValueError, or right"""
    x, weight = random_rows((9, 40), torch.float32)
    lx = with_layout(x, "fused_slice")
    label = f"{describe(x=x, weight=weight)}, x strides {lx.stride()}"
    y, rstd = ex.rmsnorm_forward(lx, weight, 1e-6)
    expect_forward(y, rstd, x, weight, 1e-6, label)
    for order in (("fused_slice", "padded"), ("transposed", "fused_slice")):
        lx, lw = distinct_layouts(x, weight, order=order)
        expect_own_layouts(lx, lw)
        label = f"{describe(x=x, weight=weight)}, strides x {lx.stride()}, weight {lw.stride()}"
        expect_refused_or_correct(
            lambda lx=lx, lw=lw: ex.rmsnorm_forward(lx, lw, 1e-6),
            lambda result, label=label: expect_forward(*result, x, weight, 1e-6, label + " (accepted: must be right)"),
            input=label,
            hint="refuse a layout the kernel cannot read (ValueError before launching), or read it correctly",
        )


def expanded_row(n_rows, n_cols):
    """One row of activations expanded to n_rows (stride 0), at the start of a buffer of n_rows * n_cols elements:
    a row read with another tensor's stride stays in memory the check owns."""
    return (torch.randn(n_rows * n_cols, device=triton_device()) + 0.3)[:n_cols].expand(n_rows, n_cols)


@checks("rmsnorm_forward")
def strided_rows_and_row_length_limits(ex):
    """rows read through x.stride(0) (an expanded row, stride 0); MAX_FUSED_COLS columns fit, one more is refused"""
    x = expanded_row(4, 130)
    weight = 1 + 0.5 * torch.randn(130, device=triton_device())
    y, _ = ex.rmsnorm_forward(x, weight)
    label = f"x = one row expanded to (4, 130), x.stride() = {x.stride()}"
    expect_close(y, forward_oracle(x, weight, 1e-6), input=label, hint="x_ptr + row * x_row_stride, y with y's stride")
    n_cols = ex.MAX_FUSED_COLS
    x, weight = random_rows((1, n_cols), torch.float32)
    y, _ = ex.rmsnorm_forward(x, weight)
    expect_close(y, forward_oracle(x, weight, 1e-6), input=describe(x=x) + " (n_cols == MAX_FUSED_COLS)")
    expect_refused(
        lambda: ex.rmsnorm_forward(torch.randn(1, n_cols + 1, device=triton_device()), torch.ones(n_cols + 1)),
        input=f"x (1, {n_cols + 1}): one column more than MAX_FUSED_COLS",
        hint="refuse n_cols > MAX_FUSED_COLS (and only that: a row of exactly MAX_FUSED_COLS fits)",
    )


# --------------------------------------------------------------------------------------- rmsnorm_backward


@checks("rmsnorm_backward", gate=True)
def backward_kernel_stays_inside_its_outputs(ex):
    """launches rmsnorm_backward_kernel with 7 rows, 3 rows per program and 4 programs; every operand is a window
    with 5 spare rows, so a loop that runs past row 6 stays in memory the check owns. Which rows a program takes is
    yours to choose: the partial rows (NaN until written) must sum to dweight, every row counted exactly once"""
    n_rows, n_cols, eps, programs, rows_per_program = 7, 100, 1e-6, 4, 3
    x = random_window((n_rows, n_cols), (5, 20), device=triton_device())
    dy = random_window((n_rows, n_cols), (5, 4), device=triton_device())
    weight = torch.randn(n_cols, device=triton_device())
    rstd = random_window((n_rows,), (5,), device=triton_device())
    rstd[:] = rstd_oracle(x, eps).float().to(rstd.device)
    dx_buffer, dx = guarded((n_rows, n_cols), (5, 12), device=triton_device())
    partial_buffer, partial = guarded((programs, n_cols), (1, 28), device=triton_device())
    ex.rmsnorm_backward_kernel[(programs,)](
        dx, partial, dy, x, weight, rstd,
        dx.stride(0), dy.stride(0), x.stride(0), partial.stride(0),
        n_rows, n_cols, rows_per_program, BLOCK_SIZE=128,
    )  # fmt: skip
    label = f"7 x 100 windows (row strides x {x.stride(0)}, dy {dy.stride(0)}, dx {dx.stride(0)}), 4 programs x 3 rows"
    expect_guard_untouched(
        dx_buffer, (n_rows, n_cols), input=label, hint="mask the store of dx; stop the row loop at n_rows"
    )
    expect_guard_untouched(
        partial_buffer, (programs, n_cols), input=label + " (partial buffer)", hint="mask the partial store"
    )
    expect_gradients(dx, partial.sum(dim=0), x, weight, dy, eps, label)


@checks("rmsnorm_backward")
def hand_checkable_gradients(ex):
    """x = [3, 4], weight = [2, 0.5], dy = [1, 0], eps = 0: dx = r [1.28, -0.96], dweight = [3r, 0], r = 1/sqrt(12.5)"""
    x = torch.tensor([[3.0, 4.0]], device=triton_device())
    weight = torch.tensor([2.0, 0.5], device=triton_device())
    dy = torch.tensor([[1.0, 0.0]], device=triton_device())
    r = 1 / math.sqrt(12.5)
    dx, dweight = ex.rmsnorm_backward(dy, x, weight, torch.tensor([r], device=triton_device()))
    label = "x=[[3, 4]], weight=[2, 0.5], dy=[[1, 0]], rstd=[1/sqrt(12.5)]"
    expect_close(dx, torch.tensor([[1.28 * r, -0.96 * r]], dtype=torch.float64), input=label, what="dx", hint=HINT_DX)
    expect_close(dweight, torch.tensor([3 * r, 0.0], dtype=torch.float64), input=label, what="dweight", hint=HINT_DW)


@checks("rmsnorm_backward")
def matches_float64_autograd(ex):
    """random shapes, fp32 and fp16 (bf16 when compiled), 1, 3 and more programs than rows, vs float64 autograd"""
    for dtype in triton_dtypes():
        for shape in random_shapes():
            x, weight = random_rows(shape, dtype)
            dy = torch.randn(shape, device=triton_device()).to(dtype)
            rstd = rstd_oracle(x, 1e-6).float().to(x.device)
            for num_programs in (1, 3, 64) if not triton_compiled() else (None,):
                dx, dweight = ex.rmsnorm_backward(dy, x, weight, rstd, num_programs=num_programs)
                label = describe(x=x, dy=dy, num_programs=num_programs)
                expect_gradients(dx, dweight, x, weight, dy, 1e-6, label)


@checks("rmsnorm_backward")
def many_rows_per_program(ex):
    """300 rows on 7 programs (43 rows each, the last 42): dweight sums all of them"""
    x, weight = random_rows((300, 48), torch.float32)
    dy = torch.randn(300, 48, device=triton_device())
    rstd = rstd_oracle(x, 1e-5).float().to(x.device)
    dx, dweight = ex.rmsnorm_backward(dy, x, weight, rstd, num_programs=7)
    expect_gradients(dx, dweight, x, weight, dy, 1e-5, describe(x=x, num_programs=7))


@checks("rmsnorm_backward")
def backward_operands_in_their_own_layouts(ex):
    """dy a slice of a fused tensor, x with padded rows, weight and rstd columns of wider tensors: refused with a
    ValueError, or the gradients of contiguous copies"""
    x, weight = random_rows((9, 40), torch.float32)
    dy = torch.randn(9, 40, device=x.device)
    rstd = rstd_oracle(x, 1e-6).float().to(x.device)
    ldy, lx, lw, lr = distinct_layouts(dy, x, weight, rstd, order=("fused_slice", "padded", "fused_slice", "padded"))
    expect_own_layouts(ldy, lx, lw, lr)
    label = f"(9, 40): strides dy {ldy.stride()}, x {lx.stride()}, weight {lw.stride()}, rstd {lr.stride()}"
    expect_refused_or_correct(
        lambda: ex.rmsnorm_backward(ldy, lx, lw, lr, num_programs=3),
        lambda result: expect_gradients(*result, x, weight, dy, 1e-6, label + " (accepted: must be right)"),
        input=label,
        hint="read each operand through its own strides; the kernel reads weight and rstd with unit stride: make "
        "them contiguous (or refuse them with a ValueError)",
    )


@checks("rmsnorm_backward")
def strided_rows_and_refused_inputs(ex):
    """x, dy and dx each through their own row stride (x an expanded row, stride 0; dy overlapping rows, stride 64;
    dx contiguous) on 3 programs; a transposed dy and a float64 rstd are refused"""
    x = expanded_row(6, 130)
    dy = torch.randn(6 * 130, device=triton_device()).as_strided((6, 130), (64, 1))  # rows overlap: read-only input
    weight = 1 + 0.5 * torch.randn(130, device=triton_device())
    rstd = rstd_oracle(x, 1e-6).float().to(x.device)
    dx, dweight = ex.rmsnorm_backward(dy, x, weight, rstd, num_programs=3)
    label = f"(6, 130): x an expanded row, strides {x.stride()}; dy overlapping rows, strides {dy.stride()}; 3 programs"
    expect_gradients(dx, dweight, x, weight, dy, 1e-6, label, hint_dx="use each tensor's own row stride: " + HINT_DX)
    x, weight = random_rows((4, 6), torch.float32)
    rstd = rstd_oracle(x, 1e-6).float().to(x.device)
    for label, call in (
        ("dy = t.T (column stride 4)", lambda: ex.rmsnorm_backward(torch.randn(6, 4).T.to(x.device), x, weight, rstd)),
        ("rstd float64", lambda: ex.rmsnorm_backward(torch.randn(4, 6).to(x.device), x, weight, rstd.double())),
    ):
        expect_refused(call, input=label, hint="check unit column strides, shapes and a float32 rstd first")


# ------------------------------------------------------------------------------------------------ rms_norm


def expect_function_matches(ex, x, weight, eps, label):
    x = x.detach().requires_grad_()
    weight = weight.detach().requires_grad_()
    y = ex.rms_norm(x, weight, eps)
    expect_close(y, forward_oracle(x, weight, eps), baseline=F.rms_norm(x.detach(), (x.shape[-1],), weight.detach(), eps),
                 input=label, what="y")  # fmt: skip
    dy = torch.randn_like(y)
    y.backward(dy)
    want_dx, want_dw = autograd(x, weight, dy, eps)
    base_dx, base_dw = autograd(x, weight, dy, eps, x.dtype)
    hint = "backward returns (dx in x's shape, dweight, None for eps)"
    expect_close(x.grad, want_dx, baseline=base_dx, input=label, what="x.grad", hint=hint)
    expect_close(weight.grad, want_dw, baseline=base_dw, input=label, what="weight.grad", hint=hint)


@checks("rms_norm")
def three_dimensional_activations(ex):
    """(batch, seq, hidden) in fp32 and fp16 (bf16 when compiled): y, x.grad and weight.grad vs float64 autograd"""
    for dtype in triton_dtypes():
        x, weight = random_rows((2, 5, 96), dtype)
        expect_function_matches(ex, x, weight, 1e-6, describe(x=x, weight=weight))


@checks("rms_norm")
def non_contiguous_activations(ex):
    """x = a (seq, batch, hidden) tensor transposed to (batch, seq, hidden), and a 2-D x = t.T (column stride != 1)"""
    base, weight = random_rows((6, 3, 40), torch.float32)
    x = base.transpose(0, 1)
    expect_function_matches(ex, x, weight, 1e-5, describe(x=x) + f" with strides {x.stride()}")
    square, weight = random_rows((40, 40), torch.float32)
    x = square.T
    expect_function_matches(ex, x, weight, 1e-5, describe(x=x) + f" = t.T, strides {x.stride()}")


@checks("rms_norm")
def strided_upstream_gradient(ex):
    """loss = y.sum() (an expanded gradient, strides 0) and loss = (y.transpose(0, 1) * v).sum() (a transposed one)"""
    x0, weight0 = random_rows((3, 5, 24), torch.float32)
    v = torch.randn(5, 3, 24, device=triton_device())
    for label, loss_fn, dy in (
        ("loss = y.sum()", lambda y: y.sum(), torch.ones(3, 5, 24)),
        ("loss = (y.transpose(0, 1) * v).sum()", lambda y: (y.transpose(0, 1) * v).sum(), v.transpose(0, 1).cpu()),
    ):
        x, weight = x0.detach().requires_grad_(), weight0.detach().requires_grad_()
        loss_fn(ex.rms_norm(x, weight, 1e-6)).backward()
        want_dx, want_dw = autograd(x, weight, dy, 1e-6)
        for name, got, want in (("x.grad", x.grad, want_dx), ("weight.grad", weight.grad, want_dw)):
            expect_close(
                got,
                want,
                input=describe(x=x) + ", " + label,
                what=name,
                dtype=torch.float32,
                hint="make dy contiguous (n, d) rows before calling rmsnorm_backward",
            )


@checks("rms_norm")
def batch_of_one_and_weight_gradient_over_all_rows(ex):
    """(1, 1, 33) and (4, 33, 17): weight.grad sums over batch and sequence"""
    for shape in ((1, 1, 33), (4, 33, 17)):
        x, weight = random_rows(shape, torch.float32, scale=2.0)
        expect_function_matches(ex, x, weight, 1e-6, describe(x=x, weight=weight))


# ------------------------------------------------------------------------------------------------ benchmark


def _rms_norm(x, weight):
    return F.rms_norm(x, (x.shape[-1],), weight, 1e-6)


def _rms_norm_train_step(x, weight, dy):
    return torch.autograd.grad(F.rms_norm(x, (x.shape[-1],), weight, 1e-6), (x, weight), dy)


def benchmark(ex):
    """32768 x 4096 bf16 (a batch of 8 x 4096 tokens at Llama-3-8B's width): forward, and forward + backward."""
    n_rows, n_cols = 32768, 4096
    x = torch.randn(n_rows, n_cols, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    weight = torch.randn(n_cols, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn_like(x)
    tensor = n_rows * n_cols * 2
    shape = f"{n_rows}x{n_cols} bf16"

    def mine_train_step():
        return torch.autograd.grad(ex.rms_norm(x, weight, 1e-6), (x, weight), dy)

    def mine_kernels_only():  # the two launchers called directly, as p03.layernorm times its forward + backward
        _, rstd = ex.rmsnorm_forward(x.detach(), weight.detach(), 1e-6)
        return ex.rmsnorm_backward(dy, x.detach(), weight.detach(), rstd)

    rows = [
        bandwidth_row(
            "rmsnorm forward (fused)", shape, lambda: ex.rmsnorm_forward(x.detach(), weight.detach()), 2 * tensor
        )
    ]
    rows += baseline_rows("F.rms_norm forward", shape, _rms_norm, (x.detach(), weight.detach()), bytes_moved=2 * tensor)
    rows.append(bandwidth_row("rms_norm fwd+bwd (fused)", shape, mine_train_step, 5 * tensor))
    rows.append(bandwidth_row("fwd+bwd launchers, no autograd", shape, mine_kernels_only, 5 * tensor))
    rows += baseline_rows("F.rms_norm fwd+bwd", shape, _rms_norm_train_step, (x, weight, dy), bytes_moved=5 * tensor)
    rows.append(copy_row(tensor))
    return rows
