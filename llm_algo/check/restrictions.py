"""Recording and refusing forbidden calls and kernel-less results while a check runs the learner's code.

A lesson's checks declare, per exercise, what the learner's code may not do (`Checks.restrict`):

    checks.restrict("rms_norm", forbid=RMS_NORM, instead="compute mean(x**2), rsqrt and the scale yourself")
    checks.restrict("softmax", kernel=True, forbid=[*SOFTMAX, *LOGSUMEXP], instead="... in your @triton.jit kernel")

`forbid` takes torch functions and Tensor methods (matched when called), Python functions and classes (matched while
their code runs), and modules or module names (matched while any of their code runs: `"torch.optim.adam"`). While a
check of the exercise runs, a `TorchFunctionMode` sees every torch call and walks the stack outwards to the first
frame that is the learner's (its globals are the lesson's namespace: a module dict in the grader, the IPython user
namespace in a live kernel) or the grader's (the checks module). A forbidden call, or a call made from inside
forbidden code, is a violation when the learner's frame comes first, or when the forbidden code runs for an object
of a learner's class (`class AdamW(torch.optim.AdamW)` runs `Adam.step`). So the checks' own references, computed
with the same builtins, stay allowed, and so does whatever Triton's launcher does. `ex.<name>` bound to a forbidden
object (an alias, a `functools.partial`, a subclass) is a violation too. A violation raises `ForbiddenCall` into the
learner's code and is recorded, so an `except Exception` cannot hide it. Code that Dynamo compiles
(`torch.compile`) is traced, not watched.

`kernel=True` (Triton exercises): every call of a learner function taken through `ex` that returns normally with a
non-empty tensor must have launched a `@triton.jit` kernel of the course held by the namespace: defined in it, or
taken from an earlier lesson with `use()` (the learner's own, or that lesson's reference) (counted by wrapping each such
kernel's `run`: a `JITFunction` on a GPU, an `InterpretedFunction` under `TRITON_INTERPRET=1`, reached through the
`.fn` chain of `triton.autotune`/`heuristics`); a passing check that used a learner class (an `autograd.Function`,
an `nn.Module`) or an in-place function must have launched at least one. Everything is restored when the check ends.

CUDA C++ exercises: ATen called from inside an extension is invisible to the Python-level watch, so
`llm_algo.cuda.compile_cuda` hands the learner's source to `check_cpp_source` first. While a check runs code of the
learner's that compiles C++, a call in that source to a forbidden function's ATen namesake (`torch::matmul`,
`at::softmax`, `x.sum(...)`; and cuBLAS where a matmul is forbidden) is a violation like a Python call.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import inspect
import os
import re
import sys
import types
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import torch
from torch.overrides import TorchFunctionMode

_SHORT_MODULES = {
    "torch.nn.functional": "F",
    "torch._C._nn": "F",
    "torch.functional": "torch",
    "torch._C._VariableFunctions": "torch",
    "torch._C._special": "torch.special",
    "torch._C._linalg": "torch.linalg",
}
_PUBLIC_HOMES = ("torch.nn", "torch.optim", "torch", "torch.autograd")  # where a class's short name is looked up


class ForbiddenCall(Exception):
    """Raised into the learner's code at a forbidden call or a result that no kernel of theirs computed."""


def describe(obj) -> str:
    """The name a learner writes: `torch.logsumexp`, `Tensor.softmax`, `F.rms_norm`, `nn.RMSNorm`, a module's name."""
    if isinstance(obj, types.ModuleType):
        return obj.__name__
    if isinstance(obj, str):
        return obj
    objclass = getattr(obj, "__objclass__", None)
    if isinstance(objclass, type) and issubclass(objclass, torch._C.TensorBase):
        return f"Tensor.{obj.__name__}"
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or repr(obj)
    module = getattr(obj, "__module__", None) or ""
    if isinstance(obj, type):
        for home in _PUBLIC_HOMES:
            if getattr(sys.modules.get(home), obj.__name__, None) is obj:
                return f"{'nn' if home == 'torch.nn' else home}.{obj.__name__}"
        return f"{module}.{name}"
    if name.startswith("Tensor."):
        return name
    name = getattr(obj, "__name__", name)
    module = _SHORT_MODULES.get(module, module)
    name = name.removeprefix(module.removeprefix("torch.") + "_")  # torch._C._special.special_softmax
    return f"{module}.{name}" if module else name


