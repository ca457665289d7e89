"""Checks for p03.vector_add. References: `torch.add` and a hand-checkable case; guard bytes after the
output catch writes that a missing mask lets through. Small shapes under the interpreter, larger compiled.

The guard checks are gates (see llm_algo.references.kernels): they call the kernel on windows of larger buffers, so
an unmasked kernel writes into memory the check owns. Until they pass, the other checks (which let the wrapper
allocate exactly sized outputs, where an out-of-bounds write would corrupt the process) are not run."""

import torch

from llm_algo.bench import bandwidth_row, copy_row
from llm_algo.check import (
    Checks,
    describe,
    expect,
    expect_close,
    expect_refused,
    expect_refused_or_correct,
    expect_tensor,
)
from llm_algo.device import triton_compiled, triton_device, triton_dtypes
from llm_algo.references.kernels import expect_guard_untouched, guarded, random_window
from llm_algo.references.layouts import distinct_layouts, expect_own_layouts

checks = Checks("p03.vector_add", triton=True)
checks.restrict(
    "vector_add",
    "matrix_add",
    kernel=True,
    forbid=[torch.add, torch.Tensor.add, torch.Tensor.add_],
    instead="add in your @triton.jit kernel (torch.add is the checks' reference)",
)


# ----------------------------------------------------------------------------------------- vector_add


@checks("vector_add")
def hand_checkable_shorter_than_a_block(ex):
    """five elements, one partly-filled block: [1..5] + [10, 20, 30, 40, 50]"""
    x = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0], device=triton_device())
    y = torch.tensor([10.0, 20.0, 30.0, 40.0, 50.0], device=triton_device())
    expect_close(
        ex.vector_add(x, y),
        torch.tensor([11.0, 22.0, 33.0, 44.0, 55.0], dtype=torch.float64),
        input="x=[1, 2, 3, 4, 5], y=[10, 20, 30, 40, 50]",
        hint="mask the last block: offsets < n_elements",
    )


@checks("vector_add")
def sizes_that_are_not_block_multiples(ex):
    """n = 1, 127, 1000, 4097, ... in fp32 and fp16 (bf16 too when compiled), with block sizes 128 and 1024"""
    sizes = [1, 127, 1000, 4097] + ([1_000_003, 2**22 + 17] if triton_compiled() else [])
    for dtype in triton_dtypes():
        for n in sizes:
            for block in (128, 1024):
                x = torch.randn(n, device=triton_device()).to(dtype)
                y = torch.randn(n, device=triton_device()).to(dtype)
                got = ex.vector_add(x, y, block_size=block)
                label = describe(x=x, y=y) + f", block_size={block}"
                expect_tensor(got, shape=(n,), dtype=dtype, device=x.device.type, input=label)
                expect_close(
                    got,
                    x.double() + y.double(),
                    baseline=x + y,
                    input=label,
                    hint="launch triton.cdiv(n, BLOCK_SIZE) programs, not n // BLOCK_SIZE",
                )


@checks("vector_add", gate=True)
def kernel_never_writes_past_the_end(ex):
    """calls add_kernel directly on windows of larger buffers; the guard elements after the output must survive"""
    n, block = 1000, 256  # 4 programs cover 1024 elements: the last 24 are out of bounds
    x = random_window((n,), (24,), device=triton_device())
    y = random_window((n,), (24,), device=triton_device())
    buffer, out = guarded((n,), (24,), device=triton_device())
    ex.add_kernel[(4,)](x, y, out, n, BLOCK_SIZE=block)
    label = f"n={n}, BLOCK_SIZE={block}, grid=(4,), 24 guard elements after each operand"
    expect_guard_untouched(buffer, (n,), input=label, hint="pass mask=offsets < n_elements to tl.store")
    expect_close(
        out, x.double() + y.double(), input=label, hint="offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)"
    )


