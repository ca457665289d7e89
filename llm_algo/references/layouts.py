"""Operand layouts for kernel checks: every tensor operand in a memory layout of its own.

A kernel that addresses V with K's strides, or Q as if it were contiguous, computes the right answer whenever the
check builds every operand the same way. Real callers do not: Q, K and V are slices of one fused QKV projection, a
KV cache is padded to a page, a weight arrives transposed. These helpers give each operand of a check a different
layout with the *same values*, so a kernel can only pass by reading each operand through its own strides:

    q, k, v = distinct_layouts(q, k, v)          # fused slice, padded rows, transposed storage, ... in turn
    out = ex.attention(q, k, v)                  # compare with the reference computed on the originals

Every layout is a view into a larger buffer filled with random numbers (not zeros), so a read through the wrong
strides picks up garbage rather than a plausible value. The layouts:

- `fused_slice`: the tensor is one of three equal parts of a bigger tensor along its last dimension (a slice of a
  fused QKV or gate/up projection): the row stride is three times the row length, the storage offset non-zero;
- `padded`: every row is followed by padding (a KV cache padded to a page, a `[:, :N]` window);
- `transposed`: stored with its last two dimensions swapped (`w.T` of a weight kept as (out, in)), so the last
  stride is not 1;
- `outer_padded`: the leading dimensions are padded instead (a batch or head slice of a bigger buffer).

A kernel may refuse a layout it documents as unsupported (TMA's unit last stride, a CUDA kernel that needs
contiguity) with a ValueError: the check then uses `expect_refused_or_correct`. It must never return a wrong result.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

LayoutFn = Callable[[torch.Tensor], torch.Tensor]


def _filled(shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
    """A buffer of random values in `like`'s dtype and device (integers for integer tensors, never zeros)."""
    if like.dtype.is_floating_point or like.dtype.is_complex:
        return torch.randn(shape, device=like.device).to(like.dtype)
    if like.dtype == torch.bool:
        return torch.rand(shape, device=like.device) < 0.5
    info = torch.iinfo(like.dtype)
    return torch.randint(max(info.min, -1000), min(info.max, 1000), shape, device=like.device, dtype=like.dtype)


def fused_slice(t: torch.Tensor, parts: int = 3, index: int = 1) -> torch.Tensor:
    """`t` as part `index` of `parts` equal parts of a bigger tensor along the last dimension (a fused QKV)."""
    if t.dim() == 0:
        return t.clone()
    if t.dim() == 1:  # a column of an (n, parts) tensor: stride `parts`
        full = _filled((t.shape[0], parts), t)
        view = full[:, index]
        view.copy_(t)
        return view
    n = t.shape[-1]
    full = _filled((*t.shape[:-1], parts * n), t)
    view = full[..., index * n : (index + 1) * n]
    view.copy_(t)
    return view


def padded(t: torch.Tensor, pad: int = 5) -> torch.Tensor:
    """`t` with `pad` spare elements after every row (last dimension): row stride = last size + pad. A 1-D tensor
    has no rows: it becomes every `max(2, pad - 3)`-th element of a larger buffer."""
    if t.dim() == 0:
        return t.clone()
    if t.dim() == 1:  # stride max(2, pad - 3): a larger pad gives another stride, so several 1-D operands differ
        step = max(2, pad - 3)
        full = _filled((step * t.shape[0] + pad,), t)
        view = full[pad : pad + step * t.shape[0] : step]
        view.copy_(t)
        return view
    full = _filled((*t.shape[:-1], t.shape[-1] + pad), t)
    view = full[..., : t.shape[-1]]
    view.copy_(t)
    return view


def transposed(t: torch.Tensor) -> torch.Tensor:
    """`t` stored with its last two dimensions swapped: same shape and values, last stride != 1 (2-D and up)."""
    if t.dim() < 2:
        return padded(t)
    storage = _filled((*t.shape[:-2], t.shape[-1], t.shape[-2]), t)
    view = storage.transpose(-1, -2)
    view.copy_(t)
    return view


def outer_padded(t: torch.Tensor, pad: int = 2) -> torch.Tensor:
    """`t` as a window of a buffer padded on its first and second-to-last dimensions (a batch or head slice of a
    bigger buffer), starting one element in; a 2-D tensor is padded on both dimensions, so it is never contiguous."""
    if t.dim() < 2:
        return padded(t, pad)
    grown = {0, t.dim() - 2} if t.dim() > 2 else {0, 1}
    shape = tuple(s + pad if d in grown else s for d, s in enumerate(t.shape))
    full = _filled(shape, t)
    view = full[tuple(slice(1, 1 + s) if d in grown else slice(None) for d, s in enumerate(t.shape))]
    view.copy_(t)
    return view


LAYOUTS: dict[str, LayoutFn] = {
    "fused_slice": fused_slice,
    "padded": padded,
    "transposed": transposed,
    "outer_padded": outer_padded,
}

UNIT_LAST_STRIDE: tuple[str, ...] = ("fused_slice", "padded", "outer_padded")
"""The layouts whose last dimension keeps stride 1, for kernels that document a contiguous last dimension (an
attention kernel's head dim, a softmax row): `distinct_layouts(q, k, v, order=UNIT_LAST_STRIDE)`."""


