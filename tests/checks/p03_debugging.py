"""Checks for p03.debugging. References: `torch.amax`, `torch.bincount` and `torch.index_select`, compared with
exact equality (a max, a count and a copy have no rounding), and hand-checkable cases. Every kernel is first called
directly on windows of larger buffers (gate checks): input guards hold values a correct kernel never reads (+inf
for a max, NaN for a copy), output guards hold values it must never overwrite. Small shapes under the interpreter,
larger ones compiled."""

import torch
import torch.nn.functional as F

from llm_algo.bench import bandwidth_row, baseline_rows, copy_row
from llm_algo.check import Checks, describe, expect, expect_refused, expect_refused_or_correct, expect_tensor
from llm_algo.device import triton_compiled, triton_device, triton_dtypes
from llm_algo.references.kernels import expect_guard_untouched, guarded
from llm_algo.references.layouts import distinct_layouts, expect_own_layouts

checks = Checks("p03.debugging", triton=True)
checks.restrict(
    "row_max",
    kernel=True,
    forbid=[torch.amax, torch.Tensor.amax, torch.max, torch.Tensor.max],
    instead="reduce each row in your @triton.jit kernel (torch.amax is the checks' reference)",
)
checks.restrict(
    "histogram",
    kernel=True,
    forbid=[torch.bincount, torch.Tensor.bincount, torch.histc, torch.Tensor.histc, torch.histogram],
    instead="count with tl.atomic_add in your @triton.jit kernel (torch.bincount is the checks' reference)",
)
checks.restrict(
    "embedding",
    kernel=True,
    forbid=[F.embedding, torch.embedding, torch.nn.Embedding, torch.index_select, torch.Tensor.index_select],
    instead="gather the rows in your @triton.jit kernel (torch.index_select is the checks' reference)",
)


def expect_exact(got, expected, *, input: str, hint: str, what: str = "output") -> None:
    """Bit-exact equality (NaN never equals): the right answer for a max, a count or a copy."""
    expect_tensor(got, shape=expected.shape, dtype=expected.dtype, input=input, what=what)
    wrong = got.cpu() != expected.cpu()
    if bool(wrong.any()):
        first = tuple(int(i) for i in wrong.nonzero()[0])
        expect(
            False,
            f"{what} is not exact: {int(wrong.sum())} of {wrong.numel()} elements differ",
            input=input,
            expected=f"{expected.cpu()[first].item()} at index {first}",
            got=f"{got.cpu()[first].item()}",
            hint=hint,
        )


def window_of(shape, pad, fill, *, offset=(0, 0), dtype=torch.float32):
    """(buffer, window): a 2-D buffer of shape + pad + offset filled with `fill`, and a window starting at `offset`."""
    rows, cols = shape[0] + pad[0] + offset[0], shape[1] + pad[1] + offset[1]
    buffer = torch.full((rows, cols), fill, dtype=dtype, device=triton_device())
    return buffer, buffer[offset[0] : offset[0] + shape[0], offset[1] : offset[1] + shape[1]]


# ----------------------------------------------------------------------------------------- row_max

ROW_MAX_HINT = "mask = cols < N with other=-inf, and an accumulator that starts at -inf (the identity of max)"


@checks("row_max", gate=True)
def row_max_kernel_stays_in_bounds(ex):
    """row_max_kernel on a (5, 37) window whose rows are followed by +inf guard columns; the output guard survives"""
    M, N, block = 5, 37, 16  # 3 blocks per row, the last one 5/16 full
    storage, x = window_of((M, N), (2, 11), float("inf"))
    x.copy_(torch.randn(M, N) - 3.0)  # mostly negative rows
    out_buffer, out = guarded((M,), (3,), device=triton_device())
    ex.row_max_kernel[(M,)](x, out, N, x.stride(0), x.stride(1), BLOCK_N=block)
    label = f"x (5, 37) float32, a window with strides {x.stride()} and +inf after each row, BLOCK_N=16"
    expect_guard_untouched(out_buffer, (M,), input=label, hint="store exactly one value per row, at out_ptr + row")
    expect_exact(out, x.amax(dim=1), input=label, hint=ROW_MAX_HINT + "; inf means a guard column was read")


