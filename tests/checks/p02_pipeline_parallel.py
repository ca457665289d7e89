"""Checks for p02.pipeline_parallel. References: hand-derived schedule tables; the order in which
`torch.distributed.pipelining`'s `ScheduleGPipe` and `Schedule1F1B` ran their micro-batches in real gloo worlds of 2,
3 and 4 processes (a fixture written by scripts/make_pipeline_orders.py); the closed forms m and min(p - s, m)
(activations held) and (p-1)/(m+p-1) (bubble); a memoised longest-path evaluation of op end times written
independently of the simulator; and single-process training of the whole model on the whole batch (gradients of
every stage, per-micro-batch losses) for the runtime, which runs in 3 real processes. The activations a stage holds
are measured, never read from the runtime's own counter: `llm_algo.check.ledger.SavedTensorLedger` follows every
tensor autograd saves during each call of the stage by weak reference, and counts the micro-batches whose saved
tensors are still alive at each backward."""

import json
import random
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from llm_algo.check import Checks, expect, expect_close, one_thread
from llm_algo.check.ledger import SavedTensorLedger
from llm_algo.distributed import expect_ranks_ok, expect_ranks_refuse, run_ranks, run_subgroup
from llm_algo.paths import repo_root

checks = Checks("p02.pipeline_parallel")
checks.restrict(
    "pipeline_schedule",
    "simulate_pipeline",
    forbid=["torch.distributed.pipelining"],
    instead="write the op lists and the timing yourself (torch.distributed.pipelining is the checks' reference)",
)

WORLD = 3  # a first, a middle and a last stage
GROUP_HINT = (
    "address the neighbours as dist.get_global_rank(group, s ± 1) (the given neighbour()) and pass group= to "
    "every send and recv; isend your sends"
)
DEADLINE = 20.0  # one call takes well under a second (the first in a fresh world a few); a deadlock must fail fast


# ----------------------------------------------------------------------------- helpers (candidates for the package)


def ranks_ok(ex, results, *, input: str, hint: str = "") -> list:
    return expect_ranks_ok(results, input=input, hint=hint)


def ranks_refuse(ex, results, errors=(ValueError,), *, input: str, hint: str = "") -> None:
    expect_ranks_refuse(results, errors, input=input, hint=hint)


def table(text: str) -> list[tuple[str, int]]:
    """'F0 F1 B0' -> [("F", 0), ("F", 1), ("B", 0)]"""
    return [(token[0], int(token[1:])) for token in text.split()]


def show(ops) -> str:
    return " ".join(f"{op}{i}" for op, i in ops)


def reference_ops(kind: str, p: int, m: int) -> list[list[tuple[str, int]]]:
    """The checks' own schedules, written as 'what is the next op' rules rather than as phases."""
    schedule = []
    for s in range(p):
        if kind == "gpipe":
            schedule.append(table(" ".join([f"F{i}" for i in range(m)] + [f"B{i}" for i in range(m)])))
            continue
        ops, next_f, next_b, limit = [], 0, 0, min(p - s, m)  # at most p - s activations alive on stage s
        while next_b < m:
            if next_f < m and next_f - next_b < limit:
                ops.append(("F", next_f))
                next_f += 1
            else:
                ops.append(("B", next_b))
                next_b += 1
        schedule.append(ops)
    return schedule


def end_times(schedule, t_forward, t_backward):
    """Longest path: end(op) = duration + max(end of the previous op on its stage, end of its dependency).
    None when the dependencies have a cycle (a deadlock)."""
    p = len(schedule)
    where = {(op, s, i): k for s, ops in enumerate(schedule) for k, (op, i) in enumerate(ops)}
    memo, visiting = {}, set()

    def end(key):
        if key in memo:
            return memo[key]
        if key in visiting:
            raise RecursionError
        visiting.add(key)
        op, s, i = key
        k = where[key]
        before = [(schedule[s][k - 1][0], s, schedule[s][k - 1][1])] if k else []
        needs = (
            ([("F", s - 1, i)] if s else []) if op == "F" else [("F", s, i)] + ([("B", s + 1, i)] if s < p - 1 else [])
        )
        deps = before + needs
        start = max([end(d) for d in deps], default=0.0)
        memo[key] = start + (t_forward if op == "F" else t_backward)
        visiting.discard(key)
        return memo[key]

    try:
        return {key: end(key) for key in where}
    except RecursionError:
        return None


