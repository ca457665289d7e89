"""Which C++ compiler links a CUDA extension, so that the extension uses the C++ runtime Python has loaded.

On the course's H200 machine (torch 2.11+cu130) `CXX=/opt/gcc/bin/g++` is a wrapper around the system's g++ 13.3.
An extension linked by it loads and runs, but every `TORCH_CHECK(cond, "got ", n)` whose message formats a number
(int, double, `sizes()`) killed the process with SIGSEGV when it fired; messages made only of strings or of a
dtype raised cleanly, and the same source linked by /usr/bin/g++ raised a RuntimeError as it should. The symptom is
that of a C++ runtime linked *statically* into the extension: numbers go through the stream's locale facets, and a
second, private copy of libstdc++ in a dlopen'ed library has them in a broken state. On a CPU machine, linking a
torch extension with `-static-libstdc++` reproduces it in a milder form: the message comes out with the number
missing ("threads " instead of "threads 2048").

So before building, `compile_cuda` asks the compiler named in CXX (and CC) to link a small C++ library and reads
the library's dynamic section: a compiler whose C++ library does not need `libstdc++.so` is replaced, for the
build, by the system's `c++`/`cc` when that one links it dynamically. `doctor` says when this happens.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path

_PROBE = "#include <sstream>\n#include <string>\nstd::string probe(long v) { std::ostringstream s; s << v; return s.str(); }\n"


def needed_libraries(library: Path) -> list[str] | None:
    """The DT_NEEDED entries of a shared library (`readelf -d`), or None when they cannot be read."""
    readelf = shutil.which("readelf")
    if readelf is None:
        return None
    try:
        done = subprocess.run([readelf, "-d", str(library)], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return [line.split("[", 1)[1].split("]", 1)[0] for line in done.stdout.splitlines() if "(NEEDED)" in line]


@lru_cache(maxsize=16)
def links_cpp_runtime_dynamically(compiler: str) -> bool | None:
    """Does `compiler` link a C++ shared library against libstdc++.so (True), or the runtime into it (False)?
    None when it cannot tell (no such compiler, a failed build, no readelf)."""
    with tempfile.TemporaryDirectory(prefix="llm_algo_cxx_") as folder:
        source, library = Path(folder) / "probe.cpp", Path(folder) / "probe.so"
        source.write_text(_PROBE)
        try:
            done = subprocess.run(
                [compiler, "-x", "c++", "-shared", "-fPIC", str(source), "-o", str(library)],
                capture_output=True,
                timeout=120,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            return None
        if done.returncode != 0 or not library.exists():
            return None
        needed = needed_libraries(library)
    if needed is None:
        return None
    return any(name.startswith("libstdc++.so") for name in needed)


def build_environment() -> tuple[dict[str, str], str | None]:
    """Overrides of CXX (and CC) for the build, and a one-line note when it overrides anything.

    Only a CXX that links the C++ runtime statically is replaced, and only by the system's `c++` when that one links
    it dynamically; CC (nvcc's host compiler) then becomes the system's `cc` too, so that one toolchain builds the
    extension. Otherwise nothing changes. (CC is not probed itself: a C compiler driver never adds libstdc++.)"""
    named = os.environ.get("CXX")
    if not named or links_cpp_runtime_dynamically(named) is not False:
        return {}, None
    system = shutil.which("c++", path="/usr/bin:/bin")
    if not system or not links_cpp_runtime_dynamically(system):
        return {}, None
    overrides, replaced = {"CXX": system}, [f"CXX={named} → {system}"]
    system_cc = shutil.which("cc", path="/usr/bin:/bin")
    if os.environ.get("CC") and system_cc:
        overrides["CC"] = system_cc
        replaced.append(f"CC={os.environ['CC']} → {system_cc}")
    return overrides, (
        "built with the system compiler (" + ", ".join(replaced) + "): the compiler in the environment links the "
        "C++ runtime into the extension, which breaks TORCH_CHECK messages that print numbers"
    )


def doctor_line() -> str | None:
    """What `doctor` prints about the host compiler, when there is something to say."""
    _, note = build_environment()
    return f"host C++ compiler: {note}" if note else None
