"""The bounds checker (llm_algo.check.bounds): reads and writes past a kernel's tensor arguments are caught under Triton's
interpreter, with the notebook cell and line; accesses that stay inside pass; gate checks run kernels interpreted on
the compiled path too (llm_algo.grading.interpreted.interpreted_kernels)."""

from __future__ import annotations

import linecache
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
import torch

from llm_algo import device
from llm_algo.check import CheckSpec, bounds, expect_refused
from llm_algo.grading.interpreted import interpreted_kernels
from llm_algo.grading.run import run_check

device.policy()  # before anything imports Triton: its interpreter, as in the grader

CELL = "<notebook 03_Triton_Kernels/99_Tiny.ipynb, cell 4 (solution tiny)>"
KERNELS = """\
import triton.language as tl


def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, MASKED: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if MASKED:
        x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    else:
        x = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, x, mask=offs < n)


def copy_2d_kernel(x_ptr, out_ptr, M, N, stride_xm, stride_om, BM: tl.constexpr, BN: tl.constexpr, ROWS_ONLY: tl.constexpr):
    rows = tl.arange(0, BM)[:, None]
    cols = tl.arange(0, BN)[None, :]
    mask = (rows < M) & (cols < N)
    load_mask = rows < M if ROWS_ONLY else mask
    x = tl.load(x_ptr + rows * stride_xm + cols, mask=load_mask, other=0.0)
    tl.store(out_ptr + rows * stride_om + cols, x, mask=mask)


def gather_kernel(x_ptr, index_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    index = tl.load(index_ptr + offs, mask=offs < n, other=0)
    tl.store(out_ptr + offs, tl.load(x_ptr + index, mask=offs < n, other=0.0), mask=offs < n)


def unmasked_store_kernel(out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, offs.to(tl.float32))


def atomic_kernel(out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.atomic_add(out_ptr + offs, 1.0, mask=offs < BLOCK)
"""


@pytest.fixture(scope="module")
def kernels() -> dict:
    """The kernels above as Triton's interpreter runs them, defined in a pseudo notebook cell (as the grader does)."""
    from triton.runtime.interpreter import InterpretedFunction

    bounds.install()
    linecache.cache[CELL] = (len(KERNELS), None, KERNELS.splitlines(keepends=True), CELL)
    namespace: dict = {}
    exec(compile(KERNELS, CELL, "exec"), namespace)
    return {name: InterpretedFunction(value) for name, value in namespace.items() if name.endswith("_kernel")}


def line_of(text: str) -> int:
    return next(i for i, line in enumerate(KERNELS.splitlines(), 1) if text in line)


def test_an_unmasked_load_past_a_small_tensor_names_the_cell_and_line(kernels) -> None:
    x, out = torch.randn(10), torch.empty(10)
    with bounds.raising(), pytest.raises(bounds.OutOfBounds) as caught:
        kernels["copy_kernel"][(1,)](x, out, 10, BLOCK=16, MASKED=False)
    summary = caught.value.summary
    where = f'99_Tiny.ipynb, cell 4 (solution "tiny"), line {line_of("x = tl.load(x_ptr + offs)")}'
    assert summary.startswith("copy_kernel reads out of bounds: 6 of 16 lanes outside `x_ptr` (10,) float32")
    assert "6 up to 6 element(s) past its end" in summary and where in summary
    assert "mask the load with offs < n" in caught.value.hint


def test_a_masked_load_passes(kernels) -> None:
    x, out = torch.randn(10), torch.empty(10)
    with bounds.raising():
        kernels["copy_kernel"][(1,)](x, out, 10, BLOCK=16, MASKED=True)
    assert torch.equal(out, x)


def test_a_strided_window_read_inside_its_elements_passes(kernels) -> None:
    buffer = torch.randn(6, 12)
    x, out = buffer[:5, :7], torch.empty(5, 7)  # x: strides (12, 1), a gap of 5 after each row
    with bounds.raising():
        kernels["copy_2d_kernel"][(1,)](x, out, 5, 7, x.stride(0), out.stride(0), BM=8, BN=8, ROWS_ONLY=False)
    assert torch.equal(out, x)