def _module_paths(module: types.ModuleType | str) -> tuple[str, ...]:
    """The file of a module, or the folder of a package (ending in a separator), without importing it by name."""
    if isinstance(module, str):
        spec = importlib.util.find_spec(module)
        if spec is None:
            return ()
        folders, origin = spec.submodule_search_locations, spec.origin
    else:
        folders, origin = getattr(module, "__path__", None), getattr(module, "__file__", None)
    if folders:
        return tuple(os.path.join(folder, "") for folder in folders)
    return (origin,) if origin else ()


def _codes_of(obj) -> Iterable[types.CodeType]:
    """The code objects a function (through decorators) or a class's own methods run."""
    members = vars(obj).values() if isinstance(obj, type) else [obj]
    for member in members:
        if isinstance(member, (staticmethod, classmethod)):
            member = member.__func__
        elif isinstance(member, property):
            member = member.fget
        while member is not None:
            code = getattr(member, "__code__", None)
            if code is not None:
                yield code
            member = getattr(member, "__wrapped__", None)


class Forbidden:
    """What one declaration forbids, resolved: called objects by identity, running code, module files."""

    def __init__(self, entries: Iterable):
        self.calls: dict[object, str] = {}
        self.classes: dict[type, str] = {}
        self.codes: dict[types.CodeType, str] = {}
        self.files: list[tuple[str, str]] = []  # (file or folder/, name)
        self.seen: dict[types.CodeType, str | None] = {}  # running()'s answers, and LAUNCHER for Triton's code
        self.beyond_torch = False  # some entry is not torch's: code that may never call torch (see _PythonWatch)
        for entry in entries:
            name = describe(entry)
            self.beyond_torch |= not name.startswith(("torch.", "Tensor.", "F.", "nn."))
            if isinstance(entry, (str, types.ModuleType)):
                self.files += [(path, name) for path in _module_paths(entry)]
                continue
            if isinstance(entry, type):
                self.classes[entry] = name
            else:
                self.calls[entry] = name
            self.codes.update(dict.fromkeys(_codes_of(entry), name))

    @property
    def needs_stack(self) -> bool:
        """Whether an allowed function can still be part of a forbidden call, made from inside forbidden code."""
        return bool(self.codes or self.files)

    def called(self, func) -> str | None:
        try:
            return self.calls.get(func)
        except TypeError:  # an unhashable callable is never one of ours
            return None

    def running(self, code: types.CodeType, module: str | None) -> str | None:
        """The forbidden thing this code is: a declared function or class by name, else `module.qualname` of
        a function in a forbidden module (`torch.optim.adamw.adamw`)."""
        try:
            return self.seen[code]
        except KeyError:
            name = self.codes.get(code)
            if name is None and self.in_files(code.co_filename):
                name = f"{module}.{code.co_qualname}"
            elif name is None and _is_launcher(code):
                name = LAUNCHER
            self.seen[code] = name
            return name

    def in_files(self, filename: str | None) -> bool:
        return bool(filename) and any(filename.startswith(path) for path, _ in self.files)

    def bound(self, value) -> str | None:
        """What a name the learner bound really is, when it is forbidden: an alias or a `functools.partial` of a
        forbidden function, or a class that inherits from or borrows the code of a forbidden class."""
        while isinstance(value, functools.partial):
            value = value.func
        if isinstance(value, type):
            for base in value.__mro__:
                if base in self.classes or self.in_files(getattr(sys.modules.get(base.__module__), "__file__", None)):
                    return f"a subclass of {describe(base)}"
            borrowed = next(filter(None, (self.running(code, value.__module__) for code in _codes_of(value))), None)
            return borrowed and f"built from {borrowed}"
        value = getattr(value, "__func__", value)  # a bound method
        name = self.called(value)
        function = inspect.unwrap(value) if callable(value) else None
        code = getattr(function, "__code__", None)
        return name or (self.running(code, function.__module__) if code is not None else None)


_MATMULS = {"matmul", "mm", "bmm", "addmm", "baddbmm", "einsum", "linear", "tensordot", "matrix_power"}
_CPP_NOISE = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"', re.S)  # comments and string literals