@checks("vector_add")
def rejects_mismatched_inputs(ex):
    """different lengths or dtypes, or a strided (non-contiguous) input, raise an error instead of a wrong result"""
    expect_refused(
        lambda: ex.vector_add(torch.randn(200, device=triton_device())[::2], torch.randn(100, device=triton_device())),
        input="x = a (200,) tensor [::2]: 100 elements, stride 2",
        hint="the kernel reads x_ptr + offsets: refuse non-contiguous inputs (x.is_contiguous())",
    )
    x = torch.randn(100, device=triton_device())
    expect_refused(
        lambda: ex.vector_add(x, torch.randn(50, device=triton_device())),
        input="x (100,), y (50,)",
        hint="check x.shape == y.shape before launching",
    )
    expect_refused(
        lambda: ex.vector_add(x, torch.randn(100, device=triton_device()).half()),
        input="x float32, y float16",
        hint="check x.dtype == y.dtype before launching",
    )


@checks("vector_add")
def vector_operands_in_their_own_layouts(ex):
    """x a column of a (100, 3) tensor (stride 3), y every other element of a buffer (stride 2): refused (the
    lesson's kernel reads x_ptr + offsets), or x + y"""
    x, y = torch.randn(100, device=triton_device()), torch.randn(100, device=triton_device())
    lx, ly = distinct_layouts(x, y)
    expect_own_layouts(lx, ly)
    label = f"x (100,) strides {lx.stride()}, y (100,) strides {ly.stride()}"
    expect_refused_or_correct(
        lambda: ex.vector_add(lx, ly),
        lambda got: expect_close(got, x.double() + y.double(), input=label + " (accepted: must be right)"),
        input=label,
        hint="refuse non-contiguous inputs with a ValueError before launching, or read each through its own stride",
    )


# ----------------------------------------------------------------------------------------- matrix_add


def layouts(M, N, dtype):
    """(name, x, y) pairs: contiguous, transposed, sliced with a step, mixed."""
    base = lambda *shape: torch.randn(*shape, device=triton_device()).to(dtype)
    yield "contiguous", base(M, N), base(M, N)
    yield "y transposed (y = t.T)", base(M, N), base(N, M).T
    yield "x sliced x[:, ::2]", base(M, 2 * N)[:, ::2], base(M, N)
    yield "both transposed", base(N, M).T, base(N, M).T


@checks("matrix_add")
def hand_checkable_two_by_three(ex):
    """a 2x3 example, smaller than one tile"""
    x = torch.arange(6.0, device=triton_device()).reshape(2, 3)
    y = torch.full((2, 3), 0.5, device=triton_device())
    expect_close(
        ex.matrix_add(x, y),
        torch.arange(6.0, dtype=torch.float64).reshape(2, 3) + 0.5,
        input="x=[[0,1,2],[3,4,5]], y=0.5",
        hint="mask both edges: rows < M and cols < N",
    )


@checks("matrix_add")
def any_layout_and_odd_shapes(ex):
    """37x129, 1x1, 5x64 (and 1000x3001 compiled) in contiguous, transposed and sliced layouts"""
    shapes = [(37, 129), (1, 1), (5, 64)] + ([(1000, 3001)] if triton_compiled() else [])
    for dtype in triton_dtypes():
        for M, N in shapes:
            for i, (name, x, y) in enumerate(layouts(M, N, dtype)):
                blocks = {} if i % 2 == 0 else {"block_m": 16, "block_n": 64}  # other tiles: the same sum
                got = ex.matrix_add(x, y, **blocks)
                label = f"{describe(x=x, y=y, **blocks)}, {name}, strides x{x.stride()} y{y.stride()}"
                expect_tensor(got, shape=(M, N), dtype=dtype, input=label)
                expect(
                    got.is_contiguous(),
                    "the output is not contiguous",
                    input=label,
                    expected="contiguous",
                    got=str(got.stride()),
                    hint="allocate the output with torch.empty((M, N))",
                )
                expect_close(
                    got,
                    x.double() + y.double(),
                    baseline=x + y,
                    input=label,
                    hint="address x with x.stride(0), x.stride(1) (and y, out with theirs); never assume (N, 1)",
                )


