"""Checks for p02.prefix_cache. The reference is a brute-force oracle with no tree: a dictionary from every cached
block prefix (a tuple of tokens, a multiple of block_size long) to its block id and last access time, a multiset of
locked prefixes, longest-prefix match by scanning, and eviction by scanning all prefixes for the oldest unlocked one
that no cached prefix extends. The learner's tree is compared with it after every operation of random workloads
(return values, the full prefix -> block id map, reference counts and access times, the tree's shape invariants),
and on hand-computed cases."""

import random
from collections import Counter

from llm_algo.check import Checks, expect, expect_value_error

checks = Checks("p02.prefix_cache")


class PrefixOracle:
    """The spec, without a tree."""

    def __init__(self, block_size):
        self.bs = block_size
        self.entries = {}  # prefix tuple -> [block id, last access]
        self.locks = Counter()  # locked prefixes (tuples)
        self.clock = 0

    def full(self, tokens):
        tokens = tuple(tokens)
        return tokens[: len(tokens) - len(tokens) % self.bs]

    def cached_blocks(self, tokens):
        k = 0
        while (k + 1) * self.bs <= len(tokens) and tokens[: (k + 1) * self.bs] in self.entries:
            k += 1
        return k

    def match(self, tokens):
        self.clock += 1
        tokens = self.full(tokens)
        k = self.cached_blocks(tokens)
        for j in range(1, k + 1):
            self.entries[tokens[: j * self.bs]][1] = self.clock
        return k * self.bs, [self.entries[tokens[: j * self.bs]][0] for j in range(1, k + 1)]

    def insert(self, tokens, blocks):
        self.clock += 1
        tokens = self.full(tokens)
        k = self.cached_blocks(tokens)
        for j in range(1, len(tokens) // self.bs + 1):
            entry = self.entries.setdefault(tokens[: j * self.bs], [blocks[j - 1], 0])
            entry[1] = self.clock
        return k * self.bs

    def protected(self, prefix):
        return any(
            count > 0 and len(lock) >= len(prefix) and lock[: len(prefix)] == prefix
            for lock, count in self.locks.items()
        )

    def evictable(self):
        return sum(1 for p in self.entries if not self.protected(p))

    def evict(self, n):
        freed = []
        for _ in range(n):
            leaves = [
                p
                for p in self.entries
                if not self.protected(p)
                and not any(len(q) == len(p) + self.bs and q[: len(p)] == p for q in self.entries)
            ]
            oldest = min(leaves, key=lambda p: self.entries[p][1])
            freed.append(self.entries.pop(oldest)[0])
        return freed


def tree_map(cache):
    """{block prefix: (block id, last_access, ref_count)} read from the learner's tree, plus shape problems found."""
    bs, found, problems = cache.block_size, {}, []
    stack = [(cache.root, ())]
    while stack:
        node, path = stack.pop()
        for first, child in node.children.items():
            key = tuple(child.key)
            if child.parent is not node:
                problems.append(f"child {child} of path {path} has another parent")
            if not key or len(key) % bs or len(child.blocks) != len(key) // bs:
                problems.append(f"{child}: key must be a positive multiple of {bs} long with one block id per block")
                continue
            if tuple(first) != key[:bs]:
                problems.append(f"{child} is filed under first block {first}")
            for j in range(len(key) // bs):
                prefix = path + key[: (j + 1) * bs]
                if prefix in found:
                    problems.append(f"prefix {prefix} appears twice in the tree")
                found[prefix] = (child.blocks[j], child.last_access, child.ref_count)
            stack.append((child, path + key))
    return found, problems


def expect_same_state(cache, oracle, label):
    found, problems = tree_map(cache)
    expect(
        not problems,
        "the tree's shape is broken",
        input=label,
        expected="keys of whole blocks, one id per block, children filed under their first block, parent links",
        got="; ".join(problems[:3]),
        hint="a split must file the upper node under the same first block and make the lower node its child",
    )
    ids = {p: v[0] for p, v in found.items()}
    want_ids = {p: v[0] for p, v in oracle.entries.items()}
    if ids != want_ids:
        missing = sorted(set(want_ids) - set(ids), key=len)[:2]
        extra = sorted(set(ids) - set(want_ids), key=len)[:2]
        wrong = [p for p in ids if p in want_ids and ids[p] != want_ids[p]][:2]
        expect(
            False,
            "the cached prefixes or their block ids differ from the oracle",
            input=label,
            expected=f"{len(want_ids)} cached block prefixes",
            got=f"{len(ids)}; missing {missing}, extra {extra}, wrong ids at {wrong}",
            hint="insert keeps the ids already cached and adds only the new blocks; evict removes one leaf block",
        )
    times = {p: v[1] for p, v in found.items()}
    stale = [p for p in times if times[p] != oracle.entries[p][1]]
    expect(
        not stale,
        "last_access differs from the oracle's",
        input=label,
        expected=f"at {stale[:1]}: {[oracle.entries[p][1] for p in stale[:1]]}",
        got=str([times[p] for p in stale[:1]]),
        hint="advance the clock on every match and insert; touch every node from the end of the path to the root",
    )
    refs = {p: v[2] for p, v in found.items()}
    want_refs = {
        p: sum(n for lock, n in oracle.locks.items() if len(lock) >= len(p) and lock[: len(p)] == p) for p in refs
    }
    wrong_refs = [p for p in refs if refs[p] != want_refs[p]]
    expect(
        not wrong_refs,
        "ref_count differs from the number of running requests that use the node",
        input=label,
        expected=str([want_refs[p] for p in wrong_refs[:2]]),
        got=str([refs[p] for p in wrong_refs[:2]]),
        hint="lock/unlock change the node and every ancestor; a split copies ref_count to the upper node",
    )


# ------------------------------------------------------------------------------------------ radix_cache


@checks("radix_cache")
def insert_split_and_match_by_hand(ex):
    """bs = 2: [1..6] then [1,2,3,4,7,8,9] share two blocks; the tree splits after them; matches by hand"""
    cache = ex.RadixCache(2)
    label = "RadixCache(2): insert [1,2,3,4,5,6] ids [10,11,12], insert [1,2,3,4,7,8,9] ids [20,21,22]"
    first = cache.insert([1, 2, 3, 4, 5, 6], [10, 11, 12])
    second = cache.insert([1, 2, 3, 4, 7, 8, 9], [20, 21, 22])
    expect(
        (first, second) == (0, 4),
        "insert must return the number of tokens already cached",
        input=label,
        expected="0, then 4",
        got=f"{first}, then {second}",
    )
    top = list(cache.root.children.values())
    expect(
        len(top) == 1 and tuple(top[0].key) == (1, 2, 3, 4) and list(top[0].blocks) == [10, 11],
        "the shared prefix must become one node after the split",
        input=label,
        expected="root -> (1, 2, 3, 4) ids [10, 11] -> {(5, 6): [12], (7, 8): [22]}",
        got=str(top),
        hint="split the (1..6) edge after 4 tokens; the new sequence's tail (7, 8) hangs under the upper node",
    )
    kids = {tuple(c.key): list(c.blocks) for c in top[0].children.values()}
    expect(
        kids == {(5, 6): [12], (7, 8): [22]},
        "wrong children under the split node",
        input=label,
        expected="{(5, 6): [12], (7, 8): [22]} (the 9 is a partial block: not cached)",
        got=str(kids),
        hint="cache only whole blocks; keep the cached ids [10, 11], not the new [20, 21]",
    )
    for query, want in (
        ([1, 2, 3, 4, 7, 8, 0], (6, [10, 11, 22])),
        ([1, 2, 9, 9], (2, [10])),
        ([5, 6, 1], (0, [])),
        ([1, 2, 3], (2, [10])),
    ):
        got_tokens, got_blocks, node = cache.match_prefix(query)
        expect(
            (got_tokens, list(got_blocks)) == want,
            f"match_prefix({query}) is wrong",
            input=label,
            expected=f"{want[0]} tokens, ids {want[1]}",
            got=f"{got_tokens} tokens, ids {list(got_blocks)}",
            hint="compare whole blocks; split an edge where the query diverges inside it",
        )
        path_end = sum(len(n.key) for n in _path(cache, node))
        expect(
            path_end == want[0],
            "the node returned does not end where the match ends",
            input=label + f", match_prefix({query})",
            expected=f"a node whose path is {want[0]} tokens long",
            got=f"{node} ending at token {path_end}",
            hint="split the edge so that the matched part is a node of its own (lock then protects exactly it)",
        )


def _path(cache, node):
    path = []
    while node is not None and node is not cache.root:
        path.append(node)
        node = node.parent
    return path


def random_tokens(rng, prefixes):
    base = rng.choice(prefixes)
    cut = rng.randint(0, len(base))
    return base[:cut] + [rng.randrange(3) for _ in range(rng.randint(0, 7))]


@checks("radix_cache")
def random_workload_against_oracle(ex):
    """600 random matches and inserts over shared prefixes (bs 1, 2, 3): results, ids, times and shape vs the oracle"""
    for bs in (1, 2, 3):
        rng = random.Random(bs)
        prefixes = [[rng.randrange(3) for _ in range(12)] for _ in range(3)]
        cache, oracle = ex.RadixCache(bs), PrefixOracle(bs)
        next_id = 0
        for step in range(200):
            tokens = random_tokens(rng, prefixes)
            label = (
                f"RadixCache({bs}), random workload, step {step}: "
                + ("match" if step % 3 == 0 else "insert")
                + f" {tokens}"
            )
            if step % 3 == 0:
                got_tokens, got_blocks, _ = cache.match_prefix(tokens)
                want = oracle.match(tokens)
                expect(
                    (got_tokens, list(got_blocks)) == want,
                    "match_prefix disagrees with the longest cached prefix",
                    input=label,
                    expected=f"{want[0]} tokens, ids {want[1]}",
                    got=f"{got_tokens} tokens, ids {list(got_blocks)}",
                    hint="walk by whole blocks; collect ids from the root down",
                )
            else:
                ids = list(range(next_id, next_id + len(tokens) // bs))
                next_id += len(ids)
                got = cache.insert(tokens, ids)
                want = oracle.insert(tokens, ids)
                expect(
                    got == want,
                    "insert returned the wrong number of cached tokens",
                    input=label,
                    expected=str(want),
                    got=str(got),
                )
            if step % 10 == 0 or step == 199:
                expect_same_state(cache, oracle, label)
        expect(
            cache.num_cached_blocks() == len(oracle.entries),
            "num_cached_blocks disagrees",
            input=f"RadixCache({bs}) after 200 operations",
            expected=str(len(oracle.entries)),
            got=str(cache.num_cached_blocks()),
        )


@checks("radix_cache")
def partial_blocks_and_empty_queries(ex):
    """sequences shorter than a block cache nothing; an empty match returns the root; re-inserting keeps the old ids"""
    cache = ex.RadixCache(4)
    got = cache.insert([7, 7, 7], [])
    expect(
        got == 0 and not cache.root.children,
        "a partial block was cached",
        input="RadixCache(4).insert([7, 7, 7], [])",
        expected="0, an empty tree",
        got=f"{got}, {cache.root.children}",
    )
    tokens, blocks, node = cache.match_prefix([])
    expect(
        (tokens, list(blocks), node) == (0, [], cache.root),
        "match_prefix([]) must return (0, [], root)",
        input="empty query",
        got=f"{(tokens, blocks, node)}",
    )
    cache.insert(list(range(8)), [5, 6])
    again = cache.insert(list(range(10)), [8, 9])
    _, ids, _ = cache.match_prefix(list(range(12)))
    expect(
        again == 8 and list(ids) == [5, 6],
        "re-inserting a cached sequence must keep its ids and report it cached",
        input="insert range(8) ids [5, 6], insert range(10) ids [8, 9], match range(12)",
        expected="8 cached tokens, ids [5, 6]",
        got=f"{again}, ids {list(ids)}",
        hint="only the part after the cached prefix gets the new ids (here there is none: 10 tokens = 2 whole blocks)",
    )


def count_nodes(cache):
    count, stack = 0, [cache.root]
    while stack:
        node = stack.pop()
        count += 1
        stack.extend(node.children.values())
    return count


@checks("radix_cache")
def cached_paths_are_not_split_again(ex):
    """walking a path that is already cached (match or insert) leaves the tree's nodes as they are"""
    for bs in (1, 2, 3):
        cache = ex.RadixCache(bs)
        long_seq = [1] * bs + list(range(10, 10 + 5 * bs))
        cache.insert(long_seq, list(range(6)))
        cache.insert([1] * bs + [9] * bs, [0, 6])
        before = count_nodes(cache)
        label = f"RadixCache({bs}): insert a 6-block sequence, then one sharing its first block; re-walk the first"
        for walk in ("match", "insert"):
            if walk == "match":
                cache.match_prefix(long_seq)
            else:
                cache.insert(long_seq, list(range(6)))
            expect(
                count_nodes(cache) == before,
                "a walk along a cached path split a node",
                input=f"{label} ({walk})",
                expected=f"{before} nodes (root, the shared block, two tails)",
                got=f"{count_nodes(cache)} nodes",
                hint="inside an edge compare block `agree` of the key with block `matched + agree` of the tokens",
            )


# ------------------------------------------------------------------------------------------ lru_eviction


@checks("lru_eviction")
def evict_by_hand(ex):
    """bs = 1: the older leaf goes first, then a path is trimmed from its end; a locked path survives"""
    cache = ex.LRURadixCache(1)
    cache.insert([1, 2, 3], [0, 1, 2])  # t = 1
    cache.insert([1, 2, 4], [0, 1, 3])  # t = 2
    cache.match_prefix([1, 2, 3])  # t = 3: the (3) leaf and (1, 2) are now newer than (4)
    label = "LRURadixCache(1): insert [1,2,3] ids [0,1,2], insert [1,2,4] ids [0,1,3], match [1,2,3]"
    first = cache.evict(1)
    expect(
        list(first) == [3],
        "evict(1) must free the least recently used leaf's block",
        input=label,
        expected="[3] (the leaf 4, last used at t=2)",
        got=str(first),
    )
    second = cache.evict(2)
    expect(
        list(second) == [2, 1],
        "evict(2) must trim the remaining path from its end",
        input=label + ", evict(1)",
        expected="[2, 1]: leaf 3, then block 2 of (1, 2), which became a leaf",
        got=str(second),
        hint="one block per step: the last block of the oldest unlocked leaf; an emptied leaf leaves the tree",
    )
    cache = ex.LRURadixCache(1)
    cache.insert([1, 2, 3], [0, 1, 2])
    cache.insert([5, 6], [3, 4])
    _, _, node = cache.match_prefix([1, 2])  # the newest, but locked
    cache.lock(node)
    freed = cache.evict(cache.evictable_blocks())
    expect(
        sorted(freed) == [2, 3, 4] and cache.match_prefix([1, 2, 3])[0] == 2,
        "a locked prefix must survive eviction, everything else may go",
        input="insert [1,2,3], insert [5,6], lock match [1,2], evict all evictable",
        expected="freed ids [2, 3, 4]; [1, 2] still cached",
        got=f"freed {sorted(freed)}",
        hint="lock adds a reference to the node and every ancestor; only leaves with ref_count 0 are evicted",
    )


@checks("lru_eviction")
def random_workload_with_locks(ex):
    """500 random matches, inserts, locks, unlocks and evictions (bs 1 and 2) against the oracle"""
    for bs in (1, 2):
        rng = random.Random(10 + bs)
        prefixes = [[rng.randrange(3) for _ in range(10)] for _ in range(3)]
        cache, oracle = ex.LRURadixCache(bs), PrefixOracle(bs)
        locked = []  # (node, prefix)
        next_id = 0
        for step in range(250):
            op = rng.random()
            tokens = random_tokens(rng, prefixes)
            if op < 0.3:
                kind = f"insert {tokens}"
                ids = list(range(next_id, next_id + len(tokens) // bs))
                next_id += len(ids)
                cache.insert(tokens, ids)
                oracle.insert(tokens, ids)
            elif op < 0.55:
                kind = f"match + lock {tokens}"
                n, _, node = cache.match_prefix(tokens)
                oracle.match(tokens)
                cache.lock(node)
                prefix = oracle.full(tokens)[:n]
                oracle.locks[prefix] += 1
                locked.append((node, prefix))
            elif op < 0.75 and locked:
                node, prefix = locked.pop(rng.randrange(len(locked)))
                kind = f"unlock {list(prefix)}"
                cache.unlock(node)
                oracle.locks[prefix] -= 1
                if not oracle.locks[prefix]:
                    del oracle.locks[prefix]
            else:
                n = rng.randint(0, oracle.evictable())
                kind = f"evict({n})"
                label = f"LRURadixCache({bs}), step {step}: {kind}"
                expect(
                    cache.evictable_blocks() == oracle.evictable(),
                    "evictable_blocks disagrees",
                    input=label,
                    expected=str(oracle.evictable()),
                    got=str(cache.evictable_blocks()),
                    hint="count the blocks of every node with ref_count 0",
                )
                got, want = list(cache.evict(n)), oracle.evict(n)
                expect(
                    got == want,
                    "evict freed other blocks (or in another order) than LRU",
                    input=label,
                    expected=str(want),
                    got=str(got),
                    hint="each step: the unlocked leaf with the smallest last_access loses its last block",
                )
            label = f"LRURadixCache({bs}), step {step}: {kind}"
            if step % 10 == 0 or step == 249:
                expect_same_state(cache, oracle, label)


@checks("lru_eviction")
def refuses_too_much_and_bad_unlock(ex):
    """ValueError for evicting more than is unlocked (nothing evicted) and for unlocking an unlocked node"""
    cache = ex.LRURadixCache(2)
    cache.insert([1, 2, 3, 4], [0, 1])
    _, _, node = cache.match_prefix([1, 2])
    cache.lock(node)
    expect_value_error(
        lambda: cache.evict(2),
        "4 tokens cached, [1, 2] locked, evict(2)",
        "only 1 block is unlocked: refuse before evicting",
    )
    expect(
        cache.num_cached_blocks() == 2,
        "a refused evict changed the tree",
        input="evict(2) refused",
        expected="2 blocks cached",
        got=str(cache.num_cached_blocks()),
    )
    cache.unlock(node)
    expect_value_error(lambda: cache.unlock(node), "unlock twice", "ref_count 0 cannot go lower")


# ------------------------------------------------------------------------------------------ serve_with_prefix_cache


def oracle_serve(requests, capacity, bs):
    oracle, free_ids = PrefixOracle(bs), list(range(capacity))
    hits = total = evicted = 0
    for tokens in requests:
        n, ids = oracle.match(tokens)
        prefix = oracle.full(tokens)[:n]
        oracle.locks[prefix] += 1
        hits, total = hits + n, total + len(tokens)
        needed = len(tokens) // bs - n // bs
        if needed > len(free_ids):
            freed = oracle.evict(needed - len(free_ids))
            evicted += len(freed)
            free_ids.extend(freed)
        oracle.insert(tokens, ids + [free_ids.pop() for _ in range(needed)])
        oracle.locks[prefix] -= 1
    return {
        "hit_tokens": hits,
        "total_tokens": total,
        "hit_rate": hits / max(total, 1),
        "evicted_blocks": evicted,
    }, oracle


@checks("serve_with_prefix_cache")
def three_requests_by_hand(ex):
    """bs = 2: [1,2,3,4,5], [1,2,3,4,6,7], [1,2,9] hit 0, 4 and 2 tokens of 14"""
    stats, _ = ex.serve_with_prefix_cache([[1, 2, 3, 4, 5], [1, 2, 3, 4, 6, 7], [1, 2, 9]], 10, 2)
    expect(
        (stats["hit_tokens"], stats["total_tokens"], stats["evicted_blocks"]) == (6, 14, 0)
        and abs(stats["hit_rate"] - 6 / 14) < 1e-12,
        "wrong statistics",
        input="requests [1,2,3,4,5], [1,2,3,4,6,7], [1,2,9]; 10 blocks of 2",
        expected="hit_tokens 6, total_tokens 14, hit_rate 0.4286, evicted_blocks 0",
        got=str(stats),
        hint="hits are whole matched blocks; total counts every token, partial blocks included",
    )


@checks("serve_with_prefix_cache")
def random_workloads_against_oracle(ex):
    """shared-prompt workloads under memory pressure: statistics and the final cache equal the oracle's"""
    for seed, capacity, bs in ((1, 12, 2), (2, 7, 3), (3, 40, 1)):
        rng = random.Random(seed)
        prompts = [[rng.randrange(50) for _ in range(rng.randint(4, 12))] for _ in range(4)]
        requests = [rng.choice(prompts) + [rng.randrange(50) for _ in range(rng.randint(0, 8))] for _ in range(60)]
        requests = [r for r in requests if len(r) // bs <= capacity]
        stats, cache = ex.serve_with_prefix_cache(requests, capacity, bs)
        want, oracle = oracle_serve(requests, capacity, bs)
        label = f"60 requests over 4 shared prompts, pool of {capacity} blocks of {bs} (seed {seed})"
        expect(
            {k: stats[k] for k in ("hit_tokens", "total_tokens", "evicted_blocks")}
            == {k: want[k] for k in ("hit_tokens", "total_tokens", "evicted_blocks")},
            "the statistics differ from the oracle's",
            input=label,
            expected=str(want),
            got=str(stats),
            hint="lock the matched node before evicting; evict only the shortfall; free ids from the end of the list",
        )
        expect_same_state(cache, oracle, label + ", final cache")
        ids = [b for b, *_ in tree_map(cache)[0].values()]
        expect(
            len(ids) == len(set(ids)) and all(0 <= b < capacity for b in ids),
            "a block id is cached twice or lies outside the pool",
            input=label,
            expected=f"distinct ids in 0 .. {capacity - 1}",
            got=str(sorted(ids)),
        )


@checks("serve_with_prefix_cache")
def refuses_a_request_larger_than_the_pool(ex):
    """ValueError for a request with more full blocks than the pool; a request of exactly the pool is served"""
    expect_value_error(
        lambda: ex.serve_with_prefix_cache([[1, 2, 3, 4, 5, 6, 7, 8]], 3, 2),
        "8 tokens (4 full blocks), pool of 3 blocks of 2",
        "3 full blocks fit; 4 do not",
    )
    expect_value_error(
        lambda: ex.serve_with_prefix_cache([list(range(9)), list(range(100, 112))], 3, 3),
        "a second request of 12 tokens, pool of 3 blocks of 3",
        "check every request, not only the first",
    )
    stats, cache = ex.serve_with_prefix_cache([list(range(6)), list(range(6)), list(range(10, 16))], 3, 2)
    expect(
        (stats["hit_tokens"], stats["evicted_blocks"]) == (6, 3) and cache.num_cached_blocks() == 3,
        "a request that fills the pool exactly must evict everything unlocked and be served",
        input="requests range(6) twice, then range(10, 16); pool of 3 blocks of 2",
        expected="hit_tokens 6, evicted_blocks 3, 3 blocks cached",
        got=f"{stats}, {cache.num_cached_blocks()} cached",
    )
