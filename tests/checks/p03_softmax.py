"""Checks for p03.softmax. References: `torch.softmax` and `torch.logsumexp` in float64, closed forms
(softmax of [0, ln 2, ln 3] is [1, 2, 3] / 6), and guard elements around the output that catch writes a
missing mask lets through. The guard checks are gates (see llm_algo.references.kernels)."""

import math

import torch

from llm_algo.bench import bandwidth_row, baseline_rows, copy_row
from llm_algo.check import Checks, describe, expect, expect_close, expect_refused, expect_tensor
from llm_algo.check.restrictions import LOGSUMEXP, SOFTMAX
from llm_algo.device import triton_compiled, triton_device, triton_dtypes
from llm_algo.references.kernels import expect_guard_untouched, guarded, random_window
from llm_algo.references.layouts import (
    INT32_WRAP_STRIDE,
    UNIT_LAST_STRIDE,
    describe_layouts,
    views_past_int32,
    with_layout,
)

checks = Checks("p03.softmax", triton=True)
checks.restrict(
    "softmax",
    "softmax_long_rows",
    kernel=True,
    forbid=[*SOFTMAX, *LOGSUMEXP],
    instead="compute the max, the sum and the quotient in your @triton.jit kernel (torch.softmax is the reference)",
)
checks.restrict(
    "online_softmax_stats",
    forbid=[*SOFTMAX, *LOGSUMEXP],
    instead="update the running max and the rescaled running sum block by block (torch.logsumexp is the reference)",
)
HINT_STABLE = "subtract the row max before exp; pad masked lanes with -inf (the identity of max), not 0"


def oracle(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x.double().cpu(), dim=-1)


def guarded_rows(n_rows: int, n_cols: int, pad: int):
    """x and out as (n_rows, n_cols) windows of wider buffers (row stride n_cols + pad), out's buffer NaN-filled."""
    x = random_window((n_rows, n_cols), (1, pad), device=triton_device())
    buffer, out = guarded((n_rows, n_cols), (1, pad), device=triton_device())
    return x, buffer, out


def random_cases():
    """(rows, cols) not multiples of any block, a batch of one, one column; bigger when compiled."""
    shapes = [(1, 1), (37, 129), (5, 1000), (3, 64)]
    return shapes + ([(4096, 3000), (3, 16384)] if triton_compiled() else [])


def check_random_rows(fn, shapes, hint, **kwargs):
    for dtype in triton_dtypes():
        for n_rows, n_cols in shapes:
            x = (torch.randn(n_rows, n_cols, device=triton_device()) * 3).to(dtype)
            got = fn(x, **kwargs)
            label = describe(x=x) + (f", {kwargs}" if kwargs else "")
            expect_tensor(got, shape=x.shape, dtype=dtype, device=x.device.type, input=label)
            expect_close(got, oracle(x), baseline=torch.softmax(x, dim=-1), input=label, hint=hint)


def check_large_and_masked_logits(fn, **kwargs):
    """logits up to ~±3000 (exp overflows without the max subtraction) and -inf entries (masks)"""
    n_cols = 300
    x = torch.randn(6, n_cols, device=triton_device()) * 1000
    x[1, 5:200] = float("-inf")  # a padding mask over most of a row
    x[2, :-1] = float("-inf")  # a single finite entry: probability exactly 1
    x[3, -1] = 5000.0  # the max in the last block
    got = fn(x, **kwargs)
    label = describe(x=x) + " with |logits| up to ~5000 and -inf entries"
    expect(
        bool(torch.isfinite(got).all()),
        "inf or nan in the output",
        input=label,
        expected="finite probabilities",
        got=f"{int((~torch.isfinite(got)).sum())} non-finite values",
        hint=HINT_STABLE,
    )
    expect_close(got, oracle(x), input=label, hint=HINT_STABLE)


# ------------------------------------------------------------------------------------------------ softmax


@checks("softmax", gate=True)
def kernel_stays_inside_strided_rows(ex):
    """calls softmax_kernel on a strided 7x100 window (BLOCK_SIZE 128); the guard elements must survive"""
    n_rows, n_cols = 7, 100
    x, buffer, out = guarded_rows(n_rows, n_cols, pad=40)
    ex.softmax_kernel[(n_rows,)](out, x, x.stride(0), out.stride(0), n_cols, BLOCK_SIZE=128)
    label = f"x = a (7, 100) window with row stride {x.stride(0)}, out a window with row stride {out.stride(0)}"
    expect_guard_untouched(buffer, (n_rows, n_cols), input=label, hint="mask the store with cols < n_cols")
    expect_close(out, oracle(x), input=label, hint="address row r at in_ptr + r * in_row_stride, not r * n_cols")


