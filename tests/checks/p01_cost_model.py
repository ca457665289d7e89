"""Checks for p01.cost_model. References: a day of serving simulated hour by hour (tokens and dollars added up), a
training run simulated step by step on each GPU, closed forms written out here, and published training budgets:
Llama 3.1 405B's 30.84M H100 GPU-hours (Meta's Llama 3.1 model card) and DeepSeek-V3's 2.664M H800 GPU-hours of
pre-training (arXiv:2412.19437, Table 1)."""

import random

import torch

from llm_algo.check import Checks, expect, expect_close, expect_value_error

checks = Checks("p01.cost_model")


def float64(value) -> torch.Tensor:
    return torch.tensor(float(value), dtype=torch.float64)


# ------------------------------------------------------------------------------------------ cost_per_million_tokens


def serve_for_a_day(tokens_per_second: float, price: float, gpus: int, utilization: float) -> float:
    """Dollars per million tokens, by adding up 24 hours of bills and of tokens produced while busy."""
    dollars, tokens = 0.0, 0.0
    for _ in range(24):
        dollars += gpus * price  # the GPUs are rented whether busy or idle
        tokens += tokens_per_second * 3600 * utilization
    return dollars / (tokens / 1_000_000)


HINT_SERVE = "$/M tokens = num_gpus * price / (3600 * tokens_per_second * utilization) * 1e6"


@checks("cost_per_million_tokens")
def matches_a_day_of_serving(ex):
    """random deployments (1 to 64 GPUs, 10 to 50k tokens/s, 5% to 100% busy): equal to a day of bills and tokens"""
    rng = random.Random(torch.initial_seed())
    for _ in range(12):
        rate, price = rng.uniform(10, 50_000), rng.uniform(0.5, 12)
        gpus, utilization = rng.choice([1, 2, 8, 64]), rng.choice([1.0, 0.8, 0.5, 0.05])
        got = ex.cost_per_million_tokens(rate, price, gpus, utilization)
        expect_close(
            float64(got),
            float64(serve_for_a_day(rate, price, gpus, utilization)),
            input=f"tokens_per_second={rate:.1f}, price={price:.2f}, num_gpus={gpus}, utilization={utilization}",
            what="$ per million tokens",
            hint=HINT_SERVE,
        )


@checks("cost_per_million_tokens")
def hand_checkable_cases(ex):
    """1000 tokens/s at $3.6/h: $1 per million; the lesson's H100 example $0.52; defaults are 1 GPU, fully busy"""
    cases = [
        ((1000.0, 3.6), {}, 1.0),
        ((1000.0, 3.6), {"num_gpus": 8}, 8.0),
        ((1000.0, 3.6), {"utilization": 0.25}, 4.0),
        ((2126.0, 2.0), {"num_gpus": 1, "utilization": 0.5}, 2.0 / (3600 * 2126 * 0.5) * 1e6),
        ((1e6, 0.0), {}, 0.0),
    ]
    for args, kwargs, want in cases:
        got = ex.cost_per_million_tokens(*args, **kwargs)
        expect_close(
            float64(got),
            float64(want),
            input=f"cost_per_million_tokens{args}, {kwargs}",
            what="$ per million tokens",
            hint=HINT_SERVE + " (idle time is paid for: divide by utilization)",
        )


@checks("cost_per_million_tokens")
def refuses_bad_deployments(ex):
    """zero or negative throughput, a negative price, no GPUs, utilization 0 or above 1: ValueError"""
    for args in ((0.5, 0.5, 1, 1.0), (100.0, 0.0, 1, 0.01)):  # the smallest valid values are accepted
        expect_close(
            float64(ex.cost_per_million_tokens(*args)),
            float64(serve_for_a_day(*args)),
            input=f"cost_per_million_tokens{args}",
            what="$ per million tokens",
            hint="refuse only tokens_per_second <= 0, price < 0, num_gpus < 1, utilization outside (0, 1]",
        )
    for args in (
        (0.0, 2.0, 1, 1.0),
        (-5.0, 2.0, 1, 1.0),
        (100.0, -1.0, 1, 1.0),
        (100.0, 2.0, 0, 1.0),
        (100.0, 2.0, 1, 0.0),
        (100.0, 2.0, 1, 1.5),
    ):
        expect_value_error(
            lambda args=args: ex.cost_per_million_tokens(*args), f"cost_per_million_tokens{args}", "validate"
        )


# ------------------------------------------------------------------------------------------ training_cost


def simulate_run(params: float, tokens: float, peak: float, mfu: float, gpus: int, price: float, steps: int = 1000):
    """A run of `steps` equal steps: each step's FLOPs (forward 2, backward 4 per parameter and token) are split over
    the GPUs, each running at peak * mfu; wall time and GPU time are added up step by step."""
    per_step_tokens = tokens / steps
    wall_seconds = 0.0
    for _ in range(steps):
        forward = 2 * params * per_step_tokens
        backward = 2 * forward
        wall_seconds += (forward + backward) / gpus / (peak * mfu)
    gpu_hours = wall_seconds * gpus / 3600
    return gpu_hours, wall_seconds / 86400, gpu_hours * price


HINT_TRAIN = "FLOPs = 6 * params * tokens; GPU-hours = FLOPs / (peak * mfu) / 3600; days = GPU-hours / num_gpus / 24"


