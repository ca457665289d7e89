"""Checks for p03.fused_linear_cross_entropy. References: `F.linear` + `F.cross_entropy` under float64 autograd on the
CPU (loss, d/d hidden, d/d weight), and the same in the dtype under test as the tolerance baseline; a dispatch-mode
probe that records the largest tensor any torch op creates while the learner's code runs (no (N, V) tensor may
appear); on a GPU, `torch.cuda.max_memory_allocated` at a size where the logits would be 512 MiB. The cross-entropy
kernel comes from p03.cross_entropy (the learner's when it passes there)."""

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from llm_algo.bench import BenchRow, baseline_rows, flops_row, median_ms
from llm_algo.check import Checks, describe, expect, expect_close, expect_refused, expect_tensor, reference_only
from llm_algo.check.restrictions import AUTOGRAD, CROSS_ENTROPY, LOGSUMEXP, SOFTMAX
from llm_algo.device import triton_device, triton_dtypes
from llm_algo.references.layouts import distinct_layouts, expect_own_layouts

checks = Checks("p03.fused_linear_cross_entropy", triton=True)
EXP = (torch.exp, torch.Tensor.exp, torch.Tensor.exp_, torch.exp2, torch.Tensor.exp2, torch.special.exp2)
checks.restrict(
    "linear_cross_entropy_fwd_bwd",
    "fused_linear_cross_entropy",
    kernel=True,
    forbid=[*CROSS_ENTROPY, *SOFTMAX, *LOGSUMEXP, *EXP, *AUTOGRAD],
    instead="launch cross_entropy_kernel on each chunk of logits: it computes the loss and the gradient "
    "(F.cross_entropy is the checks' reference)",
)
HINT_NORM = (
    "pass the number of non-ignored targets in the WHOLE batch to every launch (1 for reduction='sum'), "
    "not the count of the chunk"
)
HINT_GRADS = "per chunk: grad_hidden[chunk] = G_c @ weight and grad_weight += G_c.T @ h_c, summed over ALL chunks"


def random_problem(n_rows, dim, vocab, dtype, ignored_fraction=0.25, ignore_index=-100):
    device = triton_device()
    hidden = torch.randn(n_rows, dim, device=device).to(dtype)
    weight = (torch.randn(vocab, dim, device=device) * dim**-0.5 * 2).to(dtype)
    targets = torch.randint(0, vocab, (n_rows,), device=device)
    ignored = torch.rand(n_rows, device=device) < ignored_fraction
    ignored[0] = False
    return hidden, weight, torch.where(ignored, torch.full_like(targets, ignore_index), targets)


def autograd_head(hidden, weight, targets, dtype, ignore_index=-100, reduction="mean"):
    """(loss, d hidden, d weight) by autograd through F.linear + F.cross_entropy, in `dtype` (float64: the oracle;
    the dtype under test: the baseline, with the logits upcast to float32 as training code does)."""
    device = "cpu" if dtype == torch.float64 else hidden.device
    h = hidden.detach().to(device, dtype).requires_grad_(True)
    w = weight.detach().to(device, dtype).requires_grad_(True)
    with reference_only():
        logits = F.linear(h, w)
        loss = F.cross_entropy(
            logits.float() if dtype != torch.float64 else logits,
            targets.to(device),
            ignore_index=ignore_index,
            reduction=reduction,
        )
        loss.backward()
    return loss.detach(), h.grad, w.grad