@checks("row_max")
def all_negative_rows_by_hand(ex):
    """rows of negative numbers, shorter than a block: the max is negative, never 0"""
    x = torch.tensor([[-3.0, -1.0, -2.0, -5.0, -4.0], [-7.5, -7.25, -8.0, -9.0, -7.0]], device=triton_device())
    expect_exact(
        ex.row_max(x, block_n=8),
        torch.tensor([-1.0, -7.0], device=triton_device()),
        input="x = [[-3, -1, -2, -5, -4], [-7.5, -7.25, -8, -9, -7]], block_n=8",
        hint=ROW_MAX_HINT,
    )


@checks("row_max")
def matches_amax_in_any_layout(ex):
    """1x1, 7x300, 4x128, one row, transposed and sliced inputs, fp32 and fp16: equal to torch.amax exactly"""
    shapes = [(1, 1), (7, 300), (4, 128), (1, 1000)] + ([(4096, 8193), (3, 2**20 + 3)] if triton_compiled() else [])
    for dtype in triton_dtypes():
        for M, N in shapes:
            for layout in ("contiguous", "transposed", "every other column"):
                if layout == "transposed":
                    x = torch.randn(N, M, device=triton_device()).to(dtype).t()
                elif layout == "every other column":
                    x = torch.randn(M, 2 * N, device=triton_device()).to(dtype)[:, ::2]
                else:
                    x = torch.randn(M, N, device=triton_device()).to(dtype)
                for block in (16, 64) if not triton_compiled() else (1024,):
                    label = f"{describe(x=x)}, {layout}, strides {x.stride()}, block_n={block}"
                    got = ex.row_max(x, block_n=block)
                    expect_exact(
                        got,
                        x.amax(dim=1),
                        input=label,
                        hint="load x[row, col] at x_ptr + row * stride_xm + col * stride_xn; " + ROW_MAX_HINT,
                    )


@checks("row_max")
def row_max_refuses_bad_input(ex):
    """a block size that is not a power of two, or a 3-D tensor, raises before launching"""
    x = torch.randn(3, 10, device=triton_device())
    expect_refused(
        lambda: ex.row_max(x, block_n=48),
        input="block_n=48",
        hint="tl.arange needs a power of two: check block_n & (block_n - 1) == 0 in the launcher",
    )
    expect_refused(
        lambda: ex.row_max(torch.randn(2, 3, 4, device=triton_device())),
        input="x (2, 3, 4)",
        hint="check x.dim() == 2",
    )


@checks("row_max")
def one_column_blocks(ex):
    """block_n = 1 is a power of two (2**0) and works; block_n = 0 is refused"""
    x = torch.randn(3, 5, device=triton_device())
    expect_exact(ex.row_max(x, block_n=1), x.amax(dim=1), input="x (3, 5), block_n=1", hint=ROW_MAX_HINT)
    expect_refused(
        lambda: ex.row_max(x, block_n=0),
        input="block_n=0",
        hint="a power of two is > 0 with one bit set: block_n > 0 and block_n & (block_n - 1) == 0",
    )


# ----------------------------------------------------------------------------------------- histogram

HIST_GUARD = -7777
HIST_HINT = "tl.atomic_add(hist_ptr + bins, 1, mask=...) with the tail mask and 0 <= bins < num_bins in the mask"


def reference_counts(values: torch.Tensor, num_bins: int) -> torch.Tensor:
    kept = values[(values >= 0) & (values < num_bins)].long().cpu()
    return torch.bincount(kept, minlength=num_bins).to(torch.int32)