def with_layout(t: torch.Tensor, layout: str) -> torch.Tensor:
    """`t`'s values in the named layout (one of `LAYOUTS`)."""
    try:
        make = LAYOUTS[layout]
    except KeyError:
        raise ValueError(f"unknown layout {layout!r}; one of {sorted(LAYOUTS)}") from None
    return make(t)


def _signature(t: torch.Tensor) -> tuple:
    """What a kernel that borrowed another operand's strides would get right: the strides of every dimension of
    size > 1 (a size-1 dimension's stride is never used)."""
    return tuple(stride if size > 1 else None for size, stride in zip(t.shape, t.stride(), strict=True))


def distinct_layouts(*tensors: torch.Tensor, order: tuple[str, ...] | None = None) -> tuple[torch.Tensor, ...]:
    """Each tensor's values in a layout of its own, none contiguous, no two with the same strides where their shapes
    agree: `order` (default: fused_slice, padded, transposed, outer_padded, then the cycle again with other
    paddings) names the layout of each tensor in turn."""
    order = order or tuple(LAYOUTS)
    out: list[torch.Tensor] = []
    for i, t in enumerate(tensors):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"distinct_layouts takes tensors; argument {i} is {type(t).__name__}")
        name = order[i % len(order)]
        rounds = i // len(order)
        if name == "padded":
            view = padded(t, pad=5 + 2 * rounds)
        elif name == "outer_padded":
            view = outer_padded(t, pad=2 + rounds)
        elif name == "fused_slice":
            view = fused_slice(t, parts=3 + rounds, index=1)
        else:
            view = with_layout(t, name)
        seen = [_signature(o) for o in out]
        extra = 1
        while t.numel() > 1 and (_signature(view) in seen or view.is_contiguous()) and extra < 16:
            view = padded(view, pad=5 + 2 * rounds + extra)  # another row padding until it is a layout of its own
            extra += 1
        out.append(view)
    return tuple(out)


def expect_own_layouts(*tensors: torch.Tensor) -> None:
    """For a check's own use: fail loudly (AssertionError, a bug in the check) when two operands share strides or one
    is contiguous, so a check that promises distinct layouts keeps its promise."""
    seen: dict[tuple, int] = {}
    for i, t in enumerate(tensors):
        if t.numel() <= 1:
            continue
        assert not t.is_contiguous(), f"operand {i} {tuple(t.shape)} is contiguous"
        sig = _signature(t)
        assert sig not in seen, f"operands {seen[sig]} and {i} share the layout {sig}"
        seen[sig] = i


def describe_layouts(**tensors: torch.Tensor) -> str:
    """A check's input column for operands in their own layouts: `q (2, 6, 32) strides (576, 96, 1), k ...`."""
    return ", ".join(f"{name} {tuple(t.shape)} strides {t.stride()}" for name, t in tensors.items())


INT32_WRAP_STRIDE = 2**30 + 2**12
"""The stride `past_int32_offsets` gives its dimension: an int32 kernel argument (below 2**31), whose index 2 is past
2**31 elements."""


def past_int32_offsets(t: torch.Tensor, dim: int = 0, fill: float = float("nan")) -> torch.Tensor:
    """`t`'s values in a view whose `dim` has stride `INT32_WRAP_STRIDE` (2**30 + 4096): every stride still fits an
    int32 kernel argument, but index 2 of `dim` starts past 2**31 elements, where `index * stride` computed in int32
    wraps. The rest of the buffer holds `fill` (NaN: a wrapped read is never a plausible value). The check's work stays
    that of `t` (a few rows); its memory is (size - 1) * 2**30 elements: 4.3 GB of fp16 for 3 rows. For compiled
    checks on a GPU (`requires_compiled=True`): an allocation this size is out of reach on the CPU."""
    dim = dim % t.dim()
    if t.shape[dim] < 3:
        raise ValueError(f"dimension {dim} of size {t.shape[dim]} never reaches index 2: give it 3 or more")
    rest = [s for d, s in enumerate(t.shape) if d != dim]
    inner = 1
    strides: list[int] = []
    for size in reversed(rest):
        strides.insert(0, inner)
        inner *= size
    if inner > INT32_WRAP_STRIDE:
        raise ValueError(f"the other dimensions hold {inner} elements, more than the stride {INT32_WRAP_STRIDE}")
    strides.insert(dim, INT32_WRAP_STRIDE)
    buffer = torch.full(((t.shape[dim] - 1) * INT32_WRAP_STRIDE + inner,), fill, dtype=t.dtype, device=t.device)
    view = buffer.as_strided(t.shape, strides)
    view.copy_(t)
    return view


def views_past_int32(t: torch.Tensor, dims: dict[int, str]):
    """For each `dim: name` in turn, `(name, view)` with `view = past_int32_offsets(t, dim)`; the view's buffer is
    released (and the CUDA cache emptied) before the next one, so a check holds one 4 GB buffer at a time:

        for name, huge_q in views_past_int32(q, {0: "batch", 1: "head", 2: "row"}):
            expect_close(ex.attention(huge_q, k, v), reference(q, k, v), ...)
    """
    for dim, name in dims.items():
        view = past_int32_offsets(t, dim=dim)
        try:
            yield name, view
        finally:
            del view
            if t.is_cuda:
                torch.cuda.empty_cache()
