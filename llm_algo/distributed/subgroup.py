"""The learner's distributed code on a sub-group of a larger world, with bystander ranks that must receive nothing.

    def train(ddp_class, batches, group=None):    # runs in the members only; `group` is the sub-group
        rank, size = dist.get_rank(group), dist.get_world_size(group)
        ...
    results = run_subgroup(train, args=(ex.DDP, batches), input=label, hint=hint)  # world 3, members [1, 2]
    values = expect_ranks_ok(results, input=label, hint=hint)                        # members, group-rank order

Code that ignores `group` works on a world of its own and breaks here: group rank 0 is global rank 1, the world
has 3 ranks where the group has 2, and a collective on the default group waits for the bystander (rank 0), which
never joins one. Every rank creates the group (`dist.new_group`, cached per rank process); the members run
`fn(*args, *member_args[group rank], group=group, **kwargs)` with their point-to-point calls logged (`Traffic`),
then meet in one all-reduce on the group, and group rank 0 sends each bystander a sentinel carrying a random key
(a member whose `fn` raised waits for that meeting for 2 s at most, then re-raises: when every member refused the
input, the world survives the check).
Meanwhile each bystander listens with an any-source `irecv` until the sentinel comes: anything else it receives
is the learner's message to a rank outside the group. `run_subgroup` fails the check, in the learner's terms, when

- a bystander received a message (or a member sent one to a non-member): "rank 0 (a bystander, not in the group
  [1, 2]) received a message from rank 1: ...";
- the members hung while the bystanders heard nothing: a collective on the default group (no `group=`) waits for
  the bystander;
- a bystander died (a message larger than its 64 MiB buffer ends it).

Otherwise it returns the members' `RankResult`s in group-rank order (`rank` is the group rank), for
`expect_ranks_ok` / `expect_ranks_refuse`. The world is the lesson's shared world of `size` ranks (started once per
grading process, size and preload); whenever a bystander's `irecv` may still be posted, the world is stopped so
that no later check's message lands in it.
"""

from __future__ import annotations

import datetime
import secrets
import time
from collections.abc import Sequence
from dataclasses import replace

from ..check.failure import CheckFailed
from .world import DEADLINE_S, RankResult, _last_frames, run_ranks, world

SIZE = 3  # the smallest world with a bystander and a group of 2 whose ranks differ from the global ones
MEMBERS = (1, 2)
ERROR_MEET_S = 2.0  # after a member raised: how long it waits for the others before leaving the world to be stopped
LISTEN_BYTES = 2**26  # a bystander's receive buffer (virtual memory only until a message lands in it)
GROUP_HINT = (
    "use the group everywhere: dist.get_rank(group) and dist.get_world_size(group), pass group= to every "
    "collective, and address peers by group rank (group_dst= / group_src=, or dist.get_global_rank(group, r))"
)
_GROUPS: dict[tuple[int, ...], object] = {}  # in a rank process: the sub-groups created so far


def _group(members: tuple[int, ...]):
    """In a rank: the sub-group of these global ranks, created once per process (every rank calls this alike)."""
    import torch.distributed as dist

    if members not in _GROUPS:
        _GROUPS[members] = dist.new_group(list(members))
    return _GROUPS[members]


COLLECTIVES = (
    "all_reduce",
    "all_reduce_coalesced",
    "broadcast",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_single",
    "all_gather_object",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "reduce_scatter_single",
    "all_to_all",
    "all_to_all_single",
    "reduce",
    "gather",
    "gather_object",
    "scatter",
    "scatter_object_list",
    "broadcast_object_list",
    "barrier",
    "monitored_barrier",
)


class DefaultGroupCollective(RuntimeError):
    """Raised in a member for a collective on the default group: the bystanders never join one, so it would hang."""


