"""Realistic wrong versions of the p04.memory_pool solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "sizing_rules",
        "rounds_down",
        "rounds the request down to a multiple of 512 (a block smaller than asked for)",
        [("MIN_BLOCK * ((size + MIN_BLOCK - 1) // MIN_BLOCK)", "max(MIN_BLOCK, MIN_BLOCK * (size // MIN_BLOCK))")],
    ),
    Mutant(
        "sizing_rules",
        "adds_a_block_to_multiples",
        "adds a whole 512-byte block even to sizes that are already a multiple of 512",
        [("MIN_BLOCK * ((size + MIN_BLOCK - 1) // MIN_BLOCK)", "MIN_BLOCK * (size // MIN_BLOCK + 1)")],
    ),
    Mutant(
        "sizing_rules",
        "small_pool_strictly_below_1mib",
        "sends a request of exactly 1 MiB to the large pool (< instead of <=)",
        [('return "small" if round_size(size) <= SMALL_SIZE', 'return "small" if round_size(size) < SMALL_SIZE')],
    ),
    Mutant(
        "sizing_rules",
        "segment_from_unrounded_size",
        "compares the request as asked, not as rounded, with the 10 MiB threshold",
        [("if rounded < MIN_LARGE_ALLOC:", "if size < MIN_LARGE_ALLOC:")],
    ),
    Mutant(
        "sizing_rules",
        "large_pool_splits_slivers",
        "splits large blocks by the small pool's rule (any 512-byte remainder)",
        [("return remaining > SMALL_SIZE", "return remaining >= MIN_BLOCK")],
    ),
    Mutant(
        "sizing_rules",
        "accepts_bool",
        "accepts True as a size of 1 byte",
        [("if isinstance(size, bool) or not isinstance(size, int):", "if not isinstance(size, int):")],
    ),
    Mutant(
        "CachingAllocator",
        "first_fit",
        "takes the free block at the lowest address that is large enough (first fit) instead of the smallest",
        [
            (
                "index = bisect.bisect_left(free, (rounded, -1))  # first (size, address) with size >= rounded\n"
                "        if index == len(free):\n"
                "            return None\n"
                "        return self.blocks[free[index][1]]",
                "fits = [address for size, address in free if size >= rounded]\n"
                "        return self.blocks[min(fits)] if fits else None",
            )
        ],
    ),
    Mutant(
        "CachingAllocator",
        "searches_both_pools",
        "looks for a cached block in both pools, so small tensors nibble at large blocks",
        [("free = self.free_lists[pool]\n", 'free = sorted(self.free_lists["small"] + self.free_lists["large"])\n')],
    ),
    Mutant(
        "CachingAllocator",
        "splits_every_remainder",
        "splits off every remainder of 512 bytes or more, also in the large pool",
        [("if should_split(pool, remaining):", "if remaining >= MIN_BLOCK:")],
    ),
    Mutant(
        "CachingAllocator",
        "remainder_not_cached",
        "forgets to put the split-off remainder in the cache (it leaks until the segment is gone)",
        [("self._cache(rest)", "pass")],
    ),
    Mutant(
        "CachingAllocator",
        "merges_only_with_next",
        "merges a freed block with the free block after it but not with the one before",
        [("if preceding is not None and not preceding.allocated:", "if False:")],
    ),
    Mutant(
        "CachingAllocator",
        "no_retry_after_empty_cache",
        "gives up when the device is full without releasing the cached segments first",
        [("self.empty_cache()", "pass")],
    ),
    Mutant(
        "CachingAllocator",
        "empty_cache_checks_first_block_only",
        "releases a segment whose first block is free even when later blocks are still in use",
        [("if block.prev is None and block.next is None:", "if block.prev is None:")],
    ),
    Mutant(
        "CachingAllocator",
        "double_free_accepted",
        "accepts a second free of the same block",
        [("if not block.allocated:", "if False:")],
    ),
    Mutant(
        "CachingAllocator",
        "fragmentation_from_requested",
        "computes fragmentation as reserved minus the requested (not the allocated) bytes",
        [
            (
                '"fragmentation": reserved - allocated',
                '"fragmentation": reserved - sum(block.requested for block in live)',
            )
        ],
    ),
    Mutant(
        "CachingAllocator",
        "requested_is_rounded",
        "records the rounded size as the request",
        [("block.allocated, block.requested = True, size", "block.allocated, block.requested = True, rounded")],
    ),
    Mutant(
        "CachingAllocator",
        "ignores_base_address",
        "starts the first segment at the default 0x7f0000000000 whatever base_address says",
        [
            (
                "self._next_address = base_address  # where the next segment starts",
                "self._next_address = 0x7F00_0000_0000  # where the next segment starts",
            )
        ],
        mistake_zh="无论 base_address 是多少，第一个 segment 都从默认的 0x7f0000000000 开始",
    ),
]
