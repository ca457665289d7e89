"""Checks for p03.matmul_epilogue. References: `F.linear`, `F.relu`, `F.silu` and `F.gelu(approximate="tanh")`
in float64 (and in the dtype under test as the error baseline), hand-computed values, and guard elements around
the output (the gate, see llm_algo.references.kernels).

`apply_activation` is a `@triton.jit` function: the checks run it through a small elementwise kernel that receives
it as a `tl.constexpr` argument. Triton is imported inside functions only (see tests/checks/p03_matmul.py)."""

from functools import lru_cache

import torch
import torch.nn.functional as F

from llm_algo.bench import baseline_rows, flops_row
from llm_algo.check import Checks, describe, expect, expect_close, expect_refused, expect_tensor
from llm_algo.check.restrictions import MATMUL
from llm_algo.device import policy, triton_compiled, triton_device, triton_dtypes
from llm_algo.references.kernels import expect_guard_untouched, guarded, random_window
from llm_algo.references.layouts import distinct_layouts, expect_own_layouts

checks = Checks("p03.matmul_epilogue", triton=True)
checks.restrict(
    "linear_act",
    kernel=True,
    forbid=[
        *MATMUL,
        F.relu,
        torch.relu,
        torch.Tensor.relu,
        torch.nn.ReLU,
        F.silu,
        torch.nn.SiLU,
        F.gelu,
        torch.nn.GELU,
    ],
    instead="apply the bias, activation and residual to the tile in your @triton.jit kernel, before its one store",
)
TORCH_ACTIVATIONS = {
    "none": lambda z: z,
    "relu": F.relu,
    "silu": F.silu,
    "gelu_tanh": lambda z: F.gelu(z, approximate="tanh"),
}


# -------------------------------------------------------------------------------------------- activation


