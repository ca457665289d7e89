"""What a check called the learner's code with: the options it varied, and whether the caller's tensors survived.

Two rules of the contract (section 4) hold for every check without the check saying anything:

- **The caller's tensors are left alone.** A call the check makes of a function or method the notebook defines must
  not change a tensor it was handed (an argument, or a tensor inside a list, tuple or dict argument): a learner who
  writes `x.mul_(scale)` into the caller's activations, or weight decay into `p.grad` of a tensor passed in, passes
  every value check and corrupts a real caller. An exercise whose contract is in place names its arguments with
  `checks.in_place("exercise", "arg", ...)`; only the outermost call is compared (the learner's own helpers may
  work in place on the learner's own buffers), and tensors above `SNAPSHOT_LIMIT` elements are not copied.
- **Every option is exercised.** Each call records which parameters took a value other than their default. While
  the reference solutions are graded, the lesson's record is written to `.llm_algo/options/<lesson>.json`; the
  package test `tests/package/test_options_varied.py` compares it with the exercise cells' signatures and fails on an
  option no check varies.

The recording wrappers are plain functions whose only references are the original function and an integer key into
this module's table, so a wrapped function or class that a check sends to a rank process (cloudpickle, by value)
arrives as a function that records nothing there and calls the original.
"""

from __future__ import annotations

import functools
import inspect
import json
import threading
from pathlib import Path

import torch

from .failure import CheckFailed

SNAPSHOT_LIMIT = 1 << 24  # elements: a larger argument (a GPU-only check's huge cache) is not copied and compared

_ACTIVE: dict[int, CallRecorder] = {}  # id of a notebook namespace -> the recorder of the check running on it
_WRAPPERS = "__llm_algo_recorded__"  # the namespace's own table of wrappers: one per function, as long as it lives
_options_seen: dict[str, set[str]] = {}  # "name" or "Class.method" -> parameters given a non-default value


def _tensors(name: str, value, depth: int = 0):
    if isinstance(value, torch.Tensor):
        yield name, value
    elif depth == 0 and isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _tensors(f"{name}[{i}]", item, 1)
    elif depth == 0 and isinstance(value, dict):
        for key, item in value.items():
            yield from _tensors(f"{name}[{key!r}]", item, 1)


def _same(before: torch.Tensor, after: torch.Tensor) -> bool:
    """Bit for bit (a NaN stays a NaN; float8 has no arithmetic to compare with)."""
    if before.shape != after.shape or before.dtype != after.dtype:
        return False
    if before.is_floating_point() and before.element_size() in (1, 2, 4, 8):
        bits = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[before.element_size()]
        return bool(torch.equal(before.reshape(-1).view(bits), after.detach().reshape(-1).view(bits)))
    return bool(torch.equal(before, after.detach()))


def _non_default(signature: inspect.Signature, bound: inspect.BoundArguments) -> set[str]:
    varied = set()
    for name, value in bound.arguments.items():
        parameter = signature.parameters[name]
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            if value:
                varied.add(name)
            continue
        if parameter.default is parameter.empty:
            continue
        default = parameter.default
        try:
            same = value is default or (type(value) is type(default) and bool(value == default))
        except Exception:  # a tensor compared with a tensor default, or an object without a truth value
            same = False
        if not same:
            varied.add(name)
    return varied


_outside = threading.local()  # call depth of recorded functions running outside a check (in a rank process)


def _record_call(key: int, qualname: str, function, args: tuple, kwargs: dict):  # key: id of the namespace
    """The body of every recording wrapper: look the recorder up, record, call. In a rank process (no recorder: the
    check sent the function there) only the options are recorded; the rank sends them back with its result."""
    recorder = _ACTIVE.get(key)
    if recorder is not None:
        if not recorder.outermost():
            return function(*args, **kwargs)
        return recorder.call(qualname, function, args, kwargs)
    if getattr(_outside, "depth", 0) == 0:
        _record_options(qualname, function, args, kwargs)
    _outside.depth = getattr(_outside, "depth", 0) + 1
    try:
        return function(*args, **kwargs)
    finally:
        _outside.depth -= 1


def _record_options(qualname: str, function, args: tuple, kwargs: dict) -> tuple | None:
    """Record which options this call varies; (signature, bound arguments), or None for a call that cannot bind."""
    try:
        signature = inspect.signature(function)
        bound = signature.bind(*args, **kwargs)
    except (TypeError, ValueError):  # a wrong call: let the function say so
        return None
    _options_seen.setdefault(qualname, set()).update(_non_default(signature, bound))
    return signature, bound


def _wrap(key: int, qualname: str, function):
    @functools.wraps(function)
    def recorded(*args, **kwargs):
        return _record_call(key, qualname, function, args, kwargs)

    return recorded


