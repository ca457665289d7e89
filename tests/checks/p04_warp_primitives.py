"""Checks for p04.warp_primitives. References: float64 `torch.softmax`, sums and maxima over lane groups computed with
`reshape(..., 32 // width, width)` reductions, hand-checkable cases.

The lane-model exercises run on every machine. `shfl_xor` (given in the set-up cell) is replaced while a check runs by
a recorder that calls the checks' own copy of the permutation, counts the shuffles and their offsets, and returns NaN
for a read from a lane outside the mask: a butterfly that skips a step, crosses a group or uses a partial mask is
caught by its values, and a learner who computes the answer without shuffles by the count.

The CUDA C++ exercise's checks need a GPU (`requires_cuda=True`): on a CPU they read *needs a GPU*, never passed."""

from __future__ import annotations

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
    replacing,
)
from llm_algo.check.restrictions import LOGSUMEXP, SOFTMAX
from llm_algo.cuda.inline import TORCH_CHECK_ERRORS
from llm_algo.references.layouts import LAYOUTS, describe_layouts, distinct_layouts, expect_own_layouts

REDUCTIONS = [
    torch.sum,
    torch.Tensor.sum,
    torch.max,
    torch.Tensor.max,
    torch.amax,
    torch.Tensor.amax,
    torch.nansum,
    torch.cumsum,
    torch.Tensor.cumsum,
    torch.mean,
    torch.Tensor.mean,
]

checks = Checks("p04.warp_primitives")
checks.restrict(
    "warp_reduce",
    forbid=REDUCTIONS,
    instead="combine lanes with shfl_xor and elementwise + / torch.maximum (reductions are the checks' reference)",
)
checks.restrict(
    "warp_softmax",
    forbid=[*SOFTMAX, *LOGSUMEXP, *REDUCTIONS],
    instead="reduce across lanes with your warp_allreduce (shfl_xor); torch.softmax is the checks' reference",
)
checks.restrict(
    "warp_softmax_cuda",
    forbid=[*SOFTMAX, *LOGSUMEXP],
    instead="compute the softmax in your __global__ kernel (torch.softmax is the checks' reference)",
)

WARP = 32
FULL = 0xFFFFFFFF


def permute_xor(values: torch.Tensor, lane_mask: int, mask: int) -> torch.Tensor:
    """The checks' own shuffle: lane i receives lane (i ^ lane_mask); a lane outside the mask, or a read from one,
    yields NaN."""
    expect(
        isinstance(lane_mask, int) and 0 <= lane_mask < WARP,
        "shfl_xor was called with an invalid lane mask",
        input="a butterfly step",
        expected="an int offset in [0, 32)",
        got=repr(lane_mask),
        hint="the offsets of a butterfly over `width` lanes are width // 2, width // 4, ..., 1",
    )
    out = torch.empty_like(values)
    for lane in range(WARP):
        source = lane ^ lane_mask
        inside = (mask >> lane) & 1 and (mask >> source) & 1
        out[..., lane] = values[..., source] if inside else float("nan")
    return out


class ShuffleRecorder:
    def __init__(self):
        self.calls: list[tuple[int, int]] = []

    def __call__(self, values, lane_mask, mask=FULL):
        expect(
            isinstance(values, torch.Tensor) and values.shape[-1:] == (WARP,),
            "shfl_xor was called on something that is not one value per lane",
            input="a butterfly step",
            expected="a tensor (..., 32)",
            got=f"{type(values).__name__} {tuple(getattr(values, 'shape', ()))}",
            hint="keep the lanes as the last dimension, of size 32",
        )
        self.calls.append((lane_mask, int(mask)))
        return permute_xor(values, lane_mask, int(mask))


def recording_shuffles(ex):
    return replacing(ex, "shfl_xor", ShuffleRecorder())