@checks("histogram", gate=True)
def histogram_kernel_stays_in_bounds(ex):
    """out-of-range values (-3, num_bins, num_bins + 5) are ignored: the guards on both sides of hist survive"""
    num_bins, pad, n, block = 6, 8, 300, 64  # 5 programs, the last one 44/64 full
    values = torch.randint(0, num_bins, (n,), dtype=torch.int32)
    values[::7] = torch.tensor([-3, num_bins, num_bins + 5], dtype=torch.int32).repeat(43)[: len(values[::7])]
    values = values.to(triton_device())
    buffer = torch.full((num_bins + 2 * pad,), HIST_GUARD, dtype=torch.int32, device=triton_device())
    hist = buffer[pad : pad + num_bins]
    hist.zero_()
    snapshot = buffer.clone()
    ex.histogram_kernel[(triton_grid(n, block),)](values, hist, n, num_bins, BLOCK=block)
    label = f"{n} int32 values in [-3, {num_bins + 5}], num_bins={num_bins}, BLOCK=64, {pad} guard ints each side"
    expect_guard_untouched(
        buffer,
        (num_bins,),
        offset=(pad,),
        snapshot=snapshot,
        input=label,
        hint="the address hist_ptr + bins comes from data: mask out bins < 0 and bins >= num_bins",
    )
    expect_exact(hist, reference_counts(values, num_bins).to(hist.device), input=label, hint=HIST_HINT)


def triton_grid(n: int, block: int) -> int:
    return (n + block - 1) // block


@checks("histogram")
def one_bin_hit_by_every_lane(ex):
    """37 copies of the value 3 (one block, 37 colliding lanes): hist = [0, 0, 0, 37, 0]"""
    values = torch.full((37,), 3, dtype=torch.int32, device=triton_device())
    expect_exact(
        ex.histogram(values, 5, block=64),
        torch.tensor([0, 0, 0, 37, 0], dtype=torch.int32, device=triton_device()),
        input="37 x the value 3, num_bins=5, block=64",
        hint="a load + store loses every collision in a block; tl.atomic_add counts them all",
    )


@checks("histogram")
def matches_bincount(ex):
    """n = 1, 127, 1000, 4097 over 1, 4 and 50 bins, int32 and int64, with out-of-range values: equal to bincount"""
    sizes = [1, 127, 1000, 4097] + ([2**24 + 3] if triton_compiled() else [])
    for n in sizes:
        for num_bins in (1, 4, 50):
            for dtype in (torch.int32, torch.int64):
                values = torch.randint(-2, num_bins + 2, (n,), device=triton_device()).to(dtype)
                block = 1024 if triton_compiled() else 128
                label = f"{describe(x=values)}, values in [-2, {num_bins + 1}], num_bins={num_bins}, block={block}"
                got = ex.histogram(values, num_bins, block=block)
                expect_exact(
                    got,
                    reference_counts(values, num_bins).to(triton_device()),
                    input=label,
                    hint=HIST_HINT + "; allocate the histogram with torch.zeros",
                )


@checks("histogram")
def histogram_of_a_strided_tensor(ex):
    """values every third element of a buffer (a column of a fused tensor): refused (the lesson asks for contiguous
    values) or counted exactly"""
    values = torch.randint(-2, 12, (300,), device=triton_device()).to(torch.int32)
    (lv,) = distinct_layouts(values)
    label = f"x (300,) int32 with stride {lv.stride()}, num_bins=10"
    expect_refused_or_correct(
        lambda: ex.histogram(lv, 10, block=128),
        lambda got: expect_exact(got, reference_counts(values, 10).to(triton_device()), input=label, hint=HIST_HINT),
        input=label,
        hint="refuse a non-contiguous x with a ValueError before launching, or read it through its stride",
    )


@checks("histogram")
def histogram_refuses_bad_input(ex):
    """float values, a 2-D tensor or num_bins = 0 raise before launching"""
    expect_refused(
        lambda: ex.histogram(torch.rand(10, device=triton_device()), 4),
        input="x float32",
        hint="accept int32 and int64 only",
    )
    expect_refused(
        lambda: ex.histogram(torch.zeros(2, 5, dtype=torch.int32, device=triton_device()), 4),
        input="x (2, 5)",
        hint="check x.dim() == 1",
    )
    expect_refused(
        lambda: ex.histogram(torch.zeros(5, dtype=torch.int32, device=triton_device()), 0),
        input="num_bins=0",
        hint="check num_bins >= 1",
    )


# ----------------------------------------------------------------------------------------- embedding

EMBED_HINT = "address table[row, col] as table_ptr + row * stride_tv + col * stride_td; mask loads and stores"