def check_every_unit_stride_layout(fn, n_rows, n_cols, **kwargs):
    """x in each layout with contiguous rows (a fused slice, padded rows, a window of a bigger buffer), each read
    through its own row stride, vs torch.softmax in float64 of the same values."""
    x = torch.randn(n_rows, n_cols, device=triton_device())
    for layout in UNIT_LAST_STRIDE:
        view = with_layout(x, layout)
        label = describe_layouts(x=view) + f" ({layout})"
        y = fn(view, **kwargs)
        expect_tensor(y, shape=x.shape, dtype=x.dtype, input=label)
        expect_close(y, oracle(x), baseline=torch.softmax(x, -1), input=label, hint=HINT_ROW_STRIDE)


HINT_ROW_STRIDE = "address row r at in_ptr + r * x.stride(0) (the row stride you are given), never r * n_cols"


@checks("softmax")
def rows_in_every_layout(ex):
    """x (7, 100) as a slice of a fused tensor, with padded rows and as a window of a bigger buffer: each read
    through its own row stride"""
    check_every_unit_stride_layout(ex.softmax, 7, 100)


@checks("softmax", requires_compiled=True)
def row_offsets_past_2_31_elements(ex):
    """x of 3 rows of 1000 fp16 entries whose row stride is 2**30 + 4096 (4.3 GB): row 2 starts past 2**31 elements,
    where an int32 row * stride wraps"""
    x = torch.randn(3, 1000, device=triton_device()).half()
    for _, huge in views_past_int32(x, {0: "row"}):
        label = describe_layouts(x=huge) + f" (row 2 at element {2 * INT32_WRAP_STRIDE})"
        hint = "cast the row index to int64 before row * stride (2 * stride passes 2**31 here)"
        expect_close(ex.softmax(huge), oracle(x), baseline=torch.softmax(x.float(), -1).half(), input=label, hint=hint)


@checks("softmax")
def hand_checkable_rows(ex):
    """softmax([0, ln 2, ln 3]) = [1, 2, 3] / 6; a constant row is uniform"""
    x = torch.tensor([[0.0, math.log(2.0), math.log(3.0)], [7.0, 7.0, 7.0]], device=triton_device())
    expected = torch.tensor([[1 / 6, 2 / 6, 3 / 6], [1 / 3, 1 / 3, 1 / 3]], dtype=torch.float64)
    expect_close(ex.softmax(x), expected, input="x=[[0, ln 2, ln 3], [7, 7, 7]]", hint=HINT_STABLE)


@checks("softmax")
def random_rows_and_dtypes(ex):
    """random rows of odd lengths (1, 129, 1000 ...), fp32 and fp16 (bf16 too when compiled), vs torch.softmax"""
    check_random_rows(ex.softmax, random_cases(), HINT_STABLE)


@checks("softmax")
def large_logits_and_masks(ex):
    """logits up to ~±5000 and -inf entries: stable, finite, exact where one entry is finite"""
    check_large_and_masked_logits(ex.softmax)


@checks("softmax")
def rejects_rows_it_cannot_handle(ex):
    """a 1-D input, a transposed input and a row longer than MAX_FUSED_COLS raise with a message"""
    too_long = ex.MAX_FUSED_COLS + 1
    for label, x in (
        ("x (10,)", torch.randn(10, device=triton_device())),
        ("x = t.T, column stride != 1", torch.randn(8, 4, device=triton_device()).T),
        (f"x (1, {too_long})", torch.randn(1, too_long, device=triton_device())),
    ):
        expect_refused(
            lambda x=x: ex.softmax(x),
            input=label,
            hint="check x.dim() == 2, x.stride(1) == 1 and n_cols <= MAX_FUSED_COLS first",
        )


@checks("softmax")
def strided_rows_and_the_longest_fused_row(ex):
    """rows read through the input's own row stride (an expanded row, stride 0); a row of exactly MAX_FUSED_COLS
    columns still fits"""
    check_strided_rows(ex.softmax)
    x = torch.randn(1, ex.MAX_FUSED_COLS, device=triton_device())
    label = describe(x=x) + " (n_cols == MAX_FUSED_COLS)"
    try:
        got = ex.softmax(x)
    except NotImplementedError:
        raise
    except Exception as exc:
        expect(
            False,
            "a row of exactly MAX_FUSED_COLS was refused",
            input=label,
            expected="its softmax",
            got=f"{type(exc).__name__}: {exc}",
            hint="refuse n_cols > MAX_FUSED_COLS, not n_cols >= MAX_FUSED_COLS",
        )
    expect_close(got, oracle(x), input=label, hint=HINT_STABLE)


