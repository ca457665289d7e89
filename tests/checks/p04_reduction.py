"""Checks for p04.reduction. References: float64 sums (`torch.sum` of the input in float64), hand-checkable sums of
integers (exact in float32), and torch.sum in float32 as the baseline of the tolerance policy.

The simulator exercises run on every machine: the learner's kernels are launched directly on NaN-filled partial
buffers with guard elements after them and on inputs that are windows of larger buffers (in the simulator an index
past a window raises IndexError). Every launch in the simulator is strict (`llm_algo.cuda.races`): a missing
`cuda.syncthreads()` fails it as a shared-memory race and a barrier inside `if t < stride:` as a barrier that only
some threads reach, whatever order the threads ran in; a check replays each warp's shared accesses as bank wavefronts
(sequential addressing is conflict-free). A missing atomic hardly ever gives a wrong sum (blocks run one after
another), so the atomic exercise's checks count the simulator's atomic additions on `out`.

The CUDA C++ exercise's checks need a GPU (`requires_cuda=True`); they synchronise before reading results and hand
`block_sums` windows of NaN-filled buffers and inputs that are windows of larger random buffers."""

from __future__ import annotations

import contextlib

import numpy as np
import torch

from llm_algo.bench import bandwidth_row, copy_row
from llm_algo.check import Checks, expect, expect_close, expect_refused, expect_refused_or_correct, expect_tensor
from llm_algo.cuda.inline import TORCH_CHECK_ERRORS
from llm_algo.cuda.races import tracing_shared_memory
from llm_algo.cuda.sim_checks import (
    LaunchRecorder,
    as_float32_result,
    expect_no_bank_conflicts,
    recording,
    simulate,
)
from llm_algo.references.kernels import expect_guard_untouched, guarded, random_window
from llm_algo.references.layouts import describe_layouts, distinct_layouts, expect_own_layouts

PARTIALS = "return the final one-element partials array"

checks = Checks("p04.reduction")
checks.restrict(
    "block_sum_sim",
    "atomic_sum_sim",
    forbid=[torch.sum, torch.Tensor.sum],
    instead="sum in your @cuda.jit kernel (NumPy and torch sums are the checks' reference)",
)
checks.restrict(
    "reduction_cuda",
    forbid=[torch.sum, torch.Tensor.sum],
    instead="sum in your __global__ kernels (torch.sum is the checks' reference)",
)

THREADS = 64  # the simulator exercises' block size (the setup cell's THREADS)
HINT_TREE = (
    "stride = THREADS // 2, ..., 1: threads t < stride add shared[t + stride]; cuda.syncthreads() after the store and "
    "after every step"
)


# ----------------------------------------------------------------------------------------- helpers


def inputs(n: int) -> np.ndarray:
    """float32 values with mean 1 and both signs: the sum is of order n, so its relative rounding error is small."""
    return (torch.randn(n) + 1.0).numpy()


def oracle(x) -> torch.Tensor:
    return torch.as_tensor(x).double().sum().reshape(1)


def baseline(x) -> torch.Tensor:
    return torch.as_tensor(x).float().sum().reshape(1)


def expect_launches(recorder: LaunchRecorder, expected: list[tuple[int, int]], *, input: str, hint: str) -> None:
    expect(
        recorder.launches == expected,
        "the kernel was launched with other grids",
        input=input,
        expected=", ".join(f"[{b}, {t}]" for b, t in expected) + " (blocks, threads per block)",
        got=", ".join(f"[{', '.join(map(str, launch))}]" for launch in recorder.launches) or "no launch",
        hint=hint,
    )


@contextlib.contextmanager
def counting_atomic_adds():
    """Counts the simulator's atomic additions (numba's FakeCUDAAtomic.add) while the block runs."""
    from numba.cuda.simulator import kernelapi

    original = kernelapi.FakeCUDAAtomic.add
    calls = []

    def add(self, array, index, val):
        calls.append(index)
        return original(self, array, index, val)

    kernelapi.FakeCUDAAtomic.add = add
    try:
        yield calls
    finally:
        kernelapi.FakeCUDAAtomic.add = original


# ----------------------------------------------------------------------------------------- block_sum_sim


@checks("block_sum_sim")
def two_pass_hand_checkable(ex):
    """1 + 2 + ... + 300 = 45150 (exact in float32): three blocks, then one"""
    x = np.arange(1, 301, dtype=np.float32)
    label = "x = [1, 2, ..., 300] float32"
    expect_close(
        as_float32_result(ex.sum_two_pass_sim(x), (1,), input=label, hint=PARTIALS),
        torch.tensor([45150.0], dtype=torch.float64),
        input=label,
        hint="reduce the partials again until a single block did the work",
    )


