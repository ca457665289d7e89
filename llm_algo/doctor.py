"""`python -m llm_algo doctor`: what this machine can run, and how each lesson will be graded."""

from __future__ import annotations

import platform
from importlib import metadata

from . import device as device_policy
from .check.api import load_checks
from .notebook import NotebookError, read_lesson
from .paths import display_path, lesson_notebooks, repo_root


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def torch_build() -> str:
    """`2.13.0+cpu (CPU build)` or `2.13.0 (CUDA 13.0 build)`: pip's version alone does not say which."""
    import torch

    cuda = torch.version.cuda
    return f"{torch.__version__} ({f'CUDA {cuda} build' if cuda else 'CPU build'})"


def build_warning(policy: device_policy.DevicePolicy) -> str | None:
    import torch

    if torch.version.cuda and not policy.has_cuda:
        return (
            "warning: this is a CUDA build of torch on a machine without a usable GPU: it runs, but its NVIDIA "
            "libraries take gigabytes for nothing. The CPU build: pip install --force-reinstall torch "
            "--index-url https://download.pytorch.org/whl/cpu"
        )
    return None


def triton_installed() -> bool:
    return _version("triton") != "not installed"


def nvcc() -> str:
    """The CUDA compiler that Part 04's C++ exercises need (torch.utils.cpp_extension builds with it)."""
    import shutil
    import subprocess

    path = shutil.which("nvcc")
    if path is None:
        return (
            "not found: Part 04's CUDA C++ exercises need it (the CUDA toolkit matching torch's CUDA version; "
            "Colab's GPU runtimes have it)"
        )
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return path
    release = next((line.split("release")[-1].strip() for line in out.splitlines() if "release" in line), "")
    return f"{path} ({release})" if release else path


def how_it_runs(lesson_device: str, triton: bool, policy: device_policy.DevicePolicy) -> str:
    if lesson_device == "gpu" and not policy.has_cuda:
        return "skipped: its checks need a CUDA GPU"
    if triton and not triton_installed():
        return "cannot be graded here: triton is not installed (its wheels are for Linux; use Colab or a Linux box)"
    if triton:
        return (
            "Triton compiled on the GPU"
            if policy.triton_path == "compiled"
            else "Triton interpreter on the CPU (small shapes)"
        )
    return f"native PyTorch on {policy.device}"


def report() -> str:
    policy = device_policy.policy()
    lines = [
        f"Python   {platform.python_version()} ({platform.machine()})",
        f"torch    {torch_build()}",
        f"triton   {_version('triton')}",
        f"CUDA     {f'{policy.gpu_name}, compute capability {policy.capability[0]}.{policy.capability[1]}' if policy.has_cuda else 'not available'}",
        f"nvcc     {nvcc()}",
        f"where    {'Google Colab' if device_policy.in_colab() else 'local'}; lessons at {repo_root()}",
        f"policy   {policy.describe()}",
        "",
        "lessons:",
    ]
    from .cuda.host_compiler import doctor_line

    compiler = doctor_line()
    if compiler:
        lines.insert(lines.index("lessons:") - 1, compiler)
    warning = build_warning(policy)
    if warning:
        lines[lines.index("lessons:") - 1 : lines.index("lessons:") - 1] = ["", warning]
    for path in lesson_notebooks():
        try:
            lesson = read_lesson(path)
            triton = load_checks(lesson.id).triton
        except (NotebookError, FileNotFoundError, TypeError) as exc:
            lines.append(f"  {display_path(path)}: cannot be graded: {exc}")
            continue
        lines.append(f"  {lesson.id:<28} {how_it_runs(lesson.device, triton, policy)}")
    return "\n".join(lines)
