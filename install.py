"""Install the course into the active Python environment, with the right PyTorch build for this machine.

    python install.py            # a CPU build without an NVIDIA GPU, the CUDA build with one
    python install.py --cpu      # or say which
    python install.py --gpu
    python install.py --dev      # maintainers: the linter and pytest-xdist too (what CI installs)

Why a script: pip alone cannot choose. On Linux and Windows, PyPI's `torch` is a CUDA build (about 2.5 GB of NVIDIA
libraries) and the CPU build lives on PyTorch's own index, so a plain `pip install -r requirements/cpu.txt` gives a
CPU learner the CUDA build. This script takes the CPU build from https://download.pytorch.org/whl/cpu when that
index answers, and says so when it does not (then PyPI's build is the only one there is). macOS wheels on PyPI are
CPU builds already. Then it installs the course package and everything else from `requirements/`.
It only uses the standard library: it runs before anything is installed.
"""

from __future__ import annotations

import argparse
import platform
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent
TORCH_RANGE = "torch>=2.11,<2.14"  # pyproject.toml's range (a package test keeps the two equal)
NEWEST_GRADED = "torch==2.13.0"  # where only PyPI is reachable: the newest version CI grades
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def has_nvidia_gpu() -> bool:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    try:
        return subprocess.run([smi, "-L"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def reachable(url: str, timeout: float = 5.0) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/torch/", timeout=timeout) as response:
            return response.status == 200
    except OSError:
        return False


def pip(*args: str) -> None:
    command = [sys.executable, "-m", "pip", "install", *args]
    print("+", " ".join(command), flush=True)
    subprocess.run(command, check=True)


def torch_command(build: str, index_answers) -> tuple[list[str], str]:
    """The pip arguments that install torch for `build` ("cpu" or "gpu"), and a line saying what they do."""
    if build == "gpu" or platform.system() == "Darwin":
        what = "the CUDA build from PyPI" if build == "gpu" else "PyPI's build (a CPU build on macOS)"
        return [TORCH_RANGE], what
    if index_answers(CPU_INDEX):
        return [TORCH_RANGE, "--index-url", CPU_INDEX], f"the CPU build from {CPU_INDEX}"
    return [NEWEST_GRADED], (
        f"warning: {CPU_INDEX} does not answer, so torch comes from PyPI: on Linux and Windows that is a CUDA build "
        "of several GB (where a CPU wheel is already on this machine, pip takes that one)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--cpu", action="store_true", help="the CPU build of PyTorch")
    which.add_argument("--gpu", action="store_true", help="the CUDA build of PyTorch (Linux, Windows)")
    parser.add_argument("--dev", action="store_true", help="maintainers: requirements/dev.txt (ruff, pytest-xdist)")
    args = parser.parse_args(argv)
    if sys.version_info < (3, 11):  # noqa: UP036 (this script runs on whatever Python the learner has)
        print(f"Python 3.11 or newer is needed; this is {platform.python_version()}")
        return 2
    build = "gpu" if args.gpu else "cpu" if args.cpu else ("gpu" if has_nvidia_gpu() else "cpu")
    print(f"install: PyTorch {build.upper()} build ({'asked for' if args.cpu or args.gpu else 'detected'})")
    torch_args, what = torch_command(build, reachable)
    print(f"install: torch — {what}")
    pip("-q", *torch_args)
    requirements = ROOT / "requirements" / ("dev.txt" if args.dev else "gpu.txt" if build == "gpu" else "cpu.txt")
    pip("-q", "-r", str(requirements))
    print("install: done. Check with `python -m llm_algo doctor`, then `jupyter lab`.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
