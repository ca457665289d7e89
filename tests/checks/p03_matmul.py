"""Checks for p03.matmul. References: `torch.matmul` in float64 (and in the dtype under test as the error
baseline), a loop specification of the grouped tile order written here, and guard elements around the output
that catch writes a missing mask lets through (the gate, see llm_algo.references.kernels).

`grouped_tile` is a `@triton.jit` function: the checks run it through a one-program kernel that maps a whole
block of program ids at once (the function arrives as a `tl.constexpr` argument)."""

from functools import lru_cache

import torch

from llm_algo.bench import baseline_rows, flops_row
from llm_algo.check import Checks, describe, expect, expect_close, expect_refused, expect_tensor, expect_value_error
from llm_algo.check.restrictions import MATMUL
from llm_algo.device import policy, triton_compiled, triton_device, triton_dtypes
from llm_algo.references.kernels import expect_guard_untouched, guarded, random_window
from llm_algo.references.layouts import distinct_layouts, expect_own_layouts

checks = Checks("p03.matmul", triton=True)
checks.restrict(
    "matmul",
    kernel=True,
    forbid=MATMUL,
    instead="multiply the tiles with tl.dot in your @triton.jit kernel (torch.matmul is the checks' reference)",
)
HINT_K_MASK = "mask the K dimension in both loads (k index < K - step * BLOCK_K) with other=0.0"


# ------------------------------------------------------------------------------------------ grouped_tile


def spec_order(num_pid_m: int, num_pid_n: int, group_m: int) -> list[tuple[int, int]]:
    """The grouped order by its definition: groups of group_m tile rows (the last one shorter), and inside a group
    the tiles column by column, top to bottom."""
    order = []
    for first_row in range(0, num_pid_m, group_m):
        rows = range(first_row, min(first_row + group_m, num_pid_m))
        for col in range(num_pid_n):
            order.extend((row, col) for row in rows)
    return order


@lru_cache(maxsize=1)
def tile_map_kernel():
    """A one-program kernel that maps a block of program ids through TILE_FN. Defined on first use, after the device
    policy has switched the interpreter on where needed (triton.jit decides interpreted or compiled when it runs)."""
    policy()
    import triton  # imported only now: triton.language's own @jit helpers (tl.cdiv ...) are decided at import
    import triton.language as tl

    @triton.jit
    def kernel(
        out_m_ptr,
        out_n_ptr,
        num_pids,
        num_pid_m,
        num_pid_n,
        GROUP_M: tl.constexpr,
        BLOCK: tl.constexpr,
        TILE_FN: tl.constexpr,
    ):
        lanes = tl.arange(0, BLOCK)
        pid = tl.minimum(lanes, num_pids - 1)  # lanes past the end repeat the last pid and are not stored
        pid_m, pid_n = TILE_FN(pid, num_pid_m, num_pid_n, GROUP_M)
        tl.store(out_m_ptr + pid, pid_m, mask=lanes < num_pids)
        tl.store(out_n_ptr + pid, pid_n, mask=lanes < num_pids)

    return kernel


def tile_map(ex, num_pid_m: int, num_pid_n: int, group_m: int, dtype=torch.int32) -> list[tuple[int, int]]:
    """(pid_m, pid_n) of every program id, stored into `dtype` buffers (int32 truncates a fractional tile index)."""
    num_pids = num_pid_m * num_pid_n
    out_m = torch.full((num_pids,), -1, dtype=dtype, device=triton_device())
    out_n = torch.full((num_pids,), -1, dtype=dtype, device=triton_device())
    block = 1 << (num_pids - 1).bit_length()
    tile_map_kernel()[(1,)](out_m, out_n, num_pids, num_pid_m, num_pid_n, group_m, block, ex.grouped_tile)
    return list(zip(out_m.tolist(), out_n.tolist(), strict=True))


