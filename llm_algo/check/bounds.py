"""Bounds-checks every memory access that Triton's interpreter makes against the memory of the kernel's tensor arguments.

On a GPU, a kernel that loads past the end of an input faults or reads a neighbour's memory; under Triton's
interpreter (`TRITON_INTERPRET=1`) the same load quietly reads host memory, so a missing mask goes unnoticed.
`install()` hooks the interpreter: when a kernel is launched, each tensor argument (as the interpreter really sees
it, after its copy to the host) allows the elements of its view; every load, store and atomic then checks the
addresses its mask enables. Inside a check (`raising()`, entered by `run_check`) an address outside all of them
raises `OutOfBounds`, a `CheckFailed` whose one-line summary names the kernel, the notebook cell and line of the
access, how many lanes were out and by how far. Elsewhere (a notebook's own cells, a lesson's demos, some of which
show on purpose what an unmasked load reads) the access goes ahead and the launch ends with an `OutOfBoundsWarning`.

The hook is written against what Triton 3.6 to 3.9 have in `triton/runtime/interpreter.py` (`GridExecutor`,
`InterpreterBuilder.create_masked_load/store`, `create_atomic_rmw/cas`) and fails loudly when they are missing.
It also mends one incompatibility of Triton 3.6's interpreter with NumPy 2.4 (see `_index_from_one_element`).
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import sys
import types
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import torch

from ..notebook import notebook_location
from .failure import CheckFailed

INTERPRETER = "triton.runtime.interpreter"
HINTS = {
    "load": "mask the load with offs < n (tl.load(ptr + offs, mask=offs < n, other=0.0)), or wrap the index (offs % n)",
    "store": "mask the store with offs < n (tl.store(ptr + offs, value, mask=offs < n))",
    "atomic": "mask the atomic with offs < n (tl.atomic_add(ptr + offs, value, mask=offs < n))",
}
VERBS = {"load": "reads", "store": "writes", "atomic": "updates (atomically)"}


class OutOfBounds(CheckFailed):
    """A kernel run by the interpreter touched memory outside every tensor argument of its launch."""


class OutOfBoundsWarning(UserWarning):
    """The same, outside a check: the access went ahead."""


@dataclass(frozen=True)
class Region:
    """The memory one tensor argument allows: the elements of its view, in bytes from `base`."""

    name: str
    base: int
    itemsize: int
    span: int  # bytes from base to the end of the last element
    dims: tuple[tuple[int, int], ...] | None  # (stride in elements, size), largest stride first; None: whole span
    label: str  # `x_ptr` (1000,) float32

    @classmethod
    def of(cls, name: str, tensor: torch.Tensor) -> Region | None:
        if tensor.numel() == 0:
            return None
        sizes, strides = tensor.shape, tensor.stride()
        last = sum((s - 1) * st for s, st in zip(sizes, strides, strict=True))
        dims = sorted(((st, s) for s, st in zip(sizes, strides, strict=True) if s > 1 and st > 0), reverse=True)
        nested = all(outer >= inner * size for (outer, _), (inner, size) in zip(dims, dims[1:], strict=False))
        dense = last + 1 == tensor.numel()  # no gaps: the span is the element set
        label = f"`{name}` {tuple(sizes)} {str(tensor.dtype).removeprefix('torch.')}"
        if not tensor.is_contiguous():
            label += f" strides {tuple(strides)}"
        return cls(
            name,
            tensor.data_ptr(),
            tensor.element_size(),
            (last + 1) * tensor.element_size(),
            None if dense or not nested else tuple(dims),
            label,
        )

    def allows(self, addresses: np.ndarray, width: int) -> np.ndarray:
        """Per lane: does [address, address + width) lie inside one element of the view?"""
        offsets = addresses.astype(np.int64) - self.base
        inside = (offsets >= 0) & (offsets + width <= self.span)
        if self.dims is None or width > self.itemsize or not inside.any():
            return inside
        elements, within = np.divmod(np.where(inside, offsets, 0), self.itemsize)
        inside &= within + width <= self.itemsize
        for stride, size in self.dims:
            index = elements // stride
            inside &= index < size
            elements = elements - index * stride
        return inside & (elements == 0)

    def distance(self, addresses: np.ndarray, width: int) -> np.ndarray:
        """Per lane, bytes outside the span (negative: before its start; 0: inside it)."""
        offsets = addresses.astype(np.int64) - self.base
        return np.where(offsets < 0, offsets, np.maximum(offsets + width - self.span, 0))


@dataclass
class Launch:
    kernel: str
    regions: list[Region] = field(default_factory=list)
    first: OutOfBounds | None = None  # outside a check: the first violation, reported when the launch ends
    more: int = 0


_launches: list[Launch] = []  # the interpreter runs one launch at a time; a stack keeps it simple
_installed: list[str] = []  # the Triton version the hook was installed for
_raising: list[bool] = []  # non-empty inside raising()


@contextlib.contextmanager
def raising() -> Iterator[None]:
    """Inside: an access out of bounds raises OutOfBounds (outside: the launch ends with a warning)."""
    _raising.append(True)
    try:
        yield
    finally:
        _raising.pop()


def _regions(name: str, value) -> list[Region]:
    """The regions of one launch argument: a tensor, a TensorWrapper, a tuple of them, a tensor descriptor."""
    if isinstance(value, torch.Tensor):
        region = Region.of(name, value)
        return [region] if region else []
    if isinstance(value, tuple):
        return [r for i, item in enumerate(value) for r in _regions(f"{name}[{i}]", item)]
    base = getattr(value, "base", None)  # triton.reinterpret's TensorWrapper, a host TensorDescriptor
    return _regions(name, base) if isinstance(base, torch.Tensor) else []


def _lane_data(handle, shape: tuple[int, ...]) -> np.ndarray:
    data = handle if isinstance(handle, np.ndarray) else handle.data  # 3.6 passes block-pointer masks as arrays
    return np.broadcast_to(np.asarray(data, dtype=bool), shape)


def _check(kind: str, pointers, mask) -> None:
    if not _launches:
        return
    launch = _launches[-1]
    addresses = np.asarray(pointers.data)
    if mask is not None:
        addresses = addresses[_lane_data(mask, addresses.shape)]
    if addresses.size == 0:
        return
    width = max(1, pointers.get_element_ty().primitive_bitwidth // 8)
    low, high = int(addresses.min()), int(addresses.max()) + width
    addresses = addresses.ravel()
    for region in launch.regions:  # fast path: every lane inside one argument
        inside_span = region.base <= low and high <= region.base + region.span
        if inside_span and (region.dims is None or region.allows(addresses, width).all()):
            return
    allowed = np.zeros(addresses.shape, dtype=bool)
    for region in launch.regions:
        allowed |= region.allows(addresses, width)
    if allowed.all():
        return
    error = _violation(kind, launch, addresses, allowed, width)
    where = _where(_here())
    error.summary += f" (at {where}; program {_program()})" if where else f" (program {_program()})"
    error.args = (error.summary,)
    if _raising:
        raise error
    if launch.first is None:
        launch.first = error
    else:
        launch.more += 1


def _violation(kind: str, launch: Launch, addresses: np.ndarray, allowed: np.ndarray, width: int) -> OutOfBounds:
    bad = addresses[~allowed]
    what = f"{bad.size} of {addresses.size} lanes"
    if launch.regions:
        region = _meant(launch.regions, addresses[allowed], bad, width)
        what += f" outside {region.label}: " + _how_far(region, bad, width)
    else:
        what += " (the kernel has no tensor argument)"
    arguments = ", ".join(r.label for r in launch.regions) or "none"
    return OutOfBounds(
        f"{launch.kernel} {VERBS[kind]} out of bounds: {what}",
        input=f"the kernel's tensor arguments: {arguments}",
        expected=f"every address a {kind} touches inside a tensor argument",
        got=what,
        hint=HINTS[kind],
    )


def _meant(regions: list[Region], good: np.ndarray, bad: np.ndarray, width: int) -> Region:
    """The argument an access was aimed at: the one its in-bounds lanes hit most, else the one nearest its lanes."""
    hits = [int(r.allows(good, width).sum()) if good.size else 0 for r in regions]
    if max(hits) > 0:
        return regions[hits.index(max(hits))]
    return min(regions, key=lambda r: int(np.abs(r.distance(bad, width)).min()))


def _how_far(region: Region, bad: np.ndarray, width: int) -> str:
    distance = region.distance(bad, width)
    elements = lambda d: -(-int(np.abs(d).max()) // region.itemsize)
    parts = []
    if (distance > 0).any():
        parts.append(f"{int((distance > 0).sum())} up to {elements(distance[distance > 0])} element(s) past its end")
    if (distance < 0).any():
        parts.append(
            f"{int((distance < 0).sum())} up to {elements(distance[distance < 0])} element(s) before its start"
        )
    if (distance == 0).any():
        parts.append(
            f"{int((distance == 0).sum())} in the gaps of this strided view (past the end of a row, or off its strides)"
        )
    return ", ".join(parts)


def _program() -> str:
    builder = sys.modules[INTERPRETER].interpreter_builder
    return str(tuple(getattr(builder, "grid_idx", None) or ()))


def _here() -> BaseException:
    """An exception whose traceback is the current call stack, for notebook_location."""
    here, frame = None, sys._getframe(1)
    while frame is not None:
        here, frame = types.TracebackType(here, frame, frame.f_lasti, frame.f_lineno), frame.f_back
    return OutOfBounds("").with_traceback(here)


def _where(error: BaseException) -> str:
    """The notebook cell and line of the access: a graded notebook's cell, or a live IPython cell."""
    where = notebook_location(error)
    if where:
        return where
    frames = [f for f in _traceback_frames(error) if _ipython_cell(f[0])]
    if not frames:
        return ""
    filename, line = frames[-1]
    return f"{_ipython_cell(filename)}, line {line}"


