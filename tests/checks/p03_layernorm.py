"""Checks for p03.layernorm. References: `torch.var_mean` and `F.layer_norm` in float64 (with `F.layer_norm` in the
dtype under test as the baseline), float64 autograd of `F.layer_norm`, closed forms (a row [1, 2, 3, 4]; a constant
row), and guard elements around every output that catch writes a missing mask lets through. The guard checks are
gates (see llm_algo.references.kernels). Small shapes under the interpreter, real ones when compiled."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

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
from llm_algo.check.restrictions import AUTOGRAD, LAYER_NORM
from llm_algo.device import triton_compiled, triton_device, triton_dtypes
from llm_algo.references.kernels import expect_guard_untouched, guarded, random_window
from llm_algo.references.layouts import distinct_layouts, expect_own_layouts, with_layout

checks = Checks("p03.layernorm", triton=True)
STATISTICS = [torch.var_mean, torch.var, torch.Tensor.var, torch.std_mean, torch.std, torch.Tensor.std]
checks.restrict(
    "welford_stats",
    forbid=[*STATISTICS, *LAYER_NORM],
    instead="compute each block's mean and M2 and merge them with Chan's formula (torch.var_mean is the reference)",
)
checks.restrict(
    "layer_norm_forward",
    "layer_norm",
    kernel=True,
    forbid=[*STATISTICS, *LAYER_NORM],
    instead="compute the statistics and normalise in your @triton.jit kernel (F.layer_norm is the checks' reference)",
)
checks.restrict(
    "layer_norm_backward",
    kernel=True,
    forbid=[*LAYER_NORM, *AUTOGRAD],
    instead="compute the gradients in your @triton.jit kernels (autograd of F.layer_norm is the checks' reference)",
)
EPS = 1e-5
HINT_FWD = "mean first, then sum((x - mean)^2) / N with padded lanes set to 0; rstd = 1 / sqrt(var + eps)"
HINT_BWD = "dx = rstd * (g - mean(g) - x_hat * mean(g * x_hat)) with g = dy * w; dw = sum dy * x_hat; db = sum dy"


def shapes():
    """Rows x columns: odd widths, a batch of one, one column; bigger when compiled."""
    small = [(1, 1), (37, 129), (5, 1000), (3, 64), (1, 33)]
    return small + ([(4096, 3000), (3, 16384), (16384, 1024)] if triton_compiled() else [])


def random_case(n_rows, n_cols, dtype, offset=0.5, scale=2.0):
    dev = triton_device()
    x = (torch.randn(n_rows, n_cols, device=dev) * scale + offset).to(dtype)
    w = (1 + 0.5 * torch.randn(n_cols, device=dev)).to(dtype)
    b = (0.5 * torch.randn(n_cols, device=dev)).to(dtype)
    return x, w, b


def oracle_forward(x, w, b, eps=EPS):
    return F.layer_norm(x.double().cpu(), (x.shape[-1],), w.double().cpu(), b.double().cpu(), eps)


def oracle_backward(x, w, b, dy, eps=EPS):
    """(dx, dw, db) of F.layer_norm by float64 autograd."""
    x64 = x.detach().double().cpu().requires_grad_(True)
    w64 = w.detach().double().cpu().requires_grad_(True)
    b64 = b.detach().double().cpu().requires_grad_(True)
    F.layer_norm(x64, (x.shape[-1],), w64, b64, eps).backward(dy.detach().double().cpu())
    return x64.grad, w64.grad, b64.grad


def baseline_backward(x, w, b, dy, eps=EPS):
    """(dx, dw, db) of F.layer_norm by autograd in the dtype under test (the error PyTorch itself makes there)."""
    xr, wr, br = (t.detach().clone().requires_grad_(True) for t in (x, w, b))
    return torch.autograd.grad(F.layer_norm(xr, (x.shape[-1],), wr, br, eps), (xr, wr, br), dy)


def var_mean_oracle(x):
    var, mean = torch.var_mean(x.double().cpu(), dim=1, unbiased=False)
    return mean, var


# ------------------------------------------------------------------------------------------ welford_stats


@checks("welford_stats")
def hand_checkable_blocks(ex):
    """x = [[1, 2, 3, 4]] in blocks of 3 and 1: mean 2.5, variance 1.25"""
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]], dtype=torch.float64)
    mean, var = ex.welford_stats(x, 3)
    label = "x=[[1, 2, 3, 4]], block_size=3"
    expect_close(
        mean,
        torch.tensor([2.5], dtype=torch.float64),
        input=label,
        what="mean",
        hint="weigh block means by their counts",
    )
    expect_close(
        var,
        torch.tensor([1.25], dtype=torch.float64),
        input=label,
        what="var",
        hint="M2 = M2_a + M2_b + delta^2 * n_a * n_b / n; var = M2 / N (biased)",
    )


@checks("welford_stats")
def matches_var_mean_over_block_sizes(ex):
    """random rows, block sizes that do and do not divide the width (1, 7, 64, larger than the row), fp64 and fp32"""
    for n_rows, n_cols, block_size in ((4, 100, 7), (1, 1, 4), (3, 64, 64), (5, 129, 1), (2, 50, 200)):
        for dtype in (torch.float64, torch.float32):
            x = (torch.randn(n_rows, n_cols, dtype=torch.float64) * 3 + torch.randn(n_rows, 1, dtype=torch.float64)).to(
                dtype
            )
            x[:, : n_cols // 2] += 2.0  # blocks with different means: the between-block term matters
            mean, var = ex.welford_stats(x, block_size)
            want_mean, want_var = var_mean_oracle(x)
            base_var, base_mean = torch.var_mean(x, dim=1, unbiased=False)
            label = describe(x=x) + f", block_size={block_size}"
            expect_tensor(mean, shape=(n_rows,), dtype=dtype, input=label, what="mean")
            expect_tensor(var, shape=(n_rows,), dtype=dtype, input=label, what="var")
            expect_close(mean, want_mean, baseline=base_mean, input=label, what="mean", hint="mean += delta * n_b / n")
            expect_close(
                var,
                want_var,
                baseline=base_var,
                input=label,
                what="var",
                hint="add the between-block term delta^2 * n_a * n_b / n; divide by N, not N - 1",
            )


def chan_baseline(x: torch.Tensor, block_size: int) -> torch.Tensor:
    """The variance by merging blocks in x's dtype: the error that merged statistics make anyway (block means carry
    rounding of |mean| * eps, which the between-block term sees). E[x^2] - mean^2 in float32 is ~1000x worse here."""
    stats = []  # (count, mean, M2) per block, then merged pairwise in order
    for block in x.split(block_size, dim=1):
        block_mean = block.mean(dim=1)
        stats.append((block.shape[1], block_mean, ((block - block_mean[:, None]) ** 2).sum(dim=1)))
    n_a, mean_a, m2_a = stats[0]
    for n_b, mean_b, m2_b in stats[1:]:
        n = n_a + n_b
        delta = mean_b - mean_a
        mean_a, m2_a, n_a = mean_a + delta * n_b / n, m2_a + m2_b + delta**2 * n_a * n_b / n, n
    return m2_a / n_a


@checks("welford_stats")
def no_cancellation_at_a_large_mean(ex):
    """float32 rows with mean 1e4 and std 1 (E[x^2] - E[x]^2 would be noise): variance within fp32 rounding"""
    x = (torch.randn(6, 512, dtype=torch.float64) + 1e4).float()
    mean, var = ex.welford_stats(x, 64)
    want_mean, want_var = var_mean_oracle(x)
    label = describe(x=x) + " with mean 1e4 and std 1, block_size=64"
    expect_close(
        var,
        want_var,
        baseline=chan_baseline(x, 64),
        input=label,
        what="var",
        hint="compute each block's M2 around the block's own mean, never as sum(x^2) - n * mean^2",
    )


# ------------------------------------------------------------------------------------------ layer_norm_forward


@checks("layer_norm_forward", gate=True)
def forward_kernel_stays_inside_its_outputs(ex):
    """calls layer_norm_fwd_kernel on strided 7x100 windows (BLOCK_SIZE 128); guards around y, mean, rstd survive"""
    n_rows, n_cols, pad = 7, 100, 40
    dev = triton_device()
    x = random_window((n_rows, n_cols), (1, pad), device=dev)
    w = random_window((n_cols,), (28,), device=dev)
    b = random_window((n_cols,), (28,), device=dev)
    y_buffer, y = guarded((n_rows, n_cols), (1, pad), device=dev)
    mean_buffer, mean = guarded((n_rows,), (9,), device=dev)
    rstd_buffer, rstd = guarded((n_rows,), (9,), device=dev)
    ex.layer_norm_fwd_kernel[(n_rows,)](y, mean, rstd, x, w, b, x.stride(0), y.stride(0), n_cols, EPS, BLOCK_SIZE=128)
    label = f"x, y = (7, 100) windows with row stride {x.stride(0)}, BLOCK_SIZE=128"
    expect_guard_untouched(y_buffer, (n_rows, n_cols), input=label, hint="mask the store of y with cols < n_cols")
    expect_guard_untouched(
        mean_buffer, (n_rows,), input=label + " (Mean)", hint="store one mean per program, at index row"
    )
    expect_guard_untouched(
        rstd_buffer, (n_rows,), input=label + " (Rstd)", hint="store one rstd per program, at index row"
    )
    expect_close(y, oracle_forward(x, w, b), input=label, hint="address row r at X + r * x_row_stride; " + HINT_FWD)


@checks("layer_norm_forward")
def hand_checkable_row(ex):
    """x = [[1, 2, 3, 4]], w = 1, b = 0, eps = 0: mean 2.5, rstd 1/sqrt(1.25), y = (x - 2.5) / sqrt(1.25)"""
    dev = triton_device()
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]], device=dev)
    y, mean, rstd = ex.layer_norm_forward(x, torch.ones(4, device=dev), torch.zeros(4, device=dev), eps=0.0)
    s = math.sqrt(1.25)
    label = "x=[[1, 2, 3, 4]], w=1, b=0, eps=0"
    expect_close(
        y, torch.tensor([[-1.5 / s, -0.5 / s, 0.5 / s, 1.5 / s]], dtype=torch.float64), input=label, hint=HINT_FWD
    )
    expect_close(mean, torch.tensor([2.5], dtype=torch.float64), input=label, what="mean")
    expect_close(
        rstd,
        torch.tensor([1 / s], dtype=torch.float64),
        input=label,
        what="rstd",
        hint="rstd = 1 / sqrt(var + eps), biased var",
    )


@checks("layer_norm_forward")
def matches_f_layer_norm(ex):
    """odd shapes (1x1, 37x129, 5x1000, 1x33 ...), fp32 and fp16 (bf16 compiled): y, mean and rstd vs float64"""
    for dtype in triton_dtypes():
        for n_rows, n_cols in shapes():
            x, w, b = random_case(n_rows, n_cols, dtype)
            y, mean, rstd = ex.layer_norm_forward(x, w, b, eps=EPS)
            label = describe(x=x, weight=w)
            expect_tensor(y, shape=x.shape, dtype=dtype, device=x.device.type, input=label)
            expect_tensor(mean, shape=(n_rows,), dtype=torch.float32, input=label, what="mean")
            expect_tensor(rstd, shape=(n_rows,), dtype=torch.float32, input=label, what="rstd")
            expect_close(
                y, oracle_forward(x, w, b), baseline=F.layer_norm(x, (n_cols,), w, b, EPS), input=label, hint=HINT_FWD
            )
            want_mean, want_var = var_mean_oracle(x)
            expect_close(mean, want_mean, input=label, what="mean", hint="mean = sum(x) / n_cols in float32")
            expect_close(
                rstd,
                1 / torch.sqrt(want_var + EPS),
                input=label,
                what="rstd",
                hint="store 1 / sqrt(var + eps) with the biased variance (divide by N)",
            )


@checks("layer_norm_forward")
def large_mean_and_constant_rows(ex):
    """rows with mean 1000 and std 1 (cancellation), and a constant row (var 0: y = b exactly, rstd = 1/sqrt(eps))"""
    x, w, b = random_case(6, 300, torch.float32, offset=1000.0, scale=1.0)
    x[2] = 7.0
    y, mean, rstd = ex.layer_norm_forward(x, w, b, eps=EPS)
    label = describe(x=x) + " with mean ~1000, std ~1; row 2 constant"
    expect_close(y, oracle_forward(x, w, b), baseline=F.layer_norm(x, (300,), w, b, EPS), input=label, hint=HINT_FWD)
    expect_close(
        rstd[2:3],
        torch.tensor([1 / math.sqrt(EPS)], dtype=torch.float64),
        input=label,
        what="rstd of the constant row",
        hint="the centred row is exactly 0 there: var = 0, rstd = 1 / sqrt(eps)",
    )


@checks("layer_norm_forward")
def rejects_inputs_it_cannot_handle(ex):
    """a 1-D input, a transposed input, a row longer than MAX_FUSED_COLS, and a weight of the wrong size raise"""
    dev = triton_device()
    w, b = torch.ones(8, device=dev), torch.zeros(8, device=dev)
    too_long = ex.MAX_FUSED_COLS + 1
    for label, call in (
        ("x (8,)", lambda: ex.layer_norm_forward(torch.randn(8, device=dev), w, b)),
        (  # (4, 8) with strides (1, 4): weight and bias fit, so only the stride check can refuse it
            "x (4, 8) = t.T, column stride 4",
            lambda: ex.layer_norm_forward(torch.randn(8, 4, device=dev).T, w, b),
        ),
        (
            f"x (1, {too_long})",
            lambda: ex.layer_norm_forward(
                torch.randn(1, too_long, device=dev),
                torch.ones(too_long, device=dev),
                torch.zeros(too_long, device=dev),
            ),
        ),
        ("x (3, 8), weight (7,)", lambda: ex.layer_norm_forward(torch.randn(3, 8, device=dev), w[:7], b)),
    ):
        expect_refused(
            call, input=label, hint="check the dimensions, the column stride, the width and weight/bias shapes"
        )


def expect_forward(result, x, w, b, label):
    y, mean, rstd = result
    expect_tensor(y, shape=tuple(x.shape), dtype=x.dtype, input=label)
    expect_close(y, oracle_forward(x, w, b), input=label, hint=HINT_FWD)
    want_mean, want_var = var_mean_oracle(x)
    expect_close(mean, want_mean, input=label, what="mean", dtype=torch.float32, hint="mean = sum(x) / n_cols")
    expect_close(rstd, 1 / torch.sqrt(want_var + EPS), input=label, what="rstd", dtype=torch.float32, hint=HINT_FWD)


@checks("layer_norm_forward")
def forward_operands_in_their_own_layouts(ex):
    """x a slice of a fused projection (row stride 3 * n_cols) must be right; x, weight and bias each in a layout of
    its own (the lesson asks for a contiguous weight and bias; x transposed): refused with a ValueError, or right"""
    x, w, b = random_case(9, 40, torch.float32)
    lx = with_layout(x, "fused_slice")
    label = f"{describe(x=x, weight=w)}, x strides {lx.stride()}"
    expect_forward(ex.layer_norm_forward(lx, w, b, eps=EPS), x, w, b, label)
    for order in (("fused_slice", "padded", "fused_slice"), ("transposed", "fused_slice", "padded")):
        lx, lw, lb = distinct_layouts(x, w, b, order=order)
        expect_own_layouts(lx, lw, lb)
        label = f"{describe(x=x, weight=w)}, strides x {lx.stride()}, weight {lw.stride()}, bias {lb.stride()}"
        expect_refused_or_correct(
            lambda lx=lx, lw=lw, lb=lb: ex.layer_norm_forward(lx, lw, lb, eps=EPS),
            lambda result, label=label: expect_forward(result, x, w, b, label + " (accepted: must be right)"),
            input=label,
            hint="refuse a layout the kernel cannot read (ValueError before launching), or read it correctly",
        )


def rows_with_stride(n_rows, n_cols, row_stride, offset=0.5):
    """(n_rows, n_cols) with unit column stride and the given row stride (0 = one row repeated, < n_cols = rows that
    overlap), over a buffer of n_rows * n_cols elements: read with another tensor's row stride, it stays in memory
    the check owns."""
    base = torch.randn(n_rows * n_cols, device=triton_device()) * 2 + offset
    return base.as_strided((n_rows, n_cols), (row_stride, 1))


@checks("layer_norm_forward")
def strided_rows_and_the_longest_row(ex):
    """x one row repeated (row stride 0) is read through its own stride; a row of exactly MAX_FUSED_COLS fits"""
    _, w, b = random_case(1, 130, torch.float32)
    x = rows_with_stride(4, 130, 0)
    y, _, _ = ex.layer_norm_forward(x, w, b)
    label = f"x (4, 130) one row repeated, strides {x.stride()}"
    expect_close(y, oracle_forward(x, w, b), input=label, hint="x_row_stride for x, y_row_stride for y")
    x, w, b = random_case(1, ex.MAX_FUSED_COLS, torch.float32)
    y, _, _ = ex.layer_norm_forward(x, w, b)
    expect_close(y, oracle_forward(x, w, b), input=describe(x=x) + " (n_cols == MAX_FUSED_COLS)", hint=HINT_FWD)


# ------------------------------------------------------------------------------------------ layer_norm_backward


def forward_stats(x, eps=EPS):
    """float32 mean and rstd from torch (so the backward checks do not depend on the learner's forward)."""
    var, mean = torch.var_mean(x.float(), dim=1, unbiased=False)
    return mean.contiguous(), torch.rsqrt(var + eps).contiguous()


@checks("layer_norm_backward", gate=True)
def backward_kernels_stay_inside_their_outputs(ex):
    """both kernels on guarded windows: dx (strided 9x100), the (3, 100) partials and dw, db; 9 rows on 3 programs"""
    n_rows, n_cols, pad, programs = 9, 100, 40, 3
    dev = triton_device()
    x = random_window((n_rows, n_cols), (1, pad), device=dev)
    dy = random_window((n_rows, n_cols), (1, pad), device=dev)
    w = random_window((n_cols,), (28,), device=dev)
    b = torch.zeros(n_cols, device=dev)
    mean, rstd = forward_stats(x)
    dx_buffer, dx = guarded((n_rows, n_cols), (1, pad), device=dev)
    dwp_buffer, dw_partial_flat = guarded((programs * n_cols,), (50,), device=dev)
    dbp_buffer, db_partial_flat = guarded((programs * n_cols,), (50,), device=dev)
    ex.layer_norm_bwd_kernel[(programs,)](
        dx, dw_partial_flat, db_partial_flat, dy, x, w, mean, rstd,
        x.stride(0), dy.stride(0), dx.stride(0), n_rows, n_cols, 3, BLOCK_SIZE=128,
    )  # fmt: skip
    label = f"dx = a (9, 100) window with row stride {dx.stride(0)}, 3 programs x 3 rows, BLOCK_SIZE=128"
    expect_guard_untouched(dx_buffer, (n_rows, n_cols), input=label, hint="mask the store of dx with cols < n_cols")
    expect_guard_untouched(
        dwp_buffer, (programs * n_cols,), input=label + " (DW_partial)", hint="mask the partial stores"
    )
    expect_guard_untouched(
        dbp_buffer, (programs * n_cols,), input=label + " (DB_partial)", hint="mask the partial stores"
    )
    want_dx, want_dw, want_db = oracle_backward(x, w, b, dy)
    expect_close(dx, want_dx, input=label, what="dx", dtype=torch.float32, hint=HINT_BWD)
    dw_buffer, dw = guarded((n_cols,), (30,), device=dev)
    db_buffer, db = guarded((n_cols,), (30,), device=dev)
    ex.layer_norm_dwdb_kernel[(2,)](dw, db, dw_partial_flat, db_partial_flat, programs, n_cols, BLOCK_P=2, BLOCK_N=64)
    label2 = "stage 2: 3 partial rows of 100 columns, BLOCK_P=2, BLOCK_N=64, grid (2,)"
    expect_guard_untouched(dw_buffer, (n_cols,), input=label2 + " (dw)", hint="mask the stores with cols < n_cols")
    expect_guard_untouched(db_buffer, (n_cols,), input=label2 + " (db)", hint="mask the stores with cols < n_cols")
    expect_close(
        dw, want_dw, input=label2, what="dw", dtype=torch.float32, hint="mask partial rows >= n_partials (other=0)"
    )
    expect_close(db, want_db, input=label2, what="db", dtype=torch.float32, hint="db = sum over rows of dy")


@checks("layer_norm_backward")
def hand_checkable_gradients(ex):
    """x = [[1, 2, 3, 4]] (eps 0), dy = x - 2.5, w = 1: dx = 0 (the gradient lies along x_hat), dw = sum dy * x_hat"""
    dev = triton_device()
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]], device=dev)
    dy = x - 2.5
    w = torch.ones(4, device=dev)
    mean, rstd = forward_stats(x, eps=0.0)
    dx, dw, db = ex.layer_norm_backward(dy, x, w, mean, rstd)
    s = math.sqrt(1.25)
    label = "x=[[1, 2, 3, 4]], dy=[[-1.5, -0.5, 0.5, 1.5]], w=1, eps=0"
    expect_close(
        dx, torch.zeros(1, 4, dtype=torch.float64), input=label, what="dx", hint="remove the component along x_hat"
    )
    expect_close(dw, torch.tensor([2.25, 0.25, 0.25, 2.25], dtype=torch.float64) / s, input=label, what="dw")
    expect_close(
        db, torch.tensor([-1.5, -0.5, 0.5, 1.5], dtype=torch.float64), input=label, what="db", hint="db = sum dy"
    )


