"""What a rank's own point-to-point code sent and received, for checks of collectives built from send and recv.

    with Traffic() as traffic:           # in a rank, around the learner's call
        learner(tensor, group=group)
    return traffic.events                # [(kind, global peer, bytes), ...]

and in the grader, `expect_balanced({rank: events}, size, ...)` fails the check (and stops the world) when a
message was sent that nobody received, or received with another size: the next check's `recv` would read it.
"""

from __future__ import annotations

import torch.distributed as dist

from ..check.failure import CheckFailed
from .world import world


class Traffic:
    """In one rank, for one call: wrap dist's point-to-point functions and log (kind, global peer, bytes).
    Both `dist` and `distributed_c10d` get the wrappers: `P2POp` (for `batch_isend_irecv`) compares its op with
    distributed_c10d's `isend`/`irecv`."""

    def __enter__(self):
        import torch.distributed.distributed_c10d as c10d

        self.events, self._saved, self._depth = [], [], [0]
        for name, peer_arg, group_arg in (
            ("send", "dst", "group_dst"),
            ("isend", "dst", "group_dst"),
            ("recv", "src", "group_src"),
            ("irecv", "src", "group_src"),
        ):
            wrapper = self._wrap(name, getattr(c10d, name), peer_arg, group_arg)
            for module in (dist, c10d):
                self._saved.append((module, name, getattr(module, name)))
                setattr(module, name, wrapper)
        return self

    def __exit__(self, *exc):
        for module, name, original in reversed(self._saved):
            setattr(module, name, original)

    def _wrap(self, name, original, peer_arg, group_arg):
        events, depth = self.events, self._depth
        kind = "send" if "send" in name else "recv"

        def wrapper(tensor, *args, **kwargs):
            if depth[0] == 0:  # torch's recv calls irecv(...).wait(): count the outermost call only
                bound = dict(zip((peer_arg, "group", "tag", group_arg), args, strict=False)) | kwargs
                peer, group, group_peer = bound.get(peer_arg), bound.get("group"), bound.get(group_arg)
                if peer is None and group_peer is not None:
                    peer = group_peer if group is None else dist.get_global_rank(group, group_peer)
                events.append((kind, -1 if peer is None else int(peer), tensor.numel() * tensor.element_size()))
            depth[0] += 1
            try:
                return original(tensor, *args, **kwargs)
            finally:
                depth[0] -= 1

        return wrapper


def make_group(ranks):
    """In a rank: every rank must call new_group; (the group, or None for the world, and whether this rank is in it)."""
    if ranks is None:
        return None, True
    return dist.new_group(ranks), dist.get_rank() in ranks


def expect_balanced(logs: dict, size: int, *, input: str, hint: str = "") -> None:
    """Every message sent was received, with the same size; else stop the world of `size` ranks (a message nobody
    received would be read by the next check's recv) and fail."""
    sent, received = {}, {}
    for rank, events in logs.items():
        for kind, peer, nbytes in events:
            key = (rank, peer) if kind == "send" else (peer, rank)
            (sent if kind == "send" else received).setdefault(key, []).append(nbytes)
    if sent != received:
        world(size).kill()
        pair = next(k for k in sorted(set(sent) | set(received)) if sent.get(k) != received.get(k))
        raise CheckFailed(
            "the messages sent and received do not match",
            input=input,
            expected=f"every send matched by a recv of the same size: rank {pair[0]} -> rank {pair[1]}",
            got=f"sent {sent.get(pair, [])} bytes, received {received.get(pair, [])} bytes",
            hint=hint,
        )
