"""Realistic wrong versions of the p04.ring_allreduce solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "ring_model",
        "adds_in_all_gather",
        "charges the addition in the all-gather steps too (they only copy)",
        [("all_gather_step = slices * transfer", "all_gather_step = slices * max(transfer, add) + min(transfer, add)")],
        mistake_zh="在 all-gather 阶段也计入了加法时间（这些步骤只做拷贝）",
    ),
    Mutant(
        "ring_model",
        "slice_is_a_chunk",
        "takes a slice to be a whole chunk of n/p bytes",
        [("slice_bytes = nbytes / p / slices", "slice_bytes = nbytes / p")],
        mistake_zh="把一个切片当成 n/p 字节的整个数据块",
    ),
    Mutant(
        "ring_model",
        "alpha_once_per_step",
        "pays the latency once per step instead of once per slice",
        [("transfer = alpha + slice_bytes / bandwidth", "transfer = alpha / slices + slice_bytes / bandwidth")],
        mistake_zh="每一步只付一次延迟，而不是每个切片付一次",
    ),
    Mutant(
        "ring_model",
        "not_pipelined",
        "adds each slice after the transfer instead of overlapping the two",
        [("slices * max(transfer, add) + min(transfer, add)\n", "slices * (transfer + add)\n")],
        mistake_zh="每个切片传输完再做加法，没有让两者重叠",
    ),
    Mutant(
        "ring_model",
        "busbw_without_the_2",
        "multiplies the algorithm bandwidth by (p - 1)/p without the factor 2",
        [("nbytes / seconds * 2 * (world_size - 1) / world_size", "nbytes / seconds * (world_size - 1) / world_size")],
        mistake_zh="算法带宽只乘了 (p - 1)/p，漏了系数 2",
    ),
    Mutant(
        "ring_model",
        "largest_slices_on_ties",
        "keeps the largest slice count among equally fast ones",
        [("return 1 + times.index(min(times))", "return len(times) - times[::-1].index(min(times))")],
        mistake_zh="在同样快的切片数中保留最大的那个",
    ),
    Mutant(
        "ring_model",
        "half_bandwidth_without_p",
        "forgets the factor p in n_1/2 = p alpha B",
        [("return float(world_size * alpha * bandwidth)", "return float(alpha * bandwidth)")],
        mistake_zh="忘了 n_1/2 = p alpha B 中的系数 p",
    ),
    Mutant(
        "ring_allreduce",
        "adds_in_all_gather",
        "keeps adding the received slices in the all-gather half",
        [("reducing = step < size - 1", "reducing = True")],
        mistake_zh="在 all-gather 那一半仍然把收到的切片累加进来",
    ),
    Mutant(
        "ring_allreduce",
        "copies_in_reduce_scatter",
        "copies the received slices instead of adding them",
        [("piece.add_(buffer)", "piece.copy_(buffer)")],
        mistake_zh="在 reduce-scatter 中拷贝收到的切片，而不是累加",
    ),
    Mutant(
        "ring_allreduce",
        "receive_chunk_off_by_two",
        "receives into chunk (r - s + 1) % p instead of (r - s - 1) % p",
        [("target = chunks[(rank - step - 1) % size]", "target = chunks[(rank - step + 1) % size]")],
        mistake_zh="接收到数据块 (r - s + 1) % p 而不是 (r - s - 1) % p",
    ),
    Mutant(
        "ring_allreduce",
        "ignores_slices",
        "sends and receives whole chunks whatever `slices` says",
        [
            (
                "outgoing = chunks[(rank - step) % size].tensor_split(slices)",
                "outgoing = [chunks[(rank - step) % size]]",
            ),
            (
                "target = chunks[(rank - step - 1) % size].tensor_split(slices)",
                "target = [chunks[(rank - step - 1) % size]]",
            ),
        ],
        mistake_zh="无论 `slices` 是多少，都整块发送和接收",
    ),
    Mutant(
        "ring_allreduce",
        "accepts_zero_slices",
        "does not check that slices is at least 1",
        [
            (
                "if isinstance(slices, bool) or not isinstance(slices, int) or slices < 1:",
                "if not isinstance(slices, int):",
            )
        ],
        mistake_zh="不检查 slices 是否至少为 1",
    ),
    Mutant(
        "ring_allreduce",
        "world_rank_and_size",
        "takes its rank and the ring's size from the whole world instead of from `group`",
        [
            (
                "rank, size = dist.get_rank(group), dist.get_world_size(group)",
                "rank, size = dist.get_rank(), dist.get_world_size()",
            )
        ],
        mistake_zh="从整个 world 而不是从 group 取自己的 rank 和环的大小",
    ),
]
