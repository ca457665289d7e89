"""Checks for p04.memory_pool. References: the constants and rules of PyTorch's `c10/cuda/CUDACachingAllocator.cpp`
(kMinBlockSize, kSmallSize, kSmallBuffer, kLargeBuffer, kMinLargeAlloc, kRoundLarge, `should_split`) as closed
forms; hand-derived allocation sequences; and a brute-force model of the allocator written differently from the
solution (each segment a list of [address, size, allocated, requested] parts; best fit by scanning every free part of
the pool; coalescing by re-merging runs of free parts), driven by random traces with a capacity that forces the
out-of-memory retry. After every operation an invariant checker reads `snapshot()`: segments never overlap, every
reserved byte belongs to exactly one block, no two neighbouring blocks are both free, the cached free lists hold
exactly the free blocks, and `stats()` agrees with the blocks."""

import random

from llm_algo.check import Checks, expect, expect_refused, expect_value_error

checks = Checks("p04.memory_pool")

MiB = 1 << 20
BASE = 0x7F00_0000_0000  # the exercise's default base_address


# ------------------------------------------------------------------------------------------ reference rules


def ref_round(size: int) -> int:
    return ((size - 1) | 511) + 1  # the next multiple of 512 at or above size (size >= 1)


def ref_pool(size: int) -> str:
    return "large" if ref_round(size) > MiB else "small"


