"""Realistic wrong versions of the p02.prefix_cache solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "radix_cache",
        "no_split",
        "never splits: a match inside an edge returns the whole edge's blocks, an insert that diverges inside one is lost",
        [("if agree < len(child.key):\n", "if False:\n")],
        mistake_zh="从不分裂：在边内部的匹配返回整条边的块，在边内部分叉的插入丢失了",
    ),
    Mutant(
        "radix_cache",
        "split_drops_lower",
        "splits but forgets to hang the lower part under the upper node",
        [("upper.children[node.key[:bs]] = node\n", "")],
        mistake_zh="分裂了，却忘了把下半部分挂到上半节点下面",
    ),
    Mutant(
        "radix_cache",
        "touch_only_last",
        "updates last_access on the last node only, not on its ancestors",
        [("node = node.parent", "node = None")],
        mistake_zh="只更新最后一个节点的 last_access，不更新它的祖先",
    ),
    Mutant(
        "radix_cache",
        "clock_not_advanced_on_match",
        "a match does not advance the clock: it ties with the previous operation",
        [("self.clock += 1\n        node, matched = self._walk", "node, matched = self._walk")],
        mistake_zh="匹配时不推进时钟：与上一次操作的时间相同",
    ),
    Mutant(
        "radix_cache",
        "insert_replaces_ids",
        "the new leaf takes the ids from the start of the list instead of after the cached part",
        [("blocks[cached // self.block_size :]", "blocks[: len(tokens[cached:]) // self.block_size]")],
        mistake_zh="新叶子从列表开头取 ids，而不是从已缓存部分之后取",
    ),
    Mutant(
        "radix_cache",
        "split_loses_access_time",
        "the upper node of a split starts with last_access 0 and no references",
        [("upper.ref_count, upper.last_access = node.ref_count, node.last_access\n", "")],
        mistake_zh="分裂出的上半节点 last_access 为 0 且没有引用",
    ),
    Mutant(
        "lru_eviction",
        "lock_node_only",
        "locks the matched node but not its ancestors",
        [("node.ref_count += 1\n            node = node.parent", "node.ref_count += 1\n            break")],
        mistake_zh="锁定了匹配的节点，却没有锁定它的祖先",
    ),
    Mutant(
        "lru_eviction",
        "most_recent_first",
        "evicts the most recently used leaf",
        [("leaf = min(leaves, key=lambda n: n.last_access)", "leaf = max(leaves, key=lambda n: n.last_access)")],
        mistake_zh="淘汰最近使用的叶子",
    ),
    Mutant(
        "lru_eviction",
        "ignores_locks",
        "evicts leaves that a running request holds",
        [("if not n.children and n.ref_count == 0 and n is not self.root", "if not n.children and n is not self.root")],
        mistake_zh="淘汰了正在运行的请求持有的叶子",
    ),
    Mutant(
        "lru_eviction",
        "evicts_first_block",
        "removes the first block of the leaf's key instead of its last",
        [
            (
                "freed.append(leaf.blocks.pop())\n            leaf.key = leaf.key[:-bs]",
                "freed.append(leaf.blocks.pop(0))\n            leaf.key = leaf.key[bs:]",
            )
        ],
        mistake_zh="删除叶子 key 的第一个块，而不是最后一个",
    ),
    Mutant(
        "lru_eviction",
        "no_refusal",
        "evicts what it can and returns fewer blocks instead of refusing",
        [("if num_blocks > self.evictable_blocks():", "if False:")],
        mistake_zh="能淘汰多少就淘汰多少，返回的块不够也不拒绝",
    ),
    Mutant(
        "serve_with_prefix_cache",
        "no_lock_while_evicting",
        "does not lock the matched prefix: the eviction made for a request can free the blocks it just matched",
        [("cache.lock(node)\n", ""), ("cache.unlock(node)\n", "")],
        mistake_zh="不锁定匹配到的前缀：为请求做的淘汰可能释放它刚匹配到的块",
    ),
    Mutant(
        "serve_with_prefix_cache",
        "counts_partial_block",
        "asks for a block for the partial last block too",
        [("full_blocks = len(tokens) // block_size", "full_blocks = -(-len(tokens) // block_size)")],
        mistake_zh="最后那个不满的块也申请了一个块",
    ),
    Mutant(
        "serve_with_prefix_cache",
        "evicts_everything_needed",
        "evicts all the blocks the request needs instead of the shortfall",
        [
            (
                "evicted = cache.evict(needed - len(free_ids))",
                "evicted = cache.evict(min(needed, cache.evictable_blocks()))",
            )
        ],
        mistake_zh="淘汰请求需要的全部块，而不是只淘汰缺口",
    ),
]
