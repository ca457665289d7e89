"""A short tuning sweep for Part 03's reference kernels against what users pick today, for a maintainer on a GPU.

    PYTHONPATH=$PWD python scripts/gpu_tune_p03.py [matmul] [swiglu] [attention]

Every number comes from `triton.testing.do_bench` (median) in one process, each baseline in the same run as the
kernel it is compared with. It times the lessons' reference solutions with launch parameters other than the ones they
ship (through a stand-in for the kernel object in the lesson's namespace), and one persistent TMA GEMM written here,
so that a lesson's choice of tiles can be justified by a measurement. Nothing here is graded.
"""

from __future__ import annotations

import sys
import traceback

import torch
import triton
import triton.language as tl
import triton.testing

from llm_algo.grading.cache import find_lesson
from llm_algo.grading.execute import load_namespace
from llm_algo.module_files import load_module
from llm_algo.paths import checks_module_path


def median_ms(fn) -> float:
    return float(triton.testing.do_bench(fn, return_mode="median"))


def reference(lesson_id: str) -> dict:
    return load_namespace(find_lesson(lesson_id), "solution").namespace


class Launching:
    """Stands in for a @triton.jit kernel in a lesson's namespace: launches it with some keyword arguments replaced."""

    def __init__(self, kernel, **overrides):
        self.kernel, self.overrides = kernel, overrides

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            kwargs.update(self.overrides)
            if callable(grid):
                return self.kernel[lambda meta: grid({**meta, **self.overrides})](*args, **kwargs)
            return self.kernel[grid](*args, **kwargs)

        return launch


# ---------------------------------------------------------------------------------------------- GEMM
@triton.jit
def _tile_coordinates(tile, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    per_group = GROUP_M * num_pid_n
    first_m = (tile // per_group) * GROUP_M
    rows_here = tl.minimum(num_pid_m - first_m, GROUP_M)
    return first_m + (tile % per_group) % rows_here, (tile % per_group) // rows_here


@triton.jit
def persistent_tma_matmul_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    NUM_PROGRAMS: tl.constexpr,
):  # fmt: skip
    """C = A @ B for row-major A (M, K), B (K, N), C (M, N): one program per SM walks tiles start, start + P, ...;
    the operands arrive through TMA descriptors (Hopper's bulk copy engine) instead of pointer tiles."""
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BLOCK_K, BLOCK_N])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_steps = tl.cdiv(K, BLOCK_K)
    for tile in tl.range(tl.program_id(0), num_pid_m * num_pid_n, NUM_PROGRAMS, flatten=True):
        pid_m, pid_n = _tile_coordinates(tile, num_pid_m, num_pid_n, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for step in range(k_steps):
            a = a_desc.load([pid_m * BLOCK_M, step * BLOCK_K])
            b = b_desc.load([step * BLOCK_K, pid_n * BLOCK_N])
            acc = tl.dot(a, b, acc)
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_ptr.dtype.element_ty))


def persistent_matmul(a, b, block_m, block_n, block_k, group_m, warps, stages):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty(M, N, device=a.device, dtype=a.dtype)
    programs = torch.cuda.get_device_properties(a.device).multi_processor_count
    programs = min(programs, triton.cdiv(M, block_m) * triton.cdiv(N, block_n))
    persistent_tma_matmul_kernel[(programs,)](
        a, b, c, M, N, K, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=group_m,
        NUM_PROGRAMS=programs, num_warps=warps, num_stages=stages,
    )  # fmt: skip
    return c


def sweep_matmul() -> None:
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    ns = reference("p03.matmul")
    tuned = ns["matmul_kernel_tuned"]
    fixed = [  # (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, warps, stages)
        (128, 256, 64, 8, 8, 3), (128, 256, 64, 8, 8, 4), (256, 128, 64, 8, 8, 3), (128, 256, 64, 16, 8, 3),
        (128, 128, 64, 8, 4, 4), (128, 128, 64, 8, 8, 4),
    ]  # fmt: skip
    persistent = [(128, 256, 64, 8, 8, 3), (128, 256, 64, 8, 8, 4), (128, 128, 64, 8, 8, 4), (256, 128, 64, 8, 8, 3)]
    for dtype in (torch.float16, torch.bfloat16):
        for size in (4096, 8192):
            sweep_matmul_shape(ns, tuned, fixed, persistent, dtype, size)


