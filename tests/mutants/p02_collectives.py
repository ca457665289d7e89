"""Realistic wrong versions of the p02.collectives solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    # tree_broadcast
    Mutant(
        "tree_broadcast",
        "global_src_as_group_rank",
        "uses the global src as the root's group rank: in a sub-group the tree starts at the wrong rank",
        [("root = members.index(src)", "root = src % size")],
        mistake_zh="把全局的 src 当作根在组内的 rank：在子组中树从错误的 rank 开始",
    ),
    Mutant(
        "tree_broadcast",
        "dst_instead_of_group_dst",
        "addresses the child with dst= (a global rank) although it computed a group rank",
        [
            (
                "dist.send(tensor, group=group, group_dst=(relative + distance + root) % size)",
                "dist.send(tensor, (relative + distance + root) % size, group=group)",
            )
        ],
        mistake_zh="算出的是组内 rank，却用 dst=（全局 rank）寻址子节点",
    ),
    Mutant(
        "tree_broadcast",
        "root_sends_to_everyone",
        "a flat broadcast: the source sends to every other rank itself (right values, p - 1 latencies)",
        [
            (
                """    distance = 1
    while distance < size:  # ceil(log2 p) rounds; after round s, relative ranks < 2 * distance have it
        if relative < distance and relative + distance < size:
            dist.send(tensor, group=group, group_dst=(relative + distance + root) % size)
        elif distance <= relative < 2 * distance:
            dist.recv(tensor, group=group, group_src=(relative - distance + root) % size)
        distance *= 2""",
                """    if relative == 0:
        for other in range(1, size):
            dist.send(tensor, group=group, group_dst=(other + root) % size)
    else:
        dist.recv(tensor, group=group, group_src=root)""",
            )
        ],
        mistake_zh="扁平广播：源自己发给其他每个 rank（数值对，但有 p - 1 次延迟）",
    ),
    Mutant(
        "tree_broadcast",
        "no_validation",
        "does not check that src belongs to the group (a rank waits for a root that never sends)",
        [
            (
                """    if src not in members:
        raise ValueError(f"src={src} is not a rank of this group (its global ranks: {members})")""",
                "",
            ),
            ("root = members.index(src)", "root = members.index(src) if src in members else 0"),
        ],
        mistake_zh="不检查 src 是否属于该组（某个 rank 会一直等一个永远不发送的根）",
    ),
    # ring_reduce_scatter
    Mutant(
        "ring_reduce_scatter",
        "all_reduce_schedule",
        "the all-reduce's reduce-scatter indices: rank r completes chunk r + 1 but returns its row r",
        [("(rank - step - 1) % size, (rank - step - 2) % size", "(rank - step) % size, (rank - step - 1) % size")],
        mistake_zh="用了 all-reduce 里 reduce-scatter 的下标：rank r 完成的是块 r + 1，返回的却是第 r 行",
    ),
    Mutant(
        "ring_reduce_scatter",
        "copies_instead_of_adding",
        "overwrites the row with the incoming partial sum instead of adding it",
        [("partial[receive] += incoming", "partial[receive] = incoming.clone()")],
        mistake_zh="用收到的部分和覆盖这一行，而不是累加",
    ),
    Mutant(
        "ring_reduce_scatter",
        "modifies_the_input",
        "accumulates in the caller's input tensor (no private copy)",
        [("partial = input.reshape(size, -1).clone()", "partial = input.view(size, -1)")],
        mistake_zh="在调用者的输入张量里累加（没有私有副本）",
    ),
    # ring_all_gather
    Mutant(
        "ring_all_gather",
        "always_sends_its_own_row",
        "sends its own input every step instead of forwarding what it received",
        [("send, receive = (rank - step) % size", "send, receive = rank")],
        mistake_zh="每一步都发送自己的输入，而不是转发收到的内容",
    ),
    Mutant(
        "ring_all_gather",
        "own_input_not_placed",
        "forgets to copy its own input into its row of the output",
        [("blocks[rank].copy_(input.reshape(-1))", "pass")],
        mistake_zh="忘了把自己的输入复制到输出中自己的那一行",
    ),
    Mutant(
        "ring_all_gather",
        "receives_into_the_sent_row",
        "receives into the row it is sending (an index off by one)",
        [("(rank - step - 1) % size\n", "(rank - step) % size\n")],
        mistake_zh="收到的数据写进正在发送的那一行（下标差一）",
    ),
    # ring_all_reduce
    Mutant(
        "ring_all_reduce",
        "stops_after_reduce_scatter",
        "forgets the all-gather: each rank holds one complete chunk and partial sums elsewhere",
        [("for step in range(size - 1):  # all-gather", "for step in range(0):  # all-gather")],
        mistake_zh="忘了 all-gather：每个 rank 只有一个完整的块，其余位置是部分和",
    ),
    Mutant(
        "ring_all_reduce",
        "float32_receive_buffer",
        "allocates the receive buffer with torch.empty(shape): float32 whatever the tensor's dtype",
        [("incoming = torch.empty_like(chunks[receive])", "incoming = torch.empty(chunks[receive].shape)")],
        mistake_zh="用 torch.empty(shape) 分配接收缓冲区：不管张量是什么数据类型都是 float32",
    ),
    Mutant(
        "ring_all_reduce",
        "split_by_length",
        "split(n // p) instead of tensor_split(p): more than p chunks when p does not divide n, the tail never summed",
        [("tensor.view(-1).tensor_split(size)", "tensor.view(-1).split(max(1, tensor.numel() // size))")],
        mistake_zh="用 split(n // p) 而不是 tensor_split(p)：p 不整除 n 时块数超过 p，尾部从未被求和",
    ),
    Mutant(
        "ring_all_reduce",
        "whole_tensor_each_step",
        "adds and forwards the whole tensor at every step (a naive ring: p - 1 times the bytes)",
        [("chunks = tensor.view(-1).tensor_split(size)", "chunks = [tensor.view(-1)] * size")],
        mistake_zh="每一步都累加并转发整个张量（朴素的环：字节数是 p - 1 倍）",
    ),
]
