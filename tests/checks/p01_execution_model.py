"""Checks for p01.execution_model. References: a loop that lays the tiles out group by group (for the grouped
program order) and the properties the order must keep; a brute-force packer that adds blocks to one SM until a
resource runs out, with the per-SM limits of the CUDA C++ Programming Guide ("Technical Specifications per Compute
Capability", as encoded in NVIDIA CCCL's cuda/__device/arch_traits.h), written out here independently of the
lesson's table."""

import random

import torch

from llm_algo.check import Checks, expect, expect_close, expect_value_error

checks = Checks("p01.execution_model")

# ------------------------------------------------------------------------------------------ program_to_tile


def grouped_layout(num_pid_m: int, num_pid_n: int, group_m: int) -> list:
    """The spec as a loop: for each group of up to group_m row blocks, for each column, for each row of the group,
    the next program takes that tile. Returns [(pid_m, pid_n)] indexed by pid."""
    order = []
    for first in range(0, num_pid_m, group_m):
        rows = range(first, min(first + group_m, num_pid_m))
        for column in range(num_pid_n):
            for row in rows:
                order.append((row, column))
    return order


HINT_TILE = (
    "group = pid // (group_m * num_pid_n); first row block = group * group_m; height = min(num_pid_m - first, "
    "group_m); pid_m = first + (pid % (group_m * num_pid_n)) % height; pid_n = (pid % ...) // height"
)


def expect_tile(got, want, label: str) -> None:
    expect(
        isinstance(got, tuple) and len(got) == 2 and all(isinstance(v, int) for v in got),
        "expected (pid_m, pid_n) as two ints",
        input=label,
        expected=str(want),
        got=repr(got)[:80],
        hint="return pid_m, pid_n",
    )
    expect(
        tuple(got) == want, "wrong tile for this program", input=label, expected=str(want), got=str(got), hint=HINT_TILE
    )


@checks("program_to_tile")
def matches_the_group_by_group_loop(ex):
    """every program of grids from 1x1 to 13x11, groups 1 to 8 (short last groups included): equal to the loop"""
    for num_pid_m, num_pid_n, group_m in (
        (1, 1, 1),
        (7, 9, 3),
        (8, 8, 8),
        (13, 11, 4),
        (5, 3, 8),
        (10, 1, 3),
        (1, 6, 2),
    ):
        for pid, want in enumerate(grouped_layout(num_pid_m, num_pid_n, group_m)):
            got = ex.program_to_tile(pid, num_pid_m, num_pid_n, group_m)
            expect_tile(got, want, f"pid={pid}, num_pid_m={num_pid_m}, num_pid_n={num_pid_n}, group_m={group_m}")


