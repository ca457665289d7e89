"""The check author's API: what a check is, how a lesson declares its checks, and the expectations they raise.

A lesson's checks live in `tests/checks/<lesson id with _>.py`:

    checks = Checks("p02.rmsnorm")

    @checks("rmsnorm")
    def matches_torch_rms_norm(ex):
        \"\"\"random inputs over several shapes match F.rms_norm\"\"\"
        ...
        expect_close(ex.rms_norm(x, w), oracle, input=f"x {tuple(x.shape)} {x.dtype}")

`ex` gives the exercise's names (`ex.rms_norm`), taken from the learner's notebook, the reference
solution, or a mutant. The pytest plugin and the notebook's `check("rmsnorm")` both run these
functions through `llm_algo.grading.run.run_check`, so the two can never disagree.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace

import torch

from .. import device as device_policy
from ..module_files import load_module
from ..outcome import check_key
from ..paths import checks_module_path, display_path
from .failure import CheckFailed
from .restrictions import Restriction
from .tolerance import mismatch


@dataclass(frozen=True)
class CheckSpec:
    lesson_id: str
    exercise: str
    name: str
    description: str
    func: Callable = field(repr=False, compare=False)
    requires_cuda: bool = False
    hint: str = ""
    gate: bool = False  # a memory-safety check: when it fails, the exercise's other checks are not run
    restriction: Restriction | None = field(default=None, repr=False, compare=False)  # see Checks.restrict
    requires_compiled: bool = False  # shapes only compiled Triton grades in time: skipped under the interpreter
    requires_capability: tuple[int, int] | None = None  # where there is a CUDA GPU: at least this capability
    requires_gpu_memory_gib: float | None = None  # where there is a CUDA GPU: at least this much memory (GiB)
    in_place: frozenset[str] = frozenset()  # arguments the exercise's contract changes in place (Checks.in_place)

    @property
    def key(self) -> str:
        return check_key(self.exercise, self.name)


class Checks:
    """The registry of one lesson's checks; use an instance as a decorator factory."""

    def __init__(self, lesson_id: str, *, triton: bool = False):
        self.lesson_id = lesson_id
        self.triton = triton
        self.specs: list[CheckSpec] = []
        self.restrictions: dict[str, Restriction] = {}
        self.in_place_args: dict[str, frozenset[str]] = {}  # exercise -> arguments its contract changes in place
        self.tunes_every_config = False  # True: the grader keeps every autotuner config (llm_algo.grading.autotune)
        self.benchmark: Callable | None = None  # set by load_checks from the module's `benchmark`, if any

    def __call__(
        self,
        exercise: str,
        *,
        requires_cuda: bool = False,
        requires_compiled: bool = False,
        requires_capability: tuple[int, int] | None = None,
        hint: str = "",
        gate: bool = False,
        requires_gpu_memory_gib: float | None = None,
    ) -> Callable:
        """Register a check of `exercise`. `requires_cuda`: needs a CUDA GPU; `requires_compiled`: needs Triton
        compiled (not the interpreter); `requires_capability=(8, 9)`: on a machine with a CUDA GPU, that GPU must have
        at least this compute capability (a CPU runs the check, in Triton's interpreter; add requires_cuda for a check
        that needs a GPU anyway); `requires_gpu_memory_gib=30`: the GPU must have at least that much memory (a
        check of more than 2^31 elements). Where the machine lacks it, the check reads *needs a GPU*, never passed."""
        malformed = requires_capability is not None and (
            len(requires_capability) != 2 or not all(isinstance(v, int) for v in requires_capability)
        )
        if malformed:
            raise TypeError(f"requires_capability must be (major, minor), got {requires_capability!r}")

        def register(func: Callable) -> Callable:
            doc = (func.__doc__ or func.__name__.replace("_", " ")).strip().splitlines()[0]
            restriction = self.restrictions.get(exercise)
            self.specs.append(
                CheckSpec(
                    self.lesson_id,
                    exercise,
                    func.__name__,
                    doc,
                    func,
                    requires_cuda,
                    hint,
                    gate,
                    restriction,
                    requires_compiled,
                    tuple(requires_capability) if requires_capability is not None else None,
                    requires_gpu_memory_gib,
                    self.in_place_args.get(exercise, frozenset()),
                )
            )
            return func

        return register

    def restrict(self, *exercises: str, instead: str, forbid: Iterable = (), kernel: bool = False) -> None:
        """Declare what the learner's code may not do while these exercises' checks run (llm_algo.check.restrictions):
        `forbid` torch functions, Tensor methods, Python functions, classes and modules (or module names);
        `kernel=True`: results must come from a @triton.jit kernel of the learner's. A violation fails the check
        with one line that names the call, where it was made, and `instead`: what the exercise asks for."""
        restriction = Restriction(tuple(forbid), instead, kernel)
        for exercise in exercises:
            if exercise in self.restrictions:
                raise ValueError(f"{self.lesson_id}: exercise {exercise!r} is restricted twice")
            self.restrictions[exercise] = restriction
        self.specs = [replace(s, restriction=self.restrictions.get(s.exercise)) for s in self.specs]

    def in_place(self, exercise: str, *arguments: str) -> None:
        """Declare the arguments that `exercise`'s contract changes in place (an optimizer's `params`, a cache the
        call appends to, an `out=` buffer): every other tensor a check hands the learner's code must come back
        unchanged (llm_algo.check.calls)."""
        if not arguments:
            raise ValueError(f"{self.lesson_id}: in_place({exercise!r}) names no argument")
        self.in_place_args[exercise] = self.in_place_args.get(exercise, frozenset()) | frozenset(arguments)
        self.specs = [replace(s, in_place=self.in_place_args.get(s.exercise, frozenset())) for s in self.specs]

    def for_exercise(self, exercise: str) -> list[CheckSpec]:
        return [s for s in self.specs if s.exercise == exercise]

    def exercises(self) -> list[str]:
        return list(dict.fromkeys(s.exercise for s in self.specs))


