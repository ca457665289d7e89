"""Realistic wrong versions of the p04.memory_pool solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "sizing_rules",
        "rounds_down",
        "rounds the request down to a multiple of 512 (a block smaller than asked for)",
        [("MIN_BLOCK * ((size + MIN_BLOCK - 1) // MIN_BLOCK)", "max(MIN_BLOCK, MIN_BLOCK * (size // MIN_BLOCK))")],
        mistake_zh="把请求大小向下取整到 512 的倍数（得到的块比请求的小）",
    ),
    Mutant(
        "sizing_rules",
        "adds_a_block_to_multiples",
        "adds a whole 512-byte block even to sizes that are already a multiple of 512",
        [("MIN_BLOCK * ((size + MIN_BLOCK - 1) // MIN_BLOCK)", "MIN_BLOCK * (size // MIN_BLOCK + 1)")],
        mistake_zh="即使大小已经是 512 的倍数，也多加一个 512 字节的块",
    ),
    Mutant(
        "sizing_rules",
        "small_pool_strictly_below_1mib",
        "sends a request of exactly 1 MiB to the large pool (< instead of <=)",
        [('return "small" if round_size(size) <= SMALL_SIZE', 'return "small" if round_size(size) < SMALL_SIZE')],
        mistake_zh="把恰好 1 MiB 的请求送到大池（把 <= 写成 <）",
    ),
    Mutant(
        "sizing_rules",
        "segment_from_unrounded_size",
        "compares the request as asked, not as rounded, with the 10 MiB threshold",
        [("if rounded < MIN_LARGE_ALLOC:", "if size < MIN_LARGE_ALLOC:")],
        mistake_zh="用原始请求大小而不是取整后的大小与 10 MiB 阈值比较",
    ),
    Mutant(
        "sizing_rules",
        "large_pool_splits_slivers",
        "splits large blocks by the small pool's rule (any 512-byte remainder)",
        [("return remaining > SMALL_SIZE", "return remaining >= MIN_BLOCK")],
        mistake_zh="按小池的规则拆分大块（任何 512 字节的余量都拆）",
    ),
    Mutant(
        "sizing_rules",
        "accepts_bool",
        "accepts True as a size of 1 byte",
        [("if isinstance(size, bool) or not isinstance(size, int):", "if not isinstance(size, int):")],
        mistake_zh="把 True 当作 1 字节的大小接受",
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
        mistake_zh="取地址最低且足够大的空闲块（first fit），而不是最小的合适块",
    ),
    Mutant(
        "CachingAllocator",
        "searches_both_pools",
        "looks for a cached block in both pools, so small tensors nibble at large blocks",
        [("free = self.free_lists[pool]\n", 'free = sorted(self.free_lists["small"] + self.free_lists["large"])\n')],
        mistake_zh="在两个池中都查找缓存块，于是小张量会蚕食大块",
    ),
    Mutant(
        "CachingAllocator",
        "splits_every_remainder",
        "splits off every remainder of 512 bytes or more, also in the large pool",
        [("if should_split(pool, remaining):", "if remaining >= MIN_BLOCK:")],
        mistake_zh="只要余量不少于 512 字节就拆分，大池里也是如此",
    ),
    Mutant(
        "CachingAllocator",
        "remainder_not_cached",
        "forgets to put the split-off remainder in the cache (it leaks until the segment is gone)",
        [("self._cache(rest)", "pass")],
        mistake_zh="忘了把拆出的余量放回缓存（在段被释放之前一直泄漏）",
    ),
    Mutant(
        "CachingAllocator",
        "merges_only_with_next",
        "merges a freed block with the free block after it but not with the one before",
        [("if preceding is not None and not preceding.allocated:", "if False:")],
        mistake_zh="释放块时只与后面的空闲块合并，不与前面的合并",
    ),
    Mutant(
        "CachingAllocator",
        "no_retry_after_empty_cache",
        "gives up when the device is full without releasing the cached segments first",
        [("self.empty_cache()", "pass")],
        mistake_zh="设备内存不足时直接放弃，没有先释放缓存的段再重试",
    ),
    Mutant(
        "CachingAllocator",
        "empty_cache_checks_first_block_only",
        "releases a segment whose first block is free even when later blocks are still in use",
        [("if block.prev is None and block.next is None:", "if block.prev is None:")],
        mistake_zh="只要段的第一个块空闲就释放整个段，即使后面的块还在使用",
    ),
    Mutant(
        "CachingAllocator",
        "double_free_accepted",
        "accepts a second free of the same block",
        [("if not block.allocated:", "if False:")],
        mistake_zh="接受对同一个块的第二次释放",
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
        mistake_zh="把碎片计算为保留字节减去请求的（而不是已分配的）字节",
    ),
    Mutant(
        "CachingAllocator",
        "requested_is_rounded",
        "records the rounded size as the request",
        [("block.allocated, block.requested = True, size", "block.allocated, block.requested = True, rounded")],
        mistake_zh="把取整后的大小记录为请求大小",
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
