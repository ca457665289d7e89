"""Checks for p00.tensor_layout. References: PyTorch itself — `torch.empty(shape).stride()` for contiguous strides,
`torch.empty_strided(shape, strides).view(new_shape)` (raises exactly when a copy is needed) for view strides, and
`Tensor.unfold` for sliding windows — plus hand-derived cases from the lesson's attention head split."""

import math

import torch

from llm_algo.check import Checks, describe, expect, expect_close, expect_tensor, expect_value_error

checks = Checks("p00.tensor_layout")
checks.restrict(
    "contiguous_strides",
    "view_strides",
    forbid=(
        torch.Tensor.stride,
        torch.Tensor.view,
        torch.Tensor.reshape,
        torch.reshape,
        torch.Tensor.view_as,
        torch.Tensor.as_strided,
        torch.as_strided,
    ),
    instead="compute the answer from the integers (PyTorch's own strides and view are the checks' reference)",
)
checks.restrict(
    "sliding_windows",
    forbid=(torch.Tensor.unfold,),
    instead="build the windows with torch.as_strided (Tensor.unfold is the checks' reference)",
)


# ------------------------------------------------------------------------------------------ contiguous_strides

HINT_STRIDES = "stride[d] = product of the sizes after d (size 0 counts as 1); the last stride is 1"


def torch_strides(shape):
    return tuple(torch.empty(shape).stride())


@checks("contiguous_strides")
def attention_shapes_by_hand(ex):
    """(B, T, H, D) = (2, 5, 32, 128) -> (20480, 4096, 128, 1); (T, C) and a 0-d loss"""
    cases = {(2, 5, 32, 128): (20480, 4096, 128, 1), (7, 4096): (4096, 1), (): (), (11,): (1,)}
    for shape, want in cases.items():
        got = ex.contiguous_strides(shape)
        expect(
            isinstance(got, tuple) and all(isinstance(s, int) for s in got),
            "the result is not a tuple of ints",
            input=f"shape={shape}",
            expected=f"{want} (a tuple of Python ints)",
            got=repr(got),
            hint="return tuple(...) of ints, as Tensor.stride() does",
        )
        expect(
            got == want, "wrong strides", input=f"shape={shape}", expected=str(want), got=str(got), hint=HINT_STRIDES
        )


@checks("contiguous_strides")
def random_shapes_match_torch(ex):
    """60 random shapes of 1 to 6 dimensions, with size-1 dims, match torch.empty(shape).stride()"""
    for _ in range(60):
        ndim = int(torch.randint(1, 7, ()))
        shape = tuple(int(s) for s in torch.randint(1, 9, (ndim,)))
        got, want = ex.contiguous_strides(shape), torch_strides(shape)
        expect(
            got == want, "wrong strides", input=f"shape={shape}", expected=str(want), got=str(got), hint=HINT_STRIDES
        )


@checks("contiguous_strides")
def empty_dimensions_count_as_one(ex):
    """size-0 dimensions (an empty batch, a KV cache before the first token) follow PyTorch: they count as 1"""
    for shape in [(3, 0), (0, 4), (2, 0, 5), (0,), (4, 0, 0, 3)]:
        got, want = ex.contiguous_strides(shape), torch_strides(shape)
        expect(
            got == want,
            "wrong strides for a shape with a size-0 dimension",
            input=f"shape={shape}",
            expected=str(want),
            got=str(got),
            hint="multiply by max(size, 1): PyTorch keeps strides positive for empty dimensions",
        )


@checks("contiguous_strides")
def negative_size_refused(ex):
    """a negative size is refused with ValueError"""
    for shape in [(2, -1), (-3,)]:
        expect_value_error(
            lambda s=shape: ex.contiguous_strides(s), f"shape={shape}", "raise ValueError for a size < 0"
        )


# ------------------------------------------------------------------------------------------ view_strides

HINT_VIEW = (
    "group the old dims into chunks where stride[d] == size[d+1] * stride[d+1] (skip size-1 dims); "
    "new dims are filled from the right, contiguous inside a chunk times its base stride"
)


def torch_view(shape, strides, new_shape):
    """PyTorch's answer: the view's strides, or None when view raises."""
    base = torch.empty_strided(shape, strides)
    try:
        return tuple(base.view(new_shape).stride()), tuple(base.view(new_shape).shape)
    except RuntimeError:
        return None, None