# ------------------------------------------------------------------------------------------ pipeline_schedule

ONE_F_ONE_B_4x6 = [
    "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5",
    "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 B4 B5",
    "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 B5",
    "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5",
]
HAND_TABLES = [
    ("1f1b", 4, 6, ONE_F_ONE_B_4x6),
    ("gpipe", 2, 3, ["F0 F1 F2 B0 B1 B2", "F0 F1 F2 B0 B1 B2"]),
    ("1f1b", 3, 2, ["F0 F1 B0 B1", "F0 F1 B0 B1", "F0 B0 F1 B1"]),  # fewer micro-batches than the warm-up wants
    ("1f1b", 1, 3, ["F0 B0 F1 B1 F2 B2"]),
]
SCHEDULE_HINT = "1F1B: min(p - s - 1, m) warm-up forwards, then F(i + warm-up) B(i) pairs, then the remaining B"


@checks("pipeline_schedule")
def hand_derived_tables(ex):
    """1F1B p=4 m=6 (section 2's table), GPipe p=2 m=3, 1F1B with m < p, and one stage: exactly the tables"""
    for kind, p, m, rows in HAND_TABLES:
        got = ex.pipeline_schedule(kind, p, m)
        want = [table(row) for row in rows]
        expect(
            isinstance(got, list) and len(got) == p,
            f"expected one op list per stage ({p})",
            input=f"{kind}, p={p}, m={m}",
            expected=f"{p} lists",
            got=repr(got)[:200],
            hint="return a list with one list of ops per stage",
        )
        for s, (mine, right) in enumerate(zip(got, want, strict=False)):
            expect(
                [tuple(op) for op in mine] == right,
                f"stage {s}'s order differs from the hand-derived table",
                input=f"{kind}, p={p}, m={m}, stage {s}",
                expected=show(right),
                got=show(mine) if all(len(op) == 2 for op in mine) else repr(mine)[:200],
                hint=SCHEDULE_HINT if kind == "1f1b" else "GPipe: F0 .. F(m-1), then B0 .. B(m-1), on every stage",
            )


def torch_orders() -> list[dict]:
    """What `torch.distributed.pipelining` ran, recorded by scripts/make_pipeline_orders.py in real gloo worlds."""
    path = repo_root() / "02_PyTorch_Algorithms" / "data" / "pipeline_torch_orders.json"
    return json.loads(path.read_text(encoding="utf-8"))["schedules"]


@checks("pipeline_schedule")
def matches_torch_pipelining(ex):
    """p = 2, 3, 4 and m = 1 .. 2p+1: the orders torch.distributed.pipelining's ScheduleGPipe / Schedule1F1B run"""
    for record in torch_orders():
        kind, p, m = record["kind"], record["stages"], record["microbatches"]
        mine = ex.pipeline_schedule(kind, p, m)
        for stage, order in enumerate(record["orders"]):
            got, want = [tuple(op) for op in mine[stage]], [tuple(op) for op in order]
            expect(
                got == want,
                f"stage {stage} differs from torch.distributed.pipelining's {kind}",
                input=f"{kind}, p={p}, m={m}, stage {stage}",
                expected=show(want),
                got=show(got),
                hint=SCHEDULE_HINT if kind == "1f1b" else "GPipe runs the backwards in micro-batch order",
            )


@checks("pipeline_schedule")
def valid_schedules_and_activation_peaks(ex):
    """p = 1..5, m = 1..7: every op once, deadlock-free, and peaks m (GPipe) and min(p - s, m) (1F1B)"""
    for kind in ("gpipe", "1f1b"):
        for p in range(1, 6):
            for m in range(1, 8):
                schedule = [[tuple(op) for op in ops] for ops in ex.pipeline_schedule(kind, p, m)]
                label = f"{kind}, p={p}, m={m}"
                for s, ops in enumerate(schedule):
                    expect(
                        sorted(ops)
                        == sorted(table(" ".join([f"F{i}" for i in range(m)] + [f"B{i}" for i in range(m)]))),
                        f"stage {s} does not run each F and B exactly once",
                        input=label,
                        expected=f"F0..F{m - 1} and B0..B{m - 1}",
                        got=show(ops),
                        hint=SCHEDULE_HINT,
                    )
                    want = m if kind == "gpipe" else min(p - s, m)
                    live = held = 0
                    for op, _ in ops:
                        live += 1 if op == "F" else -1
                        held = max(held, live)
                    expect(
                        held == want,
                        f"stage {s} holds {held} activations at its peak",
                        input=label,
                        expected=str(want),
                        got=str(held),
                        hint=SCHEDULE_HINT,
                    )
                    got_peak = ex.peak_in_flight(ops)
                    expect(
                        got_peak == want,
                        "peak_in_flight is wrong on this schedule's stage",
                        input=f"{label}, stage {s}: {show(ops)}",
                        expected=str(want),
                        got=repr(got_peak),
                        hint="+1 at each forward, -1 at each backward, keep the max",
                    )
                expect(
                    end_times(schedule, 1.0, 2.0) is not None,
                    "the schedule deadlocks",
                    input=label,
                    expected="every op can run",
                    got="stages wait for each other in a cycle",
                    hint="never list a backward before the forward it needs",
                )


