"""Checks for p04.shared_memory. References: float64 `torch.matmul`, the closed form gcd(stride, 32) and a replay of
shared memory's arbitration (one word per bank per wavefront), hand-checkable cases.

The simulator exercise is checked through its launcher and by launching the learner's `@cuda.jit` kernel directly
on NaN-filled output windows (a skipped element stays NaN; an index past an array raises IndexError in the
simulator); a recorder in place of the kernel proves that the kernel computed the result, with which grid; arrays
that count their own reads prove that the kernel goes through shared tiles (each element of A read once per block
column of C, not once per output). Every launch in the simulator is strict (`llm_algo.cuda.races`): a missing barrier
(a shared-memory race) or a barrier only some threads reach fails it; a check runs the kernel with TILE = 8 and
replays each warp's shared loads and stores as bank wavefronts (each must be one).

The CUDA C++ exercise's checks need a GPU (`requires_cuda=True`): on a CPU they read *needs a GPU*, never passed.
They synchronise before reading results, compare with TF32 off, and hand the `*_out` launchers inputs and outputs that
are windows of NaN-filled buffers (rows after the window), so a stray read brings NaN in and a stray store lands in
memory the check owns."""

from __future__ import annotations

import math
import random

import numpy as np
import torch

from llm_algo.bench import bandwidth_row, flops_row
from llm_algo.check import (
    Checks,
    describe,
    expect,
    expect_close,
    expect_refused,
    expect_tensor,
    replacing,
)
from llm_algo.check.restrictions import MATMUL
from llm_algo.cuda.races import tracing_shared_memory
from llm_algo.cuda.sim_checks import expect_no_bank_conflicts, quick_switching, recording, simulate
from llm_algo.cuda.sim_matmul import (
    as_result,
    baseline,
    expect_cuda_gemm_in_own_layouts,
    expect_edges_and_empty,
    expect_grid,
    expect_tile,
    operands,
    reference,
    true_fp32,
)
from llm_algo.references.kernels import expect_guard_untouched, guarded

checks = Checks("p04.shared_memory")
checks.restrict(
    "tiled_matmul_sim",
    forbid=list(MATMUL),
    instead="multiply in your @cuda.jit kernel (NumPy and torch are the checks' reference)",
)
checks.restrict(
    "sgemm_cuda",
    forbid=list(MATMUL),
    instead="multiply in your __global__ kernels (torch.matmul is the checks' reference)",
)

TILE_SIM = 4  # the notebook's TILE; the checks read it from the namespace and refuse to run with another one
HINT_BARRIERS = (
    "cuda.syncthreads() after loading the tiles (before anyone reads them) and after the multiply-adds (before the "
    "next tile overwrites them)"
)
HINT_EDGES = "load 0.0 where row >= M or k >= K (A) and k >= K or col >= N (B); store only if row < M and col < N"


# ----------------------------------------------------------------------------------------- shared helpers


class CountingArray(np.ndarray):
    """A float32 array that counts the element reads made through it and through its views (`A[i, k]`, `A[i][k]`):
    every indexing that returns a scalar. The count lives on the class (`counting` makes one class per array), because
    the simulator re-creates views of the arrays it is given."""

    counter: list[int] = [0]

    def __getitem__(self, key):
        value = np.ndarray.__getitem__(self, key)
        if not isinstance(value, np.ndarray):
            type(self).counter[0] += 1
        return value

    @property
    def reads(self) -> int:
        return type(self).counter[0]


def counting(array: np.ndarray) -> CountingArray:
    cls = type("CountingArray", (CountingArray,), {"counter": [0]})
    return array.view(cls)


# ----------------------------------------------------------------------------------------- tiled_matmul_sim