def test_a_read_into_the_gap_between_the_rows_of_a_window_is_caught(kernels) -> None:
    buffer = torch.randn(6, 12)
    x, out = buffer[:5, :7], torch.empty(5, 7)
    gaps = r"5 of 40 lanes .* 1 up to 1 element\(s\) past its end, 4 in the gaps of this strided view"
    with bounds.raising(), pytest.raises(bounds.OutOfBounds, match=gaps):
        kernels["copy_2d_kernel"][(1,)](x, out, 5, 7, x.stride(0), out.stride(0), BM=8, BN=8, ROWS_ONLY=True)


def test_an_in_bounds_read_of_a_second_argument_passes(kernels) -> None:
    x, index, out = torch.randn(20), torch.tensor([19, 0, 7, 3, 19]), torch.empty(5)
    with bounds.raising():
        kernels["gather_kernel"][(1,)](x, index, out, 5, BLOCK=8)
    assert torch.equal(out, x[index])


def test_a_read_outside_every_argument_is_caught_whatever_the_tensor_it_was_aimed_at(kernels) -> None:
    x, index, out = torch.randn(20), torch.tensor([19, 0, 20, 3, -2]), torch.empty(5)
    with bounds.raising(), pytest.raises(bounds.OutOfBounds) as caught:
        kernels["gather_kernel"][(1,)](x, index, out, 5, BLOCK=8)
    assert "2 of 5 lanes outside `x_ptr` (20,) float32" in caught.value.summary
    assert "1 up to 1 element(s) past its end, 1 up to 2 element(s) before its start" in caught.value.summary


def test_stores_and_atomics_are_checked_too(kernels) -> None:
    with bounds.raising(), pytest.raises(bounds.OutOfBounds, match="unmasked_store_kernel writes out of bounds"):
        kernels["unmasked_store_kernel"][(1,)](torch.empty(5), BLOCK=8)
    with bounds.raising(), pytest.raises(bounds.OutOfBounds, match=r"atomic_kernel updates \(atomically\) out of"):
        kernels["atomic_kernel"][(1,)](torch.zeros(6), BLOCK=8)


def test_outside_a_check_the_access_goes_ahead_with_a_warning(kernels) -> None:
    buffer = torch.arange(16.0)
    x, out = buffer[:10], torch.empty(10)
    with pytest.warns(bounds.OutOfBoundsWarning, match="copy_kernel reads out of bounds"):
        kernels["copy_kernel"][(1,)](x, out, 10, BLOCK=16, MASKED=False)
    assert torch.equal(out, x)


def test_run_check_reports_a_read_out_of_bounds_as_a_clean_failure(kernels) -> None:
    def check(ex):
        ex.copy_kernel[(1,)](torch.randn(10), torch.empty(10), 10, BLOCK=16, MASKED=False)

    spec = CheckSpec("p03.tiny", "tiny", "stays_inside", "stays inside", check, gate=True)
    result = run_check(spec, {"copy_kernel": kernels["copy_kernel"]}, "99_Tiny.ipynb", triton=True)
    assert result.outcome == "failed"
    assert result.summary.startswith("copy_kernel reads out of bounds: 6 of 16 lanes")
    assert result.hint.startswith("mask the load with offs < n")


def test_expect_refused_does_not_take_a_read_out_of_bounds_for_a_refusal(kernels) -> None:
    launch = lambda: kernels["copy_kernel"][(1,)](torch.randn(10), torch.empty(10), 10, BLOCK=16, MASKED=False)
    with bounds.raising(), pytest.raises(bounds.OutOfBounds):
        expect_refused(launch, input="x (10,)", hint="check the length")


