"""llm_algo.cuda.races: a read of another thread's shared-memory write with no barrier between them is reported,
whatever order the simulator ran the threads in; with the barrier it is not."""

import numpy as np

from llm_algo.cuda.races import first_race, tracing_shared_memory
from llm_algo.cuda.simulator import cuda


@cuda.jit
def rotate(out, barrier):
    tile = cuda.shared.array(4, dtype=np.float32)
    i = cuda.threadIdx.x
    tile[i] = i
    if barrier:
        cuda.syncthreads()
    out[i] = tile[(i + 1) % 4]


def traced(barrier: bool) -> tuple[np.ndarray, str | None]:
    out = np.zeros(4, dtype=np.float32)
    with tracing_shared_memory() as log:
        rotate[1, 4](out, barrier)
    return out, first_race(log)


def test_a_missing_barrier_is_a_race():
    _, race = traced(False)
    assert race is not None
    assert "tile[" in race and "between barrier 0 and barrier 1" in race


def test_a_barrier_removes_it_and_the_values_are_right():
    out, race = traced(True)
    assert race is None
    np.testing.assert_array_equal(out, [1, 2, 3, 0])


def test_tracing_ends_with_the_block():
    from llm_algo.cuda import simulator

    traced(True)
    assert simulator.shared_factory is None
