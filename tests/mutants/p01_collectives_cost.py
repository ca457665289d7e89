"""Realistic wrong versions of the p01.collectives_cost solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "collective_time",
        "all_reduce_one_pass",
        "charges the all-reduce like a reduce-scatter (the all-gather half forgotten)",
        [("return 2 * one_pass if collective", "return one_pass if collective")],
        mistake_zh="把 all-reduce 按 reduce-scatter 计价（漏了 all-gather 那一半）",
    ),
    Mutant(
        "collective_time",
        "log_not_rounded",
        "uses log2(p) without rounding up (6 ranks: 2.58 levels instead of 3)",
        [("2 * math.ceil(math.log2(p))", "2 * math.log2(p)")],
        mistake_zh="用 log2(p) 却不向上取整（6 个 rank：2.58 层而不是 3 层）",
    ),
    Mutant(
        "collective_time",
        "nbytes_as_chunk",
        "takes nbytes as the size of each step's message instead of the whole tensor",
        [("one_pass = (p - 1) * (alpha + nbytes / p * beta)", "one_pass = (p - 1) * (alpha + nbytes * beta)")],
        mistake_zh="把 nbytes 当作每一步的消息大小，而不是整个张量的大小",
    ),
    Mutant(
        "collective_time",
        "tree_one_way",
        "charges the tree for the reduce only, forgetting the broadcast back down",
        [("return 2 * math.ceil(math.log2(p))", "return math.ceil(math.log2(p))")],
        mistake_zh="树形算法只算了规约，忘了再广播回去",
    ),
    Mutant(
        "ring_all_reduce",
        "no_all_gather",
        "stops after the reduce-scatter: each rank holds one summed chunk",
        [("for step in range(world_size - 1):  # all-gather", "for step in range(0):  # all-gather")],
        mistake_zh="做完 reduce-scatter 就停：每个 rank 只持有一个求和后的块",
    ),
    Mutant(
        "ring_all_reduce",
        "adds_in_all_gather",
        "adds the received chunks in the all-gather as well",
        [("chunks[receive].copy_(buffer)", "chunks[receive].add_(buffer)")],
        mistake_zh="all-gather 阶段也把收到的块累加",
    ),
    Mutant(
        "ring_all_reduce",
        "copies_in_reduce_scatter",
        "overwrites instead of adding in the reduce-scatter",
        [("chunks[receive].add_(buffer)", "chunks[receive].copy_(buffer)")],
        mistake_zh="reduce-scatter 阶段覆盖而不是累加",
    ),
    Mutant(
        "ring_all_reduce",
        "receive_index_off_by_one",
        "adds the received chunk into the chunk it just sent",
        [
            (
                "send, receive = (rank - step) % world_size, (rank - step - 1) % world_size",
                "send, receive = (rank - step) % world_size, (rank - step) % world_size",
            )
        ],
        mistake_zh="把收到的块加到刚发出去的那个块上",
    ),
    Mutant(
        "ring_all_reduce",
        "calls_all_reduce",
        "hands the work to dist.all_reduce",
        [("chunks = torch.tensor_split(tensor, world_size)  # views", "return dist.all_reduce(tensor)  # views")],
        mistake_zh="把工作交给 dist.all_reduce",
    ),
]
