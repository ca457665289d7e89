"""Compile the reference CUDA C++ of lessons with nvcc, without a GPU: a maintainer's first check of a C++ exercise.

    python scripts/cuda_compile_check.py 04_CUDA_Systems/05_Tensor_Cores.ipynb [...] [--arch sm_80 sm_90]

A CPU build of torch cannot build or load an extension, but its wheel ships the CUDA headers (ATen/cuda, c10/cuda),
so nvcc can compile each kernel source to an object file. For every reference solution cell of each notebook, each
string constant that defines a `__global__` function is written to a `.cu` file after `#include <torch/extension.h>`
(what `load_inline` prepends) and compiled with `-c` for each architecture, with ptxas's register and spill report.
It catches what a GPU run would hit first — syntax, types, intrinsics missing on an architecture — but it does not
link, load or run anything: a kernel that compiles can still be wrong. Slow on a small machine (about 1.5 min per
source and architecture on 2 cores: torch's headers dominate)."""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from llm_algo.cuda.inline import nvcc_path  # noqa: E402
from llm_algo.notebook import read_lesson  # noqa: E402


def cuda_sources(code: str) -> list[tuple[str, str]]:
    """(variable name, text) of each string constant in `code` that holds a `__global__` function."""
    found = []
    for node in ast.walk(ast.parse(code)):
        value = node.value.value if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) else None
        if isinstance(value, str) and "__global__" in value:
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            found.append((names[0] if names else "?", value))
    return found


# The one header of c10/cuda that CMake generates for a CUDA build and a CPU wheel lacks (its content in a CUDA
# wheel: extensions link c10_cuda as a shared library).
CMAKE_MACROS = "#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n"


def include_flags(folder: Path) -> list[str]:
    import torch

    include = Path(torch.__file__).parent / "include"
    flags = []
    if not (include / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h").exists():
        shim = folder / "shim" / "c10" / "cuda" / "impl"
        shim.mkdir(parents=True, exist_ok=True)
        (shim / "cuda_cmake_macros.h").write_text(CMAKE_MACROS)
        flags.append(f"-I{folder / 'shim'}")
    return [
        *flags,
        f"-I{include}",
        f"-I{include / 'torch' / 'csrc' / 'api' / 'include'}",
        f"-I{sysconfig.get_paths()['include']}",
    ]


def compile_one(source: str, arch: str, folder: Path, stem: str) -> tuple[bool, str]:
    path = folder / f"{stem}.cu"
    path.write_text("#include <torch/extension.h>\n" + source)
    command = [nvcc_path() or "nvcc", "-std=c++17", "-O3", "-c", f"-arch={arch}", *include_flags(folder), str(path)]
    command += ["-o", str(folder / f"{stem}_{arch}.o"), "-Xptxas", "-v"]
    done = subprocess.run(command, capture_output=True, text=True)
    lines = [
        line.strip()
        for line in (done.stdout + done.stderr).splitlines()
        if ("error" in line.lower() or "registers" in line or "spill" in line) and "warning" not in line.lower()
    ]
    return done.returncode == 0, "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--arch", nargs="+", default=["sm_80", "sm_90"])
    args = parser.parse_args()
    if nvcc_path() is None:
        print("nvcc is not installed here")
        return 2
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for notebook in args.notebooks:
            lesson = read_lesson(notebook)
            for name in lesson.exercise_names():
                for variable, source in cuda_sources(lesson.solution_cell(name).source):
                    for arch in args.arch:
                        start = time.monotonic()
                        ok, report = compile_one(source, arch, Path(tmp), f"{name}_{variable}")
                        failed += not ok
                        verdict = "compiled" if ok else "FAILED"
                        print(f"{lesson.id} {name} {variable} {arch}: {verdict} ({time.monotonic() - start:.0f} s)")
                        if report:
                            print("    " + report.replace("\n", "\n    "))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