def cpp_names(forbidden: Forbidden) -> set[str]:
    """The ATen names of what a declaration forbids: `torch.matmul`, `Tensor.matmul` -> "matmul"."""
    names = set()
    for name in [*forbidden.calls.values(), *forbidden.classes.values()]:
        leaf = name.rsplit(".", 1)[-1]
        if leaf.isidentifier() and not leaf.startswith("_"):
            names.add(leaf)
    return names


def cpp_calls(source: str, names: set[str]) -> str | None:
    """The first call in C++ `source` of ATen's `name` (`torch::name(`, `at::native::name(`, `x.name(`) for a name
    in `names`, or of cuBLAS when a matmul is among them; comments and string literals are not code."""
    if not names:
        return None
    code = _CPP_NOISE.sub(lambda m: " " * len(m.group()), source)
    alternatives = "|".join(sorted(map(re.escape, names), key=len, reverse=True))
    pattern = rf"\b(?:torch|at)::(?:\w+::)*(?:{alternatives})\s*\(|\.(?:{alternatives})_?\s*\("
    if names & _MATMULS:
        pattern += r"|\bcublas\w*\s*\(|\bat::cuda::blas::"
    found = re.search(pattern, code)
    if found is None:
        return None
    line = code.count("\n", 0, found.start()) + 1
    return f"`{found.group().rstrip('( ').strip()}` (line {line} of your CUDA source)"


_open: list[Enforcement] = []  # the Enforcement of the check that runs now, if any


def check_cpp_source(source: str) -> None:
    """Called by `compile_cuda` before it builds or loads: a forbidden ATen or cuBLAS call in C++ that the learner's
    code compiles fails the running check (ForbiddenCall)."""
    if _open:
        _open[-1].on_cpp_source(source, sys._getframe(1))


@dataclass(frozen=True)
class Restriction:
    """One exercise's declaration (see `Checks.restrict`)."""

    forbid: tuple = ()
    instead: str = ""  # what the exercise asks for instead, said to the learner
    kernel: bool = False  # results must come from a @triton.jit kernel of the learner's

    @functools.cached_property
    def forbidden(self) -> Forbidden:
        return Forbidden(self.forbid)


@functools.cache
def _launcher_folders() -> tuple[str, ...]:
    return _module_paths("triton") if importlib.util.find_spec("triton") else ()


def _is_launcher(code: types.CodeType) -> bool:
    """Triton's own code: what it does with torch while launching a kernel is plumbing, not the learner's math."""
    folders = _launcher_folders()
    return bool(folders) and code.co_filename.startswith(folders)


LAUNCHER = "<triton>"  # what Forbidden.running says of Triton's own code


def _holds_tensor(value, depth: int = 0) -> bool:
    if isinstance(value, torch.Tensor):
        return value.numel() > 0
    if isinstance(value, (tuple, list)) and depth < 2:
        return any(_holds_tensor(v, depth + 1) for v in value)
    return False


def _kernel_leaf(value):
    """The JIT function at the end of a kernel's `.fn` chain (Autotuner -> Heuristics -> JITFunction or
    InterpretedFunction), found by duck typing; None for anything else."""
    for _ in range(8):
        inner = getattr(value, "fn", None)
        if inner is None or not callable(getattr(value, "run", None)):
            return None
        if inspect.isfunction(inner):
            return value
        value = inner
    return None


class _Watch(TorchFunctionMode):
    def __init__(self, enforcement: Enforcement):
        super().__init__()
        self.enforcement = enforcement

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if not torch.compiler.is_compiling():  # Dynamo traces modes: stay out of its way (and out of the graph)
            self.enforcement.on_torch_call(func)
        return func(*args, **(kwargs or {}))


