"""`llm_algo.authoring.speed_verdicts`: the lint fails a checks module that asserts a speed (a verdict on a measured
time), and leaves alone benchmarks that only time, checks of a learner's timer on a fake clock, and deadlines marked
with a reason."""

from __future__ import annotations

import textwrap

import pytest
from tiny_lab import CHECKS, Lab

from llm_algo.authoring.lint import lint
from llm_algo.authoring.speed_verdicts import speed_verdicts

# p04.offload's check before issue 27 (review C16): the side-stream step must not be slower than the serial one.
OVERLAP_NOT_SLOWER = '''

@checks("add_one")
def not_slower_with_a_side_stream(ex):
    """the prefetching step is not slower than the serial one"""

    def median_step_ms(fn):
        times = []
        for _ in range(6):
            start = time.perf_counter()
            fn()
            times.append(1e3 * (time.perf_counter() - start))
        return sorted(times[1:])[2]

    overlapped = median_step_ms(lambda: ex.add_one(torch.ones(1000)))
    serial = median_step_ms(lambda: torch.ones(1000) + 1)
    expect(overlapped <= 1.1 * serial, "slower", input="1000", expected="as fast", got=str(overlapped))
'''


def lines_of(source: str) -> list[int]:
    return [v.line for v in speed_verdicts(textwrap.dedent(source))]


def test_the_old_offload_check_is_a_speed_verdict(lab: Lab) -> None:
    lab.add_lesson(checks="import time\n" + CHECKS + OVERLAP_NOT_SLOWER)
    errors = lint()
    assert len(errors) == 1, errors
    assert errors[0].startswith("tests/checks/p02_tiny.py:")
    assert "compares a measured time: `overlapped <= 1.1 * serial`" in errors[0]
    assert "never asserts a speed" in errors[0]


def test_checks_without_a_speed_verdict_pass(lab: Lab) -> None:
    lab.add_lesson()
    assert lint() == []


@pytest.mark.parametrize(
    "source",
    [
        # a clock difference asserted directly
        """
        import time
        def check(ex):
            start = time.perf_counter()
            ex.run()
            assert time.perf_counter() - start < 0.5
        """,
        # through a list, sorted and indexed, compared in an `if` that fails
        """
        import time
        import pytest
        def check(ex):
            times = []
            for _ in range(3):
                begin = time.monotonic()
                ex.run()
                times.append(time.monotonic() - begin)
            best = sorted(times)[0]
            if best > 1e-3:
                pytest.fail("too slow")
        """,
        # do_bench's result, and CUDA events
        """
        def check(ex):
            ms = triton.testing.do_bench(lambda: ex.kernel(x))
            start.record(); ex.kernel(x); end.record()
            expect(ms < 2.0 and start.elapsed_time(end) < 3.0, "slow")
        """,
        # a helper of the module that times, used by a check
        """
        import time
        def seconds(fn):
            t0 = time.time()
            fn()
            return time.time() - t0
        def check(ex):
            fast, slow = seconds(ex.fast), seconds(ex.slow)
            expect(fast * 2 <= slow, "no speed-up")
        """,
        # expect_close on a measured time
        """
        from llm_algo.bench import median_ms
        def check(ex):
            expect_close(median_ms(ex.step), 1.0)
        """,
    ],
)
def test_speed_verdicts_are_found(source: str) -> None:
    assert lines_of(source), source


@pytest.mark.parametrize(
    "source",
    [
        # a benchmark times and reports: no verdict
        """
        from llm_algo.bench import BenchRow, median_ms
        def benchmark(ex):
            ms = median_ms(ex.step)
            return [BenchRow("step", "", ms, 1.0 / ms, "1/ms")]
        """,
        # the learner's timer on a fake clock: its result is checked like any result
        """
        def check(ex):
            got = ex.benchmark(fn, timer=lambda: clock.now)
            expect(got["median"] == 2.0, "wrong median")
        """,
        # a cost model's times are computed, not measured
        """
        def check(ex):
            expect(ex.allreduce_seconds(1e9, 8) == 2.5, "wrong model")
        """,
        # a deadline passed to a call: its result is not a time
        """
        import time
        def check(ex):
            deadline = time.monotonic() + 30
            reports = [queue.get(timeout=deadline - time.monotonic()) for _ in range(4)]
            expect(len(reports) == 4 and reports[0] == "ok", "a rank did not report")
        """,
        # a hang guard with the marker and a reason
        """
        import time
        def check(ex):
            deadline = time.monotonic() + 30
            while not ex.done():
                if time.monotonic() > deadline:  # not a speed verdict: a hang, after 30 s of nothing
                    raise TimeoutError("no progress")
        """,
    ],
)
def test_what_is_not_a_speed_verdict_passes(source: str) -> None:
    assert lines_of(source) == [], source


def test_the_marker_needs_a_reason() -> None:
    source = """
    import time
    def check(ex):
        start = time.monotonic()
        assert time.monotonic() - start < 30  # not a speed verdict:
    """
    assert lines_of(source) == [5]
