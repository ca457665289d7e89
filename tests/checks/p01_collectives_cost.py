"""Checks for p01.collectives_cost. References: step-by-step simulations of the ring, binomial-tree and pairwise
schedules (one message per rank per step, each step as long as its longest message); the message and byte counts of
real `torch.distributed` runs on the gloo backend in 2, 3 and 4 processes forked by the check (a deadline, and every
process the check started is killed and joined before it returns); and `dist.all_reduce` for the sums."""

import datetime
import math
import multiprocessing
import queue
import random
import socket
import time

import torch
import torch.distributed as dist

from llm_algo.check import Checks, expect, expect_value_error

checks = Checks("p01.collectives_cost")
checks.in_place("ring_all_reduce", "tensor")  # all-reduce sums into the caller's tensor

DEADLINE_S = 40.0  # for one multi-process run, start-up included
COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "reduce", "barrier")
COLLECTIVES += ("all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all_single")


# ------------------------------------------------------------------------------------------ collective_time

HINT_TIME = (
    "ring all-reduce 2(p-1)(alpha + n/p beta); tree 2 ceil(log2 p)(alpha + n beta); reduce-scatter, all-gather, "
    "all-to-all (p-1)(alpha + n/p beta); 0 for one rank"
)


def simulated_time(collective: str, algorithm: str, p: int, n: float, alpha: float, beta: float) -> float:
    """Walk the schedule step by step: every step costs alpha plus its message's bytes times beta."""
    steps = []
    if algorithm == "tree":
        levels, reach = 0, 1
        while reach < p:  # a binomial tree doubles the ranks that hold the data at each level
            reach *= 2
            levels += 1
        steps = [n] * (2 * levels)  # whole message up (reduce), then down (broadcast)
    else:
        passes = 2 if collective == "all_reduce" else 1
        steps = [n / p] * (passes * (p - 1))
    return sum(alpha + size * beta for size in steps)


def expect_time(got, want: float, label: str) -> None:
    expect(
        isinstance(got, (int, float)) and not isinstance(got, bool),
        "the time is not a number",
        input=label,
        expected="float (seconds)",
        got=f"{type(got).__name__} {got!r}"[:120],
        hint="return a Python float",
    )
    expect(
        math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-15),
        "wrong time",
        input=label,
        expected=f"{want:.6g} s",
        got=f"{got:.6g} s (ratio {got / want if want else float('inf'):.4g})",
        hint=HINT_TIME,
    )


@checks("collective_time")
def matches_step_by_step_schedules(ex):
    """every collective, p from 1 to 1024 (powers of two and not), random sizes, alpha and beta"""
    rng = random.Random(torch.initial_seed())
    pairs = [("all_reduce", "ring"), ("all_reduce", "tree"), ("reduce_scatter", "ring"), ("all_gather", "ring")]
    pairs.append(("all_to_all", "pairwise"))
    for collective, algorithm in pairs:
        for p in (1, 2, 3, 6, 8, 17, 64, 1000):
            n = rng.choice([0.0, 1.0, 4096.0, 2.5e8, float(rng.randrange(1, 10**9))])
            alpha, beta = rng.choice([0.0, 5e-6, 3e-5]), rng.choice([0.0, 1 / 50e9, 1 / 450e9, 1e-9])
            want = simulated_time(collective, algorithm, p, n, alpha, beta)
            got = ex.collective_time(collective, algorithm, p, n, alpha, beta)
            expect_time(got, want, f"{collective} ({algorithm}), p={p}, nbytes={n:g}, alpha={alpha:g}, beta={beta:g}")
        for n, alpha, beta in ((0.0, 5e-6, 1e-9), (1e6, 5e-6, 0.0)):  # latency only; bandwidth-free links
            want = simulated_time(collective, algorithm, 6, n, alpha, beta)
            got = ex.collective_time(collective, algorithm, 6, n, alpha, beta)
            expect_time(got, want, f"{collective} ({algorithm}), p=6, nbytes={n:g}, alpha={alpha:g}, beta={beta:g}")


@checks("collective_time")
def llama3_gradients_on_nvlink_and_infiniband(ex):
    """16 GB of bf16 gradients, ring all-reduce over 8 ranks: 62.2 ms at 450 GB/s, 0.56 s at 50 GB/s (alpha = 0)"""
    for bandwidth, want in ((450e9, 2 * 7 / 8 * 16e9 / 450e9), (50e9, 2 * 7 / 8 * 16e9 / 50e9)):
        got = ex.collective_time("all_reduce", "ring", 8, 16e9, 0.0, 1 / bandwidth)
        expect_time(got, want, f"all_reduce (ring), p=8, nbytes=16e9, bandwidth {bandwidth / 1e9:g} GB/s")
    # nccl-tests: busbw = algbw * 2(p-1)/p equals the link bandwidth when alpha = 0
    for p in (2, 4, 8, 16):
        t = ex.collective_time("all_reduce", "ring", p, 1e9, 0.0, 1 / 100e9)
        busbw = 1e9 / t * 2 * (p - 1) / p
        expect(
            math.isclose(busbw, 100e9, rel_tol=1e-9),
            "nccl-tests' bus bandwidth does not come back to the link bandwidth",
            input=f"all_reduce (ring), p={p}, 1 GB, 100 GB/s links, alpha=0",
            expected="busbw = 100 GB/s",
            got=f"{busbw / 1e9:.4g} GB/s",
            hint=HINT_TIME,
        )


