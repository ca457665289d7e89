"""Source of 00_Prerequisites/13_Profiling.ipynb (build with `python -m llm_algo build p00.profiling`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p00.profiling",
        path="00_Prerequisites/13_Profiling.ipynb",
        title_en="Profiling basics: timing correctly and reading torch.profiler",
        title_zh="性能分析基础：正确计时与读懂 torch.profiler",
        difficulty="easy",
        device="cpu",
        minutes=35,
        prerequisites=["p00.module_basics"],
    )
    lesson.title(
        intro=r"""
        "My kernel is 40× faster" is, more often than not, a timing bug. CUDA runs asynchronously: `y = x @ w`
        returns as soon as the matmul is *queued*, so `time.perf_counter()` around it measures the launch (a few
        microseconds), not the work. The first call pays for one-off costs (CUDA context, cuBLAS handles, memory
        allocation, Triton or `torch.compile` compilation); and a single measurement is at the mercy of the
        operating system. Every speed number in this course (the Triton and CUDA lessons' GB/s and TFLOP/s) relies on
        the three rules of this lesson: **warm up, synchronise, take the median**. Then, when a model is slow, the
        profiler says *which* operation to work on, if you can read its table: *self* time versus *total* time.

        **You will implement** `benchmark` (warm-up, synchronisation around each timed call, median) and `top_ops`
        (the top operations of a `torch.profiler` table by self time, with their share). **Graded** on a CPU
        without ever asserting a timing: `benchmark` runs against a simulated asynchronous device with a fake clock
        (so missing synchronisation is visible deterministically), and `top_ops` reads a real profile of a tiny MLP
        whose numbers the checks also read.

        **本节要点**
        - GPU 是异步的：不同步（`torch.cuda.synchronize()`）就计时，量到的只是 kernel 的发射时间。计时前后都要同步。
        - 先预热（warm-up）：第一次调用包含初始化、内存分配、编译等一次性开销。
        - 多次测量取中位数（median），不要取平均或只测一次：偶发的系统抖动会拉高平均值。
        - `triton.testing.do_bench` 与 `torch.utils.benchmark.Timer` 就是这样做的（GPU 上用 CUDA event 计时）。
        - profiler 表里：self 时间 = 算子本身（不含子算子），total 时间 = 含所有子算子；找瓶颈按 self 时间排序。
        - `aten::linear` 的 total 很大但 self 很小：真正花时间的是它内部的 `aten::addmm`。
        - 检查永远不断言具体耗时：计时结果取决于机器。
        {易错点}
        """
    )
    lesson.md(r"""
        ## 1. Three ways to get a wrong number

        | mistake | what you measure | typical error |
        | --- | --- | --- |
        | no synchronisation (GPU) | the time to queue the work | 10× to 1000× too fast for a large matmul |
        | no warm-up | initialisation, allocation, compilation, cold caches | from a few times slower (a CPU layer, measured below) to seconds (`torch.compile`, Triton autotuning) |
        | one run, or the mean of runs | one noisy sample, or a mean pulled by outliers (another process, a GC pause) | a single 10× outlier moves the mean of 10 runs by 90% |

        The correct loop, for a function `fn` and a synchronisation `sync` (`torch.cuda.synchronize` on a GPU, nothing
        on a CPU, where operations are synchronous):

        ```text
        repeat warmup times:  fn()                               # not timed
        sync()                                                   # wait for the warm-up's queued work
        repeat `repeats` times:
            sync(); t0 = timer(); fn(); sync(); t1 = timer()     # each call timed alone
            times.append(t1 - t0)
        report median(times) (and min(times), the least disturbed run)
        ```

        The median of $n$ sorted values $t_{(1)} \le \dots \le t_{(n)}$ is $t_{((n+1)/2)}$ for odd $n$ and
        $\tfrac12\big(t_{(n/2)} + t_{(n/2+1)}\big)$ for even $n$. On a GPU, CUDA events
        (`torch.cuda.Event(enable_timing=True)`) time the work on the device itself instead of the host clock;
        `triton.testing.do_bench` uses them, with a warm-up of 25 ms and 100 ms of repetitions by default, and also
        flushes the L2 cache between runs so that each run reads from memory.

        ## 2. Reading a profiler table

        `torch.profiler.profile` records every operation (and, on a GPU, every kernel) with its start and end.
        `prof.key_averages()` groups them by name; each row (a `FunctionEventAvg`) has `key` (`"aten::addmm"`),
        `count` (calls), `self_cpu_time_total` (µs spent in the op itself, its children excluded) and
        `cpu_time_total` (µs including children). Ops nest: `aten::linear` calls `aten::t` and `aten::addmm`, so
        `linear`'s total contains `addmm`'s. Sum the **self** times and you get the real total; sort by self time and
        the first row is where the time goes. Sorting by total time puts wrappers (`linear`, `matmul`) on top, which
        tells you nothing new.
    """)
    lesson.setup(r"""
        import statistics
        import time

        import matplotlib.pyplot as plt
        import torch
        import torch.nn as nn
        from torch.profiler import ProfilerActivity, profile
    """)
    lesson.md(r"""
        ## 3. Exercise `benchmark`

        `benchmark(fn, warmup=3, repeats=10, sync=None, timer=time.perf_counter)` follows the loop of section 1 and
        returns `{"times": [...], "median": ..., "min": ...}` in the timer's unit (seconds for `perf_counter`):
        `times` has one entry per timed call, in order. `sync=None` means no synchronisation. Call `fn` exactly
        `warmup + repeats` times with no arguments; refuse `warmup < 0` or `repeats < 1` with `ValueError`.
        `statistics.median` is fine.

        The checks pass a fake `fn`, `sync` and `timer` that simulate a GPU: `fn` only queues its work, the clock
        advances when `sync` waits for it, and one of the timed runs is an outlier. Forget a `sync` and the fake
        device shows it. The likely mistakes: no `sync` after `fn` (the launch is timed), no `sync` after the
        warm-up or before `t0` (the first timed run pays for the warm-up's queued work), the mean instead of the
        median, timing the loop as a whole.
    """)
    lesson.exercise(
        "benchmark",
        r'''
        def benchmark(fn, warmup: int = 3, repeats: int = 10, sync=None, timer=time.perf_counter) -> dict:
            """Time fn() correctly: warm-up calls, then each timed call between two syncs.

            returns {"times": list of `repeats` floats, "median": float, "min": float} in the timer's unit
            """
            # TODO: refuse warmup < 0 or repeats < 1
            # TODO: warm up (untimed); then for each repeat: sync, read the timer, fn(), sync, read the timer
            # TODO: the median and the min of the times
            ### BEGIN SOLUTION
            if warmup < 0 or repeats < 1:
                raise ValueError(f"need warmup >= 0 and repeats >= 1, got warmup={warmup}, repeats={repeats}")
            wait = sync if sync is not None else (lambda: None)
            for _ in range(warmup):
                fn()
            times = []
            for _ in range(repeats):
                wait()  # nothing queued may leak into this measurement
                start = timer()
                fn()
                wait()  # the work, not just its launch
                times.append(timer() - start)
            return {"times": times, "median": statistics.median(times), "min": min(times)}
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 4. Exercise `top_ops`

        `top_ops(averages, k)` reads `prof.key_averages()`: keep the rows whose `key` starts with `"aten::"`, sort them
        by `self_cpu_time_total` (largest first), and return the first `k` as tuples
        `(name, calls, self_ms, share)` where `self_ms` is the self time in **milliseconds** (the table gives
        µs) and `share` is that self time divided by the sum of the self times of *all* `aten::` rows (so the shares
        of all rows sum to 1). Refuse `k < 1` with `ValueError`; `k` larger than the number of rows returns them all.
    """)
    lesson.exercise(
        "top_ops",
        r'''
        def top_ops(averages, k: int = 5) -> list[tuple[str, int, float, float]]:
            """averages: prof.key_averages() -> [(name, calls, self_ms, share of all aten:: self time)] top k by self time"""
            # TODO: refuse k < 1
            # TODO: the aten:: rows, sorted by self_cpu_time_total (descending)
            # TODO: name, count, self time in ms, share of the summed self time; the first k
            ### BEGIN SOLUTION
            if k < 1:
                raise ValueError(f"k must be at least 1, got {k}")
            rows = [row for row in averages if row.key.startswith("aten::")]
            rows.sort(key=lambda row: row.self_cpu_time_total, reverse=True)
            total_self = sum(row.self_cpu_time_total for row in rows)
            return [
                (row.key, row.count, row.self_cpu_time_total / 1000.0, row.self_cpu_time_total / total_self)
                for row in rows[:k]
            ]
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### Measured: the wrong ways and the right one, on this machine

        A Llama-style MLP (SwiGLU, hidden 256, intermediate 688) on 64 tokens. The first call is the warm-up; then 50
        timed calls: their spread, median and mean. On a GPU the cell also times the same MLP without
        synchronisation. The numbers are this machine's and will differ on yours; on a CPU shared with other
        programs the runs are far from equal, which is exactly why we report the median (and the min).
    """)
    lesson.code(r"""
        class SwiGLU(nn.Module):
            def __init__(self, d=256, hidden=688):
                super().__init__()
                self.gate, self.up = nn.Linear(d, hidden, bias=False), nn.Linear(d, hidden, bias=False)
                self.down = nn.Linear(hidden, d, bias=False)

            def forward(self, x):
                return self.down(nn.functional.silu(self.gate(x)) * self.up(x))

        device = "cuda" if torch.cuda.is_available() else "cpu"
        sync = torch.cuda.synchronize if device == "cuda" else None
        mlp, x = SwiGLU().to(device), torch.randn(64, 256, device=device)
        try:
            benchmark(lambda: None, warmup=0, repeats=1)
            bench, who = benchmark, "yours"
        except NotImplementedError:
            def bench(fn, warmup=3, repeats=10, sync=None, timer=time.perf_counter):
                wait = sync or (lambda: None)
                for _ in range(warmup):
                    fn()
                times = []
                for _ in range(repeats):
                    wait(); t0 = timer(); fn(); wait(); times.append(timer() - t0)
                return {"times": times, "median": statistics.median(times), "min": min(times)}
            who = "reference"
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # small ops on a busy CPU: one thread avoids waiting for a second, busy core
        with torch.no_grad():
            first = bench(lambda: mlp(x), warmup=0, repeats=1, sync=sync)["times"][0]
            result = bench(lambda: mlp(x), warmup=5, repeats=50, sync=sync)
            if device == "cuda":
                unsynced = bench(lambda: mlp(x), warmup=5, repeats=50)["median"]
                print(f"without synchronisation: median {unsynced * 1e6:.1f} us (the launch only)")
        torch.set_num_threads(threads)
        times_us = [t * 1e6 for t in result["times"]]
        print(f"{device}, benchmark = {who}: first call {first * 1e6:.0f} us; median {result['median'] * 1e6:.1f} us, "
              f"min {result['min'] * 1e6:.1f} us, mean {statistics.mean(times_us):.1f} us")
        plt.figure(figsize=(6, 3))
        plt.plot(times_us, marker=".", lw=0.5, label="each timed call")
        plt.axhline(result["median"] * 1e6, color="C1", label="median")
        plt.axhline(statistics.mean(times_us), color="C2", ls="--", label="mean")
        plt.xlabel("run"); plt.ylabel("µs"); plt.yscale("log"); plt.legend(fontsize=8)
        plt.title(f"SwiGLU MLP, 64 tokens, {device} (first call: {first * 1e6:.0f} µs)")
        plt.tight_layout(); plt.show()
    """)
    lesson.md(r"""
        ### The profiler table, and your summary of it

        The same MLP under `torch.profiler` (after a warm-up, so the one-off costs stay out of the table). Compare
        the `Self CPU` and `CPU total` columns of `aten::linear` and `aten::mm`.
    """)
    lesson.code(r"""
        with torch.no_grad():
            mlp(x)  # warm-up outside the profile
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                for _ in range(5):
                    mlp(x)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=8))
        try:
            for name, calls, self_ms, share in top_ops(prof.key_averages(), k=4):
                print(f"{name:<16} {calls:>4} calls  {self_ms:8.3f} ms self  {share:6.1%}")
        except NotImplementedError:
            print("top_ops is not written yet")
    """)
    lesson.stop()
    lesson.md(r"""
        ## 5. Reading the solutions

        **`benchmark`.** The `sync` before `t0` drains whatever is still queued (the warm-up, the previous run's
        tail); the `sync` before `t1` makes the clock wait for the work itself. Each call is timed alone, so one
        disturbed run is one outlier among `repeats`, which the median ignores. *Mistakes*: no `sync` after `fn` (on a GPU, the launch time); no `sync` before `t0`
        (the first run pays for the warm-up); the mean; timing all repeats at once and dividing (the mean again,
        with the outliers in it); warm-up calls that are also timed.

        **`top_ops`.** Filtering on `aten::` keeps PyTorch's operators and drops the profiler's own rows
        (`record_function` ranges, `ProfilerStep*`); sorting by self time makes the shares add up to 1, where total
        times double-count nested ops. *Mistakes*: sorting by `cpu_time_total` (the wrappers first), µs reported
        as ms, shares of the `k` rows only (they then always sum to 1 and overstate each op).

        **What production tools do.** `torch.utils.benchmark.Timer` (warm-up, synchronisation, `blocked_autorange`
        and the median/IQR), `triton.testing.do_bench` (CUDA events, L2 flush, median by default), Nsight Systems for
        the timeline of kernels and CPU threads (gaps between kernels = launch overhead, the reason for CUDA graphs
        and `torch.compile`), Nsight Compute for one kernel's achieved bandwidth and occupancy. With
        `ProfilerActivity.CUDA` the table gains `Self CUDA` columns: on a GPU, sort by `self_cuda_time_total`.
        `torch.profiler.schedule(wait=1, warmup=1, active=3)` does the warm-up for you across training steps.

        **Where this is used next.** [p01.roofline](../01_Hardware_Math_Systems/06_Roofline.ipynb) turns such
        timings into a fraction of the hardware's peak, and every Triton lesson from
        [p03.vector_add](../03_Triton_Kernels/01_Vector_Add.ipynb) on benchmarks this way.
    """)
    lesson.mistakes()
    return lesson