@checks("pipeline_schedule")
def peak_of_hand_lists_and_refusals(ex):
    """peak_in_flight of hand lists (2, 3, 0); an unknown kind, 0 stages or a float size is refused"""
    for ops, want in (("F0 B0 F1 F2 B1 B2", 2), ("F0 F1 F2 B2 B1 B0", 3), ("", 0), ("F0 B0 F1 B1", 1)):
        got = ex.peak_in_flight(table(ops))
        expect(
            got == want,
            "wrong peak of activations held",
            input=f"ops {ops or '(none)'}",
            expected=str(want),
            got=repr(got),
            hint="count forwards not yet matched by their backward",
        )
    for args, error, what in (
        (("zero-bubble", 2, 4), ValueError, "unknown kind"),
        (("1f1b", 0, 4), ValueError, "0 stages"),
        (("gpipe", 2, 0), ValueError, "0 micro-batches"),
        (("gpipe", 2, 4.0), TypeError, "m = 4.0"),
    ):
        try:
            ex.pipeline_schedule(*args)
        except error:
            continue
        except NotImplementedError:
            raise
        except Exception as exc:  # noqa: BLE001 (reported as the wrong error)
            expect(
                False,
                f"{what}: refused with the wrong error",
                input=repr(args),
                expected=error.__name__,
                got=f"{type(exc).__name__}: {exc}",
                hint="keep the given validation",
            )
        expect(
            False,
            f"{what} was accepted",
            input=repr(args),
            expected=error.__name__,
            got="a schedule",
            hint="keep the given validation",
        )


# ------------------------------------------------------------------------------------------ simulate_pipeline


def expect_times(got, want, label, hint):
    expect(
        isinstance(got, dict) and set(got) == set(want),
        "the ops timed differ",
        input=label,
        expected=f"{len(want)} keys (op, stage, micro-batch)",
        got=repr(sorted(got))[:200] if isinstance(got, dict) else repr(got)[:200],
        hint="one entry per op of every stage: (op, stage, i) -> (start, end)",
    )
    for key, (start, end) in sorted(want.items(), key=lambda kv: (kv[1], kv[0])):
        got_start, got_end = got[key]
        expect(
            abs(got_start - start) < 1e-9 and abs(got_end - end) < 1e-9,
            f"{key} runs at the wrong time",
            input=label,
            expected=f"[{start:g}, {end:g}]",
            got=f"[{got_start:g}, {got_end:g}]",
            hint=hint,
        )


SIM_HINT = "start = max(when the stage is free, end of F on the previous stage / B on the next stage and own F)"


@checks("simulate_pipeline")
def hand_timelines(ex):
    """p = 2, m = 2, t_f = 1, t_b = 2: GPipe and 1F1B op times by hand, both ending at (m + p - 1)(t_f + t_b) = 9"""
    gpipe = {
        ("F", 0, 0): (0, 1),
        ("F", 0, 1): (1, 2),
        ("F", 1, 0): (1, 2),
        ("F", 1, 1): (2, 3),
        ("B", 1, 0): (3, 5),
        ("B", 1, 1): (5, 7),
        ("B", 0, 0): (5, 7),
        ("B", 0, 1): (7, 9),
    }
    one_f_one_b = {
        ("F", 0, 0): (0, 1),
        ("F", 0, 1): (1, 2),
        ("F", 1, 0): (1, 2),
        ("B", 1, 0): (2, 4),
        ("F", 1, 1): (4, 5),
        ("B", 0, 0): (4, 6),
        ("B", 1, 1): (5, 7),
        ("B", 0, 1): (7, 9),
    }
    for name, rows, want in (
        ("GPipe", ["F0 F1 B0 B1", "F0 F1 B0 B1"], gpipe),
        ("1F1B", ["F0 F1 B0 B1", "F0 B0 F1 B1"], one_f_one_b),
    ):
        got = ex.simulate_pipeline([table(r) for r in rows], 1.0, 2.0)
        expect_times(
            got, {k: (float(a), float(b)) for k, (a, b) in want.items()}, f"{name}: {rows}, t_f 1, t_b 2", SIM_HINT
        )