class Enforcement:
    """One check's watch over the learner's code: a context manager, then `violation(passed)` for the verdict."""

    def __init__(self, restriction: Restriction | None, namespace: dict, grader_globals: dict, locate: Callable):
        self.restriction = restriction
        self.namespace = namespace
        self.grader_globals = grader_globals
        self.locate = locate  # (filename, lineno) -> "02_RMSNorm.ipynb, cell 7 (exercise "rms_norm"), line 3" or ""
        self.found: str = ""  # the first violation, as the learner reads it
        self.launches = 0
        self.kernel_calls = 0  # learner calls through `ex` that must be backed by a launch (classes, in-place)
        self._mode: _Watch | None = None
        self._patched: list[tuple[object, object]] = []
        self._backwards: list[tuple[type, object]] = []  # (learner's autograd.Function, its own backward)
        self._entry_seen = None  # the last frame of forbidden code looked at for a learner's `self`
        self._profile = _NO_PROFILE  # the profile function to restore, while the Python-level watch is on

    # -- lifetime
    def __enter__(self) -> Enforcement:
        if self.restriction is None:
            return self
        _open.append(self)
        if self.restriction.kernel:
            self._patch_kernels()
        if self.restriction.forbid:
            self._mode = _Watch(self)
            self._mode.__enter__()
            self._watch_backwards()
            if self.restriction.forbidden.beyond_torch and not self.restriction.kernel:  # kernels: launches count
                self._profile = sys.getprofile()
                sys.setprofile(_PythonWatch(self))
        return self

    def __exit__(self, *exc_info) -> None:
        if self in _open:
            _open.remove(self)
        if self._profile is not _NO_PROFILE:
            sys.setprofile(self._profile)
            self._profile = _NO_PROFILE
        if self._mode is not None:
            self._mode.__exit__(*exc_info)
            self._mode = None
        self._entry_seen = None
        for cls, backward in reversed(self._backwards):
            cls.backward = backward
        self._backwards.clear()
        for kernel, previous in reversed(self._patched):
            if previous is None:
                del kernel.run
            else:
                kernel.run = previous
        self._patched.clear()

    def _watch_backwards(self) -> None:
        """autograd's engine calls an `autograd.Function`'s backward without the torch-function mode of the code that
        called `.backward()`: the learner's own Functions get the watch back inside their backward."""
        for value in list(self.namespace.values()):
            if (
                isinstance(value, type)
                and issubclass(value, torch.autograd.Function)
                and "backward" in vars(value)
                and getattr(value, "__module__", None) == self.namespace.get("__name__")
            ):
                original = vars(value)["backward"]
                function = original.__func__ if isinstance(original, staticmethod) else original

                def watched(*args, _function=function, **kwargs):
                    with _Watch(self):
                        return _function(*args, **kwargs)

                self._backwards.append((value, original))
                value.backward = staticmethod(watched)

    # -- what the check sees
    def exercise(self, ex):
        return ex if self.restriction is None else _WatchedExercise(ex, self)

    def violation(self, passed: bool) -> str:
        """The failure line, or "" when the check's verdict stands."""
        if not self.found and passed and self.kernel_calls and not self.launches:
            self.found = (
                "your code ran without launching a Triton kernel of this notebook: "
                f"{self.restriction.instead or 'compute the result in your @triton.jit kernel'}"
            )
        return self.found

    # -- recording
    def _record(self, what: str) -> None:
        if not self.found:
            self.found = what
        raise ForbiddenCall(what)

    def _where(self, frame) -> str:
        code = frame.f_code
        return self.locate(code.co_filename, frame.f_lineno) or f"line {frame.f_lineno} of `{code.co_name}`"

    def on_torch_call(self, func) -> None:
        forbidden = self.restriction.forbidden
        name = forbidden.called(func)
        if name is None and not forbidden.needs_stack:
            return
        seen, namespace, grader = forbidden.seen, self.namespace, self.grader_globals
        frame, entry = sys._getframe(2), None  # from the caller of __torch_function__ outwards
        while frame is not None:
            scope = frame.f_globals
            if scope is namespace:
                if name is not None:
                    self._forbid(f"calls {name} at {self._where(frame)}")
                return
            if scope is grader:
                break
            code = frame.f_code
            running = seen[code] if code in seen else forbidden.running(code, scope.get("__name__"))
            if running is LAUNCHER:
                return
            if running is not None:
                name, entry = running, frame  # the outermost forbidden code: what was called
            frame = frame.f_back
        if entry is not None and entry is not self._entry_seen:  # a forbidden method run for a learner's object?
            self._entry_seen = entry  # one look per call of it (an optimizer step runs many torch ops)
            owner = entry.f_locals.get("self")
            if owner is not None and type(owner).__module__ == self.namespace.get("__name__"):
                self._forbid(f"your {type(owner).__name__} runs {name}")

    def _forbid(self, what: str) -> None:
        self._record(f"{what}, which this exercise forbids: {self.restriction.instead}")

    def on_cpp_source(self, source: str, caller) -> None:
        """C++ is being compiled from `caller`: when the learner's frame comes first outwards (not the grader's), a
        forbidden ATen or cuBLAS call in it is a violation."""
        frame = caller
        while frame is not None and frame.f_globals is not self.namespace:
            if frame.f_globals is self.grader_globals:
                return
            frame = frame.f_back
        if frame is None:
            return
        call = cpp_calls(source, cpp_names(self.restriction.forbidden))
        if call is not None:
            self._forbid(f"your C++ calls {call}, compiled at {self._where(frame)}")

    def on_python_call(self, name: str, caller) -> None:
        """Forbidden Python code (or a C function of another library) is being called from `caller`: a violation when
        the learner's frame comes first outwards, before the grader's and before other forbidden code."""
        forbidden, namespace, grader, frame = self.restriction.forbidden, self.namespace, self.grader_globals, caller
        while frame is not None:
            scope = frame.f_globals
            if scope is namespace:
                self._forbid(f"calls {name} at {self._where(frame)}")
                return
            if scope is grader or forbidden.running(frame.f_code, scope.get("__name__")) is not None:
                return  # the checks' own reference, or forbidden code calling its own helpers
            frame = frame.f_back

    def _patch_kernels(self) -> None:
        seen = set()
        for value in list(self.namespace.values()):
            leaf = _kernel_leaf(value)
            if leaf is None or id(leaf) in seen or not self._course_kernel(leaf):
                continue
            seen.add(id(leaf))
            self._patched.append((leaf, vars(leaf).get("run")))
            leaf.run = self._counting(leaf.run)

    def _course_kernel(self, leaf) -> bool:
        """A kernel written in this notebook, or in an earlier lesson's namespace that `use()` loaded (named
        `__lesson_<id>__`, llm_algo.grading.execute): not one of a library's."""
        scope = getattr(leaf.fn, "__globals__", None)
        return scope is self.namespace or str((scope or {}).get("__name__", "")).startswith("__lesson_")

    def _counting(self, run: Callable) -> Callable:
        def counted_run(*args, **kwargs):
            if not kwargs.get("warmup", False):
                self.launches += 1
            return run(*args, **kwargs)

        return counted_run

    def _learner_function(self, name: str, function: Callable) -> Callable:
        @functools.wraps(function)
        def must_launch(*args, **kwargs):
            before = self.launches
            result = function(*args, **kwargs)
            if self.launches == before and (result is None or _holds_tensor(result)):
                if result is None:
                    self.kernel_calls += 1  # in place: judged over the whole check
                else:
                    code = inspect.unwrap(function).__code__
                    where = self.locate(code.co_filename, code.co_firstlineno)
                    self._record(
                        f"{name}{' (' + where + ')' if where else ''} returned a result without launching a Triton "
                        f"kernel of this notebook: {self.restriction.instead}"
                    )
            return result

        return must_launch

    def watch(self, name: str, value):
        """What `ex.<name>` gives the check: checked for forbidden aliases, and wrapped for a kernel exercise."""
        if self.restriction.forbid and callable(value):
            bound = self.restriction.forbidden.bound(value)
            if bound is not None:
                self._forbid(f"`{name}` is {bound}")
        if not self.restriction.kernel:
            return value
        if isinstance(value, type) and value.__module__ == self.namespace.get("__name__"):
            self.kernel_calls += 1
            return value
        if inspect.isfunction(value) and inspect.unwrap(value).__globals__ is self.namespace:
            return self._learner_function(name, value)
        return value


