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


def how_it_runs(lesson_device: str, triton: bool, policy: device_policy.DevicePolicy) -> str:
    if lesson_device == "gpu" and not policy.has_cuda:
        return "skipped: its checks need a CUDA GPU"
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
        f"torch    {_version('torch')}",
        f"triton   {_version('triton')}",
        f"CUDA     {f'{policy.gpu_name}, compute capability {policy.capability[0]}.{policy.capability[1]}' if policy.has_cuda else 'not available'}",
        f"where    {'Google Colab' if device_policy.in_colab() else 'local'}; lessons at {repo_root()}",
        f"policy   {policy.describe()}",
        "",
        "lessons:",
    ]
    for path in lesson_notebooks():
        try:
            lesson = read_lesson(path)
            triton = load_checks(lesson.id).triton
        except (NotebookError, FileNotFoundError, TypeError) as exc:
            lines.append(f"  {display_path(path)}: cannot be graded: {exc}")
            continue
        lines.append(f"  {lesson.id:<28} {how_it_runs(lesson.device, triton, policy)}")
    return "\n".join(lines)