class CallRecorder:
    """One check's record of the calls it makes through `ex`: a context manager around the check."""

    def __init__(self, namespace: dict, in_place: frozenset[str] = frozenset()):
        self.namespace = namespace
        self.in_place = in_place
        self.key = id(namespace)
        self._outer: CallRecorder | None = None  # a check run inside this one (a diagnosis) restores this on exit
        self.local = threading.local()
        self._patched: list[tuple[type, str, object]] = []
        self.found: CheckFailed | None = None  # the first changed input: fails the check even if something caught it

    # -- lifetime
    def __enter__(self) -> CallRecorder:
        self._outer = _ACTIVE.get(self.key)
        _ACTIVE[self.key] = self
        module = self.namespace.get("__name__")
        for value in list(self.namespace.values()):
            if isinstance(value, type) and value.__module__ == module:
                self._patch_class(value)
        return self

    def __exit__(self, *exc_info) -> None:
        if self._outer is not None:
            _ACTIVE[self.key] = self._outer
        else:
            _ACTIVE.pop(self.key, None)
        for cls, name, original in reversed(self._patched):
            setattr(cls, name, original)
        self._patched.clear()

    def _patch_class(self, cls: type) -> None:
        for name, value in list(vars(cls).items()):
            if not inspect.isfunction(value) or (name.startswith("__") and name not in ("__init__", "__call__")):
                continue  # plain methods only: static/class methods (autograd.Function) are left as they are
            self._patched.append((cls, name, value))
            setattr(cls, name, _wrap(self.key, f"{cls.__name__}.{name}", value))

    def exercise(self, ex):
        return _RecordedExercise(ex, self)

    def wrap_function(self, name: str, value):
        """A notebook function comes back wrapped; a plain one always by the same wrapper (kept in the namespace), so
        that `ex.f is ex.f` and a check may key a cache on `id(ex.f)` (a fresh wrapper per access could take the id
        of a dead one, from another namespace)."""
        if not inspect.isfunction(value) or inspect.unwrap(value).__globals__ is not self.namespace:
            return value
        if value.__globals__ is not self.namespace:  # another wrapper (a kernel exercise's watch), new per check
            return _wrap(self.key, name, value)
        table = self.namespace.setdefault(_WRAPPERS, {})
        cached = table.get(name)
        if cached is None or cached.__wrapped__ is not value:
            cached = table[name] = _wrap(self.key, name, value)
        return cached

    # -- recording
    def outermost(self) -> bool:
        return getattr(self.local, "depth", 0) == 0

    def call(self, qualname: str, function, args: tuple, kwargs: dict):
        recorded = _record_options(qualname, function, args, kwargs)
        snapshots = []
        if recorded is not None:
            for name, value in recorded[1].arguments.items():
                if name in ("self", "cls") or name in self.in_place:
                    continue
                for label, tensor in _tensors(name, value):
                    if tensor.numel() <= SNAPSHOT_LIMIT and not tensor.is_meta:
                        snapshots.append((label, tensor, tensor.detach().clone()))
        self.local.depth = 1
        try:
            result = function(*args, **kwargs)
        finally:
            self.local.depth = 0
        for label, tensor, before in snapshots:
            if not _same(before, tensor):
                failure = CheckFailed(
                    f"`{qualname}` changed its argument `{label}` in place",
                    input=f"{label} {tuple(before.shape)} {before.dtype}",
                    expected="the caller's tensor as it was passed in",
                    got="different values after the call",
                    hint="work on a copy (x = x.clone(), or an out-of-place op: x * s, not x.mul_(s)); the caller "
                    "still needs its tensor",
                )
                self.found = self.found or failure
                raise failure
        return result


class _RecordedExercise:
    def __init__(self, ex, recorder: CallRecorder):
        self._ex = ex
        self._recorder = recorder

    def __getattr__(self, name: str):
        return self._recorder.wrap_function(name, getattr(self._ex, name))


def options_seen() -> dict[str, set[str]]:
    """Every option recorded in this process so far: "name" / "Class.method" -> parameters varied."""
    return {name: set(params) for name, params in _options_seen.items()}


def take_options() -> dict[str, list[str]]:
    """What was recorded since the last call, and forget it (a rank process sends it back with each result)."""
    taken = {name: sorted(params) for name, params in _options_seen.items()}
    _options_seen.clear()
    return taken


def merge_options(options: dict[str, list[str]]) -> None:
    """Add what a rank process recorded to this process's record."""
    for name, params in options.items():
        _options_seen.setdefault(name, set()).update(params)


def reset_options() -> None:
    """Forget what was recorded (a lesson's grading starts after its `use()` of earlier lessons graded theirs)."""
    _options_seen.clear()


def write_options(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({k: sorted(v) for k, v in sorted(_options_seen.items())}, indent=1) + "\n")
