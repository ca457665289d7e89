"""Races in shared memory, found in numba-cuda's simulator whatever order its Python threads ran in.

    with tracing_shared_memory() as log:
        kernel[grid, block](...)
    race = first_race(log)      # None, or a sentence naming the element, the two threads and the barriers

While tracing, each `cuda.shared.array(...)` of a block is a NaN-filled (floats) or zero-filled array that logs every
element read and write with the simulator thread and the number of `cuda.syncthreads()` that thread has passed. Two
threads of one block touching one element between the same two barriers, one of them writing, is a race on a GPU,
even where the simulator happened to run them in a harmless order: a check that compares only values misses it.
"""

from __future__ import annotations

import contextlib
import linecache
import threading
from collections import defaultdict

import numpy as np

from . import simulator


class SharedAccessLog:
    def __init__(self):
        self.accesses: list[tuple] = []  # (block, address, thread, barriers passed, is_write, name, index)
        self.barriers: dict[tuple, int] = {}  # (block, thread) -> barriers passed


class TracedShared(np.ndarray):
    """A shared array that logs every element read and write with the simulator thread and its barrier count."""

    log: SharedAccessLog | None = None
    name = "a shared array"

    def __array_finalize__(self, obj):
        if obj is not None:
            self.name = getattr(obj, "name", "a shared array")

    def _record(self, key, write: bool) -> None:
        index = key if isinstance(key, tuple) else (key,)
        if len(index) != self.ndim or not all(isinstance(k, (int, np.integer)) for k in index):
            return  # a view or a slice: its element accesses are logged through the view
        index = tuple(int(k) % n if n else int(k) for k, n in zip(index, self.shape, strict=True))
        address = self.__array_interface__["data"][0] + sum(k * s for k, s in zip(index, self.strides, strict=True))
        thread = threading.current_thread()
        block, me = getattr(thread, "blockIdx", None), getattr(thread, "threadIdx", None)
        if block is None or TracedShared.log is None:
            return
        TracedShared.log.accesses.append(
            (
                (block.x, block.y, block.z),
                address,
                (me.x, me.y, me.z),
                getattr(thread, "barriers_passed", 0),
                write,
                self.name,
                index,
            )
        )

    def __getitem__(self, key):
        self._record(key, False)
        return np.ndarray.__getitem__(self, key)

    def __setitem__(self, key, value):
        self._record(key, True)
        np.ndarray.__setitem__(self, key, value)


def _traced_array(shape, dtype, frame) -> TracedShared:
    fill = np.nan if np.dtype(dtype).kind == "f" else 0
    found = np.full(shape, fill, dtype=dtype).view(TracedShared)
    line = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
    found.name = line.split("=")[0].strip() if "=" in line else f"the shared array of line {frame.f_lineno}"
    return found


@contextlib.contextmanager
def tracing_shared_memory():
    """While it is open, blocks get TracedShared arrays (one per call site, as the simulator allocates them) and
    `cuda.syncthreads()` counts each thread's barriers; yields the SharedAccessLog."""
    from numba.cuda.simulator.kernel import BlockThread

    log = SharedAccessLog()
    original_sync = BlockThread.syncthreads

    def syncthreads(self):
        original_sync(self)
        self.barriers_passed = getattr(self, "barriers_passed", 0) + 1
        me, block = self.threadIdx, self.blockIdx
        log.barriers[((block.x, block.y, block.z), (me.x, me.y, me.z))] = self.barriers_passed

    simulator.shared_factory = _traced_array
    BlockThread.syncthreads = syncthreads
    TracedShared.log = log
    try:
        yield log
    finally:
        simulator.shared_factory = None
        BlockThread.syncthreads = original_sync
        TracedShared.log = None


def first_race(log: SharedAccessLog) -> str | None:
    """Two threads of a block touching one element between the same two barriers, one of them writing."""
    touches: dict[tuple, list[tuple]] = defaultdict(list)
    for block, address, thread, epoch, write, name, index in log.accesses:
        touches[(block, address, epoch)].append((thread, write, name, index))
    for (block, _, epoch), accesses in touches.items():
        writers = [a for a in accesses if a[1]]
        if not writers:
            continue
        writer = writers[0]
        other = next((a for a in accesses if a[0] != writer[0]), None)
        if other is not None:
            element = f"{writer[2]}[{', '.join(map(str, writer[3]))}]"
            return (
                f"block {block[:2]}: thread {writer[0][:2]} writes {element} and thread {other[0][:2]} "
                f"{'writes' if other[1] else 'reads'} it between barrier {epoch} and barrier {epoch + 1}"
            )
    return None
