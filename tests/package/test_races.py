"""llm_algo.cuda.races: every launch in the simulator is strict. A barrier that only some threads of a block reach
fails the launch with the threads and their barrier counts (the simulator itself runs it to a right answer); a read
of another thread's shared-memory write with no barrier between them fails it too, whatever order the simulator ran
the threads in; `warp_wavefronts` replays each warp's shared accesses as bank-conflict wavefronts. And every Part 04
lesson that runs kernels in the simulator goes through this strict path."""

import re
from pathlib import Path

import numpy as np
import pytest

from llm_algo.cuda.races import SimulatorHazard, first_race, tracing_shared_memory, warp_wavefronts
from llm_algo.cuda.simulator import cuda

ROOT = Path(__file__).resolve().parents[2]


@cuda.jit
def rotate(out, barrier):
    tile = cuda.shared.array(4, dtype=np.float32)
    i = cuda.threadIdx.x
    tile[i] = i
    if barrier:
        cuda.syncthreads()
    out[i] = tile[(i + 1) % 4]


@cuda.jit
def tree_sum(x, out, divergent):
    """The shared-memory tree of p04.reduction over 32 threads; `divergent`: the barrier inside `if t < stride:`."""
    shared = cuda.shared.array(32, np.float32)
    t = cuda.threadIdx.x
    shared[t] = x[t]
    cuda.syncthreads()
    stride = 16
    while stride > 0:
        if t < stride:
            shared[t] += shared[t + stride]
            if divergent:
                cuda.syncthreads()
        if not divergent:
            cuda.syncthreads()
        stride //= 2
    if t == 0:
        out[0] = shared[0]


@cuda.jit
def early_return(x, out, n):
    shared = cuda.shared.array(8, np.float32)
    t = cuda.threadIdx.x
    if t >= n:
        return  # the threads past n never reach the barrier below
    shared[t] = x[t]
    cuda.syncthreads()
    out[t] = shared[(t + 1) % n]


def test_a_missing_barrier_fails_the_launch():
    with pytest.raises(SimulatorHazard) as caught:
        rotate[1, 4](np.zeros(4, dtype=np.float32), False)
    assert caught.value.summary == "a data race on shared memory"
    assert "tile[" in caught.value.got and "between barrier 0 and barrier 1" in caught.value.got
    assert "rotate[grid (1, 1, 1), block (4, 1, 1)]" in caught.value.input


def test_a_barrier_removes_it_and_the_values_are_right():
    out = np.zeros(4, dtype=np.float32)
    with tracing_shared_memory() as log:
        rotate[1, 4](out, True)
    assert first_race(log) is None
    np.testing.assert_array_equal(out, [1, 2, 3, 0])
    assert {passed for _, passed in log.threads.values()} == {1} and len(log.threads) == 4


def test_a_divergent_barrier_passes_the_simulator_and_fails_the_strict_launch():
    """C8's mistake: the lax simulator waits only for the threads still running, so the tree with its barrier inside
    `if t < stride:` finishes with the right sum; the strict launch names the block, the threads and their counts."""
    from numba.cuda.simulator.kernel import FakeCUDAKernel

    x = np.arange(32, dtype=np.float32)
    out = np.zeros(1, dtype=np.float32)
    FakeCUDAKernel.__call__.lax(tree_sum[1, 32], x, out, True)  # without the guard
    assert out[0] == 496.0
    with pytest.raises(SimulatorHazard) as caught:
        tree_sum[1, 32](x, out, True)
    got = caught.value.got
    assert caught.value.summary == "the threads of a block reached different numbers of barriers"
    assert got.startswith("thread 0 of block (0, 0, 0) reached 6 barriers, thread 1 reached 5, threads 2–3 reached 4")
    assert "threads 16–31 reached 1" in got and "inside a branch not every thread takes" in got
    out[0] = 0
    tree_sum[1, 32](x, out, False)
    assert out[0] == 496.0


def test_a_return_before_a_barrier_is_divergent_too():
    x = np.arange(8, dtype=np.float32)
    with pytest.raises(SimulatorHazard) as caught:
        early_return[1, 8](x, np.zeros(8, dtype=np.float32), 5)
    assert "threads 0–4 of block (0, 0, 0) reached 1 barriers, threads 5–7 reached 0" in caught.value.got
    out = np.zeros(8, dtype=np.float32)
    early_return[1, 8](x, out, 8)
    np.testing.assert_array_equal(out, np.roll(x, -1))