def load_checks(lesson_id: str) -> Checks:
    path = checks_module_path(lesson_id)
    if not path.exists():
        raise FileNotFoundError(f"lesson {lesson_id} has no checks module at {display_path(path)}")
    device_policy.policy()  # switches Triton's interpreter on (where needed) before a checks module can import triton
    module = load_module(path, f"llm_algo_checks.{path.stem}")
    registry = getattr(module, "checks", None)
    if not isinstance(registry, Checks) or registry.lesson_id != lesson_id:
        raise TypeError(f"{display_path(path)} must define `checks = Checks({lesson_id!r})`")
    registry.benchmark = getattr(module, "benchmark", None)  # optional: `benchmark(ex) -> list[BenchRow]`
    if registry.triton:  # kernels run by Triton's interpreter are bounds-checked (llm_algo.check.bounds)
        from . import bounds

        bounds.install()
    return registry


class Exercise:
    """The names a notebook defined, as the checks see them: `ex.rms_norm`."""

    def __init__(self, namespace: dict, lesson_name: str):
        self._namespace = namespace
        self._lesson_name = lesson_name

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._namespace[name]
        except KeyError:
            raise CheckFailed(
                f"{self._lesson_name} defines no `{name}`",
                expected=f"a definition of `{name}`",
                got="nothing by that name",
                hint="keep the name and signature the exercise cell gave you (did you rename it?)",
            ) from None


@contextlib.contextmanager
def replacing(ex: Exercise, name: str, value) -> Iterator:
    """While the block runs, the notebook's `name` is `value` — a recorder around a kernel or a given helper, or the
    checks' own copy of it — so that the learner's code calls it by that name; afterwards the name is what it was
    (or undefined again). Yields `value`."""
    namespace = ex._namespace
    missing = object()
    before = namespace.get(name, missing)
    namespace[name] = value
    try:
        yield value
    finally:
        if before is missing:
            namespace.pop(name, None)
        else:
            namespace[name] = before


# ----------------------------------------------------------------------------- helpers for checks


def expect(
    condition: bool, summary: str, *, input: str = "", expected: str = "", got: str = "", hint: str = ""
) -> None:
    if not condition:
        raise CheckFailed(summary, input=input, expected=expected, got=got, hint=hint)


