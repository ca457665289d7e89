"""Hazards of a simulated block that the simulator itself lets pass: shared-memory races and barriers that only some
threads reach, found in numba-cuda's simulator whatever order its Python threads ran in.

Every launch of a `@cuda.jit` kernel in the simulator is strict (`install_strict_launches`, which
`llm_algo.cuda.simulator` calls when it switches the simulator on): the launch traces its shared memory and counts
each thread's barriers, and when it ends it raises `SimulatorHazard` (a `CheckFailed`: a check reports it as its
failure) if

- the threads of a block passed different numbers of `cuda.syncthreads()`: a barrier inside a branch not every thread
  takes, or a thread that returned before a barrier the others reach. On a GPU that hangs or silently mixes two
  barriers; the simulator only waits for the threads still running, so the kernel finished and may even be right;
- two threads of one block touched one shared element between the same two barriers, one of them writing: a race on a
  GPU, even where the simulator happened to run the threads in a harmless order.

While tracing, each `cuda.shared.array(...)` of a block is a NaN-filled (floats) or zero-filled array that logs every
element read and write with the simulator thread, the number of barriers that thread has passed and the line of the
kernel, so a check can also replay a warp's accesses (`warp_wavefronts`: the bank-conflict wavefronts of each).

    with tracing_shared_memory() as log:     # optional: the launch traces anyway; this keeps the log for the check
        kernel[grid, block](...)
    log.accesses, log.threads                 # every shared access; every thread's barrier count
"""

from __future__ import annotations

import contextlib
import linecache
import sys
import threading
from collections import defaultdict
from typing import NamedTuple

import numpy as np

from ..check.failure import CheckFailed

DIVERGENT_BARRIER_HINT = (
    "every thread of a block must reach every cuda.syncthreads(): keep the barrier outside `if` branches that depend "
    "on the thread (put the `if` around the work, not around the barrier), and do not return before a barrier"
)
RACE_HINT = (
    "put a cuda.syncthreads() between the write and the other thread's access (after the stores that fill shared "
    "memory, and after the reads before shared memory is overwritten)"
)


class Access(NamedTuple):
    block: tuple[int, int, int]
    address: int  # the element's address in memory (unique within a block while its array lives)
    thread: tuple[int, int, int]
    lane: int  # the thread's linear index in the block: x + blockDim.x * (y + blockDim.y * z)
    epoch: int  # barriers the thread had passed
    write: bool
    name: str  # the shared array, as the kernel's source names it
    index: tuple[int, ...]
    offset: int  # byte offset from the start of the shared array: what decides the bank
    site: tuple  # (code, line, array, write, n): the n-th time this thread ran this access of this line


class SharedAccessLog:
    def __init__(self):
        self.accesses: list[Access] = []
        self.barriers: dict[tuple, int] = {}  # (block, thread) -> barriers passed, threads that passed one
        self.threads: dict[tuple, tuple[int, int]] = {}  # (block, thread) -> (lane, barriers passed), every thread


class SimulatorHazard(CheckFailed):
    """A simulated launch did what a GPU would not survive: a divergent barrier or a shared-memory race."""

    def __str__(self) -> str:
        return f"{self.summary}: {self.got} ({self.input}). {self.hint}"