def launch_embedding_kernel(ex, ids, table, out, block):
    grid = (ids.numel(), triton_grid(table.shape[1], block))
    ex.embedding_kernel[grid](
        ids,
        table,
        out,
        table.shape[0],
        table.shape[1],
        table.stride(0),
        table.stride(1),
        out.stride(0),
        BLOCK_D=block,
    )


@checks("embedding", gate=True)
def embedding_kernel_stays_in_bounds(ex):
    """a (7, 37) table view with NaN guards, a (9, 37) output window with NaN guards, BLOCK_D=16"""
    V, D, n, block = 7, 37, 9, 16
    _, table = window_of((V, D), (2, 5), float("nan"), offset=(1, 0))
    table.copy_(torch.randn(V, D))
    ids = torch.tensor([0, 6, 3, 3, 1, 6, 2, 5, 4], device=triton_device())
    out_buffer, out = guarded((n, D), (1, 6), device=triton_device())
    launch_embedding_kernel(ex, ids, table, out, block)
    label = f"table (7, 37) view with strides {table.stride()}, ids {ids.tolist()}, out (9, 37) with strides (43, 1)"
    expect_guard_untouched(out_buffer, (n, D), input=label, hint="mask the store: cols < D")
    expect_exact(out, table[ids], input=label, hint=EMBED_HINT + "; NaN means a table guard was read")


@checks("embedding")
def rows_by_hand(ex):
    """table = arange(15).view(5, 3), ids [4, 0, 4, 2]: rows 4, 0, 4, 2"""
    table = torch.arange(15.0, device=triton_device()).view(5, 3)
    ids = torch.tensor([4, 0, 4, 2], device=triton_device())
    expect_exact(
        ex.embedding(ids, table, block_d=4),
        torch.tensor([[12.0, 13.0, 14.0], [0.0, 1.0, 2.0], [12.0, 13.0, 14.0], [6.0, 7.0, 8.0]]).to(triton_device()),
        input="table = arange(15).view(5, 3), ids [4, 0, 4, 2], block_d=4",
        hint=EMBED_HINT,
    )


@checks("embedding")
def matches_index_select_on_views(ex):
    """contiguous tables, column slices, row-offset views and a transposed table; fp32/fp16; int32/int64 ids"""
    cases = [(11, 37, 16, 64), (3, 1, 1, 8), (40, 129, 7, 64)] + (
        [(50000, 1024, 4096, 1024)] if triton_compiled() else []
    )
    for dtype in triton_dtypes():
        for V, D, n, block in cases:
            for layout in ("contiguous", "first D of 2D columns", "rows 3.. of a bigger table", "transposed"):
                if layout == "first D of 2D columns":
                    table = torch.randn(V, 2 * D, device=triton_device()).to(dtype)[:, :D]
                elif layout == "rows 3.. of a bigger table":
                    table = torch.randn(V + 3, D, device=triton_device()).to(dtype)[3:]
                elif layout == "transposed":
                    table = torch.randn(D, V, device=triton_device()).to(dtype).t()
                else:
                    table = torch.randn(V, D, device=triton_device()).to(dtype)
                for id_dtype in (torch.int64, torch.int32):
                    ids = torch.randint(0, V, (n,), device=triton_device()).to(id_dtype)
                    label = f"{describe(table=table, ids=ids)}, {layout}, strides {table.stride()}, block_d={block}"
                    got = ex.embedding(ids, table, block_d=block)
                    expect_exact(got, table[ids.long()], input=label, hint=EMBED_HINT)
                    expect(
                        got.is_contiguous(),
                        "the output is not contiguous",
                        input=label,
                        expected="a contiguous (n, D) tensor",
                        got=f"strides {got.stride()}",
                        hint="allocate with torch.empty((n, D))",
                    )


@checks("embedding")
def operands_in_their_own_layouts(ex):
    """ids a column of a wider tensor (stride 3) and the table with padded rows; then ids stride 2 and a transposed
    table: table[ids] exactly"""
    for order in (("fused_slice", "padded"), ("padded", "transposed")):
        table = torch.randn(40, 37, device=triton_device())
        ids = torch.randint(0, 40, (19,), device=triton_device())
        lids, ltable = distinct_layouts(ids, table, order=order)
        expect_own_layouts(lids, ltable)
        label = f"ids (19,) int64 strides {lids.stride()}, table (40, 37) strides {ltable.stride()}"
        expect_exact(
            ex.embedding(lids, ltable, block_d=16),
            table[ids],
            input=label,
            hint=EMBED_HINT + "; the kernel reads ids_ptr + token: pass ids.contiguous()",
        )