@checks("simulate_pipeline")
def bubble_closed_form(ex):
    """GPipe and 1F1B, p in {2, 3, 5}, m in {1, 4, 9}, several t_f/t_b: bubble = (p - 1)/(m + p - 1)"""
    for kind in ("gpipe", "1f1b"):
        for p, m in ((2, 1), (2, 4), (3, 9), (5, 4), (5, 9)):
            for t_f, t_b in ((1.0, 2.0), (1.5, 1.5), (0.5, 2.5)):
                got = ex.bubble_fraction(reference_ops(kind, p, m), t_f, t_b)
                expect_close(
                    torch.tensor(float(got), dtype=torch.float64),
                    torch.tensor((p - 1) / (m + p - 1), dtype=torch.float64),
                    input=f"{kind}, p={p}, m={m}, t_f={t_f}, t_b={t_b}",
                    what="bubble fraction",
                    hint="1 - (sum of op durations) / (p * makespan)",
                )


def random_schedules(count, rng):
    """Random per-stage orders (forwards in order, backwards in order, each B after its F), kept when deadlock-free."""
    kept, stuck = [], []
    while len(kept) < count or len(stuck) < 2:
        p, m = rng.randint(2, 4), rng.randint(1, 4)
        schedule = []
        for _ in range(p):
            ops, f, b = [], 0, 0
            while b < m:
                if f < m and (f == b or rng.random() < 0.5):
                    ops.append(("F", f))
                    f += 1
                else:
                    ops.append(("B", b))
                    b += 1
            schedule.append(ops)
        (kept if end_times(schedule, 1.0, 1.0) is not None else stuck).append(schedule)
    return kept[:count], stuck[:2]


@checks("simulate_pipeline")
def matches_longest_path_on_random_schedules(ex):
    """13 deadlock-free schedules (12 random) and t_f, t_b: every op's end, and the bubble, by the longest path"""
    rng = random.Random(torch.randint(0, 2**31, ()).item())
    kept, _ = random_schedules(12, rng)
    # most schedules take as long with t_f and t_b swapped; this one does not (19 against 17 time units)
    asymmetric = [table("F0 F1 B0 F2 B1 B2"), table("F0 B0 F1 F2 B1 B2")]
    for k, schedule in enumerate([asymmetric, *kept]):
        t_f, t_b = (1.0, 3.0) if k == 0 else (rng.choice((1.0, 0.5, 2.0)), rng.choice((1.0, 1.5, 3.0)))
        want = end_times(schedule, t_f, t_b)
        got = ex.simulate_pipeline(schedule, t_f, t_b)
        label = f"{[show(ops) for ops in schedule]}, t_f {t_f}, t_b {t_b}"
        expect(
            isinstance(got, dict) and set(got) == set(want),
            "the ops timed differ",
            input=label,
            expected=f"{len(want)} ops",
            got=repr(got)[:200],
            hint="one entry per op",
        )
        for key, end in want.items():
            start = end - (t_f if key[0] == "F" else t_b)
            expect(
                abs(got[key][0] - start) < 1e-9 and abs(got[key][1] - end) < 1e-9,
                f"{key} runs at the wrong time",
                input=label,
                expected=f"[{start:g}, {end:g}]",
                got=f"[{got[key][0]:g}, {got[key][1]:g}]",
                hint=SIM_HINT,
            )
        makespan = max(want.values())
        busy = sum(t_f if op == "F" else t_b for op, _, _ in want)
        bubble = ex.bubble_fraction(schedule, t_f, t_b)
        expect_close(
            torch.tensor(float(bubble), dtype=torch.float64),
            torch.tensor(1 - busy / (len(schedule) * makespan), dtype=torch.float64),
            input=label,
            what="bubble fraction",
            hint="simulate with (t_forward, t_backward) in that order; 1 - busy / (p * makespan)",
        )


