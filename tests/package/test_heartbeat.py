"""llm_algo.heartbeat: an nvcc build inside a check neither counts against the check's time limit nor looks like a
hang to the parent's watchdog."""

import time

import pytest

from llm_algo.grading.run import time_limit
from llm_algo.heartbeat import on_beat, outside_time_limit


def test_the_block_is_outside_the_time_limit_and_the_rest_is_not():
    with time_limit(0.5, "check 'x'"):
        with outside_time_limit():
            time.sleep(0.8)  # longer than the whole limit: not counted
        time.sleep(0.1)  # inside the 0.5 s left
    with pytest.raises(TimeoutError, match="check 'x'"), time_limit(0.5, "check 'x'"):
        with outside_time_limit():
            time.sleep(0.2)
        time.sleep(1.0)  # the limit resumes after the block, with the time it had left


def test_beats_while_the_block_runs_and_stops_after():
    beats: list[float] = []
    on_beat(lambda: beats.append(time.monotonic()))
    try:
        with outside_time_limit(interval=0.05):
            time.sleep(0.4)
        seen = len(beats)
        time.sleep(0.2)
    finally:
        on_beat(None)
    assert seen >= 4
    assert len(beats) == seen


def test_a_failing_beat_does_not_break_the_block():
    on_beat(lambda: 1 / 0)
    try:
        with outside_time_limit(interval=0.02):
            time.sleep(0.1)
    finally:
        on_beat(None)
