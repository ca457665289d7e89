"""Realistic wrong versions of the p01.cost_model solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "cost_per_million_tokens",
        "utilization_discounts_price",
        "multiplies the price by the utilization (idle time treated as free)",
        [
            (
                "tokens_per_hour = 3600 * tokens_per_second * utilization",
                "tokens_per_hour = 3600 * tokens_per_second / utilization",
            )
        ],
    ),
    Mutant(
        "cost_per_million_tokens",
        "one_gpu_price",
        "charges one GPU whatever the deployment size",
        [("dollars_per_hour = num_gpus * gpu_hour_price", "dollars_per_hour = gpu_hour_price")],
    ),
    Mutant(
        "cost_per_million_tokens",
        "per_thousand",
        "dollars per thousand tokens",
        [("return dollars_per_hour / tokens_per_hour * 1e6", "return dollars_per_hour / tokens_per_hour * 1e3")],
    ),
    Mutant(
        "training_cost",
        "forward_only",
        "2ND: counts the forward pass only",
        [("flops = 6 * params * tokens", "flops = 2 * params * tokens")],
    ),
    Mutant(
        "training_cost",
        "peak_flops",
        "assumes the GPU runs at its peak (no MFU)",
        [("gpu_hours = flops / (peak_flops * mfu) / 3600", "gpu_hours = flops / peak_flops / 3600")],
    ),
    Mutant(
        "training_cost",
        "days_on_one_gpu",
        "days without dividing by the number of GPUs",
        [("gpu_hours / num_gpus / 24", "gpu_hours / 24")],
    ),
    Mutant(
        "training_cost",
        "dollars_from_wall_clock",
        "bills wall-clock hours instead of GPU-hours",
        [("gpu_hours * gpu_hour_price", "gpu_hours / num_gpus * gpu_hour_price")],
    ),
]