class DefaultGroupGuard:
    """In a member, while `fn` runs: a collective called through `dist.<name>` without a group (or with the world's)
    raises DefaultGroupCollective at once, where it would otherwise wait for the bystanders until the deadline. A
    function bound before the task started (`from torch.distributed import all_reduce`) is not seen: that one hangs,
    and run_subgroup reports the hang."""

    def __enter__(self):
        import inspect

        import torch.distributed as dist
        import torch.distributed.distributed_c10d as c10d

        self._saved = []
        for name in COLLECTIVES:
            original = getattr(c10d, name, None) or getattr(dist, name, None)
            if original is None:
                continue
            signature = inspect.signature(original)
            guarded = self._guard(name, original, signature)
            for module in (dist, c10d):
                if getattr(module, name, None) is original:
                    self._saved.append((module, name, original))
                    setattr(module, name, guarded)
        return self

    def __exit__(self, *exc):
        for module, name, original in reversed(self._saved):
            setattr(module, name, original)

    @staticmethod
    def _guard(name, original, signature):
        import functools

        import torch.distributed as dist

        @functools.wraps(original)
        def guarded(*args, **kwargs):
            try:
                group = signature.bind_partial(*args, **kwargs).arguments.get("group")
            except TypeError:  # a bad call: the original says what is wrong with it
                return original(*args, **kwargs)
            if group is None or group is dist.GroupMember.WORLD:
                raise DefaultGroupCollective(
                    f"dist.{name} on the default group (no group=): the world has ranks outside the group, which "
                    "never join it, so it would wait for them forever"
                )
            return original(*args, **kwargs)

        return guarded


def _rank_task(fn, members, key, listen_s, args, kwargs, member_args):
    """In every rank of the world: a member runs `fn` on the group; a bystander listens until the sentinel."""
    import torch
    import torch.distributed as dist

    from .traffic import Traffic

    group, me = _group(members), dist.get_rank()
    bystanders = [r for r in range(dist.get_world_size()) if r not in members]
    if me not in members:
        received, sentinel = [], False
        end = time.monotonic() + listen_s
        while time.monotonic() < end:
            buffer = torch.empty(LISTEN_BYTES, dtype=torch.uint8)
            work = dist.irecv(buffer)  # any source; a collective does not match it, a send/isend does
            try:
                work.wait(datetime.timedelta(seconds=max(end - time.monotonic(), 0.01)))
            except RuntimeError:  # timed out: the members never finished (the world is stopped afterwards)
                break
            source = work._source_rank()
            head = buffer[:16].view(torch.int64).tolist()
            if source == members[0] and head[0] == key:
                sentinel = True
                break
            received.append(source)
        return ("bystander", received, sentinel)
    extra = tuple(member_args[members.index(me)]) if member_args is not None else ()
    with Traffic() as traffic, DefaultGroupGuard():
        try:
            value = fn(*args, *extra, group=group, **kwargs)
        except BaseException:
            # still meet, briefly: when every member raised (a refusal, a shape the collective rejects) the sentinels
            # end the bystanders' irecv and the world is kept for the next check instead of restarted
            _meet(group, members, bystanders, key, [], ERROR_MEET_S)
            raise
    outside = [peer for kind, peer, _ in traffic.events if kind == "send" and peer not in members and peer != -1]
    _meet(group, members, bystanders, key, outside, None)
    return ("member", value, outside)


def _meet(group, members, bystanders, key, outside, wait_s) -> None:
    """In a member: every member is done (one all-reduce on the group), then group rank 0 sends the sentinels. With
    `wait_s`, best effort: give up quietly (and send nothing) when the others do not come in time."""
    import torch
    import torch.distributed as dist

    work = dist.all_reduce(torch.zeros(1), group=group, async_op=True)
    try:
        work.wait() if wait_s is None else work.wait(datetime.timedelta(seconds=wait_s))
    except RuntimeError:
        if wait_s is None:
            raise
        return
    if dist.get_rank() == members[0]:
        for bystander in bystanders:
            dist.send(torch.tensor([key, len(outside)], dtype=torch.int64), dst=bystander)