def check_against_autograd(
    ex, hidden, weight, targets, label, ignore_index=-100, reduction="mean", chunk_size=None, cpu_baseline=False
):
    """`cpu_baseline`: the baseline's matmuls on the CPU (float32 accumulation, rounded once), where a GPU's cuBLAS
    may reduce split-K partials in fp16 and widen the allowance on one device only."""
    loss, grad_hidden, grad_weight = ex.linear_cross_entropy_fwd_bwd(
        hidden, weight, targets, ignore_index, reduction, chunk_size
    )
    want = autograd_head(hidden, weight, targets, torch.float64, ignore_index, reduction)
    on = (lambda t: t.cpu()) if cpu_baseline else (lambda t: t)
    base = autograd_head(on(hidden), on(weight), on(targets), hidden.dtype, ignore_index, reduction)
    label += f", reduction={reduction!r}, chunk_size={chunk_size}"
    expect_tensor(loss, shape=(), dtype=torch.float32, input=label, what="loss", hint="return a float32 scalar")
    expect_tensor(grad_hidden, shape=tuple(hidden.shape), dtype=hidden.dtype, input=label, what="grad_hidden")
    expect_tensor(
        grad_weight,
        shape=tuple(weight.shape),
        dtype=weight.dtype,
        input=label,
        what="grad_weight",
        hint="cast the float32 accumulator to the weight's dtype at the end",
    )
    expect_close(
        loss,
        want[0],
        baseline=base[0],
        input=label,
        what="loss",
        hint="sum of the per-row losses / n_valid (mean) or / 1 (sum); " + HINT_NORM,
    )
    expect_close(grad_hidden, want[1], baseline=base[1], input=label, what="grad_hidden", hint=HINT_NORM)
    expect_close(grad_weight, want[2], baseline=base[2], input=label, what="grad_weight", hint=HINT_GRADS)


class LargestTensor(TorchDispatchMode):
    """Records the largest tensor (in bytes, with its shape and dtype) that any torch op returns while active. Bytes,
    not elements: Triton's interpreter copies a tensor argument's storage as a flat uint8 tensor."""

    def __init__(self):
        super().__init__()
        self.largest, self.shape = 0, ""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor) and t.numel() * t.element_size() > self.largest:
                self.largest, self.shape = t.numel() * t.element_size(), f"{tuple(t.shape)} {t.dtype}"
        return out


# ------------------------------------------------------------------------------------ linear_cross_entropy_fwd_bwd


@checks("linear_cross_entropy_fwd_bwd")
def matches_autograd_across_chunkings(ex):
    """loss, d hidden, d weight vs float64 autograd of F.linear + F.cross_entropy: chunks that do not divide N,
    one chunk larger than N, a single row; ~25% of targets ignored; fp32 and fp16"""
    cases = [(37, 16, 100, 8), (37, 16, 100, 64), (1, 16, 33, 4), (20, 32, 257, 7), (24, 16, 70, None), (9, 8, 50, 1)]
    for dtype in triton_dtypes():
        for n_rows, dim, vocab, chunk in cases:
            hidden, weight, targets = random_problem(n_rows, dim, vocab, dtype)
            label = describe(hidden=hidden, weight=weight, targets=targets)
            check_against_autograd(ex, hidden, weight, targets, label, chunk_size=chunk)


@checks("linear_cross_entropy_fwd_bwd")
def operands_in_their_own_layouts(ex):
    """hidden a slice of a fused projection, weight with padded rows, targets every other element of a buffer: each
    read through its own strides, compared with autograd on contiguous copies"""
    hidden, weight, targets = random_problem(23, 16, 70, torch.float32)
    lh, lw, lt = distinct_layouts(hidden, weight, targets)
    expect_own_layouts(lh, lw, lt)
    label = (
        f"{describe(hidden=hidden, weight=weight, targets=targets)}, strides hidden {lh.stride()}, "
        f"weight {lw.stride()}, targets {lt.stride()}"
    )
    check_against_autograd(ex, lh, lw, lt, label, chunk_size=6)


@checks("linear_cross_entropy_fwd_bwd")
def vocabulary_beyond_one_block(ex):
    """V = 8200 > 8192: each row spans two blocks of the kernel; and liger_chunk_size at Llama-3's and small shapes"""
    hidden, weight, targets = random_problem(3, 8, 8200, torch.float32, ignored_fraction=0.0)
    targets[1] = 8199
    check_against_autograd(ex, hidden, weight, targets, describe(hidden=hidden, weight=weight), chunk_size=2)
    for (n_rows, dim, vocab), want in (((8192, 4096, 128256), 256), ((64, 16, 300), 4), ((5, 64, 32), 8)):
        got = ex.liger_chunk_size(n_rows, dim, vocab)
        expect(
            got == want,
            "wrong default chunk size",
            input=f"liger_chunk_size(N={n_rows}, d={dim}, V={vocab})",
            expected=str(want),
            got=str(got),
            hint="next_power_of_2(cdiv(N, cdiv(V, d))): a (C, V) chunk about as large as the (N, d) hidden states",
        )