@checks("matrix_add")
def matrix_operands_in_their_own_layouts(ex):
    """x and y each in a layout of its own (a slice of a fused tensor and padded rows; transposed storage and a window
    of a bigger buffer), same values as contiguous copies"""
    for order in (("fused_slice", "padded"), ("transposed", "outer_padded")):
        x, y = torch.randn(37, 29, device=triton_device()), torch.randn(37, 29, device=triton_device())
        lx, ly = distinct_layouts(x, y, order=order)
        expect_own_layouts(lx, ly)
        label = f"x (37, 29) {order[0]} strides {lx.stride()}, y {order[1]} strides {ly.stride()}"
        expect_close(
            ex.matrix_add(lx, ly),
            x.double() + y.double(),
            input=label,
            hint="address x with x.stride(0), x.stride(1) and y with y's own strides",
        )


@checks("matrix_add", gate=True)
def kernel_respects_both_edges(ex):
    """calls add_2d_kernel on a 20x30 view of a NaN-guarded buffer with 16x16 tiles"""
    M, N, block = 20, 30, 16  # 2x2 tiles cover 32x32; every operand is a window of a bigger buffer
    x = random_window((M, N), (12, 10), device=triton_device())
    y = random_window((M, N), (12, 10), device=triton_device())
    buffer, out = guarded((M, N), (12, 10), device=triton_device())  # out: a (20, 30) window with strides (40, 1)
    ex.add_2d_kernel[(2, 2)](
        x,
        y,
        out,
        M,
        N,
        x.stride(0),
        x.stride(1),
        y.stride(0),
        y.stride(1),
        out.stride(0),
        out.stride(1),
        BLOCK_M=block,
        BLOCK_N=block,
    )
    label = "M=20, N=30, 16x16 tiles, every operand a (20, 30) window with strides (40, 1)"
    expect_guard_untouched(
        buffer, (M, N), input=label, hint="mask = (rows[:, None] < M) & (cols[None, :] < N), on the store too"
    )
    expect_close(
        out, x.double() + y.double(), input=label, hint="use each operand's own strides, the output's included"
    )


@checks("matrix_add")
def kernel_writes_through_a_transposed_output(ex):
    """calls add_2d_kernel with a column-major output (out = a window of buffer.T, strides (1, 33)): the store
    uses stride_om and stride_on"""
    M, N, block = 20, 30, 16
    x = random_window((M, N), (12, 10), device=triton_device())
    y = random_window((M, N), (12, 10), device=triton_device())
    buffer, window = guarded((N, M), (10, 13), device=triton_device())
    out = window.T  # (20, 30), strides (1, 33)
    ex.add_2d_kernel[(2, 2)](x, y, out, M, N, *x.stride(), *y.stride(), *out.stride(), BLOCK_M=block, BLOCK_N=block)
    label = f"M=20, N=30, 16x16 tiles, out a (20, 30) transposed window with strides {out.stride()}"
    expect_guard_untouched(buffer, (N, M), input=label, hint="address out with both of its strides")
    expect_close(
        out,
        x.double() + y.double(),
        input=label,
        hint="out_ptr + rows[:, None] * stride_om + cols[None, :] * stride_on",
    )


@checks("matrix_add")
def rejects_mismatched_shapes(ex):
    """a shape mismatch raises instead of reading out of bounds"""
    x = torch.randn(8, 8, device=triton_device())
    expect_refused(
        lambda: ex.matrix_add(x, torch.randn(8, 4, device=triton_device())),
        input="x (8, 8), y (8, 4)",
        hint="check x.shape == y.shape before launching",
    )


def benchmark(ex):
    """Reference vs torch.add vs a device-to-device copy, fp32 and bf16, at sizes that fill the GPU."""
    rows = []
    n = 2**28
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(n, device="cuda", dtype=dtype)
        y = torch.randn(n, device="cuda", dtype=dtype)
        moved = 3 * n * x.element_size()
        shape = f"n=2^28 {str(dtype).removeprefix('torch.')}"
        rows.append(bandwidth_row("vector_add", shape, lambda x=x, y=y: ex.vector_add(x, y), moved))
        rows.append(bandwidth_row("torch.add", shape, lambda x=x, y=y: x + y, moved))
    rows.append(copy_row(2**30))
    return rows