def compare_view(ex, shape, strides, new_shape, label=""):
    want, resolved = torch_view(shape, strides, new_shape)
    got = ex.view_strides(tuple(shape), tuple(strides), tuple(new_shape))
    where = label or f"shape={tuple(shape)}, strides={tuple(strides)}, new_shape={tuple(new_shape)}"
    if want is None:
        expect(
            got is None,
            "view needs a copy here, but you returned strides",
            input=where,
            expected="None (torch's view raises)",
            got=str(got),
            hint="a new dimension that spans two chunks cannot be a view; " + HINT_VIEW,
        )
        return
    expect(
        got is not None,
        "view works here without a copy, but you returned None",
        input=where,
        expected=f"strides {want}",
        got="None",
        hint="a non-contiguous tensor can still be viewed inside its chunks; size-1 dims never break a chunk",
    )
    expect(
        isinstance(got, tuple) and len(got) == len(want) and all(isinstance(g, int) for g in got),
        "the result is not a tuple with one stride per new dimension",
        input=where,
        expected=str(want),
        got=repr(got),
        hint="return a tuple of Python ints, one per dimension of new_shape (integer division // for the -1)",
    )
    compared = [d for d, size in enumerate(resolved) if size != 1]
    expect(
        all(got[d] == want[d] for d in compared),
        "wrong strides (dimensions of size 1 are not compared)",
        input=where,
        expected=str(want),
        got=str(got),
        hint=HINT_VIEW,
    )


@checks("view_strides")
def attention_head_split_and_merge(ex):
    """the lesson's cases: head split, the failing merge after transpose, the T = 1 decode merge that works"""
    B, T, H, D = 2, 5, 4, 8
    C = H * D
    cases = [
        ((B, T, C), (T * C, C, 1), (B, T, H, D), "x (B, T, C) contiguous -> view(B, T, H, D)"),
        ((B, T, H, D), (T * C, D, T * D, 1), (B, T, C), "att_out.transpose(1, 2) -> view(B, T, C): needs a copy"),
        ((B, 1, H, D), (C, D, D, 1), (B, 1, C), "T = 1: (B, H, 1, D).transpose(1, 2) -> view(B, 1, C): works"),
        ((B, H, T, D), (T * C, D, C, 1), (B, H, T, 2, 4), "q.transpose(1, 2) -> view(B, H, T, 2, 4): splits D"),
        ((B, H, T, D), (T * C, D, C, 1), (B * H, T, D), "q.transpose(1, 2) -> view(B * H, T, D): needs a copy"),
        ((B, H, T, D), (T * C, D, C, 1), (B, H, -1), "q.transpose(1, 2) -> view(B, H, -1): needs a copy"),
        ((B, T, C), (T * C, C, 1), (-1, C), "x.view(-1, C): tokens flattened for the output head"),
    ]
    for shape, strides, new_shape, label in cases:
        compare_view(ex, shape, strides, new_shape, label=label)


def random_strided_case():
    """A contiguous tensor, then a permutation and a slice or two: the shapes and strides real code produces."""
    ndim = int(torch.randint(2, 5, ()))
    shape = [int(s) for s in torch.randint(1, 5, (ndim,))]
    t = torch.empty(shape)
    if torch.rand(()) < 0.6:
        t = t.permute(*torch.randperm(ndim).tolist())
    if torch.rand(()) < 0.4:
        d = int(torch.randint(0, ndim, ()))
        if t.shape[d] > 1:
            t = t.narrow(d, 0, int(torch.randint(1, t.shape[d], ())))
    if torch.rand(()) < 0.3:
        d = int(torch.randint(0, ndim, ()))
        t = t.unsqueeze(d)
    return tuple(t.shape), tuple(t.stride())


def random_new_shape(numel):
    """A random factorisation of numel into 1 to 4 sizes (with size-1 dims sometimes)."""
    sizes, rest = [], numel
    for _ in range(int(torch.randint(0, 3, ()))):
        divisors = [k for k in range(1, rest + 1) if rest % k == 0]
        k = divisors[int(torch.randint(0, len(divisors), ()))]
        sizes.append(k)
        rest //= k
    sizes.append(rest)
    order = torch.randperm(len(sizes)).tolist()
    return tuple(sizes[i] for i in order)


