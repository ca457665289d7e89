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
        mistake_zh="价格乘以利用率（把空闲时间当成免费）",
    ),
    Mutant(
        "cost_per_million_tokens",
        "one_gpu_price",
        "charges one GPU whatever the deployment size",
        [("dollars_per_hour = num_gpus * gpu_hour_price", "dollars_per_hour = gpu_hour_price")],
        mistake_zh="不管部署多大都只按一张 GPU 收费",
    ),
    Mutant(
        "cost_per_million_tokens",
        "per_thousand",
        "dollars per thousand tokens",
        [("return dollars_per_hour / tokens_per_hour * 1e6", "return dollars_per_hour / tokens_per_hour * 1e3")],
        mistake_zh="算成每千 token 的美元数",
    ),
    Mutant(
        "training_cost",
        "forward_only",
        "2ND: counts the forward pass only",
        [("flops = 6 * params * tokens", "flops = 2 * params * tokens")],
        mistake_zh="2ND：只算了前向",
    ),
    Mutant(
        "training_cost",
        "peak_flops",
        "assumes the GPU runs at its peak (no MFU)",
        [("gpu_hours = flops / (peak_flops * mfu) / 3600", "gpu_hours = flops / peak_flops / 3600")],
        mistake_zh="假设 GPU 以峰值运行（没有 MFU）",
    ),
    Mutant(
        "training_cost",
        "days_on_one_gpu",
        "days without dividing by the number of GPUs",
        [("gpu_hours / num_gpus / 24", "gpu_hours / 24")],
        mistake_zh="天数没有除以 GPU 数量",
    ),
    Mutant(
        "training_cost",
        "dollars_from_wall_clock",
        "bills wall-clock hours instead of GPU-hours",
        [("gpu_hours * gpu_hour_price", "gpu_hours / num_gpus * gpu_hour_price")],
        mistake_zh="按墙钟小时而不是 GPU 小时计费",
    ),
]