@checks("layer_norm_backward")
def matches_float64_autograd(ex):
    """odd shapes, fp32 and fp16 (bf16 compiled), 1-5 programs with rows that do not divide evenly, vs autograd"""
    for dtype in triton_dtypes():
        for (n_rows, n_cols), programs in zip(shapes(), (None, 4, 3, 2, None, None, None, None), strict=False):
            x, w, b = random_case(n_rows, n_cols, dtype)
            dy = torch.randn(n_rows, n_cols, device=triton_device()).to(dtype)
            mean, rstd = forward_stats(x)
            dx, dw, db = ex.layer_norm_backward(dy, x, w, mean, rstd, num_programs=programs)
            label = describe(x=x, dy=dy) + f", num_programs={programs}"
            expect_tensor(dx, shape=x.shape, dtype=dtype, input=label, what="dx")
            expect_tensor(dw, shape=w.shape, dtype=w.dtype, input=label, what="dw")
            expect_tensor(db, shape=w.shape, dtype=w.dtype, input=label, what="db")
            want = oracle_backward(x, w, b, dy)
            base = baseline_backward(x.cpu(), w.cpu(), b.cpu(), dy.cpu())
            for name, got, oracle, baseline, hint in zip(
                ("dx", "dw", "db"),
                (dx, dw, db),
                want,
                base,
                (HINT_BWD, "accumulate dy * x_hat over every row of the program (+=)", "db sums dy, not dy * x_hat"),
                strict=True,
            ):
                expect_close(got, oracle, baseline=baseline, input=label, what=name, hint=hint)