@checks("linear_cross_entropy_fwd_bwd")
def normaliser_is_batch_wide(ex):
    """the first chunk entirely ignored and the others full: each chunk's gradient is divided by the batch's n"""
    hidden, weight, targets = random_problem(24, 16, 90, torch.float32, ignored_fraction=0.0)
    targets[:8] = -100  # chunk 0 of 8 rows: no valid row
    targets[9] = -100  # chunk 1: 7 valid rows; chunk 2: 8
    targets[10], targets[11] = 0, 89  # the first and the last class are valid targets
    label = describe(hidden=hidden, weight=weight, targets=targets) + ", rows 0-7 and 9 ignored"
    check_against_autograd(ex, hidden, weight, targets, label, chunk_size=8)
    custom = torch.where(targets == -100, (targets + 107) % 90, targets)  # no -100 left: 5 is the ignored id
    custom[::3] = 5  # a real class id as ignore_index
    label = describe(hidden=hidden, weight=weight, targets=custom) + ", ignore_index=5"
    check_against_autograd(ex, hidden, weight, custom, label, ignore_index=5, chunk_size=5)


@checks("linear_cross_entropy_fwd_bwd")
def sum_reduction_and_all_ignored(ex):
    """reduction='sum' (normaliser 1) over chunks; every target ignored: mean is nan and sum is 0, zero gradients"""
    hidden, weight, targets = random_problem(19, 16, 60, torch.float32)
    check_against_autograd(
        ex, hidden, weight, targets, describe(hidden=hidden, targets=targets), reduction="sum", chunk_size=6
    )
    none = torch.full_like(targets, -100)
    for reduction in ("mean", "sum"):
        loss, grad_hidden, grad_weight = ex.linear_cross_entropy_fwd_bwd(hidden, weight, none, -100, reduction, 6)
        want = F.cross_entropy(F.linear(hidden.double(), weight.double()), none, reduction=reduction)
        label = describe(hidden=hidden, weight=weight) + f", every target -100, reduction={reduction!r}"
        same = bool(torch.isnan(loss)) if bool(torch.isnan(want)) else float(loss) == float(want)
        expect(
            same and bool((grad_hidden == 0).all()) and bool((grad_weight == 0).all()),
            "an all-ignored batch must give F.cross_entropy's loss (nan for mean, 0 for sum) and zero gradients",
            input=label,
            expected=f"loss {float(want)}, gradients all 0",
            got=f"loss {float(loss):.4g}, {int((grad_hidden != 0).sum())} + {int((grad_weight != 0).sum())} "
            "non-zero gradient entries",
            hint="ignored rows get a zero gradient from the kernel; mean divides the sum by n_valid = 0 (nan)",
        )


@checks("linear_cross_entropy_fwd_bwd")
def never_allocates_the_logits(ex):
    """a probe records every tensor torch creates during your call: none may hold N*V elements, only a chunk"""
    n_rows, dim, vocab, chunk = 64, 16, 300, 8
    hidden, weight, targets = random_problem(n_rows, dim, vocab, torch.float32)
    allowed = 4 * max(chunk * vocab, vocab * dim, n_rows * dim)  # bytes: a chunk of logits, dW, grad_hidden
    for chunk_size in (chunk, None):
        with LargestTensor() as probe:
            loss, _, _ = ex.linear_cross_entropy_fwd_bwd(hidden, weight, targets, -100, "mean", chunk_size)
        want = F.cross_entropy(F.linear(hidden.double(), weight.double()), targets)
        label = describe(hidden=hidden, weight=weight, targets=targets) + f", chunk_size={chunk_size}"
        expect_close(loss, want, input=label, what="loss", hint=HINT_NORM)
        expect(
            probe.largest <= allowed,
            f"a tensor of {probe.largest} bytes {probe.shape} was created; the float32 (N, V) logits are "
            f"{4 * n_rows * vocab} bytes",
            input=label,
            expected=f"at most {allowed} bytes (a float32 ({chunk}, {vocab}) chunk of logits, or the ({vocab}, "
            f"{dim}) weight gradient)",
            got=f"{probe.largest} bytes: {probe.shape}",
            hint="compute the logits chunk by chunk (hidden[start:end] @ weight.T), never hidden @ weight.T whole; "
            "chunk_size=None takes liger_chunk_size(N, d, V)",
        )


