"""Realistic wrong versions of the p01.execution_model solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "program_to_tile",
        "full_height_last_group",
        "assumes every group holds group_m row blocks, the last one too",
        [("height = min(num_pid_m - first_m, group_m)", "height = group_m")],
    ),
    Mutant(
        "program_to_tile",
        "row_and_column_swapped",
        "walks a group row by row instead of column by column",
        [
            (
                "return first_m + position % height, position // height",
                "return first_m + position // num_pid_n, position % num_pid_n",
            )
        ],
    ),
    Mutant(
        "program_to_tile",
        "group_index_from_group_m",
        "takes the group index as pid // group_m",
        [("first_m = (pid // per_group) * group_m", "first_m = (pid // group_m) * group_m")],
    ),
    Mutant(
        "occupancy",
        "warps_rounded_down",
        "threads // 32: a partial warp does not count",
        [("warps = -(-threads_per_block // WARP)", "warps = max(1, threads_per_block // WARP)")],
    ),
    Mutant(
        "occupancy",
        "registers_not_rounded",
        "registers per warp not rounded up to the 256-register allocation unit",
        [
            (
                "registers_per_warp = -(-registers_per_thread * WARP // REGISTER_UNIT) * REGISTER_UNIT",
                "registers_per_warp = registers_per_thread * WARP",
            )
        ],
    ),
    Mutant(
        "occupancy",
        "no_reserved_shared",
        "forgets the shared memory the runtime reserves per block",
        [(' * SHARED_UNIT + limits["reserved_shared"]', " * SHARED_UNIT")],
    ),
    Mutant(
        "occupancy",
        "warp_limit_ignored",
        "ignores the warp slots of the SM",
        [
            (
                'min(limits["max_blocks"], max_warps // warps, by_registers, by_shared)',
                'min(limits["max_blocks"], by_registers, by_shared)',
            )
        ],
    ),
]