@checks("simulate_pipeline")
def deadlocks_and_bad_schedules_refused(ex):
    """a backward before its forward, two stages waiting on each other, a missing op: ValueError, never a hang"""
    ex.simulate_pipeline([table("F0 B0")], 1.0, 2.0)  # attempted at all?
    rng = random.Random(torch.randint(0, 2**31, ()).item())
    _, stuck = random_schedules(0, rng)
    cases = [
        ([table("B0 F0")], "one stage: B0 before F0"),
        (
            [table("F0 B0 F1 B1"), table("F0 F1 B0 B1")],
            "stage 0 needs B0 from stage 1, which waits for F1 from stage 0",
        ),
        ([table("F0 F1 B0 B1"), table("F0 F1 B0")], "stage 1 never runs B1"),
        ([table("F0 F0 B0 B0")], "F0 and B0 twice"),
        ([table("F0 B0"), table("F0 B0 F1 B1")], "stage 1 runs micro-batch 1, which stage 0 never sends"),
    ] + [(s, f"random cyclic schedule {[show(ops) for ops in s]}") for s in stuck]
    for schedule, what in cases:
        try:
            result = ex.simulate_pipeline(schedule, 1.0, 2.0)
        except ValueError as error:
            expect(
                "never sends" not in what or "stage 1" in str(error),
                "the deadlock error names the wrong stage",
                input=what,
                expected="a message naming stage 1 (stage 0 finished)",
                got=str(error),
                hint="name a stage whose next op never ran",
            )
            continue
        except NotImplementedError:
            raise
        except Exception as exc:  # noqa: BLE001
            expect(
                False,
                "a bad schedule raised the wrong error",
                input=what,
                expected="ValueError",
                got=f"{type(exc).__name__}: {exc}",
                hint="raise ValueError when some op can never run",
            )
        expect(
            False,
            "a bad schedule was accepted",
            input=what,
            expected="ValueError",
            got=f"{len(result) if isinstance(result, dict) else result!r} ops timed",
            hint="after the sweeps, an op that never ran means a deadlock: raise ValueError",
        )


# ------------------------------------------------------------------------------------------ pipeline_stage

HIDDEN, ROWS = 6, 2  # features between stages; rows per micro-batch


def make_model(classes: int | None, dtype, p: int = WORLD, frozen_and_unused: bool = False):
    """p stages of Linear + tanh; with `classes`, the last stage ends in Linear(HIDDEN, classes) (logits). With
    `frozen_and_unused`, every stage's first bias is frozen and each stage has a parameter its forward never uses."""
    stages = [nn.Sequential(nn.Linear(HIDDEN, HIDDEN), nn.Tanh()) for _ in range(p)]
    if classes:
        stages[-1] = nn.Sequential(nn.Linear(HIDDEN, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, classes))
    if frozen_and_unused:
        for stage in stages:
            stage[0].bias.requires_grad_(False)
            stage.register_parameter("unused", nn.Parameter(torch.randn(HIDDEN)))
    return [stage.to(dtype) for stage in stages]


def stage_in_rank(run_stage, stages, schedule, microbatches, targets, loss_fn, group=None):
    rank = dist.get_rank(group)
    stage = stages[rank]
    on_group = {} if group is None else {"group": group}
    # measured, not reported: the tensors autograd saves during each call of the stage (and the loss after it) are
    # one micro-batch's activations; the ledger counts how many micro-batches' are alive at each backward
    with SavedTensorLedger(exclude=(stage, microbatches, targets), forwards_of=stage) as ledger:
        result = run_stage(stage, schedule[rank], microbatches, targets, loss_fn, (ROWS, HIDDEN), **on_group)
    # torch.distributed.pipelining is the reference: the learner's runtime must not bring it in (a `forbid=` here
    # would import it in every rank, seconds of each grading, so the check looks whether anything imported it)
    used = "torch.distributed.pipelining" in sys.modules
    return dict(
        grads=[p.grad for p in stage.parameters()],
        losses=list(result["losses"]),
        reported_peak=result["peak_in_flight"],
        measured_peak=ledger.peak_forwards,
        forwards=ledger.forwards,
        used_pipelining=used,
    )