_NO_PROFILE = object()


class _PythonWatch:
    """A `sys.setprofile` function, on while a check of an exercise that forbids more than torch runs: the torch watch
    sees only torch calls, and forbidden code may never make one (a schedule lambda of `transformers` computes with
    `math.cos`; `np.broadcast_shapes` is NumPy). C calls are matched by the function; Python calls by the code of a
    forbidden function or class, or of a function (not a method: the library's objects that an exercise is handed,
    such as a config, keep their attributes and properties) defined in a forbidden module."""

    def __init__(self, enforcement: Enforcement):
        self.enforcement = enforcement
        self.forbidden = enforcement.restriction.forbidden
        self.names: dict[types.CodeType, str | None] = {}

    def __call__(self, frame, event: str, arg) -> None:
        if event == "call":
            name, caller = self._name(frame), frame.f_back
        elif event == "c_call":
            name, caller = self.forbidden.called(arg), frame
        else:
            return
        if name is not None and caller is not None:
            self.enforcement.on_python_call(name, caller)

    def _name(self, frame) -> str | None:
        code = frame.f_code
        try:
            return self.names[code]
        except KeyError:
            name = self.forbidden.codes.get(code)
            if name is None and self.forbidden.in_files(code.co_filename) and not _is_method(code):
                name = f"{frame.f_globals.get('__name__')}.{code.co_qualname}"
            self.names[code] = name
            return name


