"""Collectives under their torch 2.13 names on every torch the course supports (2.11 and 2.12 call them
`all_gather_into_tensor` and `reduce_scatter_tensor`): for checks and lessons that run in the ranks."""

from __future__ import annotations

import torch.distributed as dist


def all_gather_single(output, input, group=None, async_op=False):
    return (getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor)(
        output, input, group=group, async_op=async_op
    )


def reduce_scatter_single(output, input, op=dist.ReduceOp.SUM, group=None, async_op=False):
    return (getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor)(
        output, input, op=op, group=group, async_op=async_op
    )
