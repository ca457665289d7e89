"""Realistic wrong versions of the p00.profiling solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "benchmark",
        "no_sync_after_fn",
        "reads the clock right after fn(): on a GPU this times the launch, not the work",
        [("        fn()\n        wait()  # the work", "        fn()\n        pass  # the work")],
        mistake_zh="fn() 之后立即读时钟：在 GPU 上计的是启动时间，而不是实际工作",
    ),
    Mutant(
        "benchmark",
        "no_sync_before_start",
        "starts the clock without draining the queue: the first run pays for the warm-up",
        [("        wait()  # nothing queued", "        pass  # nothing queued")],
        mistake_zh="不清空队列就开始计时：第一次运行要为预热买单",
    ),
    Mutant(
        "benchmark",
        "mean",
        "reports the mean of the runs as the median",
        [('"median": statistics.median(times)', '"median": statistics.mean(times)')],
        mistake_zh="把各次运行的平均值当作中位数报告",
    ),
    Mutant(
        "benchmark",
        "warmup_timed",
        "times the warm-up calls too",
        [
            (
                "    for _ in range(warmup):\n        fn()\n",
                "    for _ in range(warmup):\n        start = timer()\n        fn()\n        wait()\n        times_w = timer() - start\n",
            ),
            (
                "    times = []\n",
                "    times = []\n    times += [] if warmup == 0 else [times_w]\n    repeats -= 1 if warmup else 0\n",
            ),
        ],
        mistake_zh="把预热调用也计了时",
    ),
    Mutant(
        "benchmark",
        "whole_loop",
        "times the whole loop once and divides by the number of runs",
        [
            (
                "    for _ in range(repeats):\n        wait()  # nothing queued may leak into this measurement\n        start = timer()\n",
                "    wait()\n    start = timer()\n    for _ in range(repeats):\n",
            ),
            (
                "        times.append(timer() - start)\n",
                "    times = [(timer() - start) / repeats] * repeats\n",
            ),
        ],
        mistake_zh="整个循环只计一次时，再除以运行次数",
    ),
    Mutant(
        "top_ops",
        "sort_by_total",
        "sorts by cpu_time_total, so the wrappers (linear, matmul) come first",
        [
            (
                "rows.sort(key=lambda row: row.self_cpu_time_total, reverse=True)",
                "rows.sort(key=lambda row: row.cpu_time_total, reverse=True)",
            )
        ],
        mistake_zh="按 cpu_time_total 排序，包装层（linear、matmul）排在最前",
    ),
    Mutant(
        "top_ops",
        "microseconds",
        "reports the self time in µs as if it were ms",
        [("row.self_cpu_time_total / 1000.0", "row.self_cpu_time_total")],
        mistake_zh="把以 µs 为单位的 self time 当作 ms 报告",
    ),
    Mutant(
        "top_ops",
        "share_of_top_k",
        "divides by the self time of the k returned rows only",
        [
            (
                "total_self = sum(row.self_cpu_time_total for row in rows)",
                "total_self = sum(row.self_cpu_time_total for row in rows[:k])",
            )
        ],
        mistake_zh="只除以返回的 k 行的 self time 之和",
    ),
    Mutant(
        "top_ops",
        "no_filter",
        "keeps the profiler's own rows (ProfilerStep, record_function ranges)",
        [('rows = [row for row in averages if row.key.startswith("aten::")]', "rows = list(averages)")],
        mistake_zh="保留了分析器自己的行（ProfilerStep、record_function 区间）",
    ),
]
