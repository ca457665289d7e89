"""Checks for p04.cuda_intro. References: float64 PyTorch (`a + b`, `alpha * x + y`) and hand-checkable cases.

The simulator exercises (numba-cuda's CUDA simulator, on every machine) are checked through their launchers and by
launching the learner's `@cuda.jit` kernels directly on NaN-filled outputs with guard elements after them: an element
the kernel skips stays NaN, a store past the end either raises IndexError in the simulator or overwrites a guard. A
recorder put in place of the kernel while the launcher runs proves that the kernel computed the result, and with
which grid.

The CUDA C++ exercise's checks need a GPU (`requires_cuda=True`): on a CPU they read *needs a GPU*, never passed.
They synchronise before reading results, launch on torch's current stream (the learner's launcher does), and hand
`add_into` windows of NaN-filled buffers so that a stray store lands in memory the check owns."""

from __future__ import annotations

import numpy as np
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
from llm_algo.cuda.inline import TORCH_CHECK_ERRORS
from llm_algo.cuda.sim_checks import LaunchRecorder, as_float32_result, recording, simulate
from llm_algo.references.kernels import expect_guard_untouched, guarded, random_window
from llm_algo.references.layouts import describe_layouts, distinct_layouts, expect_own_layouts

LIKE_A = "allocate the output like a (np.empty_like(a)) and return it"

checks = Checks("p04.cuda_intro")
checks.restrict(
    "vector_add_sim",
    "saxpy_sim",
    forbid=[np.add, torch.add, torch.Tensor.add, torch.Tensor.add_],
    instead="compute the result in your @cuda.jit kernel (NumPy and torch are the checks' reference)",
)
checks.restrict(
    "vector_add_cuda",
    forbid=[torch.add, torch.Tensor.add, torch.Tensor.add_],
    instead="add in your __global__ kernel (torch.add is the checks' reference)",
)

HINT_GUARD = "only threads with i < n may touch the arrays: guard the body with `if i < n`"
HINT_GRID = "launch ceil(n / threads_per_block) blocks: (n + T - 1) // T, not n // T"
HINT_STRIDE = "step by the whole grid, cuda.gridsize(1) = blockDim.x * gridDim.x, not by one block's blockDim.x"


# ----------------------------------------------------------------------------------------- shared helpers


def numpy_inputs(*shapes) -> list[np.ndarray]:
    return [torch.randn(*shape).numpy() for shape in shapes]


def expect_launched(recorder: LaunchRecorder, *, input: str, grid: tuple | None = None) -> None:
    expect(
        len(recorder.launches) >= 1,
        "the kernel was never launched",
        input=input,
        expected="at least one launch of the @cuda.jit kernel",
        got="no launch",
        hint="the launcher must compute the result with kernel[blocks, threads](...), not with NumPy",
    )
    if grid is not None:
        got = tuple(int(v) for v in recorder.launches[-1])
        expect(
            got == grid,
            "the kernel was launched with another grid",
            input=input,
            expected=f"[{grid[0]}, {grid[1]}] (blocks, threads per block)",
            got=str(list(got)),
            hint="launch exactly the grid you were given: saxpy_kernel[blocks, threads_per_block](...)",
        )


# ----------------------------------------------------------------------------------------- vector_add_sim


@checks("vector_add_sim")
def sim_hand_checkable_shorter_than_a_block(ex):
    """five elements, one partly-filled block of 64 threads: [1..5] + [10, 20, 30, 40, 50]"""
    a = np.array([1, 2, 3, 4, 5], dtype=np.float32)
    b = np.array([10, 20, 30, 40, 50], dtype=np.float32)
    label = "a=[1, 2, 3, 4, 5], b=[10, 20, 30, 40, 50], threads_per_block=64"
    with recording(ex, "add_kernel") as recorder:
        got = ex.vector_add_sim(a, b)
    expect_launched(recorder, input=label)
    expect_close(
        as_float32_result(got, (5,), input=label, hint=LIKE_A),
        torch.tensor([11.0, 22.0, 33.0, 44.0, 55.0], dtype=torch.float64),
        input=label,
        hint=HINT_GUARD,
    )


