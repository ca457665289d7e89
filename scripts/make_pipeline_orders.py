"""Write 02_PyTorch_Algorithms/data/pipeline_torch_orders.json, the reference schedules of p02.pipeline_parallel.

Runs `torch.distributed.pipelining`'s `ScheduleGPipe` and `Schedule1F1B` for real, in gloo worlds of 2, 3 and 4
processes (`llm_algo.distributed.run_ranks`), and records, per stage, the order in which each schedule calls its
stage's forward and backward on each micro-batch. The lesson's check compares the learner's schedules with this
file: importing `torch.distributed.pipelining` in every rank costs several seconds, too much to pay at each grading.

    python scripts/make_pipeline_orders.py          # rewrites the file; the committed copy must not change
"""

from __future__ import annotations

import json
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "02_PyTorch_Algorithms" / "data" / "pipeline_torch_orders.json"
STAGES = (2, 3, 4)


def configs(p: int) -> list[tuple[str, int]]:
    """GPipe from one micro-batch up; Schedule1F1B refuses m < p."""
    return [("gpipe", m) for m in (1, 2, p + 1)] + [("1f1b", m) for m in (p, p + 1, 2 * p + 1)]


def orders_in_rank(wanted):
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    rank, p = dist.get_rank(), dist.get_world_size()
    orders = []
    for kind, m in wanted:
        stage = PipelineStage(nn.Linear(4, 4), rank, p, torch.device("cpu"))
        order = []
        forward, backward = stage.forward_one_chunk, stage.backward_one_chunk

        def recorded_forward(i, *args, _forward=forward, _order=order, **kwargs):
            _order.append(["F", i])
            return _forward(i, *args, **kwargs)

        def recorded_backward(i, *args, _backward=backward, _order=order, **kwargs):
            _order.append(["B", i])
            return _backward(i, *args, **kwargs)

        stage.forward_one_chunk, stage.backward_one_chunk = recorded_forward, recorded_backward
        schedule = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[kind](stage, m, loss_fn=F.mse_loss)
        x, target = torch.randn(m, 4), torch.randn(m, 4)
        if rank == 0:
            schedule.step(x)
        elif rank == p - 1:
            schedule.step(target=target)
        else:
            schedule.step()
        orders.append(order)
    return orders


def main() -> None:
    import torch

    from llm_algo.distributed import close_worlds, expect_ranks_ok, run_ranks

    records = []
    try:
        for p in STAGES:
            wanted = configs(p)
            per_rank = expect_ranks_ok(run_ranks(orders_in_rank, p, args=(wanted,), deadline=120), input=f"{p} ranks")
            for k, (kind, m) in enumerate(wanted):
                records.append({"kind": kind, "stages": p, "microbatches": m, "orders": [o[k] for o in per_rank]})
    finally:
        close_worlds()
    document = {"torch": torch.__version__.split("+")[0], "schedules": records}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(document, separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"wrote {OUT} ({len(records)} schedules)")


if __name__ == "__main__":
    main()
