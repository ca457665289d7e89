"""Checks for p04.tensor_cores. References: float64 products (`@` on float64 tensors), an independently written
rounding model of the K steps (all tile products at once by an einsum over K/16 blocks, then one rounding per step),
the worst-case bound of recursive summation, an encoding of the PTX ISA's m16n8k16 fragment tables written register
pair by register pair, and hand-checkable swamping and overflow inputs whose exact sums are representable.

The model exercises run on every machine. The CUDA C++ exercise's checks need a GPU of compute capability 8.0 or
newer (bf16 fragments): elsewhere they read *needs a GPU*, never passed. They compare the float32 output with float64
(the allowance widened by the error of a pessimistic model of tensor-core fp32 accumulation, a truncation every 8
steps of K, computed on the CPU) and with the K-derived bound of fp32 accumulation, and hand the `_out` launcher inputs
that are the leading rows of NaN-filled buffers and an output window with guard rows after it."""

from __future__ import annotations

import torch

from llm_algo.bench import flops_row
from llm_algo.check import (
    Checks,
    describe,
    expect,
    expect_close,
    expect_refused,
    expect_refused_or_correct,
    expect_tensor,
)
from llm_algo.check.restrictions import MATMUL
from llm_algo.cuda.inline import TORCH_CHECK_ERRORS
from llm_algo.references.kernels import expect_guard_untouched, guarded
from llm_algo.references.layouts import describe_layouts, distinct_layouts, expect_own_layouts

checks = Checks("p04.tensor_cores")
checks.restrict(
    "mma_tiled",
    forbid=list(MATMUL),
    instead="form the tile products with a broadcast multiply and a sum over the 16-long K axis (matmul is the "
    "checks' reference)",
)
checks.restrict(
    "mma_fragments",
    forbid=list(MATMUL),
    instead="reassemble A, B, C from the fragments and multiply with a broadcast and a sum (matmul is the checks' "
    "reference)",
)
checks.restrict(
    "wmma_gemm_cuda",
    forbid=list(MATMUL),
    instead="multiply in your __global__ kernel with wmma::mma_sync (torch.matmul is the checks' reference)",
)

WARP = 32
ACC_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
INPUT_DTYPES = (torch.float16, torch.bfloat16)
SIGNIFICAND_BITS = {torch.float16: 11, torch.bfloat16: 8, torch.float32: 24}


