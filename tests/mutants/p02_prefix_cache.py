"""Realistic wrong versions of the p02.prefix_cache solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "radix_cache",
        "no_split",
        "never splits: a match inside an edge returns the whole edge's blocks, an insert that diverges inside one is lost",
        [("if agree < len(child.key):\n", "if False:\n")],
    ),
    Mutant(
        "radix_cache",
        "split_drops_lower",
        "splits but forgets to hang the lower part under the upper node",
        [("upper.children[node.key[:bs]] = node\n", "")],
    ),
    Mutant(
        "radix_cache",
        "touch_only_last",
        "updates last_access on the last node only, not on its ancestors",
        [("node = node.parent", "node = None")],
    ),
    Mutant(
        "radix_cache",
        "clock_not_advanced_on_match",
        "a match does not advance the clock: it ties with the previous operation",
        [("self.clock += 1\n        node, matched = self._walk", "node, matched = self._walk")],
    ),
    Mutant(
        "radix_cache",
        "insert_replaces_ids",
        "the new leaf takes the ids from the start of the list instead of after the cached part",
        [("blocks[cached // self.block_size :]", "blocks[: len(tokens[cached:]) // self.block_size]")],
    ),
    Mutant(
        "radix_cache",
        "split_loses_access_time",
        "the upper node of a split starts with last_access 0 and no references",
        [("upper.ref_count, upper.last_access = node.ref_count, node.last_access\n", "")],
    ),
    Mutant(
        "lru_eviction",
        "lock_node_only",
        "locks the matched node but not its ancestors",
        [("node.ref_count += 1\n            node = node.parent", "node.ref_count += 1\n            break")],
    ),
    Mutant(
        "lru_eviction",
        "most_recent_first",
        "evicts the most recently used leaf",
        [("leaf = min(leaves, key=lambda n: n.last_access)", "leaf = max(leaves, key=lambda n: n.last_access)")],
    ),
    Mutant(
        "lru_eviction",
        "ignores_locks",
        "evicts leaves that a running request holds",
        [("if not n.children and n.ref_count == 0 and n is not self.root", "if not n.children and n is not self.root")],
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
    ),
    Mutant(
        "lru_eviction",
        "no_refusal",
        "evicts what it can and returns fewer blocks instead of refusing",
        [("if num_blocks > self.evictable_blocks():", "if False:")],
    ),
    Mutant(
        "serve_with_prefix_cache",
        "no_lock_while_evicting",
        "does not lock the matched prefix: the eviction made for a request can free the blocks it just matched",
        [("cache.lock(node)\n", ""), ("cache.unlock(node)\n", "")],
    ),
    Mutant(
        "serve_with_prefix_cache",
        "counts_partial_block",
        "asks for a block for the partial last block too",
        [("full_blocks = len(tokens) // block_size", "full_blocks = -(-len(tokens) // block_size)")],
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
    ),
]
