"""Benchmarks for kernel lessons: CUDA-event timings (median of `triton.testing.do_bench`) reported
as GB/s or TFLOP/s next to a PyTorch baseline and a device-to-device copy measured in the same run.

A lesson's checks module may define `benchmark(ex) -> list[BenchRow]`; `python -m llm_algo bench ID`
loads the reference solutions (or, with --mine, the learner's notebook) and prints the table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class BenchRow:
    name: str
    shape: str
    ms: float
    value: float  # GB/s or TFLOP/s
    unit: str


def median_ms(fn: Callable[[], object]) -> float:
    import triton.testing

    return float(triton.testing.do_bench(fn, return_mode="median"))


def bandwidth_row(name: str, shape: str, fn: Callable[[], object], bytes_moved: int) -> BenchRow:
    ms = median_ms(fn)
    return BenchRow(name, shape, ms, bytes_moved * 1e-9 / (ms * 1e-3), "GB/s")


def graph_bandwidth_row(name: str, shape: str, fn: Callable[[], object], bytes_moved: int) -> BenchRow:
    """`bandwidth_row` timed with `triton.testing.do_bench_cudagraph`: the launches replayed from a CUDA graph, so
    Python and launch overhead drop out (what a serving engine that captures its decode step sees)."""
    import triton.testing

    ms = float(triton.testing.do_bench_cudagraph(fn, return_mode="median"))
    return BenchRow(name, shape, ms, bytes_moved * 1e-9 / (ms * 1e-3), "GB/s")


def flops_row(name: str, shape: str, fn: Callable[[], object], flops: int) -> BenchRow:
    ms = median_ms(fn)
    return BenchRow(name, shape, ms, flops * 1e-12 / (ms * 1e-3), "TFLOP/s")


def baseline_rows(
    name: str,
    shape: str,
    baseline: Callable[..., object],
    args: tuple,
    *,
    bytes_moved: int | None = None,
    flops: int | None = None,
) -> list[BenchRow]:
    """The PyTorch baseline twice: eager, and what `torch.compile` makes of the same function (compiled once,
    outside the timing; do_bench's warm-up absorbs the first call)."""
    if (bytes_moved is None) == (flops is None):
        raise ValueError("give exactly one of bytes_moved (GB/s) or flops (TFLOP/s)")
    compiled = torch.compile(baseline, dynamic=False)
    compiled(*args)
    rows = []
    for label, fn in ((f"{name} (eager)", baseline), (f"{name} (torch.compile)", compiled)):
        if bytes_moved is not None:
            rows.append(bandwidth_row(label, shape, lambda fn=fn: fn(*args), bytes_moved))
        else:
            rows.append(flops_row(label, shape, lambda fn=fn: fn(*args), flops))
    return rows


def copy_row(nbytes: int, device: str = "cuda") -> BenchRow:
    """The roofline a memory-bound kernel is held to: read nbytes and write nbytes."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    return bandwidth_row("device-to-device copy", f"{nbytes / 2**20:.0f} MiB", lambda: dst.copy_(src), 2 * nbytes)


def sdpa_backend_name(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool) -> str:
    """The backend SDPA's dispatcher picks for these inputs, by name (FLASH_ATTENTION, CUDNN_ATTENTION, ...), so that a
    table row says what "SDPA default backend" meant on this machine. Reads a private PyTorch function; when it is
    missing or changes, the name says so instead of failing the benchmark."""
    from torch.nn.attention import SDPBackend

    try:
        choice = int(torch._fused_sdp_choice(q, k, v, is_causal=causal))
    except Exception as exc:  # noqa: BLE001 - a private API: report, do not fail
        return f"unknown: {type(exc).__name__}"
    return next((name for name, member in SDPBackend.__members__.items() if member.value == choice), str(choice))