@checks("block_sum_sim", gate=True)
def block_kernel_writes_one_sum_per_block(ex):
    """launches block_sum_kernel directly: n = 300 on 3 blocks and n = 100 on 1 block; each partial[b] is the sum of
    x[128 b : 128 (b + 1)]; the partials are a NaN-filled window with 8 guard elements after it"""
    for n, blocks in ((300, 3), (100, 1)):
        x = random_window((n,), (64,), device="cpu")
        buffer, partial = guarded((blocks,), (8,), device="cpu")
        label = f"n={n}, grid [{blocks}, {THREADS}], x a ({n},) window, partial a NaN-filled ({blocks},) window"
        simulate(
            ex.block_sum_kernel,
            blocks,
            THREADS,
            x.numpy(),
            partial.numpy(),
            n,
            input=label,
            hint="guard both loads: i < n and i + THREADS < n",
            outside="past n",
        )
        expect_guard_untouched(buffer, (blocks,), input=label, hint="only thread 0 writes, to partial[blockIdx.x]")
        chunks = [x[b * 2 * THREADS : (b + 1) * 2 * THREADS].double().sum() for b in range(blocks)]
        expect_close(
            partial,
            torch.stack(chunks),
            baseline=torch.stack([x[b * 2 * THREADS : (b + 1) * 2 * THREADS].sum() for b in range(blocks)]),
            input=label,
            hint=HINT_TREE,
        )


@checks("block_sum_sim")
def block_tree_conflict_free(ex):
    """the tree of block_sum_kernel (n = 128 and 100 on one block of 64 threads, two warps) makes every warp-wide
    shared load and store in one wavefront: sequential addressing, consecutive threads on consecutive banks (section
    2, step 3); replayed from the traced accesses"""
    for n in (128, 100):
        x = inputs(n)
        partial = np.full(1, np.nan, dtype=np.float32)
        label = f"n={n}, grid [1, {THREADS}], every shared access traced"
        with tracing_shared_memory() as log:
            simulate(ex.block_sum_kernel, 1, THREADS, x, partial, n, input=label, hint="guard both loads",
                     outside="past n")  # fmt: skip
        expect_close(torch.from_numpy(partial), oracle(x), baseline=baseline(x), input=label, hint=HINT_TREE)
        expect_no_bank_conflicts(
            log,
            input=label,
            hint="sequential addressing: at each step the threads t < stride add shared[t + stride] into shared[t]; "
            "the interleaved index 2 * stride * t sends lanes t and t + 16 (32 words apart) to the same bank",
        )