@checks("linear_cross_entropy_fwd_bwd", requires_cuda=True)
def peak_memory_on_the_gpu(ex):
    """N=8192, V=32768, d=256 bf16: the extra peak memory stays under half the size of the bf16 logits"""
    n_rows, dim, vocab = 8192, 256, 32768
    hidden, weight, targets = random_problem(n_rows, dim, vocab, torch.bfloat16)
    ex.linear_cross_entropy_fwd_bwd(hidden[:64], weight, targets[:64])  # compile outside the measurement
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    loss, grad_hidden, grad_weight = ex.linear_cross_entropy_fwd_bwd(hidden, weight, targets)
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - before
    logits_bytes = n_rows * vocab * 2
    label = describe(hidden=hidden, weight=weight, targets=targets)
    expect(
        extra < logits_bytes // 2,
        f"your call allocated {extra / 2**20:.0f} MiB at its peak; the bf16 logits alone are "
        f"{logits_bytes / 2**20:.0f} MiB",
        input=label,
        expected=f"< {logits_bytes // 2 / 2**20:.0f} MiB (the outputs, a float32 dW and one chunk of logits)",
        got=f"{extra / 2**20:.0f} MiB",
        hint="one (C, V) chunk at a time, dropped before the next; chunk_size=None takes liger_chunk_size",
    )
    want = F.cross_entropy(F.linear(hidden.double(), weight.double()), targets)  # float64 on the GPU: 2 GiB
    baseline = F.cross_entropy(F.linear(hidden, weight).float(), targets)
    expect_close(loss, want, baseline=baseline, input=label, what="loss", hint=HINT_NORM)


@checks("linear_cross_entropy_fwd_bwd")
def rejects_inputs_it_cannot_handle(ex):
    """1-D hidden, mismatched d or dtypes, int32 or mis-shaped targets, a target = V or -1, a bad reduction or chunk"""
    hidden, weight, targets = random_problem(6, 16, 40, torch.float32, ignored_fraction=0.0)
    call = ex.linear_cross_entropy_fwd_bwd
    cases = [
        ("hidden (16,)", lambda: call(hidden[0], weight, targets[:1])),
        ("weight (40, 8) for d = 16", lambda: call(hidden, weight[:, :8], targets)),
        ("weight float16, hidden float32", lambda: call(hidden, weight.half(), targets)),
        ("targets int32", lambda: call(hidden, weight, targets.int())),
        ("targets (5,) for 6 rows", lambda: call(hidden, weight, targets[:5])),
        ("a target = 40 = V", lambda: call(hidden, weight, torch.cat([targets[:5], targets.new_tensor([40])]))),
        ("a target = -1", lambda: call(hidden, weight, torch.cat([targets[:5], targets.new_tensor([-1])]))),
        ("reduction='none'", lambda: call(hidden, weight, targets, -100, "none")),
        ("chunk_size=0", lambda: call(hidden, weight, targets, -100, "mean", 0)),
        ("chunk_size=-1", lambda: call(hidden, weight, targets, -100, "mean", -1)),
        ("chunk_size=2.5", lambda: call(hidden, weight, targets, -100, "mean", 2.5)),
    ]
    for label, bad in cases:
        expect_refused(
            bad,
            input=label,
            hint="check 2-D shapes with the same d and dtype, int64 targets (N,) within [0, V) unless ignored, "
            "reduction in ('mean', 'sum'), chunk_size None or >= 1",
            errors=(ValueError,),
        )


@checks("linear_cross_entropy_fwd_bwd")  # last: 256 launches, so the cheaper checks reject most mistakes first
def weight_gradient_accumulates_in_float32(ex):
    """fp16, N = 256 rows in chunks of one row, positive hidden states, one target for every row: each entry of dW
    is a sum of 256 terms of one sign, which an fp16 accumulator rounds 256 times (a third of dW off by 2-5x)"""
    _, weight, _ = random_problem(1, 16, 24, torch.float16)
    hidden = (torch.rand(256, 16, device=weight.device) + 0.5).half()  # one sign: no entry of dW cancels to ~0,
    targets = torch.full((256,), 5, device=weight.device)  # where the baseline's own rounding would excuse anything
    label = describe(hidden=hidden, weight=weight) + ", hidden in [0.5, 1.5), every target 5, 256 chunks of 1 row"
    check_against_autograd(ex, hidden, weight, targets, label, reduction="sum", chunk_size=1, cpu_baseline=True)


