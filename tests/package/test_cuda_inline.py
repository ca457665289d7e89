"""CUDA C++ from a notebook cell (llm_algo.cuda.inline): nvcc's errors come back as the learner's lines; on a GPU,
a kernel builds, runs, and is loaded from the cache the second time."""

from __future__ import annotations

import linecache
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import torch

from llm_algo.cuda import inline

BROKEN = """
__global__ void scale(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * factor;
}
"""

VECTOR_ADD = r"""
__global__ void add_kernel(const float* a, const float* b, float* c, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

torch::Tensor vector_add(torch::Tensor a, torch::Tensor b) {
    auto c = torch::empty_like(a);
    long n = a.numel();
    add_kernel<<<(n + 255) / 256, 256>>>(a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), n);
    return c;
}
"""


def test_declarations_are_read_off_the_definitions():
    assert (
        inline.declarations(VECTOR_ADD, ["vector_add"]) == "torch::Tensor vector_add(torch::Tensor a, torch::Tensor b);"
    )
    with pytest.raises(ValueError, match="no definition of `missing"):
        inline.declarations(VECTOR_ADD, ["missing"])


def test_the_cache_key_follows_the_source():
    one = inline.build_name("k", VECTOR_ADD, "", ["vector_add"], ["-O3"])
    assert one == inline.build_name("k", VECTOR_ADD, "", ["vector_add"], ["-O3"])
    assert one != inline.build_name("k", VECTOR_ADD + " ", "", ["vector_add"], ["-O3"])
    assert one != inline.build_name("k", VECTOR_ADD, "", ["vector_add"], ["-O2"])


@pytest.mark.skipif(inline.nvcc_path() is None, reason="needs nvcc")
def test_real_nvcc_errors_point_at_the_learners_line_and_cell(tmp_path):
    """nvcc's own message for an undeclared name, on a file that starts with other lines (as load_inline's does)."""
    written = "#include <cuda_runtime.h>\n// two lines before the learner's source\n" + BROKEN
    (tmp_path / "cuda.cu").write_text(written)
    log = subprocess.run(
        [inline.nvcc_path(), "-c", str(tmp_path / "cuda.cu"), "-o", str(tmp_path / "x.o")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert log.returncode != 0
    cell = f"SCALE = r'''{BROKEN}'''\nmodule = compile_cuda(SCALE, ['scale'])\n"
    linecache.cache["<notebook 04_Test.ipynb, cell 5>"] = (len(cell), None, cell.splitlines(True), "x")
    message = inline.explain(log.stdout + log.stderr, BROKEN, written)
    assert message.startswith("your CUDA source, line 4 (cell line 4): error:"), message
    assert "factor" in message and "x[i] = x[i] * factor;" in message


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_kernel_builds_runs_and_comes_from_the_cache_the_second_time():
    module = inline.compile_cuda(VECTOR_ADD, ["vector_add"], name="test_vector_add")
    a, b = torch.randn(1000, device="cuda"), torch.randn(1000, device="cuda")
    torch.testing.assert_close(module.vector_add(a, b), a + b)
    inline._loaded.clear()  # a new process: the built library is on disk
    start = time.perf_counter()
    again = inline.compile_cuda(VECTOR_ADD, ["vector_add"], name="test_vector_add")
    assert time.perf_counter() - start < 10.0  # loading, not nvcc
    torch.testing.assert_close(again.vector_add(a, b), a + b)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_compile_error_names_the_learners_line():
    source = VECTOR_ADD.replace("c[i] = a[i] + b[i];", "c[i] = a[i] + bb[i];")
    with pytest.raises(inline.CudaCompileError, match=r"your CUDA source, line 4.*bb"):
        inline.compile_cuda(source, ["vector_add"], name="test_broken")


def _wrapper(tmp_path, name: str, extra: str) -> str:
    """A 'compiler' that runs the system's c++ with extra flags (as the H200 image's /opt/gcc/bin/g++ wraps g++)."""
    script = tmp_path / name
    script.write_text(f'#!/bin/sh\nexec /usr/bin/c++ "$@" {extra}\n')
    script.chmod(0o755)
    return str(script)


needs_system_cxx = pytest.mark.skipif(
    not (Path("/usr/bin/c++").exists() and shutil.which("readelf")), reason="needs /usr/bin/c++ and readelf"
)


@needs_system_cxx
def test_a_cxx_that_links_the_cpp_runtime_statically_is_replaced_for_the_build(tmp_path, monkeypatch):
    from llm_algo.cuda import host_compiler

    static = _wrapper(tmp_path, "static-g++", "-static-libstdc++")
    plain = _wrapper(tmp_path, "plain-g++", "")
    assert host_compiler.links_cpp_runtime_dynamically(static) is False
    assert host_compiler.links_cpp_runtime_dynamically(plain) is True

    monkeypatch.setenv("CXX", plain)
    monkeypatch.setenv("CC", "/usr/bin/gcc")
    assert host_compiler.build_environment() == ({}, None)

    monkeypatch.setenv("CXX", static)
    overrides, note = host_compiler.build_environment()
    assert overrides["CXX"] == shutil.which("c++", path="/usr/bin:/bin")
    assert overrides["CC"] == shutil.which("cc", path="/usr/bin:/bin")
    assert f"CXX={static}" in note and "TORCH_CHECK messages that print numbers" in note
    assert host_compiler.doctor_line().startswith("host C++ compiler: built with the system compiler")
    # the build's name (its cache key) changes with the compiler, so a library linked by the wrapper is not reused
    assert inline.build_name("k", "src", "", ["f"], ["-O3"]) != inline.build_name(
        "k", "src", "", ["f"], ["-O3", f"CXX={overrides['CXX']}"]
    )


def test_a_compiler_that_cannot_say_changes_nothing(tmp_path, monkeypatch):
    from llm_algo.cuda import host_compiler

    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    assert host_compiler.links_cpp_runtime_dynamically(str(tmp_path / "no-such-compiler")) is None
    assert host_compiler.build_environment() == ({}, None)
    monkeypatch.delenv("CXX")
    assert host_compiler.build_environment() == ({}, None)
