"""Build every CUDA C++ extension a self-check will load, in parallel, before grading starts.

A GPU self-check of Part 04 grades each lesson in one child process, and each C++ mutant there needs a build of its
own (its source differs from the reference's): nvcc over torch's headers takes 30-70 s, so a lesson with eight C++
mutants spends minutes building one extension after another while the machine's other cores idle. Builds are cached
by content (`llm_algo.cuda.inline`: the folder name carries a hash of the source, the flags and torch's version), so
building each distinct source once, all at the same time, up front, leaves the graders only loads (under a second):

    python -m llm_algo prebuild-cuda 04_CUDA_Systems/ --jobs 8

How the sources are found: each lesson's namespace is loaded with the reference solutions (and once per mutant, with
that mutant applied), `compile_cuda` is replaced by a recorder, and every function of the notebook that calls
`compile_cuda` and takes no argument (`load_sgemm()`, the exercises' loaders) is called. The recorded requests are
de-duplicated by their build name and built in a pool of processes. A build that fails (a mutant that does not
compile) is reported and left to the grader, which reports the same error where it belongs.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import inspect
import io
import multiprocessing
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class BuildRequest:
    cuda_source: str
    functions: tuple[str, ...]
    name: str
    cpp_source: str | None
    extra_cuda_cflags: tuple[str, ...]
    origin: str  # "p04.reduction" or "p04.reduction, mutant no_barrier": for the report

    def key(self) -> tuple:
        return (self.cuda_source, self.functions, self.name, self.cpp_source, self.extra_cuda_cflags)


class _Recorded(Exception):
    """Raised by the recording compile_cuda: the loader has said what it would build; nothing more to run."""


def _recording(requests: list[BuildRequest], origin: str) -> Callable:
    def compile_cuda(cuda_source, functions, *, name="kernel", cpp_source=None, extra_cuda_cflags=None):
        requests.append(
            BuildRequest(cuda_source, tuple(functions), name, cpp_source, tuple(extra_cuda_cflags or ()), origin=origin)
        )
        raise _Recorded

    return compile_cuda


def _loaders(namespace: dict) -> list[Callable]:
    """The notebook's functions that call compile_cuda and take no argument."""
    found = []
    for value in namespace.values():
        if not inspect.isfunction(value) or value.__globals__ is not namespace:
            continue
        if "compile_cuda" not in value.__code__.co_names:
            continue
        parameters = inspect.signature(value).parameters.values()
        if all(p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in parameters):
            found.append(value)
    return found


def requests_of(notebook: Path) -> list[BuildRequest]:
    """What the lesson's reference solutions and each of its mutants would build."""
    from ..cuda import inline
    from ..mutation.mutants import load_mutants
    from ..notebook import read_lesson
    from .execute import load_namespace

    lesson = read_lesson(notebook)
    requests: list[BuildRequest] = []
    for mutant in [None, *load_mutants(lesson.id)]:
        origin = lesson.id if mutant is None else f"{lesson.id}, mutant {mutant.name}"
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # the setup cells' "device: ..." lines, once per mutant
                namespace = load_namespace(lesson, "solution", mutant=mutant).namespace
        except Exception:  # noqa: BLE001 (a stale or broken mutant: the grader reports it)
            continue
        recorder = _recording(requests, origin)
        with _replaced(inline, "compile_cuda", recorder):
            if "compile_cuda" in namespace:
                namespace["compile_cuda"] = recorder
            for loader in _loaders(namespace):
                with contextlib.suppress(Exception):  # _Recorded, or a loader that fails before building
                    loader()
    return requests


@contextlib.contextmanager
def _replaced(owner, attribute: str, value):
    original = getattr(owner, attribute)
    setattr(owner, attribute, value)
    try:
        yield
    finally:
        setattr(owner, attribute, original)


def unique(requests: Iterable[BuildRequest]) -> list[BuildRequest]:
    seen: dict[tuple, BuildRequest] = {}
    for request in requests:
        seen.setdefault(request.key(), request)
    return list(seen.values())


def _build(request: BuildRequest) -> tuple[str, float, str]:
    """In a pool process: build (or load) one extension; (origin, seconds, error or "")."""
    from ..cuda.inline import compile_cuda

    start = time.perf_counter()
    try:
        compile_cuda(
            request.cuda_source,
            list(request.functions),
            name=request.name,
            cpp_source=request.cpp_source,
            extra_cuda_cflags=list(request.extra_cuda_cflags) or None,
        )
    except Exception as exc:  # noqa: BLE001 (reported; the grader meets the same error in its check)
        return request.origin, time.perf_counter() - start, f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    return request.origin, time.perf_counter() - start, ""


def prebuild(notebooks: list[Path], jobs: int, out: Callable[[str], None] = print) -> int:
    """Build every distinct extension of these lessons, `jobs` at a time; the number of builds that failed."""
    from ..cuda.inline import nvcc_path

    if nvcc_path() is None:
        out("prebuild-cuda: nvcc is not installed here; nothing to build")
        return 0
    start = time.perf_counter()
    requests = unique(r for notebook in notebooks for r in requests_of(notebook))
    out(f"prebuild-cuda: {len(requests)} distinct extensions in {len(notebooks)} lessons, {jobs} at a time")
    failed = 0
    context = multiprocessing.get_context("spawn")  # no CUDA state and no grader state is inherited
    with concurrent.futures.ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        for origin, seconds, error in pool.map(_build, requests):
            if error:
                failed += 1
                out(f"  {origin}: failed after {seconds:.0f} s ({error})")
            else:
                out(f"  {origin}: {seconds:.0f} s")
    out(f"prebuild-cuda: done in {time.perf_counter() - start:.0f} s, {failed} failed")
    return failed