def ref_segment(size: int) -> int:
    rounded = ref_round(size)
    if rounded > MiB:
        if rounded >= 10 * MiB:
            return -(-rounded // (2 * MiB)) * (2 * MiB)
        return 20 * MiB
    return 2 * MiB


def ref_split(pool: str, remaining: int) -> bool:
    return remaining > MiB if pool == "large" else remaining >= 512


# ------------------------------------------------------------------------------------------ sizing_rules

HAND_SIZES = [  # size -> (rounded, pool, segment), derived by hand from the constants
    (1, 512, "small", 2 * MiB),
    (511, 512, "small", 2 * MiB),
    (512, 512, "small", 2 * MiB),
    (513, 1024, "small", 2 * MiB),
    (1000, 1024, "small", 2 * MiB),
    (MiB - 1, MiB, "small", 2 * MiB),
    (MiB, MiB, "small", 2 * MiB),
    (MiB + 1, MiB + 512, "large", 20 * MiB),
    (10 * MiB - 513, 10 * MiB - 512, "large", 20 * MiB),
    (10 * MiB - 1, 10 * MiB, "large", 10 * MiB),
    (10 * MiB, 10 * MiB, "large", 10 * MiB),
    (10 * MiB + 1, 10 * MiB + 512, "large", 12 * MiB),
    (21 * MiB, 21 * MiB, "large", 22 * MiB),
    (2**53 + 1, 2**53 + 512, "large", 2**53 + 2 * MiB),
]

HINT_ROUND = "round UP to a multiple of 512 with integers: (size + 511) // 512 * 512 (a size below 512 becomes 512)"
HINT_POOL = "the small pool takes rounded sizes up to and including 1 MiB (<=, not <)"
HINT_SEGMENT = (
    "small pool: 2 MiB; large below 10 MiB (of the ROUNDED size): 20 MiB; from 10 MiB: the rounded size rounded up "
    "to a multiple of 2 MiB"
)


@checks("sizing_rules")
def sizing_by_hand(ex):
    """round_size, pool_of and segment_size on boundary sizes derived by hand (511, 513, 1 MiB, 10 MiB, 2**53 + 1)"""
    for size, rounded, pool, segment in HAND_SIZES:
        for name, got, want, hint in [
            ("round_size", ex.round_size(size), rounded, HINT_ROUND),
            ("pool_of", ex.pool_of(size), pool, HINT_POOL),
            ("segment_size", ex.segment_size(size), segment, HINT_SEGMENT),
        ]:
            expect(
                got == want and type(got) is type(want),
                f"{name} is wrong on a boundary size",
                input=f"{name}({size})",
                expected=repr(want),
                got=repr(got),
                hint=hint + "; results are Python ints, computed without floats (exact at any size)",
            )


@checks("sizing_rules")
def split_rule_by_hand(ex):
    """should_split: small pool from a 512-byte remainder on, large pool only above 1 MiB"""
    for pool, remaining, want in [
        ("small", 0, False),
        ("small", 512, True),
        ("small", 1024, True),
        ("small", MiB, True),
        ("large", 0, False),
        ("large", 512, False),
        ("large", MiB, False),
        ("large", MiB + 512, True),
        ("large", 18 * MiB, True),
    ]:
        got = ex.should_split(pool, remaining)
        expect(
            got is want or (isinstance(got, (bool, int)) and bool(got) == want and got in (0, 1)),
            "should_split is wrong",
            input=f"should_split({pool!r}, {remaining})",
            expected=str(want),
            got=repr(got),
            hint="small pool: remaining >= 512; large pool: remaining > 1 MiB (a sliver stays with the block)",
        )


@checks("sizing_rules")
def sizing_random(ex):
    """500 random sizes from 1 byte to 64 MiB (log-uniform, and next to multiples of 512 and of 1 MiB)"""
    rng = random.Random(4)
    sizes = [int(2 ** rng.uniform(0, 26)) for _ in range(300)]
    sizes += [rng.randint(1, 128) * 512 + rng.choice((-1, 0, 1)) for _ in range(100)]
    sizes += [rng.randint(1, 64) * MiB + rng.choice((-512, -1, 0, 1, 512)) for _ in range(100)]
    for size in sizes:
        got = (ex.round_size(size), ex.pool_of(size), ex.segment_size(size))
        want = (ref_round(size), ref_pool(size), ref_segment(size))
        expect(
            got == want,
            "(round_size, pool_of, segment_size) disagrees with PyTorch's rules",
            input=f"size {size}",
            expected=str(want),
            got=str(got),
            hint=HINT_SEGMENT,
        )


@checks("sizing_rules")
def sizing_refuses(ex):
    """sizes <= 0 raise ValueError; floats, bools, strings and None raise TypeError (in all three size functions)"""
    for name in ("round_size", "pool_of", "segment_size"):
        function = getattr(ex, name)
        for bad in (0, -1, -512):
            expect_value_error(
                lambda function=function, bad=bad: function(bad), f"{name}({bad})", "a request must be at least 1 byte"
            )
        for bad in (1.5, 512.0, True, "512", None):
            expect_refused(
                lambda function=function, bad=bad: function(bad),
                f"{name}({bad!r})",
                "a size is an int: refuse other types with TypeError (bool is an int subclass: refuse it explicitly)",
                errors=(TypeError,),
            )


# ------------------------------------------------------------------------------------------ the brute-force model


class ModelAllocator:
    """The policy, brute force: segments of parts [address, size, allocated, requested] in address order."""

    def __init__(self, capacity=None, base=BASE):
        self.capacity, self.next_address = capacity, base
        self.segments = {}  # address -> {"size", "pool", "parts"}

    def reserved(self):
        return sum(segment["size"] for segment in self.segments.values())

    def malloc(self, size):
        rounded, pool = ref_round(size), ref_pool(size)
        candidates = [
            (part[1], part[0], segment, index)
            for segment in self.segments.values()
            if segment["pool"] == pool
            for index, part in enumerate(segment["parts"])
            if not part[2] and part[1] >= rounded
        ]
        if candidates:
            _, _, segment, index = min(candidates, key=lambda c: (c[0], c[1]))
        else:
            nbytes = ref_segment(size)
            if self.capacity is not None and self.reserved() + nbytes > self.capacity:
                self.empty_cache()
                if self.reserved() + nbytes > self.capacity:
                    raise MemoryError
            segment = {"size": nbytes, "pool": pool, "parts": [[self.next_address, nbytes, False, 0]]}
            self.segments[self.next_address] = segment
            self.next_address += nbytes
            index = 0
        part = segment["parts"][index]
        if ref_split(pool, part[1] - rounded):
            segment["parts"].insert(index + 1, [part[0] + rounded, part[1] - rounded, False, 0])
            part[1] = rounded
        part[2], part[3] = True, size
        return part[0]

    def free(self, address):
        for segment in self.segments.values():
            for part in segment["parts"]:
                if part[0] == address and part[2]:
                    part[2], part[3] = False, 0
                    merged = []
                    for piece in segment["parts"]:
                        if merged and not merged[-1][2] and not piece[2]:
                            merged[-1][1] += piece[1]
                        else:
                            merged.append(list(piece))
                    segment["parts"] = merged
                    return
        raise ValueError

    def empty_cache(self):
        for address in [a for a, s in self.segments.items() if len(s["parts"]) == 1 and not s["parts"][0][2]]:
            del self.segments[address]

    def stats(self):
        parts = [part for segment in self.segments.values() for part in segment["parts"]]
        allocated = sum(p[1] for p in parts if p[2])
        reserved = self.reserved()
        return {
            "allocated": allocated,
            "requested": sum(p[3] for p in parts if p[2]),
            "reserved": reserved,
            "fragmentation": reserved - allocated,
            "largest_free": max([p[1] for p in parts if not p[2]], default=0),
            "segments": len(self.segments),
        }


# ------------------------------------------------------------------------------------------ invariant checker


def check_invariants(allocator, live, label):
    """Brute-force consistency of the learner's allocator: `live` maps each address the check holds to its request."""
    snapshot = allocator.snapshot()
    fail_hint = "split and merge must keep each segment tiled by its blocks: fix size, prev and next together"
    end_of_previous = None
    free_by_pool = {"small": set(), "large": set()}
    seen_live, addresses = {}, set()
    for segment in snapshot:
        start, size, blocks = segment["address"], segment["size"], segment["blocks"]
        expect(
            end_of_previous is None or start >= end_of_previous,
            "two segments overlap",
            input=label,
            expected=f"segment at {start:#x} to start at or after {end_of_previous or 0:#x}",
            got=f"it starts at {start:#x}",
        )
        end_of_previous = start + size
        cursor = start
        for index, block in enumerate(blocks):
            expect(
                block["address"] == cursor and block["size"] > 0 and block["size"] % 512 == 0,
                "the blocks of a segment do not tile it (a gap, an overlap, or a size not a multiple of 512)",
                input=label,
                expected=f"block {index} of segment {start:#x} at {cursor:#x}, size a positive multiple of 512",
                got=f"block at {block['address']:#x}, size {block['size']}",
                hint=fail_hint,
            )
            cursor += block["size"]
            addresses.add(block["address"])
            if index and not block["allocated"]:
                expect(
                    blocks[index - 1]["allocated"],
                    "two neighbouring free blocks were not merged",
                    input=label,
                    expected="every free block's neighbours allocated (or the segment's end)",
                    got=f"free blocks at {blocks[index - 1]['address']:#x} (size {blocks[index - 1]['size']}) and "
                    f"{block['address']:#x} (size {block['size']}) in segment {start:#x}",
                    hint="free() merges with a free previous AND a free next neighbour",
                )
            if block["allocated"]:
                seen_live[block["address"]] = (block, segment["pool"])
            else:
                free_by_pool[segment["pool"]].add((block["size"], block["address"]))
                expect(
                    block["requested"] == 0,
                    "a free block still carries a request",
                    input=label,
                    expected=f"requested 0 for the free block at {block['address']:#x}",
                    got=f"requested {block['requested']}",
                    hint="free() resets the block's requested bytes to 0 (the Block says: 0 while free)",
                )
        expect(
            cursor == start + size,
            "a segment's blocks do not add up to the segment",
            input=label,
            expected=f"{size} bytes in segment {start:#x}",
            got=f"{cursor - start} bytes of blocks",
            hint=fail_hint,
        )
    expect(
        set(seen_live) == set(live),
        "the allocated blocks are not the live allocations",
        input=label,
        expected=f"{len(live)} live blocks at {sorted(hex(a) for a in live)[:6]}...",
        got=f"{len(seen_live)} allocated blocks, differing at {sorted(hex(a) for a in set(seen_live) ^ set(live))[:6]}",
        hint="free() marks the block free; malloc() marks exactly the block it returns allocated",
    )
    for address, (block, pool) in seen_live.items():
        request = live[address]
        rounded = ref_round(request)
        expect(
            block["requested"] == request
            and pool == ref_pool(request)
            and block["size"] >= rounded
            and not ref_split(pool, block["size"] - rounded),
            "a live block does not fit its request",
            input=label,
            expected=f"for malloc({request}): a {ref_pool(request)}-pool block of {rounded} bytes "
            f"(more only by a remainder too small to split), requested={request}",
            got=f"{pool}-pool block of {block['size']} bytes, requested={block['requested']}",
            hint="split off every remainder should_split accepts; record the request on the block",
        )
    for pool in ("small", "large"):
        cached = allocator.free_lists[pool]
        expect(
            sorted(cached) == list(cached) and set(cached) == free_by_pool[pool] and len(cached) == len(set(cached)),
            f"the {pool} pool's free list is not exactly its free blocks",
            input=label,
            expected=f"{len(free_by_pool[pool])} entries (size, address), sorted",
            got=f"{len(cached)} entries, {len(set(cached) ^ free_by_pool[pool])} differing",
            hint="uncache a block when it is handed out or merged away; cache the split remainder and the freed block",
        )
    expect(
        set(allocator.blocks) == addresses,
        "`blocks` does not map exactly the blocks of the segments",
        input=label,
        expected=f"{len(addresses)} addresses",
        got=f"{len(allocator.blocks)} entries, {len(set(allocator.blocks) ^ addresses)} differing",
        hint="register the split remainder in self.blocks; delete the block a merge absorbs",
    )
    for segment in snapshot:
        previous = None
        for block in segment["blocks"]:
            here = allocator.blocks[block["address"]]
            expect(
                here.prev is previous,
                "a block's prev link does not point at its lower neighbour",
                input=label,
                expected=f"prev of {block['address']:#x}: {'None' if previous is None else hex(previous.address)}",
                got="None" if here.prev is None else hex(here.prev.address),
                hint="when you split or merge, update the prev of the block after the changed one",
            )
            previous = here
    stats = allocator.stats()
    blocks = [b for s in snapshot for b in s["blocks"]]
    allocated = sum(b["size"] for b in blocks if b["allocated"])
    reserved = sum(s["size"] for s in snapshot)
    want = {
        "allocated": allocated,
        "requested": sum(live.values()),
        "reserved": reserved,
        "fragmentation": reserved - allocated,
        "largest_free": max([b["size"] for b in blocks if not b["allocated"]], default=0),
        "segments": len(snapshot),
    }
    expect(
        stats == want,
        "stats() disagrees with the blocks",
        input=label,
        expected=str(want),
        got=str(stats),
        hint="allocated: block sizes; requested: the callers' sizes; fragmentation = reserved - allocated",
    )


def expect_address(got, want, label, hint, base=BASE):
    expect(
        got == want,
        "malloc returned another block than PyTorch's policy",
        input=label,
        expected=f"{want:#x} (base + {want - base})",
        got=f"{got:#x} (base + {got - base})" if isinstance(got, int) else repr(got),
        hint=hint,
    )


def expect_stats(allocator, want, label, hint):
    stats = allocator.stats()
    expect(
        all(stats.get(key) == value for key, value in want.items()),
        "stats() after a hand-derived sequence",
        input=label,
        expected=", ".join(f"{k}={v}" for k, v in want.items()),
        got=", ".join(f"{k}={stats.get(k)}" for k in want),
        hint=hint,
    )


HINT_BEST_FIT = (
    "take the SMALLEST cached free block of the request's pool that is large enough (lowest address on ties)"
)


# ------------------------------------------------------------------------------------------ CachingAllocator


@checks("CachingAllocator")
def small_pool_by_hand(ex):
    """small pool: 512-byte rounding, a 2 MiB segment, best fit picks the 1 KiB hole, free all, empty_cache"""
    allocator, live = ex.CachingAllocator(), {}
    sizes = [4096, 512, 1000, 1]
    addresses = []
    for size in sizes:
        addresses.append(allocator.malloc(size))
        live[addresses[-1]] = size
    expect(
        addresses == [BASE, BASE + 4096, BASE + 4608, BASE + 5632],
        "four small requests are not packed from the start of one segment",
        input="malloc(4096), malloc(512), malloc(1000), malloc(1) on a new allocator",
        expected=str([hex(BASE + o) for o in (0, 4096, 4608, 5632)]),
        got=str([hex(a) if isinstance(a, int) else a for a in addresses]),
        hint="each request takes the low end of the free block and the rest stays cached (split)",
    )
    check_invariants(allocator, live, "after 4 small mallocs")
    expect_stats(
        allocator,
        {"allocated": 6144, "requested": 5609, "reserved": 2 * MiB, "fragmentation": 2 * MiB - 6144, "segments": 1},
        "malloc(4096), malloc(512), malloc(1000), malloc(1)",
        "allocated counts the rounded blocks (4096 + 512 + 1024 + 512), requested the sizes asked for",
    )
    allocator.free(addresses[0])
    allocator.free(addresses[2])
    del live[addresses[0]], live[addresses[2]]
    check_invariants(allocator, live, "after free of the 4096- and the 1000-byte blocks")
    got = allocator.malloc(700)
    live[got] = 700
    expect_address(
        got, BASE + 4608, "free holes of 4096 B (at base) and 1024 B (at base + 4608), then malloc(700)", HINT_BEST_FIT
    )
    check_invariants(allocator, live, "after malloc(700) into the 1 KiB hole")
    for address in list(live):
        allocator.free(address)
        del live[address]
        check_invariants(allocator, live, f"freeing everything, after free({address:#x})")
    expect_stats(
        allocator,
        {"allocated": 0, "reserved": 2 * MiB, "largest_free": 2 * MiB, "segments": 1},
        "everything freed (before empty_cache)",
        "freed blocks stay cached and merge back into one 2 MiB block",
    )
    allocator.empty_cache()
    check_invariants(allocator, live, "after empty_cache")
    expect_stats(
        allocator,
        {"reserved": 0, "largest_free": 0, "segments": 0},
        "empty_cache with every block free",
        "empty_cache releases each segment that is a single free block",
    )
    again = allocator.malloc(100)
    expect_address(again, BASE + 2 * MiB, "malloc(100) after empty_cache", "a new segment starts at a new address")


@checks("CachingAllocator")
def large_pool_by_hand(ex):
    """large pool: 20 MiB segments, a 0.5 MiB tail is not split, pools never share blocks, >= 10 MiB segments exact"""
    allocator, live = ex.CachingAllocator(), {}

    def take(size, want, what):
        address = allocator.malloc(size)
        live[address] = size
        expect_address(address, BASE + want, what, HINT_BEST_FIT)
        check_invariants(allocator, live, what)

    take(3 * MiB // 2, 0, "malloc(1.5 MiB): a new 20 MiB segment")
    take(39 * MiB // 2, 20 * MiB, "then malloc(19.5 MiB): 18.5 MiB cached is too small, a second 20 MiB segment")
    expect_stats(
        allocator,
        {"allocated": 43 * MiB // 2, "requested": 21 * MiB, "reserved": 40 * MiB, "largest_free": 37 * MiB // 2},
        "malloc(1.5 MiB), malloc(19.5 MiB)",
        "the 0.5 MiB tail of the second segment is not split (large pool: only a remainder > 1 MiB): "
        "allocated counts the whole 20 MiB",
    )
    take(1000, 40 * MiB, "then malloc(1000): the small pool has nothing cached, a 2 MiB segment")
    take(12 * MiB, 3 * MiB // 2, "then malloc(12 MiB): best fit is the 18.5 MiB block of the first segment")
    take(17 * MiB, 42 * MiB, "then malloc(17 MiB): nothing fits, an 18 MiB segment (>= 10 MiB: rounded to 2 MiB)")
    expect_stats(
        allocator,
        {"reserved": 60 * MiB, "segments": 4, "largest_free": 13 * MiB // 2},
        "after 1.5, 19.5, 0.001, 12 and 17 MiB",
        "segments: 20 + 20 + 2 + 18 MiB; the largest cached block is the 6.5 MiB left of the first segment; the 17 MiB "
        "block keeps its 1 MiB tail (not > 1 MiB)",
    )


@checks("CachingAllocator")
def coalescing_by_hand(ex):
    """free the middle block last: it merges with a free block on each side into one free segment"""
    allocator, live = ex.CachingAllocator(), {}
    a, b, c = (allocator.malloc(2048) for _ in range(3))
    live.update({a: 2048, b: 2048, c: 2048})
    for address, what, blocks in [(a, "free(a)", 4), (c, "free(c): merges with the free tail", 3), (b, "free(b)", 1)]:
        allocator.free(address)
        del live[address]
        label = f"a, b, c = 3 x malloc(2048); ... {what}"
        check_invariants(allocator, live, label)
        count = len(allocator.snapshot()[0]["blocks"])
        expect(
            count == blocks,
            "the segment holds the wrong number of blocks",
            input=label,
            expected=f"{blocks} blocks",
            got=f"{count} blocks",
            hint="merge a freed block with each free neighbour",
        )
    expect_stats(
        allocator, {"largest_free": 2 * MiB, "fragmentation": 2 * MiB}, "a, b, c all freed", "everything merged back"
    )


@checks("CachingAllocator")
def out_of_memory_retry_and_fragmentation(ex):
    """a full device: empty_cache and one retry; with live blocks in every segment a 12 MiB request fails"""
    allocator, live = ex.CachingAllocator(capacity=24 * MiB), {}
    x = allocator.malloc(15 * MiB)
    allocator.free(x)
    y = allocator.malloc(18 * MiB)
    live[y] = 18 * MiB
    check_invariants(allocator, live, "capacity 24 MiB: malloc(15 MiB), free, malloc(18 MiB)")
    expect_stats(
        allocator,
        {"reserved": 18 * MiB, "segments": 1, "allocated": 18 * MiB},
        "capacity 24 MiB: malloc(15 MiB), free, malloc(18 MiB)",
        "16 + 18 MiB do not fit: release the cached 16 MiB segment (empty_cache) and try once more",
    )
    device, live = ex.CachingAllocator(capacity=64 * MiB), {}
    big = [device.malloc(6 * MiB) for _ in range(9)]
    live.update(dict.fromkeys(big, 6 * MiB))
    for address in big[::2]:
        device.free(address)
        del live[address]
    label = "capacity 64 MiB: 9 x malloc(6 MiB), every other one freed, then malloc(12 MiB)"
    before = (device.stats(), device.snapshot())
    expect_refused(
        lambda: device.malloc(12 * MiB),
        label,
        "36 MiB are free but in pieces of at most 8 MiB, no segment is empty and a new 12 MiB segment does not fit: "
        "raise MemoryError",
        errors=(MemoryError,),
    )
    expect(
        (device.stats(), device.snapshot()) == before,
        "a failed malloc changed the allocator",
        input=label,
        expected="the same stats and blocks as before the call",
        got=str(device.stats()),
        hint="only reserve, split or uncache once a block is certain",
    )
    check_invariants(device, live, label)
    got = device.malloc(8 * MiB)
    live[got] = 8 * MiB
    expect_address(got, BASE + 12 * MiB, label.replace("12 MiB)", "8 MiB)"), HINT_BEST_FIT)
    check_invariants(device, live, label.replace("12 MiB)", "8 MiB)"))


def random_trace_against_model(ex, seed, capacity, steps, label, base=BASE):
    rng = random.Random(seed)
    mine = ex.CachingAllocator(capacity=capacity, base_address=base)  # every segment's address counts from base
    model = ModelAllocator(capacity, base)
    live, history = {}, []
    for step in range(steps):
        roll = rng.random()
        if roll < 0.05:
            operation = "empty_cache()"
            mine.empty_cache()
            model.empty_cache()
        elif roll < 0.45 and live:
            address = rng.choice(sorted(live))
            operation = f"free({address:#x})"
            mine.free(address)
            model.free(address)
            del live[address]
        else:
            kind = rng.random()
            if kind < 0.6:
                size = int(2 ** rng.uniform(0, 20))
            elif kind < 0.85:
                size = rng.randint(MiB // 2, 10 * MiB)
            else:
                size = rng.randint(10 * MiB - 1024, 30 * MiB)
            operation = f"malloc({size})"
            try:
                want = model.malloc(size)
            except MemoryError:
                want = None
            here = f"{label}, step {step}: {operation}; last ops {history[-4:]}"
            if want is None:
                expect_refused(
                    lambda size=size: mine.malloc(size),
                    here,
                    "the reference ran out of memory here even after empty_cache: raise MemoryError",
                    errors=(MemoryError,),
                )
            else:
                got = mine.malloc(size)
                expect_address(
                    got,
                    want,
                    here,
                    HINT_BEST_FIT
                    + "; on a full device: empty_cache() and retry once; the first segment at base_address",
                    base,
                )
                live[got] = size
        history.append(operation)
        here = f"{label}, step {step}: {operation}; last ops {history[-4:]}"
        check_invariants(mine, live, here)
        expect(
            mine.stats() == model.stats(),
            "stats() differ from the reference allocator",
            input=here,
            expected=str(model.stats()),
            got=str(mine.stats()),
            hint="empty_cache releases only segments that are one free block",
        )


@checks("CachingAllocator")
def random_traces_unlimited(ex):
    """300 random malloc / free / empty_cache calls (1 B to 30 MiB): same addresses and stats as a brute-force model"""
    random_trace_against_model(ex, 11, None, 300, "random trace, no capacity")


@checks("CachingAllocator")
def random_traces_full_device(ex):
    """two random traces on 64 and 48 MiB devices (the second from base_address 0x10000000): out-of-memory retries
    and refusals where the model has them"""
    random_trace_against_model(ex, 12, 64 * MiB, 250, "random trace, capacity 64 MiB")
    random_trace_against_model(
        ex, 13, 48 * MiB, 250, "random trace, capacity 48 MiB, base_address=0x10000000", base=0x1000_0000
    )


@checks("CachingAllocator")
def refuses_bad_input(ex):
    """double free, an unknown or interior address, size 0 or -1: ValueError; a float size: TypeError; no change"""
    allocator, live = ex.CachingAllocator(), {}
    a = allocator.malloc(4096)
    b = allocator.malloc(3 * MiB)
    live.update({a: 4096, b: 3 * MiB})
    allocator.free(b)
    del live[b]
    before = (allocator.stats(), allocator.snapshot())
    for call, label, hint in [
        (lambda: allocator.free(b), "free(b) twice (double free)", "a block that is not allocated cannot be freed"),
        (lambda: allocator.free(a + 512), "free(a + 512), inside a live block", "only a block's start address"),
        (lambda: allocator.free(BASE - 4096), "free of an address never returned", "unknown addresses are refused"),
        (lambda: allocator.malloc(0), "malloc(0)", "a request must be at least 1 byte"),
        (lambda: allocator.malloc(-1), "malloc(-1)", "a request must be at least 1 byte"),
    ]:
        expect_value_error(call, label, hint)
        expect(
            (allocator.stats(), allocator.snapshot()) == before,
            "a refused call changed the allocator",
            input=label,
            expected="the same stats and blocks as before the call",
            got=str(allocator.stats()),
            hint="validate before changing anything",
        )
    expect_refused(lambda: allocator.malloc(1.5), "malloc(1.5)", "sizes are ints", errors=(TypeError,))
    check_invariants(allocator, live, "after the refused calls")
    allocator.free(a)
    del live[a]
    check_invariants(allocator, live, "free(a) after the refused calls")
