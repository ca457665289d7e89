"""Checks run with their kernels bounds-checked, and gate checks with their kernels interpreted on every device.

A GPU compiles kernels, and a compiled kernel cannot be bounds-checked; so that a memory-safety (gate) check gives
the same verdict on every device, `run_check` runs it inside `interpreted_kernels(namespace)`, which on the compiled
path hands the check the namespace's kernels as Triton's interpreter runs them (on the CPU they already are).
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Iterator

import torch

from .. import device as device_policy


@contextlib.contextmanager
def checked_kernels(namespace: dict, *, gate: bool) -> Iterator[None]:
    """What `run_check` runs a check in: accesses out of bounds raise (llm_algo.check.bounds), and a gate check's kernels
    run in the interpreter on every device."""
    from ..check import bounds

    with bounds.raising(), interpreted_kernels(namespace, when=gate):
        yield


@contextlib.contextmanager
def interpreted_kernels(namespace: dict, *, when: bool = True, compiled: bool | None = None) -> Iterator[None]:
    """For the duration, the namespace's Triton kernels run in Triton's interpreter, where `llm_algo.check.bounds` checks
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