def expect_order(ex, num_pid_m, num_pid_n, group_m, hint):
    got = tile_map(ex, num_pid_m, num_pid_n, group_m)
    want = spec_order(num_pid_m, num_pid_n, group_m)
    bad = [pid for pid, (g, w) in enumerate(zip(got, want, strict=True)) if g != w]
    expect(
        not bad,
        f"{len(bad)} of {len(want)} program ids map to the wrong tile",
        input=f"num_pid_m={num_pid_m}, num_pid_n={num_pid_n}, GROUP_M={group_m}",
        expected=f"pid {bad[0]} -> {want[bad[0]]}" if bad else "",
        got=f"pid {bad[0]} -> {got[bad[0]]}" if bad else "",
        hint=hint,
    )


@checks("grouped_tile")
def hand_checkable_grid(ex):
    """a 4 x 3 grid of tiles, GROUP_M = 2: pids 0..5 cover rows 0-1 column by column, 6..11 rows 2-3"""
    expect_order(
        ex, 4, 3, 2, hint="inside a group the row moves fastest: pid_m = first + r % height, pid_n = r // height"
    )


@checks("grouped_tile")
def every_tile_exactly_once(ex):
    """grids whose last group is short (5 x 3 with GROUP_M 2, 7 x 4 with 3, 9 x 5 with 8): a permutation of the tiles"""
    for num_pid_m, num_pid_n, group_m in ((5, 3, 2), (7, 4, 3), (9, 5, 8), (3, 7, 8)):
        got = tile_map(ex, num_pid_m, num_pid_n, group_m)
        label = f"num_pid_m={num_pid_m}, num_pid_n={num_pid_n}, GROUP_M={group_m}"
        everything = {(m, n) for m in range(num_pid_m) for n in range(num_pid_n)}
        missing, outside = everything - set(got), set(got) - everything
        expect(
            not missing and not outside and len(set(got)) == len(got),
            "the programs do not cover every tile exactly once",
            input=label,
            expected=f"all {len(everything)} tiles, each once",
            got=f"{len(missing)} tiles never computed, {len(outside)} tiles outside the grid, "
            f"{len(got) - len(set(got))} computed twice",
            hint="the last group has min(num_pid_m - first_pid_m, GROUP_M) rows: use that height in % and //",
        )
        expect_order(ex, num_pid_m, num_pid_n, group_m, hint="the short last group wraps at its own height")


@checks("grouped_tile")
def degenerate_groups(ex):
    """GROUP_M = 1 is row-major; GROUP_M >= num_pid_m is column-major; a single row or column of tiles"""
    for num_pid_m, num_pid_n, group_m in ((4, 5, 1), (3, 4, 4), (6, 2, 16), (1, 9, 4), (11, 1, 4)):
        expect_order(ex, num_pid_m, num_pid_n, group_m, hint="check the formula at the extremes of GROUP_M")


@checks("grouped_tile")
def tile_indices_are_whole_numbers(ex):
    """stored into float32 buffers, pid_m and pid_n are whole numbers: integer division (//), not /"""
    for num_pid_m, num_pid_n, group_m in ((5, 3, 2), (4, 3, 3)):
        got = tile_map(ex, num_pid_m, num_pid_n, group_m, dtype=torch.float32)
        want = spec_order(num_pid_m, num_pid_n, group_m)
        bad = [pid for pid, (g, w) in enumerate(zip(got, want, strict=True)) if g != w]
        expect(
            not bad,
            f"{len(bad)} of {len(want)} program ids map to a wrong or fractional tile",
            input=f"num_pid_m={num_pid_m}, num_pid_n={num_pid_n}, GROUP_M={group_m}, results stored as float32",
            expected=f"pid {bad[0]} -> {want[bad[0]]}" if bad else "",
            got=f"pid {bad[0]} -> {got[bad[0]]}" if bad else "",
            hint="tile indices use integer division: pid_in_group // group_size_m (/ on integers gives a float)",
        )


# ------------------------------------------------------------------------------------------------ matmul