@checks("embedding")
def refuses_ids_outside_the_table(ex):
    """ids equal to V, above V, or negative raise (an IndexError-like error) instead of reading other memory"""
    V, D = 6, 5
    _, table = window_of((V, D), (4, 0), float("nan"), offset=(2, 0))  # rows -2..V+3 exist, so nothing faults
    table.copy_(torch.randn(V, D))
    for bad in ([0, 6, 1], [7], [2, -1], [-2, 9]):
        ids = torch.tensor(bad, device=triton_device())
        expect_refused(
            lambda ids=ids: ex.embedding(ids, table),
            input=f"table (6, 5), ids {bad}",
            hint="check 0 <= ids.min() and ids.max() < V on the host and raise IndexError",
        )


@checks("embedding")
def kernel_masks_the_last_column_block(ex):
    """embedding_kernel with a table whose next column holds random numbers and a NaN-guarded output: column D is
    neither read into nor written past the output"""
    V, D, n, block = 7, 37, 5, 16
    table = torch.randn(V, D + 11, device=triton_device())[:, :D]  # column D exists and is not NaN
    ids = torch.tensor([6, 0, 3, 3, 1], device=triton_device())
    out_buffer, out = guarded((n, D), (1, 6), device=triton_device())
    launch_embedding_kernel(ex, ids, table, out, block)
    label = f"table (7, 37) a column slice with strides {table.stride()}, out (5, 37) with NaN guards, BLOCK_D=16"
    expect_guard_untouched(out_buffer, (n, D), input=label, hint="mask = cols < D, on the load and the store")
    expect_exact(out, table[ids], input=label, hint=EMBED_HINT)


@checks("embedding")
def refuses_ids_that_are_not_a_1d_integer_tensor(ex):
    """float ids and a 2-D batch of ids raise with a message before launching"""
    table = torch.randn(6, 5, device=triton_device())
    for label, ids in (
        ("ids float32 [0., 2., 5.]", torch.tensor([0.0, 2.0, 5.0], device=triton_device())),
        ("ids (2, 2)", torch.tensor([[0, 1], [2, 3]], device=triton_device())),
    ):
        expect_refused(
            lambda ids=ids: ex.embedding(ids, table),
            input=label,
            hint="accept 1-D int32/int64 ids only (ids.dim() == 1, ids.dtype in (torch.int32, torch.int64))",
        )


def benchmark(ex):
    """The three kernels at sizes that fill an H200, next to PyTorch (eager and compiled) and a copy."""
    rows = []
    x = torch.randn(16384, 8192, device="cuda", dtype=torch.float16)
    moved = x.numel() * x.element_size()
    rows.append(bandwidth_row("row_max", "16384x8192 fp16", lambda: ex.row_max(x, 1024), moved))
    rows += baseline_rows("torch.amax", "16384x8192 fp16", lambda t: t.amax(dim=1), (x,), bytes_moved=moved)
    values = torch.randint(0, 256, (2**26,), device="cuda", dtype=torch.int32)
    moved = values.numel() * 4
    rows.append(bandwidth_row("histogram", "2^26 int32, 256 bins", lambda: ex.histogram(values, 256, 1024), moved))
    rows.append(
        bandwidth_row("torch.bincount", "2^26 int32, 256 bins", lambda: torch.bincount(values, minlength=256), moved)
    )
    table = torch.randn(128256, 4096, device="cuda", dtype=torch.float16)
    ids = torch.randint(0, 128256, (16384,), device="cuda")
    moved = 2 * ids.numel() * 4096 * 2
    rows.append(bandwidth_row("embedding", "16384 ids x 4096 fp16", lambda: ex.embedding(ids, table, 1024), moved))
    rows += baseline_rows("F.embedding", "16384 ids x 4096 fp16", F.embedding, (ids, table), bytes_moved=moved)
    rows.append(copy_row(16384 * 8192 * 2))
    return rows