def single_process(stages, x, target, loss_fn, m):
    model = nn.Sequential(*stages)
    model.zero_grad()
    loss_fn(model(x), target).backward()
    losses = [loss_fn(model(a), b).detach() for a, b in zip(x.chunk(m), target.chunk(m), strict=True)]
    return [[None if p.grad is None else p.grad.clone() for p in stage.parameters()] for stage in stages], losses


def check_pipeline(ex, kind, m, dtype, classes=None, peaks=None, subgroup=False):
    """Train the model split in stages over real ranks (WORLD of them, or with `subgroup` the 2 members [1, 2] of a
    world of 3 whose rank 0 stands by, with frozen and unused parameters) and compare with one process."""
    p = 2 if subgroup else WORLD
    stages64 = make_model(classes, torch.float64, p, frozen_and_unused=subgroup)
    x = torch.randn(m * ROWS, HIDDEN, dtype=torch.float64)
    loss_fn = F.cross_entropy if classes else F.mse_loss
    target = torch.randint(0, classes, (m * ROWS,)) if classes else torch.randn(m * ROWS, HIDDEN, dtype=torch.float64)
    low = [s.to(dtype) for s in make_model(classes, dtype, p, frozen_and_unused=subgroup)]
    for a, b in zip(low, stages64, strict=True):
        b_state = {k: v.to(dtype) for k, v in b.state_dict().items()}
        a.load_state_dict(b_state)
    cast_target = target if classes else target.to(dtype)
    schedule = reference_ops(kind, p, m)
    where_ranks = (
        "a group of ranks [1, 2] of a world of 3 (rank 0 stands by), each stage's first bias frozen and a parameter "
        "its forward never uses"
        if subgroup
        else f"{WORLD} ranks"
    )
    label = (
        f"{where_ranks}, {kind}, m={m} micro-batches of {ROWS} rows, {str(dtype)[6:]}, "
        f"{'cross-entropy' if classes else 'MSE'} loss; ops per stage {[show(ops) for ops in schedule]}"
    )
    args = (ex.run_pipeline_stage, low, schedule, list(x.to(dtype).chunk(m)), list(cast_target.chunk(m)), loss_fn)
    hint = "isend your sends (a blocking send deadlocks 1F1B); recv may block"
    if subgroup:
        results = run_subgroup(stage_in_rank, args=args, input=label, hint=GROUP_HINT, deadline=DEADLINE)
    else:
        results = run_ranks(stage_in_rank, WORLD, args=args, deadline=DEADLINE)
    values = ranks_ok(ex, results, input=label, hint=GROUP_HINT if subgroup else hint)
    expect(
        not any(v["used_pipelining"] for v in values),
        "the runtime uses torch.distributed.pipelining",
        input=label,
        expected="your own isend/recv loop",
        got="torch.distributed.pipelining imported in a rank",
        hint="send and receive the activations and gradients yourself (torch.distributed.pipelining is the reference)",
    )
    grads, losses = single_process(stages64, x, target, loss_fn, m)
    if dtype != torch.float64:
        base_grads, base_losses = single_process(low, x.to(dtype), cast_target, loss_fn, m)
    else:
        base_grads, base_losses = [[None] * len(grads[0])] * p, [None] * m
    for rank, v in enumerate(values):
        where = f"{label}; stage {rank}"
        for k, (got, want, base) in enumerate(zip(v["grads"], grads[rank], base_grads[rank], strict=False)):
            if want is None:
                expect(
                    got is None,
                    f"parameter {k} of stage {rank} got a gradient",
                    input=where,
                    expected="None: it is frozen (requires_grad=False) or its forward never uses it",
                    got="None" if got is None else f"a gradient of shape {tuple(got.shape)}",
                    hint="let autograd decide which parameters get gradients: backward() through the stage's output",
                )
                continue
            expect(
                got is not None,
                f"parameter {k} of stage {rank} has no gradient",
                input=where,
                expected="a gradient",
                got="None",
                hint="every stage must run its backward (B) ops",
            )
            expect_close(
                got,
                want,
                baseline=base,
                input=where,
                what=f"gradient of stage {rank}'s parameter {k}",
                hint="divide each micro-batch's loss by m; pass the input's gradient back to the previous stage",
            )
        if rank == p - 1:
            expect(
                len(v["losses"]) == m,
                "the last stage should return one loss per micro-batch",
                input=where,
                expected=f"{m} losses",
                got=str(len(v["losses"])),
                hint="record each micro-batch's unscaled loss",
            )
            for i, (got, want, base) in enumerate(zip(v["losses"], losses, base_losses, strict=False)):
                expect_close(
                    torch.as_tensor(got),
                    want,
                    baseline=base,
                    input=where,
                    what=f"loss of micro-batch {i}",
                    hint="the loss of micro-batch i, before dividing it by m",
                )
        if peaks is not None:
            expect_activations_held(v, peaks[rank], where)


