"""Realistic wrong versions of the p00.tensor_basics solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "move_batch",
        "casts_every_tensor",
        "casts ids and masks to the model dtype too (token 128001 becomes 128000 in bfloat16)",
        [("moved[name] = value.to(device=device)  ", "moved[name] = value.to(device=device, dtype=dtype)  ")],
    ),
    Mutant(
        "move_batch",
        "integers_left_behind",
        "moves only the floating tensors to the device",
        [("moved[name] = value.to(device=device)  ", "moved[name] = value  ")],
    ),
    Mutant(
        "move_batch",
        "modifies_caller_dict",
        "assigns into the caller's dict and returns it",
        [("    moved = {}\n", "    moved = batch\n")],
    ),
    Mutant(
        "masks",
        "no_cache_offset",
        "forgets the offset S - T: a decoding query sees only key 0",
        [("return keys <= queries + offset ", "return keys <= queries ")],
    ),
    Mutant(
        "masks",
        "strict_inequality",
        "uses < instead of <=: a token cannot attend to itself",
        [("return keys <= queries + offset ", "return keys < queries + offset ")],
    ),
    Mutant(
        "masks",
        "minus_inf_bias",
        "fills the masked places with -inf",
        [("torch.finfo(dtype).min)", 'float("-inf"))')],
    ),
    Mutant(
        "masks",
        "float32_minimum_everywhere",
        "uses float32's minimum for every dtype (it overflows to -inf in float16)",
        [("torch.finfo(dtype).min)", "torch.finfo(torch.float32).min)")],
    ),
    Mutant(
        "masks",
        "calls_tril",
        "builds the mask with torch.tril (the reference)",
        [
            (
                "return keys <= queries + offset ",
                "return torch.ones(num_queries, num_keys, dtype=torch.bool, device=device).tril(offset) ",
            )
        ],
    ),
    Mutant(
        "masked_reductions",
        "divides_by_length",
        "divides the masked sum by the length of the axis instead of the count of real entries",
        [("count = weights.sum(dim=dim, keepdim=keepdim).clamp(min=1)", "count = x.shape[dim]")],
    ),
    Mutant(
        "masked_reductions",
        "no_clamp",
        "divides by the count without clamping: a row with no real entry gives NaN",
        [
            (
                "count = weights.sum(dim=dim, keepdim=keepdim).clamp(min=1)",
                "count = weights.sum(dim=dim, keepdim=keepdim)",
            )
        ],
    ),
    Mutant(
        "masked_reductions",
        "half_precision_sum",
        "sums in the input dtype (no float32 compute)",
        [("compute = torch.promote_types(x.dtype, torch.float32)", "compute = x.dtype")],
    ),
    Mutant(
        "masked_reductions",
        "argmax_over_time",
        "takes the argmax over the time axis instead of the vocabulary",
        [("predictions = logits.argmax(dim=-1)", "predictions = logits.argmax(dim=-2)")],
    ),
    Mutant(
        "masked_reductions",
        "ignored_in_denominator",
        "divides by all positions, ignored ones included",
        [("/ keep.sum().to(torch.float32)", "/ float(targets.numel())")],
    ),
]