def _traceback_frames(error: BaseException) -> list[tuple[str, int]]:
    frames, tb = [], error.__traceback__
    while tb is not None:
        frames.append((tb.tb_frame.f_code.co_filename, tb.tb_lineno))
        tb = tb.tb_next
    return frames


def _ipython_cell(filename: str) -> str:
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython else None
    named = shell.compile.format_code_name(filename) if shell and hasattr(shell, "compile") else None
    return " ".join(named) if named else ""


def _out_of_bounds_in(error: BaseException | None) -> OutOfBounds | None:
    """The interpreter re-raises what a kernel raised as InterpreterError(...) from it, once per call level."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, OutOfBounds):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def _hooks(interpreter):
    builder, executor = interpreter.InterpreterBuilder, interpreter.GridExecutor
    load, store = builder.create_masked_load, builder.create_masked_store
    rmw, cas = builder.create_atomic_rmw, builder.create_atomic_cas
    init_args, launch = executor._init_args_hst, executor.__call__

    def create_masked_load(self, ptrs, mask, *args, **kwargs):
        _check("load", ptrs, mask)
        return load(self, ptrs, mask, *args, **kwargs)

    def create_masked_store(self, ptrs, value, mask, *args, **kwargs):
        _check("store", ptrs, mask)
        return store(self, ptrs, value, mask, *args, **kwargs)

    def create_atomic_rmw(self, op, ptr, val, mask, *args, **kwargs):
        _check("atomic", ptr, mask)
        return rmw(self, op, ptr, val, mask, *args, **kwargs)

    def create_atomic_cas(self, ptr, *args, **kwargs):
        _check("atomic", ptr, None)
        return cas(self, ptr, *args, **kwargs)

    def _init_args_hst(self, args_dev, kwargs):
        args_hst, kwargs_hst = init_args(self, args_dev, kwargs)
        named = [*zip(self.arg_names, args_hst, strict=False), *kwargs_hst.items()]
        if _launches:
            _launches[-1].regions = [r for name, value in named for r in _regions(name, value)]
        return args_hst, kwargs_hst

    def __call__(self, *args, **kwargs):
        current = Launch(getattr(self.fn, "__name__", "the kernel"))
        _launches.append(current)
        try:
            result = launch(self, *args, **kwargs)
        except Exception as raised:
            error = _out_of_bounds_in(raised)
            if error is None:
                raise
        else:
            error = None
        finally:
            _launches.pop()
        if error is not None:
            raise error  # what the kernel raised, without the interpreter's wrapping
        if current.first is not None:
            more = f" (and {current.more} more out-of-bounds accesses)" if current.more else ""
            warnings.warn(f"{current.first}{more}", OutOfBoundsWarning, stacklevel=4)
        return result

    return {
        builder: {
            "create_masked_load": create_masked_load,
            "create_masked_store": create_masked_store,
            "create_atomic_rmw": create_atomic_rmw,
            "create_atomic_cas": create_atomic_cas,
        },
        executor: {"_init_args_hst": _init_args_hst, "__call__": __call__},
    }


EXPECTED = {
    "InterpreterBuilder": ("create_masked_load", "create_masked_store", "create_atomic_rmw", "create_atomic_cas"),
    "GridExecutor": ("__call__", "_init_args_hst"),
}


def missing_internals(interpreter) -> list[str]:
    """What the hook needs from `triton.runtime.interpreter` and this Triton lacks."""
    missing = [
        f"{owner}.{name}"
        for owner, names in EXPECTED.items()
        for name in names
        if not hasattr(getattr(interpreter, owner, None), name)
    ]
    return missing + ([] if hasattr(interpreter, "interpreter_builder") else ["interpreter_builder"])


def install() -> None:
    """Hook Triton's interpreter (once per process). Raises RuntimeError when its internals are not what the hook
    was written against, so a Triton upgrade cannot switch the bounds checker off silently."""
    from triton.runtime import interpreter

    if _installed:
        return
    version = getattr(sys.modules.get("triton"), "__version__", "?")  # may run while `import triton` is under way
    missing = missing_internals(interpreter)
    if missing:
        raise RuntimeError(
            f"llm_algo.check.bounds cannot hook Triton {version}'s interpreter: it lacks {', '.join(missing)} (written "
            "against Triton 3.6 to 3.9); update llm_algo/check/bounds.py for this Triton, or install triton 3.6"
        )
    for owner, methods in _hooks(interpreter).items():
        for name, method in methods.items():
            setattr(owner, name, method)
    _index_from_one_element(interpreter)
    _installed.append(version)


def _index_from_one_element(interpreter) -> None:
    """Triton 3.6's interpreter turns a scalar tensor (a 1-element array) into an index with int(array), which
    NumPy 2.4 refuses ("only 0-dimensional arrays can be converted"): `range(tl.cdiv(K, BLOCK_K))` fails. Patch
    it as Triton 3.9 does (int of the squeezed array), so the gate checks that GPUs run interpreted work there."""
    patch_tensor = getattr(interpreter, "_patch_lang_tensor", None)
    if patch_tensor is None:
        return

    def _patch_lang_tensor(tensor, scope):
        patch_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))

    interpreter._patch_lang_tensor = _patch_lang_tensor


class _InstallOnImport(importlib.abc.MetaPathFinder):
    """Installs the hook right after Triton's interpreter module is first imported (by `import triton` under
    TRITON_INTERPRET=1), so nothing pays for importing Triton before a lesson does."""

    def find_spec(self, name, path, target=None):
        if name != INTERPRETER:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_install(module):
            exec_module(module)
            sys.modules[name] = module  # install() imports it back
            install()

        spec.loader.exec_module = exec_then_install
        return spec


def install_when_imported() -> None:
    """Install now if Triton's interpreter is loaded, else as soon as it is."""
    if INTERPRETER in sys.modules:
        install()
    elif not any(isinstance(finder, _InstallOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _InstallOnImport())