def expect_activations_held(v, want, where):
    """The verdict on memory comes from the ledger; the figure the runtime reports must then agree with it."""
    expect(
        v["forwards"] >= 1,
        "the stage module was never called through its __call__",
        input=where,
        expected="stage(x) once per F op (the checks count each micro-batch's activations from that call)",
        got=f"{v['forwards']} calls",
        hint="run the stage as stage(x), not stage.forward(x)",
    )
    expect(
        v["measured_peak"] <= want,
        "the stage kept more micro-batches' activations alive than the schedule holds",
        input=where,
        expected=f"at most {want} micro-batches' saved tensors alive at any backward (measured by the checks)",
        got=f"{v['measured_peak']} alive at once (your runtime reported {v['reported_peak']!r})",
        hint="drop what F kept as soon as the matching B has run (kept.pop), and keep no other reference to the "
        "input or output: that is 1F1B's memory saving",
    )
    expect(
        v["reported_peak"] == want,
        "peak_in_flight differs from the activations the stage really held",
        input=where,
        expected=f"{want} (measured: {v['measured_peak']})",
        got=repr(v["reported_peak"]),
        hint="count the micro-batches kept between their F and their B: +1 at F, -1 at B, keep the maximum",
    )


@checks("pipeline_stage")
@one_thread()
def gpipe_gradients_equal_single_process(ex):
    """3 real stages, GPipe, 4 micro-batches, float64 MSE: every stage's gradients and losses, m activations held"""
    check_pipeline(ex, "gpipe", 4, torch.float64, peaks=[4, 4, 4])


@checks("pipeline_stage")
@one_thread()
def one_f_one_b_gradients_and_memory(ex):
    """3 real stages, 1F1B, 5 micro-batches, float64: gradients equal single-process, stages hold 3, 2, 1 activations"""
    check_pipeline(ex, "1f1b", 5, torch.float64, peaks=[3, 2, 1])


@checks("pipeline_stage")
@one_thread()
def float32_cross_entropy_fewer_microbatches_than_stages(ex):
    """1F1B with m = 2 < p, float32, cross-entropy over 5 classes on the last stage: gradients and losses"""
    check_pipeline(ex, "1f1b", 2, torch.float32, classes=5, peaks=[2, 2, 1])


def refusal_in_rank(run_stage, stages, ops, microbatches, targets):
    return run_stage(stages[dist.get_rank()], ops, microbatches, targets, F.mse_loss, (ROWS, HIDDEN))


@checks("pipeline_stage")
@one_thread()
def refuses_bad_inputs_on_every_rank(ex):
    """3 targets for 2 micro-batches, or ops missing B1, are refused on every rank before any message"""
    check_pipeline(ex, "gpipe", 2, torch.float64)  # attempted at all?
    stages = make_model(None, torch.float64)
    batches = list(torch.randn(2 * ROWS, HIDDEN, dtype=torch.float64).chunk(2))
    for ops, targets, what in (
        (table("F0 F1 B0 B1"), batches + batches[:1], "3 targets for 2 micro-batches"),
        (table("F0 F1 B0"), batches, "ops F0 F1 B0 (no B1)"),
    ):
        results = run_ranks(
            refusal_in_rank, WORLD, args=(ex.run_pipeline_stage, stages, ops, batches, targets), deadline=DEADLINE
        )
        ranks_refuse(ex, results, input=f"3 ranks, {what}", hint="keep the given checks: they run before any send/recv")


@checks("pipeline_stage")
@one_thread()
def on_a_sub_group_with_frozen_and_unused_parameters(ex):
    """2 stages on ranks [1, 2] of a world of 3 (rank 0 must receive nothing), 1F1B, 3 micro-batches, float64, a
    frozen bias and an unused parameter per stage: gradients (None for those two), losses, 2 and 1 activations"""
    check_pipeline(ex, "1f1b", 3, torch.float64, peaks=[2, 1], subgroup=True)