def check_strided_rows(fn, **kwargs):
    """One row expanded to 4 (x.stride(0) == 0, x.stride(1) == 1): read rows through x.stride(0), write them
    through out.stride(0). The row sits at the start of a larger buffer, so a read with the wrong stride stays in
    memory the check owns, and a write with the wrong stride stays inside the output."""
    n_rows, n_cols = 4, 130
    base = torch.randn(n_rows * n_cols, device=triton_device()) * 3
    x = base[:n_cols].expand(n_rows, n_cols)
    label = f"x = one row of {n_cols} logits expanded to {tuple(x.shape)}, x.stride() = {x.stride()}" + (
        f", {kwargs}" if kwargs else ""
    )
    expect_close(
        fn(x, **kwargs),
        oracle(x),
        input=label,
        hint="pass x.stride(0) for the input rows and out.stride(0) for the output rows",
    )


# ----------------------------------------------------------------------------------- online_softmax_stats


def prefix_stats(x: torch.Tensor, block_size: int):
    """The definition: max and sum(exp(x - max)) of every prefix that ends at a block boundary (float64)."""
    x = x.double()
    ms, ds = [], []
    for end in range(block_size, x.shape[1] + block_size, block_size):
        prefix = x[:, :end]
        m = prefix.max(dim=1).values
        safe = torch.where(m == float("-inf"), torch.zeros_like(m), m)
        ms.append(m)
        ds.append(torch.exp(prefix - safe[:, None]).sum(dim=1))
    return torch.stack(ms, dim=1), torch.stack(ds, dim=1)


@checks("online_softmax_stats")
def hand_checkable_prefixes(ex):
    """x = [[1, 2, 3, 4]], blocks of 2: m = [2, 4], d = [1 + e^-1, 1 + e^-1 + e^-2 + e^-3]"""
    m, d = ex.online_softmax_stats(torch.tensor([[1.0, 2.0, 3.0, 4.0]], dtype=torch.float64), 2)
    e = math.exp
    label = "x=[[1, 2, 3, 4]], block_size=2"
    expect_close(m, torch.tensor([[2.0, 4.0]], dtype=torch.float64), input=label, what="m")
    expect_close(
        d,
        torch.tensor([[1 + e(-1), 1 + e(-1) + e(-2) + e(-3)]], dtype=torch.float64),
        input=label,
        what="d",
        hint="when the max grows from 2 to 4, multiply the old sum by exp(2 - 4) before adding",
    )


@checks("online_softmax_stats")
def every_prefix_matches_the_definition(ex):
    """random rows, block sizes that do and do not divide the row, max in the last block; m + ln d = logsumexp"""
    for n_cols, block_size in ((10, 3), (64, 8), (7, 16), (100, 1)):
        x = torch.randn(5, n_cols, dtype=torch.float64) * 4
        x[0, -1] = 50.0  # the max arrives last: every earlier sum must be rescaled
        m, d = ex.online_softmax_stats(x, block_size)
        want_m, want_d = prefix_stats(x, block_size)
        label = describe(x=x, block_size=block_size)
        expect_tensor(m, shape=want_m.shape, dtype=x.dtype, input=label, what="m")
        expect_tensor(d, shape=want_d.shape, dtype=x.dtype, input=label, what="d")
        expect_close(m, want_m, input=label, what="m", hint="m_j = max(m_{j-1}, max of block j)")
        expect_close(
            d, want_d, input=label, what="d", hint="d_j = d_{j-1} * exp(m_{j-1} - m_j) + sum(exp(block - m_j))"
        )
        expect_close(m[:, -1] + d[:, -1].log(), torch.logsumexp(x, dim=1), input=label, what="m + ln d")


@checks("online_softmax_stats")
def masked_blocks_and_huge_logits(ex):
    """a first block that is all -inf gives m = -inf, d = 0 (not nan); logits of 1e4 stay finite"""
    x = torch.randn(3, 12, dtype=torch.float64) * 1e4
    x[0, :8] = float("-inf")  # two fully masked blocks, then finite values
    m, d = ex.online_softmax_stats(x, 4)
    want_m, want_d = prefix_stats(x, 4)
    label = describe(x=x) + ", row 0 starts with 8 -inf entries, block_size=4"
    expect(
        not bool(d.isnan().any()),
        "nan in the running sum",
        input=label,
        expected=f"d[0] = {want_d[0].tolist()}",
        got=f"d[0] = {d[0].tolist()}",
        hint="when the new max is -inf, subtract 0 instead: exp(-inf - (-inf)) is nan",
    )
    expect_close(m, want_m, input=label, what="m")
    expect_close(d, want_d, input=label, what="d", hint="rescale by exp(m_old - m_new) computed with the -inf-safe max")