@checks("layer_norm_backward")
def many_rows_per_program(ex):
    """40 rows on 1, 3 and 40 programs: the partial sums accumulate across a program's rows; dw, db sum over all"""
    x, w, b = random_case(40, 48, torch.float32, offset=1.0)
    dy = torch.randn(40, 48, device=triton_device())
    mean, rstd = forward_stats(x)
    want_dx, want_dw, want_db = oracle_backward(x, w, b, dy)
    for programs in (1, 3, 40):
        dx, dw, db = ex.layer_norm_backward(dy, x, w, mean, rstd, num_programs=programs)
        label = describe(x=x) + f", num_programs={programs} ({math.ceil(40 / programs)} rows each)"
        expect_close(dx, want_dx, input=label, what="dx", dtype=torch.float32, hint=HINT_BWD)
        expect_close(
            dw, want_dw, input=label, what="dw", dtype=torch.float32, hint="dw_acc += dy * x_hat inside the row loop"
        )
        expect_close(db, want_db, input=label, what="db", dtype=torch.float32, hint="sum the P partial rows in stage 2")


@checks("layer_norm_backward")
def strided_rows_refusals_and_the_longest_row(ex):
    """x (row stride 0), grad_y (row stride 64) and dx each through their own stride; a transposed grad_y and a
    strided weight are refused; a row of exactly MAX_FUSED_COLS fits"""
    x, dy = rows_with_stride(5, 130, 0), rows_with_stride(5, 130, 64, offset=0.0)
    _, w, b = random_case(1, 130, torch.float32)
    mean, rstd = forward_stats(x)
    dx, dw, db = ex.layer_norm_backward(dy, x, w, mean, rstd, num_programs=2)
    label = f"(5, 130): x strides {x.stride()}, grad_y strides {dy.stride()}, 2 programs"
    for name, got, want in zip(("dx", "dw", "db"), (dx, dw, db), oracle_backward(x, w, b, dy), strict=True):
        expect_close(got, want, input=label, what=name, dtype=torch.float32, hint="use each tensor's own row stride")
    x, w, b = random_case(4, 8, torch.float32)
    mean, rstd = forward_stats(x)
    dev = triton_device()
    for label, call in (
        (
            "grad_y (4, 8) = t.T, column stride 4",
            lambda: ex.layer_norm_backward(torch.randn(8, 4, device=dev).T, x, w, mean, rstd),
        ),
        (
            "weight = w2[::2], not contiguous",
            lambda: ex.layer_norm_backward(
                torch.randn(4, 8, device=dev), x, torch.randn(16, device=dev)[::2], mean, rstd
            ),
        ),
    ):
        expect_refused(call, input=label, hint="check equal shapes, unit column strides and a contiguous (N,) weight")
    x, w, b = random_case(1, ex.MAX_FUSED_COLS, torch.float32)
    dy = torch.randn(1, ex.MAX_FUSED_COLS, device=dev)
    mean, rstd = forward_stats(x)
    dx, _, _ = ex.layer_norm_backward(dy, x, w, mean, rstd)
    expect_close(
        dx,
        oracle_backward(x, w, b, dy)[0],
        input=describe(x=x) + " (n_cols == MAX_FUSED_COLS)",
        what="dx",
        dtype=torch.float32,
        hint="refuse n_cols > MAX_FUSED_COLS only",
    )