@checks("view_strides")
def random_views_match_torch(ex):
    """300 random permuted/sliced/unsqueezed tensors and random new shapes agree with torch's view"""
    possible = impossible = 0
    for _ in range(300):
        shape, strides = random_strided_case()
        new_shape = random_new_shape(math.prod(shape))
        compare_view(ex, shape, strides, new_shape)
        if torch_view(shape, strides, new_shape)[0] is None:
            impossible += 1
        else:
            possible += 1
    expect(possible > 20 and impossible > 20, "internal: the random cases lack variety", got=f"{possible}/{impossible}")


@checks("view_strides")
def sliced_and_unit_dimensions(ex):
    """slices whose base stride is not 1, size-1 dims with odd strides, and -1 inference"""
    cases = [
        ((4, 6), (12, 2), (4, 3, 2)),  # x[:, ::2] of a (4, 12): base stride 2 inside the row
        ((4, 6), (12, 2), (24,)),  # ... cannot be flattened
        ((3, 4), (8, 1), (3, 2, 2)),  # x[:, :4] of a (3, 8): rows split, fine
        ((3, 4), (8, 1), (12,)),  # ... but not flattened
        ((5, 1, 6), (6, 77, 1), (30,)),  # a size-1 dim with a stride from a transpose
        ((1, 5, 6), (99, 6, 1), (5, 2, 3)),
        ((6, 1, 4), (4, 4, 1), (2, -1, 2)),
        ((2, 3, 4), (24, 8, 1), (6, 4)),  # x[..., :4] of a (2, 3, 8): batch and rows chain, columns apart
        ((2, 3, 4), (24, 8, 1), (3, 2, 2, 2)),
        ((2, 3, 4), (24, 8, 1), (2, 12)),
        ((2, 3, 4), (1, 2, 6), (2, 12)),  # column-major (Fortran order): only splits and size-1 changes
        ((2, 3, 4), (1, 2, 6), (2, 3, 2, 2)),
        ((4, 3), (0, 1), (2, 2, 3)),  # an expanded (stride-0) KV head: split of the broadcast dim works
        ((4, 3), (0, 1), (12,)),
    ]
    for shape, strides, new_shape in cases:
        compare_view(ex, shape, strides, new_shape)


@checks("view_strides")
def empty_and_zero_d_tensors(ex):
    """a 0-d loss viewed as (1, 1), and tensors with no elements (any same-count view works)"""
    compare_view(ex, (), (), (1, 1), label="a 0-d loss: shape=(), strides=(), new_shape=(1, 1)")
    compare_view(ex, (3, 0), (1, 5), (0, 3, 1), label="shape=(3, 0), strides=(1, 5), new_shape=(0, 3, 1)")
    compare_view(ex, (2, 0, 4), (0, 4, 1), (4, 0, 2), label="shape=(2, 0, 4), strides=(0, 4, 1), new_shape=(4, 0, 2)")


@checks("view_strides")
def bad_requests_refused(ex):
    """element counts that differ, two -1, or a -1 that cannot be inferred are refused with ValueError"""
    for shape, strides, new_shape in [
        ((2, 3), (3, 1), (4, 2)),
        ((2, 3), (3, 1), (-1, -1)),
        ((2, 3), (3, 1), (4, -1)),
        ((2, 3), (3, 1, 1), (6,)),
        ((0, 3), (3, 1), (0, -1)),
    ]:
        expect_value_error(
            lambda a=shape, b=strides, c=new_shape: ex.view_strides(a, b, c),
            f"shape={shape}, strides={strides}, new_shape={new_shape}",
            "refuse with ValueError when the counts differ or -1 is ambiguous, as torch's view does with RuntimeError",
        )


# ------------------------------------------------------------------------------------------ sliding_windows

HINT_WINDOWS = (
    "size (..., (T - W) // S + 1, W); strides (..., S * x.stride(-1), x.stride(-1)); offset x.storage_offset()"
)


def compare_windows(ex, x, window, step, label):
    got = ex.sliding_windows(x, window, step)
    want = x.unfold(-1, window, step)
    expect_tensor(got, shape=want.shape, dtype=x.dtype, input=label, hint=HINT_WINDOWS)
    expect(
        torch.equal(got, want),
        "the windows hold the wrong elements",
        input=label,
        expected=str(want.flatten()[:8].tolist()),
        got=str(got.flatten()[:8].tolist()),
        hint="use x's own strides (the last one need not be 1) and x.storage_offset(); " + HINT_WINDOWS,
    )
    expect(
        got.untyped_storage().data_ptr() == x.untyped_storage().data_ptr(),
        "the windows are a copy, not a view of x's storage",
        input=label,
        expected="a view sharing x's storage",
        got="a new storage",
        hint="torch.as_strided(x, size, stride, x.storage_offset()) makes a view; stack/cat/clone copy",
    )