def group_reference(values: torch.Tensor, op: str, width: int) -> torch.Tensor:
    """The op over each aligned group of `width` lanes, broadcast back to the lanes (float64)."""
    v = values.double()
    grouped = v.reshape(*v.shape[:-1], WARP // width, width)
    reduced = grouped.sum(-1, keepdim=True) if op == "sum" else grouped.amax(-1, keepdim=True)
    return reduced.expand_as(grouped).reshape(v.shape)


# ----------------------------------------------------------------------------------------- warp_reduce


@checks("warp_reduce")
def reduce_hand_checkable(ex):
    """lane i holds i: the sum is 496 and the max 31 in every lane; with width 16, 120 in lanes 0..15 and 376 in 16..31"""
    lanes = torch.arange(WARP, dtype=torch.float32)
    for op, width, expected in (
        ("sum", 32, torch.full((WARP,), 496.0)),
        ("max", 32, torch.full((WARP,), 31.0)),
        ("sum", 16, torch.cat([torch.full((16,), 120.0), torch.full((16,), 376.0)])),
    ):
        with recording_shuffles(ex):
            got = ex.warp_allreduce(lanes.clone(), op, width)
        expect_close(
            got,
            expected.double(),
            input=f"values = [0, 1, ..., 31], op={op!r}, width={width}",
            hint="offsets width // 2, ..., 1; values = op(values, shfl_xor(values, offset)) at each step",
        )


@checks("warp_reduce")
def reduce_all_widths_against_group_reductions(ex):
    """random (5, 3, 32) float32 values, every width 2..32, sum and max (including all-negative values for max),
    against float64 group reductions; exactly log2(width) shuffles, all with the full mask"""
    g = torch.Generator().manual_seed(0)
    for op in ("sum", "max"):
        for width in (2, 4, 8, 16, 32):
            values = torch.randn(5, 3, WARP, generator=g) - (5.0 if op == "max" else 0.0)
            label = f"values (5, 3, 32) float32, op={op!r}, width={width}"
            with recording_shuffles(ex) as recorder:
                got = ex.warp_allreduce(values.clone(), op, width)
            expect_close(
                got,
                group_reference(values, op, width),
                baseline=group_reference(values, op, width).float(),
                input=label,
                hint="the offsets of a group of `width` lanes are width // 2, width // 4, ..., 1 (never width or more: "
                "that crosses into the next group)",
            )
            offsets = sorted(lane_mask for lane_mask, _ in recorder.calls)
            expected_offsets = sorted(1 << k for k in range(width.bit_length() - 1))
            expect(
                offsets == expected_offsets and all(mask == FULL for _, mask in recorder.calls),
                "the butterfly used other shuffles",
                input=label,
                expected=f"one shfl_xor per offset {expected_offsets}, each with the full mask",
                got=str(recorder.calls),
                hint="log2(width) steps, one shfl_xor(values, offset, FULL_MASK) each",
            )


@checks("warp_reduce")
def reduce_keeps_shape_and_dtype(ex):
    """a single warp (32,) and a float64 batch (2, 32) keep their shape and dtype; special values: +inf in one lane
    gives +inf for sum and max"""
    for values in (torch.randn(WARP), torch.randn(2, WARP, dtype=torch.float64)):
        with recording_shuffles(ex):
            got = ex.warp_allreduce(values.clone(), "sum")
        expect_tensor(got, shape=tuple(values.shape), dtype=values.dtype, input=describe(values=values))
        expect_close(got, group_reference(values, "sum", WARP), input=describe(values=values), hint="sum all 32 lanes")
    values = torch.zeros(WARP)
    values[7] = float("inf")
    for op in ("sum", "max"):
        with recording_shuffles(ex):
            got = ex.warp_allreduce(values.clone(), op)
        expect(
            bool(torch.isinf(got).all()),
            "a lane holding +inf did not reach every lane",
            input=f"zeros with +inf in lane 7, op={op!r}",
            expected="+inf in all 32 lanes",
            got=str(got.tolist()),
            hint="five steps, offsets 16, 8, 4, 2, 1",
        )


@checks("warp_reduce")
def reduce_rejects_bad_input(ex):
    """op='mean', width 64, 3 or 0 raise ValueError"""
    values = torch.randn(WARP)
    for kwargs, label in (
        ({"op": "mean"}, "op='mean'"),
        ({"width": 64}, "width=64 (a warp has 32 lanes)"),
        ({"width": 3}, "width=3 (not a power of two)"),
        ({"width": 0}, "width=0"),
    ):
        expect_refused(
            lambda kwargs=kwargs: ex.warp_allreduce(values.clone(), **kwargs),
            input=label,
            hint="check op in ('sum', 'max') and width in (2, 4, 8, 16, 32) before shuffling",
            errors=(ValueError,),
        )


# ----------------------------------------------------------------------------------------- warp_softmax


def softmax_reference(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x.double(), dim=-1)


def run_softmax(ex, x: torch.Tensor, *, input: str):
    with recording_shuffles(ex) as recorder:
        got = ex.warp_softmax(x.clone())
    expect_tensor(got, shape=tuple(x.shape), dtype=torch.float32, input=input)
    return got, recorder


HINT_SOFTMAX = (
    "per-lane max over the lane's columns (pad with -inf), butterfly max, per-lane sum of exp(x - m) (pad with 0), "
    "butterfly sum, then exp(x - m) / s"
)


@checks("warp_softmax")
def softmax_hand_checkable(ex):
    """[0, ln 2, ln 3, ...]: [1, 2, 3] / 6; a single column gives 1"""
    x = torch.tensor([[0.0, 0.6931471805599453, 1.0986122886681098]])
    got, _ = run_softmax(ex, x, input="x = [[0, ln 2, ln 3]]")
    expect_close(
        got, torch.tensor([[1.0, 2.0, 3.0]], dtype=torch.float64) / 6, input="x = [[0, ln 2, ln 3]]", hint=HINT_SOFTMAX
    )
    x = torch.tensor([[-3.5], [2.0]])
    got, _ = run_softmax(ex, x, input="x = [[-3.5], [2.0]] (one column)")
    expect_close(got, torch.ones(2, 1, dtype=torch.float64), input="x = [[-3.5], [2.0]]", hint=HINT_SOFTMAX)


@checks("warp_softmax")
def softmax_rows_of_any_length(ex):
    """(R, L) for L = 1, 5, 31, 32, 33, 64, 100, 257, 40 rows of 45, and zero rows of 5, against float64
    torch.softmax, with exactly 10 full-mask shuffles (5 for the max, 5 for the sum); rows of only negative numbers;
    -inf entries"""
    g = torch.Generator().manual_seed(1)
    for rows, length in ((3, 1), (2, 5), (4, 31), (2, 32), (3, 33), (2, 64), (5, 100), (2, 257), (40, 45), (0, 5)):
        x = torch.randn(rows, length, generator=g) * 3
        label = f"x ({rows}, {length}) float32"
        got, recorder = run_softmax(ex, x, input=label)
        expect_close(got, softmax_reference(x), baseline=torch.softmax(x, -1), input=label, hint=HINT_SOFTMAX)
        expect(
            len(recorder.calls) == 10 and all(mask == FULL for _, mask in recorder.calls),
            "the softmax did not reduce across lanes with two full-mask butterflies",
            input=label,
            expected="10 calls of shfl_xor (5 for the max, 5 for the sum), full mask",
            got=str(recorder.calls),
            hint="one warp_allreduce(..., 'max') and one warp_allreduce(..., 'sum') over (R, 32) per-lane values",
        )
    x = -torch.rand(3, 20, generator=g) * 5 - 1  # every entry negative: a max padded with 0 would be wrong
    got, _ = run_softmax(ex, x, input="x (3, 20), every entry in [-6, -1]")
    expect_close(
        got,
        softmax_reference(x),
        baseline=torch.softmax(x, -1),
        input="x (3, 20), every entry in [-6, -1]",
        hint="pad the lanes past the row's end with -inf for the max (0 is not the identity of max)",
    )
    x = torch.randn(2, 40, generator=g)
    x[0, 3] = x[1, 39] = float("-inf")
    got, _ = run_softmax(ex, x, input="x (2, 40) with a -inf in each row")
    expect_close(
        got,
        softmax_reference(x),
        baseline=torch.softmax(x, -1),
        input="x (2, 40) with -inf entries",
        hint=HINT_SOFTMAX,
    )


@checks("warp_softmax")
def softmax_large_logits(ex):
    """rows with values around +-1000, a row whose max (500) is past the first 32 columns, and a row of equal values:
    the row max must be subtracted before exp"""
    g = torch.Generator().manual_seed(2)
    x = torch.randn(3, 70, generator=g) + torch.tensor([[1000.0], [-1000.0], [88.0]])
    got, _ = run_softmax(ex, x, input="x (3, 70): rows around 1000, -1000, 88")
    expect_close(
        got,
        softmax_reference(x),
        baseline=torch.softmax(x, -1),
        input="x (3, 70): rows around 1000, -1000, 88",
        hint="subtract the row max before exp: exp(1000) is inf in float32",
    )
    x = torch.randn(2, 100, generator=g)
    x[0, 50] = x[1, 99] = 500.0  # the max sits in a later chunk: lanes must take the max over all their columns
    label = "x (2, 100) ~ N(0, 1) with 500 at column 50 (row 0) and 99 (row 1)"
    got, _ = run_softmax(ex, x, input=label)
    expect_close(
        got,
        softmax_reference(x),
        baseline=torch.softmax(x, -1),
        input=label,
        hint="each lane's max must cover all its columns l, l + 32, l + 64, ... (every chunk), not the first 32",
    )
    x = torch.full((1, 45), 7.0)
    got, _ = run_softmax(ex, x, input="x (1, 45) all 7.0")
    expect_close(got, torch.full((1, 45), 1 / 45, dtype=torch.float64), input="x (1, 45) all 7.0", hint=HINT_SOFTMAX)


@checks("warp_softmax")
def softmax_rejects_bad_input(ex):
    """float64, 1-D, 3-D and zero-column inputs raise TypeError/ValueError"""
    for x, label in (
        (torch.randn(2, 5, dtype=torch.float64), "x (2, 5) float64"),
        (torch.randn(5), "x (5,) 1-D"),
        (torch.randn(2, 3, 4), "x (2, 3, 4) 3-D"),
        (torch.randn(3, 0), "x (3, 0): no columns"),
    ):
        expect_refused(
            lambda x=x: ex.warp_softmax(x),
            input=label,
            hint="check for a 2-D float32 tensor with at least one column",
            errors=(TypeError, ValueError),
        )


# ----------------------------------------------------------------------------------------- warp_softmax_cuda (GPU)


@checks("warp_softmax_cuda", requires_cuda=True)
def cuda_hand_checkable(ex):
    """[[0, ln 2, ln 3]] gives [[1, 2, 3]] / 6 on the GPU"""
    module = ex.load_warp_softmax()
    x = torch.tensor([[0.0, 0.6931471805599453, 1.0986122886681098]], device="cuda")
    got = module.warp_softmax_cuda(x)
    torch.cuda.synchronize()
    expect_close(
        got.cpu(),
        torch.tensor([[1.0, 2.0, 3.0]], dtype=torch.float64) / 6,
        input="x = [[0, ln 2, ln 3]]",
        hint="max by warp_max, sum of expf(x - m) by warp_sum, then expf(x - m) / s",
    )


@checks("warp_softmax_cuda", requires_cuda=True)
def cuda_rows_of_any_length(ex):
    """(R, L) for R = 1, 3, 4, 5, 1001 and L = 1, 7, 31, 32, 33, 100, 1000, 4097 against float64, plus rows around
    +-1000; zero rows give an empty result"""
    module = ex.load_warp_softmax()
    for rows, length in ((1, 1), (3, 7), (4, 31), (5, 32), (5, 33), (1001, 100), (7, 1000), (3, 4097)):
        x = torch.randn(rows, length, device="cuda") * 3
        label = describe(x=x) + " on cuda"
        got = module.warp_softmax_cuda(x)
        torch.cuda.synchronize()
        expect_tensor(got, shape=(rows, length), dtype=torch.float32, device="cuda", input=label)
        expect_close(
            got.cpu(),
            softmax_reference(x.cpu()),
            baseline=torch.softmax(x, -1).cpu(),
            input=label,
            hint="every lane must take part in the shuffles: lanes with no column use -INFINITY (max) and 0 (sum)",
        )
    x = torch.randn(6, 300, device="cuda") + torch.tensor([[1000.0], [-1000.0], [88.0], [0.0], [50.0], [-88.0]]).cuda()
    got = module.warp_softmax_cuda(x)
    torch.cuda.synchronize()
    expect_close(
        got.cpu(),
        softmax_reference(x.cpu()),
        input="x (6, 300) with rows around 1000, -1000, 88, 0, 50, -88",
        hint="subtract the row max before expf",
    )
    empty = module.warp_softmax_cuda(torch.empty(0, 10, device="cuda"))
    torch.cuda.synchronize()
    expect_tensor(empty, shape=(0, 10), dtype=torch.float32, device="cuda", input="x (0, 10)")


@checks("warp_softmax_cuda", requires_cuda=True, gate=True)
def cuda_writes_only_its_rows(ex):
    """x is the leading R rows of a buffer whose next rows are NaN, so a warp that reads a row it does not own brings
    NaN into the result: R = 2, 5, 9 (the last block's spare warps must not touch memory), lengths 50 and 129"""
    module = ex.load_warp_softmax()
    for rows, length in ((2, 50), (5, 129), (9, 129)):
        full = torch.randn(rows + 3, length, device="cuda")
        full[rows:] = float("nan")  # a warp that reads past its row count brings NaN in
        x = full[:rows]
        label = f"x ({rows}, {length}) = the leading rows of a buffer whose next 3 rows are NaN"
        got = module.warp_softmax_cuda(x)
        torch.cuda.synchronize()
        expect_close(
            got.cpu(),
            softmax_reference(x.cpu()),
            input=label,
            hint="a warp whose row is >= rows must return before touching memory",
        )


@checks("warp_softmax_cuda", requires_cuda=True)
def cuda_operands_in_their_own_layouts(ex):
    """x (5, 100) as a slice of a fused tensor, with padded rows, transposed, and a window of a padded buffer: refused
    (RuntimeError from TORCH_CHECK) or normalised correctly, never read as if contiguous"""
    module = ex.load_warp_softmax()
    x = torch.randn(5, 100, device="cuda") * 3
    for layout in LAYOUTS:
        (lx,) = distinct_layouts(x, order=(layout,))
        expect_own_layouts(lx)
        label = f"x {layout}: " + describe_layouts(x=lx)
        hint = "the kernel reads row r at x + r * cols: TORCH_CHECK(x.is_contiguous(), ...) (or use x.stride(0))"

        def check_softmax(got, label=label, hint=hint):
            torch.cuda.synchronize()
            expect_tensor(got, shape=(5, 100), dtype=torch.float32, device="cuda", input=label)
            expect_close(got.cpu(), softmax_reference(x.cpu()), input=label, hint=hint)

        expect_refused_or_correct(
            lambda lx=lx: module.warp_softmax_cuda(lx), check_softmax, input=label, hint=hint, errors=TORCH_CHECK_ERRORS
        )
        torch.cuda.synchronize()


@checks("warp_softmax_cuda", requires_cuda=True)
def cuda_refuses_bad_input(ex):
    """float64, non-contiguous, 1-D, zero-column and CPU inputs raise RuntimeError (TORCH_CHECK)"""
    module = ex.load_warp_softmax()
    cases = [
        (torch.randn(4, 8, device="cuda", dtype=torch.float64), "x (4, 8) float64", "TORCH_CHECK the dtype"),
        (torch.randn(8, 4, device="cuda").t(), "x (4, 8) transposed", "TORCH_CHECK(x.is_contiguous(), ...)"),
        (torch.randn(8, device="cuda"), "x (8,) 1-D", "TORCH_CHECK(x.dim() == 2, ...)"),
        (torch.randn(4, 0, device="cuda"), "x (4, 0)", "TORCH_CHECK at least one column"),
        (torch.randn(4, 8), "x (4, 8) on the CPU", "TORCH_CHECK(x.is_cuda(), ...)"),
    ]
    for x, label, hint in cases:
        expect_refused(lambda x=x: module.warp_softmax_cuda(x), input=label, hint=hint, errors=(RuntimeError,))
        torch.cuda.synchronize()


def benchmark(ex):
    """warp_softmax_cuda vs torch.softmax vs a copy of the same bytes, at (32768, 4096) and (8192, 128256) fp32."""
    module = ex.load_warp_softmax()
    rows = []
    for r, length in ((32768, 4096), (8192, 128256)):
        x = torch.randn(r, length, device="cuda")
        moved = 2 * x.numel() * x.element_size()
        shape = f"({r}, {length}) fp32"
        rows.append(bandwidth_row("warp_softmax_cuda", shape, lambda x=x: module.warp_softmax_cuda(x), moved))
        rows.append(bandwidth_row("torch.softmax", shape, lambda x=x: torch.softmax(x, dim=-1), moved))
        rows.append(copy_row(x.numel() * x.element_size()))
        del x
    return rows