def test_tracing_ends_with_the_launch():
    from llm_algo.cuda import races

    rotate[1, 4](np.zeros(4, dtype=np.float32), True)
    assert races.shared_factory is None and races.TracedShared.log is None


@cuda.jit
def read_pattern(out, stride):
    tile = cuda.shared.array((32, 33), np.float32)
    lane = cuda.threadIdx.x
    for j in range(33):
        tile[lane, j] = lane
    cuda.syncthreads()
    word = lane * stride  # the word offset in the row-major (32, 33) tile
    out[lane] = tile[(word // 33) % 32, word % 33]


@pytest.mark.parametrize(("stride", "expected"), [(1, 1), (2, 2), (8, 8), (32, 32), (33, 1), (0, 1)])
def test_warp_wavefronts_of_strided_reads(stride, expected):
    """Lane l reads word l * stride: gcd(stride, 32) wavefronts (the lesson's closed form), one for a broadcast."""
    out = np.zeros(32, dtype=np.float32)
    with tracing_shared_memory() as log:
        read_pattern[1, 32](out, stride)
    reads = [access for access in warp_wavefronts(log) if not access.write]
    assert len(reads) == 1 and len(reads[0].lanes) == 32
    assert reads[0].wavefronts == expected


@cuda.jit
def column_read(out, pitch_is_33):
    padded = cuda.shared.array((32, 33), np.float32)
    square = cuda.shared.array((32, 32), np.float32)
    lane = cuda.threadIdx.x
    for j in range(32):
        padded[lane, j] = j
        square[lane, j] = j
    cuda.syncthreads()
    if pitch_is_33:
        out[lane] = padded[lane, 5]
    else:
        out[lane] = square[lane, 5]


def test_a_column_of_a_square_tile_is_a_32_way_conflict_and_padding_removes_it():
    for padded, expected in ((False, 32), (True, 1)):
        with tracing_shared_memory() as log:
            column_read[1, 32](np.zeros(32, dtype=np.float32), padded)
        (read,) = [access for access in warp_wavefronts(log) if not access.write]
        assert read.wavefronts == expected, (padded, read)
        stores = [access.wavefronts for access in warp_wavefronts(log) if access.write]
        assert len(stores) == 64 and max(stores) == 32  # tile[lane, j] for fixed j: a column store, 32-way


# ----------------------------------------------------------------------------------------- every lesson strict

SIMULATOR_LESSONS = {"p04.cuda_intro", "p04.shared_memory", "p04.reduction", "p04.async_copy"}


def lessons_with_simulated_kernels() -> dict[str, str]:
    found = {}
    for source in sorted((ROOT / "authoring").glob("p*.py")):
        text = source.read_text()
        if "@cuda.jit" in text or "cuda.shared.array" in text or "syncthreads()" in text.replace("__syncthreads", ""):
            found[re.search(r'id="([^"]+)"', text).group(1)] = text
    return found


def test_every_lesson_with_simulated_kernels_goes_through_the_strict_launch():
    """The lessons whose notebooks define @cuda.jit kernels (or shared arrays, or barriers in Python) are exactly the
    known ones; each takes `cuda` from llm_algo.cuda.simulator (which installs the strict launch) and none imports
    numba's CUDA module itself or switches the simulator on by hand; the same holds for their checks modules."""
    from numba.cuda.simulator.kernel import FakeCUDAKernel

    assert FakeCUDAKernel.__call__._llm_algo_strict
    found = lessons_with_simulated_kernels()
    assert set(found) == SIMULATOR_LESSONS, (
        "a lesson runs kernels in the CUDA simulator: add it here once its twins launch through "
        "llm_algo.cuda.simulator (strict barriers and races)"
    )
    bypass = re.compile(
        r"from numba import cuda|import numba\.cuda|numba\.cuda\.jit|environ\W+NUMBA_ENABLE_CUDASIM|\.lax\b"
    )
    for lesson, text in found.items():
        assert "from llm_algo.cuda.simulator import cuda" in text, lesson
        assert not bypass.search(text), (lesson, bypass.search(text).group(0))
        checks = (ROOT / "tests" / "checks" / (lesson.replace(".", "_") + ".py")).read_text()
        assert not bypass.search(checks), (lesson, bypass.search(checks).group(0))
