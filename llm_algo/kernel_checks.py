"""Helpers for checking kernels: guard buffers, inputs that must be refused, gate checks run in the interpreter.

A kernel that forgets a mask writes past its output. Into memory the allocator owns, that corrupts the process
(silently, or as a crash or hang much later); into memory a check owns, it is a clean, reportable failure. So a
kernel lesson's memory-safety check (`@checks(..., gate=True)`) hands the kernel *windows* of larger buffers:
`guarded(...)` allocates them, `expect_guard_untouched(...)` checks that nothing outside the window was written.

Reads past an input are caught by `llm_algo.bounds`, which checks every access that Triton's interpreter makes. A
GPU compiles kernels, and a compiled kernel cannot be checked; so that a gate check gives the same verdict on every
device, `run_check` runs it inside `interpreted_kernels(namespace)`, which on the compiled path hands the check the
namespace's kernels as Triton's interpreter runs them (on the CPU they already are).
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Iterator

import torch

from . import device as device_policy
from .checking import CheckFailed, expect


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


def expect_refused(call: Callable[[], object], *, input: str, hint: str) -> None:
    """`call()` must raise (any exception but NotImplementedError, which still means not attempted)."""
    try:
        call()
    except (NotImplementedError, CheckFailed):  # not attempted; or a read out of bounds (llm_algo.bounds)
        raise
    except Exception:
        return
    expect(
        False,
        "an input the function cannot handle was accepted",
        input=input,
        expected="an exception with a message",
        got="no error",
        hint=hint,
    )


# ----------------------------------------------------------------------------- gate checks run interpreted everywhere


@contextlib.contextmanager
def checked_kernels(namespace: dict, *, gate: bool) -> Iterator[None]:
    """What `run_check` runs a check in: accesses out of bounds raise (llm_algo.bounds), and a gate check's kernels
    run in the interpreter on every device."""
    from . import bounds

    with bounds.raising(), interpreted_kernels(namespace, when=gate):
        yield


@contextlib.contextmanager
def interpreted_kernels(namespace: dict, *, when: bool = True, compiled: bool | None = None) -> Iterator[None]:
    """For the duration, the namespace's Triton kernels run in Triton's interpreter, where `llm_algo.bounds` checks
    every access. A no-op unless `when`, and under the interpreter (`compiled`: the device policy's Triton path)."""
    if not when or not (device_policy.policy().triton_path == "compiled" if compiled is None else compiled):
        yield
        return
    from triton.runtime import interpreter
    from triton.runtime.jit import mangle_type

    mangle_type(torch.empty(1))  # its first call imports Triton's gluon, which insists on the @jit functions we swap
    swaps = _Swaps(interpreter.InterpretedFunction)
    language = [m for n, m in list(sys.modules.items()) if n.startswith("triton.language") and m is not None]
    swaps.jit_functions([namespace] + [m.__dict__ for m in language])  # tl.sum, tl.cdiv, ... are @jit functions too
    tensor = sys.modules["triton.language"].core.tensor
    for name, value in list(vars(tensor).items()):  # x.sum(), x.to(...): member functions, bound as methods
        if swaps.is_jit(value):
            swaps.attr(tensor, name, _as_method(swaps.interpreted(value)))
    scopes: list = []
    swaps.attr(interpreter, "_patch_lang", _restoring_patch_lang(interpreter._patch_lang, scopes))
    try:
        yield
    finally:
        while scopes:
            type(scopes[-1]).restore(scopes.pop())
        swaps.undo()


class _Swaps:
    """@jit functions replaced by the interpreter's version of the same function, and put back afterwards."""

    def __init__(self, interpreted_function: type):
        from triton.runtime.jit import JITFunction, KernelInterface

        self._jit, self._kernel, self._interpreted_function = JITFunction, KernelInterface, interpreted_function
        self._made: dict[int, object] = {}  # one per @jit function: reduce() compares combine functions by identity
        self._undo: list[Callable[[], None]] = []

    def is_jit(self, value) -> bool:
        return isinstance(value, self._jit)

    def interpreted(self, jit):
        if id(jit) not in self._made:
            self._made[id(jit)] = self._interpreted_function(jit.fn)
        return self._made[id(jit)]

    def item(self, table: dict, name: str, value) -> None:
        self._undo.append(functools.partial(table.__setitem__, name, table[name]))
        table[name] = value

    def attr(self, owner, name: str, value) -> None:
        self._undo.append(functools.partial(setattr, owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    def jit_functions(self, tables: list[dict]) -> None:
        """Every @jit function in these globals, and in the globals of every one found (its helpers live there);
        for an Autotuner(Heuristics(...)) chain, its innermost `.fn`."""
        seen: set[int] = set()
        while tables:
            table = tables.pop()
            if id(table) in seen:
                continue
            seen.add(id(table))
            for name, value in list(table.items()):
                if self.is_jit(value):
                    self.item(table, name, self.interpreted(value))
                    tables.append(value.fn.__globals__)
                while isinstance(value, self._kernel) and isinstance(getattr(value, "fn", None), self._kernel):
                    if self.is_jit(value.fn):
                        tables.append(value.fn.fn.__globals__)
                        self.attr(value, "fn", self.interpreted(value.fn))
                        break
                    value = value.fn

    def undo(self) -> None:
        while self._undo:
            self._undo.pop()()


def _as_method(fn: Callable) -> Callable:
    """A plain function, so that `x.sum()` passes `x` (an InterpretedFunction is no descriptor)."""
    return lambda *args, **kwargs: fn(*args, **kwargs)


def _restoring_patch_lang(patch_lang: Callable, scopes: list) -> Callable:
    """Triton's interpreter patches triton.language for a launch and undoes it after; but a call of one @jit function
    from another patches it again and never undoes that (harmless when everything is interpreted, fatal for the
    kernels a GPU compiles next). Here a launch's undo first undoes the patches made inside it, newest first."""

    def patch(fn):
        scope = patch_lang(fn)
        scopes.append(scope)

        def restore(scope=scope):
            if any(open_scope is scope for open_scope in scopes):
                while scopes[-1] is not scope:
                    type(scope).restore(scopes.pop())
                scopes.pop()
            type(scope).restore(scope)

        scope.restore = restore
        return scope

    return patch
