"""Source of 03_Triton_Kernels/13_Autotune.ipynb (build with `python -m llm_algo build p03.autotune`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p03.autotune",
        path="03_Triton_Kernels/13_Autotune.ipynb",
        title_en="Autotuning and timing kernels right",
        title_zh="自动调优与正确计时",
        difficulty="medium",
        device="cpu",
        minutes=90,
        prerequisites=["p03.matmul"],
        triton=True,
    )
    lesson.title(
        intro=r"""
        The GEMM kernel of `p03.matmul_epilogue` (bf16, `8192 x 4096` times a `4096 x 14336` weight) ran at 697 TFLOP/s
        on an H200 with `128 x 256 x 64` tiles, 8 warps and 4 stages, and at 248 with `256 x 128 x 64` tiles and 3
        stages, in one sweep: on a GPU the best `BLOCK_M`, `BLOCK_N`, `num_warps` and `num_stages` depend on the shape, the dtype and the chip,
        and the only reliable way to pick them is to time the candidates. That makes two things matter: which
        candidates you time (each costs a compile and a benchmark), and whether the timing means what you think.
        A benchmark that includes a compile, that reads a wall clock while the GPU is still busy, or that finds its
        inputs already in L2 can be off by 2x — and an autotuner that benchmarks a kernel which *accumulates* into its
        output corrupts that output.

        **You will implement** a config-pruning function for `triton.autotune`'s `prune_configs_by`; a timing harness
        (warm-up, cache flush, synchronisation, median) checked against a fake GPU clock; and a split-K GEMM whose
        programs add into the output with atomics, autotuned with `reset_to_zero`. **Graded against** a loop
        specification of the pruning rule, a simulated device clock, and `torch.matmul` in float64.
        """,
    )
    lesson.md(r"""
        ## 本节要点

        - **问题**：GEMM 的最佳 `BLOCK_M`、`BLOCK_N`、`num_warps`、`num_stages` 取决于形状、dtype 和芯片（H200 上同一 GEMM 一组配置 697 TFLOP/s，另一组 248）；唯一可靠的方法是实测，因此要关心测哪些候选、以及计时是否可信。
        - **剪枝（`prune_configs_by`）**：shared memory 需求 $\text{smem} = s\,(B_M B_K + B_K B_N)\,b$ 字节（$s$ = `num_stages`，$b$ = 元素字节数，按实际 dtype 取），超过 227 KiB 的丢弃；只保留 `BLOCK_M <= max(16, next_power_of_2(M))`（N 同理）的配置；若全部被剪掉，返回 smem 最小的那个（空列表会让 autotuner 报错）。
        - **计时**：先 warm-up（排除编译）、每次前清空 L2 cache（flush 不计入时间）、kernel 启动后 synchronize 再读时钟、取中位数而不是平均值。
        - **split-K**：把 K 分成 `SPLIT_K` 段（每段为整数个 `BLOCK_K` 步：`cdiv(cdiv(K, BLOCK_K), SPLIT_K)`），各 program 用 atomic add 累加到输出；autotune 会多次运行 kernel，所以必须用 `reset_to_zero` 清零输出，并设置 tuning `key`（如 M、N、K）。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. What `triton.autotune` does

        ```python
        @triton.autotune(
            configs=[triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64}, num_warps=8, num_stages=3), ...],
            key=["M", "N", "K"],                      # re-tune when these argument values change
            prune_configs_by={"early_config_prune": prune},   # drop candidates before timing them
            reset_to_zero=["c_ptr"],                  # zero these tensors before every timed run
            restore_value=["x_ptr"],                  # or: save and restore them around every timed run
        )
        @triton.jit
        def kernel(...): ...
        ```

        On a call, the autotuner builds the **key** from the named arguments' values (plus every tensor argument's
        dtype). On a key it has not seen, it prunes the configs, times each survivor with `do_bench` (compiling it first),
        keeps the fastest, and from then on launches that one directly. Consequences:

        - **Keys.** Too few keys (`key=[]`) and a config tuned for `M = 8192` is used at `M = 1`; too many (a key on a
          value that changes every call, such as a sequence length in decoding) and every call re-tunes, costing seconds.
          Production code buckets such values (`triton.next_power_of_2(M)`) before passing them as a key.
        - **Cost.** Each config is a compile (around a second for a GEMM) and a benchmark (`do_bench`'s default
          25 ms of warm-up and 100 ms of timed runs). Eight configs on four dtypes and ten
          shapes is minutes of start-up. Pruning by rules that need no timing is free.
        - **Side effects.** The kernel runs many times during tuning *on the real arguments*. A kernel that writes
          its output from scratch does not care; one that **accumulates** (`tl.atomic_add`, `+=` into an output) or updates
          in place (an optimizer step, a KV-cache append) does. `reset_to_zero` zeroes the named tensors before every
          timed run; `restore_value` copies them before and restores them after. Forgetting it gives a result that is
          right in your unit test (one config: no tuning happens) and wrong in production.

        ## 2. Exercise `prune_configs`: drop what cannot win

        Two rules that need no timing:

        1. **Shared memory.** A pipelined GEMM keeps `num_stages` copies of an A tile and a B tile in shared memory:
           $\text{smem} = s\,(B_M B_K + B_K B_N)\,b$ bytes for $b$-byte elements. More than the SM has (227 KiB
           usable on an H100/H200, 163 KiB on an A100) fails to compile or runs out of resources. fp32 needs twice the
           bytes of bf16 for the same tile.
        2. **Tiles far larger than the problem.** When `M = 40`, a `BLOCK_M = 256` tile computes 216 rows of nothing. Keep
           a config only if `BLOCK_M <= max(16, next_power_of_2(M))` and `BLOCK_N <= max(16, next_power_of_2(N))`.

        Keep the survivors in their original order. If nothing survives, return the config with the smallest
        shared-memory need (the autotuner raises on an empty list). Triton calls the function as
        `prune(configs, named_args, **kwargs)`: `named_args` maps the kernel's argument names to the values of this call,
        so `named_args["M"]` is M and `named_args["a_ptr"]` is the tensor `a`.
    """)
    lesson.setup(r"""
        import statistics
        import time

        import matplotlib.pyplot as plt
        import torch
        import triton
        import triton.language as tl
    """)
    lesson.exercise(
        "prune_configs",
        r'''
        SMEM_LIMIT_BYTES = 227 * 1024  # usable shared memory per SM on an H100/H200


        def shared_memory_bytes(config, element_size):
            """Bytes of shared memory a pipelined GEMM with this config needs: num_stages A tiles and B tiles."""
            # TODO: num_stages * (BLOCK_M * BLOCK_K + BLOCK_K * BLOCK_N) * element_size
            ### BEGIN SOLUTION
            meta = config.kwargs
            return config.num_stages * (meta["BLOCK_M"] * meta["BLOCK_K"] + meta["BLOCK_K"] * meta["BLOCK_N"]) * element_size
            ### END SOLUTION


        def prune_configs(configs, named_args, smem_limit=SMEM_LIMIT_BYTES, **kwargs):
            """early_config_prune for a GEMM kernel with arguments a_ptr, M, N: the configs that fit in shared memory
            and whose tiles are not larger than the problem, in their original order; never empty."""
            # TODO: the element size of named_args["a_ptr"]; M and N from named_args
            # TODO: keep the configs that pass both rules, in order
            # TODO: if none does, return a list with the one needing the least shared memory
            ### BEGIN SOLUTION
            element_size = named_args["a_ptr"].element_size()
            max_block_m = max(16, triton.next_power_of_2(named_args["M"]))
            max_block_n = max(16, triton.next_power_of_2(named_args["N"]))
            kept = [
                config
                for config in configs
                if shared_memory_bytes(config, element_size) <= smem_limit
                and config.kwargs["BLOCK_M"] <= max_block_m
                and config.kwargs["BLOCK_N"] <= max_block_n
            ]
            return kept or [min(configs, key=lambda config: shared_memory_bytes(config, element_size))]
            ### END SOLUTION
        ''',
    )
    lesson.md(r"""
        ## 3. Timing a GPU kernel right

        Four things make a naive `t0 = time.perf_counter(); fn(); t1 = time.perf_counter()` wrong on a GPU:

        1. **Asynchrony.** A kernel launch returns as soon as the work is queued (a few µs); the GPU runs it later.
           Without `torch.cuda.synchronize()` *after* the call, the wall clock measures the launch, not the kernel — and
           without one *before* starting the clock, it also counts whatever earlier work was still in the queue.
           **CUDA events** (`torch.cuda.Event(enable_timing=True)`, recorded on the stream before and after) measure GPU
           time directly and need only one synchronisation at the end; `triton.testing.do_bench` uses them.
        2. **Warm-up.** The first call compiles (Triton JIT, or `torch.compile`), autotunes, allocates, and finds cold
           caches and idle clocks. It is not the kernel's speed. Run a few calls untimed first.
        3. **The L2 cache.** An H200 has 50 MB of L2. Re-running a kernel on a 32 MB input finds it in L2 and reports a
           bandwidth HBM cannot deliver. `do_bench` writes a 256 MB buffer before every timed call to evict it (and
           times that write *outside* the measured interval).
        4. **Noise.** Clock boosts, other processes, a page fault: a few calls take far longer. The **median** of many
           runs is robust to them; the mean is dragged by every outlier. `do_bench(..., return_mode="median")`, or
           `quantiles=[0.2, 0.5, 0.8]` to see the spread.

        `do_bench(fn, warmup=25, rep=100)` makes its `warmup` and `rep` *milliseconds*, not counts: it times 5 calls to
        estimate one, then runs as many warm-up and timed calls as fit.

        ## 4. Exercise `measure`: a timing harness you can test

        Write the loop with the clock and the device calls passed in, so that it can be checked on a CPU against a
        simulated GPU (and used on a real one with `time.perf_counter` and `torch.cuda.synchronize`). For each of the
        `rep` timed runs: flush the cache (untimed), synchronise, read the clock, call `fn`, synchronise, read the clock.
        Return the median of the `rep` durations in **milliseconds** (`clock` returns seconds).
    """)
    lesson.exercise(
        "measure",
        r'''
        def measure(fn, *, warmup=3, rep=20, clock=time.perf_counter, synchronize=lambda: None, flush=lambda: None):
            """Median run time of fn() in milliseconds over `rep` timed calls, after `warmup` untimed ones.

            clock() -> seconds; synchronize() waits for queued device work; flush() evicts caches (untimed).
            """
            # TODO: warm-up calls (untimed); then rep times: flush, synchronize, clock, fn, synchronize, clock
            # TODO: the median duration, in milliseconds
            ### BEGIN SOLUTION
            for _ in range(warmup):
                fn()
            durations = []
            for _ in range(rep):
                flush()
                synchronize()
                start = clock()
                fn()
                synchronize()
                durations.append((clock() - start) * 1e3)
            return statistics.median(durations)
            ### END SOLUTION
        ''',
    )
    lesson.md(r"""
        ### What each mistake reports, on a simulated GPU

        The cell below builds a toy device: `fn` only *queues* 2 ms of work, `synchronize` waits for the queue, the first
        call also compiles for 500 ms, one run in ten hits a 20 ms hiccup, and `flush` queues 1 ms of its own. Then it
        times `fn` four ways. Only the harness that does all four things right reports 2 ms.
    """)
    lesson.code(r"""
        class ToyGPU:
            def __init__(self):
                self.now, self.queued, self.calls = 0.0, 0.0, 0
            def clock(self):
                return self.now
            def synchronize(self):
                self.now, self.queued = self.now + self.queued, 0.0
            def flush(self):
                self.queued += 1e-3
            def fn(self):
                self.calls += 1
                self.now += 5e-6  # the launch itself
                self.queued += 2e-3 + (0.5 if self.calls == 1 else 0.0) + (20e-3 if self.calls % 10 == 0 else 0.0)


        def naive(gpu):  # one call, wall clock, no synchronisation
            start = gpu.clock(); gpu.fn(); return (gpu.clock() - start) * 1e3

        def synced_first_call(gpu):  # synchronised, but the first (compiling) call
            gpu.synchronize(); start = gpu.clock(); gpu.fn(); gpu.synchronize(); return (gpu.clock() - start) * 1e3

        def mean_of_runs(gpu):  # warm, synchronised, but the mean
            gpu.fn(); times = []
            for _ in range(30):
                gpu.synchronize(); start = gpu.clock(); gpu.fn(); gpu.synchronize(); times.append((gpu.clock() - start) * 1e3)
            return sum(times) / len(times)

        results = {name: f(ToyGPU()) for name, f in
                   [("no sync", naive), ("first call", synced_first_call), ("mean", mean_of_runs)]}
        try:
            gpu = ToyGPU()
            results["measure"] = measure(gpu.fn, rep=30, clock=gpu.clock, synchronize=gpu.synchronize, flush=gpu.flush)
        except NotImplementedError:
            print("Implement measure to see its bar.")
        fig, axis = plt.subplots(figsize=(6, 2.8))
        axis.bar(list(results), list(results.values())); axis.axhline(2.0, color="grey", ls="--", label="true: 2 ms")
        axis.set_yscale("log"); axis.set_ylabel("reported ms"); axis.legend(); fig.tight_layout(); plt.show()
        print({k: round(v, 4) for k, v in results.items()})
    """)
    lesson.md(r"""
        ## 5. Exercise `split_k`: a kernel that accumulates, tuned safely

        A GEMM with small M and N and a long K — the decode-time `x @ W` with a batch of 16, or a weight gradient
        `dW = dY.T @ X` summed over 100k tokens — has few output tiles: $\lceil M/B_M \rceil \lceil N/B_N \rceil$ programs
        can be far fewer than the 132 SMs, which then sit idle while each program walks a very long K loop. **Split-K**
        (K 分块并行) adds a second grid axis: program `(t, s)` computes tile `t` over the `s`-th of `SPLIT_K` slices of
        K, and the partial tiles are summed into the output with `tl.atomic_add`:

        $$
        C_{[I,J]} = \sum_{s=0}^{S-1} \underbrace{\sum_{k \in \text{slice } s} A_{[I,k]} B_{[k,J]}}_{\text{program } (t, s)},
        \qquad \text{slice } s = \big[s\,L,\ \min((s+1)L, K)\big), \ \ L = \Big\lceil \tfrac{\lceil K / B_K \rceil}{S} \Big\rceil B_K .
        $$

        Each slice is a whole number of `BLOCK_K` steps, the last slice may be shorter or empty, and the K mask handles the
        ragged end. The output must be float32 (atomic adds of partial sums in fp16 would round at every add) and must
        start at **zero**: the kernel adds into whatever is there. That is exactly the kind of kernel the autotuner
        breaks: timing three configs, ten runs each, adds thirty products into `c` before the real call adds one more.
        `reset_to_zero=["c_ptr"]` fixes it.

        **int64 strides.** Split-K exists for long K, and a long K is where int32 offsets wrap: in the weight gradient
        `dW = dY.T @ X`, A is `dY.T`, so moving along K means moving along tokens, `stride_ak` is the layer width, and
        `offs_k * stride_ak` for the last slice passes $2^{31}$ from about 150k tokens of a 14336-wide layer on (a few
        sequences of a long-context batch). Cast the strides to int64 at the top of the kernel (`tl.cast(stride,
        tl.int64)`), as `p03.softmax` casts its row index: the pointer tiles are built once per program, so it costs
        next to nothing.

        Write the kernel (keep its signature: the checks call it on a `c` that already holds values, and expect them
        added to), the tuner factory (which the checks call with their own configs and a fake `do_bench`), and the wrapper.
    """)
    lesson.exercise(
        "split_k",
        r'''
        @triton.jit
        def split_k_kernel(
            # Pointers
            a_ptr, b_ptr, c_ptr,
            # Shapes
            M, N, K,
            # Strides
            stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
            # Meta-parameters
            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr,
        ):
            """c[tile] += a[tile rows, K slice] @ b[K slice, tile cols] for program (tile, slice); c is float32."""
            pid = tl.program_id(axis=0)
            pid_k = tl.program_id(axis=1)
            num_pid_n = tl.cdiv(N, BLOCK_N)
            pid_m, pid_n = pid // num_pid_n, pid % num_pid_n
            offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
            offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
            # TODO: the strides in int64 (tl.cast): offs_k * stride_ak can pass 2**31 when K is long
            # TODO: this slice's K range: steps_per_split = cdiv(cdiv(K, BLOCK_K), SPLIT_K) steps of BLOCK_K from k_start
            # TODO: the K loop of p03.matmul over the slice (mask k < K), a float32 accumulator
            # TODO: add the partial tile into c with tl.atomic_add, masked on both edges
            ### BEGIN SOLUTION
            stride_am, stride_ak = tl.cast(stride_am, tl.int64), tl.cast(stride_ak, tl.int64)  # int64 products:
            stride_bk, stride_bn = tl.cast(stride_bk, tl.int64), tl.cast(stride_bn, tl.int64)  # K can be 100k+
            stride_cm, stride_cn = tl.cast(stride_cm, tl.int64), tl.cast(stride_cn, tl.int64)
            steps_per_split = tl.cdiv(tl.cdiv(K, BLOCK_K), SPLIT_K)
            k_start = pid_k * steps_per_split * BLOCK_K
            offs_k = k_start + tl.arange(0, BLOCK_K)
            a_ptrs = a_ptr + (offs_m % M)[:, None] * stride_am + offs_k[None, :] * stride_ak
            b_ptrs = b_ptr + offs_k[:, None] * stride_bk + (offs_n % N)[None, :] * stride_bn
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for step in range(0, steps_per_split):
                k_left = K - k_start - step * BLOCK_K
                a = tl.load(a_ptrs, mask=tl.arange(0, BLOCK_K)[None, :] < k_left, other=0.0)
                b = tl.load(b_ptrs, mask=tl.arange(0, BLOCK_K)[:, None] < k_left, other=0.0)
                acc = tl.dot(a, b, acc, input_precision="ieee")
                a_ptrs += BLOCK_K * stride_ak
                b_ptrs += BLOCK_K * stride_bk
            c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
            tl.atomic_add(c_ptrs, acc, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))
            ### END SOLUTION


        def make_split_k_tuner(configs, do_bench=None):
            """split_k_kernel autotuned over `configs` (keys M, N, K), safe to benchmark although it accumulates.
            do_bench: the autotuner's timer (None: Triton's CUDA-event do_bench)."""
            # TODO: triton.autotune(...)(split_k_kernel) with the right key and the tensor to zero before each timed run
            ### BEGIN SOLUTION
            return triton.autotune(configs=configs, key=["M", "N", "K"], reset_to_zero=["c_ptr"], do_bench=do_bench)(
                split_k_kernel
            )
            ### END SOLUTION


        def split_k_matmul(a, b, tuned_kernel):
            """a @ b in float32 for 2-D a (M, K), b (K, N) of one dtype, with a tuner from make_split_k_tuner."""
            # TODO 1: check shapes, dtype and device
            # TODO 2: a float32 output that starts at zero
            # TODO 3: a 2-D grid: (tiles, SPLIT_K) from the chosen config
            ### BEGIN SOLUTION
            if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0] or a.dtype != b.dtype or a.device != b.device:
                raise ValueError(f"split_k_matmul needs (M, K) @ (K, N) of one dtype, got {tuple(a.shape)} @ {tuple(b.shape)}")
            M, K = a.shape
            N = b.shape[1]
            c = torch.zeros((M, N), dtype=torch.float32, device=a.device)
            grid = lambda META: (triton.cdiv(M, META["BLOCK_M"]) * triton.cdiv(N, META["BLOCK_N"]), META["SPLIT_K"])
            tuned_kernel[grid](
                a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1)
            )
            return c
            ### END SOLUTION
        ''',
    )
    lesson.md(r"""
        ### Tuning it here

        On a GPU the tuner times the candidates with CUDA events (`do_bench=None`). Under the interpreter, timings
        measure Python, so the cell below hands the autotuner *your* `measure` on the CPU clock instead — the mechanics
        (prune, time each config, keep the fastest, reset `c` before every timed run) are the same, only the winner
        means nothing here. `best_config` shows what it chose.
    """)
    lesson.code(r"""
        def split_k_configs():
            if lesson.policy.triton_path != "compiled":
                return [triton.Config({"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 32, "SPLIT_K": s}) for s in (1, 4)]
            return [
                triton.Config({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "SPLIT_K": s}, num_warps=4, num_stages=4)
                for s in (1, 2, 4, 8, 16)
            ]


        cpu_timer = lambda kernel_call, quantiles: [measure(kernel_call, warmup=1, rep=3)] * len(quantiles)
        try:
            tuner = make_split_k_tuner(split_k_configs(), None if lesson.policy.triton_path == "compiled" else cpu_timer)
            a = torch.randn(16, 1000, device=DEVICE)
            b = torch.randn(1000, 24, device=DEVICE)
            c = split_k_matmul(a, b, tuner)
            print("best config:", tuner.best_config, "| max error vs torch:", (c - a @ b).abs().max().item())
        except NotImplementedError:
            print("Implement split_k first.")
    """)
    lesson.md(r"""
        **Reading the numbers** (one run of `python -m llm_algo bench p03.autotune` on an NVIDIA H200, Triton 3.6,
        torch 2.11, bf16; your GPU will differ). `64 x 14336 @ 14336 x 4096` (a decode-sized MLP down-projection) is
        memory-bound: 7.5 GFLOP over 120 MB of operands is 63 FLOPs per byte, a third of the H200's ridge point, so its
        yardstick is bandwidth, and the bench reports it in GB/s (A and B read once, C written once, in bf16). The tuner
        picked 4-way split-K and reached about 1740 GB/s against about 2760 for cuBLAS (69 and 43 µs in that run, or 109 and
        173 TFLOP/s), 41% and 65% of the ~4.2 TB/s of a device
        copy (`p03.cross_entropy`). `256 x 65536 @ 65536 x 1024` sits at the ridge (204 FLOPs per byte) and stays in
        TFLOP/s: 8-way split-K reached 362 against 582. Split-K is the right *idea* for these shapes (one-way split-K
        leaves most SMs idle), but this teaching kernel pays for float32 atomics and has no TMA or persistent schedule;
        cuBLAS picks among specialised split-K and stream-K kernels. The same bench timed `torch.matmul` with your
        `measure` on the wall clock with `torch.cuda.synchronize`: 0.058 ms against `do_bench`'s 0.044 ms at the first
        shape and 0.075 against 0.059 at the second. The difference is the synchronisation and launch overhead that a
        wall clock includes and CUDA events do not: for kernels of tens of microseconds, time with events.
    """)
    lesson.stop()
    lesson.md(r"""
        ## 6. Reading the solutions

        **`prune_configs`.** The element size comes from the tensor the kernel will read, not from a constant, so the same
        pruner keeps `128 x 256 x 64, 3 stages` for bf16 (144 KiB) and drops it for fp32 (288 KiB). The size rule uses
        `next_power_of_2` because block sizes are powers of two: `M = 40` still needs a 64-row tile. The fallback keeps
        the autotuner alive on shapes where every rule fails. Triton's own `matmul` in `triton.ops` (older releases) and
        Inductor's template autotuning prune the same way, and also estimate runtime with a roofline model
        (`prune_configs_by={"perf_model": ..., "top_k": ...}`) to time only the most promising few.

        **`measure`.** `flush` and both `synchronize` calls sit outside the interval between the two clock reads:
        `synchronize` before `start` drains the flush (and anything else queued), `synchronize` after `fn()` waits
        for the kernel itself. The median is what `do_bench` reports with `return_mode="median"`.

        **`split_k_kernel`.** Slices are whole `BLOCK_K` steps, `steps_per_split = cdiv(cdiv(K, BLOCK_K), SPLIT_K)`, so
        every slice but the last is full and the last may be short or empty (its loads are fully masked and it adds
        zeros). `k_left` counts from the slice's start. `tl.atomic_add` is what makes the programs of one tile agree:
        with `tl.store`, the last slice to finish wins. Atomic float adds happen in an unspecified order, so split-K
        results are not bit-reproducible run to run; deterministic variants write partial tiles to a
        `(SPLIT_K, M, N)` workspace and reduce them in a second kernel (cuBLAS's split-K and CUTLASS's "serial" and
        "parallel" reductions).

        **The usual mistakes, and why they are wrong**: smem counted without
        `num_stages` or with a fixed 2-byte element, the tile-size rule without `next_power_of_2`, no fallback (an empty
        list); a harness without warm-up, with the mean, without synchronising after the call, or with the flush
        inside the timed interval; `tl.store` instead of `tl.atomic_add`, slices of `K // SPLIT_K` that drop the tail,
        and an autotuner without `reset_to_zero` or with `key=[]` (tuned once, for the first shape only).

        **Production.** `torch.compile(mode="max-autotune")` benchmarks Triton templates against cuBLAS per shape and
        caches the choice; vLLM ships per-GPU JSON files of tuned configs for its MoE and quantised GEMMs (tuned
        offline, looked up at run time by bucketed M) instead of tuning at start-up; Triton's own disk cache
        (`TRITON_CACHE_AUTOTUNING=1`) persists tuning results between runs. Split-K is one of several answers to
        "too few tiles": stream-K (each SM takes an equal share of all the K steps of all tiles) balances even the
        ragged cases. For attention over a long KV cache the same split is made along the keys (flash-decoding, a
        split-K over the cache, then a reduction): that is `p03.decode_attention`.
    """)
    lesson.mistakes()
    return lesson