def test_a_layout_with_overlapping_rows_allows_its_span_and_a_broadcast_its_elements() -> None:
    overlapping = torch.randn(8).as_strided((3, 4), (2, 1))  # rows overlap: elements 0..7, no greedy decomposition
    region = bounds.Region.of("x", overlapping)
    assert region.dims is None and region.span == 8 * 4
    broadcast = bounds.Region.of("y", torch.randn(3, 1).expand(3, 4))  # strides (1, 0): 3 elements
    assert broadcast.span == 3 * 4


def test_an_interpreter_without_the_expected_internals_is_refused_loudly() -> None:
    stub = types.SimpleNamespace(InterpreterBuilder=type("B", (), {"create_masked_load": None}), GridExecutor=object)
    assert bounds.missing_internals(stub) == [
        "InterpreterBuilder.create_masked_store",
        "InterpreterBuilder.create_atomic_rmw",
        "InterpreterBuilder.create_atomic_cas",
        "GridExecutor._init_args_hst",
        "interpreter_builder",
    ]


def test_on_the_compiled_path_a_gate_runs_the_kernel_interpreted_and_puts_it_back(kernels) -> None:
    from triton.runtime.jit import JITFunction

    compiled = JITFunction(kernels["copy_kernel"].fn)
    namespace = {"copy_kernel": compiled}
    with bounds.raising(), interpreted_kernels(namespace, compiled=True):
        assert namespace["copy_kernel"] is not compiled
        with pytest.raises(bounds.OutOfBounds, match="copy_kernel reads out of bounds"):
            namespace["copy_kernel"][(1,)](torch.randn(10), torch.empty(10), 10, BLOCK=16, MASKED=False)
    assert namespace["copy_kernel"] is compiled


COMPILED_PATH = """
import torch, triton, triton.language as tl
from triton.runtime.jit import JITFunction
from llm_algo.check import bounds
from llm_algo.grading.interpreted import interpreted_kernels
from tiny_kernel import row_sum_kernel, helper

bounds.install()
namespace = {"row_sum_kernel": row_sum_kernel, "helper": helper}
assert isinstance(row_sum_kernel, JITFunction) and isinstance(tl.sum, JITFunction)
x, out = torch.randn(3, 5), torch.empty(3)
with bounds.raising(), interpreted_kernels(namespace, compiled=True):
    namespace["row_sum_kernel"][(3,)](x, out, 5, x.stride(0), BLOCK=8)
    torch.testing.assert_close(out, x.sum(1))
    try:
        namespace["row_sum_kernel"][(3,)](x, out, 8, x.stride(0), BLOCK=8)
    except bounds.OutOfBounds as error:
        print("caught:", error.summary)
assert namespace["row_sum_kernel"] is row_sum_kernel and isinstance(tl.sum, JITFunction)
assert isinstance(tl.core.tensor.sum, JITFunction), tl.core.tensor.sum
assert tl.load.__module__ == "triton.language.core" and tl.core.load.__module__ == "triton.language.core"
print("restored")
"""

TINY_KERNEL = """
import triton
import triton.language as tl


@triton.jit
def helper(x):
    return x.sum(axis=0)  # a member function: tl.core.tensor.sum


@triton.jit
def row_sum_kernel(x_ptr, out_ptr, n, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < n, other=0.0)
    tl.store(out_ptr + row, tl.sum(x, axis=0) * 0.5 + helper(x) * 0.5)
"""


def test_the_compiled_path_swaps_triton_language_too_and_restores_it(tmp_path: Path) -> None:
    """In a process where Triton compiles (no TRITON_INTERPRET), tl.sum and x.sum() are @jit functions that the
    interpreted kernel calls; they are swapped for the gate and put back, with the interpreter's patches undone."""
    (tmp_path / "tiny_kernel.py").write_text(TINY_KERNEL)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    root = Path(__file__).resolve().parents[2]
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(root), env.get("PYTHONPATH", "")])
    run = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(COMPILED_PATH)], env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "caught: row_sum_kernel reads out of bounds: 3 of 8 lanes outside `x_ptr` (3, 5) float32" in run.stdout
    assert run.stdout.rstrip().endswith("restored")