def name_of(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def ulp(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The spacing of `dtype` at each of `values` (float64): 2^(e - p) for |v| = m 2^e, m in [0.5, 1); subnormal
    spacing below the smallest normal."""
    magnitude = values.double().abs().clamp_min(torch.finfo(dtype).tiny)
    _, exponent = torch.frexp(magnitude)
    return torch.ldexp(torch.ones_like(magnitude), exponent - SIGNIFICAND_BITS[dtype])


def model_tiled(A: torch.Tensor, B: torch.Tensor, acc_dtype: torch.dtype) -> torch.Tensor:
    """The checks' model of the accumulation: the K/16 tile products at once (an einsum over blocks of 16 in float64),
    then K/16 roundings of the running sum to acc_dtype."""
    M, K = A.shape
    N = B.shape[1]
    steps = K // 16
    blocks_a = A.double().reshape(M, steps, 16)  # (M, T, 16)
    blocks_b = B.double().reshape(steps, 16, N)  # (T, 16, N)
    partials = torch.einsum("mtk,tkn->tmn", blocks_a, blocks_b)  # (T, M, N)
    running = torch.zeros(M, N, dtype=acc_dtype)
    for partial in partials:
        running = (running.double() + partial).to(acc_dtype)
    return running


def expect_matches_model(got, model: torch.Tensor, acc_dtype: torch.dtype, *, input: str, hint: str) -> None:
    """Equal to the model, or within one unit in the last place of acc_dtype (a tie broken differently, a cast
    through float32); inf and NaN where the model has them."""
    expect_tensor(got, shape=tuple(model.shape), dtype=acc_dtype, input=input)
    g, m = got.double(), model.double()
    same = (g == m) | (g.isnan() & m.isnan())
    close = (g - m).abs() <= ulp(m, acc_dtype)
    bad = ~(same | close)
    if bool(bad.any()):
        index = tuple(int(i) for i in bad.nonzero()[0])
        expect(
            False,
            f"{int(bad.sum())} of {bad.numel()} elements differ from one rounding to {name_of(acc_dtype)} per K step",
            input=input,
            expected=f"{float(m[index])!r} at {list(index)} (± 1 ulp = {float(ulp(m[index], acc_dtype)):.3g})",
            got=repr(float(g[index])),
            hint=hint,
        )


def expect_summation_bound(
    got: torch.Tensor, A: torch.Tensor, B: torch.Tensor, steps: int, u: float, *, input: str, hint: str
) -> None:
    """|got - A B| <= gamma_steps * (|A| |B|) elementwise, gamma_n = n u / (1 - n u): what any accumulation with
    `steps` roundings of unit roundoff u must satisfy (Higham, ch. 4)."""
    exact = A.double().cpu() @ B.double().cpu()
    magnitude = A.double().abs().cpu() @ B.double().abs().cpu()
    gamma = steps * u / (1 - steps * u)
    error = (got.double().cpu() - exact).abs().nan_to_num(nan=float("inf"))
    excess = error - gamma * magnitude
    if bool((excess > 0).any()):
        index = tuple(int(i) for i in torch.unravel_index(excess.argmax(), excess.shape))
        expect(
            False,
            "error above the bound of accumulating with this many roundings",
            input=input,
            expected=f"|error| <= {gamma:.3g} * (|A| |B|) = {float(gamma * magnitude[index]):.3g} at {list(index)}",
            got=f"{float(got.double().cpu()[index])!r}, off by {float(error[index]):.3g} from {float(exact[index])!r}",
            hint=hint,
        )


# ----------------------------------------------------------------------------------------- mma_tiled

HINT_TILED = (
    "for each k0 in range(0, K, 16): tile = (a[:, :, None] * b[None]).sum(1) in float64, "
    "acc = (acc.double() + tile).to(acc_dtype): one rounding per K step, in acc_dtype"
)


def swamping_inputs(dtype: torch.dtype, K: int = 4096) -> tuple[torch.Tensor, torch.Tensor]:
    """A: each row 2048 then K - 1 times 1/16; B: ones. Every dot product is 2048 + (K - 1) / 16 exactly."""
    A = torch.full((16, K), 0.0625)
    A[:, 0] = 2048.0
    return A.to(dtype), torch.ones(K, 16, dtype=dtype)


@checks("mma_tiled")
def tiled_hand_checkable(ex):
    """swamping: rows [2048, 1/16, 1/16, ...] (K = 1024) times ones give 2111.9375 in fp32 but 2048 in fp16 and bf16
    (2048 + 1 rounds back to 2048); overflow: 1024 products 8 x 8 give 65536 in fp32 and bf16, inf in fp16"""
    for in_dtype in INPUT_DTYPES:
        A, B = swamping_inputs(in_dtype, K=1024)
        for acc_dtype, value in ((torch.float16, 2048.0), (torch.bfloat16, 2048.0), (torch.float32, 2111.9375)):
            label = f"A (16, 1024) {name_of(in_dtype)} rows [2048, 1/16, ...], B ones, acc_dtype={name_of(acc_dtype)}"
            got = ex.mma_tiled(A.clone(), B.clone(), acc_dtype)
            expect_matches_model(
                got,
                torch.full((16, 16), value, dtype=acc_dtype),
                acc_dtype,
                input=label,
                hint=HINT_TILED + " (round after every step: that is what loses the 1s)",
            )
        A = torch.full((16, 1024), 8.0, dtype=in_dtype)
        B = torch.full((1024, 16), 8.0, dtype=in_dtype)
        for acc_dtype, value in ((torch.float16, float("inf")), (torch.bfloat16, 65536.0), (torch.float32, 65536.0)):
            label = f"A, B all 8.0 {name_of(in_dtype)}, K = 1024 (sum 65536 > 65504), acc_dtype={name_of(acc_dtype)}"
            got = ex.mma_tiled(A.clone(), B.clone(), acc_dtype)
            expect_matches_model(
                got,
                torch.full((16, 16), value, dtype=acc_dtype),
                acc_dtype,
                input=label,
                hint=HINT_TILED + " (in float16 the running sum overflows at the last step)",
            )


@checks("mma_tiled")
def tiled_random_against_model_and_bound(ex):
    """random N(0, 1) inputs, (M, N, K) = (16, 16, 16), (32, 48, 64), (48, 16, 272), (16, 32, 1024), fp16 and bf16
    inputs, each accumulator: equal to the checks' rounding model (± 1 ulp) and within the recursive-summation bound
    K/16 * u * (|A| |B|)"""
    g = torch.Generator().manual_seed(3)
    for M, N, K in ((16, 16, 16), (32, 48, 64), (48, 16, 272), (16, 32, 1024)):
        for in_dtype in INPUT_DTYPES:
            A = torch.randn(M, K, generator=g).to(in_dtype)
            B = torch.randn(K, N, generator=g).to(in_dtype)
            for acc_dtype in ACC_DTYPES:
                label = describe(A=A, B=B) + f", acc_dtype={name_of(acc_dtype)}"
                A_before, B_before = A.clone(), B.clone()
                got = ex.mma_tiled(A, B, acc_dtype)
                expect(
                    torch.equal(A, A_before) and torch.equal(B, B_before),
                    "the inputs were modified",
                    input=label,
                    expected="A and B unchanged",
                    got="A or B changed in place",
                    hint="work on copies (.double() makes one)",
                )
                expect_matches_model(got, model_tiled(A, B, acc_dtype), acc_dtype, input=label, hint=HINT_TILED)
                u = 2.0 ** -SIGNIFICAND_BITS[acc_dtype]
                expect_summation_bound(got, A, B, K // 16, u, input=label, hint=HINT_TILED)


@checks("mma_tiled")
def tiled_long_positive_sums(ex):
    """positive U(0, 1) inputs (16, 2048) @ (2048, 16), where fp16 and bf16 accumulation drift far from the truth:
    the result must be the rounding model's (± 1 ulp) for each accumulator, and fp32's within 1e-5 relative"""
    g = torch.Generator().manual_seed(4)
    for in_dtype in INPUT_DTYPES:
        A = torch.rand(16, 2048, generator=g).to(in_dtype)
        B = torch.rand(2048, 16, generator=g).to(in_dtype)
        exact = A.double() @ B.double()
        for acc_dtype in ACC_DTYPES:
            label = describe(A=A, B=B) + f" in U(0, 1), acc_dtype={name_of(acc_dtype)}"
            got = ex.mma_tiled(A, B, acc_dtype)
            expect_matches_model(got, model_tiled(A, B, acc_dtype), acc_dtype, input=label, hint=HINT_TILED)
            if acc_dtype == torch.float32:
                expect_close(got, exact, input=label, hint="accumulate in float32 across K steps")


@checks("mma_tiled")
def tiled_rejects_bad_input(ex):
    """float32 inputs, mixed fp16/bf16, a non-tensor (TypeError); K = 24, M = 8, 1-D, mismatched inner dimensions,
    acc_dtype float64 or a string (ValueError)"""
    a16, b16 = torch.randn(16, 32).half(), torch.randn(32, 16).half()
    cases = [
        (lambda: ex.mma_tiled(a16.float(), b16.float()), "A, B float32", (TypeError,)),
        (lambda: ex.mma_tiled(a16, b16.bfloat16()), "A float16, B bfloat16", (TypeError,)),
        (lambda: ex.mma_tiled(a16.tolist(), b16), "A a list", (TypeError,)),
        (lambda: ex.mma_tiled(torch.randn(16, 24).half(), torch.randn(24, 16).half()), "K = 24", (ValueError,)),
        (lambda: ex.mma_tiled(torch.randn(8, 32).half(), b16), "M = 8", (ValueError,)),
        (lambda: ex.mma_tiled(a16[0], b16), "A 1-D (32,)", (ValueError,)),
        (lambda: ex.mma_tiled(a16, torch.randn(48, 16).half()), "A (16, 32), B (48, 16)", (ValueError,)),
        (lambda: ex.mma_tiled(a16, b16, torch.float64), "acc_dtype=float64", (ValueError,)),
        (lambda: ex.mma_tiled(a16, b16, "float32"), "acc_dtype='float32' (a string)", (ValueError,)),
    ]
    for call, label, errors in cases:
        expect_refused(
            call,
            input=label,
            hint="check dtypes (TypeError), then acc_dtype, 2-D shapes, inner dimensions and multiples of 16 "
            "(ValueError) before computing",
            errors=errors,
        )


# ----------------------------------------------------------------------------------------- mma_fragments


def ptx_table(operand: str) -> dict[tuple[int, int], tuple[int, int]]:
    """(lane, register) -> (row, col) for mma.m16n8k16 with f16/bf16 inputs and an f32 accumulator, written as the PTX
    ISA's figures draw it: each pair of registers (an .f16x2, or two .f32) covers two neighbouring columns (A, C) or
    two neighbouring k (B); the pairs sit on the quadrants in the order listed."""
    pair_offsets = {
        "a": [(0, 0), (8, 0), (0, 8), (8, 8)],  # a0a1 top-left, a2a3 bottom-left, a4a5 top-right, a6a7 bottom-right
        "b": [(0, 0), (8, 0)],  # b0b1 k = 2t, 2t+1; b2b3 k + 8
        "c": [(0, 0), (8, 0)],  # c0c1 row g; c2c3 row g + 8
    }[operand]
    table = {}
    for lane in range(WARP):
        group, thread = divmod(lane, 4)
        for pair, (down, right) in enumerate(pair_offsets):
            for half in range(2):
                if operand == "b":
                    table[lane, 2 * pair + half] = (2 * thread + half + down, group)
                else:
                    table[lane, 2 * pair + half] = (group + down, 2 * thread + half + right)
    return table


SHAPES = {"a": (16, 16), "b": (16, 8), "c": (16, 8)}
REGS = {"a": 8, "b": 4, "c": 4}


def to_fragments(matrix: torch.Tensor, operand: str) -> torch.Tensor:
    regs = torch.empty(WARP, REGS[operand], dtype=matrix.dtype)
    for (lane, i), (row, col) in ptx_table(operand).items():
        regs[lane, i] = matrix[row, col]
    return regs


def from_fragments(regs: torch.Tensor, operand: str) -> torch.Tensor:
    matrix = torch.full(SHAPES[operand], float("nan"), dtype=regs.dtype)
    for (lane, i), (row, col) in ptx_table(operand).items():
        matrix[row, col] = regs[lane, i]
    return matrix


HINT_COORDS = (
    "g = lane >> 2, t = lane % 4; A: row g (+8 for a2 a3 a6 a7), col 2t + (i & 1) (+8 for a4..a7); "
    "B: row 2t + (i & 1) (+8 for b2 b3), col g; C/D: row g (+8 for c2 c3), col 2t + (i & 1)"
)


def coords_of(ex, operand: str, lane: int, *, input: str) -> list[tuple[int, int]]:
    got = ex.fragment_coords(operand, lane)
    expect(
        isinstance(got, (list, tuple)) and all(isinstance(p, (list, tuple)) and len(p) == 2 for p in got),
        "fragment_coords did not return a list of (row, col) pairs",
        input=input,
        expected="a list of (row, col) tuples, one per register",
        got=repr(got)[:120],
        hint="return [(row, col) for each register i]",
    )
    return [(int(r), int(c)) for r, c in got]


@checks("mma_fragments")
def fragments_hand_checkable(ex):
    """lane 0's A registers are (0,0) (0,1) (8,0) (8,1) (0,8) (0,9) (8,8) (8,9); lane 5 (g = 1, t = 1) and lane 31
    (g = 7, t = 3) for A, B and C"""
    cases = [
        ("a", 0, [(0, 0), (0, 1), (8, 0), (8, 1), (0, 8), (0, 9), (8, 8), (8, 9)]),
        ("a", 5, [(1, 2), (1, 3), (9, 2), (9, 3), (1, 10), (1, 11), (9, 10), (9, 11)]),
        ("b", 5, [(2, 1), (3, 1), (10, 1), (11, 1)]),
        ("c", 5, [(1, 2), (1, 3), (9, 2), (9, 3)]),
        ("b", 31, [(6, 7), (7, 7), (14, 7), (15, 7)]),
        ("c", 31, [(7, 6), (7, 7), (15, 6), (15, 7)]),
        ("d", 31, [(7, 6), (7, 7), (15, 6), (15, 7)]),
    ]
    for operand, lane, expected in cases:
        label = f"fragment_coords({operand!r}, {lane})"
        got = coords_of(ex, operand, lane, input=label)
        expect(
            got == expected,
            "wrong (row, col) for this lane",
            input=label,
            expected=str(expected),
            got=str(got),
            hint=HINT_COORDS,
        )


@checks("mma_fragments")
def fragments_match_the_ptx_table(ex):
    """every lane of A, B, C and D against the checks' encoding of the PTX ISA tables; each element of each operand
    is held by exactly one (lane, register)"""
    for operand in ("a", "b", "c", "d"):
        table = ptx_table("c" if operand == "d" else operand)
        owners: dict[tuple[int, int], list[tuple[int, int]]] = {}
        for lane in range(WARP):
            label = f"fragment_coords({operand!r}, {lane})"
            got = coords_of(ex, operand, lane, input=label)
            expected = [table[lane, i] for i in range(REGS["c" if operand == "d" else operand])]
            expect(
                got == expected,
                "wrong (row, col) for this lane",
                input=label,
                expected=str(expected),
                got=str(got),
                hint=HINT_COORDS,
            )
            for i, pair in enumerate(got):
                owners.setdefault(pair, []).append((lane, i))
        shape = SHAPES["c" if operand == "d" else operand]
        expect(
            len(owners) == shape[0] * shape[1] and all(len(v) == 1 for v in owners.values()),
            "the lanes' registers do not cover the operand exactly once",
            input=f"operand {operand!r} {shape}",
            expected=f"{shape[0] * shape[1]} distinct (row, col), one owner each",
            got=f"{len(owners)} distinct",
            hint=HINT_COORDS,
        )


HINT_MMA = (
    "scatter each lane's registers into A (16, 16), B (16, 8), C (16, 8) with fragment_coords, "
    "D = (A[:, :, None] * B[None]).sum(1) + C in float64, .float(), and gather D with the 'd' layout"
)


def run_warp_mma(ex, A, B, C, *, input: str) -> torch.Tensor:
    d_regs = ex.warp_mma(to_fragments(A, "a"), to_fragments(B, "b"), to_fragments(C, "c"))
    expect_tensor(d_regs, shape=(WARP, 4), dtype=torch.float32, input=input)
    return from_fragments(d_regs, "c")


@checks("mma_fragments")
def warp_mma_against_float64(ex):
    """random A (16, 16), B (16, 8) in fp16 and bf16, C (16, 8) fp32 (random and zero), cut into fragments by the
    PTX table: the d registers, reassembled the same way, equal A B + C (float64 reference)"""
    g = torch.Generator().manual_seed(5)
    for dtype in INPUT_DTYPES:
        for c_kind in ("random", "zero"):
            A = torch.randn(16, 16, generator=g).to(dtype)
            B = torch.randn(16, 8, generator=g).to(dtype)
            C = torch.randn(16, 8, generator=g) * 4 if c_kind == "random" else torch.zeros(16, 8)
            label = describe(A=A, B=B, C=C) + f" ({c_kind} C)"
            D = run_warp_mma(ex, A, B, C, input=label)
            expect_close(
                D,
                A.double() @ B.double() + C.double(),
                baseline=A.float() @ B.float() + C,
                input=label,
                hint=HINT_MMA,
            )


@checks("mma_fragments")
def warp_mma_chained_over_k(ex):
    """a (16, 64) @ (64, 8) product as four chained warp_mma calls (each call's d is the next call's c), fp16 and
    bf16, against float64"""
    g = torch.Generator().manual_seed(6)
    for dtype in INPUT_DTYPES:
        A = torch.randn(16, 64, generator=g).to(dtype)
        B = torch.randn(64, 8, generator=g).to(dtype)
        label = describe(A=A, B=B) + ", 4 chained mma.m16n8k16"
        d_regs = torch.zeros(WARP, 4)
        for k0 in range(0, 64, 16):
            d_regs = ex.warp_mma(to_fragments(A[:, k0 : k0 + 16], "a"), to_fragments(B[k0 : k0 + 16], "b"), d_regs)
            expect_tensor(d_regs, shape=(WARP, 4), dtype=torch.float32, input=label)
        expect_close(
            from_fragments(d_regs, "c"),
            A.double() @ B.double(),
            baseline=A.float() @ B.float(),
            input=label,
            hint=HINT_MMA + " (the accumulator layout is the same for c and d, so d feeds the next call as c)",
        )


@checks("mma_fragments")
def fragments_reject_bad_input(ex):
    """operand 'x' or 'A', lane 32, -1, 1.0 or True (ValueError); warp_mma with a (32, 4) A fragment, float32 A and B,
    mixed fp16/bf16, or a float16 C (ValueError/TypeError)"""
    for operand, lane in (("x", 0), ("A", 0), ("a", 32), ("a", -1), ("c", 1.0), ("b", True)):
        expect_refused(
            lambda operand=operand, lane=lane: ex.fragment_coords(operand, lane),
            input=f"fragment_coords({operand!r}, {lane!r})",
            hint="operand in 'a', 'b', 'c', 'd'; lane an int (not a bool) in [0, 32)",
            errors=(ValueError,),
        )
    a = torch.randn(WARP, 8).half()
    b = torch.randn(WARP, 4).half()
    c = torch.randn(WARP, 4)
    cases = [
        (lambda: ex.warp_mma(a[:, :4], b, c), "a_regs (32, 4)"),
        (lambda: ex.warp_mma(a, b[:16], c), "b_regs (16, 4)"),
        (lambda: ex.warp_mma(a.float(), b.float(), c), "a_regs, b_regs float32"),
        (lambda: ex.warp_mma(a, b.bfloat16(), c), "a_regs float16, b_regs bfloat16"),
        (lambda: ex.warp_mma(a, b, c.half()), "c_regs float16"),
    ]
    for call, label in cases:
        expect_refused(
            call,
            input=label,
            hint="a_regs (32, 8), b_regs (32, 4) of one dtype, float16 or bfloat16; c_regs (32, 4) float32",
            errors=(ValueError, TypeError),
        )


# ----------------------------------------------------------------------------------------- wmma_gemm_cuda (GPU)

AMPERE = (8, 0)  # bf16 WMMA fragments
HINT_GEMM = (
    "zero-fill the tile copies past M, N or K (gc < K for A, gr < K for B), __syncthreads() after the copies and after "
    "the MMAs, an fp32 accumulator fragment, and the epilogue for every fragment inside C"
)


def cuda_operands(M: int, N: int, K: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(M, K, device="cuda").to(dtype), torch.randn(K, N, device="cuda").to(dtype)


def toward_zero_fp32(x: torch.Tensor) -> torch.Tensor:
    """float64 `x` rounded to float32 toward zero (truncated), as a float32 tensor."""
    rounded = x.float()
    away = rounded.double().abs() > x.abs()  # round-to-nearest went up in magnitude: step back one ulp
    return torch.where(away, torch.nextafter(rounded, torch.zeros_like(rounded)), rounded)


def tensor_core_fp32_model(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """The baseline of the GPU checks: fp32 accumulation as tensor cores may do it, pessimistically. Every 8 steps of
    K, the exact products are added to the accumulator and the sum is TRUNCATED to float32. Tensor cores are not IEEE
    round-to-nearest adders: Fasi et al. ("Numerical behavior of NVIDIA tensor cores", 2021) report round-toward-zero
    on V100, T4 and A100, later models (Valpey et al. 2025, Khattak and Mikaitis 2025) differ in the details, and
    Hopper's are not documented. Truncating twice per 16-deep instruction covers both, with a margin for hardware that
    also truncates the aligned addends. Truncation errors do not cancel as round-to-nearest ones do: at K = 4096 they
    are several times those of a CPU fp32 matmul, so that baseline could fail a correct kernel on an H200."""
    M, K = A.shape
    N = B.shape[1]
    acc = torch.zeros(M, N, dtype=torch.float32)
    if K == 0:
        return acc
    partials = torch.einsum("mtk,tkn->tmn", A.double().reshape(M, K // 8, 8), B.double().reshape(K // 8, 8, N))
    for partial in partials:  # (M, N): the exact products of 8 steps of K
        acc = toward_zero_fp32(acc.double() + partial)
    return acc


def expect_fp32_gemm(got: torch.Tensor, A: torch.Tensor, B: torch.Tensor, *, input: str, hint: str = HINT_GEMM):
    """float32 (M, N) on the GPU, close to float64 within the allowance of a truncating fp32 accumulation of the same
    inputs (`tensor_core_fp32_model`, on the CPU), and within the bound of fp32 accumulation over K (with 2u per step:
    tensor cores may truncate)."""
    M, N, K = A.shape[0], B.shape[1], A.shape[1]
    expect_tensor(got, shape=(M, N), dtype=torch.float32, device="cuda", input=input)
    host = got.cpu()
    a, b = A.cpu(), B.cpu()
    expect_close(host, a.double() @ b.double(), baseline=tensor_core_fp32_model(a, b), input=input, hint=hint)
    expect_summation_bound(host, a, b, max(K, 1), 2.0**-23, input=input, hint=hint + " (fp32, not fp16, accumulators)")


@checks("wmma_gemm_cuda", requires_cuda=True, requires_capability=AMPERE)
def cuda_hand_checkable(ex):
    """small integers (16, 32) @ (32, 16) exactly; the swamping input (rows [2048, 1/16, ...], K = 4096, B ones) is
    2303.9375 exactly and the overflow input (entries 4 and 8, K = 4096: sums up to 262144) is exact in fp32: an fp16
    accumulator loses the 1/16s and overflows to inf"""
    module = ex.load_wmma_gemm()
    g = torch.Generator().manual_seed(7)
    for dtype in INPUT_DTYPES:
        A = torch.randint(-3, 4, (16, 32), generator=g).to(dtype)
        B = torch.randint(-3, 4, (32, 16), generator=g).to(dtype)
        label = f"integers in [-3, 3]: A (16, 32) @ B (32, 16) {name_of(dtype)}"
        got = module.wmma_gemm(A.cuda(), B.cuda())
        torch.cuda.synchronize()
        expect_tensor(got, shape=(16, 16), dtype=torch.float32, device="cuda", input=label)
        expect(
            torch.equal(got.cpu(), (A.double() @ B.double()).float()),
            "integer products are not exact",
            input=label,
            expected="A @ B exactly",
            got=str(got.cpu()[:2, :6].tolist()),
            hint=HINT_GEMM,
        )
        A, B = swamping_inputs(dtype)
        label = f"swamping: A (16, 4096) {name_of(dtype)} rows [2048, 1/16, ...], B ones"
        got = module.wmma_gemm(A.cuda(), B.cuda())
        torch.cuda.synchronize()
        expect(
            torch.equal(got.cpu(), torch.full((16, 16), 2303.9375)),
            "the small terms were lost (swamping)",
            input=label,
            expected="2303.9375 everywhere (exact in fp32)",
            got=str(got.cpu()[0, :4].tolist()),
            hint="accumulate in a float fragment: wmma_gemm_launch<__half, float> (fp16 turns 2048 + 1 into 2048)",
        )
        A = (torch.randint(0, 2, (32, 4096), generator=g) * 4 + 4).to(dtype)  # 4 or 8
        B = (torch.randint(0, 2, (4096, 16), generator=g) * 4 + 4).to(dtype)
        label = f"overflow: A (32, 4096), B (4096, 16) {name_of(dtype)} with entries 4 or 8 (sums > 65504)"
        got = module.wmma_gemm(A.cuda(), B.cuda())
        torch.cuda.synchronize()
        exact = (A.double() @ B.double()).float()
        expect(
            torch.equal(got.cpu(), exact),
            "the sums are not exact (an fp16 accumulator overflows past 65504)",
            input=label,
            expected=str(exact[0, :4].tolist()),
            got=str(got.cpu()[0, :4].tolist()),
            hint="accumulate in float (the sums are integers below 2^24: exact in fp32)",
        )


@checks("wmma_gemm_cuda", requires_cuda=True, requires_capability=AMPERE)
def cuda_shapes_and_dtypes(ex):
    """(M, N, K) = (16, 16, 16), (32, 48, 64), (128, 128, 128), (144, 272, 48), (256, 384, 1040), (16, 1024, 4096) and
    K = 0, fp16 and bf16 N(0, 1) inputs, against float64 (allowance: an fp32 matmul's error) and the fp32 bound"""
    module = ex.load_wmma_gemm()
    shapes = [(16, 16, 16), (32, 48, 64), (128, 128, 128), (144, 272, 48), (256, 384, 1040), (16, 1024, 4096)]
    for dtype in INPUT_DTYPES:
        for M, N, K in shapes:
            A, B = cuda_operands(M, N, K, dtype)
            label = describe(A=A, B=B) + " on cuda"
            got = module.wmma_gemm(A, B)
            torch.cuda.synchronize()
            expect_fp32_gemm(got, A, B, input=label)
        A, B = cuda_operands(32, 16, 0, dtype)
        got = module.wmma_gemm(A, B)
        torch.cuda.synchronize()
        label = describe(A=A, B=B) + " (K = 0) on cuda"
        expect_tensor(got, shape=(32, 16), dtype=torch.float32, device="cuda", input=label)
        expect(
            bool((got == 0).all()),
            "K = 0 must give zeros",
            input=label,
            expected="zeros",
            got=str(got.cpu()[0, :4].tolist()),
            hint="the K loop runs zero times; the epilogue stores the zeros",
        )


@checks("wmma_gemm_cuda", requires_cuda=True, requires_capability=AMPERE, gate=True)
def cuda_out_windows_of_nan_buffers(ex):
    """wmma_gemm_out with A, B the leading rows of NaN-filled buffers (a read past K brings NaN in) and out a
    NaN-filled window with 128 guard rows after it (a stray store lands there), for (M, N, K) = (144, 272, 48),
    (80, 48, 112), (16, 16, 16)"""
    module = ex.load_wmma_gemm()
    for dtype in INPUT_DTYPES:
        for M, N, K in ((144, 272, 48), (80, 48, 112), (16, 16, 16)):
            _, A = guarded((M, K), (16, 0), device="cuda", dtype=dtype)
            _, B = guarded((K, N), (16, 0), device="cuda", dtype=dtype)
            A.copy_(torch.randn(M, K))
            B.copy_(torch.randn(K, N))
            buffer, out = guarded((M, N), (128, 0), device="cuda")
            label = (
                f"wmma_gemm_out: A ({M}, {K}), B ({K}, {N}) {name_of(dtype)} with NaN rows after them, out a "
                f"NaN-filled ({M}, {N}) float32 window with 128 guard rows"
            )
            returned = module.wmma_gemm_out(A, B, out)
            torch.cuda.synchronize()
            expect(
                isinstance(returned, torch.Tensor) and returned.data_ptr() == out.data_ptr(),
                "wmma_gemm_out did not return out",
                input=label,
                expected="the tensor `out` it wrote into",
                got=type(returned).__name__,
                hint="end the launcher with `return out;`",
            )
            expect_guard_untouched(
                buffer.cpu(), (M, N), input=label, hint="store a fragment only if row0 < M && col0 < N"
            )
            expect_fp32_gemm(
                out,
                A,
                B,
                input=label,
                hint="a NaN means a read past A or B: zero-fill unless gr < M && gc < K (A), gr < K && gc < N (B)",
            )


HINT_LAYOUTS = (
    "load_matrix_sync reads rows K apart from A + row * K: TORCH_CHECK(t.is_contiguous(), ...) for A, B and out (or "
    "pass the row stride as ldm)"
)


@checks("wmma_gemm_cuda", requires_cuda=True, requires_capability=AMPERE)
def cuda_operands_in_their_own_layouts(ex):
    """(M, N, K) = (48, 32, 64) in float16 and bfloat16: wmma_gemm with A transposed (a weight kept as (out, in)) and B
    a window of a padded buffer; wmma_gemm_out with A a slice of a fused tensor, B padded rows and a NaN-filled float32
    out transposed: refused (RuntimeError from TORCH_CHECK) or multiplied correctly, never read or written as if
    contiguous"""
    module = ex.load_wmma_gemm()
    for dtype in INPUT_DTYPES:
        A, B = cuda_operands(48, 32, 64, dtype)
        lA, lB = distinct_layouts(A, B, order=("transposed", "outer_padded"))
        expect_own_layouts(lA, lB)
        label = "wmma_gemm: " + describe_layouts(A=lA, B=lB) + f" {name_of(dtype)}"

        def check_product(got, label=label, A=A, B=B):
            torch.cuda.synchronize()
            expect_fp32_gemm(got, A, B, input=label, hint=HINT_LAYOUTS)

        expect_refused_or_correct(
            lambda lA=lA, lB=lB: module.wmma_gemm(lA, lB), check_product, input=label, hint=HINT_LAYOUTS,
            errors=TORCH_CHECK_ERRORS,
        )  # fmt: skip
        torch.cuda.synchronize()
        lA, lB, lout = distinct_layouts(A, B, torch.full((48, 32), float("nan"), device="cuda"))
        expect_own_layouts(lA, lB, lout)
        label = "wmma_gemm_out: " + describe_layouts(A=lA, B=lB, out=lout) + f" {name_of(dtype)}, out NaN-filled"

        def check_out(_, label=label, A=A, B=B, lout=lout):
            torch.cuda.synchronize()
            expect_fp32_gemm(lout, A, B, input=label, hint=HINT_LAYOUTS)

        expect_refused_or_correct(
            lambda lA=lA, lB=lB, lout=lout: module.wmma_gemm_out(lA, lB, lout), check_out, input=label,
            hint=HINT_LAYOUTS, errors=TORCH_CHECK_ERRORS,
        )  # fmt: skip
        torch.cuda.synchronize()


@checks("wmma_gemm_cuda", requires_cuda=True, requires_capability=AMPERE)
def cuda_refuses_bad_input(ex):
    """float32 and mixed fp16/bf16 inputs, M = 24 and K = 40 (not multiples of 16), a transposed A, mismatched inner
    dimensions, CPU tensors, an out of the wrong shape or dtype: RuntimeError (TORCH_CHECK); an A that starts 2 bytes
    into its allocation is refused or multiplied correctly"""
    module = ex.load_wmma_gemm()
    A, B = cuda_operands(64, 48, 32, torch.float16)
    cases = [
        (lambda: module.wmma_gemm(A.float(), B.float()), "A, B float32", "TORCH_CHECK float16 or bfloat16"),
        (lambda: module.wmma_gemm(A, B.bfloat16()), "A float16, B bfloat16", "TORCH_CHECK the same dtype"),
        (lambda: module.wmma_gemm(A[:24], B), "M = 24", "TORCH_CHECK M, N, K multiples of 16"),
        (
            lambda: module.wmma_gemm(
                torch.randn(64, 40, device="cuda").half(), torch.randn(40, 48, device="cuda").half()
            ),
            "K = 40",
            "TORCH_CHECK M, N, K multiples of 16",
        ),
        (
            lambda: module.wmma_gemm(torch.randn(32, 64, device="cuda").half().t(), B),
            "A = a (32, 64) tensor transposed: not contiguous",
            "TORCH_CHECK(A.is_contiguous() ...)",
        ),
        (lambda: module.wmma_gemm(A, B[:16]), "A (64, 32), B (16, 48)", "TORCH_CHECK(A.size(1) == B.size(0))"),
        (lambda: module.wmma_gemm(A.cpu(), B.cpu()), "A, B on the CPU", "TORCH_CHECK(A.is_cuda() ...)"),
        (
            lambda: module.wmma_gemm_out(A, B, torch.empty(64, 32, device="cuda")),
            "out (64, 32) for (64, 32) @ (32, 48)",
            "TORCH_CHECK out is (M, N)",
        ),
        (
            lambda: module.wmma_gemm_out(A, B, torch.empty(64, 48, device="cuda", dtype=torch.float16)),
            "out float16",
            "TORCH_CHECK out is float32",
        ),
    ]
    for call, label, hint in cases:
        expect_refused(call, input=label, hint=hint, errors=(RuntimeError,))
        torch.cuda.synchronize()
    flat = torch.randn(64 * 32 + 1, device="cuda").half()
    shifted = flat[1:].view(64, 32)  # contiguous, 2 bytes past a 16-byte boundary
    label = "A (64, 32) float16 contiguous but starting 2 bytes into its allocation (not 16-byte aligned)"
    try:
        got = module.wmma_gemm(shifted, B)
        torch.cuda.synchronize()
    except RuntimeError as exc:
        if isinstance(exc, NotImplementedError):
            raise
        expect(
            bool(str(exc).strip()),
            "refused without saying why",
            input=label,
            expected="a message",
            got=repr(exc),
            hint="TORCH_CHECK the 16-byte alignment of A.data_ptr() and B.data_ptr()",
        )
        return
    expect_fp32_gemm(got, shifted, B, input=label, hint="TORCH_CHECK the 16-byte alignment of the data pointers")


def benchmark(ex):
    """wmma_gemm (fp16 and bf16 in, fp32 accumulate and out) vs torch.matmul (cuBLAS, fp32 accumulate, output in the
    input dtype) at 4096^3."""
    module = ex.load_wmma_gemm()
    size = 4096
    flops = 2 * size**3
    rows = []
    for dtype in INPUT_DTYPES:
        a = torch.randn(size, size, device="cuda").to(dtype)
        b = torch.randn(size, size, device="cuda").to(dtype)
        out = torch.empty(size, size, device="cuda")
        shape = f"{size}^3 {name_of(dtype)}"
        rows.append(
            flops_row(
                "wmma_gemm_out (fp32 acc, fp32 out)",
                shape,
                lambda a=a, b=b, out=out: module.wmma_gemm_out(a, b, out),
                flops,
            )
        )
        rows.append(flops_row("torch.matmul (cuBLAS)", shape, lambda a=a, b=b: torch.matmul(a, b), flops))
    return rows
