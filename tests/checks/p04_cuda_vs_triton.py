"""Checks for p04.cuda_vs_triton. References: `F.rms_norm` in float64 (the oracle) and in the dtype under test (the
baseline of the tolerance policy), the closed form of a hand-worked row, and the gate checks: guard elements around
the Triton kernel's output, NaN rows after the CUDA kernel's input and misaligned CUDA inputs (the CUDA host function
allocates its own output, so stray stores past its end are not caught).

`rmsnorm_torch` and `rmsnorm_triton` grade on every machine (Triton through its interpreter on a CPU, where bfloat16
is not available). The CUDA C++ exercise's checks need a GPU (`requires_cuda=True`): on a CPU they read *needs a
GPU*, never passed."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from llm_algo.bench import bandwidth_row, baseline_rows, copy_row
from llm_algo.check import Checks, describe, expect, expect_close, expect_refused, expect_tensor, replacing
from llm_algo.check.restrictions import RMS_NORM
from llm_algo.device import triton_compiled, triton_device
from llm_algo.references.kernels import expect_guard_untouched, guarded, random_window
from llm_algo.references.layouts import distinct_layouts, expect_own_layouts, with_layout

checks = Checks("p04.cuda_vs_triton", triton=True)
checks.restrict(
    "rmsnorm_torch",
    forbid=RMS_NORM,
    instead="compute the mean of squares, rsqrt(... + eps) and the scale yourself (F.rms_norm is the checks' reference)",
)
checks.restrict(
    "rmsnorm_triton",
    kernel=True,
    forbid=RMS_NORM,
    instead="normalise in your @triton.jit kernel (F.rms_norm is the checks' reference)",
)
checks.restrict(
    "rmsnorm_cuda",
    forbid=RMS_NORM,
    instead="normalise in your __global__ kernel (F.rms_norm is the checks' reference)",
)

HINT = "inv_rms = rsqrt(mean(x^2 over the last dim, in float32) + eps); y = (x * inv_rms * weight) cast to x's dtype"


def oracle(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm in float64 on the CPU."""
    return F.rms_norm(x.detach().double().cpu(), (x.shape[-1],), weight.detach().double().cpu(), eps)


