"""Work inside a check that is not the learner's code and may take a minute: an nvcc build of their extension.

    with outside_time_limit():
        module = load_inline(...)

While the block runs, a running SIGALRM interval timer (a check's time limit, `llm_algo.grading.run.time_limit`) is
paused and resumes afterwards with the time it had left, and the grading process tells its parent every few seconds
that it is alive (the parent's watchdog stops a child that stays quiet for longer than a check may take). So a check
of a C++ exercise gets its full time for the kernel however long the compiler takes on a cold cache, and a build is
not mistaken for a hang.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator

BEAT_SECONDS = 5.0
_beat: Callable[[], None] | None = None  # set by a grading process (llm_algo.worker.grader, llm_algo.mutation.run)


def on_beat(beat: Callable[[], None] | None) -> None:
    """What a beat does in this process (write an event the parent reads), or None for nothing."""
    global _beat
    _beat = beat


@contextlib.contextmanager
def outside_time_limit(interval: float = BEAT_SECONDS) -> Iterator[None]:
    paused = 0.0
    if threading.current_thread() is threading.main_thread():  # signals and their timers belong to the main thread
        paused = signal.getitimer(signal.ITIMER_REAL)[0]
        if paused:
            signal.setitimer(signal.ITIMER_REAL, 0)
    stop, beat = threading.Event(), _beat
    beating = None
    if beat is not None:

        def run() -> None:
            while not stop.wait(interval):
                with contextlib.suppress(Exception):  # a closed events file must not kill the build
                    beat()

        beating = threading.Thread(target=run, name="llm_algo-heartbeat", daemon=True)
        beating.start()
    try:
        yield
    finally:
        stop.set()
        if beating is not None:
            beating.join()
        if paused:
            signal.setitimer(signal.ITIMER_REAL, paused)