def expect_gradcheck(fn: Callable, inputs: tuple, *, input: str = "", hint: str = "") -> None:
    """`torch.autograd.gradcheck` (float64 inputs that require grad) as a check: a broken graph (detach, in-place
    writes) fails with its first error line; NotImplementedError still means *not attempted*."""
    try:
        ok = torch.autograd.gradcheck(fn, inputs, raise_exception=False)
    except NotImplementedError:  # a subclass of RuntimeError: let "not attempted" through
        raise
    except RuntimeError as exc:
        ok, detail = False, (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    else:
        detail = "numerical and analytical gradients differ"
    expect(ok, "gradients are wrong or do not flow", input=input, expected="gradcheck passes", got=detail, hint=hint)


def expect_tensor(
    value, *, shape=None, dtype=None, device=None, input: str = "", what: str = "output", hint: str = ""
) -> None:
    """The dtype and shape contract: a tensor of exactly this shape, dtype and device type."""
    expect(
        isinstance(value, torch.Tensor),
        f"{what} is not a tensor",
        input=input,
        expected="torch.Tensor",
        got=type(value).__name__,
        hint="return the tensor, not a tuple or a number",
    )
    if shape is not None:
        expect(
            tuple(value.shape) == tuple(shape),
            f"{what} has the wrong shape",
            input=input,
            expected=str(tuple(shape)),
            got=str(tuple(value.shape)),
            hint="check which dimension you reduced or reshaped",
        )
    if dtype is not None:
        expect(
            value.dtype == dtype,
            f"{what} has the wrong dtype",
            input=input,
            expected=str(dtype),
            got=str(value.dtype),
            hint=hint or "cast the result back to the input's dtype at the end",
        )
    if device is not None:
        expect(
            value.device.type == torch.device(device).type,
            f"{what} is on the wrong device",
            input=input,
            expected=str(device),
            got=str(value.device),
            hint="allocate outputs on the input's device",
        )


def expect_close(
    got,
    oracle: torch.Tensor,
    *,
    input: str,
    baseline: torch.Tensor | None = None,
    dtype: torch.dtype | None = None,
    hint: str = "",
    what: str = "output",
) -> None:
    """Shape check, then the package's tolerance policy (llm_algo.check.tolerance) against a float64 oracle."""
    expect_tensor(got, shape=oracle.shape, input=input, what=what)
    found = mismatch(got, oracle, dtype=dtype or got.dtype, baseline=baseline)
    if found:
        raise CheckFailed(
            f"{what} differs from the reference: {found.summary}",
            input=input,
            expected=found.expected,
            got=found.got,
            hint=hint,
        )


def describe(**tensors) -> str:
    """`x (2, 7) float16, w (7,) float16` for a check's input column."""
    parts = []
    for name, value in tensors.items():
        if isinstance(value, torch.Tensor):
            parts.append(f"{name} {tuple(value.shape)} {str(value.dtype).removeprefix('torch.')}")
        else:
            parts.append(f"{name}={value!r}")
    return ", ".join(parts)


def expect_refused(
    call: Callable[[], object],
    input: str = "",
    hint: str = "",
    *,
    errors: tuple[type[BaseException], ...] = (Exception,),
) -> None:
    """`call()` must refuse its input by raising one of `errors` (any exception by default). NotImplementedError
    (not attempted) and check failures raised inside (a read out of bounds) go through; another exception than
    `errors` fails as an accident, not a refusal; a result fails as accepted bad input."""
    wanted = " or ".join(e.__name__ for e in errors)
    try:
        result = call()
    except (NotImplementedError, AssertionError):
        raise
    except errors:
        return
    except Exception as exc:  # an accident further down (KeyError, ZeroDivisionError...), not the exercise's refusal
        expect(False, "raised the wrong error type", input=input, expected=wanted, got=repr(exc)[:120], hint=hint)
    expect(
        False, "accepted bad input", input=input, expected=f"{wanted} with a message", got=repr(result)[:120], hint=hint
    )


def expect_refused_or_correct(
    call: Callable[[], object],
    check_result: Callable[[object], None],
    input: str = "",
    hint: str = "",
    *,
    errors: tuple[type[BaseException], ...] = (ValueError, TypeError),
) -> None:
    """For input an exercise MAY support beyond what the lesson asks (a kernel given fp32, another head size,
    S_q != S_k under a causal mask): one of `errors` (ValueError or TypeError by default; a CUDA C++ host function's
    TORCH_CHECK raises RuntimeError) with a message passes (a clear refusal), and so does a result that
    `check_result` accepts; another exception (a compile error, a crash further down) or a wrong result fails.
    Grading only the refusal would fail a learner for supporting more."""
    wanted = "/".join(e.__name__ for e in errors)
    try:
        result = call()
    except (NotImplementedError, AssertionError):
        raise
    except errors as exc:
        expect(
            bool(str(exc).strip()),
            "refused without saying why",
            input=input,
            expected="an error message",
            got=repr(exc),
            hint=hint,
        )
        return
    except Exception as exc:  # neither a refusal nor a result
        expect(
            False,
            "neither refused the input clearly nor computed a result",
            input=input,
            expected=f"{wanted} with a message, or a correct result",
            got=repr(exc)[:160],
            hint=hint,
        )
    check_result(result)


def expect_exact_int(got, want: int, input: str, hint: str, what: str = "count") -> None:
    """An exact integer answer (a byte count, a parameter count, FLOPs): a Python int, and equal to `want`."""
    expect(
        isinstance(got, int) and not isinstance(got, bool),
        f"the {what} is not a Python int",
        input=input,
        expected="int",
        got=f"{type(got).__name__} {got!r}"[:120],
        hint="counts are exact integers: use // and int arithmetic, not floats",
    )
    expect(
        got == want,
        f"wrong {what}",
        input=input,
        expected=f"{want:,}",
        got=f"{got:,} (off by {got - want:+,})",
        hint=hint,
    )


def chi_square_p_value(counts: torch.Tensor, probs: torch.Tensor) -> tuple[float, float]:
    """Pearson's test of `counts` against exact `probs` (cells of probability 0 left out): (p-value, statistic), the
    p-value from the chi-square survival function `gammaincc(dof / 2, statistic / 2)`."""
    support = probs > 0
    expected = counts.double().sum() * probs[support].double()
    statistic = float(((counts[support].double() - expected) ** 2 / expected).sum())
    dof = int(support.sum()) - 1
    if dof < 1:
        return 1.0, statistic
    p_value = torch.special.gammaincc(torch.tensor(dof / 2.0, dtype=torch.float64), torch.tensor(statistic / 2))
    return float(p_value), statistic


def expect_distribution(
    counts: torch.Tensor, probs: torch.Tensor, *, input: str, hint: str, what: str = "the draws", false_alarm=1e-3
) -> None:
    """Samples (`counts` per outcome) follow the exact distribution `probs`: none where it is 0, and Pearson's
    chi-square test passes at the stated false-alarm rate (a correct sampler fails it with that probability on a
    random seed; checks use a fixed one)."""
    outside = int(counts[probs == 0].sum())
    expect(
        outside == 0,
        f"{what}: {outside} samples of outcomes whose probability is 0",
        input=input,
        expected="no sample outside the support",
        got=f"counts {counts.long().tolist()}",
        hint=hint,
    )
    p_value, statistic = chi_square_p_value(counts, probs)
    expect(
        p_value > false_alarm,
        f"{what} do not follow the expected distribution",
        input=input,
        expected=f"chi-square p-value > {false_alarm}; expected counts "
        f"{[round(x, 1) for x in (counts.double().sum() * probs.double()).tolist()]}",
        got=f"statistic {statistic:.1f}, p-value {p_value:.2e}, counts {counts.long().tolist()}",
        hint=hint,
    )


def expect_value_error(call: Callable[[], object], input: str = "", hint: str = "") -> None:
    """`call()` must raise ValueError: the contract of an exercise that validates its arguments."""
    expect_refused(call, input, hint, errors=(ValueError,))


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Run tiny models on one intra-op thread (also as a decorator on a check): with two on a busy 2-core machine,
    every small op pays for thread hand-offs (40 DPO steps of a 1-layer Llama: 7.8 s against 0.3 s). The previous
    setting comes back on exit."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