def baseline(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """PyTorch's own RMSNorm in the dtype under test: the error the tolerance policy measures against."""
    return F.rms_norm(x.detach(), (x.shape[-1],), weight.detach().to(x.dtype), eps)


def activations(shape, dtype, *, device, scale=1.0):
    """Activations with a non-zero mean (as real ones have) and a weight around 1."""
    x = ((torch.randn(shape, device=device) + 0.3) * scale).to(dtype)
    weight = (1 + 0.5 * torch.randn(shape[-1], device=device)).to(dtype)
    return x, weight


def expect_rmsnorm(got, x, weight, eps, *, label, hint=HINT):
    expect_tensor(got, shape=tuple(x.shape), dtype=x.dtype, device=x.device.type, input=label)
    expect_close(got, oracle(x, weight, eps), baseline=baseline(x, weight, eps), input=label, hint=hint)


# ------------------------------------------------------------------------------------------------ rmsnorm_torch

TORCH_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@checks("rmsnorm_torch")
def torch_hand_checkable(ex):
    """x = [[3, 4]], weight = [2, 0.5], eps = 0: mean(x^2) = 12.5, so y = [6, 2] / sqrt(12.5)"""
    x = torch.tensor([[3.0, 4.0]])
    weight = torch.tensor([2.0, 0.5])
    got = ex.rmsnorm_torch(x, weight, 0.0)
    r = 1 / math.sqrt(12.5)
    expect_tensor(got, shape=(1, 2), dtype=torch.float32, input="x=[[3, 4]], weight=[2, 0.5], eps=0")
    expect_close(
        got,
        torch.tensor([[6 * r, 2 * r]], dtype=torch.float64),
        input="x=[[3, 4]], weight=[2, 0.5], eps=0",
        hint="the mean of squares divides by H (2 here): rsqrt((9 + 16) / 2)",
    )


@checks("rmsnorm_torch")
def torch_shapes_and_dtypes(ex):
    """(1, 1), (37, 129), (1, 4096), (13, 64) and a 3-D (2, 5, 96) in float32, bfloat16 and float16 against float64,
    returned in x's dtype and shape"""
    for dtype in TORCH_DTYPES:
        for shape in ((1, 1), (37, 129), (1, 4096), (13, 64), (2, 5, 96)):
            x, weight = activations(shape, dtype, device="cpu")
            got = ex.rmsnorm_torch(x, weight, 1e-6)
            expect_rmsnorm(got, x, weight, 1e-6, label=describe(x=x, weight=weight, eps=1e-6))


@checks("rmsnorm_torch")
def torch_fp32_math_for_half_inputs(ex):
    """float16 activations of ~1000 (x^2 overflows float16 above 256) and bfloat16 rows of 4096 values; tiny
    activations with eps = 1e-2 (eps dominates: it must be inside the root)"""
    for shape, dtype, scale, eps in (
        ((4, 300), torch.float16, 1e3, 1e-6),
        ((3, 4096), torch.bfloat16, 30.0, 1e-6),
        ((5, 300), torch.float32, 1e-3, 1e-2),
        ((5, 300), torch.bfloat16, 1e-3, 1e-2),
    ):
        x, weight = activations(shape, dtype, device="cpu", scale=scale)
        label = describe(x=x, eps=eps) + f" with |x| ~ {scale:g}"
        got = ex.rmsnorm_torch(x, weight, eps)
        expect_rmsnorm(
            got,
            x,
            weight,
            eps,
            label=label,
            hint="upcast x to float32 before squaring (fp16 overflows at 256^2); keep eps inside the root",
        )


@checks("rmsnorm_torch")
def torch_strided_input(ex):
    """a transposed (seq, batch, hidden) -> (batch, seq, hidden) x and a column slice of a wider buffer"""
    base, weight = activations((6, 3, 40), torch.float32, device="cpu")
    x = base.transpose(0, 1)
    expect_rmsnorm(ex.rmsnorm_torch(x, weight, 1e-5), x, weight, 1e-5, label=describe(x=x) + f" strides {x.stride()}")
    wide, weight = activations((7, 50), torch.bfloat16, device="cpu")
    x = wide[:, :33]
    weight = weight[:33]
    expect_rmsnorm(ex.rmsnorm_torch(x, weight, 1e-6), x, weight, 1e-6, label=describe(x=x) + " = wide[:, :33]")


@checks("rmsnorm_torch")
def torch_refuses_bad_input(ex):
    """an integer x (TypeError), a weight of the wrong length and a 0-dimensional x (ValueError)"""
    x = torch.randn(4, 6)
    for label, call, errors in (
        ("x int64 (4, 6)", lambda: ex.rmsnorm_torch(torch.ones(4, 6, dtype=torch.int64), torch.ones(6)), (TypeError,)),
        ("x (4, 6), weight (4,)", lambda: ex.rmsnorm_torch(x, torch.ones(4)), (ValueError,)),
        ("x (4, 6), weight (1, 6)", lambda: ex.rmsnorm_torch(x, torch.ones(1, 6)), (ValueError,)),
        ("x = tensor(2.0) (0-dim)", lambda: ex.rmsnorm_torch(torch.tensor(2.0), torch.ones(1)), (ValueError,)),
    ):
        expect_refused(call, input=label, hint="check x's dtype, x.dim() >= 1 and weight.shape == (H,)", errors=errors)


# ----------------------------------------------------------------------------------------------- rmsnorm_triton


@checks("rmsnorm_triton", gate=True)
def triton_kernel_stays_inside_its_output(ex):
    """launches rmsnorm_kernel on a 6 x 100 window (row stride 140) with BLOCK_SIZE 128, writing a y window of row
    stride 120; the guards around y survive and every row is right"""
    device = triton_device()
    n_rows, n_cols, eps = 6, 100, 1e-6
    x = random_window((n_rows, n_cols), (1, 40), device=device)
    weight = 1 + 0.5 * torch.randn(n_cols, device=device)
    y_buffer, y = guarded((n_rows, n_cols), (2, 20), device=device)
    ex.rmsnorm_kernel[(n_rows,)](y, x, weight, x.stride(0), y.stride(0), n_cols, eps, BLOCK_SIZE=128)
    label = f"x = a (6, 100) window, row stride {x.stride(0)}; y row stride {y.stride(0)}; BLOCK_SIZE=128"
    expect_guard_untouched(y_buffer, (n_rows, n_cols), input=label, hint="mask the store of y with cols < n_cols")
    expect_close(
        y,
        oracle(x, weight, eps),
        input=label,
        hint="row i starts at x_ptr + i * x_row_stride (and y_ptr + i * y_row_stride); divide by n_cols",
    )


@checks("rmsnorm_triton")
def triton_hand_checkable(ex):
    """x = [[3, 4]], weight = [2, 0.5], eps = 0: y = [6, 2] / sqrt(12.5)"""
    device = triton_device()
    x = torch.tensor([[3.0, 4.0]], device=device)
    weight = torch.tensor([2.0, 0.5], device=device)
    got = ex.rmsnorm_triton(x, weight, 0.0)
    r = 1 / math.sqrt(12.5)
    label = "x=[[3, 4]], weight=[2, 0.5], eps=0"
    expect_tensor(got, shape=(1, 2), dtype=torch.float32, device=device, input=label)
    expect_close(got, torch.tensor([[6 * r, 2 * r]], dtype=torch.float64), input=label, hint=HINT)


def triton_shapes():
    """One element, hidden sizes that are not powers of two, one row, many rows; real sizes when compiled."""
    shapes = [(1, 1), (37, 129), (1, 1000), (300, 48), (2, 5, 96)]
    return shapes + ([(4096, 4096), (7, 16384)] if triton_compiled() else [])


@checks("rmsnorm_triton")
def triton_shapes_and_dtypes(ex):
    """(1, 1), (37, 129), (1, 1000), (300, 48), (2, 5, 96) in float32 and float16 (plus GPU-sized rows when Triton
    compiles) against float64; the result in x's dtype and shape"""
    for dtype in (torch.float32, torch.float16):
        for shape in triton_shapes():
            x, weight = activations(shape, dtype, device=triton_device())
            got = ex.rmsnorm_triton(x, weight, 1e-6)
            expect_rmsnorm(got, x, weight, 1e-6, label=describe(x=x, weight=weight, eps=1e-6))


@checks("rmsnorm_triton", requires_compiled=True)
def triton_bfloat16(ex):
    """bfloat16 (which Triton's interpreter lacks) at (37, 129), (2, 5, 96), (3, 5120) and (4096, 4096) against
    float64, on a GPU"""
    for shape in ((37, 129), (2, 5, 96), (3, 5120), (4096, 4096)):
        x, weight = activations(shape, torch.bfloat16, device=triton_device())
        got = ex.rmsnorm_triton(x, weight, 1e-6)
        expect_rmsnorm(got, x, weight, 1e-6, label=describe(x=x, weight=weight, eps=1e-6))


@checks("rmsnorm_triton")
def triton_fp32_math_and_eps(ex):
    """float16 activations of ~1000 (x^2 overflows float16 above 256); tiny activations with eps = 1e-2"""
    for shape, dtype, scale, eps in (((4, 300), torch.float16, 1e3, 1e-6), ((5, 300), torch.float32, 1e-3, 1e-2)):
        x, weight = activations(shape, dtype, device=triton_device(), scale=scale)
        label = describe(x=x, eps=eps) + f" with |x| ~ {scale:g}"
        got = ex.rmsnorm_triton(x, weight, eps)
        expect_rmsnorm(
            got, x, weight, eps, label=label, hint="upcast the loaded row to fp32 before squaring; eps inside the root"
        )


@checks("rmsnorm_triton")
def triton_strided_and_empty_inputs(ex):
    """x = wide[:, :70] (row stride 130, read in place), a transposed 3-D x, t.T (column stride 2), an expanded
    column (column stride 0), a strided weight, a 1-D x, H == MAX_FUSED_COLS, and zero rows (an empty result)"""
    device = triton_device()
    wide, weight = activations((9, 130), torch.float32, device=device)
    x, weight = wide[:, :70], weight[:70].contiguous()
    expect_rmsnorm(
        ex.rmsnorm_triton(x, weight, 1e-6),
        x,
        weight,
        1e-6,
        label=describe(x=x) + f" = wide[:, :70], strides {x.stride()}",
        hint="pass rows.stride(0) to the kernel: rows of a slice are further apart than H",
    )
    base, weight = activations((6, 3, 40), torch.float16, device=device)
    x = base.transpose(0, 1)
    expect_rmsnorm(
        ex.rmsnorm_triton(x, weight, 1e-5),
        x,
        weight,
        1e-5,
        label=describe(x=x) + f" strides {x.stride()}",
        hint="reshape x to (N, H) rows and make them contiguous when the column stride is not 1",
    )
    base, _ = activations((40, 2), torch.float32, device=device)
    x, weight = base.T, 1 + 0.5 * torch.randn(40, device=device)
    expect_rmsnorm(
        ex.rmsnorm_triton(x, weight, 1e-6),
        x,
        weight,
        1e-6,
        label=describe(x=x) + f" = t.T, strides {x.stride()} (column stride 2)",
        hint="rows with a column stride other than 1 must be made contiguous before the kernel reads them",
    )
    x = (torch.randn(5, 1, device=device) + 0.3).expand(5, 37)
    weight = 1 + 0.5 * torch.randn(37, device=device)
    expect_rmsnorm(
        ex.rmsnorm_triton(x, weight, 1e-6),
        x,
        weight,
        1e-6,
        label=describe(x=x) + f" = a column expanded, strides {x.stride()} (column stride 0)",
        hint="rows with a column stride other than 1 must be made contiguous before the kernel reads them",
    )
    x, wide_weight = activations((3, 2 * 50), torch.float32, device=device)
    x, weight = x[:, :50], wide_weight[::2]
    expect_rmsnorm(
        ex.rmsnorm_triton(x, weight, 1e-6),
        x,
        weight,
        1e-6,
        label=describe(x=x, weight=weight) + f" with weight = w[::2] (stride {weight.stride(0)})",
        hint="the kernel reads the weight with unit stride: make it contiguous",
    )
    x, weight = activations((96,), torch.float16, device=device)
    expect_rmsnorm(ex.rmsnorm_triton(x, weight, 1e-6), x, weight, 1e-6, label=describe(x=x) + " (one 1-D vector)")
    x, weight = activations((1, ex.MAX_FUSED_COLS), torch.float32, device=device)
    expect_rmsnorm(
        ex.rmsnorm_triton(x, weight, 1e-6),
        x,
        weight,
        1e-6,
        label=describe(x=x) + " (H == MAX_FUSED_COLS)",
        hint="H == MAX_FUSED_COLS fits in one block: refuse only H > MAX_FUSED_COLS",
    )
    x = torch.randn(0, 64, device=device)
    got = ex.rmsnorm_triton(x, torch.ones(64, device=device), 1e-6)
    expect_tensor(got, shape=(0, 64), dtype=torch.float32, input="x (0, 64): no rows", hint="return an empty (0, 64) y")


@checks("rmsnorm_triton")
def triton_operands_in_their_own_layouts(ex):
    """x and weight each in a layout of its own (x a slice of a fused projection, weight every other element of a
    buffer; x transposed, weight a column of a wider tensor), same values as contiguous copies"""
    for order in (("fused_slice", "padded"), ("transposed", "fused_slice")):
        x, weight = activations((9, 40), torch.float32, device=triton_device())
        lx, lw = distinct_layouts(x, weight, order=order)
        expect_own_layouts(lx, lw)
        label = f"{describe(x=x, weight=weight)}, strides x {lx.stride()}, weight {lw.stride()}"
        expect_rmsnorm(
            ex.rmsnorm_triton(lx, lw, 1e-6),
            x,
            weight,
            1e-6,
            label=label,
            hint="rows with unit column stride read through their row stride, others made contiguous; the weight "
            "contiguous",
        )


@checks("rmsnorm_triton")
def triton_refuses_bad_input(ex):
    """an integer x (TypeError); a weight of the wrong length, zero columns, a 0-dim x, MAX_FUSED_COLS + 1 columns
    (ValueError)"""
    device = triton_device()
    x = torch.randn(4, 6, device=device)
    too_wide = ex.MAX_FUSED_COLS + 1
    for label, call, errors in (
        ("x int32 (4, 6)", lambda: ex.rmsnorm_triton(x.to(torch.int32), torch.ones(6, device=device)), (TypeError,)),
        ("x (4, 6), weight (5,)", lambda: ex.rmsnorm_triton(x, torch.ones(5, device=device)), (ValueError,)),
        ("x (3, 0): no columns", lambda: ex.rmsnorm_triton(x[:3, :0], torch.ones(0, device=device)), (ValueError,)),
        ("x = tensor(2.0) (0-dim)", lambda: ex.rmsnorm_triton(x[0, 0], torch.ones(1, device=device)), (ValueError,)),
        (
            f"x (1, {too_wide}): one column more than MAX_FUSED_COLS",
            lambda: ex.rmsnorm_triton(torch.randn(1, too_wide, device=device), torch.ones(too_wide, device=device)),
            (ValueError,),
        ),
    ):
        expect_refused(call, input=label, hint="validate dtype and shapes before launching", errors=errors)


# ------------------------------------------------------------------------------------------ rmsnorm_block_model

WARP = 32
MODEL_THREADS = 256
REDUCTIONS = [
    torch.sum,
    torch.Tensor.sum,
    torch.mean,
    torch.Tensor.mean,
    torch.nansum,
    torch.norm,
    torch.Tensor.norm,
    torch.linalg.vector_norm,
    torch.cumsum,
    torch.Tensor.cumsum,
    torch.einsum,
    torch.matmul,
    torch.Tensor.matmul,
    torch.Tensor.__matmul__,
]
checks.restrict(
    "rmsnorm_block_model",
    forbid=[*RMS_NORM, *REDUCTIONS],
    instead="combine threads with warp_allreduce and elementwise + only, as the kernel does with shuffles",
)


class WarpAllreduceRecorder:
    """The checks' own warp_allreduce (group sums by reshape, in the values' dtype), counting the calls."""

    def __init__(self):
        self.calls: list[tuple[int, ...]] = []

    def __call__(self, values, op="sum", width=WARP):
        expect(
            isinstance(values, torch.Tensor) and values.shape[-1:] == (WARP,) and op == "sum" and width == WARP,
            "warp_allreduce was called with something other than one sum per lane over 32 lanes",
            input="a warp_allreduce call",
            expected="warp_allreduce(values (..., 32), 'sum')",
            got=f"{type(values).__name__} {tuple(getattr(values, 'shape', ()))}, op={op!r}, width={width!r}",
            hint="keep the lanes as the last dimension, of size 32",
        )
        self.calls.append(tuple(values.shape))
        return values.sum(dim=-1, keepdim=True).expand_as(values).clone()


def recording_warp_allreduce(ex):
    return replacing(ex, "warp_allreduce", WarpAllreduceRecorder())


def run_model(ex, x, weight, eps, *, label, hint=HINT):
    with recording_warp_allreduce(ex) as recorder:
        got = ex.rmsnorm_block_model(x.clone(), weight.clone(), eps)
    expect_tensor(got, shape=tuple(x.shape), dtype=torch.float32, input=label)
    expect_close(got, oracle(x, weight, eps), baseline=baseline(x, weight, eps), input=label, hint=hint)
    expect(
        len(recorder.calls) >= 1,
        "the threads were combined without warp_allreduce",
        input=label,
        expected="at least one warp_allreduce call (the shuffles)",
        got="none",
        hint="the sum across the 32 lanes of a warp is warp_allreduce(partial.view(R, WARPS, 32), 'sum')",
    )


HINT_MODEL = (
    "thread t adds columns t, t + 256, ...; warp_allreduce in each warp; warp 0 reduces the WARPS partials "
    "(lanes >= WARPS hold 0); rsqrt(total / H + eps)"
)


@checks("rmsnorm_block_model")
def model_hand_checkable(ex):
    """x = [[3, 4]], weight = [2, 0.5], eps = 0: y = [6, 2] / sqrt(12.5)"""
    x = torch.tensor([[3.0, 4.0]])
    weight = torch.tensor([2.0, 0.5])
    r = 1 / math.sqrt(12.5)
    with recording_warp_allreduce(ex):
        got = ex.rmsnorm_block_model(x, weight, 0.0)
    expect_close(
        got,
        torch.tensor([[6 * r, 2 * r]], dtype=torch.float64),
        input="x=[[3, 4]], weight=[2, 0.5], eps=0",
        hint=HINT_MODEL,
    )


@checks("rmsnorm_block_model")
def model_rows_of_any_length(ex):
    """H = 1, 7, 32, 255, 256, 257, 1000, 4096 (all eight warps busy, several passes), and 300 rows of 100, against
    float64"""
    for shape in ((2, 1), (3, 7), (2, 32), (2, 255), (3, 256), (2, 257), (3, 1000), (2, 4096), (300, 100)):
        x, weight = activations(shape, torch.float32, device="cpu")
        run_model(ex, x, weight, 1e-6, label=describe(x=x, weight=weight), hint=HINT_MODEL)


@checks("rmsnorm_block_model")
def model_mass_in_the_last_warp(ex):
    """rows whose large values sit in the columns of warp 7 only (224..255, 480..511): the step across warps must
    bring warp 7's partial into the total; tiny activations with eps = 1e-2"""
    x = torch.randn(3, 600) * 1e-2
    x[:, 224:256] += 5.0
    x[:, 480:512] -= 3.0
    weight = 1 + 0.5 * torch.randn(600)
    run_model(
        ex,
        x,
        weight,
        1e-6,
        label="x (3, 600) ~ 0.01 N(0, 1), plus 5 at columns 224..255 and -3 at 480..511 (warp 7's)",
        hint="warp 0 must read every warp's partial from shared memory, not only its own",
    )
    x, weight = activations((4, 300), torch.float32, device="cpu", scale=1e-3)
    run_model(ex, x, weight, 1e-2, label=describe(x=x, eps=1e-2) + " with |x| ~ 0.001", hint="eps inside the root")


@checks("rmsnorm_block_model")
def model_refuses_bad_input(ex):
    """float64 or float16 x, a 1-D x, zero columns, a weight of the wrong length: TypeError or ValueError"""
    for label, call in (
        ("x (2, 8) float64", lambda: ex.rmsnorm_block_model(torch.randn(2, 8).double(), torch.ones(8).double())),
        ("x (2, 8) float16", lambda: ex.rmsnorm_block_model(torch.randn(2, 8).half(), torch.ones(8).half())),
        ("x (8,) 1-D", lambda: ex.rmsnorm_block_model(torch.randn(8), torch.ones(8))),
        ("x (2, 0)", lambda: ex.rmsnorm_block_model(torch.randn(2, 0), torch.ones(0))),
        ("x (2, 8), weight (7,)", lambda: ex.rmsnorm_block_model(torch.randn(2, 8), torch.ones(7))),
    ):
        with recording_warp_allreduce(ex):
            expect_refused(
                call,
                input=label,
                hint="check a 2-D float32 x with H >= 1 and weight.shape == (H,) first",
                errors=(TypeError, ValueError),
            )


# ------------------------------------------------------------------------------------------ rmsnorm_cuda (GPU)

CUDA_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def run_cuda(module, x, weight, eps):
    got = module.rmsnorm_cuda(x, weight, eps)
    torch.cuda.synchronize()
    return got


@checks("rmsnorm_cuda", requires_cuda=True)
def cuda_hand_checkable(ex):
    """x = [[3, 4]], weight = [2, 0.5], eps = 0 on the GPU: y = [6, 2] / sqrt(12.5)"""
    module = ex.load_rmsnorm_cuda()
    x = torch.tensor([[3.0, 4.0]], device="cuda")
    got = run_cuda(module, x, torch.tensor([2.0, 0.5], device="cuda"), 0.0)
    r = 1 / math.sqrt(12.5)
    expect_tensor(got, shape=(1, 2), dtype=torch.float32, device="cuda", input="x=[[3, 4]], weight=[2, 0.5], eps=0")
    expect_close(
        got.cpu(),
        torch.tensor([[6 * r, 2 * r]], dtype=torch.float64),
        input="x=[[3, 4]], weight=[2, 0.5], eps=0",
        hint="rsqrtf(total / cols + eps): divide the row's sum of squares by cols",
    )


@checks("rmsnorm_cuda", requires_cuda=True)
def cuda_shapes_and_dtypes(ex):
    """(1, 1), (3, 7), (5, 32), (4, 1000), (3, 4097), (64, 4096), (2, 16384), (1001, 100) in float32, float16 and
    bfloat16 against float64: the vector path (H a multiple of 16 / sizeof) and the scalar one, one warp's worth of
    data and all eight warps busy"""
    module = ex.load_rmsnorm_cuda()
    for dtype in CUDA_DTYPES:
        for shape in ((1, 1), (3, 7), (5, 32), (4, 1000), (3, 4097), (64, 4096), (2, 16384), (1001, 100)):
            x, weight = activations(shape, dtype, device="cuda")
            got = run_cuda(module, x, weight, 1e-6)
            expect_rmsnorm(
                got,
                x,
                weight,
                1e-6,
                label=describe(x=x, weight=weight, eps=1e-6) + " on cuda",
                hint="reduce in three levels (thread, warp_sum, then warp 0 over the WARPS partials in shared "
                "memory) in fp32; divide by cols",
            )


@checks("rmsnorm_cuda", requires_cuda=True, gate=True)
def cuda_stays_inside_its_rows(ex):
    """x is the leading rows of a buffer whose next rows are NaN, so a block that reads a row it does not own brings
    NaN in; x, then the weight, starting one element past a 16-byte boundary (contiguous but misaligned: the scalar
    path)"""
    module = ex.load_rmsnorm_cuda()
    for dtype in CUDA_DTYPES:
        for rows, cols in ((2, 50), (5, 256), (3, 1024)):
            full, weight = activations((rows + 3, cols), dtype, device="cuda")
            full[rows:] = float("nan")
            x = full[:rows]
            label = f"x ({rows}, {cols}) {str(dtype).removeprefix('torch.')} = leading rows of a buffer with 3 NaN rows after"
            expect_rmsnorm(
                run_cuda(module, x, weight, 1e-6),
                x,
                weight,
                1e-6,
                label=label,
                hint="block i reads only row i: x + row * cols with row = blockIdx.x",
            )
        flat = torch.randn(1 + 4 * 512, device="cuda").to(dtype)
        x = flat[1:].view(4, 512)  # contiguous, data pointer 2 or 4 bytes past a 16-byte boundary
        weight = (1 + 0.5 * torch.randn(512, device="cuda")).to(dtype)
        expect_rmsnorm(
            run_cuda(module, x, weight, 1e-6),
            x,
            weight,
            1e-6,
            label=f"x (4, 512) {str(dtype).removeprefix('torch.')} starting one element past a 16-byte boundary",
            hint="take the 128-bit path only when x, weight and y are 16-byte aligned (and VEC divides cols)",
        )
        x, _ = activations((4, 512), dtype, device="cuda")
        flat = (1 + 0.5 * torch.randn(1 + 512, device="cuda")).to(dtype)
        weight = flat[1:]  # contiguous, data pointer 2 or 4 bytes past a 16-byte boundary; x and y aligned
        expect_rmsnorm(
            run_cuda(module, x, weight, 1e-6),
            x,
            weight,
            1e-6,
            label=f"x (4, 512) {str(dtype).removeprefix('torch.')}, weight starting one element past a 16-byte boundary",
            hint="test the weight's alignment too: it is read with the same 128-bit loads as x",
        )


@checks("rmsnorm_cuda", requires_cuda=True)
def cuda_fp32_math(ex):
    """float16 activations of ~1000 (x^2 overflows float16), bfloat16 rows of 65536 values, with and without
    outlier channels (an accumulator in bfloat16 stalls), and tiny activations with eps = 1e-2 (eps inside the
    root)"""
    module = ex.load_rmsnorm_cuda()
    for shape, dtype, scale, eps in (
        ((4, 4096), torch.float16, 1e3, 1e-6),
        ((3, 65536), torch.bfloat16, 1.0, 1e-6),
        ((2, 65536), torch.float16, 1.0, 1e-6),
        ((5, 4096), torch.float32, 1e-3, 1e-2),
    ):
        x, weight = activations(shape, dtype, device="cuda", scale=scale)
        label = describe(x=x, eps=eps) + f" with |x| ~ {scale:g} on cuda"
        expect_rmsnorm(
            run_cuda(module, x, weight, eps),
            x,
            weight,
            eps,
            label=label,
            hint="accumulate the squares in a float (static_cast<float> of each element); rsqrtf(mean + eps)",
        )
    # Outlier channels (LLM.int8()): the first 2048 channels 8x larger. Each thread's first chunk holds them, so
    # an accumulator in bfloat16 is already large when the small squares arrive, and rounds them away.
    x, weight = activations((2, 65536), torch.bfloat16, device="cuda")
    x[:, :2048] *= 8
    expect_rmsnorm(
        run_cuda(module, x, weight, 1e-6),
        x,
        weight,
        1e-6,
        label=describe(x=x) + " whose first 2048 channels are 8x larger (outlier channels) on cuda",
        hint="accumulate the squares in a float: a bfloat16 sum of 256 squares stops growing once it is large",
    )


@checks("rmsnorm_cuda", requires_cuda=True)
def cuda_refuses_bad_input(ex):
    """float64, a non-contiguous x (transposed, or a slice of a fused tensor), a strided weight, a 1-D x, zero
    columns, a weight of another length or dtype, CPU tensors: RuntimeError (TORCH_CHECK); zero rows give an empty
    result"""
    module = ex.load_rmsnorm_cuda()
    x = torch.randn(4, 8, device="cuda")
    w = torch.ones(8, device="cuda")
    cases = [
        ((x.double(), w.double()), "x (4, 8) float64", "TORCH_CHECK the dtype: float32, float16 or bfloat16"),
        ((torch.randn(8, 4, device="cuda").t(), w), "x (4, 8) transposed", "TORCH_CHECK(x.is_contiguous(), ...)"),
        (
            (with_layout(x, "fused_slice"), w),
            f"x (4, 8) a slice of a fused (4, 24) tensor, strides {with_layout(x, 'fused_slice').stride()}",
            "TORCH_CHECK(x.is_contiguous(), ...): rows 24 apart",
        ),
        (
            (x, with_layout(w, "padded")),
            "weight (8,) every other element of a buffer (stride 2)",
            "TORCH_CHECK(weight.is_contiguous(), ...)",
        ),
        ((x[0], w), "x (8,) 1-D", "TORCH_CHECK(x.dim() == 2, ...)"),
        ((x[:, :0], w[:0]), "x (4, 0)", "TORCH_CHECK at least one column"),
        ((x, w[:5]), "x (4, 8), weight (5,)", "TORCH_CHECK weight.size(0) == x.size(1)"),
        ((x, w.half()), "x float32, weight float16", "TORCH_CHECK weight.scalar_type() == x.scalar_type()"),
        ((x.cpu(), w.cpu()), "x, weight on the CPU", "TORCH_CHECK(x.is_cuda() && weight.is_cuda(), ...)"),
    ]
    for (xx, ww), label, hint in cases:
        expect_refused(lambda xx=xx, ww=ww: module.rmsnorm_cuda(xx, ww, 1e-6), input=label, hint=hint,
                       errors=(RuntimeError,))  # fmt: skip
        torch.cuda.synchronize()
    empty = run_cuda(module, torch.empty(0, 8, device="cuda"), w, 1e-6)
    expect_tensor(empty, shape=(0, 8), dtype=torch.float32, device="cuda", input="x (0, 8)")


# ------------------------------------------------------------------------------------------------ benchmark


def _f_rms_norm(x, weight, eps):
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


def benchmark(ex):
    """All five ways in one run, at 32768 x 4096 bf16 and 4096 x 4096 fp32, in GB/s of the ideal traffic
    2NHb + Hb, next to a device-to-device copy of x."""
    module = ex.load_rmsnorm_cuda()
    rows = []
    for n, h, dtype, name in ((32768, 4096, torch.bfloat16, "bf16"), (4096, 4096, torch.float32, "fp32")):
        x = torch.randn(n, h, device="cuda", dtype=dtype)
        w = (1 + 0.5 * torch.randn(h, device="cuda")).to(dtype)
        moved = 2 * x.numel() * x.element_size() + w.numel() * w.element_size()
        shape = f"{n}x{h} {name}"
        rows.append(
            bandwidth_row("CUDA C++ rmsnorm_cuda", shape, lambda x=x, w=w: module.rmsnorm_cuda(x, w, 1e-6), moved)
        )
        rows.append(
            bandwidth_row("Triton rmsnorm_triton", shape, lambda x=x, w=w: ex.rmsnorm_triton(x, w, 1e-6), moved)
        )
        rows += baseline_rows("PyTorch rmsnorm_torch", shape, ex.rmsnorm_torch, (x, w, 1e-6), bytes_moved=moved)
        rows.append(bandwidth_row("F.rms_norm", shape, lambda x=x, w=w: _f_rms_norm(x, w, 1e-6), moved))
        rows.append(copy_row(x.numel() * x.element_size()))
        del x
    return rows
