"""The device policy, decided in one place.

CUDA when present, else the CPU. Triton compiles only for NVIDIA GPUs of compute capability 8.0
or newer; everywhere else (a CPU, a Colab T4) Triton kernels run in Triton's interpreter, which
must be switched on with TRITON_INTERPRET=1 *before* Triton is imported.
"""

from __future__ import annotations

import os
import sys
import warnings
from dataclasses import dataclass
from functools import lru_cache

MIN_TRITON_CAPABILITY = (8, 0)


@dataclass(frozen=True)
class DevicePolicy:
    device: str  # "cuda" or "cpu"
    gpu_name: str | None
    capability: tuple[int, int] | None
    triton_path: str  # "compiled" or "interpreter"

    @property
    def has_cuda(self) -> bool:
        return self.device == "cuda"

    @property
    def triton_device(self) -> str:
        """Where tensors handed to Triton kernels live: the interpreter reads CPU memory."""
        return "cuda" if self.triton_path == "compiled" else "cpu"

    def describe(self) -> str:
        where = (
            f"CUDA ({self.gpu_name}, compute capability {self.capability[0]}.{self.capability[1]})"
            if self.has_cuda
            else "CPU"
        )
        return f"device: {where}; Triton kernels: {self.triton_path}"


def _cuda_info() -> tuple[str | None, tuple[int, int] | None]:
    if os.environ.get("LLM_ALGO_FORCE_CPU") == "1":
        return None, None
    import torch  # torch never imports Triton at import time, so the order below stays safe

    if not torch.cuda.is_available():
        return None, None
    return torch.cuda.get_device_name(0), tuple(torch.cuda.get_device_capability(0))


@lru_cache(maxsize=1)
def policy() -> DevicePolicy:
    """Decide once per process and switch Triton's interpreter on where it is needed."""
    name, capability = _cuda_info()
    compiled = capability is not None and capability >= MIN_TRITON_CAPABILITY
    if not compiled:
        if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
            warnings.warn(
                "Triton was imported before llm_algo switched its interpreter on; if a kernel fails "
                "to launch, restart the kernel and run the setup cell first.",
                stacklevel=2,
            )
        os.environ["TRITON_INTERPRET"] = "1"
    return DevicePolicy(
        device="cuda" if name else "cpu",
        gpu_name=name,
        capability=capability,
        triton_path="compiled" if compiled else "interpreter",
    )


def triton_compiled() -> bool:
    """Whether Triton kernels compile here (a GPU of compute capability 8.0+), rather than run in the interpreter:
    checks pick GPU-sized shapes by it."""
    return policy().triton_path == "compiled"


def device() -> str:
    return policy().device


def triton_device() -> str:
    return policy().triton_device


def triton_dtypes():
    """The dtypes a Triton kernel can be checked in here: the interpreter has no bfloat16."""
    import torch

    compiled = policy().triton_path == "compiled"
    return [torch.float32, torch.float16] + ([torch.bfloat16] if compiled else [])


def in_colab() -> bool:
    return "google.colab" in sys.modules or "COLAB_RELEASE_TAG" in os.environ