@checks("layer_norm_backward")
def backward_operands_in_their_own_layouts(ex):
    """grad_y a slice of a fused tensor, x with padded rows, mean and rstd columns of wider tensors (weight
    contiguous, as the lesson asks): refused with a ValueError, or the gradients of contiguous copies"""
    x, w, b = random_case(9, 40, torch.float32)
    dy = torch.randn(9, 40, device=x.device)
    mean, rstd = forward_stats(x)
    ldy, lx, lm, lr = distinct_layouts(dy, x, mean, rstd, order=("fused_slice", "padded", "fused_slice", "padded"))
    expect_own_layouts(ldy, lx, lm, lr)
    label = f"(9, 40): strides grad_y {ldy.stride()}, x {lx.stride()}, mean {lm.stride()}, rstd {lr.stride()}"

    def expect_grads(result):
        want = oracle_backward(x, w, b, dy)
        for name, got, oracle in zip(("dx", "dw", "db"), result, want, strict=True):
            expect_close(got, oracle, input=label + " (accepted: must be right)", what=name, hint=HINT_BWD)

    expect_refused_or_correct(
        lambda: ex.layer_norm_backward(ldy, lx, w, lm, lr, num_programs=3),
        expect_grads,
        input=label,
        hint="read each operand through its own strides; the kernel reads mean and rstd with unit stride: make them "
        "contiguous (or refuse them with a ValueError)",
    )


