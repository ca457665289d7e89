"""What checks of simulator kernels (the CPU twins of Part 04) share: recording launches, launching with a clear
failure for an index past an array, and switching Python threads often so that simulated blocks run faster.

    with recording(ex, "add_kernel") as recorder:
        out = ex.vector_add_sim(a, b)
    assert recorder.launches == [(4, 256)]
    simulate(ex.add_kernel, 4, 256, a, b, out, input="n=1000", hint="guard with i < n", outside="past n")
"""

from __future__ import annotations

import contextlib
import sys

from ..check.api import expect, replacing


class LaunchRecorder:
    """Stands in for a `@cuda.jit` kernel in the notebook's namespace: records each launch's configuration (as a
    tuple, ints where they are ints), then launches the real kernel."""

    def __init__(self, kernel):
        self.kernel = kernel
        self.launches: list[tuple] = []

    def __getitem__(self, config):
        parts = config if isinstance(config, tuple) else (config,)
        self.launches.append(tuple(int(v) if isinstance(v, int) else v for v in parts))
        return self.kernel[config]


@contextlib.contextmanager
def recording(ex, name: str):
    """Replace kernel `name` in the learner's namespace with a LaunchRecorder while the block runs."""
    kernel = getattr(ex, name)  # a missing kernel fails the check with the package's message
    with replacing(ex, name, LaunchRecorder(kernel)) as recorder:
        yield recorder


@contextlib.contextmanager
def quick_switching():
    """The simulator's threads wait on each other at every barrier; switching between Python threads often makes a
    block several times faster (and interleaves threads more, which exposes races sooner)."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def simulate(kernel, grid, block, *args, input: str, hint: str, outside: str = "past the end of an array") -> None:
    """`kernel[grid, block](*args)` in the simulator, threads switching often; an index past an array (IndexError
    there, silent corruption on a GPU) fails the check."""
    try:
        with quick_switching():
            kernel[grid, block](*args)
    except IndexError as exc:
        expect(
            False,
            "the kernel indexed past the end of an array",
            input=input,
            expected=f"no access {outside}",
            got=str(exc).splitlines()[0][:160],
            hint=hint,
        )


def as_float32_result(value, shape: tuple[int, ...], *, input: str, hint: str):
    """A simulator launcher's result: a float32 NumPy array of `shape`, returned as a tensor (its memory)."""
    import numpy as np
    import torch

    expect(
        isinstance(value, np.ndarray) and value.dtype == np.float32 and value.shape == shape,
        f"the result is not a float32 NumPy array of shape {shape}",
        input=input,
        expected=f"np.ndarray float32 {shape}",
        got=f"{type(value).__name__} {getattr(value, 'dtype', '')} {getattr(value, 'shape', '')}",
        hint=hint,
    )
    return torch.from_numpy(value)


def expect_no_bank_conflicts(log, *, input: str, hint: str, start: int = 0) -> None:
    """Every warp-wide shared-memory access of a traced launch (`llm_algo.cuda.races.tracing_shared_memory`) is one
    wavefront: no two lanes of a warp ask one bank for different words. The wavefronts are replayed from the addresses
    the simulated threads touched (`races.warp_wavefronts`): the layout the kernel's index expressions produce, not
    what the kernel says about itself."""
    from .races import warp_wavefronts

    accesses = warp_wavefronts(log, start)
    expect(
        bool(accesses),
        "the kernel made no shared-memory access",
        input=input,
        expected="loads and stores through cuda.shared.array",
        got="none traced",
        hint=hint,
    )
    worst = max(accesses, key=lambda access: access.wavefronts)
    lanes = sorted(worst.lanes.items())[:6]
    shown = ", ".join(f"lane {lane}: {worst.name}[{', '.join(map(str, index))}]" for lane, index in lanes)
    expect(
        worst.wavefronts == 1,
        "a warp's shared-memory access has bank conflicts",
        input=input,
        expected="1 wavefront for every warp-wide load and store (32 banks of 4 bytes; lanes that read one word share it)",
        got=f"{worst.wavefronts} wavefronts: warp {worst.warp} of block {worst.block} "
        f"{'stores' if worst.write else 'reads'} {worst.name} at line {worst.line} of the kernel's cell ({shown}, ...)",
        hint=hint,
    )
