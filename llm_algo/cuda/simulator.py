"""numba-cuda's CUDA simulator, for the CPU twins of Part 04's kernels.

    from llm_algo.cuda.simulator import cuda      # numba.cuda, with NUMBA_ENABLE_CUDASIM=1

    @cuda.jit
    def add(a, b, out):
        i = cuda.grid(1)
        if i < out.shape[0]:
            out[i] = a[i] + b[i]

The simulator runs each thread of a block as a Python thread: `threadIdx`, `blockIdx`, shared memory,
`syncthreads`, atomics and warp shuffles behave as on a GPU (a missing `syncthreads` can race; an index past the end
of an array raises IndexError instead of silently corrupting memory), only slowly — keep grids to a few hundred
threads. Arrays are NumPy arrays (`tensor.numpy()`). Twins run in the simulator on every machine, a GPU one included,
so that their verdicts do not depend on the hardware; the C++ exercises are what runs on the GPU.
"""

from __future__ import annotations

import os
import sys

SIMULATOR_ENV = "NUMBA_ENABLE_CUDASIM"


class SimulatorUnavailable(RuntimeError):
    pass


def _numba_cuda():
    if "numba" in sys.modules:
        import numba

        if not numba.config.ENABLE_CUDASIM:
            raise SimulatorUnavailable(
                "numba was imported before the CUDA simulator was switched on: restart the kernel and run the "
                "setup cell first (it imports llm_algo.cuda.simulator before anything imports numba)"
            )
    os.environ[SIMULATOR_ENV] = "1"
    try:
        from numba import cuda
    except ImportError as exc:
        raise SimulatorUnavailable(
            "numba-cuda is not installed: `pip install -r requirements/cpu.txt` (or install.py) installs it"
        ) from exc
    return cuda


cuda = _numba_cuda()
