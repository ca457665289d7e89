"""What the checks of the tiled-matmul lessons share (p04.shared_memory, p04.async_copy): NumPy operands, the float64
reference and a float32 baseline for the tolerance, the result and launch checks of a simulator twin, and a real
fp32 cuBLAS (TF32 off) for the C++ kernels' baselines."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import numpy as np
import torch

from ..check.api import expect, expect_close
from .sim_checks import LaunchRecorder, as_float32_result, quick_switching, recording


def operands(M: int, N: int, K: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(M, K, generator=g).numpy(), torch.randn(K, N, generator=g).numpy()


def reference(A, B) -> torch.Tensor:
    return torch.from_numpy(np.asarray(A)).double() @ torch.from_numpy(np.asarray(B)).double()


def baseline(A, B) -> torch.Tensor:
    """A float32 matmul by a loop in another order (k outermost): the scale of fp32 rounding for the tolerance."""
    A32, B32 = torch.from_numpy(np.asarray(A)), torch.from_numpy(np.asarray(B))
    out = torch.zeros(A32.shape[0], B32.shape[1])
    for k in range(A32.shape[1]):
        out += A32[:, k : k + 1] * B32[k : k + 1, :]
    return out


def expect_tile(ex, tile: int) -> None:
    """The notebook kept the set-up cell's TILE (the simulator runs TILE x TILE Python threads per block)."""
    got = ex._namespace.get("TILE")
    expect(
        got == tile,
        "TILE is not the set-up cell's value",
        input="the notebook's TILE",
        expected=str(tile),
        got=repr(got),
        hint=f"keep TILE = {tile} from the set-up cell: the simulator runs TILE x TILE Python threads per block",
    )


def as_result(value, shape: tuple[int, int], *, input: str) -> torch.Tensor:
    """The twin's C: a float32 NumPy array of `shape`, as a tensor."""
    hint = "allocate C with np.empty((M, N), dtype=np.float32) and return it: (M, N) = (A.shape[0], B.shape[1])"
    return as_float32_result(value, shape, input=input, hint=hint)


def expect_grid(recorder: LaunchRecorder, grid: tuple[int, int], tile: int, *, kernel: str, input: str) -> None:
    """The last launch was `kernel[grid, (tile, tile)]`."""
    expect(
        len(recorder.launches) >= 1,
        "the kernel was never launched",
        input=input,
        expected=f"a launch of {kernel}",
        got="no launch",
        hint=f"the launcher must compute C with {kernel}[grid, (TILE, TILE)](...), not with NumPy",
    )
    got = recorder.launches[-1]

    def dims(value) -> tuple[int, ...]:
        return tuple(int(v) for v in value) if isinstance(value, tuple) else (int(value),)

    got_grid, got_block = dims(got[0]), dims(got[1]) if len(got) > 1 else ()
    expect(
        got_grid == grid and got_block == (tile, tile),
        "the kernel was launched with another grid or block",
        input=input,
        expected=f"grid {grid} (x = ceil(N / TILE) column tiles, y = ceil(M / TILE) row tiles), block ({tile}, {tile})",
        got=f"grid {got_grid}, block {got_block}",
        hint="x is the column direction: grid = (ceil(N / TILE), ceil(M / TILE)), rounded up, not down",
    )


@contextlib.contextmanager
def true_fp32() -> Iterator[None]:
    """cuBLAS in real fp32 while the block runs (TF32 off): a baseline for an fp32 kernel, not a TF32 one."""
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def expect_edges_and_empty(ex, *, function: str, kernel: str, tile: int, shapes, hint: str) -> None:
    """A simulator twin `function(A, B)` over (M, N, K) shapes that are not multiples of the tile: each result against
    float64 (fp32 rounding as the tolerance) and the launch `kernel[(ceil(N/tile), ceil(M/tile)), (tile, tile)]`;
    then an empty C (M = 0 or N = 0) must come back with its shape and launch no grid of zero blocks."""
    expect_tile(ex, tile)
    for seed, (M, N, K) in enumerate(shapes):
        A, B = operands(M, N, K, seed)
        label = f"A ({M}, {K}), B ({K}, {N}) float32"
        with recording(ex, kernel) as recorder, quick_switching():
            got = getattr(ex, function)(A, B)
        expect_grid(recorder, (math.ceil(N / tile), math.ceil(M / tile)), tile, kernel=kernel, input=label)
        expect_close(as_result(got, (M, N), input=label), reference(A, B), baseline=baseline(A, B), input=label,
                     hint=hint)  # fmt: skip
    for M, N in ((0, 3), (3, 0)):
        A, B = operands(M, N, 5, 9)
        label = f"A ({M}, 5), B (5, {N}): an empty C"
        with recording(ex, kernel) as recorder:
            got = getattr(ex, function)(A, B)
        as_result(got, (M, N), input=label)
        grids = [launch[0] if isinstance(launch[0], tuple) else (launch[0],) for launch in recorder.launches]
        empty = [grid for grid in grids if 0 in grid]
        expect(
            not empty,
            "launched a grid with zero blocks",
            input=label,
            expected="no launch when C is empty",
            got=str(empty),
            hint="a GPU refuses a grid of zero blocks: skip the launch when M == 0 or N == 0",
        )


def expect_cuda_gemm_in_own_layouts(matmul, matmul_out, A: torch.Tensor, B: torch.Tensor, *, name: str, hint: str):
    """A C++ GEMM's host functions with every operand in a layout of its own (issue 27's operand-layouts guard):
    `matmul(A, B)` with A transposed (a weight kept as (out, in)) and B a window of a padded buffer; `matmul_out(A, B,
    out)` with A a slice of a fused tensor, B padded rows and a NaN-filled out of its own. Each call is refused (a
    TORCH_CHECK) or multiplies correctly against the float64 product, fp32 cuBLAS (TF32 off) the baseline."""
    from ..check.api import expect_refused_or_correct, expect_tensor
    from ..references.layouts import describe_layouts, distinct_layouts, expect_own_layouts
    from .inline import TORCH_CHECK_ERRORS

    M, N = A.shape[0], B.shape[1]
    want = A.double().cpu() @ B.double().cpu()
    with true_fp32():
        cublas = (A @ B).cpu()
    lA, lB = distinct_layouts(A, B, order=("transposed", "outer_padded"))
    expect_own_layouts(lA, lB)
    label = f"{name}: " + describe_layouts(A=lA, B=lB)

    def check_product(got):
        torch.cuda.synchronize()
        expect_tensor(got, shape=(M, N), dtype=torch.float32, device="cuda", input=label)
        expect_close(got.cpu(), want, baseline=cublas, input=label, hint=hint)

    expect_refused_or_correct(lambda: matmul(lA, lB), check_product, input=label, hint=hint, errors=TORCH_CHECK_ERRORS)
    torch.cuda.synchronize()
    lA, lB, lout = distinct_layouts(A, B, torch.full((M, N), float("nan"), device="cuda"))
    expect_own_layouts(lA, lB, lout)
    out_label = f"{name}_out: " + describe_layouts(A=lA, B=lB, out=lout) + ", out NaN-filled"

    def check_out(_):
        torch.cuda.synchronize()
        expect_close(lout.cpu(), want, baseline=cublas, input=out_label, hint=hint)

    expect_refused_or_correct(
        lambda: matmul_out(lA, lB, lout), check_out, input=out_label, hint=hint, errors=TORCH_CHECK_ERRORS
    )
    torch.cuda.synchronize()