@checks("block_sum_sim")
def two_pass_sizes(ex):
    """n = 0, 1, 65, 129, 256 and 1000 against a float64 sum; the launches are ceil(n / 128) blocks (at least one),
    then one block over the partials (1000: [8, 64] then [1, 64]; 256: [2, 64] then [1, 64])"""
    for n in (0, 1, 65, 129, 256, 1000):
        x = inputs(n)
        label = f"x ({n},) float32, values with mean 1"
        blocks = max(1, -(-n // (2 * THREADS)))
        with recording(ex, "block_sum_kernel") as recorder:
            got = ex.sum_two_pass_sim(x)
        expect_launches(
            recorder,
            [(blocks, THREADS)] + ([(1, THREADS)] if blocks > 1 else []),
            input=label,
            hint="the kernel computes the sum: ceil(n / (2 * THREADS)) blocks, then one pass per level of partials",
        )
        expect_close(
            as_float32_result(got, (1,), input=label, hint=PARTIALS),
            oracle(x),
            baseline=baseline(x),
            input=label,
            hint="ceil(n / (2 * THREADS)) blocks (at least one), then again on the partials until one is left",
        )


@checks("block_sum_sim")
def two_pass_rejects_bad_input(ex):
    """a float64 array, 2-D arrays ((3, 4) and a (200, 1) column) or a Python list raise TypeError/ValueError"""
    for bad, label in (
        (np.ones(10, dtype=np.float64), "x (10,) float64"),
        (np.ones((3, 4), dtype=np.float32), "x (3, 4) float32"),
        (np.ones((200, 1), dtype=np.float32), "x (200, 1) float32 (a column, not a 1-D array)"),
        ([1.0, 2.0], "x = [1.0, 2.0] (a Python list)"),
    ):
        expect_refused(
            lambda bad=bad: ex.sum_two_pass_sim(bad),
            input=label,
            hint="check isinstance(x, np.ndarray), x.dtype == np.float32 and x.ndim == 1",
            errors=(TypeError, ValueError),
        )


# ----------------------------------------------------------------------------------------- atomic_sum_sim


@checks("atomic_sum_sim")
def atomic_hand_checkable(ex):
    """1 + 2 + ... + 100 = 5050 on 2 blocks of 64 threads"""
    x = np.arange(1, 101, dtype=np.float32)
    label = "x = [1, ..., 100], blocks=2"
    expect_close(
        as_float32_result(ex.sum_atomic_sim(x, blocks=2), (1,), input=label, hint=PARTIALS),
        torch.tensor([5050.0], dtype=torch.float64),
        input=label,
        hint="every thread sums its grid-stride slice, then cuda.atomic.add(out, 0, value) into a zeroed out",
    )


@checks("atomic_sum_sim", gate=True)
def atomic_kernel_adds_atomically_into_out(ex):
    """launches atomic_sum_kernel directly on 1, 2 and 3 blocks: out[0] gets the sum, through atomic adds on out[0]
    only; out is a zeroed element followed by 8 NaN guard elements"""
    for n, blocks in ((300, 1), (200, 2), (50, 3)):
        x = random_window((n,), (32,), device="cpu")
        buffer, out = guarded((1,), (8,), device="cpu")
        out.zero_()
        label = f"n={n}, grid [{blocks}, {THREADS}], x a ({n},) window, out = [0] then 8 NaN guard elements"
        with counting_atomic_adds() as adds:
            simulate(
                ex.atomic_sum_kernel,
                blocks,
                THREADS,
                x.numpy(),
                out.numpy(),
                n,
                input=label,
                hint="loop while i < n",
                outside="past n",
            )
        expect(
            len(adds) >= 1 and all(int(np.asarray(index).reshape(-1)[0]) == 0 for index in adds),
            "the kernel did not add into out[0] with atomics",
            input=label,
            expected="cuda.atomic.add(out, 0, value) (any number of them)",
            got=f"{len(adds)} atomic adds" + (f" at indices {sorted({str(i) for i in adds})[:4]}" if adds else ""),
            hint="a plain out[0] += value is a read-modify-write race on a GPU: use cuda.atomic.add",
        )
        expect_guard_untouched(buffer, (1,), input=label, hint="add only into out[0]")
        expect_close(
            out,
            x.double().sum().reshape(1),
            baseline=x.sum().reshape(1),
            input=label,
            hint="a grid-stride loop: start at cuda.grid(1), step by cuda.gridsize(1), stop at n",
        )


@checks("atomic_sum_sim")
def atomic_sizes_and_grids(ex):
    """n = 0, 1, 127, 128, 129, 1000 on 1, 2 and 3 blocks, against a float64 sum"""
    for n in (0, 1, 127, 128, 129, 1000):
        for blocks in (1, 2, 3):
            x = inputs(n)
            label = f"x ({n},) float32, blocks={blocks}"
            with recording(ex, "atomic_sum_kernel") as recorder:
                got = ex.sum_atomic_sim(x, blocks=blocks)
            expect_launches(
                recorder, [(blocks, THREADS)], input=label, hint="launch exactly the grid you were given, once"
            )
            expect_close(
                as_float32_result(got, (1,), input=label, hint=PARTIALS),
                oracle(x),
                baseline=baseline(x),
                input=label,
                hint="zero out before the launch, launch the given grid, and step by the whole grid",
            )


@checks("atomic_sum_sim")
def atomic_rejects_bad_input(ex):
    """a float64 array, 2-D arrays ((3, 4) and a (200, 1) column), a Python list or blocks = 0 raise
    TypeError/ValueError"""
    for call, label in (
        (lambda: ex.sum_atomic_sim(np.ones(10, dtype=np.float64)), "x (10,) float64"),
        (lambda: ex.sum_atomic_sim(np.ones((3, 4), dtype=np.float32)), "x (3, 4) float32"),
        (
            lambda: ex.sum_atomic_sim(np.ones((200, 1), dtype=np.float32)),
            "x (200, 1) float32 (a column, not a 1-D array: the simulator would add its rows without a word)",
        ),
        (lambda: ex.sum_atomic_sim([1.0, 2.0]), "x = [1.0, 2.0] (a Python list)"),
        (lambda: ex.sum_atomic_sim(np.ones(10, dtype=np.float32), blocks=0), "blocks=0"),
    ):
        expect_refused(
            call,
            input=label,
            hint="check isinstance(x, np.ndarray), x.dtype == np.float32, x.ndim == 1 and blocks >= 1 before launching",
            errors=(TypeError, ValueError),
        )


# ----------------------------------------------------------------------------------------- reduction_cuda (GPU)

CUDA_SIZES = (0, 1, 31, 32, 255, 256, 257, 511, 512, 513, 1000, 4097, 1_000_003, 2**24 + 5)


def cuda_input(n: int) -> torch.Tensor:
    return torch.randn(n, device="cuda") + 1.0


@checks("reduction_cuda", requires_cuda=True)
def cuda_hand_checkable(ex):
    """1 + 2 + ... + 1000 = 500500 (exact in float32), two-pass and atomic"""
    module = ex.load_reduction()
    x = torch.arange(1, 1001, device="cuda", dtype=torch.float32)
    for name in ("sum_two_pass", "sum_atomic"):
        got = getattr(module, name)(x)
        torch.cuda.synchronize()
        label = f"{name}(x = [1, ..., 1000])"
        expect_tensor(
            got,
            shape=(),
            dtype=torch.float32,
            device="cuda",
            input=label,
            hint="return a 0-d float32 tensor (out.reshape({}))",
        )
        expect_close(got.cpu(), torch.tensor(500500.0, dtype=torch.float64), input=label, hint=HINT_TREE)


@checks("reduction_cuda", requires_cuda=True, gate=True)
def cuda_block_sums_into_guarded_partials(ex):
    """block_sums on 1, 3, 7 and 64 partials (NaN-filled windows with 16 guard elements) for n = 1000 and 100000;
    x a window of a larger random buffer: the partials add up to the sum of x, nothing else is written"""
    module = ex.load_reduction()
    for n in (1000, 100_000):
        for blocks in (1, 3, 7, 64):
            x = random_window((n,), (4096,), device="cuda") + 1.0  # values with mean 1
            x = torch.cat([x, torch.randn(4096, device="cuda")])[:n]  # a window of a larger random buffer
            buffer, partial = guarded((blocks,), (16,), device="cuda")
            label = f"n={n}, block_sums into {blocks} partials (a NaN-filled window, 16 guard elements), x a window"
            module.block_sums(x, partial)
            torch.cuda.synchronize()
            expect_guard_untouched(
                buffer.cpu(),
                (blocks,),
                input=label,
                hint="launch exactly partial.numel() blocks; thread 0 writes partial[blockIdx.x]",
            )
            expect(
                not bool(partial.isnan().any()),
                "a partial was never written",
                input=label,
                expected="every partial written",
                got=f"{int(partial.isnan().sum())} NaN partials",
                hint="one block per partial; thread 0 of each block writes its total",
            )
            expect_close(
                partial.double().cpu().sum().reshape(1),
                x.double().cpu().sum().reshape(1),
                baseline=x.cpu().sum().reshape(1),
                input=label,
                hint="loop while i < n (never x[n]); " + HINT_TREE,
            )


@checks("reduction_cuda", requires_cuda=True)
def cuda_sums_of_many_sizes(ex):
    """sum_two_pass and sum_atomic for n = 0, 1, 31, 32, 255 ... 1000003 and 2^24 + 5 against float64"""
    module = ex.load_reduction()
    for n in CUDA_SIZES:
        x = cuda_input(n)
        for name in ("sum_two_pass", "sum_atomic"):
            got = getattr(module, name)(x)
            torch.cuda.synchronize()
            label = f"{name}(x ({n},) float32, mean 1)"
            expect_tensor(got, shape=(), dtype=torch.float32, device="cuda", input=label)
            expect_close(
                got.cpu(),
                x.double().cpu().sum(),
                baseline=x.cpu().sum(),
                input=label,
                hint="two passes: partials, then one block over them; atomics: atomicAdd, never *out += total",
            )


@checks("reduction_cuda", requires_cuda=True)
def cuda_refuses_bad_input(ex):
    """float64, non-contiguous or CPU inputs, and an empty or float64 partial buffer raise RuntimeError"""
    module = ex.load_reduction()
    x = cuda_input(1000)
    cases = [
        (lambda: module.sum_two_pass(x.double()), "sum_two_pass(x float64)", "TORCH_CHECK the dtype is float32"),
        (lambda: module.sum_atomic(x.double()), "sum_atomic(x float64)", "TORCH_CHECK the dtype is float32"),
        (
            lambda: module.sum_two_pass(torch.randn(2000, device="cuda")[::2]),
            "sum_two_pass(x[::2]): stride 2",
            "TORCH_CHECK(x.is_contiguous(), ...)",
        ),
        (
            lambda: module.sum_atomic(torch.randn(2000, device="cuda")[::2]),
            "sum_atomic(x[::2]): stride 2",
            "TORCH_CHECK(x.is_contiguous(), ...)",
        ),
        (
            lambda: module.block_sums(x, torch.empty(0, device="cuda")),
            "block_sums(x, partial with 0 elements)",
            "a grid of zero blocks is invalid: TORCH_CHECK partial.numel() >= 1",
        ),
        (
            lambda: module.block_sums(x, torch.empty(4, device="cuda", dtype=torch.float64)),
            "block_sums(x, partial float64)",
            "TORCH_CHECK partial is float32",
        ),
        (lambda: module.sum_two_pass(x.cpu()), "sum_two_pass(x on the CPU)", "TORCH_CHECK(x.is_cuda(), ...)"),
        (lambda: module.sum_atomic(x.cpu()), "sum_atomic(x on the CPU)", "TORCH_CHECK(x.is_cuda(), ...)"),
    ]
    for call, label, hint in cases:
        expect_refused(call, input=label, hint=hint, errors=(RuntimeError,))
        torch.cuda.synchronize()


HINT_LAYOUTS = (
    "the kernel reads x[i] at ptr + i: TORCH_CHECK(x.is_contiguous(), ...) (and the partials) or use the strides"
)


@checks("reduction_cuda", requires_cuda=True)
def cuda_operands_in_their_own_layouts(ex):
    """sum_two_pass and sum_atomic of x (1000,) every third element of a buffer (a column of a fused tensor), then every
    other one; block_sums(x, partial) with x and a NaN-filled partial (7,) each strided in a layout of its own: refused
    (RuntimeError from TORCH_CHECK) or summed correctly, never read or written as if contiguous"""
    module = ex.load_reduction()
    x = cuda_input(1000)
    for order in (("fused_slice",), ("padded",)):
        (lx,) = distinct_layouts(x, order=order)
        expect_own_layouts(lx)
        for name in ("sum_two_pass", "sum_atomic"):
            label = f"{name}(" + describe_layouts(x=lx) + ")"

            def check_sum(got, label=label):
                torch.cuda.synchronize()
                expect_tensor(got, shape=(), dtype=torch.float32, device="cuda", input=label)
                expect_close(got.cpu(), x.double().cpu().sum(), baseline=x.cpu().sum(), input=label, hint=HINT_LAYOUTS)

            expect_refused_or_correct(
                lambda name=name, lx=lx: getattr(module, name)(lx), check_sum, input=label, hint=HINT_LAYOUTS,
                errors=TORCH_CHECK_ERRORS,
            )  # fmt: skip
            torch.cuda.synchronize()
    lx, lpartial = distinct_layouts(x, torch.full((7,), float("nan"), device="cuda"))
    expect_own_layouts(lx, lpartial)
    label = "block_sums(" + describe_layouts(x=lx, partial=lpartial) + "), partial NaN-filled"

    def check_partials(_):
        torch.cuda.synchronize()
        expect(
            not bool(lpartial.isnan().any()),
            "a partial was never written",
            input=label,
            expected="every partial written",
            got=f"{int(lpartial.isnan().sum())} NaN partials",
            hint=HINT_LAYOUTS,
        )
        expect_close(
            lpartial.double().cpu().sum().reshape(1),
            x.double().cpu().sum().reshape(1),
            baseline=x.cpu().sum().reshape(1),
            input=label,
            hint=HINT_LAYOUTS,
        )

    expect_refused_or_correct(
        lambda: module.block_sums(lx, lpartial),
        check_partials,
        input=label,
        hint=HINT_LAYOUTS,
        errors=TORCH_CHECK_ERRORS,
    )
    torch.cuda.synchronize()


def benchmark(ex):
    """sum_two_pass and sum_atomic vs torch.sum (read bandwidth, 4n bytes) and a device-to-device copy, 2^28 fp32."""
    module = ex.load_reduction()
    n = 2**28
    x = torch.randn(n, device="cuda")
    read = 4 * n
    shape = "n=2^28 float32 (bytes read)"
    return [
        bandwidth_row("sum_two_pass", shape, lambda: module.sum_two_pass(x), read),
        bandwidth_row("sum_atomic", shape, lambda: module.sum_atomic(x), read),
        bandwidth_row("torch.sum", shape, lambda: x.sum(), read),
        copy_row(2**30),
    ]