@checks("program_to_tile")
def a_bijection_and_row_major_at_one(ex):
    """random grids: every tile computed exactly once; group_m = 1 is row-major; group_m >= num_pid_m column-major"""
    rng = random.Random(torch.initial_seed())
    for _ in range(6):
        num_pid_m, num_pid_n, group_m = rng.randrange(1, 20), rng.randrange(1, 20), rng.randrange(1, 9)
        tiles = [ex.program_to_tile(pid, num_pid_m, num_pid_n, group_m) for pid in range(num_pid_m * num_pid_n)]
        expect(
            sorted(tiles) == [(m, n) for m in range(num_pid_m) for n in range(num_pid_n)],
            "the programs do not cover every tile exactly once",
            input=f"num_pid_m={num_pid_m}, num_pid_n={num_pid_n}, group_m={group_m}",
            expected="a permutation of all tiles",
            got=f"{len(set(tiles))} distinct tiles of {num_pid_m * num_pid_n}; out of range: "
            f"{[t for t in tiles if not (0 <= t[0] < num_pid_m and 0 <= t[1] < num_pid_n)][:3]}",
            hint="the last group may hold fewer than group_m row blocks: height = min(num_pid_m - first, group_m)",
        )
    for pid in range(6 * 7):
        expect_tile(ex.program_to_tile(pid, 6, 7, 1), divmod(pid, 7), f"pid={pid}, 6 x 7 tiles, group_m=1 (row-major)")
        expect_tile(
            ex.program_to_tile(pid, 6, 7, 6), (pid % 6, pid // 6), f"pid={pid}, 6 x 7, group_m=6 (column-major)"
        )


@checks("program_to_tile")
def refuses_bad_programs(ex):
    """a pid outside the grid, non-positive tile counts, group_m < 1: ValueError"""
    ex.program_to_tile(0, 2, 2, 1)  # first: it works at all
    for args in ((-1, 4, 4, 2), (16, 4, 4, 2), (0, 0, 4, 2), (0, 4, 0, 2), (0, 4, 4, 0)):
        expect_value_error(lambda args=args: ex.program_to_tile(*args), f"program_to_tile{args}", "validate first")


# ------------------------------------------------------------------------------------------ occupancy

# name -> (max resident threads, max resident blocks, shared memory per SM, shared memory reserved per block)
PUBLISHED = {
    "sm_75 (T4)": (1024, 16, 64 * 1024, 0),
    "sm_80 (A100)": (2048, 32, 164 * 1024, 1024),
    "sm_86 (RTX 3090, A10)": (1536, 16, 100 * 1024, 1024),
    "sm_89 (RTX 4090, L40S)": (1536, 24, 100 * 1024, 1024),
    "sm_90 (H100, H200)": (2048, 32, 228 * 1024, 1024),
}


def pack_blocks(arch: str, threads: int, registers: int, shared: int) -> tuple[int, float]:
    """Brute force: place identical blocks on one SM while every resource still has room for one more."""
    max_threads, max_blocks, shared_per_sm, reserved = PUBLISHED[arch]
    warp_slots = max_threads // 32
    warps = (threads + 31) // 32
    registers_per_block = 0
    for _ in range(warps):  # each warp's registers, rounded up to the 256-register allocation unit
        registers_per_block += ((registers * 32 + 255) // 256) * 256
    shared_per_block = ((shared + 127) // 128) * 128 + reserved if shared else 0
    blocks = used_warps = used_registers = used_shared = 0
    while (
        blocks + 1 <= max_blocks
        and used_warps + warps <= warp_slots
        and used_registers + registers_per_block <= 65536
        and used_shared + shared_per_block <= shared_per_sm
    ):
        blocks += 1
        used_warps += warps
        used_registers += registers_per_block
        used_shared += shared_per_block
    return blocks, used_warps / warp_slots


HINT_OCC = (
    "blocks = min(max blocks, warp slots // warps, 65536 // (warps * registers per warp rounded to 256), "
    "shared per SM // (shared rounded to 128 + reserved)); occupancy = blocks * warps / warp slots"
)


def expect_occupancy(ex, arch: str, threads: int, registers: int, shared: int, hint: str = HINT_OCC) -> None:
    label = f"{arch}: {threads} threads, {registers} registers/thread, {shared} B shared"
    got = ex.occupancy(arch, threads, registers, shared)
    want = pack_blocks(arch, threads, registers, shared)
    expect(
        isinstance(got, tuple) and len(got) == 2 and isinstance(got[0], int),
        "expected (blocks_per_sm as an int, occupancy)",
        input=label,
        expected=str(want),
        got=repr(got)[:80],
        hint="return blocks, occupancy",
    )
    expect(
        got[0] == want[0],
        "wrong number of resident blocks",
        input=label,
        expected=str(want[0]),
        got=str(got[0]),
        hint=hint,
    )
    expect_close(
        torch.tensor(float(got[1]), dtype=torch.float64),
        torch.tensor(want[1], dtype=torch.float64),
        input=label,
        what="occupancy",
        hint=hint,
    )


@checks("occupancy")
def matches_brute_force_packing(ex):
    """random kernels on all five architectures (odd thread counts, 1 to 255 registers, up to the shared limit)"""
    rng = random.Random(torch.initial_seed())
    for arch, (_, _, shared_per_sm, reserved) in PUBLISHED.items():
        for _ in range(30):
            threads = rng.choice([1, 32, 48, 64, 100, 128, 192, 256, 384, 512, 640, 1024, rng.randrange(1, 1025)])
            registers = rng.choice([16, 32, 33, 40, 64, 96, 128, 168, 200, 255, rng.randrange(1, 256)])
            shared = rng.choice([0, 0, 1, 1000, 16 * 1024, 48 * 1024, rng.randrange(0, shared_per_sm - reserved + 1)])
            expect_occupancy(ex, arch, threads, registers, shared)


@checks("occupancy")
def published_worked_cases(ex):
    """hand-checked: FlashAttention-like block on H100 = 3 blocks (19%); 48 threads = 2 warps; 33 registers cost 40"""
    got = ex.occupancy("sm_90 (H100, H200)", 128, 168, 64 * 1024)
    expect(
        tuple(got)[0] == 3 and abs(got[1] - 12 / 64) < 1e-12,
        "wrong occupancy for the lesson's example",
        input="sm_90: 128 threads, 168 registers, 64 KiB shared",
        expected="(3, 0.1875)",
        got=str(got),
        hint=HINT_OCC,
    )
    expect_occupancy(ex, "sm_75 (T4)", 48, 16, 0, "a partial warp takes a whole warp slot: 48 threads = 2 warps")
    expect_occupancy(ex, "sm_80 (A100)", 256, 33, 0, "33 registers * 32 = 1056, rounded up to 1280 per warp")
    expect_occupancy(
        ex, "sm_90 (H100, H200)", 64, 32, 116 * 1024, "the runtime reserves 1 KiB of shared memory per block"
    )
    expect_occupancy(ex, "sm_89 (RTX 4090, L40S)", 32, 16, 0, "sm_89 holds at most 24 blocks per SM")
    expect_occupancy(ex, "sm_86 (RTX 3090, A10)", 1024, 16, 0, "1024 threads = 32 warps; sm_86 has 48 warp slots")
    expect_occupancy(ex, "sm_80 (A100)", 64, 1, 0, "one register per thread is a valid (if tiny) kernel")


@checks("occupancy")
def refuses_impossible_blocks(ex):
    """unknown architecture, 0 or 1025 threads, 0 or 256 registers, negative or too much shared memory: ValueError"""
    ex.occupancy("sm_80 (A100)", 128, 64, 0)  # first: it works at all
    expect_occupancy(ex, "sm_90 (H100, H200)", 1024, 32, 227 * 1024)  # the largest block that fits is valid
    bad = [
        ("sm_100", 128, 64, 0),
        ("sm_80 (A100)", 0, 64, 0),
        ("sm_80 (A100)", 1025, 64, 0),
        ("sm_80 (A100)", 128, 0, 0),
        ("sm_80 (A100)", 128, 256, 0),
        ("sm_80 (A100)", 128, 64, -1),
        ("sm_80 (A100)", 128, 64, 163 * 1024 + 1),
        ("sm_75 (T4)", 128, 64, 64 * 1024 + 1),
    ]
    for args in bad:
        expect_value_error(lambda args=args: ex.occupancy(*args), f"occupancy{args}", "validate the block first")