# ------------------------------------------------------------------------------------ fused_linear_cross_entropy


@checks("fused_linear_cross_entropy")
def backward_matches_autograd(ex):
    """loss.backward() through your Function, under an upstream layer: grads of hidden, weight and the layer's input"""
    for dtype in triton_dtypes():
        hidden, weight, targets = random_problem(21, 16, 80, dtype)
        x = hidden.clone().requires_grad_(True)
        w = weight.clone().requires_grad_(True)
        loss = ex.fused_linear_cross_entropy(torch.tanh(x), w, targets, -100, "mean", 8)
        loss.backward()
        x64, w64 = hidden.double().cpu().requires_grad_(True), weight.double().cpu().requires_grad_(True)
        F.cross_entropy(F.linear(torch.tanh(x64), w64), targets.cpu()).backward()
        xb, wb = hidden.clone().requires_grad_(True), weight.clone().requires_grad_(True)
        F.cross_entropy(F.linear(torch.tanh(xb), wb).float(), targets).backward()
        label = describe(hidden=hidden, weight=weight, targets=targets) + ", hidden = tanh(x), chunk_size=8"
        for name, got, want, baseline in (
            ("x.grad", x.grad, x64.grad, xb.grad),
            ("weight.grad", w.grad, w64.grad, wb.grad),
        ):
            expect(
                got is not None,
                f"no gradient reached {name}",
                input=label,
                expected="a gradient",
                got="None",
                hint="backward returns (grad_hidden, grad_weight, None, None, None, None)",
            )
            expect_close(got, want, baseline=baseline, input=label, what=name, hint=HINT_GRADS)


@checks("fused_linear_cross_entropy")
def leaf_operands_in_their_own_layouts(ex):
    """hidden and weight are strided leaves (a slice of a fused projection, padded rows) and targets a strided column:
    the gradients reach them with the shapes and values of autograd's"""
    hidden, weight, targets = random_problem(13, 16, 50, torch.float32)
    lh, lw, lt = distinct_layouts(hidden, weight, targets)
    expect_own_layouts(lh, lw, lt)
    lh.requires_grad_(True)
    lw.requires_grad_(True)
    ex.fused_linear_cross_entropy(lh, lw, lt, -100, "mean", 4).backward()
    _, want_h, want_w = autograd_head(hidden, weight, targets, torch.float64)
    label = (
        f"{describe(hidden=hidden, weight=weight, targets=targets)}, strides hidden {lh.stride()}, "
        f"weight {lw.stride()}, targets {lt.stride()}, chunk_size=4"
    )
    for name, got, want in (("hidden.grad", lh.grad, want_h), ("weight.grad", lw.grad, want_w)):
        expect(got is not None, f"no gradient reached {name}", input=label, expected="a gradient", got="None")
        expect_close(got, want, input=label, what=name, hint=HINT_GRADS)


@checks("fused_linear_cross_entropy")
def grad_output_is_applied(ex):
    """(0.5 * loss + 3 * loss).backward() and a sum reduction: both saved gradients are scaled by grad_output"""
    hidden, weight, targets = random_problem(13, 16, 50, torch.float32)
    for reduction in ("mean", "sum"):
        h = hidden.clone().requires_grad_(True)
        w = weight.clone().requires_grad_(True)
        loss = ex.fused_linear_cross_entropy(h, w, targets, -100, reduction, 4)
        (0.5 * loss + 3 * loss).backward()
        _, want_h, want_w = autograd_head(hidden, weight, targets, torch.float64, reduction=reduction)
        label = describe(hidden=hidden, weight=weight, targets=targets) + f", backward of 3.5 * loss ({reduction})"
        for name, got, want in (("hidden.grad", h.grad, want_h), ("weight.grad", w.grad, want_w)):
            expect(got is not None, f"no gradient reached {name}", input=label, expected="a gradient", got="None")
            expect_close(
                got,
                want * 3.5,
                input=label,
                what=name,
                hint="backward(ctx, grad_output): return each saved gradient times grad_output",
            )


