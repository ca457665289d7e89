"""Checks for p03.autotune. References: a loop specification of the pruning rule written here, a simulated
device (a clock, a queue of pending work, a slow first call, rare hiccups) for the timing harness, `torch.matmul`
in float64 for the split-K GEMM, and guard elements around its output (the gate, see llm_algo.references.kernels).

Triton is imported inside functions only (see tests/checks/p03_matmul.py)."""

import torch

from llm_algo.bench import BenchRow, bandwidth_row, baseline_rows, flops_row
from llm_algo.check import Checks, describe, expect, expect_close, expect_refused, expect_tensor
from llm_algo.check.restrictions import MATMUL
from llm_algo.device import triton_device, triton_dtypes
from llm_algo.references.kernels import expect_guard_untouched, guarded, random_window
from llm_algo.references.layouts import distinct_layouts, expect_own_layouts

checks = Checks("p03.autotune", triton=True)
checks.tunes_every_config = True  # its checks count what the autotuner benchmarks: grade it with every config
checks.restrict(
    "split_k",
    kernel=True,
    forbid=MATMUL,
    instead="accumulate the K slices with tl.dot and tl.atomic_add in your @triton.jit kernel",
)


# ------------------------------------------------------------------------------------------ prune_configs


def config(block_m, block_n, block_k, stages, **extra):
    import triton

    return triton.Config({"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k, **extra}, num_stages=stages)


def spec_keep(c, element_size, M, N, limit):
    """The rule, spelled out: smem of num_stages A and B tiles within the limit; tiles no larger than the problem."""
    m, n, k = c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.kwargs["BLOCK_K"]
    smem = c.num_stages * (m * k + k * n) * element_size
    round_up = lambda v: 1 << (v - 1).bit_length()
    return smem <= limit and m <= max(16, round_up(M)) and n <= max(16, round_up(N))


def named(M, N, dtype):
    return {"a_ptr": torch.empty(1, dtype=dtype), "M": M, "N": N, "K": 4096}


def show(configs):
    return [f"{c.kwargs['BLOCK_M']}x{c.kwargs['BLOCK_N']}x{c.kwargs['BLOCK_K']}/s{c.num_stages}" for c in configs]


@checks("prune_configs")
def hand_checkable_shared_memory(ex):
    """128x256x64 with 3 stages needs 144 KiB in bf16 (kept) and 288 KiB in fp32 (dropped); 64x64x32/s4 always fits"""
    big, small = config(128, 256, 64, 3), config(64, 64, 32, 4)
    expect(
        ex.shared_memory_bytes(big, 2) == 3 * (128 * 64 + 64 * 256) * 2,
        "wrong shared-memory estimate",
        input="BLOCK 128x256x64, num_stages=3, 2-byte elements",
        expected=str(3 * (128 * 64 + 64 * 256) * 2),
        got=str(ex.shared_memory_bytes(big, 2)),
        hint="num_stages * (BLOCK_M * BLOCK_K + BLOCK_K * BLOCK_N) * element_size",
    )
    for dtype, want in ((torch.bfloat16, [big, small]), (torch.float32, [small])):
        got = ex.prune_configs([big, small], named(8192, 8192, dtype))
        expect(
            show(got) == show(want),
            "wrong configs kept",
            input=f"M = N = 8192, a {dtype}, limit 227 KiB",
            expected=str(show(want)),
            got=str(show(got)),
            hint="the element size comes from named_args['a_ptr'].element_size()",
        )


@checks("prune_configs")
def matches_the_rule_on_many_problems(ex):
    """a 36-config search space on small, odd and large M, N, in fp16 and fp32, with two smem limits"""
    space = [config(m, n, k, s) for m in (16, 64, 256) for n in (32, 128) for k in (32, 128) for s in (2, 4, 5)]
    for M, N in ((1, 8192), (40, 100), (8192, 8192), (200, 17)):
        for dtype in (torch.float16, torch.float32):
            for limit in (227 * 1024, 100 * 1024):
                got = ex.prune_configs(list(space), named(M, N, dtype), smem_limit=limit)
                size = torch.empty(0, dtype=dtype).element_size()
                want = [c for c in space if spec_keep(c, size, M, N, limit)]
                want = want or [
                    min(
                        space,
                        key=lambda c: (
                            c.num_stages * (c.kwargs["BLOCK_K"] * (c.kwargs["BLOCK_M"] + c.kwargs["BLOCK_N"]))
                        ),
                    )
                ]
                expect(
                    show(got) == show(want),
                    "the kept configs (or their order) differ from the rule",
                    input=f"M={M}, N={N}, {dtype}, smem_limit={limit}",
                    expected=str(show(want)),
                    got=str(show(got)),
                    hint="keep BLOCK_M <= max(16, next_power_of_2(M)) (same for N) and smem <= limit, in order",
                )


@checks("prune_configs")
def never_returns_nothing(ex):
    """when no config fits, the one with the least shared memory is returned (the autotuner raises on an empty list)"""
    space = [config(256, 256, 128, 4), config(128, 256, 128, 3), config(256, 128, 64, 5)]
    got = ex.prune_configs(space, named(4096, 4096, torch.float32), smem_limit=64 * 1024)
    expect(
        show(got) == show([space[2]]),
        "wrong fallback when every config is pruned",
        input="three oversized configs, fp32, smem_limit=64 KiB",
        expected=str(show([space[2]])),
        got=str(show(got)),
        hint="return [min(configs, key=shared memory)] when nothing survives",
    )


@checks("prune_configs")
def boundaries_of_both_rules(ex):
    """a 16-wide tile on a 1-wide problem is kept (the floor is 16); a config that needs exactly the limit is kept"""
    exact = config(64, 64, 32, 2)
    limit = ex.shared_memory_bytes(exact, 2)
    space = [config(16, 16, 32, 2), config(32, 16, 32, 2), config(16, 32, 32, 2), exact]
    for M, N, smem_limit in ((1, 1, 227 * 1024), (1, 1000, 227 * 1024), (1000, 1, 227 * 1024), (64, 64, limit)):
        got = ex.prune_configs(list(space), named(M, N, torch.float16), smem_limit=smem_limit)
        want = [c for c in space if spec_keep(c, 2, M, N, smem_limit)]
        expect(
            show(got) == show(want),
            "the kept configs differ from the rule at its boundaries",
            input=f"M={M}, N={N}, fp16, smem_limit={smem_limit}",
            expected=str(show(want)),
            got=str(show(got)),
            hint="BLOCK <= max(16, next_power_of_2(size)) for M and for N, and shared memory <= the limit (not <)",
        )


# ------------------------------------------------------------------------------------------------ measure


class FakeGPU:
    """A device whose work runs asynchronously: fn() queues `kernel_s` seconds (plus `first_call_s` on the first
    call and `hiccup_s` on every `hiccup_every`-th call); flush() queues `flush_s`; only synchronize() waits."""

    def __init__(self, kernel_s=2e-3, first_call_s=0.0, hiccup_s=0.0, hiccup_every=0, flush_s=0.0, launch_s=5e-6):
        self.now, self.queued, self.calls, self.flushes = 100.0, 0.0, 0, 0
        self.kernel_s, self.first_call_s, self.hiccup_s, self.hiccup_every = (
            kernel_s,
            first_call_s,
            hiccup_s,
            hiccup_every,
        )
        self.flush_s, self.launch_s = flush_s, launch_s
        self.events = []

    def clock(self):
        self.events.append("clock")
        return self.now

    def synchronize(self):
        self.events.append("sync")
        self.now, self.queued = self.now + self.queued, 0.0

    def flush(self):
        self.events.append("flush")
        self.flushes += 1
        self.queued += self.flush_s

    def fn(self):
        self.events.append("fn")
        self.calls += 1
        self.now += self.launch_s
        extra = self.first_call_s if self.calls == 1 else 0.0
        if self.hiccup_every and self.calls % self.hiccup_every == 0:
            extra += self.hiccup_s
        self.queued += self.kernel_s + extra


def run_measure(ex, gpu, **kwargs):
    return ex.measure(gpu.fn, clock=gpu.clock, synchronize=gpu.synchronize, flush=gpu.flush, **kwargs)


def expect_ms(got, want, label, hint):
    expect(
        isinstance(got, float | int) and abs(got - want) <= 1e-6 * max(1.0, abs(want)),
        "wrong time reported",
        input=label,
        expected=f"{want:.6g} ms",
        got=f"{got!r} ms" if not isinstance(got, float | int) else f"{got:.6g} ms",
        hint=hint,
    )


@checks("measure")
def asynchronous_kernel_is_waited_for(ex):
    """fn() only queues 2 ms of work: the harness must synchronise before reading the clock (expect 2.005 ms)"""
    gpu = FakeGPU(kernel_s=2e-3)
    got = run_measure(ex, gpu, warmup=2, rep=10)
    expect_ms(
        got, 2.005, "a fake GPU: launch 5 us, kernel 2 ms queued", "synchronize() after fn(), then read the clock"
    )
    expect(
        gpu.calls == 12,
        "fn was not called warmup + rep times",
        input="warmup=2, rep=10",
        expected="12 calls",
        got=f"{gpu.calls} calls",
        hint="call fn warmup times untimed, then rep times timed",
    )


@checks("measure")
def warm_up_and_median_hide_compile_and_hiccups(ex):
    """a 500 ms first call (compile) and a 50 ms hiccup every 7th call: the median of warm runs is 2.005 ms"""
    for warmup, rep in ((1, 9), (3, 20), (2, 31)):
        gpu = FakeGPU(first_call_s=0.5, hiccup_s=50e-3, hiccup_every=7)
        got = run_measure(ex, gpu, warmup=warmup, rep=rep)
        expect_ms(
            got, 2.005, f"first call +500 ms, every 7th call +50 ms, warmup={warmup}, rep={rep}",
            "run warm-up calls before timing, and return the median (statistics.median), not the mean",
        )  # fmt: skip


@checks("measure")
def cache_flush_is_not_timed(ex):
    """flush() queues 1 ms of device work before every timed run: it must be called rep times and never timed"""
    gpu = FakeGPU(flush_s=1e-3)
    got = run_measure(ex, gpu, warmup=1, rep=8)
    expect(
        gpu.flushes == 8,
        "flush was not called once per timed run",
        input="warmup=1, rep=8",
        expected="8 flushes",
        got=f"{gpu.flushes} flushes",
        hint="flush() at the start of every timed repetition",
    )
    expect_ms(got, 2.005, "flush queues 1 ms before each timed run", "flush, then synchronize, then start the clock")
    expect(
        "fn" not in gpu.events[: gpu.events.index("clock")] or gpu.events.count("fn") > 8,
        "timing started before the warm-up calls",
        input="warmup=1, rep=8",
        expected="warm-up calls first",
        got=" ".join(gpu.events[:6]),
        hint="call fn warmup times before the timed loop",
    )


# ------------------------------------------------------------------------------------------------ split_k


def oracle(a, b):
    return a.double().cpu() @ b.double().cpu()


def fake_do_bench(calls_per_config=3):
    """A deterministic stand-in for do_bench: runs the kernel like a benchmark would (several times) and reports
    a time that prefers the last config it saw, so that every config really is run during tuning."""
    state = {"configs": 0}

    def do_bench(kernel_call, quantiles):
        for _ in range(calls_per_config):
            kernel_call()
        state["configs"] += 1
        return [10.0 / state["configs"]] * len(quantiles)

    do_bench.state = state  # how many configs were benchmarked so far
    return do_bench


def small_configs(splits=(2, 3)):
    import triton

    return [triton.Config({"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "SPLIT_K": s}, num_warps=4) for s in splits]


def launch(ex, a, b, c, block, split_k):
    M, K = a.shape
    N = b.shape[1]
    grid = (-(-M // block) * -(-N // block), split_k)
    ex.split_k_kernel[grid](
        a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BLOCK_M=block, BLOCK_N=block, BLOCK_K=16, SPLIT_K=split_k,
    )  # fmt: skip


@checks("split_k", gate=True)
def kernel_stays_inside_its_output(ex):
    """split_k_kernel on windows of larger buffers, M=21 N=19 K=70, 16x16x16 tiles, SPLIT_K=3: guards untouched"""
    M, N, K = 21, 19, 70
    a = random_window((M, K), (3, 30), device=triton_device())
    b = random_window((K, N), (30, 5), device=triton_device())
    buffer, c = guarded((M, N), (11, 13), device=triton_device())
    c.zero_()
    launch(ex, a, b, c, 16, 3)
    label = "a (21, 70), b (70, 19), c a zeroed (21, 19) window of a NaN buffer, SPLIT_K=3"
    expect_guard_untouched(buffer, (M, N), input=label, hint="mask tl.atomic_add on both edges")
    expect_close(c, oracle(a, b), input=label, hint="each slice masks k < K; the slices together cover all of K")


@checks("split_k")
def kernel_adds_into_its_output(ex):
    """c starts at random values X: after the kernel it holds X + a @ b, for SPLIT_K 1, 2, 4, 7 and ragged K"""
    for M, N, K in ((21, 19, 70), (5, 40, 129), (16, 16, 16)):
        for split_k in (1, 2, 4, 7):
            a = torch.randn(M, K, device=triton_device())
            b = torch.randn(K, N, device=triton_device())
            start = torch.randn(M, N, device=triton_device())
            c = start.clone()
            launch(ex, a, b, c, 16, split_k)
            expect_close(
                c,
                start.double().cpu() + oracle(a, b),
                input=describe(a=a, b=b) + f", SPLIT_K={split_k}, c holding random values",
                hint="add every slice's partial tile with tl.atomic_add (tl.store keeps only the last one); "
                "slices of cdiv(cdiv(K, BLOCK_K), SPLIT_K) steps",
            )


@checks("split_k")
def kernel_reads_only_k_and_any_strides(ex):
    """a = t.T and b = w.T (the F.linear layout) with NaN right after column / row K-1, c column-major: only k < K is
    read, and every stride is used"""
    M, N, K = 21, 19, 70
    a_store, a_window = guarded((K, M), (3, 2), device=triton_device())  # NaN beyond: a read past K shows
    b_store, b_window = guarded((N, K), (4, 3), device=triton_device())
    a_window.copy_(torch.randn(K, M))
    b_window.copy_(torch.randn(N, K))
    a, b = a_window.T, b_window.T  # (M, K) with strides (1, 23), (K, N) with strides (1, 73)
    buffer, c_window = guarded((N, M), (2, 5), device=triton_device())
    c = c_window.T  # (M, N), column-major
    c.zero_()
    launch(ex, a, b, c, 16, 3)
    label = f"a (21, 70) strides {a.stride()}, b (70, 19) strides {b.stride()}, c column-major {c.stride()}, NaN past K"
    expect_guard_untouched(buffer, (N, M), input=label, hint="address c with both of its strides")
    expect_close(
        c,
        oracle(a, b),
        input=label,
        hint="mask k < K on both loads (other=0.0) and address a, b, c with all six strides, advancing by "
        "BLOCK_K * stride_ak and BLOCK_K * stride_bk",
    )


@checks("split_k")
def split_k_matmul_refuses_mismatched_shapes(ex):
    """(4, 5) @ (6, 3) raises instead of multiplying the first 5 rows of b"""
    tuner = ex.make_split_k_tuner(small_configs(), do_bench=fake_do_bench())
    expect_refused(
        lambda: ex.split_k_matmul(
            torch.randn(4, 5, device=triton_device()), torch.randn(6, 3, device=triton_device()), tuner
        ),
        input="a (4, 5), b (6, 3)",
        hint="check a.shape[1] == b.shape[0] (and one dtype and device) before launching",
    )


@checks("split_k")
def autotuning_does_not_corrupt_the_output(ex):
    """the tuner benchmarks 2 configs 3 times each on the real output, then runs once: c must be a @ b, not 7x it"""
    for dtype in triton_dtypes():
        for M, N, K in ((20, 24, 100), (7, 33, 64)):
            tuner = ex.make_split_k_tuner(small_configs(), do_bench=fake_do_bench())
            a = torch.randn(M, K, device=triton_device()).to(dtype)
            b = torch.randn(K, N, device=triton_device()).to(dtype)
            got = ex.split_k_matmul(a, b, tuner)
            label = describe(a=a, b=b) + ", 2 configs (SPLIT_K 2 and 3), each timed by running it 3 times"
            expect_tensor(got, shape=(M, N), dtype=torch.float32, input=label)
            expect_close(
                got,
                oracle(a, b),
                baseline=torch.matmul(a.float(), b.float()),
                input=label,
                hint="the kernel accumulates: give triton.autotune reset_to_zero=['c_ptr']",
            )
            again = ex.split_k_matmul(a, b, tuner)  # tuned now: the cached config runs once on a fresh output
            expect_close(again, oracle(a, b), input=label + ", second call", hint="start from torch.zeros")


@checks("split_k")
def operands_in_their_own_layouts(ex):
    """split_k_matmul with a and b each in a layout of its own (a slice of a fused projection and padded rows; a
    transposed weight and a window of a bigger buffer), same values as contiguous copies"""
    tuner = ex.make_split_k_tuner(small_configs(), do_bench=fake_do_bench(calls_per_config=1))
    for order in (("fused_slice", "padded"), ("outer_padded", "transposed")):  # one shape: tuned on the first only
        a, b = torch.randn(20, 70, device=triton_device()), torch.randn(70, 24, device=triton_device())
        la, lb = distinct_layouts(a, b, order=order)
        expect_own_layouts(la, lb)
        label = f"a (20, 70) strides {la.stride()}, b (70, 24) strides {lb.stride()}, SPLIT_K 2 and 3 tuned"
        expect_close(
            ex.split_k_matmul(la, lb, tuner),
            oracle(a, b),
            input=label,
            hint="pass a.stride(0), a.stride(1), b.stride(0), b.stride(1): each operand's own strides",
        )


@checks("split_k")
def tuner_keys_on_the_shape(ex):
    """one tuner, three shapes, then the first again: each new (M, N, K) is tuned afresh (2 configs benchmarked per
    shape, none for a shape seen before) and every result is right"""
    timer = fake_do_bench(calls_per_config=2)
    tuner = ex.make_split_k_tuner(small_configs((1, 4)), do_bench=timer)
    shapes = ((9, 17, 50), (30, 5, 200), (9, 17, 51), (9, 17, 50))
    for done, (M, N, K) in enumerate(shapes, start=1):
        a = torch.randn(M, K, device=triton_device())
        b = torch.randn(K, N, device=triton_device())
        label = describe(a=a, b=b) + f", one tuner reused across shapes (call {done} of {len(shapes)})"
        expect_close(
            ex.split_k_matmul(a, b, tuner),
            oracle(a, b),
            input=label,
            hint="key=['M', 'N', 'K'] so that a new shape is tuned (and reset) again",
        )
        new_shapes = len(set(shapes[:done]))
        expect(
            timer.state["configs"] == 2 * new_shapes,
            "the autotuner did not re-tune exactly once per new (M, N, K)",
            input=label,
            expected=f"{2 * new_shapes} configs benchmarked so far (2 per distinct shape)",
            got=f"{timer.state['configs']}",
            hint="key=['M', 'N', 'K']: the tuning is cached per value of the key arguments",
        )


def benchmark(ex):
    """Skinny GEMMs (few output tiles, long K), where split-K helps: tuned split_k_matmul vs torch.matmul."""
    import triton

    configs = [
        triton.Config({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "SPLIT_K": s}, num_warps=4, num_stages=4)
        for s in (1, 2, 4, 8, 16)
    ]
    rows = []
    # the decode-sized GEMM is memory-bound (63 FLOPs per byte): GB/s, A and B read once and C written once in bf16;
    # the long-K one sits at the ridge (204 FLOPs per byte): TFLOP/s
    for M, N, K, unit in ((64, 4096, 14336, "GB/s"), (256, 1024, 65536, "TFLOP/s")):
        tuner = ex.make_split_k_tuner(configs)
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
        flops = 2 * M * N * K
        moved = (M * K + K * N + M * N) * a.element_size()
        shape = f"{M}x{K} @ {K}x{N} bf16"
        ex.split_k_matmul(a, b, tuner)  # tune outside the timing
        name = f"split_k_matmul ({tuner.best_config.kwargs['SPLIT_K']}-way)"
        run = lambda a=a, b=b, t=tuner: ex.split_k_matmul(a, b, t)
        if unit == "GB/s":
            rows.append(bandwidth_row(name, shape, run, moved))
            rows += baseline_rows("torch.matmul", shape, torch.matmul, (a, b), bytes_moved=moved)
        else:
            rows.append(flops_row(name, shape, run, flops))
            rows += baseline_rows("torch.matmul", shape, torch.matmul, (a, b), flops=flops)
        # the same call timed by the learner's harness on the wall clock: launch and sync overhead included
        wall_ms = ex.measure(lambda a=a, b=b: torch.matmul(a, b), warmup=10, rep=50, synchronize=torch.cuda.synchronize)
        rate = (moved * 1e-9 if unit == "GB/s" else flops * 1e-12) / (wall_ms * 1e-3)
        rows.append(BenchRow("torch.matmul timed by measure()", shape, wall_ms, rate, unit))
    return rows
