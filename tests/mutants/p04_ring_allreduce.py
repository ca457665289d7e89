"""Realistic wrong versions of the p04.ring_allreduce solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "ring_model",
        "adds_in_all_gather",
        "charges the addition in the all-gather steps too (they only copy)",
        [("all_gather_step = slices * transfer", "all_gather_step = slices * max(transfer, add) + min(transfer, add)")],
    ),
    Mutant(
        "ring_model",
        "slice_is_a_chunk",
        "takes a slice to be a whole chunk of n/p bytes",
        [("slice_bytes = nbytes / p / slices", "slice_bytes = nbytes / p")],
    ),
    Mutant(
        "ring_model",
        "alpha_once_per_step",
        "pays the latency once per step instead of once per slice",
        [("transfer = alpha + slice_bytes / bandwidth", "transfer = alpha / slices + slice_bytes / bandwidth")],
    ),
    Mutant(
        "ring_model",
        "not_pipelined",
        "adds each slice after the transfer instead of overlapping the two",
        [("slices * max(transfer, add) + min(transfer, add)\n", "slices * (transfer + add)\n")],
    ),
    Mutant(
        "ring_model",
        "busbw_without_the_2",
        "multiplies the algorithm bandwidth by (p - 1)/p without the factor 2",
        [("nbytes / seconds * 2 * (world_size - 1) / world_size", "nbytes / seconds * (world_size - 1) / world_size")],
    ),
    Mutant(
        "ring_model",
        "largest_slices_on_ties",
        "keeps the largest slice count among equally fast ones",
        [("return 1 + times.index(min(times))", "return len(times) - times[::-1].index(min(times))")],
    ),
    Mutant(
        "ring_model",
        "half_bandwidth_without_p",
        "forgets the factor p in n_1/2 = p alpha B",
        [("return float(world_size * alpha * bandwidth)", "return float(alpha * bandwidth)")],
    ),
    Mutant(
        "ring_allreduce",
        "adds_in_all_gather",
        "keeps adding the received slices in the all-gather half",
        [("reducing = step < size - 1", "reducing = True")],
    ),
    Mutant(
        "ring_allreduce",
        "copies_in_reduce_scatter",
        "copies the received slices instead of adding them",
        [("piece.add_(buffer)", "piece.copy_(buffer)")],
    ),
    Mutant(
        "ring_allreduce",
        "receive_chunk_off_by_two",
        "receives into chunk (r - s + 1) % p instead of (r - s - 1) % p",
        [("target = chunks[(rank - step - 1) % size]", "target = chunks[(rank - step + 1) % size]")],
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