@checks("layer_norm_backward")
def stage_two_masks_its_last_column_block(ex):
    """layer_norm_dwdb_kernel over random (3, 100) partials followed by random numbers, into NaN-guarded dw and db:
    column 100 is neither summed into nor stored"""
    n_cols, programs = 100, 3
    dev = triton_device()
    partials = torch.randn(2, programs * n_cols + 64, device=dev)  # random past the end: a stray read is not NaN
    dw_partial, db_partial = partials[0], partials[1]
    dw_buffer, dw = guarded((n_cols,), (30,), device=dev)
    db_buffer, db = guarded((n_cols,), (30,), device=dev)
    ex.layer_norm_dwdb_kernel[(2,)](dw, db, dw_partial, db_partial, programs, n_cols, BLOCK_P=2, BLOCK_N=64)
    label = "stage 2: 3 random partial rows of 100 columns, BLOCK_P=2, BLOCK_N=64, grid (2,)"
    for name, buffer, got, flat in (("dw", dw_buffer, dw, dw_partial), ("db", db_buffer, db, db_partial)):
        expect_guard_untouched(buffer, (n_cols,), input=f"{label} ({name})", hint="col_mask = cols < n_cols")
        want = flat[: programs * n_cols].double().cpu().reshape(programs, n_cols).sum(dim=0)
        expect_close(got, want, input=label, what=name, dtype=torch.float32, hint="sum the partial rows < n_partials")