def expect_triple(got, want, label: str) -> None:
    expect(
        isinstance(got, tuple) and len(got) == 3,
        "expected (gpu_hours, days, dollars)",
        input=label,
        expected="a tuple of three",
        got=repr(got)[:120],
        hint="return gpu_hours, days, dollars",
    )
    for name, value, reference in zip(("GPU-hours", "days", "dollars"), got, want, strict=True):
        expect_close(float64(value), float64(reference), input=label, what=name, hint=HINT_TRAIN)


@checks("training_cost")
def matches_a_simulated_run(ex):
    """random runs (1B to 1T parameters, 8 to 16k GPUs, MFU 20% to 60%): equal to adding up 1000 steps"""
    rng = random.Random(torch.initial_seed())
    for _ in range(8):
        params, tokens = 10 ** rng.uniform(9, 12), 10 ** rng.uniform(10, 13.3)
        peak, mfu = rng.choice([312e12, 989e12, 1979e12]), rng.choice([0.2, 0.38, 0.45, 0.6])
        gpus, price = rng.choice([8, 512, 2048, 16384]), rng.uniform(1, 4)
        expect_triple(
            ex.training_cost(params, tokens, peak, mfu, gpus, price),
            simulate_run(params, tokens, peak, mfu, gpus, price),
            f"params={params:.3g}, tokens={tokens:.3g}, peak={peak:.3g}, mfu={mfu}, num_gpus={gpus}, price={price:.2f}",
        )


@checks("training_cost")
def published_budgets(ex):
    """Llama 3.1 405B at 40% MFU: 26.6M GPU-hours, within 20% of the 30.84M reported; DeepSeek-V3: 35% MFU matches"""
    hours, days, dollars = ex.training_cost(405e9, 15.6e12, 989e12, 0.40, 16384, 2.0)
    expect_close(
        float64(hours),
        float64(6 * 405e9 * 15.6e12 / (989e12 * 0.40 * 3600)),
        input="Llama 3.1 405B: 405e9 params, 15.6e12 tokens, H100 989e12 FLOP/s, MFU 0.40, 16384 GPUs",
        what="GPU-hours",
        hint=HINT_TRAIN,
    )
    expect(
        0.8 * 30.84e6 <= hours <= 1.2 * 30.84e6,
        "the estimate is not within 20% of the GPU-hours Meta reported",
        input="Llama 3.1 405B (model card: 30.84M H100 GPU-hours)",
        expected="24.7M to 37.0M",
        got=f"{hours / 1e6:.2f}M",
        hint=HINT_TRAIN,
    )
    hours, days, dollars = ex.training_cost(37e9, 14.8e12, 989e12, 0.3464, 2048, 2.0)
    expect(
        abs(hours - 2.664e6) <= 0.01 * 2.664e6 and abs(days - 2.664e6 / 2048 / 24) <= 0.6,
        "DeepSeek-V3 pre-training at the implied MFU does not reproduce the reported budget",
        input="37e9 active params, 14.8e12 tokens, 989e12 FLOP/s, MFU 0.3464, 2048 GPUs (reported 2.664M GPU-hours)",
        expected="2.664M GPU-hours, 54.2 days",
        got=f"{hours / 1e6:.3f}M GPU-hours, {days:.1f} days",
        hint=HINT_TRAIN + " (an MoE counts its active parameters)",
    )


@checks("training_cost")
def scaling_properties(ex):
    """twice the GPUs halve the days but not the GPU-hours or dollars; dollars are GPU-hours times the price"""
    base = ex.training_cost(7e9, 2e12, 989e12, 0.4, 1024, 2.5)
    wide = ex.training_cost(7e9, 2e12, 989e12, 0.4, 2048, 2.5)
    for index, name, factor in ((0, "GPU-hours", 1.0), (1, "days", 0.5), (2, "dollars", 1.0)):
        expect_close(
            float64(wide[index]),
            float64(base[index] * factor),
            input="7e9 params, 2e12 tokens, MFU 0.4, 1024 then 2048 GPUs",
            what=name,
            hint="more GPUs shorten the run; they do not change the total GPU-hours",
        )
    expect_close(
        float64(base[2]),
        float64(base[0] * 2.5),
        input="price 2.5 $/GPU-hour",
        what="dollars",
        hint="the bill is GPU-hours times the price per GPU-hour",
    )


@checks("training_cost")
def refuses_bad_runs(ex):
    """non-positive sizes or peak, MFU 0 or above 1, no GPUs, a negative price: ValueError; MFU 1, 1 GPU, free GPUs are valid"""
    for args in ((0.5, 0.5, 0.5, 1.0, 1, 0.0), (1e9, 1e10, 1e14, 0.5, 1, 0.5)):  # the smallest valid values
        expect_triple(ex.training_cost(*args), simulate_run(*args), f"training_cost{args} (valid)")
    bad = [
        (0, 1e10, 1e14, 0.5, 8, 2.0),
        (1e9, 0, 1e14, 0.5, 8, 2.0),
        (1e9, 1e10, 0, 0.5, 8, 2.0),
        (1e9, 1e10, 1e14, 0.0, 8, 2.0),
        (1e9, 1e10, 1e14, 1.2, 8, 2.0),
        (1e9, 1e10, 1e14, 0.5, 0, 2.0),
        (1e9, 1e10, 1e14, 0.5, 8, -1.0),
    ]
    for args in bad:
        expect_value_error(lambda args=args: ex.training_cost(*args), f"training_cost{args}", "validate")
