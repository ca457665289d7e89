"""numba-cuda's CUDA simulator, for the CPU twins of Part 04's kernels.

    from llm_algo.cuda.simulator import cuda      # numba.cuda, with NUMBA_ENABLE_CUDASIM=1

    @cuda.jit
    def add(a, b, out):
        i = cuda.grid(1)
        if i < out.shape[0]:
            out[i] = a[i] + b[i]

The simulator runs each thread of a block as a Python thread, and the blocks of a grid one after another:
`threadIdx`, `blockIdx`, shared memory, `syncthreads` and atomics compute what they would on a GPU (an index past the
end of an array raises IndexError instead of silently corrupting memory), only slowly — keep grids to a few hundred
threads. It is laxer than the hardware in three ways, and this module makes up for two of them:

- its `syncthreads()` waits only for the threads still running, so a barrier inside a branch that only some threads
  take (or after an early `return`) passes; on a GPU that hangs or mixes barriers;
- a missing `syncthreads()` races only when Python happens to switch threads at the wrong moment;
- it has no warp shuffles (`shfl_*_sync`) and no warps at all: every thread runs on its own.

Every launch is therefore strict (`llm_algo.cuda.races.install_strict_launches`): it counts each thread's barriers
and traces shared memory, and raises `SimulatorHazard` when the threads of a block passed different numbers of
barriers or two threads touched one shared element between the same two barriers, one of them writing — whatever
order the threads ran in. Shuffles are taught on a lane-level model in plain PyTorch (`p04.warp_primitives`) and in
CUDA C++, not in the simulator. Arrays are NumPy arrays (`tensor.numpy()`). Twins run in the simulator on every
machine, a GPU one included, so that their verdicts do not depend on the hardware; the C++ exercises are what runs on
the GPU.
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
    _serialize_shared_allocation()
    from .races import install_strict_launches

    install_strict_launches()
    return cuda


def _serialize_shared_allocation() -> None:
    """numba-cuda's simulator hands each `cuda.shared.array(...)` call site one array per block, looked up and created
    without a lock: two threads of a block can both find none and each make its own, so one thread's stores land in
    an array the others never read (garbage such as 6.8e+26 in a correct tiled matmul, now and then; often when
    threads switch every 10 µs). Here the look-up and the creation happen under one lock, keyed as numba keys them:
    the calling file and line."""
    import threading

    import numpy as np
    from numba.cuda.simulator import kernelapi

    from . import races  # races.shared_factory: set while shared memory is traced

    shared = kernelapi.FakeCUDAShared
    if getattr(shared.array, "_llm_algo_locked", False):
        return
    original, lock = shared.array, threading.Lock()

    def array(self, shape, dtype, alignment=None):
        if alignment is not None or shape == 0:  # refused, or the one dynamic buffer: no per-site allocation
            return original(self, shape, dtype, alignment)
        if isinstance(dtype, kernelapi.types.Type):
            dtype = kernelapi.numpy_support.as_dtype(dtype)
        frame = sys._getframe(1)
        caller = (frame.f_code.co_filename, frame.f_lineno)
        with lock:
            found = self._allocations.get(caller)
            if found is None:
                make = races.shared_factory or (lambda shape, dtype, frame: np.empty(shape, dtype))
                found = self._allocations[caller] = make(shape, dtype, frame)
        return found

    array._llm_algo_locked = True
    shared.array = array


cuda = _numba_cuda()