@checks("vector_add_sim")
def sim_sizes_that_are_not_block_multiples(ex):
    """n = 1, 31, 32, 33, 100, 200 with 32 and 64 threads per block, and the extremes of a block (3 elements with 1
    thread per block, 1024 with 1024), against float64; the launch has ceil(n / T) blocks; an empty input launches no
    grid of zero blocks"""
    shapes = [(n, threads) for n in (1, 31, 32, 33, 100, 200) for threads in (32, 64)] + [(3, 1), (1024, 1024)]
    for n, threads in shapes:
        a, b = numpy_inputs((n,), (n,))
        label = f"a, b ({n},) float32, threads_per_block={threads}"
        with recording(ex, "add_kernel") as recorder:
            got = ex.vector_add_sim(a, b, threads_per_block=threads)
        expect_launched(recorder, input=label, grid=(-(-n // threads), threads))
        expect_close(
            as_float32_result(got, (n,), input=label, hint=LIKE_A),
            torch.from_numpy(a).double() + torch.from_numpy(b).double(),
            baseline=torch.from_numpy(a) + torch.from_numpy(b),
            input=label,
            hint=HINT_GRID,
        )
    a, b = numpy_inputs((0,), (0,))
    label = "a, b (0,) float32 (empty)"
    with recording(ex, "add_kernel") as recorder:
        got = ex.vector_add_sim(a, b)
    as_float32_result(got, (0,), input=label, hint=LIKE_A)
    empty_grids = [launch for launch in recorder.launches if int(launch[0]) < 1]
    expect(
        not empty_grids,
        "launched a grid of zero blocks",
        input=label,
        expected="no launch (or a grid of at least one block)",
        got=str([list(launch) for launch in empty_grids]),
        hint="a GPU refuses a grid of zero blocks (invalid configuration): skip the launch when n == 0",
    )


@checks("vector_add_sim", gate=True)
def sim_kernel_never_touches_past_the_end(ex):
    """launches add_kernel directly: n = 100 on 2 blocks of 64 threads (28 spare threads) and n = 70 on 3 x 32, into
    a NaN-filled output with 24 guard elements after it"""
    for n, blocks, threads in ((100, 2, 64), (70, 3, 32)):
        buffer, out = guarded((n,), (24,), device="cpu")
        a = random_window((n,), (24,), device="cpu").numpy()
        b = random_window((n,), (24,), device="cpu").numpy()
        label = f"n={n}, grid [{blocks}, {threads}], out = a NaN-filled ({n},) window with 24 guard elements after it"
        simulate(ex.add_kernel, blocks, threads, a, b, out.numpy(), n, input=label, hint=HINT_GUARD, outside="past n")
        expect_guard_untouched(buffer, (n,), input=label, hint=HINT_GUARD)
        expect_close(
            out,
            torch.from_numpy(a).double() + torch.from_numpy(b).double(),
            input=label,
            hint="i = blockIdx.x * blockDim.x + threadIdx.x (cuda.grid(1)): every element has exactly one thread",
        )


@checks("vector_add_sim")
def sim_rejects_bad_input(ex):
    """different lengths, float64, a 2-D array, 0 or 1025 threads per block raise ValueError/TypeError; Python lists
    raise TypeError"""
    a, b = numpy_inputs((10,), (9,))
    expect_refused(
        lambda: ex.vector_add_sim(a, b),
        input="a (10,), b (9,)",
        hint="check a.shape == b.shape before launching: the kernel would read past the end of b",
        errors=(ValueError, TypeError),
    )
    expect_refused(
        lambda: ex.vector_add_sim(a.astype(np.float64), a.astype(np.float64)),
        input="a, b (10,) float64",
        hint="check the dtype (float32) before launching",
        errors=(ValueError, TypeError),
    )
    (m,) = numpy_inputs((4, 5))
    expect_refused(
        lambda: ex.vector_add_sim(m, m),
        input="a, b (4, 5) float32",
        hint="the kernel indexes a flat 1-D array: refuse a.ndim != 1",
        errors=(ValueError, TypeError),
    )
    for threads in (0, 1025):
        expect_refused(
            lambda threads=threads: ex.vector_add_sim(a, a, threads_per_block=threads),
            input=f"a, b (10,) float32, threads_per_block={threads}",
            hint="a block has 1 to 1024 threads: check threads_per_block before computing the grid",
            errors=(ValueError,),
        )
    expect_refused(
        lambda: ex.vector_add_sim([1.0, 2.0], [3.0, 4.0]),
        input="a=[1.0, 2.0], b=[3.0, 4.0] (Python lists)",
        hint="check isinstance(a, np.ndarray) first, and raise TypeError with a message",
        errors=(TypeError,),
    )


# ----------------------------------------------------------------------------------------- saxpy_sim


@checks("saxpy_sim")
def saxpy_hand_checkable(ex):
    """alpha = 2, x = [1, 2, 3, 4, 5], y = [10, 20, 30, 40, 50] on a grid of 1 block of 2 threads: y = [12, 24, 36,
    48, 60] in place"""
    x = np.array([1, 2, 3, 4, 5], dtype=np.float32)
    y = np.array([10, 20, 30, 40, 50], dtype=np.float32)
    label = "alpha=2, x=[1, 2, 3, 4, 5], y=[10, 20, 30, 40, 50], blocks=1, threads_per_block=2"
    with recording(ex, "saxpy_kernel") as recorder:
        returned = ex.saxpy_sim(2.0, x, y, blocks=1, threads_per_block=2)
    expect_launched(recorder, input=label, grid=(1, 2))
    expect(
        returned is None,
        "saxpy_sim returned a value",
        input=label,
        expected="None (y is updated in place)",
        got=type(returned).__name__,
        hint="update y in place and return nothing",
    )
    expect_close(
        torch.from_numpy(y),
        torch.tensor([12.0, 24.0, 36.0, 48.0, 60.0], dtype=torch.float64),
        input=label,
        hint="two threads must cover five elements: loop while i < n, stepping by the grid's 2 threads",
    )


@checks("saxpy_sim", gate=True)
def saxpy_kernel_covers_each_element_exactly_once(ex):
    """launches saxpy_kernel directly on grids smaller and larger than n (1 x 32 over 257, 3 x 17 over 100, 2 x 32
    over 200, 4 x 64 over 50); y is a window of a buffer with 16 guard elements after it"""
    for n, blocks, threads in ((257, 1, 32), (100, 3, 17), (200, 2, 32), (50, 4, 64)):
        x = random_window((n,), (16,), device="cpu").numpy()
        buffer, window = guarded((n,), (16,), device="cpu")
        window.copy_(torch.randn(n))
        y_before = window.double().clone()
        alpha = float(np.float32(torch.randn(()).item()))  # exactly representable in float32
        label = f"alpha={alpha:.4f}, n={n}, grid [{blocks}, {threads}], y a ({n},) window with 16 NaN guard elements"
        args = (np.float32(alpha), x, window.numpy(), n)
        simulate(ex.saxpy_kernel, blocks, threads, *args, input=label, hint=HINT_GUARD, outside="past n")
        expect_guard_untouched(buffer, (n,), input=label, hint="loop while i < n: never touch y[n] or beyond")
        expect_close(
            window,
            alpha * torch.from_numpy(x).double() + y_before,
            baseline=alpha * torch.from_numpy(x) + y_before.float(),
            input=label,
            hint=f"a grid-stride loop: start at cuda.grid(1); {HINT_STRIDE}; an element done twice gets 2 alpha x",
        )


@checks("saxpy_sim")
def saxpy_launches_the_grid_it_is_given(ex):
    """saxpy_sim(alpha, x, y, blocks, threads) for n = 1, 64, 300, 40 and grids 1 x 1, 2 x 32, 3 x 50, 1 x 1 and
    1 x 1024 (the largest block, and the smallest, are valid): the launch has exactly that grid and y is updated in
    place"""
    for n, blocks, threads in ((1, 1, 1), (64, 2, 32), (300, 3, 50), (300, 1, 1), (40, 1, 1024)):
        x, y = numpy_inputs((n,), (n,))
        y_before = torch.from_numpy(y.copy()).double()
        alpha = float(np.float32(torch.randn(()).item()))  # exactly representable in float32
        label = f"alpha={alpha:.4f}, x, y ({n},) float32, blocks={blocks}, threads_per_block={threads}"
        with recording(ex, "saxpy_kernel") as recorder:
            ex.saxpy_sim(alpha, x, y, blocks=blocks, threads_per_block=threads)
        expect_launched(recorder, input=label, grid=(blocks, threads))
        expect_close(
            torch.from_numpy(y),
            alpha * torch.from_numpy(x).double() + y_before,
            baseline=alpha * torch.from_numpy(x) + y_before.float(),
            input=label,
            hint=f"update y in place (the caller's array); {HINT_STRIDE}",
        )


@checks("saxpy_sim")
def saxpy_rejects_bad_input(ex):
    """x and y of different lengths, float64 arrays, a grid of 0 blocks, 0, -1 or 1025 threads per block raise
    ValueError/TypeError; Python lists raise TypeError"""
    x, y = numpy_inputs((10,), (12,))
    expect_refused(
        lambda: ex.saxpy_sim(1.5, x, y),
        input="x (10,), y (12,)",
        hint="check x.shape == y.shape: the kernel would read past the end of x",
        errors=(ValueError, TypeError),
    )
    expect_refused(
        lambda: ex.saxpy_sim(1.5, x.astype(np.float64), x.astype(np.float64)),
        input="x, y (10,) float64",
        hint="check the dtype (float32) before launching",
        errors=(ValueError, TypeError),
    )
    expect_refused(
        lambda: ex.saxpy_sim(1.5, [1.0, 2.0], [3.0, 4.0]),
        input="x=[1.0, 2.0], y=[3.0, 4.0] (Python lists)",
        hint="check isinstance(x, np.ndarray) first, and raise TypeError with a message",
        errors=(TypeError,),
    )
    (z,) = numpy_inputs((10,))
    expect_refused(
        lambda: ex.saxpy_sim(1.5, x, z, blocks=0),
        input="x, y (10,) float32, blocks=0",
        hint="a grid needs at least one block: refuse blocks < 1 with a message",
        errors=(ValueError, TypeError),
    )
    for threads in (0, -1, 1025):
        expect_refused(
            lambda threads=threads: ex.saxpy_sim(1.5, x, z, blocks=1, threads_per_block=threads),
            input=f"x, y (10,) float32, blocks=1, threads_per_block={threads}",
            hint="a CUDA block has 1 to 1024 threads: refuse threads_per_block outside [1, 1024] with a ValueError "
            "(the simulator runs a block of 0 threads as a silent no-op, and more than 1024 as if a GPU allowed it)",
            errors=(ValueError, TypeError),
        )


# ----------------------------------------------------------------------------------------- vector_add_cuda (GPU)


HINT_LAYOUTS = (
    "the kernel reads a[i] at ptr + i: TORCH_CHECK(t.is_contiguous(), ...) for every tensor (or index through its "
    "stride)"
)


def cuda_inputs(n: int):
    return torch.randn(n, device="cuda"), torch.randn(n, device="cuda")


@checks("vector_add_cuda", requires_cuda=True)
def cuda_hand_checkable(ex):
    """five elements: [1..5] + [10, 20, 30, 40, 50] on the GPU"""
    module = ex.load_vector_add()
    a = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0], device="cuda")
    b = torch.tensor([10.0, 20.0, 30.0, 40.0, 50.0], device="cuda")
    got = module.vector_add(a, b)
    torch.cuda.synchronize()
    expect_close(
        got.cpu(),
        torch.tensor([11.0, 22.0, 33.0, 44.0, 55.0], dtype=torch.float64),
        input="a=[1, 2, 3, 4, 5], b=[10, 20, 30, 40, 50]",
        hint="out[i] = a[i] + b[i] for every i < n",
    )


@checks("vector_add_cuda", requires_cuda=True)
def cuda_sizes_that_are_not_block_multiples(ex):
    """n = 0, 1, 255, 256, 257, 1000, 4097, 1000003 and 2^23 + 3 (more elements than the capped grid has threads, so
    the loop runs several times), against float64"""
    module = ex.load_vector_add()
    for n in (0, 1, 255, 256, 257, 1000, 4097, 1_000_003, 2**23 + 3):
        a, b = cuda_inputs(n)
        label = describe(a=a, b=b) + " on cuda"
        got = module.vector_add(a, b)
        torch.cuda.synchronize()
        expect_tensor(got, shape=(n,), dtype=torch.float32, device="cuda", input=label)
        expect_close(
            got.cpu(),
            a.double().cpu() + b.double().cpu(),
            baseline=(a + b).cpu(),
            input=label,
            hint="blocks = min(ceil(n / 256), 32 * SMs) with a grid-stride loop; return early for n == 0 (a grid of "
            "zero blocks is an invalid launch)",
        )


@checks("vector_add_cuda", requires_cuda=True, gate=True)
def cuda_grid_stride_into_guarded_windows(ex):
    """add_into on windows of NaN-filled buffers with 300 guard elements, on grids far smaller (1 x 32, 3 x 64,
    2 x 1024) and larger (64 x 256) than n = 1000 and 5000"""
    module = ex.load_vector_add()
    for n in (1000, 5000):
        for blocks, threads in ((1, 32), (3, 64), (2, 1024), (64, 256)):
            a = random_window((n,), (300,), device="cuda")
            b = random_window((n,), (300,), device="cuda")
            buffer, out = guarded((n,), (300,), device="cuda")
            label = f"n={n}, add_into(blocks={blocks}, threads={threads}), out a NaN-filled window, 300 guard elements"
            module.add_into(a, b, out, blocks, threads)
            torch.cuda.synchronize()
            expect_guard_untouched(buffer.cpu(), (n,), input=label, hint="loop while i < n, never i <= n")
            expect_close(
                out.cpu(),
                a.double().cpu() + b.double().cpu(),
                input=label,
                hint="a grid-stride loop: start = blockIdx.x * blockDim.x + threadIdx.x, stride = blockDim.x * "
                "gridDim.x, for any grid",
            )


@checks("vector_add_cuda", requires_cuda=True, requires_gpu_memory_gib=40)
def cuda_more_than_2_31_elements(ex):
    """n = 2^31 + 4099 (8 GiB a tensor): add_into with one thread per element (ceil(n / 256) blocks, so
    blockIdx.x * blockDim.x passes 2^31) into a NaN-filled out, and vector_add; the first elements, those around index
    2^31 and the last, against float64 (the lesson's 64-bit indices; needs a GPU with 40 GiB)"""
    module = ex.load_vector_add()
    n = 2**31 + 4099
    a = torch.empty(n, device="cuda").normal_()
    b = torch.empty(n, device="cuda").normal_()
    windows = [(0, 4096), (2**31 - 4096, 2**31 + 4096), (n - 4096, n)]
    wanted = [(a[lo:hi].double() + b[lo:hi].double()).cpu() for lo, hi in windows]
    baselines = [(a[lo:hi] + b[lo:hi]).cpu() for lo, hi in windows]
    blocks = -(-n // 256)

    def compare(got: torch.Tensor, name: str) -> None:
        for (lo, hi), want, baseline in zip(windows, wanted, baselines, strict=True):
            expect_close(
                got[lo:hi].cpu(),
                want,
                baseline=baseline,
                input=f"{name}, a and b ({n},) = 2^31 + 4099 float32, elements [{lo}, {hi})",
                hint="64-bit indices: int64_t start = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x (an "
                "int index wraps to a negative one past 2^31 - 1, and the element it should write stays NaN)",
            )

    out = torch.full((n,), float("nan"), device="cuda")
    module.add_into(a, b, out, blocks, 256)
    torch.cuda.synchronize()
    compare(out, f"add_into(blocks={blocks}, threads=256) into a NaN-filled out")
    del out
    got = module.vector_add(a, b)
    torch.cuda.synchronize()
    compare(got, "vector_add")
    del a, b, got
    torch.cuda.empty_cache()


@checks("vector_add_cuda", requires_cuda=True)
def cuda_refuses_bad_input(ex):
    """float64, non-contiguous or mismatched tensors, 0 blocks, 0 or 2048 threads, and CPU tensors raise
    RuntimeError (TORCH_CHECK, or the launch check) instead of computing garbage"""
    module = ex.load_vector_add()
    a, b = cuda_inputs(1000)
    out = torch.empty_like(a)
    cases = [
        (lambda: module.vector_add(a.double(), b.double()), "a, b float64", "TORCH_CHECK the dtype is float32"),
        (
            lambda: module.vector_add(torch.randn(2000, device="cuda")[::2], b),
            "a = a (2000,) tensor [::2]: 1000 elements with stride 2",
            "the kernel reads a[i] at ptr + i: TORCH_CHECK(a.is_contiguous(), ...)",
        ),
        (lambda: module.vector_add(a, b[:999]), "a (1000,), b (999,)", "TORCH_CHECK that the shapes match"),
        (
            lambda: module.add_into(a, b, out, 0, 256),
            "add_into(blocks=0, threads=256)",
            "a grid needs at least one block: TORCH_CHECK blocks >= 1",
        ),
        (
            lambda: module.add_into(a, b, out, 4, 0),
            "add_into(blocks=4, threads=0)",
            "TORCH_CHECK 1 <= threads <= 1024",
        ),
        (
            lambda: module.add_into(a, b, out, 4, 2048),
            "add_into(blocks=4, threads=2048): more threads per block than the hardware allows",
            "check the launch: C10_CUDA_KERNEL_LAUNCH_CHECK() after <<<...>>> (or TORCH_CHECK threads <= 1024)",
        ),
        (
            lambda: module.vector_add(a.cpu(), b.cpu()),
            "a, b (1000,) on the CPU",
            "TORCH_CHECK(a.is_cuda() && b.is_cuda(), ...): a kernel cannot read host memory",
        ),
    ]
    for call, label, hint in cases:
        expect_refused(call, input=label, hint=hint, errors=(RuntimeError,))
        torch.cuda.synchronize()


def benchmark(ex):
    """vector_add (capped grid-stride grid) and one thread per element (add_into) vs torch.add vs a copy, 2^28 fp32."""
    module = ex.load_vector_add()
    n = 2**28
    a, b = cuda_inputs(n)
    out = torch.empty_like(a)
    moved = 3 * n * a.element_size()
    shape = "n=2^28 float32"
    return [
        bandwidth_row("vector_add (grid-stride, <= 32 blocks/SM)", shape, lambda: module.vector_add(a, b), moved),
        bandwidth_row(
            "add_into (one thread per element)", shape, lambda: module.add_into(a, b, out, -(-n // 256), 256), moved
        ),
        bandwidth_row("torch.add", shape, lambda: a + b, moved),
        copy_row(2**30),
    ]


@checks("vector_add_cuda", requires_cuda=True)
def cuda_operands_in_their_own_layouts(ex):
    """vector_add(a, b) with a every third element of a buffer (a column of a fused tensor) and b every other one;
    add_into(a, b, out) with a, b and out each in a strided layout of its own (out NaN-filled): each is refused
    (RuntimeError from TORCH_CHECK) or computed correctly, never read or written as if contiguous"""
    module = ex.load_vector_add()
    n = 1000
    a, b = cuda_inputs(n)
    la, lb = distinct_layouts(a, b)
    expect_own_layouts(la, lb)
    label = "vector_add: " + describe_layouts(a=la, b=lb)

    def check_sum(got):
        torch.cuda.synchronize()
        expect_tensor(got, shape=(n,), dtype=torch.float32, device="cuda", input=label)
        expect_close(got.cpu(), a.double().cpu() + b.double().cpu(), input=label, hint=HINT_LAYOUTS)

    expect_refused_or_correct(
        lambda: module.vector_add(la, lb), check_sum, input=label, hint=HINT_LAYOUTS, errors=TORCH_CHECK_ERRORS
    )
    torch.cuda.synchronize()
    la, lb, lout = distinct_layouts(a, b, torch.full((n,), float("nan"), device="cuda"))
    expect_own_layouts(la, lb, lout)
    out_label = "add_into(blocks=4, threads=256): " + describe_layouts(a=la, b=lb, out=lout) + ", out NaN-filled"

    def check_out(_):
        torch.cuda.synchronize()
        expect_close(lout.cpu(), a.double().cpu() + b.double().cpu(), input=out_label, hint=HINT_LAYOUTS)

    expect_refused_or_correct(
        lambda: module.add_into(la, lb, lout, 4, 256), check_out, input=out_label, hint=HINT_LAYOUTS,
        errors=TORCH_CHECK_ERRORS,
    )  # fmt: skip
    torch.cuda.synchronize()