def oracle(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a.double().cpu() @ b.double().cpu()


def baseline(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.matmul(a, b)


def operands(M, N, K, dtype, layout):
    """(a, b) of shapes (M, K), (K, N) in one of several memory layouts."""
    make = lambda *shape: torch.randn(*shape, device=triton_device()).to(dtype)
    if layout == "contiguous":
        return make(M, K), make(K, N)
    if layout == "a transposed (a = t.T)":
        return make(K, M).T, make(K, N)
    if layout == "b transposed (b = w.T, as in F.linear)":
        return make(M, K), make(N, K).T
    if layout == "both sliced with a step":
        return make(M, 2 * K)[:, ::2], make(2 * K, N)[::2]
    raise ValueError(layout)


def expect_matmul(ex, a, b, label, hint, **kwargs):
    got = ex.matmul(a, b, **kwargs)
    expect_tensor(got, shape=(a.shape[0], b.shape[1]), dtype=a.dtype, device=a.device.type, input=label)
    expect_close(got, oracle(a, b), baseline=baseline(a, b), input=label, hint=hint)


@checks("matmul", gate=True)
def kernel_stays_inside_its_output(ex):
    """matmul_kernel on windows of larger buffers, M=37 N=29 K=70 with 16 x 16 x 32 tiles: guards untouched"""
    M, N, K = 37, 29, 70
    a = random_window((M, K), (5, 26), device=triton_device())  # the padding holds random numbers: a read past
    b = random_window((K, N), (26, 7), device=triton_device())  # K without the K mask sums them in
    buffer, c = guarded((M, N), (11, 9), device=triton_device())
    grid = (-(-M // 16) * -(-N // 16),)
    ex.matmul_kernel[grid](
        a, b, c, M, N, K,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BLOCK_M=16, BLOCK_N=16, BLOCK_K=32, GROUP_M=2, INPUT_PRECISION="ieee",
    )  # fmt: skip
    label = (
        f"a (37, 70) window with strides {a.stride()}, b (70, 29), c (37, 29) window of a NaN buffer, 16x16x32 tiles"
    )
    expect_guard_untouched(buffer, (M, N), input=label, hint="mask the store on both edges: rows < M and cols < N")
    expect_close(c, oracle(a, b), input=label, hint=HINT_K_MASK)


@checks("matmul")
def kernel_writes_a_column_major_output(ex):
    """matmul_kernel with c a transposed window (strides (1, 40)): the store uses stride_cm and stride_cn"""
    M, N, K = 37, 29, 70
    a = random_window((M, K), (5, 26), device=triton_device())
    b = random_window((K, N), (26, 7), device=triton_device())
    buffer, window = guarded((N, M), (9, 3), device=triton_device())
    c = window.T  # (37, 29), column-major
    grid = (-(-M // 16) * -(-N // 16),)
    ex.matmul_kernel[grid](
        a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride(),
        BLOCK_M=16, BLOCK_N=16, BLOCK_K=32, GROUP_M=2, INPUT_PRECISION="ieee",
    )  # fmt: skip
    label = f"c (37, 29) a transposed window with strides {c.stride()}, 16x16x32 tiles"
    expect_guard_untouched(buffer, (N, M), input=label, hint="address c with both of its strides")
    expect_close(c, oracle(a, b), input=label, hint="c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn")


@checks("matmul")
def kernel_reads_only_k_below_K(ex):
    """matmul_kernel with NaN right after column K-1 of a and row K-1 of b: the K masks keep it out"""
    M, N, K = 37, 29, 70
    _, a = guarded((M, K), (0, 2), device=triton_device())  # NaN at columns K and K + 1
    _, b = guarded((K, N), (2, 0), device=triton_device())  # NaN at rows K and K + 1
    a.copy_(torch.randn(M, K))
    b.copy_(torch.randn(K, N))
    c = torch.empty(M, N, device=triton_device())
    ex.matmul_kernel[(-(-M // 16) * -(-N // 16),)](
        a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride(),
        BLOCK_M=16, BLOCK_N=16, BLOCK_K=32, GROUP_M=2, INPUT_PRECISION="ieee",
    )  # fmt: skip
    expect_close(
        c, oracle(a, b), input="a (37, 70), b (70, 29), NaN just past K in both, 16x16x32 tiles", hint=HINT_K_MASK
    )


@checks("matmul")
def hand_checkable_product(ex):
    """[[1, 2, 3], [4, 5, 6]] @ [[1, 0], [0, 1], [1, 1]] = [[4, 5], [10, 11]]"""
    a = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], device=triton_device())
    b = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], device=triton_device())
    expect_close(
        ex.matmul(a, b),
        torch.tensor([[4.0, 5.0], [10.0, 11.0]], dtype=torch.float64),
        input="a=[[1, 2, 3], [4, 5, 6]], b=[[1, 0], [0, 1], [1, 1]]",
        hint="C[i, j] = sum over k of A[i, k] * B[k, j]; K = 3 is one partial K block",
    )


@checks("matmul")
def ragged_shapes_and_dtypes(ex):
    """M, N, K not multiples of the tile (1x1x1, 37x29x70, 5x130x33, 64x64x64), fp32 and fp16 (bf16 compiled)"""
    check_ragged(ex, [(1, 1, 1), (37, 29, 70), (5, 130, 33), (64, 64, 64), (1, 40, 100)])


@checks("matmul", requires_compiled=True)
def ragged_shapes_at_scale(ex):
    """1000x3000x515 and 2048x2048x2048 in fp32, fp16 and bf16: sizes only a GPU grades in time"""
    check_ragged(ex, [(1000, 3000, 515), (2048, 2048, 2048)])  # each new (M, N, K, dtype) runs the autotuner once


def check_ragged(ex, shapes):
    for dtype in triton_dtypes():
        for M, N, K in shapes:
            a, b = operands(M, N, K, dtype, "contiguous")
            expect_matmul(
                ex, a, b, describe(a=a, b=b), hint=HINT_K_MASK + "; launch cdiv(M, BM) * cdiv(N, BN) programs"
            )


@checks("matmul")
def transposed_and_strided_operands(ex):
    """a = t.T, b = w.T (the F.linear layout) and step-sliced views: every stride from .stride(i)"""
    shapes = [(37, 29, 70)] + ([(1024, 768, 1000)] if triton_compiled() else [])
    for dtype in triton_dtypes():
        for M, N, K in shapes:
            for layout in (
                "a transposed (a = t.T)",
                "b transposed (b = w.T, as in F.linear)",
                "both sliced with a step",
            ):
                a, b = operands(M, N, K, dtype, layout)
                label = f"{describe(a=a, b=b)}, {layout}, strides a{a.stride()} b{b.stride()}"
                expect_matmul(
                    ex, a, b, label,
                    hint="build pointers from stride_am/stride_ak/stride_bk/stride_bn and advance by BLOCK_K * stride_ak",
                )  # fmt: skip


@checks("matmul")
def operands_in_their_own_layouts(ex):
    """a and b each in a layout of its own (a slice of a fused projection, padded rows, a transposed weight, a window
    of a bigger buffer), same values as contiguous copies: each read through its own strides"""
    hint = "take every stride from the operand itself (a.stride(i) for a, b.stride(i) for b), never from the other"
    for dtype in triton_dtypes():
        for order in (("fused_slice", "padded"), ("transposed", "outer_padded"), ("padded", "transposed")):
            a, b = operands(37, 29, 70, dtype, "contiguous")
            la, lb = distinct_layouts(a, b, order=order)
            expect_own_layouts(la, lb)
            label = f"{describe(a=a, b=b)}, a {order[0]} strides {la.stride()}, b {order[1]} strides {lb.stride()}"
            expect_matmul(ex, la, lb, label, hint=hint)


@checks("matmul")
def long_k_accumulates_in_float32(ex):
    """fp16 in [0, 1) with K = 2048 (and 8192 compiled): sums of thousands of positive products need a float32
    accumulator"""
    # Positive inputs: every output is ~K/4 and every partial sum grows towards it, so a float32 accumulator's error
    # stays far below fp16's rounding of the output on any GPU (tensor cores that truncate instead of rounding
    # included), while an fp16 accumulator rounds each K step at the size of the output. With randn inputs an output
    # can land near 0 while the partial sums reach ~sqrt(K): the fp32 accumulation error (absolute, ~1e-3 at K = 8192
    # with truncation) then exceeds fp16's relative tolerance there on an H100, not on a CPU.
    device = triton_device()
    for M, N, K in [(32, 48, 2048)] + ([(256, 256, 8192)] if triton_compiled() else []):
        a = torch.rand(M, K, device=device).half()
        b = torch.rand(K, N, device=device).half()
        label = describe(a=a, b=b) + ", entries in [0, 1)"
        got = ex.matmul(a, b)
        expect_tensor(got, shape=(M, N), dtype=torch.float16, device=device, input=label)
        # the baseline: float32 accumulation rounded once to fp16, on the CPU (a GPU's torch.matmul may reduce split-K
        # partials in fp16, which would widen the allowance towards the mistake this check exists for)
        rounded_once = baseline(a.cpu().float(), b.cpu().float()).half()
        expect_close(
            got,
            oracle(a, b),
            baseline=rounded_once,
            input=label,
            hint="accumulate in tl.float32 and cast once, after the K loop",
        )


@checks("matmul")
def fp32_is_full_precision_unless_tf32_allowed(ex):
    """fp32 inputs match float64 to fp32 accuracy (TF32 only with allow_tf32=True, then within TF32's error)"""
    a, b = operands(64, 80, 300, torch.float32, "contiguous")
    expect_matmul(ex, a, b, describe(a=a, b=b), hint='fp32 inputs need tl.dot(..., input_precision="ieee")')
    got = ex.matmul(a, b, allow_tf32=True)
    expect_tensor(got, shape=(64, 80), dtype=torch.float32, input=describe(a=a, b=b) + ", allow_tf32=True")
    tf32_baseline = baseline(a.to(torch.bfloat16), b.to(torch.bfloat16)).float()  # as coarse as TF32 or coarser
    expect_close(got, oracle(a, b), baseline=tf32_baseline, input=describe(a=a, b=b) + ", allow_tf32=True")


@checks("matmul")
def rejects_what_it_cannot_multiply(ex):
    """mismatched inner dimensions, mixed dtypes, 1-D and 3-D inputs, int inputs raise with a message"""
    device = triton_device()
    for label, a, b in (
        ("a (4, 5), b (6, 3)", torch.randn(4, 5, device=device), torch.randn(6, 3, device=device)),
        ("a float32, b float16", torch.randn(4, 5, device=device), torch.randn(5, 3, device=device).half()),
        ("a (5,), b (5, 3)", torch.randn(5, device=device), torch.randn(5, 3, device=device)),
        ("a (2, 4, 5), b (5, 3)", torch.randn(2, 4, 5, device=device), torch.randn(5, 3, device=device)),
        (
            "a, b int32",
            torch.ones(4, 5, dtype=torch.int32, device=device),
            torch.ones(5, 3, dtype=torch.int32, device=device),
        ),
    ):
        expect_refused(lambda a=a, b=b: ex.matmul(a, b), input=label, hint="check shapes and dtypes before launching")


def spec_largest_offset(shape, strides) -> int:
    """The last element's offset, found by walking to the multi-index (size - 1, ...) one dimension at a time."""
    if any(size == 0 for size in shape):
        return 0
    offset = 0
    for dim in range(len(shape)):
        offset += (shape[dim] - 1) * strides[dim]
    return offset


@checks("matmul")
def largest_offset_of_views(ex):
    """largest_offset on meta tensors (no memory): contiguous, transposed, sliced, expanded, empty, a 3-D permute"""
    big = torch.empty(65536, 65536, dtype=torch.float16, device="meta")
    cases = [
        ("contiguous (3, 4)", torch.empty(3, 4, device="meta")),
        ("(4, 3).T", torch.empty(4, 3, device="meta").T),
        ("x[:, :64] of a (65536, 65536)", big[:, :64]),
        ("x[::2, 5:9] of a (65536, 65536)", big[::2, 5:9]),
        ("(1, 5).expand(7, 5) (stride 0)", torch.empty(1, 5, device="meta").expand(7, 5)),
        ("(0, 5) (no elements)", torch.empty(0, 5, device="meta")),
        ("(2, 3, 4).permute(2, 0, 1)", torch.empty(2, 3, 4, device="meta").permute(2, 0, 1)),
        ("(1, 1)", torch.empty(1, 1, device="meta")),
    ]
    for label, t in cases:
        want = spec_largest_offset(t.shape, t.stride())
        got = ex.largest_offset(t)
        expect(
            got == want,
            "wrong largest offset",
            input=f"{label}: shape {tuple(t.shape)}, strides {t.stride()}",
            expected=want,
            got=got,
            hint="sum of stride * (size - 1) over the dimensions (not stride * size, not numel - 1); 0 when empty",
        )


@checks("matmul")
def refuses_views_that_reach_past_int32(ex):
    """a (65536, 64) column slice of a (65536, 65536) fp16 tensor (meta: no memory): 2**22 elements, offset ~2**32"""
    big = torch.empty(65536, 65536, dtype=torch.float16, device="meta")
    b = torch.empty(64, 32, dtype=torch.float16, device="meta")
    hint = "guard the largest offset (largest_offset(a), largest_offset(b), M * N - 1), not numel(), before launching"
    expect_value_error(
        lambda: ex.matmul(big[:, :64], b), input="a = x[:, :64] of a (65536, 65536) fp16 tensor, b (64, 32)", hint=hint
    )
    a = torch.empty(8, 64, dtype=torch.float16, device="meta")
    expect_value_error(
        lambda: ex.matmul(a, big[::1024, :16]),
        input="a (8, 64), b = x[::1024, :16] of a (65536, 65536) fp16 tensor: (64, 16), strides (2**26, 1)",
        hint=hint,
    )
    a, b = meta_view((3, 1), (1, 1)), meta_view((1, 715827883), (1, 0))  # b expanded: offsets 0, output 2**31 + 1
    expect_value_error(
        lambda: ex.matmul(a, b),
        input="a (3, 1), b (1, 715827883) expanded (stride 0): the (M, N) output reaches offset 2**31",
        hint=hint,
    )


def meta_view(shape, strides):
    """A view with any strides on the meta device: shapes and strides without memory."""
    return torch.empty(2**33, dtype=torch.float16, device="meta").as_strided(shape, strides)


@checks("matmul")
def int32_guard_at_the_boundary(ex):
    """check_int32_offsets on meta views: a largest offset of 2**31 - 1 (in a, in b, in the output) passes, 2**31
    raises ValueError"""
    small_a, small_b = meta_view((2, 64), (64, 1)), meta_view((64, 2), (2, 1))
    cases = [  # (label, a, b, reach)
        ("a (2, 64) with row stride 2**31 - 64", meta_view((2, 64), (2**31 - 64, 1)), small_b, 2**31 - 1),
        ("a (2, 64) with row stride 2**31 - 63", meta_view((2, 64), (2**31 - 63, 1)), small_b, 2**31),
        ("b (64, 2) with column stride 2**31 - 63**2", small_a, meta_view((64, 2), (63, 2**31 - 1 - 63**2)), 2**31 - 1),
        ("b (64, 2) with strides (34087042, 1)", small_a, meta_view((64, 2), (34087042, 1)), 2**31 - 1),
        ("b (64, 2) with strides (34087042, 2)", small_a, meta_view((64, 2), (34087042, 2)), 2**31),
        ("output (2**16, 2**15): a (2**16, 1), b (1, 2**15) expanded", meta_view((2**16, 1), (1, 1)),
         meta_view((1, 2**15), (1, 0)), 2**31 - 1),
        ("output (3, 715827883): 2**31 + 1 elements, b expanded", meta_view((3, 1), (1, 1)),
         meta_view((1, 715827883), (1, 0)), 2**31),
    ]  # fmt: skip
    for label, a, b, reach in cases:
        assert max(spec_largest_offset(a.shape, a.stride()), spec_largest_offset(b.shape, b.stride()),
                   a.shape[0] * b.shape[1] - 1) == reach, label  # fmt: skip
        label = f"{label}: largest offset {reach} = 2**31 {reach - 2**31:+d}"
        if reach >= 2**31:
            expect_value_error(
                lambda a=a, b=b: ex.check_int32_offsets(a, b),
                input=label,
                hint="refuse a largest offset >= 2**31 (the output reaches M * N - 1)",
            )
        else:
            try:
                got = ex.check_int32_offsets(a, b)
            except ValueError as exc:
                expect(
                    False,
                    "refused an operand whose offsets all fit in int32",
                    input=label,
                    expected="no error (2**31 - 1 is the largest int32)",
                    got=repr(exc)[:120],
                    hint="refuse only a largest offset >= 2**31; the output's largest offset is M * N - 1, not M * N",
                )
            expect(
                got == reach,
                "wrong largest offset returned",
                input=label,
                expected=reach,
                got=got,
                hint="return max(largest_offset(a), largest_offset(b), M * N - 1)",
            )


def tuning_key(ex, a, b):
    """The autotuner's key for matmul(a, b): its key names looked up in the kernel's arguments (dtypes are added by
    the autotuner itself and are equal here)."""
    M, K = a.shape
    N = b.shape[1]
    args = {"M": M, "N": N, "K": K, "stride_am": a.stride(0), "stride_ak": a.stride(1), "stride_bk": b.stride(0)}
    args.update({"stride_bn": b.stride(1), "stride_cm": N, "stride_cn": 1})
    return tuple((name, args.get(name)) for name in ex.matmul_kernel_tuned.keys)


@checks("matmul")
def tuning_key_sees_the_layout(ex):
    """the autotune key separates the four K-layouts of A and B at one shape (x @ w and x @ w.T tune separately)"""
    a, b = operands(16, 16, 16, torch.float16, "b transposed (b = w.T, as in F.linear)")
    expect_matmul(ex, a, b, describe(a=a, b=b), hint="the tuned kernel must still compute a @ b")
    M, N, K = 256, 256, 256
    layouts = {
        "a (M, K), b (K, N)": (torch.empty(M, K, device="meta"), torch.empty(K, N, device="meta")),
        "a (M, K), b = w.T": (torch.empty(M, K, device="meta"), torch.empty(N, K, device="meta").T),
        "a = t.T, b (K, N)": (torch.empty(K, M, device="meta").T, torch.empty(K, N, device="meta")),
        "a = t.T, b = w.T": (torch.empty(K, M, device="meta").T, torch.empty(N, K, device="meta").T),
    }
    keys = {label: tuning_key(ex, a, b) for label, (a, b) in layouts.items()}
    names = list(ex.matmul_kernel_tuned.keys)
    expect(
        {"M", "N", "K"} <= set(names),
        "the tuning key must still contain the shape",
        input="matmul_kernel_tuned.keys",
        expected="M, N, K among the keys",
        got=names,
        hint='key=["M", "N", "K", ...]',
    )
    expect(
        len(set(keys.values())) == len(keys),
        "two layouts of the same shape share one tuning key, so the second reuses the first one's winner",
        input=f"M = N = K = {M}, layouts: {', '.join(layouts)}",
        expected="4 different keys",
        got={label: dict(key) for label, key in keys.items()},
        hint='add whether A and B are K-contiguous: key=["M", "N", "K", "stride_ak", "stride_bk"]',
    )


def benchmark(ex):
    """The issue's yardstick: fp16 and bf16 at 4096^3 and 8192^3, against torch.matmul (cuBLAS) eager and compiled."""
    rows = []
    for dtype in (torch.float16, torch.bfloat16):
        for size in (4096, 8192):
            a = torch.randn(size, size, device="cuda", dtype=dtype)
            b = torch.randn(size, size, device="cuda", dtype=dtype)
            flops = 2 * size**3
            shape = f"{size}^3 {str(dtype).removeprefix('torch.')}"
            rows.append(flops_row("matmul (Triton)", shape, lambda a=a, b=b: ex.matmul(a, b), flops))
            rows += baseline_rows("torch.matmul", shape, baseline, (a, b), flops=flops)
    return rows