@checks("sliding_windows")
def token_stream_by_hand(ex):
    """token ids 0..9, window 4, step 2 -> [[0..3], [2..5], [4..7], [6..9]]"""
    tokens = torch.arange(10)
    got = ex.sliding_windows(tokens, 4, 2)
    want = torch.tensor([[0, 1, 2, 3], [2, 3, 4, 5], [4, 5, 6, 7], [6, 7, 8, 9]])
    expect_tensor(got, shape=(4, 4), dtype=torch.int64, input="arange(10), window=4, step=2", hint=HINT_WINDOWS)
    expect(
        torch.equal(got, want),
        "wrong windows",
        input="arange(10), window=4, step=2",
        expected=str(want.tolist()),
        got=str(got.tolist()),
        hint=HINT_WINDOWS,
    )


@checks("sliding_windows")
def batches_and_dtypes_match_unfold(ex):
    """token-id batches and fp16/fp32 hidden states, steps that do not divide T, one window, match unfold"""
    cases = [
        (torch.randint(0, 50_000, (1, 7)), 3, 1),
        (torch.randint(0, 50_000, (3, 17)), 5, 3),  # (17 - 5) % 3 == 0
        (torch.randint(0, 50_000, (2, 18)), 5, 3),  # a tail shorter than a step: dropped
        (torch.randn(2, 3, 16).half(), 16, 1),  # one window
        (torch.randn(4, 9), 1, 4),
        (torch.randn(2, 2, 3, 11, dtype=torch.float64), 4, 2),
    ]
    for x, window, step in cases:
        compare_windows(ex, x, window, step, describe(x=x, window=window, step=step))


@checks("sliding_windows")
def strided_inputs_and_storage_offset(ex):
    """a slice that starts mid-storage, a transposed input (last stride not 1), a slice of a KV cache"""
    stream = torch.randint(0, 32_000, (200,))
    cache = torch.randn(2, 4, 32, 8)  # (B, H, T_max, D): a KV cache
    cases = [
        (stream[37:121], 10, 7, "stream[37:121] (storage offset 37), window=10, step=7"),
        (torch.randn(12, 3).T, 4, 3, "randn(12, 3).T: shape (3, 12), strides (1, 3), window=4, step=3"),
        (cache[:, :, :19, 2], 6, 2, "cache[:, :, :19, 2]: (2, 4, 19), strides (1024, 256, 8), offset 2"),
        (stream[5::3], 5, 5, "stream[5::3]: last stride 3, offset 5, window=5, step=5"),
    ]
    for x, window, step, label in cases:
        compare_windows(ex, x, window, step, label)


@checks("sliding_windows")
def windows_alias_the_input(ex):
    """writing into x shows through every window that covers it (a view, not a copy)"""
    x = torch.randn(3, 20)
    windows = ex.sliding_windows(x, 6, 2)
    x[1, 7] = 1234.5
    want = x.unfold(-1, 6, 2)
    expect_close(
        windows,
        want.double(),
        input="x (3, 20) float32, window=6, step=2; then x[1, 7] = 1234.5",
        hint="return the as_strided view itself (no .clone(), .contiguous() or torch.stack)",
    )


@checks("sliding_windows")
def bad_arguments_refused(ex):
    """window < 1, window > T, step < 1 and a 0-d input are refused with ValueError"""
    x = torch.randn(2, 8)
    for args, label in [
        ((x, 0, 1), "window=0"),
        ((x, 9, 1), "window=9 > T=8"),
        ((x, 3, 0), "step=0"),
        ((x, 3, -2), "step=-2"),
        ((torch.tensor(3.0), 1, 1), "a 0-d x"),
    ]:
        expect_value_error(
            lambda a=args: ex.sliding_windows(*a),
            f"x {tuple(args[0].shape)}, {label}",
            "validate 1 <= window <= T and step >= 1 (as_strided would happily read out of bounds)",
        )