@checks("tiled_matmul_sim")
def sim_hand_checkable(ex):
    """[[1, 2], [3, 4]] @ [[5, 6], [7, 8]] = [[19, 22], [43, 50]]: one block, most of its threads outside C"""
    expect_tile(ex, TILE_SIM)
    A = np.array([[1, 2], [3, 4]], dtype=np.float32)
    B = np.array([[5, 6], [7, 8]], dtype=np.float32)
    label = "A=[[1, 2], [3, 4]], B=[[5, 6], [7, 8]]"
    with recording(ex, "tiled_matmul_kernel") as recorder, quick_switching():
        got = ex.tiled_matmul_sim(A, B)
    expect_grid(recorder, (1, 1), TILE_SIM, kernel="tiled_matmul_kernel", input=label)
    expect_close(
        as_result(got, (2, 2), input=label),
        torch.tensor([[19.0, 22.0], [43.0, 50.0]], dtype=torch.float64),
        input=label,
        hint=HINT_EDGES,
    )


@checks("tiled_matmul_sim")
def sim_sizes_that_are_not_tile_multiples(ex):
    """(M, N, K) = (1, 1, 1), (4, 4, 4), (5, 3, 7), (3, 9, 2), (6, 5, 9) against float64, with the grid
    (ceil(N/4), ceil(M/4)); K = 0 gives zeros; M = 0 or N = 0 launches nothing"""
    expect_edges_and_empty(
        ex,
        function="tiled_matmul_sim",
        kernel="tiled_matmul_kernel",
        tile=TILE_SIM,
        shapes=[(1, 1, 1), (4, 4, 4), (5, 3, 7), (3, 9, 2), (6, 5, 9), (3, 2, 0)],
        hint=f"{HINT_EDGES}; loop over ceil(K / TILE) tiles (range(0, K, TILE))",
    )


@checks("tiled_matmul_sim", gate=True)
def sim_kernel_into_guarded_windows(ex):
    """launches tiled_matmul_kernel directly into C, a NaN-filled window with guard rows after it (the simulator
    raises IndexError for an index past A, B or C), with (M, N, K) = (7, 6, 5) and (5, 9, 10) on the exact grid, and
    (3, 3, 6) on a grid one block too large in x and y"""
    expect_tile(ex, TILE_SIM)
    for seed, (M, N, K, extra) in enumerate([(7, 6, 5, 0), (5, 9, 10, 0), (3, 3, 6, 1)]):
        A_full, B_full = operands(M + 3, N, K, 100 + seed)
        A, B = A_full[:M], B_full[:K]  # leading rows: contiguous, as the simulator requires
        buffer, C = guarded((M, N), (3, 0), device="cpu")
        grid = (math.ceil(N / TILE_SIM) + extra, math.ceil(M / TILE_SIM) + extra)
        label = (
            f"A ({M}, {K}), B ({K}, {N}), C a NaN-filled ({M}, {N}) window of a ({M + 3}, {N}) buffer (3 guard rows), "
            f"grid {grid}, block (4, 4)"
        )
        simulate(
            ex.tiled_matmul_kernel,
            grid,
            (TILE_SIM, TILE_SIM),
            A,
            B,
            C.numpy(),
            M,
            N,
            K,
            input=label,
            hint=HINT_EDGES,
            outside="outside A, B and C",
        )
        expect_guard_untouched(buffer, (M, N), input=label, hint="store only if row < M and col < N")
        expect_close(C, reference(A, B), baseline=baseline(A, B), input=label, hint=HINT_BARRIERS)


