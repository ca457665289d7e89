"""Source of 02_PyTorch_Algorithms/32_Prefix_Cache.ipynb (build with `python -m llm_algo build p02.prefix_cache`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p02.prefix_cache",
        path="02_PyTorch_Algorithms/32_Prefix_Cache.ipynb",
        title_en="Prefix caching with a radix tree",
        title_zh="基于基数树的前缀缓存",
        difficulty="hard",
        device="cpu",
        minutes=90,
        prerequisites=["p02.paged_attention"],
    )
    lesson.title(
        intro=r"""
        Chat and agent traffic repeats itself: every request of a deployment starts with the same system prompt,
        a multi-turn conversation re-sends all earlier turns, few-shot prompts share their examples, and an agent
        re-sends its tool descriptions at every step. Prefill of those shared tokens is pure waste once their keys and
        values are in the cache. SGLang (Zheng et al., 2024, *SGLang: Efficient Execution of Structured Language
        Model Programs*) keeps the KV blocks of finished requests in a **radix tree** keyed by their tokens
        (RadixAttention) and reported up to 6.4× the throughput of earlier systems on such workloads; vLLM's
        automatic prefix caching does the same with a hash per full block. The cached blocks are only evicted, least
        recently used first, when memory is needed.

        **You will implement** a radix tree over token blocks: match the longest cached prefix, insert a sequence
        (splitting an edge where it diverges), lock the blocks a running request uses, evict least-recently-used
        unlocked leaves block by block, and a serving loop that measures the hit rate on a shared-prompt workload.
        **Graded against** a brute-force oracle that keeps every cached block prefix in a dictionary with its last
        access time (longest-prefix match by scanning, eviction by scanning for the oldest unlocked leaf), tree
        invariants after every operation of a random workload, and hand-computed cases.
    """
    )
    lesson.md(r"""
        ## 本节要点

        - **问题**：系统提示词、多轮对话历史、少样本示例在请求之间大量重复；它们的 KV 缓存可以复用，跳过重复的预填充（prefill）。
        - **基数树（radix tree）**：每条边是一段 token（长度为块大小 `bs` 的整数倍），并带着这些 token 对应的 KV 块号；从根到某节点的路径就是一个前缀。
        - **匹配（match）**：沿树走，按整块比较；在边的中间分叉时**分裂（split）**节点，使返回的节点恰好结束在匹配处。
        - **插入（insert）**：共享已有前缀，在分叉处分裂，剩余部分挂成新叶子；返回已缓存的 token 数（调用者释放重复的块）。
        - **锁定与 LRU 淘汰**：正在运行的请求对其路径加引用计数；淘汰时只删除引用计数为 0 的叶子中最久未访问的块，一块一块地删。
        {易错点}
    """)
    lesson.md(r"""
        ## 1. The problem, with numbers

        A deployment with a 2,000-token system prompt serving requests of 300 new tokens each spends
        $2000 / 2300 = 87\%$ of its prefill FLOPs on the same tokens again and again. Prefill of Llama-3-8B costs about
        $2 \times 8\cdot10^9 = 1.6\cdot10^{10}$ FLOPs per token, so the shared prompt alone is $3.2\cdot10^{13}$ FLOPs, tens of
        milliseconds of an H100 per request, and it delays the first token of every answer (TTFT). With the prompt's
        KV blocks cached, prefill starts at token 2,000. The price is memory: cached blocks occupy the same pool as
        running requests, so the cache must give blocks back under pressure, and it must never give back a block
        that a running request is reading.

        ## 2. The tree, with shapes

        The cache works in whole **blocks** of `bs` tokens (the KV-cache block of `p02.paged_attention`): only full
        blocks are cached and matched, so a sequence of $L$ tokens contributes its first
        $\lfloor L / bs \rfloor \cdot bs$. Each node holds

        - `key`: a tuple of tokens, a positive multiple of `bs` long (the root's is empty),
        - `blocks`: one KV block id per `bs` tokens of `key` (`len(blocks) == len(key) // bs`),
        - `children`: a dict from the child's **first block** (a tuple of `bs` tokens) to the child: two children
          never start with the same block, which is what makes the walk deterministic,
        - `ref_count` (running requests using it) and `last_access` (a logical clock).

        **Match** walks from the root: look up the child by the next block of the query, count how many whole blocks
        of its key agree. If the whole key agrees, descend; if only the first $n$ tokens do, **split** the child into
        an upper node holding `key[:n]` (and the first $n / bs$ block ids) and the lower remainder, so that the match
        ends exactly at a node. Then every node on the path gets `last_access = clock`.

        **Insert** walks the same way, splitting where the new sequence diverges in the middle of an edge, and hangs
        the rest of the sequence as a new leaf with its block ids. The blocks of the prefix that was already cached
        are not replaced: `insert` returns how many tokens were already there, and the caller frees its own duplicate
        blocks for them.

        **Lock / evict.** A request that matched a prefix **locks** the matched node: `ref_count += 1` on it and every
        ancestor, so none of the blocks it reads can be evicted; it unlocks when it finishes. **Evict** $n$ blocks:
        repeat $n$ times — among the leaves with `ref_count == 0`, take the one with the smallest `last_access`,
        remove the **last** block of its key (a leaf that becomes empty leaves the tree, and its parent may become
        a leaf). Ancestors are accessed whenever a descendant is, so `last_access` never decreases going up: LRU
        order trims each path from the leaf end.

        **Hit rate** of a workload: matched tokens / all prompt tokens. A workload of $n$ requests that share a
        prefix of $P$ tokens reaches at most $(n - 1) \lfloor P / bs \rfloor bs / \sum L_i$ from the shared part.
    """)
    lesson.setup(r"""
        import random

        import matplotlib.pyplot as plt


        class Node:
            # One edge of the radix tree: `key` (tokens, a multiple of block_size long) and one KV block id per block.

            def __init__(self, key=(), blocks=(), parent=None):
                self.key = tuple(key)
                self.blocks = list(blocks)
                self.parent = parent
                self.children = {}  # first block of the child's key (a tuple of block_size tokens) -> Node
                self.ref_count = 0  # running requests that use this node (and so every ancestor)
                self.last_access = 0  # the cache's clock at the last match or insert through this node

            def __repr__(self):
                return f"Node(key={self.key}, blocks={self.blocks}, ref={self.ref_count}, t={self.last_access})"
    """)
    lesson.md(r"""
        ## 3. Exercise `radix_cache`: match, insert, split

        `match_prefix(tokens)` returns `(num_tokens, blocks, node)`: the length of the longest cached prefix (a
        multiple of `bs`), its block ids in order, and the node where it ends (the root when nothing matched).
        `insert(tokens, blocks)` caches the full blocks of `tokens` with the given ids (exactly
        `len(tokens) // bs` of them, else `ValueError`) and returns the number of tokens that were already cached.
        Both advance `self.clock` by one and set `last_access` on every node of the path. Use `self._split`.
    """)
    lesson.exercise(
        "radix_cache",
        r'''
        class RadixCache:
            """A radix tree over token blocks: which KV blocks hold which token prefixes."""

            def __init__(self, block_size: int):
                if block_size < 1:
                    raise ValueError(f"block_size must be >= 1, got {block_size}")
                self.block_size = block_size
                self.root = Node()
                self.clock = 0

            def _full_blocks(self, tokens):
                """The tokens of the whole blocks of a sequence, as a tuple."""
                tokens = tuple(tokens)
                return tokens[: len(tokens) - len(tokens) % self.block_size]

            def _split(self, node, num_tokens):
                """Cut node's edge after num_tokens (a multiple of block_size, 0 < num_tokens < len(node.key)).
                Returns the new upper node, which takes node's place under its parent; node keeps the rest."""
                # TODO: an upper node with key[:num_tokens] and its blocks, same ref_count and last_access as node;
                #       it replaces node in the parent's children; node keeps the remainder as upper's only child
                ### BEGIN SOLUTION
                bs = self.block_size
                upper = Node(node.key[:num_tokens], node.blocks[: num_tokens // bs], node.parent)
                upper.ref_count, upper.last_access = node.ref_count, node.last_access
                node.parent.children[node.key[:bs]] = upper
                node.key, node.blocks, node.parent = node.key[num_tokens:], node.blocks[num_tokens // bs :], upper
                upper.children[node.key[:bs]] = node
                return upper
                ### END SOLUTION

            def _walk(self, tokens):
                """Descend along the full blocks `tokens` (a tuple), splitting an edge where they diverge inside it.
                Returns (node where the cached part ends, number of tokens matched)."""
                # TODO: follow children by the next block; count the whole blocks on which the edge and tokens agree;
                #       split when only part of an edge agrees; stop when no child starts with the next block
                ### BEGIN SOLUTION
                bs, node, matched = self.block_size, self.root, 0
                while matched < len(tokens):
                    child = node.children.get(tokens[matched : matched + bs])
                    if child is None:
                        break
                    agree = bs
                    while agree < len(child.key) and matched + agree < len(tokens) and (
                        child.key[agree : agree + bs] == tokens[matched + agree : matched + agree + bs]
                    ):
                        agree += bs
                    if agree < len(child.key):
                        child = self._split(child, agree)
                    node, matched = child, matched + agree
                return node, matched
                ### END SOLUTION

            def _touch(self, node):
                """last_access = clock on node and every ancestor."""
                # TODO
                ### BEGIN SOLUTION
                while node is not None:
                    node.last_access = self.clock
                    node = node.parent
                ### END SOLUTION

            def match_prefix(self, tokens):
                """Returns (num_tokens, blocks, node) of the longest cached prefix of tokens."""
                # TODO: advance the clock, walk, collect the block ids from the root down, touch the path
                ### BEGIN SOLUTION
                self.clock += 1
                node, matched = self._walk(self._full_blocks(tokens))
                blocks, up = [], node
                while up is not self.root:
                    blocks[:0] = up.blocks
                    up = up.parent
                self._touch(node)
                return matched, blocks, node
                ### END SOLUTION

            def insert(self, tokens, blocks):
                """Cache the full blocks of tokens with these block ids; returns the number of tokens already cached."""
                tokens = self._full_blocks(tokens)
                if len(blocks) != len(tokens) // self.block_size:
                    raise ValueError(f"{len(tokens) // self.block_size} full blocks need as many ids, got {len(blocks)}")
                # TODO: advance the clock, walk, hang the uncached rest (if any) as a new leaf, touch the path
                ### BEGIN SOLUTION
                self.clock += 1
                node, cached = self._walk(tokens)
                if cached < len(tokens):
                    leaf = Node(tokens[cached:], blocks[cached // self.block_size :], node)
                    node.children[leaf.key[: self.block_size]] = leaf
                    node = leaf
                self._touch(node)
                return cached
                ### END SOLUTION

            def num_cached_blocks(self):
                """Blocks held by the tree."""
                count, stack = 0, [self.root]
                while stack:
                    node = stack.pop()
                    count += len(node.blocks)
                    stack.extend(node.children.values())
                return count
    ''',
    )
    lesson.md(r"""
        ## 4. Exercise `lru_eviction`: lock, unlock, evict

        `lock(node)` / `unlock(node)` add / remove one reference on `node` and each ancestor (not the root);
        unlocking a node whose count is 0 is a `ValueError`. `evictable_blocks()` counts the blocks of nodes with
        count 0. `evict(num_blocks)` frees exactly that many blocks in LRU order as in section 2 and returns their ids
        in the order freed; it refuses (`ValueError`, nothing evicted) when fewer are evictable.
    """)
    lesson.exercise(
        "lru_eviction",
        r'''
        class LRURadixCache(RadixCache):
            """RadixCache whose unlocked leaves are evicted least recently used first, one block at a time."""

            def lock(self, node):
                # TODO: one more reference on node and its ancestors
                ### BEGIN SOLUTION
                while node is not self.root:
                    node.ref_count += 1
                    node = node.parent
                ### END SOLUTION

            def unlock(self, node):
                # TODO: ValueError if node is not locked; otherwise one reference fewer on node and its ancestors
                ### BEGIN SOLUTION
                if node is not self.root and node.ref_count == 0:
                    raise ValueError(f"unlock of a node that is not locked: {node}")
                while node is not self.root:
                    node.ref_count -= 1
                    node = node.parent
                ### END SOLUTION

            def _nodes(self):
                stack, found = [self.root], []
                while stack:
                    node = stack.pop()
                    found.append(node)
                    stack.extend(node.children.values())
                return found

            def evictable_blocks(self):
                # TODO: blocks of the nodes nobody locks
                ### BEGIN SOLUTION
                return sum(len(node.blocks) for node in self._nodes() if node.ref_count == 0)
                ### END SOLUTION

            def evict(self, num_blocks):
                """Free num_blocks blocks, least recently used unlocked leaf first; returns their ids in order."""
                # TODO: refuse (ValueError) if fewer than num_blocks are evictable, before changing anything
                # TODO: repeat: the unlocked leaf with the oldest last_access loses the last block of its key;
                #       an emptied leaf leaves its parent's children
                ### BEGIN SOLUTION
                if num_blocks > self.evictable_blocks():
                    raise ValueError(f"cannot evict {num_blocks} blocks: only {self.evictable_blocks()} are unlocked")
                bs, freed = self.block_size, []
                while len(freed) < num_blocks:
                    leaves = [n for n in self._nodes() if not n.children and n.ref_count == 0 and n is not self.root]
                    leaf = min(leaves, key=lambda n: n.last_access)
                    first_block = leaf.key[:bs]
                    freed.append(leaf.blocks.pop())
                    leaf.key = leaf.key[:-bs]
                    if not leaf.blocks:
                        del leaf.parent.children[first_block]
                return freed
                ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 5. Exercise `serve_with_prefix_cache`: the hit rate of a workload

        Serve `requests` (lists of token ids) one after the other with a pool of `capacity_blocks` KV blocks (ids
        `0 .. capacity_blocks - 1`) shared by the cache and the running request. For each request: match its
        prefix and lock the matched node; it needs one block per remaining **full** block of its tokens (a partial
        last block is never cached, so it is not counted here); take them from the free ids, evicting from the cache
        when too few are free; insert the request with the matched ids followed by the new ones; unlock. Return
        `{"hit_tokens": ..., "total_tokens": ..., "hit_rate": ..., "evicted_blocks": ...}`, where `total_tokens`
        counts every token of every request. A request with more full blocks than the pool is a `ValueError`.
        Take free ids from the end of a list that starts as `list(range(capacity_blocks))`, and put evicted ids at
        its end, in the order `evict` returned them (the checks compare block ids, so they need one convention).
    """)
    lesson.exercise(
        "serve_with_prefix_cache",
        r'''
        def serve_with_prefix_cache(requests, capacity_blocks: int, block_size: int):
            """Serve requests in order through an LRURadixCache of capacity_blocks blocks.
            Returns dict(hit_tokens, total_tokens, hit_rate, evicted_blocks) and the cache, as (stats, cache)."""
            cache = LRURadixCache(block_size)
            free_ids = list(range(capacity_blocks))
            stats = {"hit_tokens": 0, "total_tokens": 0, "hit_rate": 0.0, "evicted_blocks": 0}
            for tokens in requests:
                # TODO: refuse a request longer than the pool; match and lock; count hits and tokens
                # TODO: new full blocks needed; evict the shortfall (ids back on free_ids); take ids with pop()
                # TODO: insert with matched + new ids; unlock
                ### BEGIN SOLUTION
                full_blocks = len(tokens) // block_size
                if full_blocks > capacity_blocks:
                    raise ValueError(f"a request of {full_blocks} blocks cannot fit a pool of {capacity_blocks}")
                matched, blocks, node = cache.match_prefix(tokens)
                cache.lock(node)
                stats["hit_tokens"] += matched
                stats["total_tokens"] += len(tokens)
                needed = full_blocks - matched // block_size
                if needed > len(free_ids):
                    evicted = cache.evict(needed - len(free_ids))
                    stats["evicted_blocks"] += len(evicted)
                    free_ids.extend(evicted)
                new_ids = [free_ids.pop() for _ in range(needed)]
                cache.insert(tokens, blocks + new_ids)
                cache.unlock(node)
                ### END SOLUTION
            stats["hit_rate"] = stats["hit_tokens"] / max(stats["total_tokens"], 1)
            return stats, cache
    ''',
    )
    lesson.md(r"""
        ## 6. Picture: hit rate against cache size

        A workload in the shape of a chat deployment: 8 system prompts of 200–600 tokens (popularity skewed: the
        first ones are used far more), each request a system prompt followed by 50–300 tokens of its own, 300 requests.
        The curve is your `serve_with_prefix_cache` at growing pool sizes; the dotted line is the best any cache can do
        on this workload (every prompt's full blocks hit after their first use).
    """)
    lesson.code(r"""
        rng = random.Random(0)
        block_size = 16
        prompts = [[rng.randrange(32000) for _ in range(rng.randint(200, 600))] for _ in range(8)]
        weights = [1 / (i + 1) for i in range(8)]  # Zipf-like popularity
        requests = []
        for _ in range(300):
            prompt = rng.choices(prompts, weights)[0]
            requests.append(prompt + [rng.randrange(32000) for _ in range(rng.randint(50, 300))])
        seen, best = set(), 0
        for req in requests:
            p = next(i for i, pr in enumerate(prompts) if req[: len(pr)] == pr)
            if p in seen:
                best += len(prompts[p]) // block_size * block_size
            seen.add(p)
        best /= sum(len(r) for r in requests)
        capacities = [60, 80, 120, 160, 240, 320, 480]
        try:
            rates = [serve_with_prefix_cache(requests, c, block_size)[0]["hit_rate"] for c in capacities]
            plt.figure(figsize=(5.5, 3.3))
            plt.plot(capacities, [100 * r for r in rates], marker="o", label="LRU radix cache (yours)")
            plt.axhline(100 * best, color="k", ls=":", label="every shared prompt hits")
            plt.xlabel("KV pool (blocks of 16 tokens)"); plt.ylabel("prompt tokens served from cache (%)")
            plt.title("300 requests, 8 system prompts"); plt.legend(fontsize=8); plt.tight_layout(); plt.show()
        except NotImplementedError:
            print("serve_with_prefix_cache not attempted yet")
    """)
    lesson.stop()
    lesson.md(r"""
        ## 7. Reading the solutions

        **Split.** The upper node takes the child's place under the parent *under the same first block* (the key of
        the dict does not change, since the upper key starts with the same tokens), inherits its reference count and
        access time (everything that locked the lower part also passes through the upper part), and the lower node
        becomes its only child. No block id is copied or moved: the ids are just divided between the two edges.

        **Walk.** Block-wise comparison: two sequences that share 37 tokens with `bs = 16` share two cached blocks,
        not 37 tokens, because a KV block is all or nothing. The split happens inside `match_prefix` too (SGLang does
        the same): the node returned must end exactly at the match, so that `lock` protects exactly the blocks the
        request reads.

        **Touch.** Every ancestor gets the clock, not only the last node; otherwise an interior node could look older
        than its children, and a path would be trimmed from the middle in LRU order. With all ancestors touched,
        `last_access` never decreases going up the tree.

        **Evict.** Recomputing the list of leaves at every step is $O(\text{nodes})$ per block and is fine for a
        lesson; SGLang keeps a heap of evictable leaves keyed by `last_access` (`RadixCache.evict`, which removes
        whole leaf nodes rather than single blocks), and vLLM keeps free and cached blocks in one doubly linked
        free queue in eviction order, so that a hit can take a block out of the middle in $O(1)$. Refusing before
        evicting anything keeps the tree consistent when the caller asks for too much.

        **The usual mistakes, and why they are wrong**: no split (a match
        returns the whole edge's blocks); a split that drops the lower node from the tree; a comparison by tokens
        instead of whole blocks; only the last node touched; insert that replaces the cached blocks; a clock that
        does not advance; lock on the node only (the ancestors' blocks can then be evicted under a running request);
        eviction of the newest leaf, of locked leaves, or of interior nodes; the request not locked while blocks are
        evicted for it; the partial last block counted as needing a block.

        **In production.** vLLM (V1) hashes each *full* block together with its parent's hash (and the LoRA id and
        multimodal inputs), so a dictionary from hash to block replaces the tree: a lookup walks the request's blocks
        until the first miss. It never matches the whole prompt (at least one token must be computed to get logits).
        SGLang's `RadixCache` uses token granularity (`page_size = 1`) by default and schedules waiting requests in
        the order of their longest shared prefix to raise the hit rate ("cache-aware scheduling"). Both must agree
        with the allocator of `p02.paged_attention`: a cached block is held by the cache (count 1), revived with an
        extra reference on a hit, and returned to the free list only by eviction.
    """)
    lesson.mistakes()
    return lesson