def run_subgroup(
    fn,
    *,
    input: str,
    hint: str = "",
    size: int = SIZE,
    members: Sequence[int] = MEMBERS,
    args: tuple = (),
    kwargs: dict | None = None,
    member_args: Sequence[tuple] | None = None,
    forbid: Sequence[str] = (),
    instead: str = "",
    deadline: float = DEADLINE_S,
    device: str = "cpu",
    preload: tuple[str, ...] = (),
) -> list[RankResult]:
    """Call `fn(*args, *member_args[group rank], group=group, **kwargs)` in the members of a sub-group of the world of
    `size` ranks, the other ranks standing by; the members' RankResults in group-rank order (`rank` = group rank).
    Fails the check (CheckFailed) when a bystander received anything or the members hung on it (see the module)."""
    members = tuple(int(m) for m in members)
    if len(set(members)) != len(members) or not members or not all(0 <= m < size for m in members):
        raise ValueError(f"members {list(members)} must be distinct ranks of a world of {size}")
    if len(members) == size:
        raise ValueError("a sub-group with a bystander needs fewer members than the world has ranks")
    if member_args is not None and len(member_args) != len(members):
        raise ValueError(f"member_args has {len(member_args)} entries for {len(members)} members")
    key = secrets.randbits(62)
    listen_s = max(deadline - 1.0, 0.5)
    results = run_ranks(
        _rank_task,
        size,
        device=device,
        preload=preload,
        args=(fn, members, key, listen_s, tuple(args), dict(kwargs or {}), member_args),
        forbid=forbid,
        instead=instead,
        deadline=deadline,
    )
    where = f"{input}; world of {size}, sub-group {list(members)}"
    hint = f"{hint}; {GROUP_HINT}" if hint else GROUP_HINT
    bystanders = [r for r in results if r.rank not in members]
    clean = all(r.ok and r.value[2] for r in bystanders)
    try:
        _expect_nothing_received(results, members, where, hint)
    finally:
        if not clean:  # an irecv may still be posted, or a message wait in a bystander's queue
            world(size, device, preload).kill()
    out = []
    for group_rank, global_rank in enumerate(members):
        result = results[global_rank]
        value = result.value[1] if result.ok else None
        out.append(replace(result, rank=group_rank, value=value))
    return out


def _expect_nothing_received(results: list[RankResult], members: tuple[int, ...], where: str, hint: str) -> None:
    group = list(members)
    for result in results:
        if result.rank in members:
            continue
        name = f"rank {result.rank} (a bystander, not in the group {group})"
        if result.status == "died":
            raise CheckFailed(
                f"{name} died while standing by: it was sent a message (one larger than its buffer ends it)",
                input=where,
                expected=f"{name} receives nothing",
                got=result.describe(),
                hint=hint,
            )
        if result.ok and result.value[1]:
            sources = sorted(set(result.value[1]))
            raise CheckFailed(
                f"{name} received a message from rank {', '.join(map(str, sources))}",
                input=where,
                expected=f"{name} receives nothing: every message stays inside the group",
                got=f"{len(result.value[1])} message(s) from global rank(s) {sources}",
                hint="a send addressed by global rank, or a peer computed from dist.get_rank() / "
                "dist.get_world_size() without the group, reaches ranks outside it; " + hint,
            )
    for result in results:
        if result.rank in members and result.ok and result.value[2]:
            peers = sorted(set(result.value[2]))
            raise CheckFailed(
                f"rank {result.rank} (in the group {group}) sent a message to rank "
                f"{', '.join(map(str, peers))}, outside the group",
                input=where,
                expected="every send goes to a member of the group",
                got=f"sends to global rank(s) {peers}",
                hint=hint,
            )
    member_results = [r for r in results if r.rank in members]
    default = [r for r in member_results if r.error_type == DefaultGroupCollective.__name__]
    if default:
        raise CheckFailed(
            f"rank {default[0].rank} called a collective on the default group: {default[0].message}",
            input=where,
            expected=f"every collective on the group {group}: rank 0 and the other bystanders never join one",
            got=_last_frames(default[0].traceback) or default[0].describe(),
            hint="pass group= to every collective (all_reduce, broadcast, all_gather, reduce_scatter, barrier, ...); "
            + hint,
        )
    idle = all(r.ok and not r.value[1] and not r.value[2] for r in results if r.rank not in members)
    if idle and not all(r.ok for r in member_results) and all(map(_stuck, member_results)):
        raise CheckFailed(
            "the members hung while the bystanders received nothing: a collective on the default group waits for "
            "the bystander, which never joins one",
            input=where,
            expected=f"the members {group} finish, communicating on the group only",
            got="; ".join(r.describe() for r in member_results if not r.ok),
            hint="pass group= to every collective (all_reduce, broadcast, all_gather, reduce_scatter, barrier, ...); "
            + hint,
        )


def _stuck(result: RankResult) -> bool:
    """Finished, or stopped waiting for a peer: hung, or an error of the transport (when a bystander stops
    listening, gloo closes its connections, and a member blocked in a collective with it gets "Connection closed")."""
    if result.status in ("ok", "hung"):
        return True
    text = result.message.lower()
    return result.status == "error" and any(s in text for s in ("connection closed", "timed out", "gloo"))