@checks("fused_linear_cross_entropy")
def forward_and_backward_stay_chunked(ex):
    """forward + backward under the probe: no tensor of N*V elements; hidden without requires_grad still works"""
    n_rows, dim, vocab, chunk = 48, 16, 200, 8
    hidden, weight, targets = random_problem(n_rows, dim, vocab, torch.float32)
    w = weight.clone().requires_grad_(True)
    with LargestTensor() as probe:
        ex.fused_linear_cross_entropy(hidden, w, targets, -100, "mean", chunk).backward()
    _, _, want_w = autograd_head(hidden, weight, targets, torch.float64)
    label = describe(hidden=hidden, weight=weight, targets=targets) + f", chunk_size={chunk}, only weight needs grad"
    expect(w.grad is not None, "no gradient reached the weight", input=label, expected="a gradient", got="None")
    expect_close(w.grad, want_w, input=label, what="weight.grad", hint=HINT_GRADS)
    allowed = 4 * max(chunk * vocab, vocab * dim, n_rows * dim)
    expect(
        probe.largest <= allowed,
        f"a tensor of {probe.largest} bytes {probe.shape} was created; the float32 (N, V) logits are "
        f"{4 * n_rows * vocab} bytes",
        input=label,
        expected=f"at most {allowed} bytes (one float32 chunk of logits, or the weight gradient)",
        got=f"{probe.largest} bytes: {probe.shape}",
        hint="the Function's forward runs the chunked loop; its backward only scales the saved gradients",
    )


# ------------------------------------------------------------------------------------ benchmark


def _eager_head(hidden, weight, targets):
    loss = F.cross_entropy(F.linear(hidden, weight).float(), targets)
    return torch.autograd.grad(loss, (hidden, weight))


def _peak_row(name, shape, fn):
    """One more call of fn under torch.cuda.max_memory_allocated: the memory it needs beyond what exists."""
    fn()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    extra = (torch.cuda.max_memory_allocated() - before) / 2**20
    return BenchRow(f"{name}: peak memory", shape, median_ms(fn), extra, "MiB above inputs")


def benchmark(ex):
    """The issue's shape: N=8192, V=128256, d=4096 bf16, forward+backward of the head, TFLOP/s by 6*N*V*d and the
    peak memory of each version beyond its inputs, next to the three matmuls alone (cuBLAS)."""
    n_rows, vocab, dim = 8192, 128256, 4096
    hidden = torch.randn(n_rows, dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    weight = (torch.randn(vocab, dim, device="cuda") * dim**-0.5).to(torch.bfloat16).requires_grad_(True)
    targets = torch.randint(0, vocab, (n_rows,), device="cuda")
    flops = 6 * n_rows * vocab * dim
    shape = f"N={n_rows} V={vocab} d={dim} bf16"
    h, w = hidden.detach(), weight.detach()

    def fused():
        return ex.linear_cross_entropy_fwd_bwd(h, w, targets)

    def compiled_head(hh, ww, tt):
        return _eager_head(hh, ww, tt)

    def three_matmuls():
        logits = h @ w.T
        return logits @ w, logits.T @ h

    rows = [flops_row("linear_cross_entropy_fwd_bwd (chunked, Liger's chunk)", shape, fused, flops)]
    rows += baseline_rows(
        "F.linear + F.cross_entropy fwd+bwd", shape, _eager_head, (hidden, weight, targets), flops=flops
    )
    rows.append(flops_row("cuBLAS: the three matmuls alone (roofline)", shape, three_matmuls, flops))
    rows.append(_peak_row("chunked (yours)", shape, fused))
    rows.append(_peak_row("F.linear + F.cross_entropy eager", shape, lambda: _eager_head(hidden, weight, targets)))
    compiled = torch.compile(compiled_head, dynamic=False)
    rows.append(_peak_row("F.linear + F.cross_entropy torch.compile", shape, lambda: compiled(hidden, weight, targets)))
    return rows