@checks("layer_norm")
def transposed_two_dimensional_input(ex):
    """x = t.T (2-D, column stride 7): the rows are made contiguous before the kernels see them"""
    t = torch.randn(24, 7, device=triton_device()).requires_grad_(True)
    x = t.T  # (7, 24), strides (1, 7)
    _, w, b = random_case(1, 24, torch.float32)
    w.requires_grad_(True)
    b.requires_grad_(True)
    y = ex.layer_norm(x, w, b, EPS)
    label = f"x (7, 24) = t.T with strides {x.stride()}"
    expect_close(y, oracle_forward(x, w, b), input=label, hint="rows = x.reshape(-1, N).contiguous()")
    dy = torch.randn(7, 24, device=triton_device())
    y.backward(dy)
    want_dx, want_dw, _ = oracle_backward(x, w, b, dy)
    expect_close(t.grad, want_dx.T, input=label, what="t.grad", dtype=torch.float32, hint=HINT_BWD)
    expect_close(w.grad, want_dw, input=label, what="weight.grad", dtype=torch.float32, hint=HINT_BWD)


# ------------------------------------------------------------------------------------------ layer_norm


def autograd_case(shape, dtype):
    x, w, b = random_case(math.prod(shape[:-1]), shape[-1], dtype)
    return x.reshape(shape).requires_grad_(True), w.requires_grad_(True), b.requires_grad_(True)