# -------------------------------------------------------------------------------------- softmax_long_rows


@checks("softmax_long_rows", gate=True)
def online_kernel_stays_inside_strided_rows(ex):
    """calls softmax_online_kernel on a strided 5x300 window with BLOCK_SIZE 64; the guard elements must survive"""
    n_rows, n_cols = 5, 300
    x, buffer, out = guarded_rows(n_rows, n_cols, pad=70)
    ex.softmax_online_kernel[(n_rows,)](out, x, x.stride(0), out.stride(0), n_cols, BLOCK_SIZE=64)
    label = f"x = a (5, 300) window with row stride {x.stride(0)}, BLOCK_SIZE=64 (5 blocks, the last one partial)"
    expect_guard_untouched(
        buffer, (n_rows, n_cols), input=label, hint="mask both passes' loads and the store with start + cols < n_cols"
    )
    expect_close(out, oracle(x), input=label, hint="pad with -inf in both passes; rescale d when the max grows")


@checks("softmax_long_rows")
def hand_checkable_across_blocks(ex):
    """softmax([0, ln 2, ln 3]) = [1, 2, 3] / 6 with blocks of 2 columns"""
    x = torch.tensor([[0.0, math.log(2.0), math.log(3.0)]], device=triton_device())
    expected = torch.tensor([[1 / 6, 2 / 6, 3 / 6]], dtype=torch.float64)
    expect_close(
        ex.softmax_long_rows(x, block_size=2),
        expected,
        input="x=[[0, ln 2, ln 3]], block_size=2",
        hint="the second block raises the max from ln 2 to ln 3: rescale the running sum",
    )


@checks("softmax_long_rows")
def random_rows_many_blocks(ex):
    """random rows over several blocks (block 64 and 256), odd lengths, fp32 and fp16, vs torch.softmax"""
    for block_size in (64, 256):
        check_random_rows(ex.softmax_long_rows, random_cases(), HINT_STABLE, block_size=block_size)


@checks("softmax_long_rows")
def large_logits_and_masks_across_blocks(ex):
    """logits up to ~±5000, -inf runs longer than a block, the max in the last block"""
    check_large_and_masked_logits(ex.softmax_long_rows, block_size=64)


@checks("softmax_long_rows")
def long_rows_in_every_layout(ex):
    """x (5, 300) as a slice of a fused tensor, with padded rows and as a window of a bigger buffer, block 64: each
    read through its own row stride"""
    check_every_unit_stride_layout(ex.softmax_long_rows, 5, 300, block_size=64)


@checks("softmax_long_rows")
def strided_rows_and_refused_inputs(ex):
    """rows read through the input's own row stride (an expanded row, stride 0); a 1-D or transposed input raises"""
    check_strided_rows(ex.softmax_long_rows, block_size=64)
    for label, x in (
        ("x (10,)", torch.randn(10, device=triton_device())),
        ("x = t.T, column stride != 1", torch.randn(8, 4, device=triton_device()).T),
    ):
        expect_refused(
            lambda x=x: ex.softmax_long_rows(x), input=label, hint="check x.dim() == 2 and x.stride(1) == 1 first"
        )


def _torch_softmax(x):
    return torch.softmax(x, dim=-1)


def benchmark(ex):
    """The issue's yardstick: 65536 x 4096 fp16 (fused), and 4096 x 65536 fp16 (online), next to a copy."""
    rows = []
    for (n_rows, n_cols), name, fn in (
        ((65536, 4096), "softmax (fused)", ex.softmax),
        ((4096, 65536), "softmax_long_rows (online)", ex.softmax_long_rows),
    ):
        x = torch.randn(n_rows, n_cols, device="cuda", dtype=torch.float16)
        moved = 2 * x.numel() * x.element_size()
        shape = f"{n_rows}x{n_cols} fp16"
        rows.append(bandwidth_row(name, shape, lambda fn=fn, x=x: fn(x), moved))
        rows += baseline_rows("torch.softmax", shape, _torch_softmax, (x,), bytes_moved=moved)
    rows.append(copy_row(65536 * 4096 * 2))
    return rows