@checks("collective_time")
def refuses_unknown_models(ex):
    """an unknown collective or algorithm, world_size 0, negative bytes, alpha or beta: ValueError"""
    ex.collective_time("all_reduce", "ring", 4, 1e6, 1e-6, 1e-10)  # first: it works at all
    bad = [
        ("broadcast", "ring", 4, 1e6, 1e-6, 1e-10),
        ("all_reduce", "butterfly", 4, 1e6, 1e-6, 1e-10),
        ("all_to_all", "ring", 4, 1e6, 1e-6, 1e-10),
        ("all_reduce", "ring", 0, 1e6, 1e-6, 1e-10),
        ("all_reduce", "ring", 4, -1.0, 1e-6, 1e-10),
        ("all_reduce", "ring", 4, 1e6, -1e-6, 1e-10),
        ("all_reduce", "tree", 4, 1e6, 1e-6, -1e-10),
    ]
    for args in bad:
        expect_value_error(
            lambda args=args: ex.collective_time(*args),
            "collective_time({!r}, {!r}, {}, {}, {}, {})".format(*args),
            "validate the (collective, algorithm) pair and the numbers first",
        )


# ------------------------------------------------------------------------------------------ multi-process runs


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rank_main(function, rank: int, world_size: int, port: int, data: torch.Tensor, results) -> None:
    """One forked rank: join the gloo group, count what the function sends, report (rank, result, counts, error)."""
    torch.set_num_threads(1)
    sent = {"messages": 0, "bytes": 0}
    used = []
    try:
        dist.init_process_group(
            "gloo",
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=world_size,
            timeout=datetime.timedelta(seconds=DEADLINE_S / 2),
        )

        def counting(send):
            def wrapper(tensor, *args, **kwargs):
                sent["messages"] += 1
                sent["bytes"] += tensor.numel() * tensor.element_size()
                return send(tensor, *args, **kwargs)

            return wrapper

        barrier = dist.barrier
        dist.send, dist.isend = counting(dist.send), counting(dist.isend)
        for name in COLLECTIVES:  # the learner's code may not use them; the check's reference below may
            original = getattr(dist, name)

            def forbidden(*args, _name=name, _original=original, **kwargs):
                used.append(f"dist.{_name}")
                return _original(*args, **kwargs)

            setattr(dist, name, forbidden)
        tensor = data.clone()
        function(tensor, rank, world_size)
        # by value (a numpy copy): a tensor would travel as a shared-memory handle that dies with this process
        results.put((rank, tensor.numpy().copy(), dict(sent), list(used), None))
        barrier()  # no rank leaves (and closes its connections) while another still waits for its last message
    except BaseException as error:  # noqa: BLE001  (reported to the parent, which fails the check)
        results.put((rank, None, dict(sent), list(used), f"{type(error).__name__}: {error}"[:400]))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def run_ranks(function, inputs: list[torch.Tensor]) -> list[tuple]:
    """Fork one process per input, run `function(tensor, rank, world_size)` in each; results sorted by rank. Every
    process started here is gone when this returns (killed after the deadline if need be)."""
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    port = free_port()
    processes = [
        context.Process(target=rank_main, args=(function, rank, len(inputs), port, data, results), daemon=True)
        for rank, data in enumerate(inputs)
    ]
    collected = []
    try:
        for process in processes:
            process.start()
        deadline = time.monotonic() + DEADLINE_S
        while len(collected) < len(processes):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                collected.append(results.get(timeout=min(remaining, 1.0)))
            except queue.Empty:
                if all(not p.is_alive() for p in processes) and results.empty():
                    break
    finally:
        for process in processes:
            process.join(timeout=2.0)
            if process.is_alive():
                process.kill()
                process.join(timeout=5.0)
        results.close()
    return sorted(
        ((rank, None if array is None else torch.from_numpy(array), *rest) for rank, array, *rest in collected),
        key=lambda item: item[0],
    )


def run_learner_ring(ex, inputs: list[torch.Tensor], label: str) -> list[tuple]:
    reports = run_ranks(ex.ring_all_reduce, inputs)
    expect(
        len(reports) == len(inputs),
        "not every rank finished before the deadline",
        input=label,
        expected=f"{len(inputs)} ranks reporting within {DEADLINE_S:.0f} s",
        got=f"{len(reports)} reported (a rank waiting for a message nobody sends: a deadlock)",
        hint="each step: dist.isend to rank + 1, dist.recv from rank - 1, then wait() on the send",
    )
    for rank, _, _, used, error in reports:
        expect(
            not used,
            "calls a collective, which this exercise forbids",
            input=f"{label}, rank {rank}",
            expected="only dist.isend / dist.recv",
            got=", ".join(sorted(set(used))),
            hint="write the ring with point-to-point messages (dist.all_reduce is the checks' reference)",
        )
        expect(
            error is None, "a rank raised", input=f"{label}, rank {rank}", expected="no error", got=str(error), hint=""
        )
    return reports