@checks("layer_norm")
def forward_and_gradients_match_autograd(ex):
    """3-D inputs (batch, seq, hidden), fp32 and fp16: y and the gradients of x, weight, bias vs float64 F.layer_norm"""
    for shape in ((2, 3, 40), (1, 1, 7), (3, 5, 129)):
        for dtype in triton_dtypes():
            x, w, b = autograd_case(shape, dtype)
            dy = torch.randn(shape, device=triton_device()).to(dtype)
            y = ex.layer_norm(x, w, b, EPS)
            label = describe(x=x, weight=w)
            expect_tensor(y, shape=shape, dtype=dtype, input=label)
            expect_close(
                y, oracle_forward(x, w, b), baseline=F.layer_norm(x, shape[-1:], w, b, EPS), input=label, hint=HINT_FWD
            )
            y.backward(dy)
            want = oracle_backward(x.reshape(-1, shape[-1]), w, b, dy.reshape(-1, shape[-1]))
            base = baseline_backward(x.detach().reshape(-1, shape[-1]), w, b, dy.reshape(-1, shape[-1]))
            for name, param, oracle, baseline in zip(("x", "weight", "bias"), (x, w, b), want, base, strict=True):
                expect(
                    param.grad is not None,
                    f"{name} got no gradient",
                    input=label,
                    expected=f"{name}.grad set",
                    got="None",
                    hint="backward returns (dx, dw, db, None), in the order of forward's inputs",
                )
                expect_close(
                    param.grad.reshape(oracle.shape),
                    oracle,
                    baseline=baseline,
                    input=label,
                    what=f"{name}.grad",
                    hint="return (dx in x's shape, dw, db, None) in the order of forward's inputs",
                )