def sweep_matmul_shape(ns, tuned, fixed, persistent, dtype, size) -> None:
    """One square GEMM: cuBLAS, the lesson's autotuned kernel, each fixed config, the persistent TMA kernel."""
    a = torch.randn(size, size, device="cuda", dtype=dtype)
    b = torch.randn(size, size, device="cuda", dtype=dtype)

    def tflops(ms: float) -> float:
        return 2 * size**3 * 1e-9 / ms

    want = a @ b
    cublas = median_ms(lambda: a @ b)
    tag = f"{size}^3 {str(dtype)[6:]}"
    print(f"gemm {tag}: cuBLAS {cublas:.4f} ms {tflops(cublas):.1f} TFLOP/s")
    ns["matmul_kernel_tuned"] = tuned
    ms = median_ms(lambda: ns["matmul"](a, b))
    print(f"gemm {tag}: lesson autotuned {ms:.4f} ms {tflops(ms):.1f} ({cublas / ms:.3f}x cuBLAS)")
    for bm, bn, bk, gm, w, s in fixed:
        ns["matmul_kernel_tuned"] = Launching(
            ns["matmul_kernel"], BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=gm, num_warps=w, num_stages=s
        )
        try:
            ms = median_ms(lambda: ns["matmul"](a, b))
            print(
                f"gemm {tag}: lesson {bm}x{bn}x{bk} g{gm} w{w} s{s} {ms:.4f} ms {tflops(ms):.1f} ({cublas / ms:.3f}x)"
            )
        except Exception as exc:  # noqa: BLE001 - a config that does not compile: report it
            print(f"gemm {tag}: lesson {bm}x{bn}x{bk} g{gm} w{w} s{s} failed: {type(exc).__name__}")
    ns["matmul_kernel_tuned"] = tuned
    for config in persistent:
        try:
            got = persistent_matmul(a, b, *config)
            err = ((got.float() - want.float()).abs().max() / want.float().abs().max()).item()
            ms = median_ms(lambda c=config: persistent_matmul(a, b, *c))
            print(f"gemm {tag}: persistent TMA {config} {ms:.4f} ms {tflops(ms):.1f} ({cublas / ms:.3f}x) "
                  f"max rel err {err:.2e}")  # fmt: skip
        except Exception as exc:  # noqa: BLE001
            print(f"gemm {tag}: persistent TMA {config} failed: {type(exc).__name__}: {str(exc)[:300]}")


# ---------------------------------------------------------------------------------------------- SwiGLU
def sweep_swiglu() -> None:
    ns = reference("p03.fused_elementwise")
    rows, cols = 8192, 14336
    gate, up = torch.randn(rows, 2 * cols, device="cuda", dtype=torch.bfloat16).chunk(2, dim=-1)
    d_out = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16)
    tensor = rows * cols * 2
    baselines = load_module(checks_module_path("p03.fused_elementwise"), "p03_fused_elementwise_checks")
    compiled_fwd = torch.compile(baselines._eager_swiglu, dynamic=False)  # the bench's own baselines
    compiled_bwd = torch.compile(baselines._eager_swiglu_backward, dynamic=False)
    compiled_fwd(gate, up), compiled_bwd(d_out, gate, up)
    fwd_c = median_ms(lambda: compiled_fwd(gate, up))
    bwd_c = median_ms(lambda: compiled_bwd(d_out, gate, up))
    print(f"swiglu fwd torch.compile {fwd_c:.4f} ms {3 * tensor * 1e-6 / fwd_c:.0f} GB/s")
    print(f"swiglu bwd torch.compile {bwd_c:.4f} ms {5 * tensor * 1e-6 / bwd_c:.0f} GB/s")
    kernels = {name: ns[name] for name in ("swiglu_forward_kernel", "swiglu_backward_kernel")}
    for block in (1024, 2048, 4096):
        for warps in (4, 8, 16):
            for name, kernel in kernels.items():
                ns[name] = Launching(kernel, num_warps=warps)
            fwd = median_ms(lambda b=block: ns["swiglu"](gate, up, block_size=b))
            bwd = median_ms(lambda b=block: ns["swiglu_backward"](d_out, gate, up, block_size=b))
            print(f"swiglu block {block} warps {warps}: fwd {fwd:.4f} ms ({fwd_c / fwd:.3f}x compile), "
                  f"bwd {bwd:.4f} ms ({bwd_c / bwd:.3f}x compile)")  # fmt: skip
    ns.update(kernels)


# ---------------------------------------------------------------------------------------------- attention
def sweep_attention() -> None:
    ns = reference("p03.flash_attention_fwd")
    kernel = ns["flash_attention_fwd_kernel"]
    batch, heads, seq, dim = 4, 32, 4096, 128
    q, k, v = (torch.randn(batch, heads, seq, dim, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    for causal in (False, True):
        flops = 4 * batch * heads * seq * seq * dim // (2 if causal else 1)
        default = median_ms(lambda c=causal: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=c))
        print(f"attention causal={causal}: SDPA default {default:.4f} ms {flops * 1e-9 / default:.1f} TFLOP/s")
        for bm, bn, w, s in ((128, 64, 8, 3), (128, 128, 8, 2), (128, 128, 8, 3), (128, 64, 4, 3), (128, 64, 8, 4),
                             (64, 64, 4, 3), (128, 32, 4, 3)):  # fmt: skip
            ns["flash_attention_fwd_kernel"] = Launching(kernel, num_warps=w, num_stages=s)
            try:
                ms = median_ms(lambda c=causal, m=bm, n=bn: ns["flash_attention_fwd"](q, k, v, c, block_m=m, block_n=n))
                print(f"attention causal={causal}: {bm}x{bn} w{w} s{s} {ms:.4f} ms {flops * 1e-9 / ms:.1f} TFLOP/s "
                      f"({default / ms:.3f}x SDPA default)")  # fmt: skip
            except Exception as exc:  # noqa: BLE001
                print(f"attention causal={causal}: {bm}x{bn} w{w} s{s} failed: {type(exc).__name__}")
        ns["flash_attention_fwd_kernel"] = kernel


SWEEPS = {"matmul": sweep_matmul, "swiglu": sweep_swiglu, "attention": sweep_attention}

if __name__ == "__main__":
    for name in sys.argv[1:] or list(SWEEPS):
        try:
            SWEEPS[name]()
        except Exception:  # noqa: BLE001 - one sweep failing must not lose the others
            traceback.print_exc()
        sys.stdout.flush()