@checks("tiled_matmul_sim")
def sim_reads_each_element_once_per_block(ex):
    """counts the kernel's reads of A and B for (M, N, K) = (9, 10, 7) and (8, 8, 12): A is read once per block
    column (ceil(N/4) M K reads), B once per block row (ceil(M/4) K N), not once per output"""
    expect_tile(ex, TILE_SIM)
    for seed, (M, N, K) in enumerate([(9, 10, 7), (8, 8, 12)]):
        A0, B0 = operands(M, N, K, 200 + seed)
        A, B = counting(A0), counting(B0)
        C = np.full((M, N), np.nan, dtype=np.float32)
        grid = (math.ceil(N / TILE_SIM), math.ceil(M / TILE_SIM))
        label = f"A ({M}, {K}), B ({K}, {N}) arrays that count their reads, grid {grid}"
        simulate(
            ex.tiled_matmul_kernel,
            grid,
            (TILE_SIM, TILE_SIM),
            A,
            B,
            C,
            M,
            N,
            K,
            input=label,
            hint=HINT_EDGES,
            outside="outside A, B and C",
        )
        expect_close(torch.from_numpy(C), reference(A0, B0), baseline=baseline(A0, B0), input=label, hint=HINT_BARRIERS)
        tiled_a, tiled_b = grid[0] * M * K, grid[1] * K * N
        slack = TILE_SIM * TILE_SIM  # a few extra reads are harmless; TILE times as many are not
        expect(
            A.reads <= tiled_a + slack and B.reads <= tiled_b + slack,
            "the kernel reads A and B from global memory more often than a tiled kernel",
            input=label,
            expected=f"at most about {tiled_a} reads of A and {tiled_b} of B (each element once per block that needs "
            "it)",
            got=f"{A.reads} reads of A, {B.reads} of B (a naive kernel: {M * N * K} each)",
            hint="each thread loads ONE element of A and one of B per tile into the shared arrays; the multiply-adds "
            "read the shared tiles As[ty, j] and Bs[j, tx], never A and B",
        )


@checks("tiled_matmul_sim")
def sim_shared_accesses_conflict_free(ex):
    """with TILE = 8 (blocks of 64 threads: two warps of 4 rows x 8 columns) every warp-wide load and store of the
    shared tiles is one wavefront (section 6: As[ty, j] a broadcast, Bs[j, tx] consecutive words), replayed from the
    traced accesses for (M, N, K) = (8, 8, 16) and (13, 11, 9); the results against float64"""
    tile = 8
    with replacing(ex, "TILE", tile):
        for seed, (M, N, K) in enumerate([(8, 8, 16), (13, 11, 9)]):
            A, B = operands(M, N, K, 500 + seed)
            C = np.full((M, N), np.nan, dtype=np.float32)
            grid = (math.ceil(N / tile), math.ceil(M / tile))
            label = f"TILE = 8, A ({M}, {K}), B ({K}, {N}), grid {grid}, block (8, 8), every shared access traced"
            with tracing_shared_memory() as log:
                simulate(ex.tiled_matmul_kernel, grid, (tile, tile), A, B, C, M, N, K, input=label, hint=HINT_EDGES,
                         outside="outside A, B and C")  # fmt: skip
            expect_close(torch.from_numpy(C), reference(A, B), baseline=baseline(A, B), input=label,
                         hint=HINT_BARRIERS + " (the kernel must use TILE, not a literal 4)")  # fmt: skip
            expect_no_bank_conflicts(
                log,
                input=label,
                hint="thread (ty, tx) stores As[ty, tx] and Bs[ty, tx] (x, the fast index of a warp, along a row) "
                "and reads As[ty, j] and Bs[j, tx]; a tile stored transposed (As[tx, ty]) puts a warp's stores a "
                "whole row apart: the same banks (32-way at TILE = 32)",
            )


@checks("tiled_matmul_sim")
def sim_rejects_bad_input(ex):
    """mismatched inner dimensions, float64, 1-D arrays raise ValueError/TypeError; tensors and lists raise TypeError"""
    A, B = operands(3, 4, 5, 300)
    expect_refused(
        lambda: ex.tiled_matmul_sim(A, B[:4]),
        input="A (3, 5), B (4, 4)",
        hint="check A.shape[1] == B.shape[0] before launching",
        errors=(ValueError, TypeError),
    )
    expect_refused(
        lambda: ex.tiled_matmul_sim(A.astype(np.float64), B.astype(np.float64)),
        input="A, B float64",
        hint="check the dtype (float32): the shared tiles are float32",
        errors=(ValueError, TypeError),
    )
    expect_refused(
        lambda: ex.tiled_matmul_sim(A[0], B),
        input="A (5,) (1-D), B (5, 4)",
        hint="refuse arrays that are not 2-D",
        errors=(ValueError, TypeError),
    )
    expect_refused(
        lambda: ex.tiled_matmul_sim(torch.from_numpy(A), torch.from_numpy(B)),
        input="A, B torch tensors",
        hint="check isinstance(A, np.ndarray) and raise TypeError with a message",
        errors=(TypeError,),
    )
    expect_refused(
        lambda: ex.tiled_matmul_sim([[1.0, 2.0]], [[3.0], [4.0]]),
        input="A=[[1.0, 2.0]], B=[[3.0], [4.0]] (Python lists)",
        hint="check isinstance(A, np.ndarray) first and raise TypeError with a message",
        errors=(TypeError,),
    )