def _is_method(code: types.CodeType) -> bool:
    return code.co_name.startswith("__") or (code.co_argcount > 0 and code.co_varnames[0] in ("self", "cls"))


class _WatchedExercise:
    """`ex` for a restricted exercise: names bound to forbidden objects are refused, and in a kernel exercise the
    learner's functions come back wrapped so that each call is accounted for."""

    def __init__(self, ex, enforcement: Enforcement):
        self._ex = ex
        self._enforcement = enforcement

    def __getattr__(self, name: str):
        return self._enforcement.watch(name, getattr(self._ex, name))


# ----------------------------------------------------------------------------- builtins that lessons teach
# Groups the checks modules declare (`forbid=[*SOFTMAX, *LOGSUMEXP]`): each is one computation under all the
# spellings a learner may reach for (function, Tensor method, functional, module).

Tensor, F, nn = torch.Tensor, torch.nn.functional, torch.nn

RMS_NORM = (F.rms_norm, torch.rms_norm, nn.RMSNorm)
LAYER_NORM = (F.layer_norm, torch.layer_norm, torch.native_layer_norm, nn.LayerNorm)
SOFTMAX = (
    torch.softmax,
    Tensor.softmax,
    F.softmax,
    torch.special.softmax,
    nn.Softmax,
    torch.log_softmax,
    Tensor.log_softmax,
    F.log_softmax,
    torch.special.log_softmax,
    nn.LogSoftmax,
)
LOGSUMEXP = (torch.logsumexp, Tensor.logsumexp, torch.special.logsumexp)
ATTENTION = (F.scaled_dot_product_attention, F.multi_head_attention_forward, nn.MultiheadAttention)
CROSS_ENTROPY = (F.cross_entropy, F.nll_loss, nn.CrossEntropyLoss, nn.NLLLoss)
MATMUL = (
    torch.matmul,
    Tensor.matmul,
    torch.mm,
    Tensor.mm,
    torch.bmm,
    Tensor.bmm,
    torch.addmm,
    Tensor.addmm,
    torch.baddbmm,
    torch.einsum,
    torch.tensordot,
    torch.linalg.multi_dot,
    F.linear,
    nn.Linear,
)
AUTOGRAD = (torch.autograd.grad, torch.autograd.backward, Tensor.backward, "torch._functorch")  # "by hand" exercises
ADAM = ("torch.optim.adam", "torch.optim.adamw", torch._fused_adam_, torch._fused_adamw_)  # AdamW subclasses Adam


@contextlib.contextmanager
def reference_only() -> Iterator[None]:
    """For a check's own reference computations (building and running a library's model), never the learner's code:
    torch's function modes and the profile function, the restriction's watches among them, are set aside, so that
    their stack walks do not cost seconds; they are back on exit."""
    modes = [torch._C._pop_torch_function_stack() for _ in range(torch._C._len_torch_function_stack())]
    profile = sys.getprofile()
    sys.setprofile(None)  # the Python-level watch too (_PythonWatch)
    try:
        yield
    finally:
        sys.setprofile(profile)
        for mode in reversed(modes):
            torch._C._push_on_torch_function_stack(mode)