@lru_cache(maxsize=1)
def activation_kernel():
    """out = FN(x, ACTIVATION) over a 1-D float32 tensor, one block per program."""
    policy()
    import triton
    import triton.language as tl

    @triton.jit
    def kernel(x_ptr, out_ptr, n, ACTIVATION: tl.constexpr, FN: tl.constexpr, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        z = tl.load(x_ptr + offsets, mask=offsets < n, other=0.0)
        tl.store(out_ptr + offsets, FN(z, ACTIVATION), mask=offsets < n)

    return kernel


def run_activation(ex, z: torch.Tensor, activation: str) -> torch.Tensor:
    z = z.to(torch.float32).to(triton_device()).contiguous()
    out = torch.full_like(z, float("nan"))
    block = 1024
    activation_kernel()[(-(-z.numel() // block),)](z, out, z.numel(), activation, ex.apply_activation, block)
    return out


@checks("activation")
def hand_checkable_values(ex):
    """relu(-2, 0, 3) = (0, 0, 3); silu(0) = 0, silu(ln 3) = 0.75 ln 3; gelu(0) = 0; 'none' is the identity"""
    z = torch.tensor([-2.0, 0.0, 3.0, 1.0986122886681098])
    cases = {
        "relu": [0.0, 0.0, 3.0, 1.0986122886681098],
        "silu": [-2.0 / (1.0 + 7.38905609893065), 0.0, 3.0 / (1.0 + 0.049787068367863944), 0.75 * 1.0986122886681098],
        "none": z.tolist(),
    }
    for name, want in cases.items():
        expect_close(
            run_activation(ex, z, name),
            torch.tensor(want, dtype=torch.float64),
            input=f"z=[-2, 0, 3, ln 3], ACTIVATION={name!r}",
            hint="silu(z) = z * sigmoid(z) = z / (1 + exp(-z))",
        )


@checks("activation")
def matches_torch_on_random_inputs(ex):
    """4099 random inputs in [-8, 8] for each activation vs F.relu / F.silu / F.gelu(approximate='tanh')"""
    z = torch.rand(4099) * 16 - 8
    for name, reference in TORCH_ACTIVATIONS.items():
        expect_close(
            run_activation(ex, z, name),
            reference(z.double()),
            baseline=reference(z),
            input=describe(z=z) + f" in [-8, 8], ACTIVATION={name!r}",
            hint="gelu_tanh: 0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3))), with tanh(u) = 2 sigmoid(2u) - 1",
        )


@checks("activation")
def finite_for_large_inputs(ex):
    """|z| up to 1e4: every activation stays finite and tends to z or 0 (no inf/inf from a textbook tanh)"""
    z = torch.tensor([-1e4, -300.0, -50.0, -20.0, 20.0, 50.0, 300.0, 1e4])
    for name, reference in TORCH_ACTIVATIONS.items():
        got = run_activation(ex, z, name)
        label = f"z={z.tolist()}, ACTIVATION={name!r}"
        expect(
            bool(torch.isfinite(got).all()),
            "inf or nan for large inputs",
            input=label,
            expected=str(reference(z.double()).tolist()),
            got=str(got.tolist()),
            hint="(e^2u - 1) / (e^2u + 1) is inf/inf for u > 44; use 2 * sigmoid(2u) - 1",
        )
        expect_close(got, reference(z.double()), input=label)


# -------------------------------------------------------------------------------------------- linear_act


def oracle(x, weight, bias, activation, residual):
    y = F.linear(x.double().cpu(), weight.double().cpu(), None if bias is None else bias.double().cpu())
    y = TORCH_ACTIVATIONS[activation](y)
    return y if residual is None else y + residual.double().cpu()


def eager(x, weight, bias, activation, residual):
    """The unfused PyTorch chain in the dtype under test (the error baseline)."""
    y = TORCH_ACTIVATIONS[activation](F.linear(x, weight, bias))
    return y if residual is None else y + residual


def expect_linear_act(ex, x, weight, bias, activation, residual, label, hint):
    got = ex.linear_act(x, weight, bias, activation, residual)
    expect_tensor(got, shape=(x.shape[0], weight.shape[0]), dtype=x.dtype, device=x.device.type, input=label)
    expect_close(
        got,
        oracle(x, weight, bias, activation, residual),
        baseline=eager(x, weight, bias, activation, residual),
        input=label,
        hint=hint,
    )


@checks("linear_act", gate=True)
def kernel_stays_inside_its_output(ex):
    """linear_act_kernel on windows of larger buffers, M=37 N=29 K=70, 16 x 16 x 32 tiles: guards untouched"""
    M, N, K = 37, 29, 70
    device = triton_device()
    x = random_window((M, K), (5, 26), device=device)
    weight = random_window((N, K), (3, 26), device=device)
    bias = torch.randn(N, device=device)
    residual = random_window((M, N), (4, 9), device=device)
    buffer, out = guarded((M, N), (11, 9), device=device)
    ex.linear_act_kernel[(-(-M // 16) * -(-N // 16),)](
        x, weight, bias, residual, out, M, N, K,
        x.stride(0), x.stride(1), weight.stride(1), weight.stride(0),
        residual.stride(0), residual.stride(1), out.stride(0), out.stride(1),
        HAS_BIAS=True, HAS_RESIDUAL=True, ACTIVATION="silu", BLOCK_M=16, BLOCK_N=16, BLOCK_K=32, GROUP_M=2,
    )  # fmt: skip
    label = (
        "x (37, 70), weight (29, 70), bias (29,), residual (37, 29): windows of larger buffers; silu; 16x16x32 tiles"
    )
    expect_guard_untouched(buffer, (M, N), input=label, hint="mask the store on both edges: rows < M and cols < N")
    expect_close(
        out,
        oracle(x, weight, bias, "silu", residual),
        input=label,
        hint="silu(x @ weight.T + bias) + residual: bias over columns, residual after the activation",
    )


@checks("linear_act")
def hand_checkable_relu(ex):
    """x = [[1, 2], [3, 4], [-1, 0]], weight = [[1, 0], [0, 1], [1, 1]], bias = [1, -10, 0], relu, residual 0.5"""
    device = triton_device()
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0], [-1.0, 0.0]], device=device)
    weight = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], device=device)
    bias = torch.tensor([1.0, -10.0, 0.0], device=device)
    residual = torch.full((3, 3), 0.5, device=device)
    want = torch.tensor([[2.5, 0.5, 3.5], [4.5, 0.5, 7.5], [0.5, 0.5, 0.5]], dtype=torch.float64)
    expect_close(
        ex.linear_act(x, weight, bias, "relu", residual),
        want,
        input="x=[[1, 2], [3, 4], [-1, 0]], weight=[[1, 0], [0, 1], [1, 1]], bias=[1, -10, 0], relu, residual=0.5",
        hint="relu(x @ weight.T + bias) + residual: bias[j] for column j, residual added after the relu",
    )


@checks("linear_act")
def every_activation_shape_and_dtype(ex):
    """M != N (bias must follow the columns), ragged shapes, each activation, with and without bias, fp32/fp16
    (bf16 compiled)"""
    # compiled, every (activation, bias, dtype) is a new kernel and every new shape a new autotuning run (the grader
    # allows a check 60 s): all activations in fp16 only, GeLU in the other dtypes, one ragged shape and a large one
    shapes = [(37, 29, 70), (1000, 3000, 515)] if triton_compiled() else [(37, 29, 70), (1, 50, 33), (64, 17, 64)]
    device = triton_device()
    for dtype in triton_dtypes():
        every_activation = dtype == torch.float16 or not triton_compiled()
        activations = ("relu", "silu", "gelu_tanh", "none") if every_activation else ("gelu_tanh",)
        for M, N, K in shapes:
            for activation in activations:
                for with_bias in (True, False) if activation in ("relu", "none") else (True,):
                    x = torch.randn(M, K, device=device).to(dtype)
                    weight = (torch.randn(N, K, device=device) / K**0.5).to(dtype)
                    bias = torch.randn(N, device=device).to(dtype) if with_bias else None
                    label = describe(x=x, weight=weight) + f", bias={'(N,)' if with_bias else None}, {activation}"
                    expect_linear_act(
                        ex, x, weight, bias, activation, None, label,
                        hint="order: acc + bias[None, :] (columns), then the activation, then the residual",
                    )  # fmt: skip


@checks("linear_act")
def residual_and_strided_operands(ex):
    """a residual (added after the activation), a transposed x and a residual that is a strided view"""
    M, N, K = (45, 38, 90) if not triton_compiled() else (1000, 768, 1000)
    device = triton_device()
    for dtype in triton_dtypes():
        x = torch.randn(K, M, device=device).to(dtype).T  # strides (1, M)
        weight = (torch.randn(N, K, device=device) / K**0.5).to(dtype)
        bias = torch.randn(N, device=device).to(dtype)
        residual = torch.randn(M, 2 * N, device=device).to(dtype)[:, ::2]
        for activation in ("gelu_tanh", "silu"):
            label = describe(x=x, weight=weight, residual=residual) + f", x = t.T, residual[:, ::2], {activation}"
            expect_linear_act(
                ex, x, weight, bias, activation, residual, label,
                hint="act(x @ weight.T + bias) + residual; address the residual by its own strides",
            )  # fmt: skip


@checks("linear_act")
def operands_in_their_own_layouts(ex):
    """x a slice of a fused projection, weight with padded rows, bias every other element of a buffer, residual a
    window of a bigger buffer (and the same in another order): each operand read through its own strides"""
    M, N, K = 37, 29, 70
    device = triton_device()
    for dtype in triton_dtypes():
        for order in (None, ("transposed", "fused_slice", "padded", "outer_padded")):
            x = torch.randn(M, K, device=device).to(dtype)
            weight = (torch.randn(N, K, device=device) / K**0.5).to(dtype)
            bias = torch.randn(N, device=device).to(dtype)
            residual = torch.randn(M, N, device=device).to(dtype)
            lx, lw, lb, lr = distinct_layouts(x, weight, bias, residual, order=order)
            expect_own_layouts(lx, lw, lb, lr)
            label = (
                f"{describe(x=x, weight=weight, bias=bias, residual=residual)}, strides x {lx.stride()}, "
                f"weight {lw.stride()}, bias {lb.stride()}, residual {lr.stride()}, silu"
            )
            expect_linear_act(
                ex, lx, lw, lb, "silu", lr, label,
                hint="every operand by its own strides; the kernel reads the bias with unit stride: bias.contiguous()",
            )  # fmt: skip


@checks("linear_act")
def strided_weight_and_column_major_output(ex):
    """a weight whose rows are not contiguous (weight = t.T, stride (1, N)) through linear_act, and the kernel
    storing into a column-major output window"""
    M, N, K = 21, 19, 70
    device = triton_device()
    x = torch.randn(M, K, device=device)
    weight = (torch.randn(K, N, device=device) / K**0.5).T  # (N, K) with strides (1, N)
    bias = torch.randn(N, device=device)
    label = describe(x=x, weight=weight) + f", weight = t.T with strides {weight.stride()}, relu"
    expect_linear_act(ex, x, weight, bias, "relu", None, label, hint="advance w by BLOCK_K * stride_wk, not BLOCK_K")
    buffer, window = guarded((N, M), (3, 4), device=device)
    out = window.T  # (M, N), strides (1, 25)
    ex.linear_act_kernel[(-(-M // 16) * -(-N // 16),)](
        x, weight, bias, out, out, M, N, K,
        x.stride(0), x.stride(1), weight.stride(1), weight.stride(0),
        out.stride(0), out.stride(1), out.stride(0), out.stride(1),
        HAS_BIAS=True, HAS_RESIDUAL=False, ACTIVATION="relu", BLOCK_M=16, BLOCK_N=16, BLOCK_K=32, GROUP_M=2,
    )  # fmt: skip
    label = f"linear_act_kernel with out a column-major window, strides {out.stride()}, relu, 16x16x32 tiles"
    expect_guard_untouched(buffer, (N, M), input=label, hint="address out with both of its strides")
    expect_close(out, oracle(x, weight, bias, "relu", None), input=label, hint="out_ptr + ... + offs_n * stride_on")


@checks("linear_act")
def kernel_reads_only_k_below_K(ex):
    """linear_act_kernel with NaN right after column K-1 of x and of the weight: the K masks keep it out"""
    M, N, K = 21, 19, 70
    device = triton_device()
    _, x = guarded((M, K), (0, 2), device=device)
    _, weight = guarded((N, K), (0, 2), device=device)  # rows of K + 2: NaN at columns K and K + 1
    x.copy_(torch.randn(M, K))
    weight.copy_(torch.randn(N, K) / K**0.5)
    out = torch.empty(M, N, device=device)
    ex.linear_act_kernel[(-(-M // 16) * -(-N // 16),)](
        x, weight, out, out, out, M, N, K,
        x.stride(0), x.stride(1), weight.stride(1), weight.stride(0),
        out.stride(0), out.stride(1), out.stride(0), out.stride(1),
        HAS_BIAS=False, HAS_RESIDUAL=False, ACTIVATION="none", BLOCK_M=16, BLOCK_N=16, BLOCK_K=32, GROUP_M=2,
    )  # fmt: skip
    label = "x (21, 70) and weight (19, 70) windows with NaN at columns 70 and 71, 16x16x32 tiles"
    expect_close(out, oracle(x, weight, None, "none", None), input=label, hint="mask both loads with k < K (other=0.0)")


@checks("linear_act")
def rejects_mismatched_operands(ex):
    """wrong weight width, bias length, residual shape, dtype mix or activation name raise with a message"""
    device = triton_device()
    x, weight = torch.randn(4, 5, device=device), torch.randn(3, 5, device=device)
    for label, call in (
        ("weight (3, 6) for x (4, 5)", lambda: ex.linear_act(x, torch.randn(3, 6, device=device))),
        ("bias (4,) for N = 3", lambda: ex.linear_act(x, weight, torch.randn(4, device=device))),
        (
            "residual (3, 4) for (4, 3)",
            lambda: ex.linear_act(x, weight, None, "relu", torch.randn(3, 4, device=device)),
        ),
        ("weight float16, x float32", lambda: ex.linear_act(x, weight.half())),
        ("bias float16, x float32", lambda: ex.linear_act(x, weight, torch.randn(3, device=device).half())),
        ("activation 'tanh'", lambda: ex.linear_act(x, weight, None, "tanh")),
    ):
        expect_refused(call, input=label, hint="check shapes, dtypes and the activation name before launching")


def benchmark(ex):
    """The MLP up-projection of a Llama-3-8B-sized layer on 8192 tokens: fused vs eager vs torch.compile."""
    M, K, N = 8192, 4096, 14336
    rows = []
    flops = 2 * M * N * K
    for dtype in (torch.bfloat16, torch.float16):
        x = torch.randn(M, K, device="cuda", dtype=dtype)
        weight = torch.randn(N, K, device="cuda", dtype=dtype) / K**0.5
        bias = torch.randn(N, device="cuda", dtype=dtype)
        residual = torch.randn(M, N, device="cuda", dtype=dtype)
        name = str(dtype).removeprefix("torch.")
        for activation, res in (("gelu_tanh", None), ("silu", residual)):
            shape = f"{M}x{K} @ ({N}x{K}).T, {activation}{' + residual' if res is not None else ''}, {name}"
            fn = lambda a=activation, r=res, x=x, w=weight, b=bias: ex.linear_act(x, w, b, a, r)
            rows.append(flops_row("linear_act (fused Triton)", shape, fn, flops))
            rows += baseline_rows(
                "F.linear + activation", shape, eager, (x, weight, bias, activation, res), flops=flops
            )
    rows.append(
        flops_row(
            "torch.matmul alone (cuBLAS)", f"{M}x{K} @ {K}x{N} bf16", lambda: x.bfloat16() @ weight.bfloat16().T, flops
        )
    )
    return rows