# ----------------------------------------------------------------------------------------- bank_conflicts


def replay_wavefronts(addresses) -> int:
    """The arbitration, replayed: in each wavefront every bank serves the word of its lowest pending lane, and every
    pending lane that wants that word is served; count the wavefronts until no lane is pending."""
    pending = {lane: a // 4 for lane, a in enumerate(addresses) if a is not None}
    wavefronts = 0
    while pending:
        served: dict[int, int] = {}
        for lane in sorted(pending):
            served.setdefault(pending[lane] % 32, pending[lane])
        pending = {lane: w for lane, w in pending.items() if served[w % 32] != w}
        wavefronts += 1
    return wavefronts


def wavefronts_of(ex, addresses, *, input: str) -> int:
    got = ex.shared_wavefronts(list(addresses))
    expect(
        isinstance(got, (int, np.integer)) and not isinstance(got, bool),
        "shared_wavefronts did not return an int",
        input=input,
        expected="an int",
        got=f"{type(got).__name__} {got!r}",
        hint="return the largest number of distinct words in one bank, as an int",
    )
    return int(got)


def expect_wavefronts(ex, addresses, expected: int, *, input: str, hint: str) -> None:
    got = wavefronts_of(ex, addresses, input=input)
    expect(got == expected, "wrong number of wavefronts", input=input, expected=str(expected), got=str(got), hint=hint)


HINT_WORDS = (
    "bank = (address // 4) % 32; count the DISTINCT words (address // 4) per bank (lanes reading the same word share "
    "one broadcast), and return the maximum over banks"
)


@checks("bank_conflicts")
def banks_hand_checkable(ex):
    """consecutive floats (1), one float for all lanes (broadcast: 1), stride 2 (2), a column of a [32][32] tile (32)
    and of a [32][33] tile (1), two words in one bank (2), no active lane (0)"""
    cases = [
        ([4 * lane for lane in range(32)], 1, "x[lane]: 32 consecutive floats"),
        ([64] * 32, 1, "x[16] for every lane: one word, broadcast"),
        ([8 * lane for lane in range(32)], 2, "x[2 * lane]: stride 2 words"),
        ([4 * 32 * lane for lane in range(32)], 32, "tile[lane][0] of float tile[32][32]"),
        ([4 * 33 * lane + 12 for lane in range(32)], 1, "tile[lane][3] of float tile[32][33]"),
        ([0, 128], 2, "two lanes: words 0 and 32 (both bank 0)"),
        ([0, 128, 0, 128, 4], 2, "five lanes: words 0, 32, 0, 32, 1"),
        ([None] * 32, 0, "32 inactive lanes"),
        ([], 0, "no lanes"),
    ]
    for addresses, expected, label in cases:
        expect_wavefronts(ex, addresses, expected, input=f"{label}: addresses {addresses[:6]}...", hint=HINT_WORDS)


@checks("bank_conflicts")
def banks_strided_accesses_match_the_closed_form(ex):
    """lane reads word base + s * lane for every stride s = 0..64 and bases 0, 5, 31: gcd(s, 32) wavefronts (1 for
    s = 0, a broadcast); with only the lanes of a half-warp or the even lanes active, against the replay"""
    for stride in range(65):
        for base in (0, 5, 31):
            addresses = [4 * (base + stride * lane) for lane in range(32)]
            expected = math.gcd(stride, 32) if stride else 1
            expect_wavefronts(
                ex,
                addresses,
                expected,
                input=f"32 lanes, lane reads word {base} + {stride} * lane",
                hint=f"{HINT_WORDS}; for a stride of s words that is gcd(s, 32)",
            )
    for stride in (1, 2, 8, 16, 32, 33):
        half = [4 * stride * lane if lane < 16 else None for lane in range(32)]
        expect_wavefronts(
            ex,
            half,
            replay_wavefronts(half),
            input=f"lanes 0..15 active, reading word {stride} * lane; lanes 16..31 None",
            hint="an inactive lane (None) requests nothing: skip it",
        )
        even = [4 * stride * lane if lane % 2 == 0 else None for lane in range(32)]
        expect_wavefronts(
            ex,
            even,
            replay_wavefronts(even),
            input=f"even lanes active, reading word {stride} * lane; odd lanes None",
            hint="an inactive lane (None) requests nothing: it is not address 0",
        )


@checks("bank_conflicts")
def banks_random_patterns_match_a_replay(ex):
    """400 random warps (1 to 32 lanes, some inactive, many repeated words, addresses up to 48 KiB) against a replay
    of the arbitration, one wavefront at a time; NumPy integer addresses are accepted"""
    rng = random.Random(13)
    for trial in range(400):
        lanes = rng.randint(1, 32)
        pool = [rng.randrange(0, 12288) for _ in range(rng.randint(1, 40))]  # words; repeats make broadcasts
        addresses = [None if rng.random() < 0.15 else 4 * rng.choice(pool) for _ in range(lanes)]
        if trial % 7 == 0:
            addresses = [None if a is None else np.int64(a) for a in addresses]
        expect_wavefronts(
            ex,
            addresses,
            replay_wavefronts(addresses),
            input=f"random warp #{trial}: {lanes} lanes, addresses {addresses}",
            hint=HINT_WORDS,
        )


@checks("bank_conflicts")
def banks_rejects_bad_input(ex):
    """33 lanes, a negative or misaligned address raise ValueError; a float, a string or a bool address TypeError"""
    cases = [
        ([4 * lane for lane in range(33)], "33 addresses (a warp has 32 lanes)", (ValueError,)),
        ([0, -4], "addresses [0, -4]", (ValueError,)),
        ([0, 6], "addresses [0, 6]: 6 is not 4-byte aligned", (ValueError,)),
        ([0, 4.0], "addresses [0, 4.0]: a float", (TypeError,)),
        ([0, "8"], "addresses [0, '8']: a string", (TypeError,)),
        ([True, 4], "addresses [True, 4]: a bool", (TypeError,)),
    ]
    for addresses, label, errors in cases:
        expect_refused(
            lambda addresses=addresses: ex.shared_wavefronts(addresses),
            input=label,
            hint="validate every lane: at most 32 lanes; None or an int (not a bool) >= 0 and a multiple of 4",
            errors=errors,
        )


# ----------------------------------------------------------------------------------------- sgemm_cuda (GPU)

FUNCTIONS = ("matmul_tiled", "sgemm")


def cuda_operands(M: int, N: int, K: int):
    return torch.randn(M, K, device="cuda"), torch.randn(K, N, device="cuda")


def cuda_reference(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    return A.double().cpu() @ B.double().cpu()


@checks("sgemm_cuda", requires_cuda=True)
def cuda_hand_checkable(ex):
    """[[1, 2], [3, 4]] @ [[5, 6], [7, 8]] = [[19, 22], [43, 50]] with matmul_tiled and sgemm"""
    module = ex.load_sgemm()
    A = torch.tensor([[1.0, 2.0], [3.0, 4.0]], device="cuda")
    B = torch.tensor([[5.0, 6.0], [7.0, 8.0]], device="cuda")
    for name in FUNCTIONS:
        got = getattr(module, name)(A, B)
        torch.cuda.synchronize()
        expect_close(
            got.cpu(),
            torch.tensor([[19.0, 22.0], [43.0, 50.0]], dtype=torch.float64),
            input=f"{name}: A=[[1, 2], [3, 4]], B=[[5, 6], [7, 8]]",
            hint="zero-fill the tiles outside the matrices and guard the store",
        )


@checks("sgemm_cuda", requires_cuda=True)
def cuda_sizes_that_are_not_tile_multiples(ex):
    """matmul_tiled and sgemm for (M, N, K) = (1, 1, 1), (33, 31, 65), (128, 128, 8), (129, 127, 9), (300, 200, 1000),
    (1000, 3, 17), (5, 700, 333), (512, 512, 512) and K = 0 against float64 (baseline: cuBLAS with TF32 off)"""
    module = ex.load_sgemm()
    shapes = [(1, 1, 1), (33, 31, 65), (128, 128, 8), (129, 127, 9), (300, 200, 1000), (1000, 3, 17), (5, 700, 333)]
    shapes += [(512, 512, 512), (7, 9, 0)]
    with true_fp32():
        for M, N, K in shapes:
            A, B = cuda_operands(M, N, K)
            for name in FUNCTIONS:
                label = f"{name}: " + describe(A=A, B=B) + " on cuda"
                got = getattr(module, name)(A, B)
                torch.cuda.synchronize()
                expect_tensor(got, shape=(M, N), dtype=torch.float32, device="cuda", input=label)
                expect_close(
                    got.cpu(),
                    cuda_reference(A, B),
                    baseline=(A @ B).cpu(),
                    input=label,
                    hint="zero-fill loads outside the matrices (row < M, k < K, col < N), both __syncthreads(), and in "
                    "sgemm the same strided rows trow + 16 i and columns tcol + 16 j for reading and storing",
                )


@checks("sgemm_cuda", requires_cuda=True, requires_gpu_memory_gib=13)
def cuda_c_with_more_than_2_31_elements(ex):
    """matmul_tiled_out and sgemm_out into a NaN-filled C of 50000 x 50000 (2.5e9 elements, past 2^31; 9.3 GiB) with
    K = 8: the first rows, the rows around element 2^31 (row 42949) and the last rows against float64 (the lesson's
    64-bit offsets; needs a GPU with 13 GiB)"""
    module = ex.load_sgemm()
    M = N = 50_000
    K = 8
    A, B = cuda_operands(M, N, K)
    out = torch.empty(M, N, device="cuda")
    rows = [(0, 4), (2**31 // N - 3, 2**31 // N + 4), (M - 4, M)]
    try:
        with true_fp32():
            for name in FUNCTIONS:
                out.fill_(float("nan"))
                getattr(module, f"{name}_out")(A, B, out)
                torch.cuda.synchronize()
                for lo, hi in rows:
                    expect_close(
                        out[lo:hi].cpu(),
                        cuda_reference(A[lo:hi], B),
                        baseline=(A[lo:hi] @ B).cpu(),
                        input=f"{name}_out: A ({M}, {K}), B ({K}, {N}), out a NaN-filled ({M}, {N}), rows [{lo}, {hi})",
                        hint="64-bit offsets: C[static_cast<int64_t>(row) * N + col] (row * N in int overflows past "
                        "2^31 elements: those rows stay NaN, the stores land elsewhere)",
                    )
    finally:
        del out
        torch.cuda.empty_cache()


@checks("sgemm_cuda", requires_cuda=True, gate=True)
def cuda_out_windows_of_nan_buffers(ex):
    """matmul_tiled_out and sgemm_out with A, B windows of NaN-filled buffers (a read past the window brings NaN in)
    and out a window of a NaN-filled buffer with rows after it (a stray store lands there), for (M, N, K) = (70, 45,
    37), (130, 257, 9), (256, 128, 100)"""
    module = ex.load_sgemm()
    for M, N, K in [(70, 45, 37), (130, 257, 9), (256, 128, 100)]:
        a_buffer, A = guarded((M, K), (40, 0), device="cuda")
        b_buffer, B = guarded((K, N), (40, 0), device="cuda")
        A.copy_(torch.randn(M, K))
        B.copy_(torch.randn(K, N))
        for name in FUNCTIONS:
            buffer, out = guarded((M, N), (40, 0), device="cuda")
            label = (
                f"{name}_out: A ({M}, {K}), B ({K}, {N}) with NaN rows after them, out a NaN-filled ({M}, {N}) "
                "window with 40 guard rows"
            )
            returned = getattr(module, f"{name}_out")(A, B, out)
            torch.cuda.synchronize()
            expect(
                isinstance(returned, torch.Tensor) and returned.data_ptr() == out.data_ptr(),
                f"{name}_out did not return out",
                input=label,
                expected="the tensor `out` it wrote into",
                got=type(returned).__name__,
                hint="end the launcher with `return out;`",
            )
            expect_guard_untouched(
                buffer.cpu(), (M, N), input=label, hint="store only if gm < M && gn < N (row and column)"
            )
            with true_fp32():
                cublas = (A @ B).cpu()
            expect_close(
                out.cpu(),
                cuda_reference(A, B),
                baseline=cublas,
                input=label,
                hint="a NaN means a read past A or B: load 0.0f unless gm < M && gk < K (A) and gk < K && gn < N (B)",
            )


@checks("sgemm_cuda", requires_cuda=True)
def cuda_refuses_bad_input(ex):
    """float64, transposed (non-contiguous), mismatched, 1-D and CPU operands, and an out of the wrong shape raise
    RuntimeError (TORCH_CHECK)"""
    module = ex.load_sgemm()
    A, B = cuda_operands(64, 48, 32)
    for name in FUNCTIONS:
        fn, fn_out = getattr(module, name), getattr(module, f"{name}_out")
        cases = [
            (lambda fn=fn: fn(A.double(), B.double()), "A, B float64", "TORCH_CHECK the dtype is float32"),
            (
                lambda fn=fn: fn(torch.randn(32, 64, device="cuda").t(), B),
                "A = a (32, 64) tensor transposed: (64, 32), not contiguous",
                "the kernel reads A[row * K + k]: TORCH_CHECK(A.is_contiguous(), ...)",
            ),
            (lambda fn=fn: fn(A, B[:31]), "A (64, 32), B (31, 48)", "TORCH_CHECK(A.size(1) == B.size(0), ...)"),
            (lambda fn=fn: fn(A[0], B), "A (32,) 1-D", "TORCH_CHECK that A and B are 2-D"),
            (lambda fn=fn: fn(A.cpu(), B.cpu()), "A, B on the CPU", "TORCH_CHECK(A.is_cuda() && B.is_cuda(), ...)"),
            (
                lambda fn_out=fn_out: fn_out(A, B, torch.empty(64, 47, device="cuda")),
                "out (64, 47) for A (64, 32) @ B (32, 48)",
                "TORCH_CHECK that out is (M, N)",
            ),
        ]
        for call, label, hint in cases:
            expect_refused(call, input=f"{name}: {label}", hint=hint, errors=(RuntimeError,))
            torch.cuda.synchronize()


HINT_LAYOUTS = (
    "the kernel reads A[row * K + k] and B[k * N + col]: TORCH_CHECK(t.is_contiguous(), ...) for A, B and out (or "
    "index through the strides)"
)


@checks("sgemm_cuda", requires_cuda=True)
def cuda_operands_in_their_own_layouts(ex):
    """(M, N, K) = (70, 45, 37): matmul_tiled and sgemm with A transposed (a weight kept as (out, in)) and B a window of
    a padded buffer; matmul_tiled_out and sgemm_out with A a slice of a fused tensor, B padded rows and a NaN-filled out
    transposed: refused (RuntimeError from TORCH_CHECK) or multiplied correctly, never read or written as if
    contiguous"""
    module = ex.load_sgemm()
    A, B = cuda_operands(70, 45, 37)
    for name in FUNCTIONS:
        expect_cuda_gemm_in_own_layouts(
            getattr(module, name), getattr(module, f"{name}_out"), A, B, name=name, hint=HINT_LAYOUTS
        )


TRANSPOSE_CUDA = r"""
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

// out (C, R) = in (R, C) transposed through a 32 x PITCH shared tile; blocks of 32 x 8 threads.
template <int PITCH>
__global__ void transpose_kernel(const float* __restrict__ in, float* __restrict__ out, int R, int C) {
    __shared__ float tile[32][PITCH];
    const int x = blockIdx.x * 32 + threadIdx.x;
    for (int dy = threadIdx.y; dy < 32; dy += blockDim.y) {
        const int y = blockIdx.y * 32 + dy;
        if (x < C && y < R) tile[dy][threadIdx.x] = in[static_cast<int64_t>(y) * C + x];
    }
    __syncthreads();
    const int ox = blockIdx.y * 32 + threadIdx.x;  // a column of `in` is a row of `out`
    for (int dy = threadIdx.y; dy < 32; dy += blockDim.y) {
        const int oy = blockIdx.x * 32 + dy;
        if (ox < R && oy < C) out[static_cast<int64_t>(oy) * R + ox] = tile[threadIdx.x][dy];  // a column of the tile
    }
}

torch::Tensor transpose_shared(torch::Tensor in, int64_t pitch) {
    TORCH_CHECK(in.is_cuda() && in.scalar_type() == torch::kFloat32 && in.dim() == 2 && in.is_contiguous(),
                "transpose_shared: a contiguous 2-D float32 CUDA tensor");
    TORCH_CHECK(pitch == 32 || pitch == 33, "transpose_shared: pitch 32 or 33");
    const int R = static_cast<int>(in.size(0)), C = static_cast<int>(in.size(1));
    auto out = torch::empty({C, R}, in.options());
    const dim3 blocks((C + 31) / 32, (R + 31) / 32), threads(32, 8);
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    if (pitch == 32) transpose_kernel<32><<<blocks, threads, 0, stream>>>(in.data_ptr<float>(), out.data_ptr<float>(), R, C);
    else transpose_kernel<33><<<blocks, threads, 0, stream>>>(in.data_ptr<float>(), out.data_ptr<float>(), R, C);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""


def benchmark(ex):
    """matmul_tiled and sgemm vs cuBLAS fp32 with TF32 off at 4096^3; a shared-memory transpose of a 8192 x 8192
    fp32 matrix through a [32][32] tile (32-way conflicted column reads) and a [32][33] tile."""
    from llm_algo.cuda.inline import compile_cuda

    module = ex.load_sgemm()
    size = 4096
    a, b = torch.randn(size, size, device="cuda"), torch.randn(size, size, device="cuda")
    flops, shape = 2 * size**3, f"{size}^3 fp32"
    with true_fp32():
        rows = [
            flops_row("matmul_tiled (TILE=32)", shape, lambda: module.matmul_tiled(a, b), flops),
            flops_row("sgemm (128x128 block, 8x8 per thread)", shape, lambda: module.sgemm(a, b), flops),
            flops_row("torch.matmul (cuBLAS, TF32 off)", shape, lambda: torch.matmul(a, b), flops),
        ]
    transpose = compile_cuda(TRANSPOSE_CUDA, ["transpose_shared"], name="p04_transpose_bench")
    x = torch.randn(8192, 8192, device="cuda")
    moved = 2 * x.numel() * x.element_size()
    for pitch in (32, 33):
        rows.append(
            bandwidth_row(
                f"transpose via tile[32][{pitch}]",
                "8192^2 fp32",
                lambda p=pitch: transpose.transpose_shared(x, p),
                moved,
            )
        )
    return rows