class TracedShared(np.ndarray):
    """A shared array that logs every element read and write with the simulator thread and its barrier count."""

    log: SharedAccessLog | None = None
    name = "a shared array"
    origin = 0  # the data address of the whole shared array

    def __array_finalize__(self, obj):
        if obj is not None:
            self.name = getattr(obj, "name", "a shared array")
            self.origin = getattr(obj, "origin", 0)

    def _record(self, key, write: bool) -> None:
        log = TracedShared.log
        if log is None:
            return
        index = key if isinstance(key, tuple) else (key,)
        if len(index) != self.ndim or not all(isinstance(k, (int, np.integer)) for k in index):
            return  # a view or a slice: its element accesses are logged through the view
        thread = threading.current_thread()
        block, me = getattr(thread, "blockIdx", None), getattr(thread, "threadIdx", None)
        if block is None:
            return
        index = tuple(int(k) % n if n else int(k) for k, n in zip(index, self.shape, strict=True))
        address = self.__array_interface__["data"][0] + sum(k * s for k, s in zip(index, self.strides, strict=True))
        caller = sys._getframe(2)
        where = (caller.f_code, caller.f_lineno, self.origin, write)
        seen = thread.__dict__.setdefault("_llm_algo_sites", {})
        seen[where] = n = seen.get(where, -1) + 1
        log.accesses.append(
            Access(
                (block.x, block.y, block.z),
                address,
                (me.x, me.y, me.z),
                getattr(thread, "thread_id", 0),
                getattr(thread, "barriers_passed", 0),
                write,
                self.name,
                index,
                address - self.origin,
                (*where, n),
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
    found.origin = found.__array_interface__["data"][0]
    return found


# What makes a block's array for one `cuda.shared.array` call site, given (shape, NumPy dtype, the caller's frame);
# None: `np.empty`. Set while shared memory is traced; read by `llm_algo.cuda.simulator`'s allocation (which imports
# this module: the simulator must be switched on by importing `llm_algo.cuda.simulator` first, as every twin does).
shared_factory = None


@contextlib.contextmanager
def tracing_shared_memory():
    """While it is open, blocks get TracedShared arrays (one per call site, as the simulator allocates them) and each
    thread's barriers are counted; yields the SharedAccessLog. Nested: an inner one shares the outer one's log."""
    global shared_factory
    if TracedShared.log is not None:
        yield TracedShared.log
        return
    log = SharedAccessLog()
    shared_factory = _traced_array
    TracedShared.log = log
    try:
        yield log
    finally:
        shared_factory = None
        TracedShared.log = None


# ----------------------------------------------------------------------------------------- what went wrong


def _ranges(lanes: list[int]) -> str:
    """[0, 1, 2, 3, 7, 9, 10] -> '0–3, 7, 9–10'"""
    parts, lanes = [], sorted(lanes)
    start = prev = lanes[0]
    for lane in [*lanes[1:], None]:
        if lane is not None and lane == prev + 1:
            prev = lane
            continue
        parts.append(f"{start}–{prev}" if prev > start else f"{start}")
        if lane is not None:
            start = prev = lane
    return ", ".join(parts)


def _threads(lanes: list[int]) -> str:
    return f"thread{'s' if len(lanes) > 1 else ''} {_ranges(lanes)}"


def divergent_barriers(threads: dict[tuple, tuple[int, int]], block_dim: tuple[int, int, int]) -> str | None:
    """The first block whose threads passed different numbers of barriers, in words; None when every block's
    threads agree. `threads`: (block, thread) -> (linear thread index, barriers passed)."""
    per_block: dict[tuple, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    for (block, _), (lane, passed) in threads.items():
        per_block[block][passed].append(lane)
    for block in sorted(per_block):
        counts = per_block[block]
        if len(counts) > 1:
            groups = sorted(counts.items(), key=lambda item: min(item[1]))
            numbering = "" if block_dim[1] == block_dim[2] == 1 else " (numbered x + blockDim.x * y)"
            said = [f"{_threads(lanes)} reached {passed}" for passed, lanes in groups]
            first_count, first_lanes = groups[0]
            said[0] = f"{_threads(first_lanes)} of block {block}{numbering} reached {first_count} barriers"
            return ", ".join(said)
    return None


def first_race(log: SharedAccessLog, start: int = 0) -> str | None:
    """Two threads of a block touching one element between the same two barriers, one of them writing (accesses from
    `start` on: one launch's). The same race is named whatever order the threads ran in: the first block, barrier
    interval and element (in the array's order) with one, its lowest writing thread and the lowest other thread."""
    touches: dict[tuple, list[Access]] = defaultdict(list)
    for access in log.accesses[start:]:
        touches[(access.block, access.epoch, access.name, access.index, access.address)].append(access)
    for block, epoch, name, index, _ in sorted(touches, key=lambda key: key[:4]):
        accesses = touches[(block, epoch, name, index, _)]
        writers = sorted(a.thread[::-1] for a in accesses if a.write)
        if not writers:
            continue
        writer = writers[0][::-1]
        others = sorted((a.thread[::-1], not a.write) for a in accesses if a.thread != writer)
        if others:
            other, reads = others[0][0][::-1], others[0][1]
            element = f"{name}[{', '.join(map(str, index))}]"
            return (
                f"block {block[:2]}: thread {writer[:2]} writes {element} and thread {other[:2]} "
                f"{'reads' if reads else 'writes'} it between barrier {epoch} and barrier {epoch + 1}"
            )
    return None


def wavefronts(byte_offsets) -> int:
    """The shared-memory wavefronts of one warp's 4-byte access: over the 32 banks of 4 bytes, the largest number of
    distinct words asked of one bank (lanes asking for the same word share it: a broadcast)."""
    words_in_bank: dict[int, set[int]] = defaultdict(set)
    for offset in byte_offsets:
        words_in_bank[(offset // 4) % 32].add(offset // 4)
    return max((len(words) for words in words_in_bank.values()), default=0)


class WarpAccess(NamedTuple):
    wavefronts: int
    name: str  # the shared array
    write: bool
    line: int  # in the kernel's cell
    block: tuple[int, int, int]
    warp: int
    lanes: dict[int, tuple[int, ...]]  # lane -> the element it accessed


def warp_wavefronts(log: SharedAccessLog, start: int = 0) -> list[WarpAccess]:
    """Every warp-wide shared access of the logged launch (from `start` on), with its wavefronts: the accesses that
    the lanes of one warp (32 consecutive linear thread indices) made at the same line of the kernel, to the same
    array, for the same n-th time — what a GPU's warp issues as one instruction when its lanes agree on the path."""
    groups: dict[tuple, list[Access]] = defaultdict(list)
    for access in log.accesses[start:]:
        groups[(access.block, access.lane // 32, access.site)].append(access)
    found = []
    for (block, warp, site), accesses in groups.items():
        found.append(
            WarpAccess(
                wavefronts([a.offset for a in accesses]),
                accesses[0].name,
                accesses[0].write,
                site[1],
                block,
                warp,
                {a.lane % 32: a.index for a in accesses},
            )
        )
    return found


# ----------------------------------------------------------------------------------------- every launch strict


def _launch_label(kernel, grid, block) -> str:
    name = getattr(getattr(kernel, "fn", None), "__name__", "the kernel")
    return f"the launch {name}[grid {tuple(grid)}, block {tuple(block)}]"


def check_launch(log: SharedAccessLog, start: int, threads: dict, *, label: str, block_dim) -> None:
    """Raise SimulatorHazard for a divergent barrier (first) or a race among the launch's accesses from `start`."""
    divergent = divergent_barriers(threads, tuple(block_dim))
    if divergent:
        raise SimulatorHazard(
            "the threads of a block reached different numbers of barriers",
            input=label,
            expected="every thread of a block passes the same cuda.syncthreads() calls",
            got=f"{divergent}: a `cuda.syncthreads()` inside a branch not every thread takes",
            hint=DIVERGENT_BARRIER_HINT,
        )
    race = first_race(log, start)
    if race:
        raise SimulatorHazard(
            "a data race on shared memory",
            input=label,
            expected="between two barriers, each shared element written by at most one thread and then accessed "
            "only by it",
            got=race,
            hint=RACE_HINT,
        )


_launch_threads: dict | None = None  # the launch in progress: (block, thread) -> (linear index, barriers passed)


def install_strict_launches() -> None:
    """Make every launch of a simulated kernel strict (see the module's docstring). Idempotent."""
    from numba.cuda.simulator import kernel as simulated

    launcher, thread_class = simulated.FakeCUDAKernel, simulated.BlockThread
    if getattr(launcher.__call__, "_llm_algo_strict", False):
        return
    original_call, original_sync, original_run = launcher.__call__, thread_class.syncthreads, thread_class.run

    def syncthreads(self):
        original_sync(self)
        self.barriers_passed = getattr(self, "barriers_passed", 0) + 1
        log = TracedShared.log
        if log is not None:
            me, block = self.threadIdx, self.blockIdx
            log.barriers[((block.x, block.y, block.z), (me.x, me.y, me.z))] = self.barriers_passed

    def run(self):
        try:
            original_run(self)
        finally:
            threads = _launch_threads
            if threads is not None:
                me, block = self.threadIdx, self.blockIdx
                threads[((block.x, block.y, block.z), (me.x, me.y, me.z))] = (
                    self.thread_id,
                    getattr(self, "barriers_passed", 0),
                )

    def call(self, *args):
        global _launch_threads
        if self._device or simulated._kernel_context:  # a device function called from a kernel
            return original_call(self, *args)
        grid, block = simulated.normalize_kernel_dimensions(self.grid_dim, self.block_dim)
        threads: dict = {}
        with tracing_shared_memory() as log:
            start = len(log.accesses)
            _launch_threads = threads
            try:
                result = original_call(self, *args)
            finally:
                _launch_threads = None
            log.threads.update(threads)
            check_launch(log, start, threads, label=_launch_label(self, grid, block), block_dim=block)
        return result

    call._llm_algo_strict = True
    call.lax = original_call  # the simulator's own launch, for the package's tests of this guard
    launcher.__call__ = call
    thread_class.syncthreads = syncthreads
    thread_class.run = run
