"""Realistic wrong versions of the p01.execution_model solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "program_to_tile",
        "full_height_last_group",
        "assumes every group holds group_m row blocks, the last one too",
        [("height = min(num_pid_m - first_m, group_m)", "height = group_m")],
        mistake_zh="假定每个组都有 group_m 个行块，最后一组也一样",
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
        mistake_zh="组内按行而不是按列遍历",
    ),
    Mutant(
        "program_to_tile",
        "group_index_from_group_m",
        "takes the group index as pid // group_m",
        [("first_m = (pid // per_group) * group_m", "first_m = (pid // group_m) * group_m")],
        mistake_zh="组下标取 pid // group_m",
    ),
    Mutant(
        "occupancy",
        "warps_rounded_down",
        "threads // 32: a partial warp does not count",
        [("warps = -(-threads_per_block // WARP)", "warps = max(1, threads_per_block // WARP)")],
        mistake_zh="threads // 32：不满的 warp 不算",
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
        mistake_zh="每个 warp 的寄存器数没有向上取整到 256 个寄存器的分配单元",
    ),
    Mutant(
        "occupancy",
        "no_reserved_shared",
        "forgets the shared memory the runtime reserves per block",
        [(' * SHARED_UNIT + limits["reserved_shared"]', " * SHARED_UNIT")],
        mistake_zh="忘了运行时为每个线程块保留的共享内存",
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
        mistake_zh="忽略了 SM 的 warp 槽位上限",
    ),
]
