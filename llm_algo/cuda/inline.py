"""CUDA C++ written in a notebook cell, compiled with `torch.utils.cpp_extension.load_inline`, cached by its source.

    module = compile_cuda(VECTOR_ADD_SRC, ["vector_add"], name="vector_add")
    c = module.vector_add(a, b)

- **Cache.** The extension's name carries a hash of everything that shapes the build (the sources, the functions,
  the flags, torch's version), and its build folder is `.llm_algo/cuda/<name>/`: grading an unchanged kernel again,
  in this process or a later one, loads the built library instead of recompiling (nvcc with torch's headers takes
  tens of seconds).
- **Errors in the learner's lines.** nvcc reports lines of the file load_inline wrote (`cuda.cu`, which starts with
  torch's includes); `CudaCompileError` gives them back as lines of the learner's source — and of the notebook cell,
  when the cell that holds the source string is known — with the line's text, first error first.
- **Where it runs.** Compiling needs nvcc and a CUDA build of torch; running needs a GPU. Checks of C++ exercises are
  declared `requires_cuda=True`, so on a machine without a GPU they read *needs a GPU*, never passed.
"""

from __future__ import annotations

import contextlib
import hashlib
import linecache
import os
import re
import shutil
from pathlib import Path

from ..heartbeat import outside_time_limit
from ..paths import state_dir
from .host_compiler import build_environment

_loaded: dict[str, object] = {}
_ERROR = re.compile(r"^(?P<file>[^\s(]+\.(?:cu|cpp))\((?P<line>\d+)\): (?P<kind>error|warning)[^:]*: (?P<text>.*)$")
_GCC_ERROR = re.compile(r"^(?P<file>[^\s:]+\.(?:cu|cpp)):(?P<line>\d+):\d+: (?P<kind>error|warning): (?P<text>.*)$")


# What a C++ host function's refusal raises in Python: TORCH_CHECK (RuntimeError), TORCH_CHECK_VALUE, TORCH_CHECK_TYPE
TORCH_CHECK_ERRORS = (RuntimeError, ValueError, TypeError)


class CudaCompileError(Exception):
    """nvcc (or the host compiler) refused the learner's source; the message points at the learner's lines."""


def nvcc_path() -> str | None:
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home and (Path(home) / "bin" / "nvcc").exists():
        return str(Path(home) / "bin" / "nvcc")
    return shutil.which("nvcc")


def build_name(name: str, cuda_source: str, cpp_source: str, functions: list[str], flags: list[str]) -> str:
    import torch

    key = "\0".join([cuda_source, cpp_source, ",".join(functions), " ".join(flags), torch.__version__])
    return f"llm_algo_{re.sub(r'[^A-Za-z0-9_]', '_', name)}_{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def cell_line_of(source: str) -> tuple[str, int] | None:
    """(cell file name, the cell's line that holds the source's line 1) for a source string written in a notebook
    cell (its text is in the line cache: a grader's cell or an IPython cell)."""
    if not source.strip():
        return None
    for filename, entry in list(linecache.cache.items()):
        lines = entry[2] if isinstance(entry, tuple) and len(entry) >= 3 else None
        if not lines or not isinstance(filename, str):
            continue
        text = "".join(lines)
        at = text.find(source)
        if at >= 0:
            return filename, text[:at].count("\n") + 1
    return None


def explain(log: str, source: str, written: str, *, limit: int = 6) -> str:
    """nvcc's errors as lines of `source` (the learner's) rather than of `written` (the file load_inline wrote)."""
    offset = written.find(source)
    first_line = written[:offset].count("\n") if offset >= 0 else 0  # file line = source line + first_line
    source_lines = source.splitlines()
    where = cell_line_of(source)
    found = []
    for raw in log.splitlines():
        match = _ERROR.match(raw.strip()) or _GCC_ERROR.match(raw.strip())
        if not match or match["kind"] != "error":
            continue
        line = int(match["line"]) - first_line
        if 1 <= line <= len(source_lines):
            place = f"your CUDA source, line {line}"
            if where is not None:
                place += f" (cell line {where[1] + line - 1})"
            found.append(f"{place}: error: {match['text']}\n    {source_lines[line - 1].strip()}")
        else:
            found.append(f"{Path(match['file']).name}:{match['line']}: error: {match['text']}")
    if not found:
        tail = "\n".join(log.strip().splitlines()[-limit:])
        return f"the build failed:\n{tail}"
    more = f"\n(and {len(found) - limit} more)" if len(found) > limit else ""
    return "\n".join(found[:limit]) + more


def compile_cuda(
    cuda_source: str,
    functions: list[str],
    *,
    name: str = "kernel",
    cpp_source: str | None = None,
    extra_cuda_cflags: list[str] | None = None,
):
    """Build (or load from the cache) an extension from `cuda_source`, exposing `functions` to Python.

    `cpp_source` holds the functions' declarations; by default each `torch::Tensor NAME(...)` signature found in
    `cuda_source` is declared for you."""
    from torch.utils.cpp_extension import load_inline

    from ..check.restrictions import check_cpp_source

    if not isinstance(cuda_source, str) or not cuda_source.strip():
        raise ValueError("cuda_source must be the CUDA C++ text of your kernel and its launcher")
    check_cpp_source(cuda_source)  # while a check runs: ATen doing the exercise's work is a forbidden call
    flags = ["-O3", "-lineinfo", *(extra_cuda_cflags or [])]
    cpp = cpp_source if cpp_source is not None else declarations(cuda_source, functions)
    environment, _ = build_environment()
    compilers = [f"{key}={value}" for key, value in sorted(environment.items())]
    module_name = build_name(name, cuda_source, cpp, functions, flags + compilers)
    if module_name in _loaded:
        return _loaded[module_name]
    if nvcc_path() is None:
        raise CudaCompileError("nvcc, the CUDA compiler, is not installed here (`python -m llm_algo doctor`)")
    folder = state_dir() / "cuda" / module_name
    folder.mkdir(parents=True, exist_ok=True)
    try:
        with _environment(environment), outside_time_limit():  # a check's time is for the kernel, not nvcc
            module = load_inline(
                module_name,
                cpp_sources=cpp,
                cuda_sources=cuda_source,
                functions=functions,
                extra_cuda_cflags=flags,
                build_directory=str(folder),
                verbose=False,
            )
    except RuntimeError as exc:
        written_path = folder / "cuda.cu"
        written = written_path.read_text() if written_path.exists() else cuda_source
        raise CudaCompileError(explain(str(exc), cuda_source, written)) from None
    _loaded[module_name] = module
    return module


@contextlib.contextmanager
def _environment(overrides: dict[str, str]):
    """os.environ with `overrides` for the duration of a build (torch's builder reads CXX and CC from it)."""
    saved = {key: os.environ.get(key) for key in overrides}
    os.environ.update(overrides)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def declarations(cuda_source: str, functions: list[str]) -> str:
    """`torch::Tensor f(torch::Tensor a, ...);` for each exposed function, read off its definition."""
    out = []
    for function in functions:
        match = re.search(rf"^\s*([\w:<>]+(?:\s*[*&])?)\s+{re.escape(function)}\s*\(([^)]*)\)\s*\{{", cuda_source, re.M)
        if match is None:
            raise ValueError(f"no definition of `{function}(...)` found in the CUDA source (a host function)")
        out.append(f"{match[1]} {function}({match[2]});")
    return "\n".join(out)
