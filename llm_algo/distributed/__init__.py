"""Real `torch.distributed` worlds for the checks of the parallelism lessons (see `world`), the rank side, and
sub-groups with a bystander (see `subgroup`)."""

from .subgroup import run_subgroup
from .world import (
    RankResult,
    World,
    WorldStartError,
    attempted,
    close_worlds,
    expect_ranks_ok,
    expect_ranks_refuse,
    run_ranks,
    world,
)

__all__ = [
    "RankResult",
    "World",
    "WorldStartError",
    "attempted",
    "close_worlds",
    "expect_ranks_ok",
    "expect_ranks_refuse",
    "run_ranks",
    "run_subgroup",
    "world",
]
