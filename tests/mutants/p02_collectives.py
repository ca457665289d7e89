"""Realistic wrong versions of the p02.collectives solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    # tree_broadcast
    Mutant(
        "tree_broadcast",
        "global_src_as_group_rank",
        "uses the global src as the root's group rank: in a sub-group the tree starts at the wrong rank",
        [("root = members.index(src)", "root = src % size")],
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
    ),
    # ring_reduce_scatter
    Mutant(
        "ring_reduce_scatter",
        "all_reduce_schedule",
        "the all-reduce's reduce-scatter indices: rank r completes chunk r + 1 but returns its row r",
        [("(rank - step - 1) % size, (rank - step - 2) % size", "(rank - step) % size, (rank - step - 1) % size")],
    ),
    Mutant(
        "ring_reduce_scatter",
        "copies_instead_of_adding",
        "overwrites the row with the incoming partial sum instead of adding it",
        [("partial[receive] += incoming", "partial[receive] = incoming.clone()")],
    ),
    Mutant(
        "ring_reduce_scatter",
        "modifies_the_input",
        "accumulates in the caller's input tensor (no private copy)",
        [("partial = input.reshape(size, -1).clone()", "partial = input.view(size, -1)")],
    ),
    # ring_all_gather
    Mutant(
        "ring_all_gather",
        "always_sends_its_own_row",
        "sends its own input every step instead of forwarding what it received",
        [("send, receive = (rank - step) % size", "send, receive = rank")],
    ),
    Mutant(
        "ring_all_gather",
        "own_input_not_placed",
        "forgets to copy its own input into its row of the output",
        [("blocks[rank].copy_(input.reshape(-1))", "pass")],
    ),
    Mutant(
        "ring_all_gather",
        "receives_into_the_sent_row",
        "receives into the row it is sending (an index off by one)",
        [("(rank - step - 1) % size\n", "(rank - step) % size\n")],
    ),
    # ring_all_reduce
    Mutant(
        "ring_all_reduce",
        "stops_after_reduce_scatter",
        "forgets the all-gather: each rank holds one complete chunk and partial sums elsewhere",
        [("for step in range(size - 1):  # all-gather", "for step in range(0):  # all-gather")],
    ),
    Mutant(
        "ring_all_reduce",
        "float32_receive_buffer",
        "allocates the receive buffer with torch.empty(shape): float32 whatever the tensor's dtype",
        [("incoming = torch.empty_like(chunks[receive])", "incoming = torch.empty(chunks[receive].shape)")],
    ),
    Mutant(
        "ring_all_reduce",
        "split_by_length",
        "split(n // p) instead of tensor_split(p): more than p chunks when p does not divide n, the tail never summed",
        [("tensor.view(-1).tensor_split(size)", "tensor.view(-1).split(max(1, tensor.numel() // size))")],
    ),
    Mutant(
        "ring_all_reduce",
        "whole_tensor_each_step",
        "adds and forwards the whole tensor at every step (a naive ring: p - 1 times the bytes)",
        [("chunks = tensor.view(-1).tensor_split(size)", "chunks = [tensor.view(-1)] * size")],
    ),
]