@checks("layer_norm")
def strided_upstream_gradient(ex):
    """loss = y.sum() (an expanded gradient with stride 0) and loss = (y.T @ v).sum() (a transposed one)"""
    x, w, b = autograd_case((6, 24), torch.float32)
    v = torch.randn(6, 3, device=triton_device())
    for label, loss_fn, dy in (
        ("loss = y.sum()", lambda y: y.sum(), torch.ones(6, 24)),
        ("loss = (y.T @ v).sum()", lambda y: (y.T @ v).sum(), v.sum(dim=1, keepdim=True).expand(6, 24).cpu()),
    ):
        for t in (x, w, b):
            t.grad = None
        loss_fn(ex.layer_norm(x, w, b, EPS)).backward()
        want = oracle_backward(x, w, b, dy)
        for name, param, oracle in zip(("x", "weight", "bias"), (x, w, b), want, strict=True):
            expect(param.grad is not None, f"{name} got no gradient", input=label, expected="a gradient", got="None")
            expect_close(
                param.grad,
                oracle,
                input=describe(x=x) + ", " + label,
                what=f"{name}.grad",
                dtype=torch.float32,
                hint="make grad_y contiguous (M, N) rows before calling the kernels",
            )


@checks("layer_norm")
def gradients_flow_to_every_input(ex):
    """weight and bias get gradients of their own shape; x's gradient has x's shape and dtype"""
    x, w, b = autograd_case((2, 2, 17), torch.float16)
    ex.layer_norm(x, w, b, EPS).float().pow(2).sum().backward()
    for name, param in (("x", x), ("weight", w), ("bias", b)):
        expect(
            param.grad is not None and param.grad.shape == param.shape and param.grad.dtype == param.dtype,
            f"{name}.grad is missing or has the wrong shape or dtype",
            input=describe(x=x),
            expected=f"{tuple(param.shape)} {param.dtype}",
            got="None" if param.grad is None else f"{tuple(param.grad.shape)} {param.grad.dtype}",
            hint="dx.view(x's shape); dw and db like the weight",
        )


# ------------------------------------------------------------------------------------------ benchmark


def _torch_forward(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, EPS)


def _forward_backward_with(forward, x, w, b, dy):
    """A timed callable: forward on leaf tensors that require grad, then torch.autograd.grad of all three."""
    leaves = tuple(t.detach().requires_grad_(True) for t in (x, w, b))
    return lambda: torch.autograd.grad(forward(*leaves), leaves, dy)


def _mine_forward_backward(ex, x, w, b, dy):
    _, mean, rstd = ex.layer_norm_forward(x, w, b, EPS)
    return ex.layer_norm_backward(dy, x, w, mean, rstd)


def benchmark(ex):
    """The issue's yardstick: 65536 x 4096 bf16, forward and forward + backward, next to a copy of the same bytes.
    The PyTorch baseline runs eager and under torch.compile (which also compiles the backward through AOTAutograd)."""
    n_rows, n_cols = 65536, 4096
    x = torch.randn(n_rows, n_cols, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n_cols, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n_cols, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn_like(x)
    shape = f"{n_rows}x{n_cols} bf16"
    fwd_bytes = 2 * x.numel() * x.element_size()
    fwd_bwd_bytes = 5 * x.numel() * x.element_size()
    rows = [bandwidth_row("layer_norm_forward", shape, lambda: ex.layer_norm_forward(x, w, b, EPS), fwd_bytes)]
    rows += baseline_rows("F.layer_norm forward", shape, _torch_forward, (x, w, b), bytes_moved=fwd_bytes)
    rows.append(
        bandwidth_row("forward + backward", shape, lambda: _mine_forward_backward(ex, x, w, b, dy), fwd_bwd_bytes)
    )
    compiled = torch.compile(_torch_forward, dynamic=False)
    for label, forward in (("eager", _torch_forward), ("torch.compile", compiled)):
        run = _forward_backward_with(forward, x, w, b, dy)
        run()  # compiles the forward and backward graphs outside the timing
        rows.append(bandwidth_row(f"F.layer_norm forward + backward ({label})", shape, run, fwd_bwd_bytes))
    rows.append(copy_row(x.numel() * x.element_size()))
    return rows