HINT_RING = (
    "reduce-scatter: send chunk (rank - s) % p, add the received one into (rank - s - 1) % p; all-gather: send "
    "(rank - s + 1) % p, copy the received one into (rank - s) % p"
)


@checks("ring_all_reduce")
def sums_like_all_reduce(ex):
    """2, 3 and 4 gloo processes, lengths that do not divide by p (and shorter than p): every rank holds the sum"""
    ex.ring_all_reduce(torch.randn(5), 0, 1)  # first: one rank, no process group (and the skeleton's verdict)
    for world_size, length, dtype in (
        (2, 10, torch.float32),
        (3, 7, torch.float64),
        (4, 13, torch.float32),
        (3, 2, torch.float64),
    ):
        inputs = [torch.randint(-50, 50, (length,)).to(dtype) for _ in range(world_size)]
        want = torch.stack(inputs).sum(dim=0)
        label = f"{world_size} ranks, tensors ({length},) {dtype} (integers: the sum is exact)"
        for rank, tensor, _, _, _ in run_learner_ring(ex, inputs, label):
            expect(
                torch.equal(tensor, want),
                "the tensor after the all-reduce is not the sum over ranks",
                input=f"{label}, rank {rank}",
                expected=str(want.tolist())[:200],
                got=str(tensor.tolist())[:200],
                hint=HINT_RING,
            )


@checks("ring_all_reduce")
def sends_what_the_model_counts(ex):
    """gloo, p = 2, 3, 4, n divisible by p: 2(p-1) messages per rank and 2(p-1) n bytes over all ranks, as the model"""
    ex.ring_all_reduce(torch.randn(5), 0, 1)  # first: one rank, no process group (and the skeleton's verdict)
    for world_size, length in ((2, 12), (3, 12), (4, 24)):
        inputs = [torch.randn(length) for _ in range(world_size)]
        reports = run_learner_ring(ex, inputs, f"{world_size} ranks, tensors ({length},) float32")
        total_bytes = sum(counts["bytes"] for _, _, counts, _, _ in reports)
        want_bytes = 2 * (world_size - 1) * length * 4
        for rank, _, counts, _, _ in reports:
            expect(
                counts["messages"] == 2 * (world_size - 1),
                "wrong number of messages",
                input=f"{world_size} ranks, rank {rank}",
                expected=f"2(p-1) = {2 * (world_size - 1)}",
                got=str(counts["messages"]),
                hint="one isend per step, p - 1 reduce-scatter steps and p - 1 all-gather steps",
            )
        expect(
            total_bytes == want_bytes,
            "wrong number of bytes sent over all ranks",
            input=f"{world_size} ranks, tensors ({length},) float32",
            expected=f"2(p-1) n = {want_bytes:,} B",
            got=f"{total_bytes:,} B",
            hint="send one chunk of n/p elements per step, not the whole tensor",
        )
        # the alpha-beta model of the same run: alpha counts steps, beta counts bytes per rank
        steps = ex.collective_time("all_reduce", "ring", world_size, length * 4, 1.0, 0.0)
        volume = ex.collective_time("all_reduce", "ring", world_size, length * 4, 0.0, 1.0)
        expect(
            math.isclose(steps, 2 * (world_size - 1)) and math.isclose(volume, total_bytes / world_size),
            "collective_time disagrees with the counted run",
            input=f"{world_size} ranks, {length * 4} B per rank",
            expected=f"alpha term {2 * (world_size - 1)} steps, beta term {total_bytes / world_size:g} B per rank",
            got=f"{steps:g} steps, {volume:g} B",
            hint=HINT_TIME,
        )


@checks("ring_all_reduce")
def random_values_and_the_gloo_reference(ex):
    """random float64 values on 3 and 4 ranks: the same sum as dist.all_reduce computes, to rounding"""
    ex.ring_all_reduce(torch.randn(5), 0, 1)  # first: one rank, no process group (and the skeleton's verdict)
    for world_size, length in ((3, 31), (4, 9)):
        inputs = [torch.randn(length, dtype=torch.float64) for _ in range(world_size)]
        reference = run_ranks(lambda t, r, p: dist.all_reduce(t), inputs)
        expect(len(reference) == world_size, "the reference run did not finish", input=f"{world_size} ranks")
        for (rank, tensor, _, _, _), (_, want, _, _, _) in zip(
            run_learner_ring(ex, inputs, f"{world_size} ranks, tensors ({length},) float64"), reference, strict=True
        ):
            expect(
                torch.allclose(tensor, want, rtol=1e-12, atol=1e-12),
                "the sum differs from dist.all_reduce",
                input=f"{world_size} ranks, tensors ({length},) float64, rank {rank}",
                expected=str(want[:6].tolist()),
                got=str(tensor[:6].tolist()),
                hint=HINT_RING,
            )
