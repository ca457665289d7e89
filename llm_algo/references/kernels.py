"""Reference helpers for kernel checks: guard buffers around outputs, and inputs that a kernel must refuse.

A kernel that forgets a mask writes past its output. Into memory the allocator owns, that corrupts the process
(silently, or as a crash or hang much later); into memory a check owns, it is a clean, reportable failure. So a
kernel lesson's memory-safety check (`@checks(..., gate=True)`) hands the kernel *windows* of larger buffers:
`guarded(...)` allocates them, `expect_guard_untouched(...)` checks that nothing outside the window was written.

Reads past an input are caught by `llm_algo.check.bounds`, which checks every access that Triton's interpreter
makes; gate checks run interpreted on every device (`llm_algo.grading.interpreted`).
"""

from __future__ import annotations

import torch

from ..check.api import expect


def guarded(
    shape: tuple[int, ...], pad: tuple[int, ...], *, device: str, fill: float = float("nan"), dtype=torch.float32
):
    """(buffer, window): a buffer of `shape + pad` filled with `fill`, and its leading `shape` window (a view whose
    strides are the buffer's, so the window is not contiguous when any pad but the first is non-zero)."""
    buffer = torch.full(tuple(s + p for s, p in zip(shape, pad, strict=True)), fill, device=device, dtype=dtype)
    return buffer, buffer[tuple(slice(0, s) for s in shape)]


def random_window(shape: tuple[int, ...], pad: tuple[int, ...], *, device: str, dtype=torch.float32) -> torch.Tensor:
    """Random inputs as a window of a larger random buffer, so that reads past the window stay in memory we own."""
    full = torch.randn(tuple(s + p for s, p in zip(shape, pad, strict=True)), device=device).to(dtype)
    return full[tuple(slice(0, s) for s in shape)]


def expect_guard_untouched(
    buffer: torch.Tensor,
    window_shape: tuple[int, ...],
    *,
    input: str,
    hint: str,
    offset: tuple[int, ...] | None = None,
    snapshot: torch.Tensor | None = None,
) -> None:
    """Every element of `buffer` outside the window (`window_shape` elements from `offset`, by default the leading
    corner) still holds its guard: NaN, or, given `snapshot` (a copy of the buffer taken before the call), what the
    snapshot holds there. Use a snapshot for integer buffers, and for in-place kernels: they read what they write,
    so a stray write of a NaN guard puts NaN back and would go unnoticed."""
    start = offset or (0,) * len(window_shape)
    outside = torch.ones_like(buffer, dtype=torch.bool)
    outside[tuple(slice(o, o + s) for o, s in zip(start, window_shape, strict=True))] = False
    changed = ~buffer.isnan() if snapshot is None else buffer != snapshot
    overwritten = int(changed[outside].sum())
    expect(
        overwritten == 0,
        "the kernel wrote outside its output",
        input=input,
        expected="every guard element outside the output untouched" + (" (NaN)" if snapshot is None else ""),
        got=f"{overwritten} of {int(outside.sum())} guard elements overwritten",
        hint=hint,
    )
